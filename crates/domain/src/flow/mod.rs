//! Action Flows: flows, their numbered configuration versions, drafts, approvals, publishing
//! and archiving (docs/api.md, Action Flows).
//!
//! [`FlowService`] is the use case the API calls. It decides every change of versions or of
//! the archived state with the pure state machine of [`machine`], validates configurations
//! with [`config`] (whose step section is [`steps`]: the steps that wait and branch), and
//! stores flows through the [`FlowRepository`] and [`SettingsRepository`] ports
//! ([`FolderRepository`](crate::FolderRepository) to check the folder a flow is filed in).
//! [`RecentFlows`] wraps a [`FlowRepository`] for the trigger's hot path.
//!
//! Every change to a flow is decided here, from the flow as stored, and saved with a
//! compare-and-swap on the flow's `revision` together with the version row it touches, in one
//! transaction. When another change won the race the save reports a stale revision and the
//! decision is made again from the new state, so racing publishes get distinct version numbers
//! (numbers come from the flow's `latest_version` counter and are never reused, not even after
//! a discarded draft).

pub mod config;
pub mod editor;
pub mod edits;
pub mod machine;
pub mod preview;
mod problems;
mod recent;
pub mod steps;
pub mod texts;
pub mod values;

use crate::id::FlowId;
use async_trait::async_trait;
use serde_json::{Map, Value};

use crate::page::PageRequest;
use crate::{StorageError, Timestamp};

pub use recent::{RecentFlows, FLOW_TTL_MS};

/// The highest version number a flow can have: what both databases store in a version column
/// (`i32::MAX`). A version asked for beyond it names no version.
pub const MAX_FLOW_VERSION: u32 = 2_147_483_647;

/// The longest flow name, in characters (Unicode scalar values).
pub const FLOW_NAME_MAX_CHARS: usize = 255;
/// The longest flow description, in characters (Unicode scalar values).
pub const FLOW_DESCRIPTION_MAX_CHARS: usize = 4000;

/// An Action Flow: what its summary shows, and the version counters behind it (docs/api.md,
/// Action Flows). Its configurations are [`FlowVersion`]s.
#[derive(Debug, Clone, PartialEq)]
pub struct Flow {
    /// `flw_…`, given at creation; unique across environments.
    pub id: FlowId,
    /// The environment it belongs to; every read and change is scoped to it.
    pub environment_id: String,
    /// The organisation of that environment.
    pub organisation_id: String,
    /// 1 to [`FLOW_NAME_MAX_CHARS`] characters, by the rule of [`name`](crate::name).
    pub name: String,
    /// At most [`FLOW_DESCRIPTION_MAX_CHARS`] characters; empty when none was given.
    pub description: String,
    /// The folder it is filed in, of the same environment; `None` for Uncategorized.
    pub folder_id: Option<String>,
    /// Archived: its metadata stays editable, but saving drafts, publishing and starting it
    /// are refused.
    pub archived: bool,
    /// The highest version number ever given (0: none yet).
    pub latest_version: u32,
    /// The number of the version published last, the one that runs live; `None` before the
    /// first publish.
    pub published_version: Option<u32>,
    /// The number of the current draft, when there is one (at most one at a time).
    pub draft_version: Option<u32>,
    /// The variable definitions of the published configuration, else of the draft.
    pub variables: Map<String, Value>,
    /// Incremented by every saved change; the compare-and-swap token.
    pub revision: i64,
    /// When it was created.
    pub created: Timestamp,
    /// When it was last changed: metadata, drafts, approvals, publishing or archiving.
    pub updated: Timestamp,
}

/// A flow's status, as [`Flow::status`] derives it. These are also the values of the list's
/// `status` filter (`DRAFT`, `PUBLISHED`, `ARCHIVED`; docs/api.md, Action Flows); the summary
/// shows `Published` as `active`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FlowStatus {
    /// Never published, not archived.
    Draft,
    /// Has a published version, not archived.
    Published,
    /// Archived, whether it was published or not.
    Archived,
}

