//! [`BulkService`]: creating tasks, receiving their files, and the worker steps that record
//! their rows through the trigger service.

use crate::id::{EnvironmentId, FlowId, TaskId};
use std::sync::Arc;

use chrono::Duration;

use super::*;
use crate::audience::EndUserRepository;
use crate::trigger::{Mode, TriggerService};
use crate::{Clock, DomainError, FlowRepository, Permission, Principal, Resource, StorageError};

mod worker;

/// Rows prepared and recorded together within a step (see [`BulkService::step`]). A step's
/// first chunk is prepared and its last recorded with nothing beside them, so smaller chunks
/// overlap more of the step; A/B measured against larger and smaller chunks (see the git
/// history of docs/benchmarks.md).
pub(super) const CHUNK_ROWS: usize = 125;
/// Bulk start from a CSV file (docs/api.md, Bulk start from CSV): creating tasks and their
/// upload URLs, receiving the uploads, reading tasks back, and the worker step that hands the
/// rows of uploaded tasks to the engine through the [`TriggerService`].
///
/// ```
/// use std::sync::Arc;
///
/// use workbench_domain::bulk::{BulkService, BulkStatus, UploadError};
/// use workbench_domain::mocks::{
///     MockBulkRepository, MockClock, MockEndUserRepository, MockFlowRepository,
///     MockInvocationRepository, MockSegmentRepository, MockStreamRepository,
/// };
/// use workbench_domain::trigger::{Mode, TriggerService};
/// use workbench_domain::{DomainError, Flow, Principal};
///
/// # let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
/// # rt.block_on(async {
/// let now = workbench_domain::chrono::Utc::now();
/// let mut clock = MockClock::new();
/// clock.expect_now().return_const(now);
/// let clock = Arc::new(clock);
/// # let flow = Flow { latest_version: 1, published_version: Some(1), revision: 1,
/// #     ..Flow::new("flw_1", "env_1", "org_1", "Onboarding", now) };
/// // `flow` is the Action Flow `flw_1` of `env_1`, published.
/// let mut flows = MockFlowRepository::new();
/// flows.expect_get().returning(move |_, _| Ok(Some(flow.clone())));
/// let flows = Arc::new(flows);
/// let mut tasks = MockBulkRepository::new();
/// tasks
///     .expect_create()
///     .withf(|t| t.status == BulkStatus::Pending && t.mode == Mode::Live)
///     .times(1)
///     .returning(|_| Ok(42));
/// // Task 42 is pending until its first upload begins.
/// let mut pending = true;
/// tasks.expect_begin_upload().times(2).returning(move |env, id, _| {
///     let began = env == "env_1" && id == 42 && pending;
///     pending = false;
///     Ok(began)
/// });
/// # let triggers = TriggerService::new(
/// #     flows.clone(),
/// #     Arc::new(MockInvocationRepository::new()),
/// #     Arc::new(MockSegmentRepository::new()),
/// #     Arc::new(MockStreamRepository::new()),
/// #     clock.clone(),
/// # );
/// // `triggers` is a `TriggerService`: it records the rows when a worker steps through them.
/// let service = BulkService::new(
///     Arc::new(tasks),
///     flows,
///     Arc::new(MockEndUserRepository::new()),
///     Arc::new(triggers),
///     clock,
///     b"a key derived from the secret key".to_vec(),
/// );
/// let who = Principal::trusted("crm-export", "org_1", &["env_1"]);
///
/// let (task, token) = service.create(&who, &"env_1".into(), &"flw_1".into(), Mode::Live).await?;
/// assert_eq!((task.id, task.status.public()), (42, "pending"));
///
/// // The token of the upload URL is its credential: one upload of this task.
/// let grant = service.begin_upload(&token).await.expect("the first upload");
/// assert_eq!((grant.environment_id.as_str(), grant.task_id), ("env_1", 42));
/// let again = service.begin_upload(&token).await;
/// assert!(matches!(again, Err(UploadError::AlreadyUploaded)), "{again:?}");
/// let forged = service.begin_upload("eyJ0YXNrIjo0Mn0.c2lnbmVk").await;
/// assert!(matches!(forged, Err(UploadError::Grant(_))), "{forged:?}");
///
/// // A task id is a positive whole number.
/// let status = service.status(&who, &"env_1".into(), &"flw_1".into(), &"forty-two".into()).await;
/// let Err(DomainError::Validation(problems)) = status else { panic!("{status:?}") };
/// assert_eq!(problems[0].field, "taskId");
/// # Ok::<(), DomainError>(())
/// # }).unwrap();
/// ```
pub struct BulkService {
    tasks: Arc<dyn BulkRepository>,
    flows: Arc<dyn FlowRepository>,
    users: Arc<dyn EndUserRepository>,
    triggers: Arc<TriggerService>,
    clock: Arc<dyn Clock>,
    key: Vec<u8>,
    claims: crate::unit::Claims,
}

