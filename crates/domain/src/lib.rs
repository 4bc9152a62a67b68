//! The Workbench domain: entities, rules, use-case services and the ports (traits) they need.
//!
//! This crate is pure: it knows nothing of HTTP, SQL or async runtimes. Adapters implement the
//! port traits (`*Repository`, [`Clock`], [`HealthProbe`]); the API layer calls the services.
//! Port traits carry `#[cfg_attr(feature = "mock", mockall::automock)]` so tests of the services
//! (and of other crates) can use generated mocks.

pub mod audience;
pub mod bulk;
pub mod cancel;
pub mod card;
pub mod error;
pub mod flow;
pub mod folder;
pub mod health;
pub mod id;
pub mod json;
pub mod page;
pub mod push;
pub mod retry;
pub mod secret;
pub mod tenancy;
pub mod time;
pub mod trigger;
pub mod unit;
pub mod webhook;

pub use error::{ConflictKind, DomainError, FieldError, Resource, StorageError};
pub use flow::{Flow, FlowRepository, FlowService, FlowVersion, SettingsRepository};
pub use folder::{
    Folder, FolderRepository, FolderService, FOLDER_MAX_DEPTH, FOLDER_NAME_MAX_CHARS,
};
pub use health::HealthProbe;
pub use page::{Page, PageRequest};
pub use tenancy::{
    AccessTokenGrant, ApiKey, AuthService, Environment, EnvironmentGrant, IssuedKey, KeyAccess,
    Organisation, Permission, Principal, Role, Scope, TenancyRepository,
};
pub use time::{Clock, SystemClock, Timestamp};
