//! Action Flows (spec 2.2–2.5, 3, 4.2; contract §4): flows, their numbered configuration
//! versions, drafts, approvals, publishing and archiving.
//!
//! Every change to a flow is decided here, from the flow as stored, and saved with a
//! compare-and-swap on the flow's `revision` together with the version row it touches, in one
//! transaction. When another change won the race the save reports a stale revision and the
//! decision is made again from the new state, so racing publishes get distinct version numbers
//! (numbers come from the flow's `latest_version` counter and are never reused, not even after
//! a discarded draft).

pub mod config;
pub mod machine;
mod recent;

use std::sync::Arc;

use async_trait::async_trait;
use serde_json::{Map, Value};

use self::machine::{variables_of, Command, Context};
use crate::folder::FolderRepository;
use crate::id::{new_id, IdKind};
use crate::page::{Page, PageRequest};
use crate::tenancy::{Permission, Principal};
use crate::{Clock, ConflictKind, DomainError, FieldError, Resource, StorageError, Timestamp};

pub use recent::{RecentFlows, FLOW_TTL_MS};

pub const FLOW_NAME_MAX_CHARS: usize = 255;
pub const FLOW_DESCRIPTION_MAX_CHARS: usize = 4000;
/// How often a change is decided again after losing a race before giving up with a 409.
const MAX_ATTEMPTS: usize = 8;

/// A flow (the summary record of 2.2, and the counters behind it).
#[derive(Debug, Clone, PartialEq)]
pub struct Flow {
    pub id: String,
    pub environment_id: String,
    pub organisation_id: String,
    pub name: String,
    pub description: String,
    pub folder_id: Option<String>,
    pub archived: bool,
    /// The highest version number ever given (0: none yet).
    pub latest_version: u32,
    pub published_version: Option<u32>,
    pub draft_version: Option<u32>,
    /// The variable definitions of the published configuration, else of the draft.
    pub variables: Map<String, Value>,
    /// Incremented by every saved change; the compare-and-swap token.
    pub revision: i64,
    pub created: Timestamp,
    pub updated: Timestamp,
}

/// The list filter values (contract §4), which are also what `status` reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FlowStatus {
    /// Never published, not archived.
    Draft,
    /// Has a published version, not archived.
    Published,
    Archived,
}

impl FlowStatus {
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

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VersionStatus {
    Draft,
    Published,
}

impl VersionStatus {
    /// The status as the database spells it: `DRAFT`, `PUBLISHED`.
    pub const fn as_str(self) -> &'static str {
        match self {
            VersionStatus::Draft => "DRAFT",
            VersionStatus::Published => "PUBLISHED",
        }
    }

    /// The status [`as_str`](Self::as_str) spells as `s`; None for anything else (letter
    /// case counts).
    pub fn parse(s: &str) -> Option<Self> {
        [Self::Draft, Self::Published]
            .into_iter()
            .find(|x| x.as_str() == s)
    }
}

/// One numbered configuration of a flow (2.3).
#[derive(Debug, Clone, PartialEq)]
pub struct FlowVersion {
    pub flow_id: String,
    pub version: u32,
    pub status: VersionStatus,
    pub config: Value,
    /// The key that saved (or published) this configuration.
    pub created_by: String,
    pub approved_by: Option<String>,
    pub approved: Option<Timestamp>,
    pub published: Option<Timestamp>,
    pub created: Timestamp,
    pub updated: Timestamp,
}

/// The status a version shows: versions of an archived flow show `ARCHIVED`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ShownStatus {
    Draft,
    Published,
    Archived,
}

impl FlowVersion {
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
    Number(u32),
}

/// The version row a saved change touches.
#[derive(Debug, Clone, PartialEq)]
pub enum VersionChange {
    None,
    Insert(FlowVersion),
    Update(FlowVersion),
    Delete(u32),
}

