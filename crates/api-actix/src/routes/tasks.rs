//! Cancel tasks (spec 2.7, 4.2; contract §6), and the list of a flow's tasks of both kinds,
//! CSV and cancel (contract §11). Role `events`.

use actix_web::{web, HttpRequest};
use domain::bulk::PublicStatus;
use domain::cancel::{CancelStatus, CancelTask};
use domain::id::{EnvironmentId, FlowId, TaskId};
use domain::tasks::{FlowTask, TaskFilter, TaskKind};
use domain::{PageRequest, Permission};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::ToSchema;

use super::bulk::BulkStatus;
use super::query::{cursor, Query};
use super::shape::{accepted_at, ok, valid, Body, Call, Reply};
use super::timestamp;
use crate::problem::{ApiError, Problem};
use crate::AppState;

#[derive(Serialize, ToSchema)]
pub struct Link {
    /// The status URL.
    pub href: String,
    /// `cancel-status`.
    pub rel: String,
    pub title: String,
    /// The HTTP method: `GET`.
    #[serde(rename = "type")]
    pub method: String,
}

#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct CancelCreated {
    pub links: Vec<Link>,
    /// UUID form.
    pub task_id: String,
}

#[derive(Serialize, ToSchema)]
pub struct CancelCreatedResponse {
    pub data: CancelCreated,
}

impl CancelCreatedResponse {
    /// The answer to a cancel: the task's id, and its status URL as a `cancel-status` link.
    fn new(href: String, task_id: String) -> Self {
        let link = Link {
            href,
            rel: "cancel-status".into(),
            title: "Status of the cancel task".into(),
            method: "GET".into(),
        };
        CancelCreatedResponse {
            data: CancelCreated {
                links: vec![link],
                task_id,
            },
        }
    }
}

#[derive(Serialize, ToSchema)]
pub struct CardCounts {
    pub actual: u64,
    pub expected: u64,
}

/// The status of a cancel task (spec 2.7; not wrapped in `data`).
#[derive(Serialize, ToSchema)]
pub struct CancelStatusResponse {
    #[schema(format = DateTime)]
    pub created: String,
    /// `processing`, `completed` or `failed`.
    pub status: String,
    /// 0–100.
    pub progress: u8,
    /// Flow instances cancelled.
    pub actual: u64,
    /// Flow instances to cancel.
    pub expected: u64,
    pub errors: Vec<String>,
    /// Cards cancelled and to cancel; absent when the task failed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cards: Option<CardCounts>,
}

impl From<CancelTask> for CancelStatusResponse {
    fn from(t: CancelTask) -> Self {
        let failed = t.status == CancelStatus::Failed;
        CancelStatusResponse {
            created: timestamp(&t.created),
            status: t.status.as_str().into(),
            progress: t.progress(),
            actual: if failed { 0 } else { t.actual },
            expected: if failed { 0 } else { t.expected.unwrap_or(0) },
            cards: (!failed).then(|| CardCounts {
                actual: t.cards_actual,
                expected: t.cards_expected.unwrap_or(0).max(t.cards_actual),
            }),
            errors: t.errors,
        }
    }
}

/// The status URL of the cancel task `id` of the flow `flow` of `env`.
fn status_url(state: &AppState, env: &str, flow: &str, id: &str) -> String {
    format!(
        "{}/v1/{env}/action-flow/{flow}/task/{id}/status",
        state.public_url
    )
}

/// A cancel task in a flow's list: its status object, with its id and status URL.
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct CancelTaskDto {
    /// The task's id (a UUID), as the cancel answered it.
    pub task_id: String,
    /// `GET` it for this status.
    pub status_url: String,
    #[serde(flatten)]
    pub status: CancelStatusResponse,
}

/// One task of a flow, in the shape its status endpoint answers, plus `kind`.
#[derive(Serialize, ToSchema)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum TaskDto {
    /// A bulk start from a CSV file: `task` and `statusUrl`, as `GET
    /// .../csv-task/{taskId}/status` answers them in `data`.
    Csv(BulkStatus),
    /// A cancel: the status object of `GET .../task/{taskId}/status`, with `taskId` and
    /// `statusUrl`.
    Cancel(CancelTaskDto),
}

impl TaskDto {
    /// `task`, a task of the flow `flow` of `env`, in the shape of its status endpoint.
    fn new(state: &AppState, env: &str, flow: &str, task: FlowTask) -> Self {
        match task {
            FlowTask::Csv(task) => TaskDto::Csv(BulkStatus::new(state, env, flow, task)),
            FlowTask::Cancel(task) => TaskDto::Cancel(CancelTaskDto {
                status_url: status_url(state, env, flow, &task.id),
                task_id: task.id.as_str().to_owned(),
                status: task.into(),
            }),
        }
    }
}

