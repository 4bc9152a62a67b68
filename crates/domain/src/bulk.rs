//! Bulk start from a CSV file (spec 2.6, 4.2; contract §5): tasks, their signed upload URLs,
//! the mapping of CSV rows to trigger elements, and the worker that feeds rows to the engine.

use std::collections::BTreeMap;
use std::sync::Arc;

use async_trait::async_trait;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use chrono::Duration;
use futures_util::StreamExt;
use hmac::{Hmac, Mac};
use serde_json::{json, Map, Value};
use sha2::Sha256;

use crate::audience::filter::Filter;
use crate::audience::{EndUserRepository, UserQuery};
use crate::trigger::engine::{PreparedElements, TriggerService, MAX_RUNNING_BULK};
use crate::trigger::{FlowElement, Mode};
use crate::{
    Clock, DomainError, FlowRepository, PageRequest, Permission, Principal, Resource, StorageError,
    Timestamp,
};

/// Contract §5: 32 MiB, counted as the body arrives.
pub const MAX_UPLOAD_BYTES: usize = 32 * 1024 * 1024;
pub const UPLOAD_URL_MINUTES: i64 = 5;
/// A row may target at most this many users.
pub const MAX_USERS_PER_ROW: usize = 10;
/// Row errors kept on a task.
pub const MAX_ROW_ERRORS: usize = 100;
/// Rows handed to the engine per step.
pub const ROWS_PER_STEP: u32 = 2_000;
/// Rows prepared and recorded together within a step (see [`BulkService::step`]). A step's
/// first chunk is prepared and its last recorded with nothing beside them, so smaller chunks
/// overlap more of the step; measured in docs/benchmarks.md (2026-11-23, 385878e): 125 against 500,
/// 250 and 64.
const CHUNK_ROWS: usize = 125;
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

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BulkStatus {
    /// Waiting for the upload.
    Pending,
    /// The upload is being received (shown as `pending`).
    Uploading,
    Processing,
    Completed,
    Failed,
}

impl BulkStatus {
    pub const fn as_str(self) -> &'static str {
        match self {
            BulkStatus::Pending => "pending",
            BulkStatus::Uploading => "uploading",
            BulkStatus::Processing => "processing",
            BulkStatus::Completed => "completed",
            BulkStatus::Failed => "failed",
        }
    }

    /// What clients see: an upload in progress is still `pending`.
    pub const fn public(self) -> &'static str {
        match self {
            BulkStatus::Uploading => "pending",
            other => other.as_str(),
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        [
            Self::Pending,
            Self::Uploading,
            Self::Processing,
            Self::Completed,
            Self::Failed,
        ]
        .into_iter()
        .find(|x| x.as_str() == s)
    }
}

#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct RowError {
    pub row: u64,
    pub message: String,
}

#[derive(Debug, Clone, PartialEq)]
pub struct BulkTask {
    pub id: i64,
    pub environment_id: String,
    pub flow_id: String,
    pub mode: Mode,
    pub status: BulkStatus,
    /// The CSV header, once uploaded.
    pub header: Option<Vec<String>>,
    pub rows_total: u64,
    pub rows_processed: u64,
    pub rows_failed: u64,
    /// The first [`MAX_ROW_ERRORS`] row errors, or the reason the task failed (row 0).
    pub errors: Vec<RowError>,
    /// The last row handed to the engine.
    pub cursor: u64,
    /// Uploaded, waiting for one of its environment's [`MAX_RUNNING_BULK`] slots (contract
    /// §10): shown as `pending` with `"queued": true`.
    pub queued: bool,
    pub created: Timestamp,
    pub updated: Timestamp,
    /// The lease this copy was claimed with (contract §19): the step's writes apply only while
    /// the task still holds it. None for a task not claimed.
    pub lease_until: Option<Timestamp>,
}

/// What an upload URL grants: one upload for one task, until `expires` (unix seconds).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UploadGrant {
    pub environment_id: String,
    pub flow_id: String,
    pub task_id: i64,
    pub mode: Mode,
    pub expires: i64,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GrantError {
    #[error("the upload URL is not valid (malformed or tampered with)")]
    Tampered,
    #[error("the upload URL has expired (it is valid for {UPLOAD_URL_MINUTES} minutes)")]
    Expired,
}

impl UploadGrant {
    /// `base64url(payload).base64url(HMAC-SHA256(key, payload))`.
    pub fn sign(&self, key: &[u8]) -> String {
        let payload = format!(
            "{}|{}|{}|{}|{}",
            self.environment_id,
            self.flow_id,
            self.task_id,
            self.mode.as_str(),
            self.expires
        );
        let tag = mac(key, payload.as_bytes());
        format!(
            "{}.{}",
            URL_SAFE_NO_PAD.encode(payload),
            URL_SAFE_NO_PAD.encode(tag)
        )
    }

