//! Tenancy and credentials: organisations own environments; API keys carry legacy roles or
//! fine-grained scopes and are granted some or all environments of their organisation. A bearer
//! is either a key secret or an access token exchanged for one (docs/api.md, Credentials;
//! docs/operations.md, Admin commands).

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
/// Longest environment and key name accepted, in characters (Unicode scalar values).
pub const NAME_MAX_CHARS: usize = 255;

/// An organisation: it owns environments and keys. The service creates and uses one, named
/// [`DEFAULT_ORGANISATION`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Organisation {
    /// `org_...`.
    pub id: String,
    /// Unique among organisations.
    pub name: String,
    /// When it was created.
    pub created: Timestamp,
}

/// An environment of an organisation: every other record (folders, Action Flows, end users,
/// webhooks, ...) belongs to one, and API paths name it (`/v1/{environmentId}/...`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Environment {
    /// `env_...`.
    pub id: String,
    /// The organisation it belongs to.
    pub organisation_id: String,
    /// Unique within the organisation: not blank, at most [`NAME_MAX_CHARS`] characters, no
    /// control characters.
    pub name: String,
    /// When it was created; environments are listed oldest first.
    pub created: Timestamp,
}

/// Legacy credential roles. Each grants a fixed set of permissions
/// ([`Permission::legacy_roles`]); none grants the folder permissions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Role {
    /// `events`: Action Flows (read, write, trigger), end users and cards; the SDK's credential.
    Events,
    /// `workbench`: webhooks, push notification platforms and end users.
    Workbench,
    /// `auth`: the Credentials API. Only an administrator creates keys with it.
    Auth,
}

impl Role {
    /// Every role.
    pub const ALL: [Role; 3] = [Role::Events, Role::Workbench, Role::Auth];

    /// The role's name (`events`, `workbench`, `auth`), as the API, the admin commands and
    /// storage spell it; [`FromStr`] reads it back.
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

/// Fine-grained scopes. Each grants exactly one [`Permission`] ([`Permission::scope`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Scope {
    /// `workbench_folders:read`: grants [`Permission::FoldersRead`].
    WorkbenchFoldersRead,
    /// `workbench_folders:create`: grants [`Permission::FoldersCreate`].
    WorkbenchFoldersCreate,
    /// `workbench_folders:update`: grants [`Permission::FoldersUpdate`].
    WorkbenchFoldersUpdate,
    /// `workbench_folders:delete`: grants [`Permission::FoldersDelete`].
    WorkbenchFoldersDelete,
    /// `action_flows:read`: grants [`Permission::ActionFlowsRead`].
    ActionFlowsRead,
    /// `action_flows:trigger`: grants [`Permission::ActionFlowsTrigger`].
    ActionFlowsTrigger,
    /// `action_flows:write`: grants [`Permission::ActionFlowsWrite`].
    ActionFlowsWrite,
    /// `webhooks:read`: grants [`Permission::WebhooksRead`].
    WebhooksRead,
    /// `webhooks:write`: grants [`Permission::WebhooksWrite`].
    WebhooksWrite,
    /// `notification_platforms:read`: grants [`Permission::NotificationPlatformsRead`].
    NotificationPlatformsRead,
    /// `notification_platforms:write`: grants [`Permission::NotificationPlatformsWrite`].
    NotificationPlatformsWrite,
    /// `users:read`: grants [`Permission::UsersRead`].
    UsersRead,
    /// `users:write`: grants [`Permission::UsersWrite`].
    UsersWrite,
    /// `cards:write`: grants [`Permission::CardsWrite`].
    CardsWrite,
    /// `credentials:write`: grants [`Permission::CredentialsWrite`].
    CredentialsWrite,
}

impl Scope {
    /// Every scope: what the bootstrap key and a [`Principal::trusted`] caller hold.
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

    /// The scope's name (`workbench_folders:read`, ...), as the API, the admin commands and
    /// storage spell it; [`FromStr`] reads it back.
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

/// What an operation needs. Each permission is granted by one scope ([`Permission::scope`]),
/// and by the legacy roles of [`Permission::legacy_roles`] (none, for folders: they require a
/// fine-grained key). Services check it with [`Principal::authorize`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Permission {
    /// List and read folders.
    FoldersRead,
    /// Create folders.
    FoldersCreate,
    /// Rename folders.
    FoldersUpdate,
    /// Delete folders.
    FoldersDelete,
    /// List and read Action Flows, their versions and settings, invocations, and the status of
    /// CSV and cancel tasks.
    ActionFlowsRead,
    /// Start Action Flows (live and test), create CSV tasks and cancel.
    ActionFlowsTrigger,
    /// Create Action Flows and change them: metadata, drafts, approvals, publishing,
    /// archiving, settings.
    ActionFlowsWrite,
    /// List and read webhook subscriptions and their attempt logs.
    WebhooksRead,
    /// Subscribe, disable, enable, delete, rotate secrets, resend, recover and test webhooks.
    WebhooksWrite,
    /// List push notification platforms.
    NotificationPlatformsRead,
    /// Create, update, enable, disable and delete push notification platforms.
    NotificationPlatformsWrite,
    /// Read end users, segments, streams and devices, and a card's events and pushes.
    UsersRead,
    /// Write end users, segments, streams and devices.
    UsersWrite,
    /// Read an end user's feed and act on its cards (submit, dismiss, snooze).
    CardsWrite,
    /// Create and revoke keys through the Credentials API.
    CredentialsWrite,
}

