//! Errors shared by every use case.
//!
//! Services answer with [`DomainError`]; the API layer maps each variant to one HTTP status and
//! one stable machine code (docs/api.md, Errors). Adapters answer with [`StorageError`], which
//! services translate (a unique violation on a folder insert becomes
//! [`ConflictKind::FolderNameTaken`], ...).

use std::fmt;

/// One problem with one input field. `field` is a JSON path into the request
/// (`name`, `flows[0].payload.cardOptions.priority`); empty for the body as a whole.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldError {
    /// The JSON path of the field; empty for the body as a whole.
    pub field: String,
    /// What is wrong with it, for the caller (`must not be empty`).
    pub message: String,
}

impl FieldError {
    /// The problem `message` with `field`.
    pub fn new(field: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            field: field.into(),
            message: message.into(),
        }
    }
}

/// The kinds of resource a caller can fail to find. `Display` names one for the 404's detail
/// (`no such folder in this environment`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Resource {
    /// A Workbench folder.
    Folder,
    /// An API key, by its client id (the Credentials API).
    Credential,
    /// An environment.
    Environment,
    /// An Action Flow.
    Flow,
    /// A configuration version of an Action Flow.
    FlowVersion,
    /// The draft of an Action Flow.
    Draft,
    /// An end user.
    EndUser,
    /// A segment of end users.
    Segment,
    /// A stream of cards.
    Stream,
    /// An invocation of an Action Flow, by its `flowInvocationId`.
    Invocation,
    /// A card of an end user.
    Card,
    /// A webhook subscription.
    Webhook,
    /// An analytics event (a webhook resend names one).
    Event,
    /// A cancel or bulk start task of this action flow.
    Task,
    /// A push notification platform.
    PushPlatform,
    /// A device of an end user.
    Device,
    /// An SDK key.
    SdkKey,
    /// A user's flow instance in an invocation of a flow that waits or branches.
    FlowInstance,
}

impl fmt::Display for Resource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Resource::Folder => "folder",
            Resource::Credential => "credential",
            Resource::Environment => "environment",
            Resource::Flow => "action flow",
            Resource::FlowVersion => "configuration version of this action flow",
            Resource::Draft => "draft of this action flow",
            Resource::EndUser => "end user",
            Resource::Segment => "segment",
            Resource::Stream => "stream",
            Resource::Invocation => "invocation of this action flow",
            Resource::Card => "card of this user",
            Resource::Webhook => "webhook subscription",
            Resource::Event => "analytics event",
            Resource::Task => "task of this action flow",
            Resource::PushPlatform => "push notification platform",
            Resource::Device => "device of this end user",
            Resource::SdkKey => "SDK key",
            Resource::FlowInstance => "flow instance of this user in this invocation",
        })
    }
}

/// Conflicts with the current state of a resource (HTTP 409). Each kind has its own code
/// (docs/api.md, Errors).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConflictKind {
    /// A sibling folder has the name.
    FolderNameTaken,
    /// A folder to delete has sub-folders.
    FolderHasChildren,
    /// The organisation has an environment of that name (admin commands only).
    EnvironmentNameTaken,
    /// A publish with a body while the flow has a draft.
    DraftExists,
    /// Publishing, saving a draft of, or starting an archived Action Flow.
    FlowArchived,
    /// Other requests kept changing the same record; the caller may retry.
    ConcurrentChange,
    /// The environment has a stream of that name.
    StreamNameTaken,
    /// The `All cards` stream cannot be deleted.
    DefaultStream,
    /// A `flowInvocationId` reused with another target or payload.
    InvocationConflict,
    /// An action on a card in a closed state.
    CardClosed,
    /// An action on an embargoed or snoozed card.
    CardNotActive,
    /// The environment has the maximum number of webhook subscriptions.
    SubscriptionLimit,
    /// A permanent delete of a subscription that is still enabled.
    SubscriptionEnabled,
    /// Resend or recover on a disabled subscription.
    SubscriptionDisabled,
    /// A second upload to a bulk task's upload URL.
    AlreadyUploaded,
    /// A second platform for one environment, app and platform.
    PlatformExists,
    /// Delete of an enabled push platform.
    PlatformEnabled,
    /// The environment has an SDK key of that name.
    SdkKeyNameTaken,
    /// The environment has the maximum number of SDK keys.
    SdkKeyLimit,
    /// An end user's own token registering a device token that another user holds.
    DeviceTaken,
}