impl BulkService {
    /// A service over these ports, with a 30-second lease on each claimed task. `triggers`
    /// validates and records the rows' elements; `upload_key` signs and checks upload URLs
    /// ([`UploadGrant`]): the URLs given out are valid only while the service has the same key.
    pub fn new(
        tasks: Arc<dyn BulkRepository>,
        flows: Arc<dyn FlowRepository>,
        users: Arc<dyn EndUserRepository>,
        triggers: Arc<TriggerService>,
        clock: Arc<dyn Clock>,
        upload_key: Vec<u8>,
    ) -> Self {
        Self {
            tasks,
            flows,
            users,
            triggers,
            clock,
            key: upload_key,
            claims: crate::unit::Claims::default(),
        }
    }

    /// Writes refused since the last call because the task's lease had passed to another
    /// holder (docs/architecture.md, Time, leases and fencing).
    pub fn take_stale(&self) -> u64 {
        self.claims.take_stale()
    }

    /// The same service with another lease: how long a claimed task stays with its worker
    /// before another may take it over.
    pub fn with_lease(mut self, lease: Duration) -> Self {
        self.claims.lease = lease;
        self
    }

    /// A new pending task for the flow, and the token of its upload URL
    /// (`{public url}/uploads/csv/{token}`), valid for [`UPLOAD_URL_MINUTES`].
    ///
    /// Needs `action_flows:trigger` ([`DomainError::Unauthenticated`] for an environment the
    /// caller may not use, [`DomainError::Forbidden`] without the permission). Fails with
    /// [`DomainError::NotFound`] of [`Resource::Flow`] when the environment has no such flow,
    /// and of [`Resource::FlowVersion`] when it has nothing `mode` runs: live needs a
    /// published, unarchived flow, test a draft or a published version. A task waiting for its
    /// upload holds no bulk-task slot, so this is never refused for slots.
    pub async fn create(
        &self,
        who: &Principal,
        env: &EnvironmentId,
        flow_id: &FlowId,
        mode: Mode,
    ) -> Result<(BulkTask, String), DomainError> {
        who.authorize(env, Permission::ActionFlowsTrigger)?;
        let flow = self
            .flows
            .get(env, flow_id)
            .await?
            .ok_or(DomainError::NotFound(Resource::Flow))?;
        let runnable = match mode {
            Mode::Live => flow.published_version.is_some() && !flow.archived,
            Mode::Test => flow.draft_version.or(flow.published_version).is_some(),
        };
        if !runnable {
            return Err(DomainError::NotFound(Resource::FlowVersion));
        }
        // A task waiting for its upload holds no slot (docs/api.md, Bulk start from CSV): an
        // upload accepted while every slot is taken waits, queued, and is never refused.
        let now = self.clock.now();
        let mut task = BulkTask::new(env, &flow.id, mode, now);
        task.id = self.tasks.create(&task).await?;
        let token = UploadGrant {
            environment_id: env.as_str().to_owned(),
            flow_id: task.flow_id.clone(),
            task_id: task.id,
            mode,
            expires: (now + Duration::minutes(UPLOAD_URL_MINUTES)).timestamp(),
        }
        .sign(&self.key);
        Ok((task, token))
    }

