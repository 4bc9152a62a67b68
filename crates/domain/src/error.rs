//! Errors shared by every use case.
//!
//! Services answer with [`DomainError`]; the API layer maps each variant to one HTTP status and
//! one stable machine code. Adapters answer with [`StorageError`], which services translate
//! (a unique violation on a folder insert becomes [`ConflictKind::FolderNameTaken`], ...).

use std::fmt;

/// One problem with one input field. `field` is a JSON path into the request
/// (`name`, `flows[0].payload.cardOptions.priority`); empty for the body as a whole.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldError {
    pub field: String,
    pub message: String,
}

impl FieldError {
    pub fn new(field: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            field: field.into(),
            message: message.into(),
        }
    }
}

/// The kinds of resource a caller can fail to find.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Resource {
    Folder,
    Credential,
    Environment,
    Flow,
    FlowVersion,
    Draft,
    EndUser,
    Segment,
    Stream,
    Invocation,
    Card,
    Webhook,
    Event,
    /// A cancel or bulk start task of this action flow.
    Task,
    PushPlatform,
    Device,
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
        })
    }
}

/// Conflicts with the current state of a resource (HTTP 409).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConflictKind {
    FolderNameTaken,
    FolderHasChildren,
    EnvironmentNameTaken,
    /// A publish with a body while the flow has a draft.
    DraftExists,
    FlowArchived,
    /// Other requests kept changing the same record; the caller may retry.
    ConcurrentChange,
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
}

#[derive(Debug, thiserror::Error)]
pub enum DomainError {
    /// The request is malformed: every field problem found, not only the first.
    #[error("validation failed: {}", summarise(.0))]
    Validation(Vec<FieldError>),
    /// An Action Flow configuration is invalid: every problem found.
    #[error("invalid configuration: {}", summarise(.0))]
    InvalidConfig(Vec<FieldError>),
    #[error("{0} not found")]
    NotFound(Resource),
    #[error("{message}")]
    Conflict { kind: ConflictKind, message: String },
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
        retry_after_seconds: u64,
        message: String,
    },
    /// Approvals are enabled and the change has not been approved.
    #[error("{0}")]
    ApprovalRequired(String),
    /// A legacy FCM server key (HTTP 400 `legacy_fcm_key_unsupported`).
    #[error("{0}")]
    LegacyFcmKey(String),
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
    pub fn invalid(field: impl Into<String>, message: impl Into<String>) -> Self {
        DomainError::Validation(vec![FieldError::new(field, message)])
    }

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
    #[error("unique constraint violated: {0}")]
    UniqueViolation(String),
    #[error("foreign key constraint violated: {0}")]
    ForeignKeyViolation(String),
    /// The database cannot be reached or did not answer in time.
    /// A compare-and-swap found the record changed since it was read.
    #[error("the record changed since it was read")]
    StaleRevision,
    #[error("storage unavailable: {0}")]
    Unavailable(String),
    /// The disk (or the database server's) has no room for the write: nothing of it is stored
    /// (contract §18). Answered with 503 `storage_full`; loops back off.
    #[error("storage full: {0}")]
    Full(String),
    /// Anything else: a bug or a corrupted row. Logged, answered with a 500.
    #[error("storage failure: {0}")]
    Internal(String),
}