    pub fn verify(token: &str, key: &[u8], now: Timestamp) -> Result<UploadGrant, GrantError> {
        let (payload, tag) = token.split_once('.').ok_or(GrantError::Tampered)?;
        let payload = URL_SAFE_NO_PAD
            .decode(payload)
            .map_err(|_| GrantError::Tampered)?;
        let tag = URL_SAFE_NO_PAD
            .decode(tag)
            .map_err(|_| GrantError::Tampered)?;
        let mut check = Hmac::<Sha256>::new_from_slice(key).map_err(|_| GrantError::Tampered)?;
        check.update(&payload);
        check.verify_slice(&tag).map_err(|_| GrantError::Tampered)?;
        let text = String::from_utf8(payload).map_err(|_| GrantError::Tampered)?;
        let parts: Vec<&str> = text.split('|').collect();
        let [env, flow, task, mode, expires] = parts.as_slice() else {
            return Err(GrantError::Tampered);
        };
        let grant = UploadGrant {
            environment_id: (*env).to_owned(),
            flow_id: (*flow).to_owned(),
            task_id: task.parse().map_err(|_| GrantError::Tampered)?,
            mode: match *mode {
                "live" => Mode::Live,
                "test" => Mode::Test,
                _ => return Err(GrantError::Tampered),
            },
            expires: expires.parse().map_err(|_| GrantError::Tampered)?,
        };
        if now.timestamp() >= grant.expires {
            return Err(GrantError::Expired);
        }
        Ok(grant)
    }
}

fn mac(key: &[u8], data: &[u8]) -> Vec<u8> {
    // HMAC takes keys of any length.
    let mut m = match Hmac::<Sha256>::new_from_slice(key) {
        Ok(m) => m,
        Err(_) => return Vec::new(),
    };
    m.update(data);
    m.finalize().into_bytes().to_vec()
}

/// One column of the file.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Column {
    /// `target.attributes.<field>`; `id` is the end-user id.
    Attribute(String),
    Variable(String),
    Metadata(String),
    NotificationDetail(String),
    CardOption(String),
    InvocationId,
}

/// A validated header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CsvHeader {
    columns: Vec<Column>,
}

const CARD_OPTIONS: &[&str] = &[
    "priority",
    "expires",
    "expiresInterval",
    "embargo",
    "targetStreamIds",
    "targetPlatforms",
];

impl CsvHeader {
    /// Every problem of the header, or the header.
    pub fn parse(names: &[String]) -> Result<CsvHeader, String> {
        let mut columns = Vec::new();
        let mut problems = Vec::new();
        for (i, raw) in names.iter().enumerate() {
            let name = raw.trim().trim_start_matches('\u{feff}');
            let column = if name == "flowInvocationId" {
                Some(Column::InvocationId)
            } else if let Some(f) = name.strip_prefix("target.attributes.") {
                Some(Column::Attribute(f.to_owned()))
            } else if let Some(f) = name.strip_prefix("payload.variables.") {
                Some(Column::Variable(f.to_owned()))
            } else if let Some(f) = name.strip_prefix("payload.metadata.") {
                Some(Column::Metadata(f.to_owned()))
            } else if let Some(f) = name.strip_prefix("payload.notificationDetail.") {
                Some(Column::NotificationDetail(f.to_owned()))
            } else if let Some(f) = name.strip_prefix("payload.cardOptions.") {
                CARD_OPTIONS
                    .contains(&f)
                    .then(|| Column::CardOption(f.to_owned()))
            } else {
                None
            };
            match column {
                Some(c) if !matches!(&c, Column::Attribute(f) | Column::Variable(f) | Column::Metadata(f) | Column::NotificationDetail(f) if f.is_empty()) => {
                    if columns.contains(&c) {
                        problems.push(format!("column {} ({name:?}) repeats an earlier column", i + 1));
                    }
                    columns.push(c);
                }
                _ => problems.push(format!(
                    "column {} ({name:?}) is not one of target.attributes.<field>, payload.variables.<name>, payload.metadata.<name>, payload.notificationDetail.<name>, payload.cardOptions.<{}>, flowInvocationId",
                    i + 1,
                    CARD_OPTIONS.join("|")
                )),
            }
        }
        if !columns.iter().any(|c| matches!(c, Column::Attribute(_))) {
            problems.push("the header needs at least one target.attributes.<field> column (target.attributes.id is the end-user id)".into());
        }
        if problems.is_empty() {
            Ok(CsvHeader { columns })
        } else {
            Err(problems.join("; "))
        }
    }

