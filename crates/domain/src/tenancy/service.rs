//! [`AuthService`]: credentials issued, authenticated and revoked, and the environments and
//! keys an operator creates.

use crate::id::{EnvironmentId, KeyId};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use chrono::Duration;

use crate::id::{new_id, IdKind};
use crate::secret::{self, SecretHash, ACCESS_TOKEN_PREFIX, KEY_SECRET_PREFIX};
use crate::{
    Clock, ConflictKind, DomainError, FieldError, Page, PageRequest, Resource, StorageError,
    Timestamp,
};

use super::*;

/// How long an authenticated caller is reused without reading its key again (in this process;
/// a revocation through this process clears them at once).
const PRINCIPAL_TTL_MS: i64 = 1_000;
/// What an unknown client's secret is compared with: the hash of a text no key secret has (a
/// key secret starts with `wbs_`).
static UNKNOWN_CLIENT: std::sync::LazyLock<SecretHash> =
    std::sync::LazyLock::new(|| SecretHash::of("no key has this secret"));
/// Callers remembered at most; past it the memory starts afresh.
const PRINCIPAL_CACHE_MAX: usize = 10_000;

/// Authentication, the token exchange, the Credentials API and the admin operations.
///
/// Share one per process: it remembers each authenticated caller for a second, and a
/// revocation through it forgets them all at once (docs/operations.md, Admin commands).
///
/// A trusted in-process caller issues a legacy key for one environment, whose secret then
/// authenticates requests to that environment:
///
/// ```
/// use std::sync::{Arc, Mutex};
///
/// use workbench_domain::mocks::{MockClock, MockTenancyRepository};
/// use workbench_domain::{ApiKey, AuthService, DomainError, Permission, Principal, Role};
///
/// # let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
/// # rt.block_on(async {
/// // A repository that keeps the one key it is given.
/// let stored = Arc::new(Mutex::new(None::<ApiKey>));
/// let mut repo = MockTenancyRepository::new();
/// repo.expect_mark_key_used().returning(|_, _| Ok(()));
/// let keep = Arc::clone(&stored);
/// repo.expect_insert_key().returning(move |key| {
///     *keep.lock().unwrap() = Some(key.clone());
///     Ok(())
/// });
/// let find = Arc::clone(&stored);
/// repo.expect_find_key_by_secret_hash().returning(move |hash| {
///     Ok(find.lock().unwrap().clone().filter(|key| &key.secret_hash == hash))
/// });
/// let mut clock = MockClock::new();
/// clock.expect_now().returning(workbench_domain::chrono::Utc::now);
/// let auth = AuthService::new(Arc::new(repo), Arc::new(clock));
///
/// let admin = Principal::trusted("billing-service", "org_1", &["env_1"]);
/// let issued = auth.create_credential(&admin, &"env_1".into(), Role::Events).await?;
/// assert!(issued.client_secret.starts_with("wbs_"));
/// assert_eq!(issued.environment_ids, ["env_1"]);
///
/// let caller = auth.authenticate_for(&issued.client_secret, Some("env_1")).await?;
/// assert_eq!(caller.key_id, issued.key.id);
/// assert!(caller.authorize("env_1", Permission::ActionFlowsTrigger).is_ok());
/// assert!(matches!(
///     caller.authorize("env_1", Permission::WebhooksWrite),
///     Err(DomainError::Forbidden(_))
/// ));
/// assert!(matches!(
///     caller.authorize("env_2", Permission::ActionFlowsTrigger),
///     Err(DomainError::Unauthenticated)
/// ));
/// assert!(matches!(
///     auth.authenticate("wbs_not-a-key").await,
///     Err(DomainError::Unauthenticated)
/// ));
/// # Ok::<(), DomainError>(())
/// # }).unwrap();
/// ```
pub struct AuthService {
    repo: Arc<dyn TenancyRepository>,
    clock: Arc<dyn Clock>,
    /// Recently authenticated callers by the hash of their bearer, each with the time it may
    /// be reused until: a request then costs no read of its key and environments.
    principals: Mutex<HashMap<SecretHash, (Principal, Timestamp)>>,
    /// When this process last recorded each key's use: recorded again after a minute.
    used: Mutex<HashMap<String, Timestamp>>,
}

