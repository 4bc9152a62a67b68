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
#[cfg(feature = "contract")]
pub mod contract;
pub mod error;
pub mod flow;
pub mod folder;
pub mod health;
pub mod id;
pub mod json;
#[cfg(feature = "memory")]
pub mod memory;
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

// The crates that appear in this crate's public signatures, so that a service using it needs
// no version of its own to match (a `Timestamp` is a `chrono` type, configurations are
// `serde_json` values, ports are `async_trait` traits, mocks are `mockall`'s).
pub use async_trait;
pub use chrono;
#[cfg(feature = "mock")]
pub use mockall;
pub use serde_json;

/// Generated mocks of every port trait, at one path (feature `mock`).
///
/// ```
/// use std::sync::Arc;
/// use workbench_domain::mocks::{MockClock, MockFolderRepository};
/// use workbench_domain::FolderService;
///
/// let mut clock = MockClock::new();
/// clock.expect_now().returning(workbench_domain::chrono::Utc::now);
/// let folders = FolderService::new(Arc::new(MockFolderRepository::new()), Arc::new(clock));
/// # let _ = folders;
/// ```
#[cfg(feature = "mock")]
pub mod mocks {
    pub use crate::audience::{MockEndUserRepository, MockSegmentRepository, MockStreamRepository};
    pub use crate::bulk::MockBulkRepository;
    pub use crate::cancel::MockCancelRepository;
    pub use crate::card::MockCardRepository;
    pub use crate::flow::{MockFlowRepository, MockSettingsRepository};
    pub use crate::folder::MockFolderRepository;
    pub use crate::health::MockHealthProbe;
    pub use crate::push::{
        MockCredentialValidator, MockDeviceRepository, MockPushJobRepository,
        MockPushPlatformRepository, MockPushSender,
    };
    pub use crate::tenancy::MockTenancyRepository;
    pub use crate::time::MockClock;
    pub use crate::trigger::invocation::MockInvocationRepository;
    pub use crate::webhook::{MockWebhookRepository, MockWebhookTransport};
}

/// The services, their ports and the types most calls need, for one glob import.
///
/// ```
/// use workbench_domain::prelude::*;
///
/// fn needs_a_clock(clock: &dyn Clock) -> Timestamp {
///     clock.now()
/// }
/// assert!(needs_a_clock(&SystemClock) <= chrono::Utc::now());
/// ```
pub mod prelude {
    pub use crate::audience::{
        AudienceService, EndUserRepository, SegmentRepository, StreamRepository,
    };
    pub use crate::bulk::{BulkRepository, BulkService};
    pub use crate::cancel::{CancelRepository, CancelService};
    pub use crate::card::{CardRepository, CardService};
    pub use crate::push::{
        CredentialValidator, DeviceRepository, DeviceService, PushJobRepository,
        PushPlatformRepository, PushPlatformService, PushSender, PushService,
    };
    pub use crate::trigger::{Engine, Invocation, InvocationRepository, TriggerService};
    pub use crate::webhook::{
        DeliveryService, WebhookRepository, WebhookService, WebhookTransport,
    };
    pub use crate::{
        chrono, serde_json, AuthService, Clock, ConflictKind, DomainError, Flow, FlowRepository,
        FlowService, FlowVersion, Folder, FolderRepository, FolderService, HealthProbe, Permission,
        Principal, SettingsRepository, StorageError, SystemClock, TenancyRepository, Timestamp,
    };
}
