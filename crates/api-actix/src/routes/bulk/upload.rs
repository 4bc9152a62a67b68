//! `PUT /uploads/csv/{token}`: the file of a bulk start task, forwarded to the parser as it
//! arrives, its rows stored as they come; the task fails with why when the upload does.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use actix_web::http::header::{self, HeaderValue};
use actix_web::http::StatusCode;
use actix_web::web::Bytes;
use actix_web::{web, HttpRequest};
use domain::bulk::{BulkService, GrantError, UploadError, UploadGrant, MAX_UPLOAD_BYTES};
use domain::{DomainError, StorageError};
use futures_util::StreamExt;
use serde::Serialize;
use tokio::sync::mpsc::{Receiver, Sender};
use utoipa::ToSchema;

use super::stream::parse;
use super::BulkTaskDto;
use crate::problem::{ApiError, Problem};
use crate::routes::shape::{ok, Reply};
use crate::AppState;

/// A batch of rows, each with its number (1 is the first after the header).
type Rows = Vec<(u64, Vec<String>)>;

#[derive(Serialize, ToSchema)]
pub struct UploadedResponse {
    pub data: UploadedTask,
}

#[derive(Serialize, ToSchema)]
pub struct UploadedTask {
    pub task: BulkTaskDto,
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
) -> Reply {
    if !is_csv(&req) {
        return Err(ApiError::unsupported_media_type("text/csv"));
    }
    let grant: UploadGrant = state
        .bulk
        .begin_upload(&token)
        .await
        .map_err(upload_refused)?;

    let (chunk_tx, chunk_rx) = tokio::sync::mpsc::channel::<Bytes>(8);
    let (rows_tx, rows_rx) = tokio::sync::mpsc::channel::<Rows>(2);
    // After the channels, so that when the request is dropped the flag is set before the
    // chunks' sender goes (locals drop in reverse order): the parse sees a cut, not an end.
    let mut unfinished = Unfinished {
        cut: Arc::new(AtomicBool::new(false)),
        task: Some((state.bulk.clone(), grant.clone())),
    };
    let cut = unfinished.cut.clone();
    let parser = actix_web::rt::task::spawn_blocking(move || parse(chunk_rx, rows_tx, cut));
    let writer = actix_web::rt::spawn(store(state.bulk.clone(), grant.clone(), rows_rx));
    // The sender is lent, not moved: it stays a local declared before `unfinished`.
    let refused = forward(&mut payload, &chunk_tx).await;
    drop(chunk_tx);
    let parsed = parser
        .await
        .unwrap_or_else(|e| Err(format!("the parser failed: {e}")));
    let written = writer
        .await
        .unwrap_or_else(|e| Err(StorageError::Internal(e.to_string())));
    unfinished.task = None;
    match outcome(refused, parsed, written) {
        Ok((header, rows)) => {
            let task = state.bulk.finish_upload(&grant, header, rows).await?;
            ok(UploadedResponse {
                data: UploadedTask { task: task.into() },
            })
        }
        Err((reason, error)) => {
            state
                .bulk
                .fail_upload(&grant, reason)
                .await
                .map_err(DomainError::Storage)?;
            Err(error)
        }
    }
}

/// Whether the upload is declared `text/csv` (with or without parameters).
fn is_csv(req: &HttpRequest) -> bool {
    req.headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v: &HeaderValue| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|v| v.trim().eq_ignore_ascii_case("text/csv"))
}

/// Stores the parsed rows, batch by batch, until the parser stops sending.
async fn store(
    bulk: Arc<BulkService>,
    grant: UploadGrant,
    mut rows: Receiver<Rows>,
) -> Result<(), StorageError> {
    while let Some(batch) = rows.recv().await {
        bulk.add_rows(&grant, batch).await?;
    }
    Ok(())
}

/// Forwards the request's body to the parser, chunk by chunk, up to [`MAX_UPLOAD_BYTES`].
/// Returns why the upload was cut short, if it was: the reason the task keeps, and the answer.
async fn forward(payload: &mut web::Payload, chunks: &Sender<Bytes>) -> Option<(String, ApiError)> {
    let mut received = 0usize;
    while let Some(chunk) = payload.next().await {
        match chunk {
            Ok(bytes) => {
                received += bytes.len();
                if received > MAX_UPLOAD_BYTES {
                    return Some((
                        "the upload exceeded 32 MiB".into(),
                        ApiError::new(
                            StatusCode::PAYLOAD_TOO_LARGE,
                            "payload_too_large",
                            "Payload too large",
                            "the file exceeds 32 MiB; the task failed, create another",
                        ),
                    ));
                }
                if chunks.send(bytes).await.is_err() {
                    return None; // the parser stopped: its error says why
                }
            }
            Err(e) => {
                return Some((
                    "the upload broke off".into(),
                    ApiError::new(
                        StatusCode::BAD_REQUEST,
                        "upload_incomplete",
                        "Upload incomplete",
                        format!("the upload broke off: {e}; the task failed, create another"),
                    ),
                ));
            }
        }
    }
    None
}

/// What the upload came to: the header and the row count to finish the task with, or the
/// reason to fail it with and the answer. The first failure wins: the request's own, then the
/// storing of rows, then the parse.
fn outcome(
    refused: Option<(String, ApiError)>,
    parsed: Result<(Vec<String>, u64), String>,
    written: Result<(), StorageError>,
) -> Result<(Vec<String>, u64), (String, ApiError)> {
    match (refused, parsed, written) {
        (Some(refused), _, _) => Err(refused),
        (None, _, Err(e)) => Err((
            "the rows could not be stored".into(),
            DomainError::Storage(e).into(),
        )),
        (None, Err(message), Ok(())) => Err((
            message.clone(),
            ApiError::new(
                StatusCode::BAD_REQUEST,
                "invalid_csv",
                "Invalid CSV",
                format!("{message}; the task failed, create another"),
            ),
        )),
        (None, Ok(parsed), Ok(())) => Ok(parsed),
    }
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