/// How often a key's last use is recorded, at most (`lastUsed` is to the minute).
const USE_RECORDED_EVERY_SECONDS: i64 = 60;

impl AuthService {
    /// A service storing in `repo` and reading the time from `clock`.
    pub fn new(repo: Arc<dyn TenancyRepository>, clock: Arc<dyn Clock>) -> Self {
        Self {
            repo,
            clock,
            principals: Mutex::new(HashMap::new()),
            used: Mutex::new(HashMap::new()),
        }
    }

    /// Resolves a bearer (a key secret `wbs_...` or an access token `wbt_...`) to the caller,
    /// with the environments its key may use. An unknown, malformed, revoked or expired bearer
    /// is [`DomainError::Unauthenticated`]. A caller authenticated less than a second ago is
    /// reused without reading storage (see [`AuthService::authenticate_for`]).
    pub async fn authenticate(&self, bearer: &str) -> Result<Principal, DomainError> {
        self.authenticate_for(bearer, None).await
    }

    /// Like [`AuthService::authenticate`] for a request to `environment_id`. A caller
    /// authenticated less than a second ago is reused, unless it lacks that environment (one
    /// created since may now be granted): then the key is read again. So a grant takes effect
    /// at once, and a revocation through another process within a second.
    pub async fn authenticate_for(
        &self,
        bearer: &str,
        environment_id: Option<&str>,
    ) -> Result<Principal, DomainError> {
        let now = self.clock.now();
        let hash = SecretHash::of(bearer);
        if let Some((principal, until)) = self.remembered(&hash) {
            let granted =
                environment_id.is_none_or(|env| principal.environment_ids.iter().any(|e| e == env));
            if until > now && granted {
                return Ok(principal);
            }
        }
        let (principal, expires) = self.resolve(bearer, &hash, now).await?;
        let until = expires.map_or(now + Duration::milliseconds(PRINCIPAL_TTL_MS), |e| {
            e.min(now + Duration::milliseconds(PRINCIPAL_TTL_MS))
        });
        if let Ok(mut principals) = self.principals.lock() {
            if principals.len() >= PRINCIPAL_CACHE_MAX {
                principals.clear();
            }
            principals.insert(hash, (principal.clone(), until));
        }
        Ok(principal)
    }

    fn remembered(&self, hash: &SecretHash) -> Option<(Principal, Timestamp)> {
        self.principals.lock().ok()?.get(hash).cloned()
    }

    fn forget_all(&self) {
        if let Ok(mut principals) = self.principals.lock() {
            principals.clear();
        }
    }

    /// The caller a bearer stands for, read from storage, and when an access token expires.
    async fn resolve(
        &self,
        bearer: &str,
        hash: &SecretHash,
        now: Timestamp,
    ) -> Result<(Principal, Option<Timestamp>), DomainError> {
        let mut expires = None;
        let key = if bearer.starts_with(ACCESS_TOKEN_PREFIX) {
            let Some(token) = self.repo.find_access_token(hash).await? else {
                return Err(DomainError::Unauthenticated);
            };
            if !token.token_hash.verify(bearer) || token.expires <= now {
                return Err(DomainError::Unauthenticated);
            }
            expires = Some(token.expires);
            self.repo.find_key(&token.key_id).await?
        } else if bearer.starts_with(KEY_SECRET_PREFIX) {
            self.repo
                .find_key_by_secret_hash(hash)
                .await?
                .filter(|key| key.secret_hash.verify(bearer))
        } else {
            None
        };
        let Some(key) = key.filter(|k| k.revoked.is_none()) else {
            return Err(DomainError::Unauthenticated);
        };
        let environment_ids = self.resolve_grant(&key).await?;
        self.record_use(&key.id, now).await;
        let principal = Principal {
            key_id: key.id.into(),
            organisation_id: key.organisation_id,
            access: key.access,
            environment_ids,
            end_user: None,
        };
        Ok((principal, expires))
    }