/// What a use case answers when it does not succeed. The API layer maps each variant to one
/// HTTP status and code (docs/api.md, Errors; docs/architecture.md, Errors).
#[derive(Debug, thiserror::Error)]
pub enum DomainError {
    /// The request is malformed: every field problem found, not only the first.
    #[error("validation failed: {}", summarise(.0))]
    Validation(Vec<FieldError>),
    /// An Action Flow configuration is invalid: every problem found.
    #[error("invalid configuration: {}", summarise(.0))]
    InvalidConfig(Vec<FieldError>),
    /// No such resource in the environment, or none the caller may see (HTTP 404).
    #[error("{0} not found")]
    NotFound(Resource),
    /// The request conflicts with the current state of a resource (HTTP 409).
    #[error("{message}")]
    Conflict {
        /// Which conflict; it chooses the code.
        kind: ConflictKind,
        /// What conflicts, for the caller.
        message: String,
    },
    /// No usable credential, or no access to the environment named in the path
    /// (the two are indistinguishable to the caller on purpose).
    #[error("unauthenticated")]
    Unauthenticated,
    /// A valid credential for the environment, without the role or scope the operation needs.
    #[error("{0}")]
    Forbidden(String),
    /// A `flowInvocationId` reused with another flow or mode (HTTP 422).
    #[error("{0}")]
    InvocationMismatch(String),
    /// Too many tasks running; try again after the given delay (HTTP 429).
    #[error("{message}")]
    RateLimited {
        /// Seconds to wait before trying again (`Retry-After`).
        retry_after_seconds: u64,
        /// What is limited, for the caller.
        message: String,
    },
    /// Approvals are enabled and the change has not been approved.
    #[error("{0}")]
    ApprovalRequired(String),
    /// An end user's token refused (contract §15): 401 with `WWW-Authenticate: Bearer
    /// error="invalid_token"` and the refusal's code, or 403 for another user's token.
    #[error("token refused: {}", .0.code())]
    TokenRefused(TokenRefusal),
    /// A legacy FCM server key (HTTP 400 `legacy_fcm_key_unsupported`).
    #[error("{0}")]
    LegacyFcmKey(String),
    /// A fault of storage that the service did not translate: 503 `storage_full` for
    /// [`StorageError::Full`], 503 `service_unavailable` for [`StorageError::Unavailable`],
    /// otherwise 500 `internal_error` (logged; the cause is never shown to the caller).
    #[error(transparent)]
    Storage(#[from] StorageError),
}

fn summarise(errors: &[FieldError]) -> String {
    errors
        .iter()
        .map(|e| format!("{}: {}", e.field, e.message))
        .collect::<Vec<_>>()
        .join("; ")
}

impl DomainError {
    /// A [`DomainError::Validation`] with one problem, `message` on `field`.
    pub fn invalid(field: impl Into<String>, message: impl Into<String>) -> Self {
        DomainError::Validation(vec![FieldError::new(field, message)])
    }

    /// A [`DomainError::Conflict`] of `kind`.
    pub fn conflict(kind: ConflictKind, message: impl Into<String>) -> Self {
        DomainError::Conflict {
            kind,
            message: message.into(),
        }
    }
}

/// What a storage adapter can report. Constraint violations are named so services can turn
/// them into the right domain answer; everything else is a fault of the system, not the caller.
#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
pub enum StorageError {
    /// A unique constraint refused the write (the text says which); nothing of it is stored.
    /// Each port says where it must be returned, for the service to answer it: a name already
    /// taken becomes a conflict, a record another process inserted first is read back.
    #[error("unique constraint violated: {0}")]
    UniqueViolation(String),
    /// A foreign key refused the write: a reference to a record that does not exist, or the
    /// delete of one still referenced; nothing of it is stored. Services answer it where a
    /// port says it is expected (a folder's unknown parent, a folder with sub-folders).
    #[error("foreign key constraint violated: {0}")]
    ForeignKeyViolation(String),
    /// A compare-and-swap found the record changed since it was read; nothing is written. The
    /// caller reads again and decides anew.
    #[error("the record changed since it was read")]
    StaleRevision,
    /// The database cannot be reached or did not answer in time (docs/operations.md, A database
    /// that hangs). Answered with 503 `service_unavailable`; loops wait it out.
    #[error("storage unavailable: {0}")]
    Unavailable(String),
    /// The disk (or the database server's) has no room for the write: nothing of it is stored
    /// (docs/operations.md, Durability and disk space). Answered with 503 `storage_full`;
    /// loops back off.
    #[error("storage full: {0}")]
    Full(String),
    /// Anything else: a bug or a corrupted row. Logged, answered with a 500.
    #[error("storage failure: {0}")]
    Internal(String),
}

/// Why an end user's token is refused (contract §15; the rules are in [`crate::sdk`]). Each
/// is a 401 with `WWW-Authenticate: Bearer
/// error="invalid_token"` and the problem code [`TokenRefusal::code`], except
/// [`TokenRefusal::OtherUser`], a 403: the token is good, for another user.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TokenRefusal {
    /// Not a JWT, or a claim the checks need is missing or not of its type.
    Malformed,
    /// `kid` names no SDK key of the environment.
    UnknownKey,
    /// `alg` is not the one algorithm the key's type allows (`none`, `HS*`, or the other
    /// type's): checked before the signature, so a key is never used with another algorithm.
    Algorithm,
    /// The signature does not verify with the key.
    Signature,
    /// `exp` has passed, or `nbf` has not come yet (each with [`crate::sdk::LEEWAY_SECONDS`]).
    Expired,
    /// `exp - iat` is longer than the key allows, or `iat` is in the future.
    Lifetime,
    /// `iss` is not one of the key's `allowedIssuers`.
    Issuer,
    /// `sub` is another end user than the path's.
    OtherUser,
}

impl TokenRefusal {
    /// The problem `code` of the refusal: `token_malformed`, `token_unknown_key`,
    /// `token_signature` (a wrong algorithm too), `token_expired`, `token_lifetime`,
    /// `token_issuer`; `forbidden` for another user's token.
    pub const fn code(self) -> &'static str {
        match self {
            TokenRefusal::Malformed => "token_malformed",
            TokenRefusal::UnknownKey => "token_unknown_key",
            TokenRefusal::Algorithm | TokenRefusal::Signature => "token_signature",
            TokenRefusal::Expired => "token_expired",
            TokenRefusal::Lifetime => "token_lifetime",
            TokenRefusal::Issuer => "token_issuer",
            TokenRefusal::OtherUser => "forbidden",
        }
    }
}
