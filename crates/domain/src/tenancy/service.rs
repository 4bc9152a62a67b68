//! [`AuthService`]: credentials issued, authenticated and revoked, and the environments and
//! keys an operator creates.

use crate::id::{EnvironmentId, KeyId};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use chrono::Duration;

use crate::id::{new_id, IdKind};
use crate::secret::{self, SecretHash, ACCESS_TOKEN_PREFIX, KEY_SECRET_PREFIX};
use crate::{Clock, DomainError, Page, PageRequest, Resource, Timestamp};

use super::*;

mod admin;

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
}