impl FlowStatus {
    /// Its word in a flow's summary (docs/api.md, Action Flows: list): `active` for a
    /// published flow, `draft`, `archived`.
    ///
    /// ```
    /// use workbench_domain::flow::FlowStatus;
    /// assert_eq!(FlowStatus::Published.summary(), "active");
    /// ```
    pub fn summary(self) -> &'static str {
        match self {
            FlowStatus::Published => "active",
            FlowStatus::Draft => "draft",
            FlowStatus::Archived => "archived",
        }
    }

    /// Its name, as [`FlowStatus::parse`] reads it and a list filter is given it.
    ///
    /// ```
    /// use workbench_domain::flow::FlowStatus;
    ///
    /// assert_eq!(FlowStatus::parse(FlowStatus::Archived.as_str()), Some(FlowStatus::Archived));
    /// ```
    pub fn as_str(self) -> &'static str {
        match self {
            FlowStatus::Draft => "DRAFT",
            FlowStatus::Published => "PUBLISHED",
            FlowStatus::Archived => "ARCHIVED",
        }
    }

    /// The status named `DRAFT`, `PUBLISHED` or `ARCHIVED`, in any ASCII letter case
    /// (`published` too); `None` for anything else.
    pub fn parse(s: &str) -> Option<Self> {
        match s.to_ascii_uppercase().as_str() {
            "DRAFT" => Some(FlowStatus::Draft),
            "PUBLISHED" => Some(FlowStatus::Published),
            "ARCHIVED" => Some(FlowStatus::Archived),
            _ => None,
        }
    }
}

impl Flow {
    /// A new flow as [`FlowService::create`] starts one without a configuration: no versions,
    /// no description, not filed, not archived, at revision 0, created and updated `at`.
    ///
    /// ```
    /// use workbench_domain::flow::{Flow, FlowStatus};
    ///
    /// let flow = Flow::new("flw_1", "env_1", "org_1", "Welcome",
    ///     workbench_domain::chrono::Utc::now());
    /// assert_eq!((flow.status(), flow.latest_version, flow.revision), (FlowStatus::Draft, 0, 0));
    /// ```
    pub fn new(
        id: &str,
        environment_id: &str,
        organisation_id: &str,
        name: &str,
        at: Timestamp,
    ) -> Flow {
        Flow {
            id: id.to_owned().into(),
            environment_id: environment_id.to_owned(),
            organisation_id: organisation_id.to_owned(),
            name: name.to_owned(),
            description: String::new(),
            folder_id: None,
            archived: false,
            latest_version: 0,
            published_version: None,
            draft_version: None,
            variables: Map::new(),
            revision: 0,
            created: at,
            updated: at,
        }
    }

    /// [`FlowStatus::Archived`] when archived, else [`FlowStatus::Published`] once a version
    /// has been published, else [`FlowStatus::Draft`].
    pub fn status(&self) -> FlowStatus {
        if self.archived {
            FlowStatus::Archived
        } else if self.published_version.is_some() {
            FlowStatus::Published
        } else {
            FlowStatus::Draft
        }
    }
}

/// The stored status of a version. Archiving a flow changes none of its versions; what a
/// version shows is [`FlowVersion::shown_status`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VersionStatus {
    /// The flow's current draft: it can still be saved again, approved, published or
    /// discarded.
    Draft,
    /// Published, directly or as a draft; a published version never changes again.
    Published,
}

crate::spelling::spelled!(VersionStatus {
    Draft => "DRAFT",
    Published => "PUBLISHED",
});

/// One numbered configuration of a flow (docs/api.md, Action Flows: Versions).
#[derive(Debug, Clone, PartialEq)]
pub struct FlowVersion {
    /// The flow it belongs to (`flowConfigId` in the API).
    pub flow_id: String,
    /// Its number, from the flow's `latest_version` counter: 1, 2, … per flow, never reused.
    pub version: u32,
    /// Draft or published, as stored.
    pub status: VersionStatus,
    /// The configuration as saved, unknown fields included; it was valid
    /// ([`config::validate`]) when saved.
    pub config: Value,
    /// The key that saved (or published) this configuration.
    pub created_by: String,
    /// The key that approved the draft, if any; saving the draft again clears it.
    pub approved_by: Option<String>,
    /// When the draft was approved, if it was.
    pub approved: Option<Timestamp>,
    /// When it was published; `None` while a draft.
    pub published: Option<Timestamp>,
    /// When the version was first saved.
    pub created: Timestamp,
    /// When its configuration was last saved, or when it was published (an approval leaves
    /// it as it is).
    pub updated: Timestamp,
}

