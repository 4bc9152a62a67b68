//! [`BulkService`]: creating tasks, receiving their files, and the worker steps that record
//! their rows through the trigger service.

use crate::id::{EnvironmentId, FlowId, TaskId};
use std::collections::HashMap;
use std::sync::Arc;

use chrono::Duration;
use futures_util::StreamExt;

use super::matching::{Matched, Matcher, Wanted};
use super::*;
use crate::audience::{EndUserRepository, UserQuery};
use crate::trigger::invocation::MAX_RUNNING_BULK;
use crate::trigger::{FlowElement, Mode};
use crate::trigger::{PreparedElements, TriggerService};
use crate::{
    Clock, DomainError, FlowRepository, PageRequest, Permission, Principal, Resource, StorageError,
};

/// Rows prepared and recorded together within a step (see [`BulkService::step`]). A step's
/// first chunk is prepared and its last recorded with nothing beside them, so smaller chunks
/// overlap more of the step; A/B measured against larger and smaller chunks (see the git
/// history of docs/benchmarks.md).
pub(super) const CHUNK_ROWS: usize = 125;
/// Chunks handed to the recorder and not yet recorded, at most, while the next is prepared:
/// the recorder writes the chunks waiting in one transaction, so a chunk prepared while one is
/// written joins the next.
const RECORDING: usize = 16;