    /// Records the key's use, once a minute at most per key in this process. Best effort:
    /// `lastUsed` is advice, and a failure to record it does not refuse the caller.
    async fn record_use(&self, key_id: &str, now: Timestamp) {
        let due = match self.used.lock() {
            Ok(mut used) => {
                let stale = used.get(key_id).is_none_or(|at| {
                    now.signed_duration_since(*at) >= Duration::seconds(USE_RECORDED_EVERY_SECONDS)
                });
                if stale {
                    if used.len() >= PRINCIPAL_CACHE_MAX {
                        used.clear();
                    }
                    used.insert(key_id.to_owned(), now);
                }
                stale
            }
            Err(_) => false,
        };
        if due {
            let _ = self.repo.mark_key_used(key_id, now).await;
        }
    }

    async fn resolve_grant(&self, key: &ApiKey) -> Result<Vec<String>, DomainError> {
        Ok(match &key.environments {
            EnvironmentGrant::Only(ids) => ids.clone(),
            EnvironmentGrant::All => self
                .repo
                .list_environments(&key.organisation_id)
                .await?
                .into_iter()
                .map(|e| e.id.into_string())
                .collect(),
        })
    }

    /// OAuth2 client credentials: a valid, unrevoked key id + secret buys a one-hour token
    /// ([`ACCESS_TOKEN_TTL_SECONDS`]). Anything else is [`DomainError::Unauthenticated`].
    pub async fn exchange_client_credentials(
        &self,
        client_id: &str,
        client_secret: &str,
    ) -> Result<IssuedToken, DomainError> {
        let key = self.repo.find_key(client_id).await?;
        // The secret is hashed and compared whether or not the client exists, so that an
        // unknown client id answers as slowly as a wrong secret (docs/api.md, Credentials).
        let verified = match &key {
            Some(k) => k.secret_hash.verify(client_secret),
            None => {
                // The same work against a hash no secret has; its answer is never used.
                std::hint::black_box(UNKNOWN_CLIENT.verify(client_secret));
                false
            }
        };
        let Some(key) = key.filter(|k| k.revoked.is_none() && verified) else {
            return Err(DomainError::Unauthenticated);
        };
        let now = self.clock.now();
        let secret = secret::generate(ACCESS_TOKEN_PREFIX);
        let grant = AccessTokenGrant {
            token_hash: secret.hash,
            key_id: key.id.into(),
            created: now,
            expires: now + Duration::seconds(ACCESS_TOKEN_TTL_SECONDS),
        };
        self.repo.insert_access_token(&grant).await?;
        Ok(IssuedToken {
            access_token: secret.plaintext,
            expires_in: ACCESS_TOKEN_TTL_SECONDS,
        })
    }

    /// The environments the caller may use, oldest first.
    pub async fn list_environments(
        &self,
        principal: &Principal,
    ) -> Result<Vec<Environment>, DomainError> {
        let mut envs = self
            .repo
            .list_environments(&principal.organisation_id)
            .await?;
        envs.retain(|e| principal.environment_ids.iter().any(|id| *id == e.id));
        Ok(envs)
    }

