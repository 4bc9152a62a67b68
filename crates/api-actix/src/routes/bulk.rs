//! Bulk start from CSV (spec 2.6, 4.2; contract §5): tasks, their status, and the upload URL
//! this service serves. The upload is parsed while it arrives (never held whole): chunks go to
//! a CSV reader on a blocking thread, rows come back in batches and are stored as they come.

use domain::id::{EnvironmentId, FlowId, TaskId};
use std::io::Read;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use actix_web::http::header::{self, HeaderValue};
use actix_web::http::StatusCode;
use actix_web::web::Bytes;
use actix_web::{web, HttpRequest, HttpResponse};
use domain::bulk::csv::too_many_columns;
use domain::bulk::{
    BulkService, BulkTask, GrantError, UploadError, UploadGrant, MAX_COLUMNS, MAX_UPLOAD_BYTES,
};
use domain::trigger::Mode;
use domain::DomainError;
use futures_util::StreamExt;
use serde::Serialize;
use utoipa::ToSchema;

use super::timestamp;
use crate::auth::Caller;
use crate::problem::{ApiError, Problem};
use crate::AppState;

/// Rows per stored batch while uploading.
const UPLOAD_BATCH: usize = 2_000;

#[derive(Serialize, ToSchema)]
pub struct RowErrorDto {
    /// 1 is the first row after the header; 0 is the file as a whole.
    pub row: u64,
    pub message: String,
}

/// A bulk start task (spec 2.6, contract §5).
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct BulkTaskDto {
    pub id: i64,
    /// `pending` (waiting for the upload, or uploaded and queued), `processing`, `completed`
    /// or `failed`.
    pub status: String,
    /// Uploaded and waiting for one of the environment's five bulk-task slots: it starts when
    /// one frees (contract §10). Shown with `status` `pending`.
    pub queued: bool,
    pub rows_total: u64,
    pub rows_processed: u64,
    pub rows_failed: u64,
    /// The first 100 row errors.
    pub errors: Vec<RowErrorDto>,
    #[schema(format = DateTime)]
    pub created: String,
    #[schema(format = DateTime)]
    pub updated: String,
}

impl From<BulkTask> for BulkTaskDto {
    fn from(t: BulkTask) -> Self {
        BulkTaskDto {
            id: t.id,
            status: t.public_status().as_str().into(),
            queued: t.queued,
            rows_total: t.rows_total,
            rows_processed: t.rows_processed,
            rows_failed: t.rows_failed,
            errors: t
                .errors
                .into_iter()
                .map(|e| RowErrorDto {
                    row: e.row,
                    message: e.message,
                })
                .collect(),
            created: timestamp(&t.created),
            updated: timestamp(&t.updated),
        }
    }
}

#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct BulkCreated {
    pub task: BulkTaskDto,
    /// PUT (or POST) the file here within 5 minutes, `Content-Type: text/csv`, no
    /// Authorization.
    pub upload_url: String,
    pub status_url: String,
}

#[derive(Serialize, ToSchema)]
pub struct BulkCreatedResponse {
    pub data: BulkCreated,
}

/// A bulk start task as its status shows it (`data` of `GET .../csv-task/{taskId}/status`).
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct BulkStatus {
    pub task: BulkTaskDto,
    pub status_url: String,
}

impl BulkStatus {
    /// The status of `task`, a task of the flow `flow` of `env`.
    pub fn new(state: &AppState, env: &str, flow: &str, task: BulkTask) -> Self {
        BulkStatus {
            status_url: status_url(state, env, flow, task.id),
            task: task.into(),
        }
    }
}

#[derive(Serialize, ToSchema)]
pub struct BulkStatusResponse {
    pub data: BulkStatus,
}

#[derive(Serialize, ToSchema)]
pub struct UploadedResponse {
    pub data: UploadedTask,
}

#[derive(Serialize, ToSchema)]
pub struct UploadedTask {
    pub task: BulkTaskDto,
}