/// List filters, applied together.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FlowFilter {
    /// Case-insensitive "contains" (the service lower-cases it; storage compares it with the
    /// lower-cased name).
    pub name_contains: Option<String>,
    pub status: Option<FlowStatus>,
    pub folder: Option<FolderFilter>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FolderFilter {
    In(String),
    Uncategorized,
}

/// Environment settings (contract §4).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct EnvironmentSettings {
    pub approvals_enabled: bool,
}

#[cfg_attr(feature = "mock", mockall::automock)]
#[async_trait]
pub trait FlowRepository: Send + Sync {
    /// Inserts a new flow and, when given, its first version, atomically.
    async fn insert(&self, flow: &Flow, first: Option<FlowVersion>) -> Result<(), StorageError>;
    async fn get(&self, environment_id: &str, flow_id: &str) -> Result<Option<Flow>, StorageError>;
    /// Flows matching the filter, newest first, after the flow `page.after`, at most
    /// `page.limit + 1` of them (the extra one tells that more follow).
    async fn list(
        &self,
        environment_id: &str,
        filter: &FlowFilter,
        page: &PageRequest,
    ) -> Result<Vec<Flow>, StorageError>;
    async fn get_version(
        &self,
        flow_id: &str,
        version: VersionRef,
    ) -> Result<Option<FlowVersion>, StorageError>;
    /// In one transaction: writes `flow` (with `revision` = `expected_revision + 1`) only if
    /// the stored revision is still `expected_revision` — else `StaleRevision` and nothing
    /// changes — then applies `change` to the version rows.
    async fn save(
        &self,
        flow: &Flow,
        expected_revision: i64,
        change: VersionChange,
    ) -> Result<(), StorageError>;
}

#[cfg_attr(feature = "mock", mockall::automock)]
#[async_trait]
pub trait SettingsRepository: Send + Sync {
    /// The environment's settings; defaults when none were saved.
    async fn get(&self, environment_id: &str) -> Result<EnvironmentSettings, StorageError>;
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
    pub name: String,
    pub description: Option<String>,
    pub folder_id: Option<String>,
    pub config: Option<Value>,
}

/// A metadata update: `None` leaves a field as it is; `folder_id: Some(None)` un-files.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct UpdateFlow {
    pub name: Option<String>,
    pub description: Option<String>,
    pub folder_id: Option<Option<String>>,
}

pub struct FlowService {
    flows: Arc<dyn FlowRepository>,
    folders: Arc<dyn FolderRepository>,
    settings: Arc<dyn SettingsRepository>,
    clock: Arc<dyn Clock>,
}

fn not_found() -> DomainError {
    DomainError::NotFound(Resource::Flow)
}

fn invalid_config(errors: Vec<FieldError>) -> DomainError {
    DomainError::InvalidConfig(errors)
}

fn validate_name(errors: &mut Vec<FieldError>, field: &str, name: &str) {
    if name.trim().is_empty() {
        errors.push(FieldError::new(field, "must not be empty"));
    } else if name.chars().count() > FLOW_NAME_MAX_CHARS {
        errors.push(FieldError::new(
            field,
            format!("must be at most {FLOW_NAME_MAX_CHARS} characters"),
        ));
    } else if name.chars().any(char::is_control) {
        errors.push(FieldError::new(
            field,
            "must not contain control characters",
        ));
    }
}

fn validate_description(errors: &mut Vec<FieldError>, field: &str, description: &str) {
    if description.chars().count() > FLOW_DESCRIPTION_MAX_CHARS {
        errors.push(FieldError::new(
            field,
            format!("must be at most {FLOW_DESCRIPTION_MAX_CHARS} characters"),
        ));
    }
}

impl FlowService {
    pub fn new(
        flows: Arc<dyn FlowRepository>,
        folders: Arc<dyn FolderRepository>,
        settings: Arc<dyn SettingsRepository>,
        clock: Arc<dyn Clock>,
    ) -> Self {
        Self {
            flows,
            folders,
            settings,
            clock,
        }
    }