/// A page of a flow's tasks, newest first.
#[derive(Serialize, ToSchema)]
#[schema(example = json!({
    "data": [
        {
            "kind": "cancel",
            "taskId": "3f2b8c1e-6d4a-4b9e-8f0a-2c5d7e9b1a34",
            "statusUrl": "https://workbench.example.com/v1/env_01jd3m5y6q8k9r2t4v6w8x0z1a/action-fl\
                ow/flw_01jd3m5y6q8k9r2t4v6w8x0z1a/task/3f2b8c1e-6d4a-4b9e-8f0a-2c5d7e9b1a34/status",
            "created": "2026-11-22T10:05:00.000Z",
            "status": "completed",
            "progress": 100,
            "actual": 1,
            "expected": 1,
            "errors": [],
            "cards": {"actual": 1, "expected": 1}
        },
        {
            "kind": "csv",
            "task": {
                "id": 42,
                "status": "completed",
                "queued": false,
                "rowsTotal": 2,
                "rowsProcessed": 2,
                "rowsFailed": 0,
                "errors": [],
                "created": "2026-11-22T10:00:00.000Z",
                "updated": "2026-11-22T10:00:01.000Z"
            },
            "statusUrl": "https://workbench.example.com/v1/env_01jd3m5y6q8k9r2t4v6w8x0z1a/action-fl\
                ow/flw_01jd3m5y6q8k9r2t4v6w8x0z1a/csv-task/42/status"
        }
    ],
    "next": null
}))]
pub struct TaskListResponse {
    pub data: Vec<TaskDto>,
    /// Pass as `cursor` for the next page; null on the last page.
    pub next: Option<String>,
}

/// Cancel the flow's instances (all, or narrowed by the body) and by default their cards.
/// Work queued before the cancel and not yet done will not create cards either.
#[utoipa::path(
    post, path = "/v1/{environmentId}/action-flow/{flowConfigId}/task/cancel", tag = "triggers",
        operation_id = "cancelFlow",
    params(("environmentId" = String, Path, description = "Environment id"),
        ("flowConfigId" = String, Path, description = "Action Flow id")),
    request_body(content = Option<crate::schemas::CancelRequest>,
        description = "Optional: without a body, every active instance of the flow"),
    responses(
        (status = 202, description = "Accepted; poll the `cancel-status` link",
            body = CancelCreatedResponse,
            headers(("Location" = String, description = "The task's status URL"))),
        (status = 404, response = crate::problem::NotFound),
    ),
    security(("bearer" = ["action_flows:trigger"]))
)]
pub async fn cancel(call: Call<(EnvironmentId, FlowId)>, body: Body) -> Reply {
    // The key before the body (contract §16): 401 and 403 come before 400.
    call.authorize(Permission::ActionFlowsTrigger)?;
    let body = if body.is_blank() {
        None
    } else {
        Some(Value::Object(body.object()?))
    };
    let (env, flow) = &call.path;
    let cancels = &call.state.cancels;
    let task = cancels
        .start(&call.caller, env, flow, body.as_ref())
        .await?;
    let href = status_url(&call.state, env, flow, &task.id);
    accepted_at(
        href.clone(),
        CancelCreatedResponse::new(href, task.id.into()),
    )
}

/// The progress of a cancel task.
#[utoipa::path(
    get, path = "/v1/{environmentId}/action-flow/{flowConfigId}/task/{taskId}/status",
        tag = "triggers", operation_id = "cancelStatus",
    params(
        ("environmentId" = String, Path, description = "Environment id"),
        ("flowConfigId" = String, Path, description = "Action Flow id"),
        ("taskId" = String, Path, description = "The cancel task's id (UUID)",
            pattern = "^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}\
                $"),
    ),
    responses(
        (status = 200, description = "The status (not wrapped in `data`)",
            body = CancelStatusResponse),
        (status = 400, description = "The task id is not a UUID", body = Problem,
            content_type = "application/problem+json"),
        (status = 404, response = crate::problem::NotFound),
    ),
    security(("bearer" = ["action_flows:read"]))
)]
pub async fn cancel_status(call: Call<(EnvironmentId, FlowId, TaskId)>) -> Reply {
    let (env, flow, task) = &call.path;
    let cancels = &call.state.cancels;
    let task = cancels.status(&call.caller, env, flow, task).await?;
    ok(CancelStatusResponse::from(task))
}