fn status_url(state: &AppState, env: &str, flow: &str, id: i64) -> String {
    format!(
        "{}/v1/{env}/action-flow/{flow}/csv-task/{id}/status",
        state.public_url
    )
}

async fn create(
    state: &AppState,
    caller: Caller,
    env: &EnvironmentId,
    flow: &FlowId,
    mode: Mode,
) -> Result<HttpResponse, ApiError> {
    let (task, token) = state.bulk.create(&caller.0, env, flow, mode).await?;
    let status_url = status_url(state, env, flow, task.id);
    Ok(HttpResponse::Created()
        .insert_header((header::LOCATION, status_url.clone()))
        .json(BulkCreatedResponse {
            data: BulkCreated {
                task: task.into(),
                upload_url: format!("{}/uploads/csv/{token}", state.public_url),
                status_url,
            },
        }))
}

/// Create a live bulk start task (published flows; every user).
#[utoipa::path(
    post, path = "/v1/{environmentId}/action-flow/{flowConfigId}/csv-task", tag = "triggers",
        operation_id = "createCsvTask",
    params(("environmentId" = String, Path, description = "Environment id"),
        ("flowConfigId" = String, Path, description = "Action Flow id")),
    responses(
        (status = 201,
            description = "The pending task, its upload URL (5 minutes) and its status URL",
                body = BulkCreatedResponse,
            headers(("Location" = String, description = "The task's status URL"))),
        (status = 404, response = crate::problem::NotFound),
    ),
    security(("bearer" = ["action_flows:trigger"]))
)]
pub async fn create_live(
    state: web::Data<AppState>,
    caller: Caller,
    path: web::Path<(EnvironmentId, FlowId)>,
) -> Result<HttpResponse, ApiError> {
    let (env, flow) = path.into_inner();
    create(&state, caller, &env, &flow, Mode::Live).await
}

/// Create a test bulk start task (the draft if any; test users only).
#[utoipa::path(
    post, path = "/v1/{environmentId}/action-flow/{flowConfigId}/csv-task/test", tag = "triggers",
        operation_id = "createCsvTestTask",
    params(("environmentId" = String, Path, description = "Environment id"),
        ("flowConfigId" = String, Path, description = "Action Flow id")),
    responses(
        (status = 201,
            description = "The pending task, its upload URL (5 minutes) and its status URL",
                body = BulkCreatedResponse,
            headers(("Location" = String, description = "The task's status URL"))),
        (status = 404, response = crate::problem::NotFound),
    ),
    security(("bearer" = ["action_flows:trigger"]))
)]
pub async fn create_test(
    state: web::Data<AppState>,
    caller: Caller,
    path: web::Path<(EnvironmentId, FlowId)>,
) -> Result<HttpResponse, ApiError> {
    let (env, flow) = path.into_inner();
    create(&state, caller, &env, &flow, Mode::Test).await
}

/// The status of a bulk start task (live or test).
#[utoipa::path(
    get, path = "/v1/{environmentId}/action-flow/{flowConfigId}/csv-task/{taskId}/status",
        tag = "triggers", operation_id = "csvTaskStatus",
    params(
        ("environmentId" = String, Path, description = "Environment id"),
        ("flowConfigId" = String, Path, description = "Action Flow id"),
        ("taskId" = i64, Path, description = "The task's integer id", minimum = 1),
    ),
    responses(
        (status = 200, description = "The task", body = BulkStatusResponse),
        (status = 400, description = "The task id is not a positive whole number", body = Problem,
            content_type = "application/problem+json"),
        (status = 404, response = crate::problem::NotFound),
    ),
    security(("bearer" = ["action_flows:read"]))
)]
pub async fn status(
    state: web::Data<AppState>,
    caller: Caller,
    path: web::Path<(EnvironmentId, FlowId, TaskId)>,
) -> Result<HttpResponse, ApiError> {
    let (env, flow, id) = path.into_inner();
    let task = state.bulk.status(&caller.0, &env, &flow, &id).await?;
    Ok(HttpResponse::Ok().json(BulkStatusResponse {
        data: BulkStatus::new(&state, &env, &flow, task),
    }))
}

