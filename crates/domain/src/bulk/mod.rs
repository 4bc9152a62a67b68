//! Bulk start from a CSV file (docs/api.md, Bulk start from CSV): tasks and their port, the
//! signed upload URLs ([`grant`]), the mapping of CSV rows to trigger elements ([`csv`]), and
//! the service and worker that feed rows to the engine ([`service`]).

pub mod csv;
pub mod grant;
pub mod service;

pub use csv::{CsvHeader, CsvRow};
pub use grant::{GrantError, UploadGrant};
pub use service::BulkService;

use async_trait::async_trait;

use crate::trigger::Mode;
use crate::{DomainError, StorageError, Timestamp};

/// Contract §5: 32 MiB, counted as the body arrives.
pub const MAX_UPLOAD_BYTES: usize = 32 * 1024 * 1024;
pub const UPLOAD_URL_MINUTES: i64 = 5;
/// A row may target at most this many users.
pub const MAX_USERS_PER_ROW: usize = 10;
/// Row errors kept on a task.
pub const MAX_ROW_ERRORS: usize = 100;
/// Rows handed to the engine per step.
pub const ROWS_PER_STEP: u32 = 2_000;

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
mod tests;