    /// Credentials API: a legacy key with one role (`events` or `workbench`) for this
    /// environment, in the caller's organisation. The caller needs
    /// [`Permission::CredentialsWrite`] there, and every permission of `role` itself (else
    /// [`DomainError::Forbidden`] naming the scopes it lacks: a key never creates one that can
    /// do more than itself); [`Role::Auth`] is a [`DomainError::Validation`] on `role`
    /// (docs/api.md, Credentials).
    pub async fn create_credential(
        &self,
        principal: &Principal,
        environment_id: &EnvironmentId,
        role: Role,
    ) -> Result<IssuedKey, DomainError> {
        principal.authorize(environment_id, Permission::CredentialsWrite)?;
        if role == Role::Auth {
            return Err(DomainError::invalid(
                "role",
                "must be `events` or `workbench`; keys with the `auth` role are created by an \
                    administrator",
            ));
        }
        let access = KeyAccess::Roles(vec![role]);
        let missing = principal.access.missing_of(&access);
        if !missing.is_empty() {
            let scopes: Vec<String> = missing.iter().map(|p| format!("`{}`", p.scope())).collect();
            return Err(DomainError::Forbidden(format!(
                "a key may only create keys whose permissions it holds itself: the role `{role}` \
                 needs {} (or the role itself)",
                scopes.join(", ")
            )));
        }
        self.issue_key(
            &principal.organisation_id,
            None,
            access,
            EnvironmentGrant::Only(vec![environment_id.as_str().to_owned()]),
        )
        .await
    }

    /// Credentials API: revokes a key of the caller's organisation that may use this
    /// environment, and its access tokens. The caller needs [`Permission::CredentialsWrite`]
    /// there; any other key, or none, is [`DomainError::NotFound`]. A key granted
    /// environments beyond the caller's (all of them, when the caller has a list) is
    /// [`DomainError::Forbidden`]. Callers this service
    /// remembers are forgotten, so the key stops working in this process at once.
    pub async fn revoke_credential(
        &self,
        principal: &Principal,
        environment_id: &EnvironmentId,
        client_id: &KeyId,
    ) -> Result<(), DomainError> {
        principal.authorize(environment_id, Permission::CredentialsWrite)?;
        let key = self.repo.find_key(client_id).await?;
        let visible = key.as_ref().is_some_and(|k| {
            k.organisation_id == principal.organisation_id
                && match &k.environments {
                    EnvironmentGrant::All => true,
                    EnvironmentGrant::Only(ids) => ids.iter().any(|e| e == environment_id),
                }
        });
        let Some(target) = key.filter(|_| visible) else {
            return Err(DomainError::NotFound(Resource::Credential));
        };
        // A key may revoke only keys whose environments all lie within its own (docs/api.md,
        // Credentials): one granted environment A cannot revoke a key of every environment.
        let caller = self.repo.find_key(&principal.key_id).await?;
        let within = match (&target.environments, caller.map(|k| k.environments)) {
            (_, Some(EnvironmentGrant::All)) => true,
            (EnvironmentGrant::All, _) => false,
            (EnvironmentGrant::Only(ids), _) => {
                ids.iter().all(|e| principal.environment_ids.contains(e))
            }
        };
        if !within {
            return Err(DomainError::Forbidden(
                "a key may revoke only keys whose environments all lie within its own".into(),
            ));
        }
        self.repo.revoke_key(client_id, self.clock.now()).await?;
        // The key and its tokens stop working now, not when their remembered callers expire.
        self.forget_all();
        Ok(())
    }

    /// Credentials API: the keys of the caller's organisation that may use this environment
    /// (granted it, or every environment), revoked ones included, by client id. The caller
    /// needs [`Permission::CredentialsRead`] there. Never a secret or its hash.
    pub async fn list_credentials(
        &self,
        principal: &Principal,
        environment_id: &EnvironmentId,
        page: PageRequest,
    ) -> Result<Page<KeySummary>, DomainError> {
        principal.authorize(environment_id, Permission::CredentialsRead)?;
        let keys = self
            .repo
            .list_keys(
                Some(principal.organisation_id.clone()),
                Some(environment_id.as_str().to_owned()),
                &page,
            )
            .await?;
        Ok(Page::from_overfetch(keys, page.limit, |k| {
            k.key.id.clone().into()
        }))
    }

    /// Admin: the environments of the organisation, oldest first.
    pub async fn list_environments_of(
        &self,
        organisation_id: &str,
    ) -> Result<Vec<Environment>, DomainError> {
        Ok(self.repo.list_environments(organisation_id).await?)
    }

