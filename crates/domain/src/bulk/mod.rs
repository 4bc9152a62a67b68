//! Bulk start from a CSV file (docs/api.md, Bulk start from CSV): tasks and their port, the
//! signed upload URLs ([`grant`]), the mapping of CSV rows to trigger elements ([`csv`]), and
//! the service and worker that feed rows to the engine ([`service`]).

pub mod csv;
pub mod grant;
mod matching;
pub mod service;

pub use csv::{CsvHeader, CsvRow, MAX_COLUMNS};
pub use grant::{GrantError, UploadGrant};
pub use service::BulkService;

use async_trait::async_trait;

use crate::page::After;
use crate::trigger::Mode;
use crate::{DomainError, StorageError, Timestamp};

/// The largest CSV file an upload may send, in bytes (32 MiB), counted as the body arrives:
/// beyond it the upload is answered 413 and the task fails (docs/api.md, Bulk start from CSV).
pub const MAX_UPLOAD_BYTES: usize = 32 * 1024 * 1024;
/// How long an upload URL is valid, in minutes from the creation of its task: from then on
/// [`UploadGrant::verify`] refuses it with [`GrantError::Expired`].
pub const UPLOAD_URL_MINUTES: i64 = 5;
/// The most end users one row may target: a row without `target.attributes.id` whose
/// attributes match more users is a row error.
pub const MAX_USERS_PER_ROW: usize = 10;
/// Row errors kept in [`BulkTask::errors`]: the first ones; later ones are only counted in
/// [`BulkTask::rows_failed`].
pub const MAX_ROW_ERRORS: usize = 100;
/// Rows handed to the engine per step ([`BulkService::step`]); a step that finds fewer left
/// completes the task.
pub const ROWS_PER_STEP: u32 = 2_000;

/// Where a bulk (CSV) task is: pending, uploading, then processing until completed; failed
/// when its upload broke off or was refused, or a step kept failing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BulkStatus {
    /// Waiting for the upload.
    Pending,
    /// The upload is being received (shown as `pending`).
    Uploading,
    /// The file is stored: workers hand its rows to the engine, step by step (a task waiting
    /// for a bulk-task slot is processing and [`BulkTask::queued`]).
    Processing,
    /// Every row was handed to the engine (its invocation recorded) or refused. The cards
    /// follow as the engine runs the invocations.
    Completed,
    /// The upload broke off or the file could not be read, or a step kept failing;
    /// [`BulkTask::errors`] says why, as row 0.
    Failed,
}

crate::spelling::spelled!(BulkStatus {
    Pending => "pending",
    Uploading => "uploading",
    Processing => "processing",
    Completed => "completed",
    Failed => "failed",
});

impl BulkStatus {
    /// What clients see: an upload in progress is still `pending`.
    pub const fn public(self) -> &'static str {
        match self {
            BulkStatus::Uploading => "pending",
            other => other.as_str(),
        }
    }
}

/// A task's status as clients see it (`status` of its JSON, [`BulkTask::public_status`]): an
/// upload in progress, and an uploaded task queued for a slot, are still pending. A cancel
/// task's statuses are three of these too.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PublicStatus {
    /// Waiting for its upload, receiving it, or uploaded and queued for a slot.
    Pending,
    /// Its rows are being handed to the engine.
    Processing,
    /// Every row was handed to the engine or refused.
    Completed,
    /// The upload broke off or was refused, or a step kept failing.
    Failed,
}

crate::spelling::spelled!(PublicStatus {
    Pending => "pending",
    Processing => "processing",
    Completed => "completed",
    Failed => "failed",
});

/// A row refused, or the reason a whole task failed: `{"row": n, "message"}` in the task's
/// `errors`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct RowError {
    /// The row's number: 1 is the first row after the header; 0 is the file as a whole (the
    /// task failed).
    pub row: u64,
    /// Why, for the caller: the row's problems as `field: message; ...`, or the file's.
    pub message: String,
}

