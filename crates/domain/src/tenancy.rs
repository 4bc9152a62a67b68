//! Tenancy and credentials (contract §2): organisations own environments; API keys carry
//! legacy roles or fine-grained scopes and are granted some or all environments of their
//! organisation. A bearer is either a key secret or an access token exchanged for one.

use std::collections::HashMap;
use std::fmt;
use std::str::FromStr;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use chrono::Duration;

use crate::id::{new_id, IdKind};
use crate::secret::{self, SecretHash, ACCESS_TOKEN_PREFIX, KEY_SECRET_PREFIX};
use crate::{Clock, ConflictKind, DomainError, FieldError, Resource, StorageError, Timestamp};

/// Lifetime of an access token issued by the client-credentials exchange.
pub const ACCESS_TOKEN_TTL_SECONDS: i64 = 3600;
/// The organisation created on first use.
pub const DEFAULT_ORGANISATION: &str = "default";
/// The environment the first `serve` on an empty database creates.
pub const BOOTSTRAP_ENVIRONMENT: &str = "development";
/// Longest environment and key name accepted.
pub const NAME_MAX_CHARS: usize = 255;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Organisation {
    pub id: String,
    pub name: String,
    pub created: Timestamp,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Environment {
    pub id: String,
    pub organisation_id: String,
    pub name: String,
    pub created: Timestamp,
}

/// Legacy credential roles.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Role {
    Events,
    Workbench,
    Auth,
}

impl Role {
    pub const ALL: [Role; 3] = [Role::Events, Role::Workbench, Role::Auth];

    pub const fn as_str(self) -> &'static str {
        match self {
            Role::Events => "events",
            Role::Workbench => "workbench",
            Role::Auth => "auth",
        }
    }
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Role {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Role::ALL
            .into_iter()
            .find(|r| r.as_str() == s)
            .ok_or_else(|| format!("unknown role `{s}` (known: events, workbench, auth)"))
    }
}

/// Fine-grained scopes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Scope {
    WorkbenchFoldersRead,
    WorkbenchFoldersCreate,
    WorkbenchFoldersUpdate,
    WorkbenchFoldersDelete,
    ActionFlowsRead,
    ActionFlowsTrigger,
    ActionFlowsWrite,
    WebhooksRead,
    WebhooksWrite,
    NotificationPlatformsRead,
    NotificationPlatformsWrite,
    UsersRead,
    UsersWrite,
    CardsWrite,
    CredentialsWrite,
}

impl Scope {
    pub const ALL: [Scope; 15] = [
        Scope::WorkbenchFoldersRead,
        Scope::WorkbenchFoldersCreate,
        Scope::WorkbenchFoldersUpdate,
        Scope::WorkbenchFoldersDelete,
        Scope::ActionFlowsRead,
        Scope::ActionFlowsTrigger,
        Scope::ActionFlowsWrite,
        Scope::WebhooksRead,
        Scope::WebhooksWrite,
        Scope::NotificationPlatformsRead,
        Scope::NotificationPlatformsWrite,
        Scope::UsersRead,
        Scope::UsersWrite,
        Scope::CardsWrite,
        Scope::CredentialsWrite,
    ];

    pub const fn as_str(self) -> &'static str {
        match self {
            Scope::WorkbenchFoldersRead => "workbench_folders:read",
            Scope::WorkbenchFoldersCreate => "workbench_folders:create",
            Scope::WorkbenchFoldersUpdate => "workbench_folders:update",
            Scope::WorkbenchFoldersDelete => "workbench_folders:delete",
            Scope::ActionFlowsRead => "action_flows:read",
            Scope::ActionFlowsTrigger => "action_flows:trigger",
            Scope::ActionFlowsWrite => "action_flows:write",
            Scope::WebhooksRead => "webhooks:read",
            Scope::WebhooksWrite => "webhooks:write",
            Scope::NotificationPlatformsRead => "notification_platforms:read",
            Scope::NotificationPlatformsWrite => "notification_platforms:write",
            Scope::UsersRead => "users:read",
            Scope::UsersWrite => "users:write",
            Scope::CardsWrite => "cards:write",
            Scope::CredentialsWrite => "credentials:write",
        }
    }
}