    /// The task `task_id` of the flow, for `GET .../csv-task/{taskId}/status`.
    ///
    /// Needs `action_flows:read`. Fails with [`DomainError::Validation`] on `taskId` when
    /// `task_id` is not a positive whole number, and [`DomainError::NotFound`] of
    /// [`Resource::Task`] when the environment has no such task of this flow.
    pub async fn status(
        &self,
        who: &Principal,
        env: &EnvironmentId,
        flow_id: &FlowId,
        task_id: &TaskId,
    ) -> Result<BulkTask, DomainError> {
        who.authorize(env, Permission::ActionFlowsRead)?;
        let id: i64 = task_id.parse().ok().filter(|n| *n > 0).ok_or_else(|| {
            DomainError::invalid("taskId", "must be a task id (a positive whole number)")
        })?;
        self.tasks
            .get(env, id)
            .await?
            .filter(|t| t.flow_id == flow_id)
            .ok_or(DomainError::NotFound(Resource::Task))
    }

    /// Checks an upload URL's token and starts the task's one upload (pending → uploading).
    /// Answers the grant, which the calls that follow take: [`add_rows`](Self::add_rows), then
    /// [`finish_upload`](Self::finish_upload) or [`fail_upload`](Self::fail_upload).
    ///
    /// The URL is the only credential. Fails with [`UploadError::Grant`] when the token is
    /// tampered with or has expired, and [`UploadError::AlreadyUploaded`] when the task is not
    /// pending: an upload of it began already, also one that failed.
    pub async fn begin_upload(&self, token: &str) -> Result<UploadGrant, UploadError> {
        let grant = UploadGrant::verify(token, &self.key, self.clock.now())?;
        if !self
            .tasks
            .begin_upload(&grant.environment_id, grant.task_id, self.clock.now())
            .await?
        {
            return Err(UploadError::AlreadyUploaded);
        }
        Ok(grant)
    }

    /// Stores rows of the upload `grant` is for, each (row number from 1, cells), as they are
    /// read; nothing is checked here (see [`BulkRepository::add_rows`]). Only for a grant
    /// [`begin_upload`](Self::begin_upload) answered.
    pub async fn add_rows(
        &self,
        grant: &UploadGrant,
        rows: Vec<(u64, Vec<String>)>,
    ) -> Result<(), StorageError> {
        self.tasks
            .add_rows(&grant.environment_id, grant.task_id, rows)
            .await
    }

    /// Ends an upload whose rows are all stored: the task becomes processing, queued for a
    /// bulk-task slot, with `header` (the cells of the header row, which must be a header
    /// [`CsvHeader::parse`] accepts: a step fails a task whose header it cannot read) and
    /// `rows` as its number of rows. Answers the task as stored; [`DomainError::NotFound`] of
    /// [`Resource::Task`] when it is gone.
    pub async fn finish_upload(
        &self,
        grant: &UploadGrant,
        header: Vec<String>,
        rows: u64,
    ) -> Result<BulkTask, DomainError> {
        self.tasks
            .finish_upload(
                &grant.environment_id,
                grant.task_id,
                header,
                rows,
                self.clock.now(),
            )
            .await?;
        self.tasks
            .get(&grant.environment_id, grant.task_id)
            .await?
            .ok_or(DomainError::NotFound(Resource::Task))
    }

    /// Fails the task of an upload that broke off or could not be read: `failed`, `reason` its
    /// error (row 0), its stored rows deleted.
    pub async fn fail_upload(
        &self,
        grant: &UploadGrant,
        reason: String,
    ) -> Result<(), StorageError> {
        self.tasks
            .fail(
                &grant.environment_id,
                grant.task_id,
                file_error(reason),
                self.clock.now(),
                None,
            )
            .await
            .map(|_| ())
    }
}

/// A problem of the file as a whole: row 0.
fn file_error(message: String) -> Vec<RowError> {
    vec![RowError { row: 0, message }]
}