/// The longest header row read, in bytes: [`MAX_COLUMNS`] columns of long names fit. A longer
/// one is refused while it arrives, before it is split into columns.
const MAX_HEADER_BYTES: usize = 256 * 1024;
/// The CSV reader's buffer: what it may have read past the header row when that ends.
const READ_AHEAD: usize = 8 * 1024;

/// Reads what the upload handler forwards, as a blocking `Read` for the CSV parser. It stops
/// (an error) once `cut` is set, when the request ended before the parse did, and while the
/// header is read, past [`MAX_HEADER_BYTES`].
struct ChunkReader {
    chunks: tokio::sync::mpsc::Receiver<Bytes>,
    current: Bytes,
    cut: Arc<AtomicBool>,
    /// Bytes read so far, while the header is read; `None` after it.
    header_read: Option<usize>,
    header_too_long: bool,
}

impl Read for ChunkReader {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if self.cut.load(Ordering::Relaxed) {
            return Err(std::io::Error::other("the upload was cut short"));
        }
        while self.current.is_empty() {
            match self.chunks.blocking_recv() {
                Some(next) => self.current = next,
                // The sender also goes when the request is dropped: not the file's end then.
                None if self.cut.load(Ordering::Relaxed) => {
                    return Err(std::io::Error::other("the upload was cut short"))
                }
                None => return Ok(0),
            }
        }
        let n = buf.len().min(self.current.len());
        if let Some(read) = self.header_read.as_mut() {
            *read += n;
            if *read > MAX_HEADER_BYTES + READ_AHEAD {
                self.header_too_long = true;
                return Err(std::io::Error::other("the header row is too long"));
            }
        }
        buf[..n].copy_from_slice(&self.current[..n]);
        self.current = self.current.slice(n..);
        Ok(n)
    }
}

/// The refusal of a header row over [`MAX_HEADER_BYTES`] or [`MAX_COLUMNS`].
fn header_too_long() -> String {
    format!(
        "invalid header: it is longer than {} KiB; a header has at most {MAX_COLUMNS} columns",
        MAX_HEADER_BYTES / 1024
    )
}

/// Parses the stream: checks the header, sends rows in batches. Returns (header, rows).
fn parse(
    chunks: tokio::sync::mpsc::Receiver<Bytes>,
    rows: tokio::sync::mpsc::Sender<Vec<(u64, Vec<String>)>>,
    cut: Arc<AtomicBool>,
) -> Result<(Vec<String>, u64), String> {
    let mut reader = csv::ReaderBuilder::new()
        .buffer_capacity(READ_AHEAD)
        .has_headers(true)
        .flexible(true)
        .from_reader(ChunkReader {
            chunks,
            current: Bytes::new(),
            cut: cut.clone(),
            header_read: Some(0),
            header_too_long: false,
        });
    let header: Vec<String> = match reader.byte_headers() {
        Ok(cells) if cells.len() > MAX_COLUMNS => {
            return Err(format!("invalid header: {}", too_many_columns(cells.len())))
        }
        Ok(cells) => cells
            .iter()
            .map(|c| String::from_utf8_lossy(c).into_owned())
            .collect(),
        Err(e) => {
            if reader.get_ref().header_too_long {
                return Err(header_too_long());
            }
            return Err(format!("the header cannot be read: {e}"));
        }
    };
    reader.get_mut().header_read = None;
    if header.iter().all(String::is_empty) {
        return Err("the file is empty: it needs a header row".into());
    }
    domain::bulk::CsvHeader::parse(&header).map_err(|e| format!("invalid header: {e}"))?;
    let mut batch = Vec::with_capacity(UPLOAD_BATCH);
    let mut count = 0u64;
    let mut record = csv::ByteRecord::new();
    loop {
        if cut.load(Ordering::Relaxed) {
            return Err("the upload was cut short".into());
        }
        match reader.read_byte_record(&mut record) {
            Ok(false) => break,
            Ok(true) => {
                count += 1;
                let cells = record
                    .iter()
                    .map(|c| String::from_utf8_lossy(c).into_owned())
                    .collect();
                batch.push((count, cells));
                if batch.len() == UPLOAD_BATCH
                    && rows.blocking_send(std::mem::take(&mut batch)).is_err()
                {
                    return Err("the rows could not be stored".into());
                }
            }
            Err(e) => return Err(format!("row {}: {e}", count + 1)),
        }
    }
    if !batch.is_empty() && rows.blocking_send(batch).is_err() {
        return Err("the rows could not be stored".into());
    }
    Ok((header, count))
}