    /// A row as (target attributes, trigger element without its target). Empty cells are
    /// left out; `a|b` is an array where the field takes one.
    pub fn row(&self, cells: &[String]) -> Result<CsvRow, String> {
        if cells.len() != self.columns.len() {
            return Err(format!(
                "has {} cells; the header has {} columns",
                cells.len(),
                self.columns.len()
            ));
        }
        let mut row = CsvRow::default();
        for (column, cell) in self.columns.iter().zip(cells) {
            if cell.is_empty() {
                continue;
            }
            match column {
                Column::Attribute(f) => {
                    row.attributes.insert(f.clone(), cell.clone());
                }
                Column::Variable(n) => {
                    row.variables.insert(n.clone(), Value::String(cell.clone()));
                }
                Column::Metadata(n) => {
                    row.metadata.insert(n.clone(), Value::String(cell.clone()));
                }
                Column::NotificationDetail(n) => {
                    row.notification_detail
                        .insert(n.clone(), Value::String(cell.clone()));
                }
                Column::CardOption(o) => {
                    let value = match o.as_str() {
                        "priority" => cell.parse::<i64>().map(Value::from).map_err(|_| {
                            format!("payload.cardOptions.priority {cell:?} is not a whole number")
                        })?,
                        "targetStreamIds" => Value::from(cell.split('|').collect::<Vec<_>>()),
                        "targetPlatforms" => {
                            let named: Vec<&str> = cell.split('|').collect();
                            json!({
                                "Web": named.contains(&"Web"),
                                "iOS": named.contains(&"iOS"),
                                "Android": named.contains(&"Android"),
                            })
                        }
                        _ => Value::String(cell.clone()),
                    };
                    row.card_options.insert(o.clone(), value);
                }
                Column::InvocationId => row.invocation_id = Some(cell.clone()),
            }
        }
        if row.attributes.is_empty() {
            return Err("has no target.attributes value".into());
        }
        Ok(row)
    }
}

/// One row, mapped.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct CsvRow {
    pub attributes: BTreeMap<String, String>,
    pub variables: Map<String, Value>,
    pub metadata: Map<String, Value>,
    pub notification_detail: Map<String, Value>,
    pub card_options: Map<String, Value>,
    pub invocation_id: Option<String>,
}

impl CsvRow {
    /// The trigger element (spec 4.3) for these users: the row's values moved into it.
    pub fn element(self, users: Vec<String>, default_id: impl FnOnce() -> String) -> Value {
        let mut payload = Map::new();
        for (key, map) in [
            ("variables", self.variables),
            ("metadata", self.metadata),
            ("notificationDetail", self.notification_detail),
            ("cardOptions", self.card_options),
        ] {
            if !map.is_empty() {
                payload.insert(key.into(), Value::Object(map));
            }
        }
        let users = Value::Array(users.into_iter().map(Value::String).collect());
        json!({
            "flowInvocationId": self.invocation_id.unwrap_or_else(default_id),
            "target": {"type": "user", "targetUserIds": users},
            "payload": payload,
        })
    }

    /// The filter of the attributes (contract §3), `id` as the end-user id.
    fn filter(&self) -> Result<Filter, String> {
        let conditions: Vec<Value> = self
            .attributes
            .iter()
            .map(|(f, v)| {
                let field = if f == "id" {
                    "id".to_owned()
                } else {
                    format!("attributes.{f}")
                };
                json!({"field": field, "op": "eq", "value": v})
            })
            .collect();
        Filter::parse(&json!({"match": "all", "conditions": conditions}), "target").map_err(|e| {
            e.into_iter()
                .map(|e| e.message)
                .collect::<Vec<_>>()
                .join("; ")
        })
    }
}