/// The status a version shows: versions of an archived flow show `ARCHIVED`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ShownStatus {
    /// The draft of a flow that is not archived (`DRAFT`).
    Draft,
    /// A published version of a flow that is not archived (`PUBLISHED`).
    Published,
    /// Any version of an archived flow (`ARCHIVED`).
    Archived,
}

impl FlowVersion {
    /// The status this version shows as a version of `flow`: [`ShownStatus::Archived`] when
    /// the flow is archived, else its own [`status`](Self::status).
    pub fn shown_status(&self, flow: &Flow) -> ShownStatus {
        match (flow.archived, self.status) {
            (true, _) => ShownStatus::Archived,
            (false, VersionStatus::Draft) => ShownStatus::Draft,
            (false, VersionStatus::Published) => ShownStatus::Published,
        }
    }
}

/// Which version to read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VersionRef {
    /// The newest version of any status.
    Latest,
    /// The version with this number.
    Number(u32),
}

/// The version row a saved change touches.
#[derive(Debug, Clone, PartialEq)]
pub enum VersionChange {
    /// No version row changes (metadata, archiving).
    None,
    /// Insert this new version (a first draft, a direct publish).
    Insert(FlowVersion),
    /// Replace the stored version with this one's number (a draft saved again, approved or
    /// published).
    Update(FlowVersion),
    /// Delete the version with this number (a discarded draft).
    Delete(u32),
    /// The change, and with it a cancel task of the flow's active instances of the versions
    /// before the one published (a publish with `cancelActiveInstances`, contract §21).
    Cancelling(Box<VersionChange>, CancelOlder),
}

/// A cancel task a publish writes with its version: it cancels the flow's active instances of
/// every version before `before_version`, and their open cards, as `POST .../task/cancel`
/// does (docs/api.md, Cancel).
#[derive(Debug, Clone, PartialEq)]
pub struct CancelOlder {
    /// The task's id, a UUID, which the publish answers.
    pub task_id: String,
    /// The version published.
    pub before_version: u32,
    /// When the publish was decided: the task covers the invocations created up to then.
    pub at: Timestamp,
}

/// List filters, applied together.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FlowFilter {
    /// Case-insensitive "contains" (the service lower-cases it; storage compares it with the
    /// lower-cased name).
    pub name_contains: Option<String>,
    /// Only flows with this [`Flow::status`].
    pub status: Option<FlowStatus>,
    /// Only flows in one folder, or only flows in none.
    pub folder: Option<FolderFilter>,
}

/// Which flows a list keeps by their folder.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FolderFilter {
    /// Flows filed in the folder with this id (`folderId`).
    In(String),
    /// Flows filed in no folder (`uncategorized=true`).
    Uncategorized,
}

/// An environment's Action Flow settings (docs/api.md, Action Flows: Settings). The default,
/// until settings are saved, is every setting off.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct EnvironmentSettings {
    /// Configurations are published only as drafts approved by a credential other than the
    /// one that saved them; a direct publish is refused. Off by default.
    pub approvals_enabled: bool,
}

