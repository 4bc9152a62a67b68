//! Bulk start from CSV (spec 2.6, 4.2; contract §5): tasks, their status, and the upload URL
//! this service serves. The upload is parsed while it arrives (never held whole): chunks go to
//! a CSV reader on a blocking thread, rows come back in batches and are stored as they come.

mod stream;
mod upload;

use actix_web::web;
use domain::bulk::BulkTask;
use domain::id::{EnvironmentId, FlowId, TaskId};
use domain::trigger::Mode;
use serde::Serialize;
use utoipa::ToSchema;

use crate::problem::Problem;
use crate::routes::shape::{created, ok, Call, Reply};
use crate::routes::timestamp;
use crate::AppState;

pub use upload::*;

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

fn status_url(state: &AppState, env: &str, flow: &str, id: i64) -> String {
    format!(
        "{}/v1/{env}/action-flow/{flow}/csv-task/{id}/status",
        state.public_url
    )
}

/// A new bulk start task of the path's flow, in `mode`: 201, with its upload and status URLs.
async fn create(call: Call<(EnvironmentId, FlowId)>, mode: Mode) -> Reply {
    let ((env, flow), state) = (&call.path, &call.state);
    let (task, token) = state.bulk.create(&call.caller, env, flow, mode).await?;
    let status_url = status_url(state, env, flow, task.id);
    let data = BulkCreated {
        task: task.into(),
        upload_url: format!("{}/uploads/csv/{token}", state.public_url),
        status_url: status_url.clone(),
    };
    created(status_url, BulkCreatedResponse { data })
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
pub async fn create_live(call: Call<(EnvironmentId, FlowId)>) -> Reply {
    create(call, Mode::Live).await
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
pub async fn create_test(call: Call<(EnvironmentId, FlowId)>) -> Reply {
    create(call, Mode::Test).await
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
pub async fn status(call: Call<(EnvironmentId, FlowId, TaskId)>) -> Reply {
    let (env, flow, id) = &call.path;
    let task = call.state.bulk.status(&call.caller, env, flow, id).await?;
    ok(BulkStatusResponse {
        data: BulkStatus::new(&call.state, env, flow, task),
    })
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