impl fmt::Display for Scope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Scope {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Scope::ALL
            .into_iter()
            .find(|x| x.as_str() == s)
            .ok_or_else(|| format!("unknown scope `{s}`"))
    }
}

/// What an operation needs. Each permission is granted by one scope, and by the legacy roles
/// the contract lists (none, for folders: they require a fine-grained key).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Permission {
    FoldersRead,
    FoldersCreate,
    FoldersUpdate,
    FoldersDelete,
    ActionFlowsRead,
    ActionFlowsTrigger,
    ActionFlowsWrite,
    WebhooksRead,
    WebhooksWrite,
    NotificationPlatformsRead,
    NotificationPlatformsWrite,
    UsersRead,
    UsersWrite,
    CardsWrite,
    CredentialsWrite,
}

impl Permission {
    pub const fn scope(self) -> Scope {
        match self {
            Permission::FoldersRead => Scope::WorkbenchFoldersRead,
            Permission::FoldersCreate => Scope::WorkbenchFoldersCreate,
            Permission::FoldersUpdate => Scope::WorkbenchFoldersUpdate,
            Permission::FoldersDelete => Scope::WorkbenchFoldersDelete,
            Permission::ActionFlowsRead => Scope::ActionFlowsRead,
            Permission::ActionFlowsTrigger => Scope::ActionFlowsTrigger,
            Permission::ActionFlowsWrite => Scope::ActionFlowsWrite,
            Permission::WebhooksRead => Scope::WebhooksRead,
            Permission::WebhooksWrite => Scope::WebhooksWrite,
            Permission::NotificationPlatformsRead => Scope::NotificationPlatformsRead,
            Permission::NotificationPlatformsWrite => Scope::NotificationPlatformsWrite,
            Permission::UsersRead => Scope::UsersRead,
            Permission::UsersWrite => Scope::UsersWrite,
            Permission::CardsWrite => Scope::CardsWrite,
            Permission::CredentialsWrite => Scope::CredentialsWrite,
        }
    }

    /// Legacy roles that also grant this permission (contract §2 table).
    pub const fn legacy_roles(self) -> &'static [Role] {
        match self {
            Permission::FoldersRead
            | Permission::FoldersCreate
            | Permission::FoldersUpdate
            | Permission::FoldersDelete => &[],
            Permission::ActionFlowsRead
            | Permission::ActionFlowsTrigger
            | Permission::ActionFlowsWrite
            | Permission::CardsWrite => &[Role::Events],
            Permission::WebhooksRead
            | Permission::WebhooksWrite
            | Permission::NotificationPlatformsRead
            | Permission::NotificationPlatformsWrite => &[Role::Workbench],
            Permission::UsersRead | Permission::UsersWrite => &[Role::Events, Role::Workbench],
            Permission::CredentialsWrite => &[Role::Auth],
        }
    }

    fn denial(self) -> String {
        let scope = self.scope();
        match self.legacy_roles() {
            [] => format!("this operation needs a fine-grained key with the scope `{scope}`"),
            roles => {
                let roles: Vec<_> = roles.iter().map(|r| format!("`{r}`")).collect();
                format!(
                    "this operation needs the scope `{scope}` or the legacy role {}",
                    roles.join(" or ")
                )
            }
        }
    }
}

/// A key holds legacy roles or scopes, never both.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeyAccess {
    Roles(Vec<Role>),
    Scopes(Vec<Scope>),
}

impl KeyAccess {
    pub fn allows(&self, permission: Permission) -> bool {
        match self {
            KeyAccess::Roles(roles) => permission.legacy_roles().iter().any(|r| roles.contains(r)),
            KeyAccess::Scopes(scopes) => scopes.contains(&permission.scope()),
        }
    }