#[cfg_attr(feature = "mock", mockall::automock)]
#[async_trait]
pub trait BulkRepository: Send + Sync {
    /// Inserts a pending task; returns its id.
    async fn create(&self, task: &BulkTask) -> Result<i64, StorageError>;
    async fn get(&self, environment_id: &str, id: i64) -> Result<Option<BulkTask>, StorageError>;
    /// pending → uploading, only from pending. False when the task is not pending.
    async fn begin_upload(
        &self,
        environment_id: &str,
        id: i64,
        now: Timestamp,
    ) -> Result<bool, StorageError>;
    /// Stores rows (row number, cells) of an uploading task.
    async fn add_rows(
        &self,
        environment_id: &str,
        id: i64,
        rows: Vec<(u64, Vec<String>)>,
    ) -> Result<(), StorageError>;
    /// uploading → processing with the header and the number of rows, queued for a slot.
    async fn finish_upload(
        &self,
        environment_id: &str,
        id: i64,
        header: Vec<String>,
        rows: u64,
        now: Timestamp,
    ) -> Result<(), StorageError>;
    /// → failed with `errors` in place of the row errors; stored rows are deleted. With `held`
    /// (a claimed task's lease), only while the task still holds that lease: false, with
    /// nothing changed, once it has passed to another holder.
    async fn fail(
        &self,
        environment_id: &str,
        id: i64,
        errors: Vec<RowError>,
        now: Timestamp,
        held: Option<Timestamp>,
    ) -> Result<bool, StorageError>;
    /// Takes a processing task whose lease ran out until `lease_until`, oldest first; the task
    /// returned carries that lease. A queued
    /// task is taken only while its environment has fewer than `slots` tasks holding one (bulk
    /// invocations pending or running, and processing tasks not queued); taking it ends its
    /// wait, and it holds a slot until it is final.
    async fn claim(
        &self,
        now: Timestamp,
        lease_until: Timestamp,
        slots: u64,
    ) -> Result<Option<BulkTask>, StorageError>;
    /// Up to `limit` rows after row `after`, in order.
    async fn rows(
        &self,
        environment_id: &str,
        id: i64,
        after: u64,
        limit: u32,
    ) -> Result<Vec<(u64, Vec<String>)>, StorageError>;
    /// Saves progress, only from `from_cursor` and while the task still holds
    /// `task.lease_until`: cursor, counts added, row errors appended up to the cap, status,
    /// and the handled rows deleted; the lease ends. False, with nothing changed, when the
    /// lease has passed to another holder (contract §19).
    async fn save_progress(
        &self,
        task: &BulkTask,
        from_cursor: u64,
        handled: u64,
        failed: u64,
        errors: Vec<RowError>,
    ) -> Result<bool, StorageError>;
}

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
            lease: Duration::seconds(30),
            stale: crate::health::Stale::default(),
        }
    }

    /// Writes refused since the last call because the task's lease had passed to another
    /// holder (contract §19).
    pub fn take_stale(&self) -> u64 {
        self.stale.take()
    }

    pub fn with_lease(mut self, lease: Duration) -> Self {
        self.lease = lease;
        self
    }

    /// A new pending task and the token of its upload URL.
    pub async fn create(
        &self,
        who: &Principal,
        env: &str,
        flow_id: &str,
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
        // A task waiting for its upload holds no slot (contract §10): an upload accepted
        // while every slot is taken waits, queued, and is never refused.
        let now = self.clock.now();
        let mut task = BulkTask {
            id: 0,
            environment_id: env.to_owned(),
            flow_id: flow.id,
            mode,
            status: BulkStatus::Pending,
            header: None,
            rows_total: 0,
            rows_processed: 0,
            rows_failed: 0,
            errors: Vec::new(),
            cursor: 0,
            queued: false,
            created: now,
            updated: now,
            lease_until: None,
        };
        task.id = self.tasks.create(&task).await?;
        let token = UploadGrant {
            environment_id: env.to_owned(),
            flow_id: task.flow_id.clone(),
            task_id: task.id,
            mode,
            expires: (now + Duration::minutes(UPLOAD_URL_MINUTES)).timestamp(),
        }
        .sign(&self.key);
        Ok((task, token))
    }

    pub async fn status(
        &self,
        who: &Principal,
        env: &str,
        flow_id: &str,
        task_id: &str,
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

    /// Checks an upload token and starts the task's one upload.
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

    pub async fn add_rows(
        &self,
        grant: &UploadGrant,
        rows: Vec<(u64, Vec<String>)>,
    ) -> Result<(), StorageError> {
        self.tasks
            .add_rows(&grant.environment_id, grant.task_id, rows)
            .await
    }

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
    /// A step that panics or fails unexpectedly is tried again, up to
    /// [`crate::unit::ATTEMPTS`] times in all; then the task fails alone, with an `errorId` in
    /// its errors and in the log (contract §10). Rows are recorded under ids of their own
    /// (their task and number), so a step tried again records none twice.
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
        let mut errors: Vec<RowError> = Vec::new();
        let mut recording = futures_util::stream::FuturesOrdered::new();
        for rows in rows.chunks(CHUNK_ROWS) {
            let prepare = std::pin::pin!(self.prepare_chunk(&task, &header, rows));
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

    /// The rows' elements validated and built, not yet recorded.
    async fn prepare_chunk(
        &self,
        task: &BulkTask,
        header: &CsvHeader,
        rows: &[(u64, Vec<String>)],
    ) -> Result<Chunk, DomainError> {
        let mut chunk = Chunk {
            errors: Vec::new(),
            rows: Vec::new(),
            prepared: None,
        };
        let mut elements: Vec<FlowElement> = Vec::new();
        for (number, cells) in rows {
            match self.element(task, header, *number, cells).await? {
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
    ) -> Result<Result<FlowElement, String>, DomainError> {
        let row = match header.row(cells) {
            Ok(r) => r,
            Err(e) => return Ok(Err(e)),
        };
        let users = match self.users_of(task, &row).await? {
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
    /// its attributes match, at most [`MAX_USERS_PER_ROW`].
    async fn users_of(
        &self,
        task: &BulkTask,
        row: &CsvRow,
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
        // No id: the users whose attributes match, read in pages.
        let mut found = Vec::new();
        let mut after = None;
        loop {
            let page = PageRequest {
                limit: 1_000,
                after: after.clone(),
            };
            let users = self.users.list(env, &UserQuery::default(), &page).await?;
            let more = users.len() > 1_000;
            for user in users.iter().take(1_000) {
                if filter.matches(user) {
                    found.push(user.id.clone());
                    if found.len() > MAX_USERS_PER_ROW {
                        return Ok(Err(format!(
                            "matches more than {MAX_USERS_PER_ROW} end users"
                        )));
                    }
                }
            }
            if !more {
                break;
            }
            after = users.get(999).map(|u| u.id.clone());
        }
        if found.is_empty() {
            return Ok(Err("matches no end user".into()));
        }
        Ok(Ok(found))
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

/// Why an upload is refused.
#[derive(Debug, thiserror::Error)]
pub enum UploadError {
    #[error(transparent)]
    Grant(#[from] GrantError),
    #[error("this task already has its upload")]
    AlreadyUploaded,
    #[error(transparent)]
    Storage(#[from] StorageError),
}

impl From<UploadError> for DomainError {
    fn from(e: UploadError) -> Self {
        match e {
            UploadError::Grant(g) => DomainError::Forbidden(g.to_string()),
            UploadError::AlreadyUploaded => DomainError::conflict(
                crate::ConflictKind::AlreadyUploaded,
                "this task already has its upload; create another task",
            ),
            UploadError::Storage(s) => DomainError::Storage(s),
        }
    }
}

#[cfg(test)]
mod tests {
    use chrono::TimeZone;
    use rand::Rng;

    use super::*;

    fn t(s: i64) -> Timestamp {
        chrono::Utc
            .timestamp_opt(1_800_000_000 + s, 0)
            .single()
            .expect("time")
    }

    fn strings(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn upload_grants_verify_and_refuse_tampering_and_expiry() {
        let grant = UploadGrant {
            environment_id: "env_1".into(),
            flow_id: "flw_1".into(),
            task_id: 42,
            mode: Mode::Test,
            expires: t(300).timestamp(),
        };
        let token = grant.sign(b"key");
        assert_eq!(UploadGrant::verify(&token, b"key", t(0)), Ok(grant.clone()));
        assert_eq!(
            UploadGrant::verify(&token, b"key", t(300)),
            Err(GrantError::Expired)
        );
        assert_eq!(
            UploadGrant::verify(&token, b"other", t(0)),
            Err(GrantError::Tampered)
        );
        // Another task id in the payload, the old signature.
        let (_, tag) = token.split_once('.').expect("dot");
        let forged = format!(
            "{}.{tag}",
            URL_SAFE_NO_PAD.encode("env_1|flw_1|43|test|9999999999")
        );
        assert_eq!(
            UploadGrant::verify(&forged, b"key", t(0)),
            Err(GrantError::Tampered)
        );
        for bad in ["", "x", "a.b", "..", "%%%.%%%"] {
            assert_eq!(
                UploadGrant::verify(bad, b"key", t(0)),
                Err(GrantError::Tampered),
                "{bad}"
            );
        }
    }

    #[test]
    fn headers_are_checked_column_by_column() {
        assert!(CsvHeader::parse(&strings(&[
            "target.attributes.id",
            "payload.variables.name",
            "payload.metadata.m",
            "payload.notificationDetail.d",
            "payload.cardOptions.priority",
            "flowInvocationId"
        ]))
        .is_ok());
        assert!(
            CsvHeader::parse(&strings(&["\u{feff}target.attributes.id"])).is_ok(),
            "a BOM is ignored"
        );
        for (header, needle) in [
            (
                vec!["payload.variables.name"],
                "at least one target.attributes",
            ),
            (
                vec!["target.attributes.id", "payload.cardOptions.colour"],
                "column 2",
            ),
            (vec!["target.attributes.id", "name"], "column 2"),
            (
                vec!["target.attributes.", "target.attributes.id"],
                "column 1",
            ),
            (
                vec!["target.attributes.id", "target.attributes.id"],
                "repeats",
            ),
        ] {
            let err = CsvHeader::parse(&strings(&header)).expect_err("refused");
            assert!(err.contains(needle), "{header:?}: {err}");
        }
    }

    #[test]
    fn rows_map_to_elements() {
        let header = CsvHeader::parse(&strings(&[
            "target.attributes.id",
            "payload.variables.name",
            "payload.cardOptions.priority",
            "payload.cardOptions.targetStreamIds",
            "payload.cardOptions.targetPlatforms",
            "flowInvocationId",
        ]))
        .expect("header");
        let row = header
            .row(&strings(&["u1", "Ann", "7", "s1|s2", "Web|iOS", ""]))
            .expect("row");
        let element = row.element(vec!["u1".to_owned()], || "csv-1-1".into());
        assert_eq!(
            element,
            json!({"flowInvocationId": "csv-1-1", "target": {"type": "user", "targetUserIds": ["u1"]},
                   "payload": {"variables": {"name": "Ann"}, "cardOptions": {"priority": 7, "targetStreamIds": ["s1", "s2"], "targetPlatforms": {"Web": true, "iOS": true, "Android": false}}}})
        );
        assert!(header
            .row(&strings(&["u1"]))
            .expect_err("short")
            .contains("cells"));
        assert!(header
            .row(&strings(&["", "Ann", "", "", "", ""]))
            .expect_err("no target")
            .contains("target.attributes"));
        assert!(header
            .row(&strings(&["u1", "", "high", "", "", ""]))
            .expect_err("priority")
            .contains("priority"));
    }

    /// Random rows written as CSV cells and read back give the element they came from.
    #[test]
    fn the_row_to_element_mapping_round_trips() {
        let mut rng = rand::thread_rng();
        let word = |rng: &mut rand::rngs::ThreadRng| -> String {
            let n = rng.gen_range(1..12);
            (0..n)
                .map(|_| char::from(rng.gen_range(b'a'..=b'z')))
                .collect()
        };
        for _ in 0..500 {
            let variables: BTreeMap<String, String> = (0..rng.gen_range(0..4))
                .map(|_| (word(&mut rng), word(&mut rng)))
                .collect();
            let metadata: BTreeMap<String, String> = (0..rng.gen_range(0..3))
                .map(|_| (word(&mut rng), word(&mut rng)))
                .collect();
            let streams: Vec<String> = (0..rng.gen_range(0..3)).map(|_| word(&mut rng)).collect();
            let priority: Option<i64> = rng.gen_bool(0.5).then(|| rng.gen_range(1..=10));
            let invocation: Option<String> = rng.gen_bool(0.5).then(|| word(&mut rng));
            let user = word(&mut rng);
            let mut names = vec!["target.attributes.id".to_owned()];
            let mut cells = vec![user.clone()];
            for (k, v) in &variables {
                names.push(format!("payload.variables.{k}"));
                cells.push(v.clone());
            }
            for (k, v) in &metadata {
                names.push(format!("payload.metadata.{k}"));
                cells.push(v.clone());
            }
            names.push("payload.cardOptions.targetStreamIds".into());
            cells.push(streams.join("|"));
            names.push("payload.cardOptions.priority".into());
            cells.push(priority.map(|p| p.to_string()).unwrap_or_default());
            names.push("flowInvocationId".into());
            cells.push(invocation.clone().unwrap_or_default());
            let header = CsvHeader::parse(&names).expect("header");
            let element = header
                .row(&cells)
                .expect("row")
                .element(vec![user.clone()], || "generated".into());

            let mut payload = Map::new();
            if !variables.is_empty() {
                payload.insert("variables".into(), json!(variables));
            }
            if !metadata.is_empty() {
                payload.insert("metadata".into(), json!(metadata));
            }
            let mut options = Map::new();
            if !streams.is_empty() {
                options.insert("targetStreamIds".into(), json!(streams));
            }
            if let Some(p) = priority {
                options.insert("priority".into(), json!(p));
            }
            if !options.is_empty() {
                payload.insert("cardOptions".into(), Value::Object(options));
            }
            let expected = json!({
                "flowInvocationId": invocation.unwrap_or_else(|| "generated".into()),
                "target": {"type": "user", "targetUserIds": [user]},
                "payload": payload,
            });
            assert_eq!(element, expected);
        }
    }

    /// A CSV step over mocks: a task of `rows` rows of flow `flw` (see `card_flows`),
    /// recorded by `record` (its calls counted from 0); the progress saved is kept.
    mod steps {
        use std::sync::{Arc, Mutex};

        use super::*;
        use crate::audience::{MockEndUserRepository, MockSegmentRepository, MockStreamRepository};
        use crate::trigger::engine::{BatchResult, Invocation, MockInvocationRepository};
        use crate::trigger::tests::{card_flows, default_stream, now};

        type Asked = Vec<(Invocation, Option<BatchResult>)>;
        type Recorder = Box<dyn Fn(usize, &Asked) -> Result<(), StorageError> + Send + Sync>;
        /// What `save_progress` was given: the task's cursor and status, then from, handled,
        /// failed and the errors.
        type Saved = Arc<Mutex<Vec<(u64, BulkStatus, u64, u64, u64, Vec<RowError>)>>>;
        /// A save to this cursor is refused: the lease had passed to another holder.
        const STALE_CURSOR: u64 = 3;

        fn task() -> BulkTask {
            BulkTask {
                id: 7,
                environment_id: "env".into(),
                flow_id: "flw".into(),
                mode: Mode::Live,
                status: BulkStatus::Processing,
                header: Some(strings(&["target.attributes.id", "payload.variables.name"])),
                rows_total: 0,
                rows_processed: 0,
                rows_failed: 0,
                errors: Vec::new(),
                cursor: 0,
                queued: false,
                created: now(),
                updated: now(),
                lease_until: None,
            }
        }

        fn service(
            rows: Vec<(u64, Vec<String>)>,
            record: Recorder,
        ) -> (BulkService, Arc<Mutex<Vec<Asked>>>, Saved) {
            let mut tasks = MockBulkRepository::new();
            tasks
                .expect_claim()
                .times(1)
                .returning(|_, _, _| Ok(Some(task())));
            tasks
                .expect_rows()
                .times(1)
                .returning(move |_, _, after, limit| {
                    assert_eq!((after, limit), (0, ROWS_PER_STEP));
                    Ok(rows.clone())
                });
            let saved: Saved = Arc::default();
            let sink = saved.clone();
            tasks
                .expect_save_progress()
                .returning(move |task, from, handled, failed, errors| {
                    sink.lock().expect("saved").push((
                        task.cursor,
                        task.status,
                        from,
                        handled,
                        failed,
                        errors,
                    ));
                    Ok(task.cursor != STALE_CURSOR)
                });
            let flows = card_flows();
            let mut streams = MockStreamRepository::new();
            streams
                .expect_list()
                .returning(|env, _| Ok(vec![default_stream(env)]));
            let recorded: Arc<Mutex<Vec<Asked>>> = Arc::default();
            let sink = recorded.clone();
            let mut invocations = MockInvocationRepository::new();
            invocations.expect_record_run().returning(move |asked| {
                let mut calls = sink.lock().expect("recorded");
                record(calls.len(), &asked)?;
                let answer = vec![None; asked.len()];
                calls.push(asked);
                Ok(answer)
            });
            let invocations = Arc::new(invocations);
            let mut clock = crate::time::MockClock::new();
            clock.expect_now().returning(now);
            let clock: Arc<dyn Clock> = Arc::new(clock);
            let flows: Arc<dyn FlowRepository> = Arc::new(flows);
            let triggers = TriggerService::new(
                flows.clone(),
                invocations.clone(),
                Arc::new(MockSegmentRepository::new()),
                Arc::new(streams),
                clock.clone(),
            );
            let service = BulkService::new(
                Arc::new(tasks),
                flows,
                Arc::new(MockEndUserRepository::new()),
                Arc::new(triggers),
                clock,
                b"key".to_vec(),
            );
            (service, recorded, saved)
        }

        #[tokio::test]
        async fn a_step_that_panics_is_tried_three_times_then_the_task_fails_alone_with_an_error_id(
        ) {
            let mut tasks = MockBulkRepository::new();
            tasks.expect_claim().times(1).returning(|_, until, _| {
                Ok(Some(BulkTask {
                    lease_until: Some(until),
                    ..task()
                }))
            });
            tasks
                .expect_rows()
                .times(crate::unit::ATTEMPTS as usize)
                .returning(|_, _, _, _| panic!("injected: rows cannot be read"));
            tasks
                .expect_fail()
                .times(1)
                .withf(|env, id, errors, _, held| {
                    env == "env"
                        && *id == 7
                        && errors.len() == 1
                        && errors[0].message.contains("errorId err_")
                        && !errors[0].message.contains("injected")
                        && *held == Some(now() + Duration::seconds(30))
                })
                // The lease has passed to another holder meanwhile: the failure is not kept.
                .returning(|_, _, _, _, _| Ok(false));
            let mut clock = crate::time::MockClock::new();
            clock.expect_now().returning(now);
            let clock: Arc<dyn Clock> = Arc::new(clock);
            let flows: Arc<dyn FlowRepository> = Arc::new(crate::flow::MockFlowRepository::new());
            let triggers = TriggerService::new(
                flows.clone(),
                Arc::new(MockInvocationRepository::new()),
                Arc::new(MockSegmentRepository::new()),
                Arc::new(MockStreamRepository::new()),
                clock.clone(),
            );
            let service = BulkService::new(
                Arc::new(tasks),
                flows,
                Arc::new(MockEndUserRepository::new()),
                Arc::new(triggers),
                clock,
                b"key".to_vec(),
            );
            assert!(service.step().await.expect("the loop goes on"));
            assert_eq!(service.take_stale(), 1, "the refused failure is counted");
        }

        /// Rows 1..=n; those in `bad` have one cell where the header has two.
        fn rows(n: u64, bad: &[u64]) -> Vec<(u64, Vec<String>)> {
            (1..=n)
                .map(|i| match bad.contains(&i) {
                    true => (i, vec![format!("u{i}")]),
                    false => (i, vec![format!("u{i}"), format!("Name{i}")]),
                })
                .collect()
        }

        #[tokio::test]
        async fn a_step_records_each_row_once_in_chunks_and_lists_row_errors_in_order() {
            let bad = [7, CHUNK_ROWS as u64 + 5, 299];
            let (service, recorded, saved) = service(rows(300, &bad), Box::new(|_, _| Ok(())));
            assert!(service.step().await.expect("step"));
            let calls = recorded.lock().expect("recorded");
            // One call per chunk of rows, each with its chunk's good rows.
            let sizes: Vec<usize> = calls.iter().map(Vec::len).collect();
            assert_eq!(
                sizes,
                [CHUNK_ROWS - 1, CHUNK_ROWS - 1, 300 - 2 * CHUNK_ROWS - 1]
            );
            let ids: Vec<String> = calls.iter().flatten().map(|(i, _)| i.id.clone()).collect();
            let expected: Vec<String> = (1..=300u64)
                .filter(|n| !bad.contains(n))
                .map(|n| format!("csv-7-{n}"))
                .collect();
            assert_eq!(ids, expected, "every good row once, in order");
            for (invocation, run) in calls.iter().flatten() {
                let n = invocation.id.trim_start_matches("csv-7-");
                let run = run.as_ref().expect("a one-user row runs when recorded");
                let users: Vec<&str> = run.cards.iter().map(|c| c.user_id.as_str()).collect();
                assert_eq!(users, [format!("u{n}")]);
                assert_eq!(
                    run.cards[0].context.value()["variables"]["name"],
                    format!("Name{n}"),
                    "each row its own variables"
                );
            }
            let saved = saved.lock().expect("saved");
            let [(cursor, status, from, handled, failed, errors)] = saved.as_slice() else {
                panic!("one save: {saved:?}");
            };
            assert_eq!(
                (*cursor, *status, *from, *handled, *failed),
                (300, BulkStatus::Completed, 0, 300, 3)
            );
            let rows: Vec<u64> = errors.iter().map(|e| e.row).collect();
            assert_eq!(rows, bad);
            assert!(errors[0].message.contains("has 1 cells"), "{errors:?}");
        }

        #[tokio::test]
        async fn a_step_whose_lease_passed_to_another_holder_is_counted_stale() {
            // Rows are recorded under ids of their own, so the other holder records none
            // twice; the repository refuses this holder's progress, and it is counted.
            let (service, _, saved) = service(rows(STALE_CURSOR, &[]), Box::new(|_, _| Ok(())));
            assert!(service.step().await.expect("step"));
            assert_eq!(saved.lock().expect("saved").len(), 1);
            assert_eq!(service.take_stale(), 1);
        }

        #[tokio::test]
        async fn a_step_whose_rows_cannot_be_recorded_saves_no_progress() {
            let refuse: Recorder = Box::new(|call, _| match call {
                1 => Err(StorageError::Unavailable("disk full".into())),
                _ => Ok(()),
            });
            let (service, recorded, saved) = service(rows(3 * CHUNK_ROWS as u64, &[]), refuse);
            let err = service.step().await.expect_err("the step fails");
            assert!(err.to_string().contains("disk full"), "{err}");
            assert!(
                saved.lock().expect("saved").is_empty(),
                "no progress past rows not recorded: the next claim takes them again"
            );
            assert!(recorded.lock().expect("recorded").len() <= 2);
        }
    }
}