    /// Admin: every key (of every organisation), or those that may use `environment_id`,
    /// revoked ones included, by client id.
    pub async fn list_keys(
        &self,
        environment_id: Option<&str>,
        page: PageRequest,
    ) -> Result<Page<KeySummary>, DomainError> {
        let keys = self
            .repo
            .list_keys(None, environment_id.map(str::to_owned), &page)
            .await?;
        Ok(Page::from_overfetch(keys, page.limit, |k| {
            k.key.id.clone().into()
        }))
    }

    /// Admin: revokes the key and its access tokens; [`DomainError::NotFound`] for an unknown
    /// client id. Callers this service remembers are forgotten.
    pub async fn revoke_key(&self, client_id: &str) -> Result<(), DomainError> {
        if !self.repo.revoke_key(client_id, self.clock.now()).await? {
            return Err(DomainError::NotFound(Resource::Credential));
        }
        self.forget_all();
        Ok(())
    }

    /// Admin: the organisation named `default`, created when missing.
    pub async fn default_organisation(&self) -> Result<Organisation, DomainError> {
        if let Some(org) = self
            .repo
            .find_organisation_by_name(DEFAULT_ORGANISATION)
            .await?
        {
            return Ok(org);
        }
        let org = Organisation {
            id: new_id(IdKind::Organisation).into(),
            name: DEFAULT_ORGANISATION.to_owned(),
            created: self.clock.now(),
        };
        match self.repo.insert_organisation(&org).await {
            Ok(()) => Ok(org),
            // Another process created it between our read and our insert.
            Err(StorageError::UniqueViolation(_)) => self
                .repo
                .find_organisation_by_name(DEFAULT_ORGANISATION)
                .await?
                .ok_or_else(|| {
                    StorageError::Internal("default organisation vanished".into()).into()
                }),
            Err(e) => Err(e.into()),
        }
    }

    /// Admin: a new environment in the default organisation. A blank name, one over
    /// [`NAME_MAX_CHARS`] or with control characters is a [`DomainError::Validation`] on
    /// `name`; a name the organisation already has is a [`ConflictKind::EnvironmentNameTaken`]
    /// conflict.
    pub async fn create_environment(&self, name: &str) -> Result<Environment, DomainError> {
        validate_name("name", name)?;
        let org = self.default_organisation().await?;
        let env = Environment {
            id: new_id(IdKind::Environment).into(),
            organisation_id: org.id.into(),
            name: name.to_owned(),
            created: self.clock.now(),
        };
        match self.repo.insert_environment(&env).await {
            Ok(()) => Ok(env),
            Err(StorageError::UniqueViolation(_)) => Err(DomainError::conflict(
                ConflictKind::EnvironmentNameTaken,
                format!("an environment named `{name}` already exists"),
            )),
            Err(e) => Err(e.into()),
        }
    }

    /// Admin: a key of the default organisation. `environments` must name environments of that
    /// organisation. Exactly one of roles or scopes must be given. Every problem is reported in
    /// one [`DomainError::Validation`] (fields `roles`, `name`, `environments`); duplicate
    /// roles, scopes and environments are dropped.
    pub async fn create_key(
        &self,
        name: Option<String>,
        roles: Vec<Role>,
        scopes: Vec<Scope>,
        environments: EnvironmentGrant,
    ) -> Result<IssuedKey, DomainError> {
        let mut errors = Vec::new();
        let access = match (roles.is_empty(), scopes.is_empty()) {
            (false, true) => Some(KeyAccess::Roles(dedup(roles))),
            (true, false) => Some(KeyAccess::Scopes(dedup(scopes))),
            (false, false) => {
                errors.push(FieldError::new(
                    "roles",
                    "a key holds roles or scopes, not both",
                ));
                None
            }
            (true, true) => {
                errors.push(FieldError::new(
                    "roles",
                    "give at least one role or one scope",
                ));
                None
            }
        };
        if let Some(name) = &name {
            if let Err(DomainError::Validation(mut e)) = validate_name("name", name) {
                errors.append(&mut e);
            }
        }
        let org = self.default_organisation().await?;
        if let EnvironmentGrant::Only(ids) = &environments {
            let known = self.repo.list_environments(&org.id).await?;
            if ids.is_empty() {
                errors.push(FieldError::new(
                    "environments",
                    "grant at least one environment",
                ));
            }
            for id in ids {
                if !known.iter().any(|e| &e.id == id) {
                    errors.push(FieldError::new(
                        "environments",
                        format!("unknown environment `{id}`"),
                    ));
                }
            }
        }
        match access {
            Some(access) if errors.is_empty() => {
                self.issue_key(&org.id, name, access, dedup_grant(environments))
                    .await
            }
            _ => Err(DomainError::Validation(errors)),
        }
    }