    pub fn roles(&self) -> &[Role] {
        match self {
            KeyAccess::Roles(r) => r,
            KeyAccess::Scopes(_) => &[],
        }
    }

    pub fn scopes(&self) -> &[Scope] {
        match self {
            KeyAccess::Roles(_) => &[],
            KeyAccess::Scopes(s) => s,
        }
    }

    /// The roles' names, as the API and the admin commands show them.
    pub fn role_names(&self) -> Vec<&'static str> {
        self.roles().iter().map(|r| r.as_str()).collect()
    }

    /// The scopes' names, as the API and the admin commands show them.
    pub fn scope_names(&self) -> Vec<&'static str> {
        self.scopes().iter().map(|s| s.as_str()).collect()
    }
}

/// Which environments of its organisation a key may use.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EnvironmentGrant {
    All,
    Only(Vec<String>),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiKey {
    /// The OAuth client id (`key_...`).
    pub id: String,
    pub organisation_id: String,
    pub name: Option<String>,
    pub secret_hash: SecretHash,
    pub access: KeyAccess,
    pub environments: EnvironmentGrant,
    pub created: Timestamp,
    pub revoked: Option<Timestamp>,
}

/// An access token as stored: its hash, the key it stands for, and its expiry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AccessTokenGrant {
    pub token_hash: SecretHash,
    pub key_id: String,
    pub created: Timestamp,
    pub expires: Timestamp,
}

/// The authenticated caller of one request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Principal {
    pub key_id: String,
    pub organisation_id: String,
    pub access: KeyAccess,
    /// Environments this caller may use, resolved at authentication time.
    pub environment_ids: Vec<String>,
}

impl Principal {
    /// A caller trusted in-process: another service reusing this crate, which authenticated
    /// its own users its own way. It holds every permission in `environment_ids` of
    /// `organisation_id` (recorded on what it creates), and only there; `name` stands for it
    /// where a credential would be recorded (a draft's author, its approver).
    ///
    /// ```
    /// use workbench_domain::{Permission, Principal};
    ///
    /// let me = Principal::trusted("billing-service", "org_1", &["env_1"]);
    /// assert!(me.authorize("env_1", Permission::ActionFlowsWrite).is_ok());
    /// assert!(me.authorize("env_2", Permission::ActionFlowsRead).is_err());
    /// ```
    pub fn trusted(name: &str, organisation_id: &str, environment_ids: &[&str]) -> Self {
        Self {
            key_id: name.to_owned(),
            organisation_id: organisation_id.to_owned(),
            access: KeyAccess::Scopes(Scope::ALL.to_vec()),
            environment_ids: environment_ids.iter().map(|e| (*e).to_owned()).collect(),
        }
    }

    /// Checks that the caller may use `environment_id` (else 401: an unknown environment and a
    /// forbidden one look the same) and holds `permission` there (else 403).
    pub fn authorize(
        &self,
        environment_id: &str,
        permission: Permission,
    ) -> Result<(), DomainError> {
        if !self.environment_ids.iter().any(|e| e == environment_id) {
            return Err(DomainError::Unauthenticated);
        }
        if !self.access.allows(permission) {
            return Err(DomainError::Forbidden(permission.denial()));
        }
        Ok(())
    }
}

/// A key just created, with its secret in clear: shown once, never again.
#[derive(Clone)]
pub struct IssuedKey {
    pub key: ApiKey,
    pub client_secret: String,
    /// The environments the key was granted, resolved (all of the organisation for `All`).
    pub environment_ids: Vec<String>,
}

impl fmt::Debug for IssuedKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("IssuedKey")
            .field("key", &self.key)
            .finish_non_exhaustive()
    }
}

/// An access token just issued by the client-credentials exchange.
#[derive(Clone)]
pub struct IssuedToken {
    pub access_token: String,
    pub expires_in: i64,
}

impl fmt::Debug for IssuedToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("IssuedToken")
            .field("expires_in", &self.expires_in)
            .finish_non_exhaustive()
    }
}

