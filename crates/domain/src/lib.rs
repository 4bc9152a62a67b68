//! The Workbench domain: entities, rules, use-case services and the ports (traits) they need.
//!
//! This crate is pure: it knows nothing of HTTP, SQL or async runtimes. Adapters implement the
//! port traits (`*Repository`, [`Clock`], [`HealthProbe`], the transports); the services
//! enforce the rules and call them. Every service future is `Send`, so the services can be
//! spawned on a multi-threaded runtime. The repository's `docs/` folder states the rules the
//! doc comments refer to (`docs/api.md`, `docs/architecture.md`).
//!
//! # The rules, without a store
//!
//! Four rule sets are pure functions, used by the services themselves and callable on their
//! own, with no store, runtime or caller.
//!
//! Folders ([`folder::rules`]): names, depth, names unique among siblings.
//!
//! ```
//! use workbench_domain::folder::{rules, CreateFolder};
//!
//! let request = CreateFolder { name: "Onboarding".into(), parent_id: None };
//! assert_eq!(rules::check_create(&[], &request).unwrap(), None);
//! assert!(!rules::validate_name("name", "Sales/EMEA").is_empty());
//! ```
//!
//! The Action Flow state machine ([`flow::machine`]): a flow and a command in, the next
//! state and its version change out.
//!
//! ```
//! use workbench_domain::flow::machine::{decide, Command, Context};
//! # use workbench_domain::Flow;
//! # let now = workbench_domain::chrono::Utc::now();
//! # let flow = Flow { archived: true, latest_version: 1, published_version: Some(1),
//! #     ..Flow::new("flw_1", "env_1", "org_1", "Welcome", now) };
//! let context = Context { by: "key_1", approvals_enabled: false, now };
//! // `flow` is archived: it must be unarchived before a new version is published.
//! let config = workbench_domain::serde_json::json!({"type": "card"});
//! assert!(decide(&flow, None, &Command::Publish(config), &context).is_err());
//! let unarchived = decide(&flow, None, &Command::SetArchived(false), &context).unwrap();
//! assert!(!unarchived.flow.archived);
//! ```
//!
//! Trigger validation ([`trigger::parse`], with [`flow::config::validate`] for
//! configurations): every problem of a request at once, each at its path.
//!
//! ```
//! use workbench_domain::serde_json::json;
//!
//! let problems = workbench_domain::trigger::parse(&json!({
//!     "flows": [{"target": {"targetUserIds": []}, "payload": {}}]
//! }))
//! .unwrap_err();
//! assert!(problems.iter().any(|p| p.field.starts_with("flows[0].target")));
//! ```
//!
//! The idempotency of invocation ids ([`trigger::idempotency`]): replay, 409 or 422.
//!
//! ```
//! use workbench_domain::trigger::idempotency::{decide, Reuse, RunKey};
//! use workbench_domain::trigger::Mode;
//!
//! let asked = RunKey { flow_id: "flw_1", mode: Mode::Live, fingerprint: "ab12" };
//! let stored = RunKey { mode: Mode::Test, ..asked };
//! assert_eq!(decide(&asked, Some(&asked)), Reuse::Replay);
//! assert_eq!(decide(&asked, Some(&stored)), Reuse::Mismatch);
//! ```
//!
//! # A service over in-memory stores
//!
//! With the `memory` feature, `memory::MemoryStore` holds folders, flows and settings. A
//! service that authenticated its own callers acts for them as a [`Principal::trusted`]: the
//! services keep their permission checks, and a trusted principal holds every permission in
//! the environments it names.
//!
//! ```
//! # #[cfg(feature = "memory")] {
//! use std::sync::Arc;
//! use workbench_domain::flow::CreateFlow;
//! use workbench_domain::memory::MemoryStore;
//! use workbench_domain::prelude::*;
//!
//! # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
//! let store = Arc::new(MemoryStore::new());
//! let clock = Arc::new(SystemClock);
//! let flows = FlowService::new(store.clone(), store.clone(), store, clock);
//! let who = Principal::trusted("campaigns", "org_1", &["env_1"]);
//! let create = CreateFlow { name: "Welcome".into(), ..Default::default() };
//! let flow = flows.create(&who, &"env_1".into(), create).await.unwrap();
//! assert_eq!(flows.get(&who, &"env_1".into(), &flow.id).await.unwrap().name, "Welcome");
//! # });
//! # }
//! ```
//!
//! # Features
//!
//! - `mock`: a `mockall` mock of every port trait, all at `mocks`, and
//!   `mockall` re-exported.
//! - `memory`: `memory::MemoryStore`, in-memory folders, flows and settings.
//! - `contract`: the ports' contract as executable cases (`contract`), for a store of one's
//!   own to pass, as `MemoryStore` and the SQLite and PostgreSQL adapters do.
//!
//! The crates in public signatures are re-exported: [`chrono`], [`serde`], [`serde_json`],
//! [`async_trait`], and with `mock`, `mockall`. [`prelude`] brings the services, their ports
//! and the common types in with one glob.

pub mod audience;
pub mod bulk;
pub mod cancel;
pub mod card;
#[cfg(feature = "contract")]
pub mod contract;
pub mod error;
pub mod feed;
pub mod flow;
pub mod folder;
pub mod health;
pub mod id;
pub mod json;
#[cfg(feature = "memory")]
pub mod memory;
pub mod name;
pub mod page;
pub mod push;
pub mod retention;
pub mod retry;
pub mod sdk;
pub mod secret;
mod spelling;
pub mod stats;
pub mod tasks;
pub mod tenancy;
#[cfg(feature = "mock")]
pub mod testing;
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
    KeySummary, Organisation, Permission, Principal, Role, Scope, TenancyRepository,
};
pub use time::{Clock, SystemClock, Timestamp};

// The crates that appear in this crate's public signatures, so that a service using it needs
// no version of its own to match (a `Timestamp` is a `chrono` type, configurations are
// `serde_json` values, some types derive `serde`'s traits, ports are `async_trait` traits, mocks
// are `mockall`'s).
pub use async_trait;
pub use chrono;
#[cfg(feature = "mock")]
pub use mockall;
pub use serde;
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
    pub use crate::feed::MockFeedRepository;
    pub use crate::flow::{MockFlowRepository, MockSettingsRepository};
    pub use crate::folder::MockFolderRepository;
    pub use crate::health::MockHealthProbe;
    pub use crate::push::{
        MockCredentialValidator, MockDeviceRepository, MockPushJobRepository,
        MockPushPlatformRepository, MockPushSender,
    };
    pub use crate::retention::MockPruneRepository;
    pub use crate::sdk::{MockSdkKeyRepository, MockTokenVerifier};
    pub use crate::stats::MockStatsRepository;
    pub use crate::tenancy::MockTenancyRepository;
    pub use crate::time::MockClock;
    pub use crate::trigger::instances::MockInstanceRepository;
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
    pub use crate::id::{
        AttemptId, CardId, DeliveryId, EndUserId, EnvironmentId, ErrorId, EventId, FlowId,
        FlowInstanceId, FolderId, InvocationId, KeyId, OrganisationId, PushId, PushPlatformId,
        SegmentId, StreamId, TaskId, WebhookId,
    };
    pub use crate::push::{
        CredentialValidator, DeviceRepository, DeviceService, PushJobRepository,
        PushPlatformRepository, PushPlatformService, PushSender, PushService,
    };
    pub use crate::tasks::TaskService;
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