    async fn issue_key(
        &self,
        organisation_id: &str,
        name: Option<String>,
        access: KeyAccess,
        environments: EnvironmentGrant,
    ) -> Result<IssuedKey, DomainError> {
        let (key, client_secret) = self.new_key(organisation_id, name, access, environments);
        self.repo.insert_key(&key).await?;
        let environment_ids = self.resolve_grant(&key).await?;
        Ok(IssuedKey {
            key,
            client_secret,
            environment_ids,
        })
    }

    fn new_key(
        &self,
        organisation_id: &str,
        name: Option<String>,
        access: KeyAccess,
        environments: EnvironmentGrant,
    ) -> (ApiKey, String) {
        let secret = secret::generate(KEY_SECRET_PREFIX);
        let key = ApiKey {
            id: new_id(IdKind::Key).into(),
            organisation_id: organisation_id.to_owned(),
            name,
            secret_hash: secret.hash,
            access,
            environments,
            created: self.clock.now(),
            revoked: None,
        };
        (key, secret.plaintext)
    }

    /// First start on an empty database: the `default` organisation, a `development`
    /// environment and a key holding every scope on every environment of the organisation.
    /// Returns `None` when the database already had an organisation.
    pub async fn bootstrap(&self) -> Result<Option<Bootstrap>, DomainError> {
        let now = self.clock.now();
        let organisation = Organisation {
            id: new_id(IdKind::Organisation).into(),
            name: DEFAULT_ORGANISATION.to_owned(),
            created: now,
        };
        let environment = Environment {
            id: new_id(IdKind::Environment).into(),
            organisation_id: organisation.id.clone().into(),
            name: BOOTSTRAP_ENVIRONMENT.to_owned(),
            created: now,
        };
        let (key, client_secret) = self.new_key(
            &organisation.id,
            Some("bootstrap".to_owned()),
            KeyAccess::Scopes(Scope::ALL.to_vec()),
            EnvironmentGrant::All,
        );
        let created = match self
            .repo
            .bootstrap_if_empty(&organisation, &environment, &key)
            .await
        {
            Ok(created) => created,
            // Another process bootstrapped the same database at the same moment.
            Err(StorageError::UniqueViolation(_)) => false,
            Err(e) => return Err(e.into()),
        };
        Ok(created.then(|| Bootstrap {
            key: IssuedKey {
                key,
                client_secret,
                environment_ids: vec![environment.id.clone().into()],
            },
            organisation,
            environment,
        }))
    }
}

fn dedup<T: Ord>(mut v: Vec<T>) -> Vec<T> {
    v.sort();
    v.dedup();
    v
}

fn dedup_grant(grant: EnvironmentGrant) -> EnvironmentGrant {
    match grant {
        EnvironmentGrant::All => EnvironmentGrant::All,
        EnvironmentGrant::Only(ids) => EnvironmentGrant::Only(dedup(ids)),
    }
}

fn validate_name(field: &str, name: &str) -> Result<(), DomainError> {
    match crate::name::problem(name, NAME_MAX_CHARS) {
        Some(message) => Err(DomainError::invalid(field, message)),
        None => Ok(()),
    }
}