/// `kind` of the task list.
#[derive(Clone, Copy, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum TaskKindParam {
    /// Bulk start tasks (`csv-task`).
    Csv,
    /// Cancel tasks (`task/cancel`).
    Cancel,
}

impl From<TaskKindParam> for TaskKind {
    fn from(k: TaskKindParam) -> Self {
        match k {
            TaskKindParam::Csv => TaskKind::Csv,
            TaskKindParam::Cancel => TaskKind::Cancel,
        }
    }
}

/// `status` of the task list: `pending` is a CSV task's only.
#[derive(Clone, Copy, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum TaskStatusParam {
    Pending,
    Processing,
    Completed,
    Failed,
}

impl From<TaskStatusParam> for PublicStatus {
    fn from(s: TaskStatusParam) -> Self {
        match s {
            TaskStatusParam::Pending => PublicStatus::Pending,
            TaskStatusParam::Processing => PublicStatus::Processing,
            TaskStatusParam::Completed => PublicStatus::Completed,
            TaskStatusParam::Failed => PublicStatus::Failed,
        }
    }
}

/// The list's query: every problem reported at once.
fn task_query(req: &HttpRequest) -> Result<(TaskFilter, PageRequest), ApiError> {
    let query = Query::parse(req)?;
    let mut errors = Vec::new();
    let filter = TaskFilter {
        kind: query.choice::<TaskKindParam, _>("kind", "must be csv or cancel", &mut errors),
        status: query.choice::<TaskStatusParam, _>(
            "status",
            "must be pending, processing, completed or failed",
            &mut errors,
        ),
    };
    let page = query.page(&mut errors);
    valid(errors)?;
    Ok((filter, page))
}

/// A flow's CSV (bulk start) and cancel tasks, newest first (at one instant CSV tasks first),
/// each in the shape of its status endpoint plus `kind`; both kinds page together with one
/// cursor. Filters apply together.
#[utoipa::path(
    get, path = "/v1/{environmentId}/action-flow/{flowConfigId}/tasks", tag = "triggers",
        operation_id = "listTasks",
    params(
        ("environmentId" = String, Path, description = "Environment id"),
        ("flowConfigId" = String, Path, description = "Action Flow id"),
        ("kind" = inline(Option<TaskKindParam>), Query,
            description = "Only tasks of this kind (any letter case)"),
        ("status" = inline(Option<TaskStatusParam>), Query,
            description = "Only tasks in this status (any letter case); `pending` is a CSV task's \
                only, refused with `kind=cancel`"),
        ("limit" = Option<u32>, Query, description = "1–500, default 50", minimum = 1,
            maximum = 500),
        ("cursor" = Option<String>, Query, description = "`next` of the previous page"),
    ),
    responses(
        (status = 200, description = "A page of tasks, newest first", body = TaskListResponse),
        (status = 400,
            description = "A query parameter is invalid (`kind`, `status`, `limit`, `cursor`), \
                each reported; `status=pending` with `kind=cancel`", body = Problem,
                    content_type = "application/problem+json"),
        (status = 403, description = "Needs role `events` or `action_flows:read`", body = Problem,
            content_type = "application/problem+json"),
        (status = 404, description = "No such Action Flow in this environment", body = Problem,
            content_type = "application/problem+json"),
    ),
    security(("bearer" = []))
)]
pub async fn list(call: Call<(EnvironmentId, FlowId)>, req: HttpRequest) -> Reply {
    // The key before the query (contract §16): 401 and 403 come before 400.
    call.authorize(Permission::ActionFlowsRead)?;
    let (filter, page) = task_query(&req)?;
    let (env, flow) = &call.path;
    let tasks = &call.state.tasks;
    let page = tasks.list(&call.caller, env, flow, filter, page).await?;
    let shown = page.items.into_iter();
    ok(TaskListResponse {
        data: shown
            .map(|task| TaskDto::new(&call.state, env, flow, task))
            .collect(),
        next: cursor(page.next_after),
    })
}

pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.service(
        web::resource("/v1/{environmentId}/action-flow/{flowConfigId}/task/cancel")
            .route(web::post().to(cancel)),
    )
    .service(
        web::resource("/v1/{environmentId}/action-flow/{flowConfigId}/task/{taskId}/status")
            .route(web::get().to(cancel_status)),
    )
    .service(
        web::resource("/v1/{environmentId}/action-flow/{flowConfigId}/tasks")
            .route(web::get().to(list)),
    );
}