/// A bulk start from a CSV file (docs/api.md, Bulk start from CSV): one upload, then its rows
/// handed to the engine in steps; `GET .../csv-task/{taskId}/status` shows it.
#[derive(Debug, Clone, PartialEq)]
pub struct BulkTask {
    /// A positive whole number given by storage ([`BulkRepository::create`]); 0 in a task not
    /// yet stored.
    pub id: i64,
    /// The environment of the flow.
    pub environment_id: String,
    /// The Action Flow whose invocations the rows become.
    pub flow_id: String,
    /// Live (`csv-task`: the published version, every user) or test (`csv-task/test`: the
    /// draft if any, test users only).
    pub mode: Mode,
    /// Where the task is.
    pub status: BulkStatus,
    /// The cells of the file's header row, as uploaded; None until the upload finishes.
    pub header: Option<Vec<String>>,
    /// Rows of the file after the header, counted when the upload finishes (0 before).
    pub rows_total: u64,
    /// Rows handed to the engine so far, refused ones included.
    pub rows_processed: u64,
    /// Rows refused so far.
    pub rows_failed: u64,
    /// The first [`MAX_ROW_ERRORS`] row errors, or the reason the task failed (row 0).
    pub errors: Vec<RowError>,
    /// The number of the last row handed to the engine (0: none yet); the next step starts
    /// after it, and saves its progress only from it ([`BulkRepository::save_progress`]).
    pub cursor: u64,
    /// Uploaded, waiting for one of its environment's
    /// [`MAX_RUNNING_BULK`](crate::trigger::invocation::MAX_RUNNING_BULK) bulk-task slots
    /// (docs/api.md, Bulk start from CSV): shown as `pending` with `"queued": true`.
    pub queued: bool,
    /// When the task was created.
    pub created: Timestamp,
    /// When the task last changed.
    pub updated: Timestamp,
    /// The lease this copy was claimed with (docs/architecture.md, Time, leases and fencing):
    /// the step's writes apply only while the task still holds it. None for a task not
    /// claimed.
    pub lease_until: Option<Timestamp>,
}

impl BulkTask {
    /// The status clients see: [`PublicStatus::Pending`] while it is queued for a slot, else
    /// its status, an upload in progress being pending too.
    pub fn public_status(&self) -> PublicStatus {
        match self.status {
            _ if self.queued => PublicStatus::Pending,
            BulkStatus::Pending | BulkStatus::Uploading => PublicStatus::Pending,
            BulkStatus::Processing => PublicStatus::Processing,
            BulkStatus::Completed => PublicStatus::Completed,
            BulkStatus::Failed => PublicStatus::Failed,
        }
    }

    /// A task just created: pending its upload, with no rows, at `at`. Its `id` is 0 until
    /// [`BulkRepository::create`] gives it one.
    pub fn new(environment_id: &str, flow_id: &str, mode: Mode, at: Timestamp) -> BulkTask {
        BulkTask {
            id: 0,
            environment_id: environment_id.to_owned(),
            flow_id: flow_id.to_owned(),
            mode,
            status: BulkStatus::Pending,
            header: None,
            rows_total: 0,
            rows_processed: 0,
            rows_failed: 0,
            errors: Vec::new(),
            cursor: 0,
            queued: false,
            created: at,
            updated: at,
            lease_until: None,
        }
    }
}