/// What the first start on an empty database created.
#[derive(Debug, Clone)]
pub struct Bootstrap {
    pub organisation: Organisation,
    pub environment: Environment,
    pub key: IssuedKey,
}

/// Storage of organisations, environments, keys and access tokens.
#[cfg_attr(feature = "mock", mockall::automock)]
#[async_trait]
pub trait TenancyRepository: Send + Sync {
    async fn find_organisation_by_name(
        &self,
        name: &str,
    ) -> Result<Option<Organisation>, StorageError>;
    /// Inserts the organisation; a name already used is a `UniqueViolation`.
    async fn insert_organisation(&self, org: &Organisation) -> Result<(), StorageError>;
    /// Inserts the environment; a name already used in the organisation is a `UniqueViolation`.
    async fn insert_environment(&self, env: &Environment) -> Result<(), StorageError>;
    async fn list_environments(
        &self,
        organisation_id: &str,
    ) -> Result<Vec<Environment>, StorageError>;
    /// Inserts the key with its environment grants, atomically.
    async fn insert_key(&self, key: &ApiKey) -> Result<(), StorageError>;
    async fn find_key(&self, key_id: &str) -> Result<Option<ApiKey>, StorageError>;
    async fn find_key_by_secret_hash(
        &self,
        hash: &SecretHash,
    ) -> Result<Option<ApiKey>, StorageError>;
    /// Marks the key revoked (its tokens die with it). Returns false when there is no such key.
    async fn revoke_key(&self, key_id: &str, at: Timestamp) -> Result<bool, StorageError>;
    async fn insert_access_token(&self, token: &AccessTokenGrant) -> Result<(), StorageError>;
    async fn find_access_token(
        &self,
        hash: &SecretHash,
    ) -> Result<Option<AccessTokenGrant>, StorageError>;
    /// In one transaction: when no organisation exists yet, inserts these three records and
    /// returns true; otherwise inserts nothing and returns false. Safe for several processes
    /// starting together on one database.
    async fn bootstrap_if_empty(
        &self,
        org: &Organisation,
        env: &Environment,
        key: &ApiKey,
    ) -> Result<bool, StorageError>;
}

/// How long an authenticated caller is reused without reading its key again (in this process;
/// a revocation through this process clears them at once).
const PRINCIPAL_TTL_MS: i64 = 1_000;
/// Callers remembered at most; past it the memory starts afresh.
const PRINCIPAL_CACHE_MAX: usize = 10_000;

/// Authentication, the token exchange, the Credentials API and the admin operations.
pub struct AuthService {
    repo: Arc<dyn TenancyRepository>,
    clock: Arc<dyn Clock>,
    /// Recently authenticated callers by the hash of their bearer, each with the time it may
    /// be reused until: a request then costs no read of its key and environments.
    principals: Mutex<HashMap<SecretHash, (Principal, Timestamp)>>,
}

impl AuthService {
    pub fn new(repo: Arc<dyn TenancyRepository>, clock: Arc<dyn Clock>) -> Self {
        Self {
            repo,
            clock,
            principals: Mutex::new(HashMap::new()),
        }
    }

