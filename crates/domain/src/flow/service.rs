//! [`FlowService`]: the Action Flow use cases over the flow, folder and settings ports.

mod commands;

use crate::id::{EnvironmentId, FlowId};
use std::sync::Arc;

use self::machine::variables_of;
use crate::folder::FolderRepository;
use crate::id::{new_id, IdKind};
use crate::page::{Page, PageRequest};
use crate::tenancy::{Permission, Principal};
use crate::{Clock, ConflictKind, DomainError, FieldError, Resource, StorageError, Timestamp};

use super::*;

/// How often a change is decided again after losing a race before giving up with a 409.
const MAX_ATTEMPTS: usize = 8;

/// The Action Flow use cases: create, read, list, update metadata, drafts, approvals,
/// publishing, archiving and the environment's settings (docs/api.md, Action Flows).
///
/// Every method first checks that the caller may use the environment (else
/// [`DomainError::Unauthenticated`]) and holds the permission it names (else
/// [`DomainError::Forbidden`]): [`Permission::ActionFlowsRead`] to read,
/// [`Permission::ActionFlowsWrite`] to change. A change of a flow is decided from the flow as
/// stored and saved with a compare-and-swap; after a lost race it is decided again from the
/// new state, and after eight lost races in a row the method fails with a
/// [`DomainError::Conflict`] of kind [`ConflictKind::ConcurrentChange`]. A failure of storage
/// that a method does not translate is a [`DomainError::Storage`].
///
/// ```
/// use std::sync::Arc;
/// use workbench_domain::flow::{CreateFlow, EnvironmentSettings, FlowStatus, VersionRef};
/// use workbench_domain::flow::VersionStatus;
/// use workbench_domain::memory::MemoryStore;
/// use workbench_domain::prelude::*;
/// use workbench_domain::serde_json::json;
///
/// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
/// let store = Arc::new(MemoryStore::new());
/// let flows = FlowService::new(store.clone(), store.clone(), store, Arc::new(SystemClock));
/// let env = EnvironmentId::from("env_1");
/// let alice = Principal::trusted("alice", "org_1", &["env_1"]);
/// let bob = Principal::trusted("bob", "org_1", &["env_1"]);
/// let config = json!({
///     "type": "card", "version": "1", "initialSteps": ["hello"],
///     "steps": {"hello": {"id": "hello", "type": "create-card", "next": [],
///                         "properties": {"cardTemplateId": "hello"}}},
///     "cardTemplates": {"hello": {"metadata": {"cardName": "Hello"}}}
/// });
///
/// let create = CreateFlow { name: "Welcome".into(), ..Default::default() };
/// let flow = flows.create(&alice, &env, create).await.unwrap();
/// assert_eq!((flow.status(), flow.latest_version), (FlowStatus::Draft, 0));
///
/// // Approvals are off until set: a configuration is published at once, as version 1.
/// let (flow, v1) = flows.publish(&alice, &env, &flow.id, config.clone()).await.unwrap();
/// assert_eq!((v1.version, v1.status), (1, VersionStatus::Published));
/// assert_eq!(flow.status(), FlowStatus::Published);
///
/// // With approvals on, only a draft approved by another credential is published.
/// let on = EnvironmentSettings { approvals_enabled: true };
/// flows.put_settings(&alice, &env, on).await.unwrap();
/// let direct = flows.publish(&alice, &env, &flow.id, config.clone()).await;
/// assert!(matches!(direct, Err(DomainError::ApprovalRequired(_))));
/// let (_, draft) = flows.save_draft(&alice, &env, &flow.id, config).await.unwrap();
/// assert_eq!((draft.version, draft.status), (2, VersionStatus::Draft));
/// let unapproved = flows.publish_draft(&alice, &env, &flow.id).await;
/// assert!(matches!(unapproved, Err(DomainError::ApprovalRequired(_))));
/// let by_author = flows.approve_draft(&alice, &env, &flow.id).await;
/// assert!(matches!(by_author, Err(DomainError::Forbidden(_))));
/// flows.approve_draft(&bob, &env, &flow.id).await.unwrap();
/// let (flow, v2) = flows.publish_draft(&alice, &env, &flow.id).await.unwrap();
/// assert_eq!((flow.published_version, flow.draft_version), (Some(2), None));
/// assert_eq!(v2.approved_by.as_deref(), Some("bob"));
///
/// // Earlier versions stay readable; `Latest` is the newest.
/// let read = |version| flows.get_config(&bob, &env, &flow.id, version);
/// let (_, latest) = read(VersionRef::Latest).await.unwrap();
/// assert_eq!(latest.version, 2);
/// let (_, first) = read(VersionRef::Number(1)).await.unwrap();
/// assert_eq!((first.status, first.created_by.as_str()), (VersionStatus::Published, "alice"));
///
/// // An archived flow refuses drafts.
/// flows.set_archived(&alice, &env, &flow.id, true).await.unwrap();
/// let archived = flows.save_draft(&alice, &env, &flow.id, v1.config).await;
/// assert!(matches!(
///     archived,
///     Err(DomainError::Conflict { kind: ConflictKind::FlowArchived, .. })
/// ));
/// # });
/// ```
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
    errors.extend(crate::name::check(field, name, FLOW_NAME_MAX_CHARS));
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
    /// A service over these ports: flows, the folders flows are filed in, the environments'
    /// settings, and the clock that stamps every change.
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

    /// Creates a flow with a new `flw_…` id, filed in `request.folder_id` if given, and
    /// answers it. With a configuration, version 1 is a draft holding it; without, the flow
    /// has no version yet.
    ///
    /// Needs [`Permission::ActionFlowsWrite`]. Then every problem of the request is reported
    /// at once: the name, the description, a folder that is not a folder of the environment,
    /// and the configuration ([`config::validate`]). With any problem of the configuration
    /// that is [`DomainError::InvalidConfig`] listing all of them, otherwise
    /// [`DomainError::Validation`]. A folder deleted between the check and the insert is a
    /// [`DomainError::Validation`] on `folderId` too.
    pub async fn create(
        &self,
        who: &Principal,
        env: &EnvironmentId,
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
            description,
            folder_id,
            latest_version: u32::from(first.is_some()),
            draft_version: first.as_ref().map(|v| v.version),
            variables: first
                .as_ref()
                .map(|v| variables_of(&v.config))
                .unwrap_or_default(),
            ..Flow::new(&id, env, &who.organisation_id, &request.name, now)
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

    /// The flow `id` of the environment. Needs [`Permission::ActionFlowsRead`]; fails with
    /// [`DomainError::NotFound`] when the environment has no such flow.
    pub async fn get(
        &self,
        who: &Principal,
        env: &EnvironmentId,
        id: &FlowId,
    ) -> Result<Flow, DomainError> {
        who.authorize(env, Permission::ActionFlowsRead)?;
        self.flows.get(env, id).await?.ok_or_else(not_found)
    }

    /// One page of the environment's flows matching every filter given, newest first; the
    /// page's `next_after` is the id to list after for the next page. `name_contains` is
    /// lower-cased here (an empty one filters nothing), so names match case-insensitively.
    ///
    /// Needs [`Permission::ActionFlowsRead`]. `page.limit` is not checked here: the API keeps
    /// it within 1–500.
    pub async fn list(
        &self,
        who: &Principal,
        env: &EnvironmentId,
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
        Ok(Page::from_overfetch(flows, limit, |f| f.id.clone().into()))
    }

    /// Updates the metadata a request sends (name, description, folder) and answers the flow.
    /// Fields not sent stay; an archived flow's metadata may change too.
    ///
    /// Needs [`Permission::ActionFlowsWrite`]. Then the fields are checked (under
    /// `actionFlow.name`, `actionFlow.description` and `actionFlow.folderId`: a folder that is
    /// not one of the environment), but a flow the environment does not have is
    /// [`DomainError::NotFound`] before any of their problems is reported, as
    /// [`DomainError::Validation`] listing all of them. A folder deleted before the save is a
    /// [`DomainError::Validation`] on `actionFlow.folderId` too.
    pub async fn update(
        &self,
        who: &Principal,
        env: &EnvironmentId,
        id: &FlowId,
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

    /// The flow `id` and one of its versions: the newest of any status, or the one with a
    /// number.
    ///
    /// Needs [`Permission::ActionFlowsRead`]; fails with [`DomainError::NotFound`] of
    /// [`Resource::Flow`] when the environment has no such flow, then of
    /// [`Resource::FlowVersion`] when the flow has no such version.
    pub async fn get_config(
        &self,
        who: &Principal,
        env: &EnvironmentId,
        id: &FlowId,
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

    /// The environment's settings; every setting is off until set. Needs
    /// [`Permission::ActionFlowsRead`].
    pub async fn settings(
        &self,
        who: &Principal,
        env: &EnvironmentId,
    ) -> Result<EnvironmentSettings, DomainError> {
        who.authorize(env, Permission::ActionFlowsRead)?;
        Ok(self.settings.get(env).await?)
    }

    /// Replaces the environment's settings and answers them. Needs
    /// [`Permission::EnvironmentSettingsWrite`] (role `auth` or scope
    /// `environment_settings:write`), not the permission that drafts and publishes: a key whose
    /// drafts approvals check cannot switch them off. Turning approvals on refuses direct
    /// publishing from then on; a draft approved before still counts as approved.
    pub async fn put_settings(
        &self,
        who: &Principal,
        env: &EnvironmentId,
        settings: EnvironmentSettings,
    ) -> Result<EnvironmentSettings, DomainError> {
        who.authorize(env, Permission::EnvironmentSettingsWrite)?;
        self.settings.put(env, settings, self.clock.now()).await?;
        Ok(settings)
    }

    /// Load, decide, save with compare-and-swap; decide again after a lost race.
    async fn change<T, D>(&self, env: &str, id: &str, decide: D) -> Result<T, DomainError>
    where
        T: Send,
        D: Fn(&Flow, Timestamp) -> Result<(Flow, VersionChange, T), DomainError> + Send + Sync,
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
            // A draft read after the flow changed is decided again on the flow as it is now.
            let (mut next, change, out) = match decide(flow, self.clock.now()).await {
                Err(DomainError::Storage(StorageError::StaleRevision)) => continue,
                decided => decided?,
            };
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