/// Storage of bulk (CSV) tasks and their rows (a port).
///
/// Calls that name an environment reach only its task: a task of another environment is never
/// found or changed. A claimed task's writes ([`fail`](Self::fail) with a lease,
/// [`save_progress`](Self::save_progress)) are fenced by its lease and cursor
/// (docs/architecture.md, Time, leases and fencing): a holder whose lease has passed to another
/// changes nothing, and is told so.
#[cfg_attr(feature = "mock", mockall::automock)]
#[async_trait]
pub trait BulkRepository: Send + Sync {
    /// Stores a new pending task as given (its `id` is not read) and answers the id storage
    /// gave it: positive, never given again, and greater than those given before (queued
    /// tasks start in that order).
    async fn create(&self, task: &BulkTask) -> Result<i64, StorageError>;
    /// The task with this id in the environment; None when there is none.
    async fn get(&self, environment_id: &str, id: i64) -> Result<Option<BulkTask>, StorageError>;
    /// Up to `limit` tasks of the flow `flow_id` in the environment, newest first: by
    /// `created`, then by id, both descending. With `status`, only those whose
    /// [`BulkTask::public_status`] it is (a queued task is pending, whatever it stores); with
    /// `after`, only those after it in that order. Tasks of another flow or environment are
    /// never answered; an empty answer when none is left.
    async fn list(
        &self,
        environment_id: &str,
        flow_id: &str,
        status: Option<PublicStatus>,
        after: Option<After<i64>>,
        limit: u32,
    ) -> Result<Vec<BulkTask>, StorageError>;
    /// pending → uploading, only from pending, with `updated` set to `now`. False, with
    /// nothing changed, when the environment has no such task or it is not pending (its
    /// upload began already, whatever became of it). The check and the change are one atomic
    /// write: of two uploads at once, one gets true.
    async fn begin_upload(
        &self,
        environment_id: &str,
        id: i64,
        now: Timestamp,
    ) -> Result<bool, StorageError>;
    /// Stores rows of an uploading task, each (row number, cells): numbers from 1 (the first
    /// row after the header) in file order, cells as read. Called in batches as the upload
    /// streams in, each batch's numbers after those of the batches before it (a batch with a
    /// number at or before one stored, or twice, is refused, [`StorageError::UniqueViolation`],
    /// nothing of it stored), each batch in one transaction; rows of a batch stored stay when
    /// a later one fails (failing the task deletes them).
    async fn add_rows(
        &self,
        environment_id: &str,
        id: i64,
        rows: Vec<(u64, Vec<String>)>,
    ) -> Result<(), StorageError>;
    /// uploading → processing, queued for a slot (see [`claim`](Self::claim)), with its
    /// `header` (the cells of the header row), `rows` as its `rows_total` and `updated` set to
    /// `now`.
    async fn finish_upload(
        &self,
        environment_id: &str,
        id: i64,
        header: Vec<String>,
        rows: u64,
        now: Timestamp,
    ) -> Result<(), StorageError>;
    /// → failed with `errors` in place of the row errors, its lease ended and `updated` set to
    /// `now`; its stored rows are deleted, in the same transaction. With `held` (a claimed
    /// task's lease), only while the task is processing and still holds that lease: false,
    /// with nothing changed, once it has passed to another holder. Without `held` (an upload
    /// that failed), whatever the task's state, and true.
    async fn fail(
        &self,
        environment_id: &str,
        id: i64,
        errors: Vec<RowError>,
        now: Timestamp,
        held: Option<Timestamp>,
    ) -> Result<bool, StorageError>;
    /// Takes a processing task whose lease ran out (or never had one) until `lease_until`,
    /// oldest first, of any environment; the task returned carries that lease. None when no
    /// task is due. Two claims at once never take the same task.
    ///
    /// A queued task is taken only while its environment has fewer than `slots` tasks holding
    /// one (bulk invocations pending or running, and processing tasks not queued: see
    /// [`InvocationRepository::running_bulk`](crate::trigger::InvocationRepository::running_bulk));
    /// taking it ends its wait, and it holds a slot until it is final.
    async fn claim(
        &self,
        now: Timestamp,
        lease_until: Timestamp,
        slots: u64,
    ) -> Result<Option<BulkTask>, StorageError>;
    /// Up to `limit` stored rows of the task numbered after `after`, in ascending order of
    /// number, as [`add_rows`](Self::add_rows) stored them; empty when none is left.
    async fn rows(
        &self,
        environment_id: &str,
        id: i64,
        after: u64,
        limit: u32,
    ) -> Result<Vec<(u64, Vec<String>)>, StorageError>;
    /// Saves a step's progress in one transaction, only while the stored task is processing,
    /// at cursor `from_cursor` and held with `task.lease_until` (None: holding no lease):
    /// its status, cursor and `updated` from `task`; `handled` added to `rows_processed` and
    /// `failed` to `rows_failed`; `errors` appended to the stored row errors up to
    /// [`MAX_ROW_ERRORS`] in all; the stored rows up to the new cursor deleted; and the lease
    /// ended, so that the next step may be claimed at once. False, with nothing changed, when
    /// the task has moved on: another holder took it over after this one's lease ran out
    /// (docs/architecture.md, Time, leases and fencing).
    async fn save_progress(
        &self,
        task: &BulkTask,
        from_cursor: u64,
        handled: u64,
        failed: u64,
        errors: Vec<RowError>,
    ) -> Result<bool, StorageError>;
}

/// Why an upload is refused before any of its rows is read ([`BulkService::begin_upload`]).
#[derive(Debug, thiserror::Error)]
pub enum UploadError {
    /// The upload URL is tampered with or has expired (403 `upload_url_invalid` or
    /// `upload_url_expired`).
    #[error(transparent)]
    Grant(#[from] GrantError),
    /// The task is not waiting for its upload: one began already, also when it failed (409
    /// `already_uploaded`: create another task).
    #[error("this task already has its upload")]
    AlreadyUploaded,
    /// Storage failed.
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
mod tests;