/// Rows of a step prepared, to be recorded: the rows refused so far, and the rows of the
/// prepared elements, in order.
struct Chunk {
    errors: Vec<RowError>,
    rows: Vec<u64>,
    prepared: Option<PreparedElements>,
}

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
    lease: Duration,
    stale: crate::health::Stale,
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
            lease: Duration::seconds(i64::from(crate::unit::LEASE_SECONDS)),
            stale: crate::health::Stale::default(),
        }
    }

    /// Writes refused since the last call because the task's lease had passed to another
    /// holder (docs/architecture.md, Time, leases and fencing).
    pub fn take_stale(&self) -> u64 {
        self.stale.take()
    }

    /// The same service with another lease: how long a claimed task stays with its worker
    /// before another may take it over.
    pub fn with_lease(mut self, lease: Duration) -> Self {
        self.lease = lease;
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

    /// One step of background work: up to [`ROWS_PER_STEP`] rows of one task to the engine.
    ///
    /// Claims one due task (a queued one only while its environment has a bulk-task slot
    /// free: [`MAX_RUNNING_BULK`]) and records its next rows, in order, each as the invocation
    /// of one trigger element with the validation and idempotency of `/start`; a row that
    /// cannot be read, targets no user or too many, or is refused by the trigger is a row
    /// error. Then saves the progress, fenced by the task's lease and cursor; a task with no
    /// row left, or fewer than [`ROWS_PER_STEP`], is completed. A save refused because the
    /// lease had passed to another holder is counted ([`take_stale`](Self::take_stale)).
    ///
    /// Answers false when no task was due, true when one was claimed. A step that panics or
    /// fails unexpectedly is tried again, up to [`crate::unit::ATTEMPTS`] times in all; then
    /// the task fails alone, with an `errorId` in its errors and in the log
    /// (docs/operations.md, When one unit of work fails). An error that waiting cures (an
    /// unreachable database) is returned with no progress saved: the task is claimed again
    /// when its lease runs out. Rows are recorded under ids of their own (their
    /// `flowInvocationId`, else their task and number), so a step tried again records none
    /// twice.
    pub async fn step(&self) -> Result<bool, DomainError> {
        let now = self.clock.now();
        let Some(task) = self
            .tasks
            .claim(now, now + self.lease, MAX_RUNNING_BULK)
            .await?
        else {
            return Ok(false);
        };
        let (env, id, held) = (task.environment_id.clone(), task.id, task.lease_until);
        match crate::unit::attempts("csv task", &id.to_string(), || self.run_step(task.clone()))
            .await
        {
            Ok(outcome) => outcome,
            Err(failure) => {
                let errors = file_error(failure.message());
                self.held(
                    self.tasks
                        .fail(&env, id, errors, self.clock.now(), held)
                        .await?,
                );
                Ok(true)
            }
        }
    }

    /// Counts a write refused because the lease had passed to another holder.
    fn held(&self, held: bool) {
        if !held {
            self.stale.add(1);
        }
    }

    /// One step of a claimed task.
    async fn run_step(&self, mut task: BulkTask) -> Result<bool, DomainError> {
        let now = self.clock.now();
        let header = match task.header.as_deref().map(CsvHeader::parse) {
            Some(Ok(h)) => h,
            _ => {
                let held = self
                    .tasks
                    .fail(
                        &task.environment_id,
                        task.id,
                        file_error("the stored header is unreadable".into()),
                        now,
                        task.lease_until,
                    )
                    .await?;
                self.held(held);
                return Ok(true);
            }
        };
        let rows = self
            .tasks
            .rows(&task.environment_id, task.id, task.cursor, ROWS_PER_STEP)
            .await?;
        let from = task.cursor;
        if rows.is_empty() {
            task.status = BulkStatus::Completed;
            task.updated = self.clock.now();
            let held = self
                .tasks
                .save_progress(&task, from, 0, 0, Vec::new())
                .await?;
            self.held(held);
            return Ok(true);
        }
        // In chunks, each prepared while the ones before are recorded: the recorder works on
        // threads of its own (building a chunk's rows, then writing them), so a chunk is
        // handed to it as soon as it is prepared, up to RECORDING chunks at once.
        let matched = self.match_by_attributes(&task, &header, &rows).await?;
        let mut errors: Vec<RowError> = Vec::new();
        let mut recording = futures_util::stream::FuturesOrdered::new();
        for rows in rows.chunks(CHUNK_ROWS) {
            let prepare = std::pin::pin!(self.prepare_chunk(&task, &header, rows, &matched));
            let prepared = recorded_while(&mut recording, prepare, &mut errors).await?;
            recording.push_back(self.record_chunk(prepared));
            while recording.len() > RECORDING {
                if let Some(recorded) = recording.next().await {
                    errors.extend(recorded?);
                }
            }
        }
        while let Some(recorded) = recording.next().await {
            errors.extend(recorded?);
        }
        errors.sort_by_key(|e| e.row);
        let last = rows.last().map(|(n, _)| *n).unwrap_or(from);
        task.cursor = last;
        task.updated = self.clock.now();
        if rows.len() < ROWS_PER_STEP as usize {
            task.status = BulkStatus::Completed;
        }
        let failed = errors.len() as u64;
        let held = self
            .tasks
            .save_progress(&task, from, rows.len() as u64, failed, errors)
            .await?;
        self.held(held);
        Ok(true)
    }

    /// The users each of the step's rows without an `id` matches by its attributes, in one
    /// read of the environment's users (see [`super::matching`]).
    async fn match_by_attributes(
        &self,
        task: &BulkTask,
        header: &CsvHeader,
        rows: &[(u64, Vec<String>)],
    ) -> Result<HashMap<u64, Matched>, DomainError> {
        let wanted = rows
            .iter()
            .filter_map(|(number, cells)| {
                let row = header.row(cells).ok()?;
                if row.attributes.contains_key("id") {
                    return None;
                }
                let filter = row.filter().ok()?;
                Some(Wanted {
                    number: *number,
                    attributes: row.attributes.into_iter().collect(),
                    filter,
                })
            })
            .collect();
        let mut matcher = Matcher::new(wanted);
        if matcher.is_empty() {
            return Ok(HashMap::new());
        }
        let mut after = None;
        loop {
            let page = PageRequest {
                limit: 1_000,
                after: after.clone(),
            };
            let users = self
                .users
                .list(&task.environment_id, &UserQuery::default(), &page)
                .await?;
            let more = users.len() > 1_000;
            for user in users.iter().take(1_000) {
                matcher.offer(user);
            }
            if !more {
                break;
            }
            after = (users.get(999).map(|u| u.id.clone())).map(Into::into);
        }
        Ok(matcher.finish())
    }

    /// The rows' elements validated and built, not yet recorded.
    async fn prepare_chunk(
        &self,
        task: &BulkTask,
        header: &CsvHeader,
        rows: &[(u64, Vec<String>)],
        matched: &HashMap<u64, Matched>,
    ) -> Result<Chunk, DomainError> {
        let mut chunk = Chunk {
            errors: Vec::new(),
            rows: Vec::new(),
            prepared: None,
        };
        let mut elements: Vec<FlowElement> = Vec::new();
        for (number, cells) in rows {
            match self.element(task, header, *number, cells, matched).await? {
                Ok(element) => {
                    elements.push(element);
                    chunk.rows.push(*number);
                }
                Err(message) => chunk.errors.push(RowError {
                    row: *number,
                    message,
                }),
            }
        }
        if elements.is_empty() {
            return Ok(chunk);
        }
        let prepared = self
            .triggers
            .prepare_elements(&task.environment_id, &task.flow_id, task.mode, elements)
            .await;
        match prepared {
            Ok(prepared) => chunk.prepared = Some(prepared),
            // The flow was unpublished, archived or deleted meanwhile: every row fails.
            Err(e @ (DomainError::NotFound(_) | DomainError::Conflict { .. })) => {
                for row in std::mem::take(&mut chunk.rows) {
                    chunk.errors.push(RowError {
                        row,
                        message: e.to_string(),
                    });
                }
            }
            Err(other) => return Err(other),
        }
        Ok(chunk)
    }

    /// Records a prepared chunk; its rows' errors.
    async fn record_chunk(&self, chunk: Chunk) -> Result<Vec<RowError>, DomainError> {
        let mut errors = chunk.errors;
        if let Some(prepared) = chunk.prepared {
            let results = self.triggers.record_prepared(prepared).await?;
            for (row, result) in chunk.rows.iter().zip(results) {
                if let Err(message) = result {
                    errors.push(RowError { row: *row, message });
                }
            }
        }
        Ok(errors)
    }

    /// The trigger element of one row, or why the row is refused.
    async fn element(
        &self,
        task: &BulkTask,
        header: &CsvHeader,
        number: u64,
        cells: &[String],
        matched: &HashMap<u64, Matched>,
    ) -> Result<Result<FlowElement, String>, DomainError> {
        let row = match header.row(cells) {
            Ok(r) => r,
            Err(e) => return Ok(Err(e)),
        };
        let users = match self.users_of(task, &row, matched.get(&number)).await? {
            Ok(u) => u,
            Err(e) => return Ok(Err(e)),
        };
        let element = row.element(users, || format!("csv-{}-{number}", task.id));
        Ok(match crate::trigger::request::parse_element(element) {
            Ok(element) => Ok(element),
            Err(problems) => Err(problems
                .iter()
                .map(|p| format!("{}: {}", p.field.trim_start_matches("flows[0]."), p.message))
                .collect::<Vec<_>>()
                .join("; ")),
        })
    }

    /// The users a row targets: its `id` (checked against its other attributes), or the users
    /// its attributes matched, at most [`MAX_USERS_PER_ROW`] (`matched`: from
    /// [`BulkService::match_by_attributes`]).
    async fn users_of(
        &self,
        task: &BulkTask,
        row: &CsvRow,
        matched: Option<&Matched>,
    ) -> Result<Result<Vec<String>, String>, DomainError> {
        if let (Some(id), 1) = (row.attributes.get("id"), row.attributes.len()) {
            // Only the id: a user target, exactly as /start takes it (no filter to build: an
            // `id` condition on a string is always valid).
            return Ok(Ok(vec![id.clone()]));
        }
        let filter = match row.filter() {
            Ok(f) => f,
            Err(e) => return Ok(Err(e)),
        };
        let env = &task.environment_id;
        if let Some(id) = row.attributes.get("id") {
            return Ok(match self.users.get(env, id).await? {
                Some(user) if filter.matches(&user) => Ok(vec![id.clone()]),
                Some(_) => Err(format!(
                    "end user {id:?} does not have the row's target.attributes"
                )),
                None if row.attributes.len() == 1 => Ok(vec![id.clone()]),
                None => Err(format!("no end user {id:?}")),
            });
        }
        // No id: the users its attributes matched, found for the whole step at once.
        Ok(matched
            .cloned()
            .unwrap_or_else(|| Err("matches no end user".into())))
    }
}

/// Awaits `work` while the chunks in `recording` go on being recorded, collecting the row
/// errors of those that end meanwhile. `recording` is polled first, so that a chunk just
/// pushed reaches the recorder before `work` takes the thread.
async fn recorded_while<R, W, T>(
    recording: &mut futures_util::stream::FuturesOrdered<R>,
    mut work: std::pin::Pin<&mut W>,
    errors: &mut Vec<RowError>,
) -> Result<T, DomainError>
where
    R: std::future::Future<Output = Result<Vec<RowError>, DomainError>>,
    W: std::future::Future<Output = Result<T, DomainError>>,
{
    use futures_util::future::{select, Either};
    loop {
        if recording.is_empty() {
            return work.await;
        }
        match select(recording.next(), work.as_mut()).await {
            Either::Left((Some(recorded), _)) => errors.extend(recorded?),
            Either::Left((None, _)) => {}
            Either::Right((done, _)) => return done,
        }
    }
}

/// A problem of the file as a whole: row 0.
fn file_error(message: String) -> Vec<RowError> {
    vec![RowError { row: 0, message }]
}