/// Storage of Action Flows and their versions, the port behind [`FlowService`].
///
/// A flow and its versions change together: [`save`](Self::save) is a compare-and-swap on the
/// flow's `revision` that applies the version change in the same transaction. Flows are read
/// within their environment (another environment's flow is invisible); flow ids are unique
/// across environments, so versions are read by flow id alone. The executable cases of the
/// `contract` module (feature `contract`) hold implementations to all of this; the SQLite,
/// PostgreSQL and in-memory stores pass them.
#[cfg_attr(feature = "mock", mockall::automock)]
#[async_trait]
pub trait FlowRepository: Send + Sync {
    /// Inserts a new flow and, when given, its first version, atomically. A `folder_id` that
    /// is not a folder of the flow's environment (missing, or another environment's) is a
    /// [`StorageError::ForeignKeyViolation`], and nothing is inserted.
    async fn insert(&self, flow: &Flow, first: Option<FlowVersion>) -> Result<(), StorageError>;
    /// The flow with this id in the environment, as last saved; `None` when there is none
    /// (a flow of another environment included).
    async fn get(&self, environment_id: &str, flow_id: &str) -> Result<Option<Flow>, StorageError>;
    /// Flows of the environment matching every filter given, newest first (by id,
    /// descending), after the flow `page.after` (ids below it), at most `page.limit + 1` of
    /// them (the extra one tells that more follow).
    ///
    /// `filter.name_contains` comes lower-cased: a flow matches when its lower-cased name
    /// contains it literally (`%` and `_` are not wildcards). `filter.status` compares with
    /// [`Flow::status`]; [`FolderFilter::Uncategorized`] keeps the flows filed in no folder.
    async fn list(
        &self,
        environment_id: &str,
        filter: &FlowFilter,
        page: &PageRequest,
    ) -> Result<Vec<Flow>, StorageError>;
    /// A version of the flow `flow_id`: [`VersionRef::Latest`] is the highest-numbered
    /// version that exists, of any status. `None` when there is no such version, or no such
    /// flow.
    async fn get_version(
        &self,
        flow_id: &str,
        version: VersionRef,
    ) -> Result<Option<FlowVersion>, StorageError>;
    /// In one transaction: writes `flow` (with `revision` = `expected_revision + 1`) only if
    /// the stored revision is still `expected_revision` — else
    /// [`StorageError::StaleRevision`] and nothing changes, not even the version rows — then
    /// applies `change` to the version rows. Of racing saves on one revision exactly one
    /// succeeds. A flow that does not exist in its environment is `StaleRevision` too; a
    /// version to insert whose number exists is a [`StorageError::UniqueViolation`].
    async fn save(
        &self,
        flow: &Flow,
        expected_revision: i64,
        change: VersionChange,
    ) -> Result<(), StorageError>;
}

/// Storage of each environment's [`EnvironmentSettings`], the port behind
/// [`FlowService::settings`] and [`FlowService::put_settings`]. Settings are kept per
/// environment (the executable cases of the `contract` module, feature `contract`, check it).
#[cfg_attr(feature = "mock", mockall::automock)]
#[async_trait]
pub trait SettingsRepository: Send + Sync {
    /// The environment's settings; the defaults (every setting off) when none were saved.
    async fn get(&self, environment_id: &str) -> Result<EnvironmentSettings, StorageError>;
    /// Saves the environment's settings, replacing any saved before; `at` is the time of the
    /// change. Other environments' settings stay as they are.
    async fn put(
        &self,
        environment_id: &str,
        settings: EnvironmentSettings,
        at: Timestamp,
    ) -> Result<(), StorageError>;
}

/// A create request.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CreateFlow {
    /// 1 to [`FLOW_NAME_MAX_CHARS`] characters, by the rule of [`name`](crate::name).
    pub name: String,
    /// At most [`FLOW_DESCRIPTION_MAX_CHARS`] characters; `None` is an empty description.
    pub description: Option<String>,
    /// A folder of the environment to file the flow in; `None` or `Some("")` for none.
    pub folder_id: Option<String>,
    /// A configuration: when given, version 1 is a draft holding it.
    pub config: Option<Value>,
}

/// A metadata update: `None` leaves a field as it is; `folder_id: Some(None)` un-files.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct UpdateFlow {
    /// A new name, checked like [`CreateFlow::name`].
    pub name: Option<String>,
    /// A new description, checked like [`CreateFlow::description`].
    pub description: Option<String>,
    /// A folder to file the flow in: `Some(Some(id))` a folder of the environment,
    /// `Some(None)` or `Some(Some(""))` none.
    pub folder_id: Option<Option<String>>,
}

mod service;

pub use service::FlowService;

#[cfg(test)]
mod tests;