fn upload_refused(e: UploadError) -> ApiError {
    match e {
        UploadError::Grant(GrantError::Tampered) => ApiError::new(
            StatusCode::FORBIDDEN,
            "upload_url_invalid",
            "Forbidden",
            GrantError::Tampered.to_string(),
        ),
        UploadError::Grant(GrantError::Expired) => ApiError::new(
            StatusCode::FORBIDDEN,
            "upload_url_expired",
            "Forbidden",
            GrantError::Expired.to_string(),
        ),
        other => DomainError::from(other).into(),
    }
}

/// Upload the CSV file of a bulk start task: the URL is the credential (no Authorization).
#[utoipa::path(
    put, path = "/uploads/csv/{token}", tag = "triggers", operation_id = "uploadCsv",
    params(("token" = String, Path, description = "From the task's `uploadUrl`")),
    request_body(content = String, content_type = "text/csv",
        description = "Header row, then one row per flow element; at most 32 MiB"),
    responses(
        (status = 200, description = "Stored; the task is processing", body = UploadedResponse),
        (status = 400,
            description = "The header or a row cannot be read, or the header has more than \
            1,000 columns or 256 KiB (`invalid_csv`); the task failed",
            body = Problem, content_type = "application/problem+json"),
        (status = 403,
            description = "Tampered with (`upload_url_invalid`) or expired (`upload_url_expired`)",
                body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "The task already has its upload (`already_uploaded`)",
            body = Problem, content_type = "application/problem+json"),
        (status = 413, description = "Over 32 MiB; the task failed",
            body = Problem, content_type = "application/problem+json"),
        (status = 415, description = "Content-Type is not text/csv", body = Problem,
            content_type = "application/problem+json"),
    )
)]
pub async fn upload(
    state: web::Data<AppState>,
    token: web::Path<String>,
    req: HttpRequest,
    mut payload: web::Payload,
) -> Result<HttpResponse, ApiError> {
    let is_csv = req
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v: &HeaderValue| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|v| v.trim().eq_ignore_ascii_case("text/csv"));
    if !is_csv {
        return Err(ApiError::unsupported_media_type("text/csv"));
    }
    let grant: UploadGrant = state
        .bulk
        .begin_upload(&token)
        .await
        .map_err(upload_refused)?;

    let (chunk_tx, chunk_rx) = tokio::sync::mpsc::channel::<Bytes>(8);
    let (rows_tx, mut rows_rx) = tokio::sync::mpsc::channel::<Vec<(u64, Vec<String>)>>(2);
    // After the channels, so that when the request is dropped the flag is set before the
    // chunks' sender goes (locals drop in reverse order): the parse sees a cut, not an end.
    let mut unfinished = Unfinished {
        cut: Arc::new(AtomicBool::new(false)),
        task: Some((state.bulk.clone(), grant.clone())),
    };
    let cut = unfinished.cut.clone();
    let parser = actix_web::rt::task::spawn_blocking(move || parse(chunk_rx, rows_tx, cut));
    let writer = {
        let (bulk, grant) = (state.bulk.clone(), grant.clone());
        actix_web::rt::spawn(async move {
            while let Some(batch) = rows_rx.recv().await {
                bulk.add_rows(&grant, batch).await?;
            }
            Ok::<(), domain::StorageError>(())
        })
    };
    let mut received = 0usize;
    // Why the upload was cut short: the reason the task keeps, and the answer.
    let mut refused: Option<(String, ApiError)> = None;
    while let Some(chunk) = payload.next().await {
        match chunk {
            Ok(bytes) => {
                received += bytes.len();
                if received > MAX_UPLOAD_BYTES {
                    refused = Some((
                        "the upload exceeded 32 MiB".into(),
                        ApiError::new(
                            StatusCode::PAYLOAD_TOO_LARGE,
                            "payload_too_large",
                            "Payload too large",
                            "the file exceeds 32 MiB; the task failed, create another",
                        ),
                    ));
                    break;
                }
                if chunk_tx.send(bytes).await.is_err() {
                    break; // the parser stopped: its error says why
                }
            }
            Err(e) => {
                refused = Some((
                    "the upload broke off".into(),
                    ApiError::new(
                        StatusCode::BAD_REQUEST,
                        "upload_incomplete",
                        "Upload incomplete",
                        format!("the upload broke off: {e}; the task failed, create another"),
                    ),
                ));
                break;
            }
        }
    }
    drop(chunk_tx);
    let parsed = parser
        .await
        .unwrap_or_else(|e| Err(format!("the parser failed: {e}")));
    let written = writer
        .await
        .unwrap_or_else(|e| Err(domain::StorageError::Internal(e.to_string())));
    let (reason, error) = match (refused, parsed, written) {
        (Some(refused), _, _) => refused,
        (None, _, Err(e)) => (
            "the rows could not be stored".into(),
            DomainError::Storage(e).into(),
        ),
        (None, Err(message), Ok(())) => (
            message.clone(),
            ApiError::new(
                StatusCode::BAD_REQUEST,
                "invalid_csv",
                "Invalid CSV",
                format!("{message}; the task failed, create another"),
            ),
        ),
        (None, Ok((header, rows)), Ok(())) => {
            unfinished.task = None;
            let task = state.bulk.finish_upload(&grant, header, rows).await?;
            return Ok(HttpResponse::Ok().json(UploadedResponse {
                data: UploadedTask { task: task.into() },
            }));
        }
    };
    unfinished.task = None;
    state
        .bulk
        .fail_upload(&grant, reason)
        .await
        .map_err(DomainError::Storage)?;
    Err(error)
}