    /// Resolves a bearer (a key secret or an access token) to the caller.
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
        let principal = Principal {
            key_id: key.id,
            organisation_id: key.organisation_id,
            access: key.access,
            environment_ids,
        };
        Ok((principal, expires))
    }

    async fn resolve_grant(&self, key: &ApiKey) -> Result<Vec<String>, DomainError> {
        Ok(match &key.environments {
            EnvironmentGrant::Only(ids) => ids.clone(),
            EnvironmentGrant::All => self
                .repo
                .list_environments(&key.organisation_id)
                .await?
                .into_iter()
                .map(|e| e.id)
                .collect(),
        })
    }

    /// OAuth2 client credentials: a valid, unrevoked key id + secret buys a one-hour token.
    pub async fn exchange_client_credentials(
        &self,
        client_id: &str,
        client_secret: &str,
    ) -> Result<IssuedToken, DomainError> {
        let key = self.repo.find_key(client_id).await?;
        let Some(key) = key.filter(|k| k.revoked.is_none() && k.secret_hash.verify(client_secret))
        else {
            return Err(DomainError::Unauthenticated);
        };
        let now = self.clock.now();
        let secret = secret::generate(ACCESS_TOKEN_PREFIX);
        let grant = AccessTokenGrant {
            token_hash: secret.hash,
            key_id: key.id,
            created: now,
            expires: now + Duration::seconds(ACCESS_TOKEN_TTL_SECONDS),
        };
        self.repo.insert_access_token(&grant).await?;
        Ok(IssuedToken {
            access_token: secret.plaintext,
            expires_in: ACCESS_TOKEN_TTL_SECONDS,
        })
    }

    /// The environments the caller may use.
    pub async fn list_environments(
        &self,
        principal: &Principal,
    ) -> Result<Vec<Environment>, DomainError> {
        let mut envs = self
            .repo
            .list_environments(&principal.organisation_id)
            .await?;
        envs.retain(|e| principal.environment_ids.contains(&e.id));
        Ok(envs)
    }

    /// Credentials API: a legacy key with one role (`events` or `workbench`) for this environment.
    pub async fn create_credential(
        &self,
        principal: &Principal,
        environment_id: &str,
        role: Role,
    ) -> Result<IssuedKey, DomainError> {
        principal.authorize(environment_id, Permission::CredentialsWrite)?;
        if role == Role::Auth {
            return Err(DomainError::invalid(
                "role",
                "must be `events` or `workbench`; keys with the `auth` role are created by an administrator",
            ));
        }
        self.issue_key(
            &principal.organisation_id,
            None,
            KeyAccess::Roles(vec![role]),
            EnvironmentGrant::Only(vec![environment_id.to_owned()]),
        )
        .await
    }

    /// Credentials API: revokes a key of the caller's organisation that may use this environment.
    pub async fn revoke_credential(
        &self,
        principal: &Principal,
        environment_id: &str,
        client_id: &str,
    ) -> Result<(), DomainError> {
        principal.authorize(environment_id, Permission::CredentialsWrite)?;
        let key = self.repo.find_key(client_id).await?;
        let visible = key.is_some_and(|k| {
            k.organisation_id == principal.organisation_id
                && match &k.environments {
                    EnvironmentGrant::All => true,
                    EnvironmentGrant::Only(ids) => ids.iter().any(|e| e == environment_id),
                }
        });
        if !visible {
            return Err(DomainError::NotFound(Resource::Credential));
        }
        self.repo.revoke_key(client_id, self.clock.now()).await?;
        // The key and its tokens stop working now, not when their remembered callers expire.
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
            id: new_id(IdKind::Organisation),
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

    /// Admin: a new environment in the default organisation.
    pub async fn create_environment(&self, name: &str) -> Result<Environment, DomainError> {
        validate_name("name", name)?;
        let org = self.default_organisation().await?;
        let env = Environment {
            id: new_id(IdKind::Environment),
            organisation_id: org.id,
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
    /// organisation. Exactly one of roles or scopes must be given.
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
            id: new_id(IdKind::Key),
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
            id: new_id(IdKind::Organisation),
            name: DEFAULT_ORGANISATION.to_owned(),
            created: now,
        };
        let environment = Environment {
            id: new_id(IdKind::Environment),
            organisation_id: organisation.id.clone(),
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
                environment_ids: vec![environment.id.clone()],
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
    let chars = name.chars().count();
    if name.trim().is_empty() {
        Err(DomainError::invalid(field, "must not be empty"))
    } else if chars > NAME_MAX_CHARS {
        Err(DomainError::invalid(
            field,
            format!("must be at most {NAME_MAX_CHARS} characters"),
        ))
    } else if name.chars().any(char::is_control) {
        Err(DomainError::invalid(
            field,
            "must not contain control characters",
        ))
    } else {
        Ok(())
    }
}

#[cfg(test)]
mod tests;