impl Permission {
    /// The one scope that grants this permission.
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

    /// Legacy roles that also grant this permission: `events` for Action Flows and cards,
    /// `workbench` for webhooks and push platforms, either for end users, `auth` for
    /// credentials, none for folders. docs/api.md states each area's permissions.
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
    /// A legacy key: it holds every permission one of these roles grants.
    Roles(Vec<Role>),
    /// A fine-grained key: it holds the permission of each of these scopes, no other.
    Scopes(Vec<Scope>),
}

impl KeyAccess {
    /// Whether the key holds `permission`: one of its roles is among
    /// [`Permission::legacy_roles`], or it has [`Permission::scope`].
    pub fn allows(&self, permission: Permission) -> bool {
        match self {
            KeyAccess::Roles(roles) => permission.legacy_roles().iter().any(|r| roles.contains(r)),
            KeyAccess::Scopes(scopes) => scopes.contains(&permission.scope()),
        }
    }

    /// The legacy roles; empty for a fine-grained key.
    pub fn roles(&self) -> &[Role] {
        match self {
            KeyAccess::Roles(r) => r,
            KeyAccess::Scopes(_) => &[],
        }
    }

    /// The scopes; empty for a legacy key.
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
    /// Every environment of the organisation, those created later too: resolved each time the
    /// key authenticates.
    All,
    /// These environments (`env_...`) only.
    Only(Vec<String>),
}

/// An API key as stored: an OAuth client whose secret is kept only as its hash.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiKey {
    /// The OAuth client id (`key_...`).
    pub id: String,
    /// The organisation that owns it; only its environments can be granted.
    pub organisation_id: String,
    /// A label an administrator gave it (`--name`); `None` without one, as for keys of the
    /// Credentials API.
    pub name: Option<String>,
    /// The hash of its client secret (`wbs_...`).
    pub secret_hash: SecretHash,
    /// Its roles or scopes.
    pub access: KeyAccess,
    /// The environments it may use.
    pub environments: EnvironmentGrant,
    /// When it was created.
    pub created: Timestamp,
    /// When it was revoked, if it was: from then on neither its secret nor its access tokens
    /// authenticate.
    pub revoked: Option<Timestamp>,
}

/// An access token as stored: its hash, the key it stands for, and its expiry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AccessTokenGrant {
    /// The hash of the token (`wbt_...`); storage finds the grant by it.
    pub token_hash: SecretHash,
    /// The key it was exchanged for: the token authenticates as that key, while the key is
    /// not revoked.
    pub key_id: String,
    /// When it was issued.
    pub created: Timestamp,
    /// When it stops authenticating: [`ACCESS_TOKEN_TTL_SECONDS`] after `created`.
    pub expires: Timestamp,
}

/// The authenticated caller of one request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Principal {
    /// The key that authenticated (its client id), or the name of a [`Principal::trusted`]
    /// caller; recorded where a credential is (a draft's `createdBy`, its approver).
    pub key_id: String,
    /// The key's organisation.
    pub organisation_id: String,
    /// The key's roles or scopes.
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

    /// Checks that the caller may use `environment_id` (else [`DomainError::Unauthenticated`],
    /// a 401: an unknown environment and a forbidden one look the same) and holds `permission`
    /// there (else [`DomainError::Forbidden`], a 403 naming the scope or roles it needs).
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
    /// The key as stored.
    pub key: ApiKey,
    /// The client secret (`wbs_...`) in clear. Only its hash is stored, so it cannot be shown
    /// again; `Debug` leaves it out.
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
    /// The token (`wbt_...`) in clear, for `Authorization: Bearer`. Only its hash is stored;
    /// `Debug` leaves it out.
    pub access_token: String,
    /// Seconds until it expires: [`ACCESS_TOKEN_TTL_SECONDS`].
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
    /// The organisation [`DEFAULT_ORGANISATION`].
    pub organisation: Organisation,
    /// Its environment [`BOOTSTRAP_ENVIRONMENT`].
    pub environment: Environment,
    /// A key named `bootstrap` holding every scope on every environment of the organisation,
    /// with its secret in clear.
    pub key: IssuedKey,
}