    /// A folder id to file a flow in: `None`/`""` un-file; otherwise it must be a folder of
    /// this environment.
    async fn check_folder(
        &self,
        env: &str,
        folder: Option<String>,
        errors: &mut Vec<FieldError>,
        field: &str,
    ) -> Result<Option<String>, DomainError> {
        match folder.filter(|f| !f.is_empty()) {
            None => Ok(None),
            Some(id) => {
                if self.folders.get(env, &id).await?.is_none() {
                    errors.push(FieldError::new(
                        field,
                        format!("`{id}` is not a folder of this environment"),
                    ));
                }
                Ok(Some(id))
            }
        }
    }

    pub async fn create(
        &self,
        who: &Principal,
        env: &str,
        request: CreateFlow,
    ) -> Result<Flow, DomainError> {
        who.authorize(env, Permission::ActionFlowsWrite)?;
        let mut errors = Vec::new();
        validate_name(&mut errors, "name", &request.name);
        let description = request.description.unwrap_or_default();
        validate_description(&mut errors, "description", &description);
        let folder_id = self
            .check_folder(env, request.folder_id, &mut errors, "folderId")
            .await?;
        let config_errors = request
            .config
            .as_ref()
            .map(|c| config::validate(c, "config"))
            .unwrap_or_default();
        if !config_errors.is_empty() {
            errors.extend(config_errors);
            return Err(invalid_config(errors));
        }
        if !errors.is_empty() {
            return Err(DomainError::Validation(errors));
        }
        let now = self.clock.now();
        let id = new_id(IdKind::Flow);
        let first = request.config.map(|config| FlowVersion {
            flow_id: id.clone(),
            version: 1,
            status: VersionStatus::Draft,
            config,
            created_by: who.key_id.clone(),
            approved_by: None,
            approved: None,
            published: None,
            created: now,
            updated: now,
        });
        let flow = Flow {
            id,
            environment_id: env.to_owned(),
            organisation_id: who.organisation_id.clone(),
            name: request.name,
            description,
            folder_id,
            archived: false,
            latest_version: u32::from(first.is_some()),
            published_version: None,
            draft_version: first.as_ref().map(|v| v.version),
            variables: first
                .as_ref()
                .map(|v| variables_of(&v.config))
                .unwrap_or_default(),
            revision: 0,
            created: now,
            updated: now,
        };
        match self.flows.insert(&flow, first).await {
            Ok(()) => Ok(flow),
            Err(StorageError::ForeignKeyViolation(_)) => Err(DomainError::invalid(
                "folderId",
                "is not a folder of this environment (it was just deleted)",
            )),
            Err(e) => Err(e.into()),
        }
    }

    pub async fn get(&self, who: &Principal, env: &str, id: &str) -> Result<Flow, DomainError> {
        who.authorize(env, Permission::ActionFlowsRead)?;
        self.flows.get(env, id).await?.ok_or_else(not_found)
    }

    pub async fn list(
        &self,
        who: &Principal,
        env: &str,
        filter: FlowFilter,
        page: PageRequest,
    ) -> Result<Page<Flow>, DomainError> {
        who.authorize(env, Permission::ActionFlowsRead)?;
        let name_contains = filter
            .name_contains
            .map(|n| n.to_lowercase())
            .filter(|n| !n.is_empty());
        let filter = FlowFilter {
            name_contains,
            ..filter
        };
        let limit = page.limit;
        let flows = self.flows.list(env, &filter, &page).await?;
        Ok(Page::from_overfetch(flows, limit, |f| f.id.clone()))
    }