/// An upload's request that may end before its parse does: when the request is dropped (the
/// client went away, or the body's time ran out), the parse stops at its next read or row and
/// frees its thread, and the task fails, instead of working on for nobody.
struct Unfinished {
    cut: Arc<AtomicBool>,
    /// The task to fail if the request ends first; `None` once the handler settled it.
    task: Option<(Arc<BulkService>, UploadGrant)>,
}

impl Drop for Unfinished {
    fn drop(&mut self) {
        self.cut.store(true, Ordering::Relaxed);
        let Some((bulk, grant)) = self.task.take() else {
            return;
        };
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move {
                let reason = "the upload was cut short before it was read".to_owned();
                if let Err(e) = bulk.fail_upload(&grant, reason).await {
                    tracing::warn!(error = %e, "cannot fail the task of an upload cut short");
                }
            });
        }
    }
}

pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.service(
        web::resource("/v1/{environmentId}/action-flow/{flowConfigId}/csv-task")
            .route(web::post().to(create_live)),
    )
    .service(
        web::resource("/v1/{environmentId}/action-flow/{flowConfigId}/csv-task/test")
            .route(web::post().to(create_test)),
    )
    .service(
        web::resource("/v1/{environmentId}/action-flow/{flowConfigId}/csv-task/{taskId}/status")
            .route(web::get().to(status)),
    )
    .service(
        web::resource("/uploads/csv/{token}")
            .route(web::put().to(upload))
            .route(web::post().to(upload)),
    );
}