/// Storage of organisations, environments, keys and access tokens.
///
/// [`AuthService`] checks secrets, revocation and expiry itself: the finders return what is
/// stored, revoked keys and expired tokens included.
#[cfg_attr(feature = "mock", mockall::automock)]
#[async_trait]
pub trait TenancyRepository: Send + Sync {
    /// The organisation named exactly `name`, or `None`.
    async fn find_organisation_by_name(
        &self,
        name: &str,
    ) -> Result<Option<Organisation>, StorageError>;
    /// Inserts the organisation. A name already used must be a
    /// [`StorageError::UniqueViolation`]: [`AuthService::default_organisation`] then reads the
    /// one another process inserted meanwhile.
    async fn insert_organisation(&self, org: &Organisation) -> Result<(), StorageError>;
    /// Inserts the environment. A name already used in the organisation must be a
    /// [`StorageError::UniqueViolation`] (answered [`ConflictKind::EnvironmentNameTaken`]).
    async fn insert_environment(&self, env: &Environment) -> Result<(), StorageError>;
    /// The organisation's environments, oldest first (then by id); empty for an unknown
    /// organisation. `GET /v1/environments` keeps this order.
    async fn list_environments(
        &self,
        organisation_id: &str,
    ) -> Result<Vec<Environment>, StorageError>;
    /// Inserts the key with its environment grants, atomically: a grant of an environment
    /// that does not exist is a [`StorageError::ForeignKeyViolation`] and stores nothing.
    async fn insert_key(&self, key: &ApiKey) -> Result<(), StorageError>;
    /// The key with this id (client id), revoked or not, or `None`.
    async fn find_key(&self, key_id: &str) -> Result<Option<ApiKey>, StorageError>;
    /// The key whose `secret_hash` is `hash`, revoked or not, or `None`.
    async fn find_key_by_secret_hash(
        &self,
        hash: &SecretHash,
    ) -> Result<Option<ApiKey>, StorageError>;
    /// Marks the key revoked at `at` and deletes its access tokens, in one transaction. A key
    /// already revoked keeps its first revocation time. Returns false when there is no such key.
    async fn revoke_key(&self, key_id: &str, at: Timestamp) -> Result<bool, StorageError>;
    /// Inserts the grant. Tokens that expired before `token.created` may be deleted in the
    /// same transaction (docs/api.md, Credentials: they are swept when a new one is issued).
    async fn insert_access_token(&self, token: &AccessTokenGrant) -> Result<(), StorageError>;
    /// The grant whose `token_hash` is `hash`, expired or not, or `None`.
    async fn find_access_token(
        &self,
        hash: &SecretHash,
    ) -> Result<Option<AccessTokenGrant>, StorageError>;
    /// In one transaction: when no organisation exists yet, inserts these three records and
    /// returns true; otherwise inserts nothing and returns false. Safe for several processes
    /// starting together on one database: a process that loses the race may get false or a
    /// [`StorageError::UniqueViolation`], which [`AuthService::bootstrap`] takes as false.
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
/// let issued = auth.create_credential(&admin, "env_1", Role::Events).await?;
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
}

impl AuthService {
    /// A service storing in `repo` and reading the time from `clock`.
    pub fn new(repo: Arc<dyn TenancyRepository>, clock: Arc<dyn Clock>) -> Self {
        Self {
            repo,
            clock,
            principals: Mutex::new(HashMap::new()),
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

    /// OAuth2 client credentials: a valid, unrevoked key id + secret buys a one-hour token
    /// ([`ACCESS_TOKEN_TTL_SECONDS`]). Anything else is [`DomainError::Unauthenticated`].
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

    /// The environments the caller may use, oldest first.
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

    /// Credentials API: a legacy key with one role (`events` or `workbench`) for this
    /// environment, in the caller's organisation. The caller needs
    /// [`Permission::CredentialsWrite`] there; [`Role::Auth`] is a [`DomainError::Validation`]
    /// on `role` (docs/api.md, Credentials).
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

    /// Credentials API: revokes a key of the caller's organisation that may use this
    /// environment, and its access tokens. The caller needs [`Permission::CredentialsWrite`]
    /// there; any other key, or none, is [`DomainError::NotFound`]. Callers this service
    /// remembers are forgotten, so the key stops working in this process at once.
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

    /// Admin: a new environment in the default organisation. A blank name, one over
    /// [`NAME_MAX_CHARS`] or with control characters is a [`DomainError::Validation`] on
    /// `name`; a name the organisation already has is a [`ConflictKind::EnvironmentNameTaken`]
    /// conflict.
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