    pub async fn update(
        &self,
        who: &Principal,
        env: &str,
        id: &str,
        request: UpdateFlow,
    ) -> Result<Flow, DomainError> {
        who.authorize(env, Permission::ActionFlowsWrite)?;
        let mut errors = Vec::new();
        if let Some(name) = &request.name {
            validate_name(&mut errors, "actionFlow.name", name);
        }
        if let Some(description) = &request.description {
            validate_description(&mut errors, "actionFlow.description", description);
        }
        let folder = match request.folder_id.clone() {
            Some(folder) => Some(
                self.check_folder(env, folder, &mut errors, "actionFlow.folderId")
                    .await?,
            ),
            None => None,
        };
        if self.flows.get(env, id).await?.is_none() {
            return Err(not_found());
        }
        if !errors.is_empty() {
            return Err(DomainError::Validation(errors));
        }
        self.change(env, id, |flow, now| {
            let mut next = flow.clone();
            if let Some(name) = &request.name {
                next.name = name.clone();
            }
            if let Some(description) = &request.description {
                next.description = description.clone();
            }
            if let Some(folder) = &folder {
                next.folder_id = folder.clone();
            }
            next.updated = now;
            Ok((next.clone(), VersionChange::None, next))
        })
        .await
        .map_err(|e| match e {
            DomainError::Storage(StorageError::ForeignKeyViolation(_)) => DomainError::invalid(
                "actionFlow.folderId",
                "is not a folder of this environment (it was just deleted)",
            ),
            other => other,
        })
    }

    pub async fn get_config(
        &self,
        who: &Principal,
        env: &str,
        id: &str,
        version: VersionRef,
    ) -> Result<(Flow, FlowVersion), DomainError> {
        who.authorize(env, Permission::ActionFlowsRead)?;
        let flow = self.flows.get(env, id).await?.ok_or_else(not_found)?;
        let version = self
            .flows
            .get_version(&flow.id, version)
            .await?
            .ok_or(DomainError::NotFound(Resource::FlowVersion))?;
        Ok((flow, version))
    }

    /// Publishes a new version from a configuration sent whole (docs/api.md, Action Flows).
    pub async fn publish(
        &self,
        who: &Principal,
        env: &str,
        id: &str,
        config: Value,
    ) -> Result<(Flow, FlowVersion), DomainError> {
        who.authorize(env, Permission::ActionFlowsWrite)?;
        let transition = self.command(who, env, id, Command::Publish(config)).await?;
        with_version(transition)
    }

    /// Saves the draft: replaces the current draft's configuration (which clears its
    /// approval), or starts a new draft version.
    pub async fn save_draft(
        &self,
        who: &Principal,
        env: &str,
        id: &str,
        config: Value,
    ) -> Result<(Flow, FlowVersion), DomainError> {
        who.authorize(env, Permission::ActionFlowsWrite)?;
        let transition = self
            .command(who, env, id, Command::SaveDraft(config))
            .await?;
        with_version(transition)
    }

    /// Discards the draft. Its version number is not given again.
    pub async fn discard_draft(
        &self,
        who: &Principal,
        env: &str,
        id: &str,
    ) -> Result<(), DomainError> {
        who.authorize(env, Permission::ActionFlowsWrite)?;
        self.command(who, env, id, Command::DiscardDraft).await?;
        Ok(())
    }

    /// Approves the draft. The credential that saved it cannot approve it.
    pub async fn approve_draft(
        &self,
        who: &Principal,
        env: &str,
        id: &str,
    ) -> Result<(Flow, FlowVersion), DomainError> {
        who.authorize(env, Permission::ActionFlowsWrite)?;
        let transition = self.command(who, env, id, Command::ApproveDraft).await?;
        with_version(transition)
    }

    /// Publishes the draft. With approvals enabled, the draft must have been approved.
    pub async fn publish_draft(
        &self,
        who: &Principal,
        env: &str,
        id: &str,
    ) -> Result<(Flow, FlowVersion), DomainError> {
        who.authorize(env, Permission::ActionFlowsWrite)?;
        let transition = self.command(who, env, id, Command::PublishDraft).await?;
        with_version(transition)
    }

    /// Archives (`true`) or unarchives (`false`) the flow.
    pub async fn set_archived(
        &self,
        who: &Principal,
        env: &str,
        id: &str,
        archived: bool,
    ) -> Result<Flow, DomainError> {
        who.authorize(env, Permission::ActionFlowsWrite)?;
        let transition = self
            .command(who, env, id, Command::SetArchived(archived))
            .await?;
        Ok(transition.flow)
    }

