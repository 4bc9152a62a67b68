//! Tenancy and credentials: organisations own environments; API keys carry legacy roles or
//! fine-grained scopes and are granted some or all environments of their organisation. A bearer
//! is either a key secret or an access token exchanged for one (docs/api.md, Credentials;
//! docs/operations.md, Admin commands).

use crate::id::{EnvironmentId, KeyId, OrganisationId};
use std::fmt;

use async_trait::async_trait;

use crate::secret::SecretHash;
use crate::{DomainError, PageRequest, StorageError, Timestamp};

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
    pub id: OrganisationId,
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
    pub id: EnvironmentId,
    /// The organisation it belongs to.
    pub organisation_id: String,
    /// Unique within the organisation: not blank, at most [`NAME_MAX_CHARS`] characters, no
    /// control characters.
    pub name: String,
    /// When it was created; environments are listed oldest first.
    pub created: Timestamp,
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

impl EnvironmentGrant {
    /// As a list shows it: whether it is every environment, and the environments granted one
    /// by one (none when it is every environment).
    ///
    /// ```
    /// use workbench_domain::EnvironmentGrant;
    ///
    /// assert_eq!(EnvironmentGrant::All.listed(), (true, Vec::<String>::new()));
    /// let only = EnvironmentGrant::Only(vec!["env_1".into()]);
    /// assert_eq!(only.listed(), (false, vec!["env_1".to_owned()]));
    /// ```
    pub fn listed(self) -> (bool, Vec<String>) {
        match self {
            EnvironmentGrant::All => (true, Vec::new()),
            EnvironmentGrant::Only(ids) => (false, ids),
        }
    }
}

/// An API key as stored: an OAuth client whose secret is kept only as its hash.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiKey {
    /// The OAuth client id (`key_...`).
    pub id: KeyId,
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

/// A key as a list shows it: the key, and when it last authenticated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeySummary {
    /// The key (its secret's hash is never shown).
    pub key: ApiKey,
    /// When it last authenticated, to the minute; `None` if never.
    pub last_used: Option<Timestamp>,
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
    /// The one end user this caller is, when it signed in with a user token (contract §15):
    /// it then reaches that user's own end-user routes ([`Principal::authorize_user`]) and
    /// nothing else ([`Principal::authorize`] refuses it). `None` for API keys.
    pub end_user: Option<String>,
}

/// What a user token may do on its own user's routes: read the feed and act on its cards,
/// and register, list and remove its devices.
const END_USER_PERMISSIONS: [Permission; 3] = [
    Permission::CardsWrite,
    Permission::UsersRead,
    Permission::UsersWrite,
];

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
            end_user: None,
        }
    }

    /// The end user `end_user` of `environment_id`, signed in with a token of the SDK key
    /// `sdk_key_id` (contract §15): it may use [`Principal::authorize_user`] for itself only.
    ///
    /// ```
    /// use workbench_domain::{DomainError, Permission, Principal};
    ///
    /// let me = Principal::end_user("sdk_1", "env_1", "u1");
    /// assert!(me.authorize_user("env_1", Permission::CardsWrite, "u1").is_ok());
    /// // Another user's routes, and every route that is not an end user's, are closed.
    /// assert!(matches!(
    ///     me.authorize_user("env_1", Permission::CardsWrite, "u2"),
    ///     Err(DomainError::Unauthenticated)
    /// ));
    /// assert!(matches!(
    ///     me.authorize("env_1", Permission::ActionFlowsRead),
    ///     Err(DomainError::Unauthenticated)
    /// ));
    /// ```
    pub fn end_user(sdk_key_id: &str, environment_id: &str, end_user: &str) -> Self {
        Self {
            key_id: format!("{sdk_key_id}/{end_user}"),
            organisation_id: String::new(),
            access: KeyAccess::Scopes(Vec::new()),
            environment_ids: vec![environment_id.to_owned()],
            end_user: Some(end_user.to_owned()),
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
        if self.end_user.is_some() || !self.environment_ids.iter().any(|e| e == environment_id) {
            return Err(DomainError::Unauthenticated);
        }
        if !self.access.allows(permission) {
            return Err(DomainError::Forbidden(permission.denial()));
        }
        Ok(())
    }

    /// Like [`Principal::authorize`], on a route of the end user `end_user` (its feed, its
    /// cards' actions, its devices): an end user's own token passes for its own routes when
    /// `permission` is one an end user has, and is refused on any other user's
    /// ([`DomainError::Unauthenticated`]); a key is checked as [`Principal::authorize`] does.
    pub fn authorize_user(
        &self,
        environment_id: &str,
        permission: Permission,
        end_user: &str,
    ) -> Result<(), DomainError> {
        match &self.end_user {
            None => self.authorize(environment_id, permission),
            Some(me)
                if me == end_user
                    && END_USER_PERMISSIONS.contains(&permission)
                    && self.environment_ids.iter().any(|e| e == environment_id) =>
            {
                Ok(())
            }
            Some(_) => Err(DomainError::Unauthenticated),
        }
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
    /// [`StorageError::UniqueViolation`] (answered [`crate::ConflictKind::EnvironmentNameTaken`]).
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
    /// Keys by id (ascending, strictly after `page.after`), at most `page.limit + 1`, revoked
    /// ones included: of `organisation_id` (every organisation when `None`), and that may use
    /// `environment_id` when given (granted it, or every environment). Each with its
    /// environment grants and when it was last used.
    async fn list_keys(
        &self,
        organisation_id: Option<String>,
        environment_id: Option<String>,
        page: &PageRequest,
    ) -> Result<Vec<KeySummary>, StorageError>;
    /// Records that the key authenticated at `at` (no error for an unknown key). Best effort:
    /// an implementation may store it after answering, so that authentication never waits on
    /// it.
    async fn mark_key_used(&self, key_id: &str, at: Timestamp) -> Result<(), StorageError>;
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

mod access;
mod service;

pub use access::{KeyAccess, Permission, Role, Scope};
pub use service::AuthService;

#[cfg(test)]
mod tests;