    pub async fn settings(
        &self,
        who: &Principal,
        env: &str,
    ) -> Result<EnvironmentSettings, DomainError> {
        who.authorize(env, Permission::ActionFlowsRead)?;
        Ok(self.settings.get(env).await?)
    }

    pub async fn put_settings(
        &self,
        who: &Principal,
        env: &str,
        settings: EnvironmentSettings,
    ) -> Result<EnvironmentSettings, DomainError> {
        who.authorize(env, Permission::ActionFlowsWrite)?;
        self.settings.put(env, settings, self.clock.now()).await?;
        Ok(settings)
    }

    /// Decides `command` with the state machine ([`machine::decide`]) on the flow as stored,
    /// with its draft when the command reads it, and saves the outcome.
    async fn command(
        &self,
        who: &Principal,
        env: &str,
        id: &str,
        command: Command,
    ) -> Result<machine::Transition, DomainError> {
        let approvals_enabled =
            command.needs_approval_setting() && self.settings.get(env).await?.approvals_enabled;
        if approvals_enabled && matches!(command, Command::Publish(_)) {
            // Refused before the flow is read, whether or not it exists.
            return Err(machine::publish_needs_approval());
        }
        let command = &command;
        self.change_async(env, id, move |flow: Flow, now| async move {
            let draft = match (command.reads_draft(), flow.draft_version) {
                (true, Some(number)) => {
                    self.flows
                        .get_version(&flow.id, VersionRef::Number(number))
                        .await?
                }
                _ => None,
            };
            let context = Context {
                by: &who.key_id,
                approvals_enabled,
                now,
            };
            let transition = machine::decide(&flow, draft.as_ref(), command, &context)?;
            Ok((
                transition.flow.clone(),
                transition.change.clone(),
                transition,
            ))
        })
        .await
    }

    /// Load, decide, save with compare-and-swap; decide again after a lost race.
    async fn change<T>(
        &self,
        env: &str,
        id: &str,
        decide: impl Fn(&Flow, Timestamp) -> Result<(Flow, VersionChange, T), DomainError> + Send + Sync,
    ) -> Result<T, DomainError>
    where
        T: Send,
    {
        self.change_async(env, id, |flow: Flow, now| {
            std::future::ready(decide(&flow, now))
        })
        .await
    }

    /// [`FlowService::change`] with a decision that reads (a version) before deciding. The
    /// decision's future owns the flow it is given, so the whole is `Send` (an `AsyncFn`
    /// borrowing it was not: its future's type is higher-ranked over that borrow).
    async fn change_async<T, F>(
        &self,
        env: &str,
        id: &str,
        decide: impl Fn(Flow, Timestamp) -> F + Send + Sync,
    ) -> Result<T, DomainError>
    where
        F: std::future::Future<Output = Result<(Flow, VersionChange, T), DomainError>> + Send,
    {
        for _ in 0..MAX_ATTEMPTS {
            let flow = self.flows.get(env, id).await?.ok_or_else(not_found)?;
            let expected = flow.revision;
            let (mut next, change, out) = decide(flow, self.clock.now()).await?;
            next.revision = expected + 1;
            match self.flows.save(&next, expected, change).await {
                Ok(()) => return Ok(out),
                Err(StorageError::StaleRevision) => continue,
                Err(e) => return Err(e.into()),
            }
        }
        Err(DomainError::conflict(
            ConflictKind::ConcurrentChange,
            "the flow is being changed by other requests; try again",
        ))
    }
}

/// The flow and version of a transition that produced a version.
fn with_version(transition: machine::Transition) -> Result<(Flow, FlowVersion), DomainError> {
    let version = transition.version.ok_or_else(|| {
        DomainError::Storage(StorageError::Internal(
            "a versioned change produced no version".into(),
        ))
    })?;
    Ok((transition.flow, version))
}

#[cfg(test)]
mod tests;
