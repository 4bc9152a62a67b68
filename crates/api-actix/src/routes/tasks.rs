//! Cancel tasks (spec 2.7, 4.2; contract §6). Role `events`.

use actix_web::{web, HttpRequest, HttpResponse};
use domain::cancel::{CancelStatus, CancelTask};
use domain::id::{EnvironmentId, FlowId, TaskId};
use serde::Serialize;
use serde_json::Value;
use utoipa::ToSchema;

use super::timestamp;
use crate::auth::Caller;
use crate::body::json_object;
use crate::problem::{ApiError, Problem};
use crate::AppState;

const UNAUTHORIZED: &str = "No valid credential, or no access to the environment";
const FORBIDDEN: &str = "Needs role `events` (or the `action_flows:trigger` scope)";

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

/// Body of a cancel request (optional: without one, every active instance of the flow).
#[derive(ToSchema)]
#[allow(dead_code)] // documents the request
#[schema(example = json!({"endUserId": "user-1", "cancelCards": true}))]
pub struct CancelRequest {
    #[schema(rename = "endUserId")]
    end_user_id: Option<String>,
    #[schema(rename = "flowInvocationId")]
    flow_invocation_id: Option<String>,
    #[schema(rename = "flowConfigVersion", minimum = 1, maximum = 2147483647)]
    flow_config_version: Option<u32>,
    /// Default true; false stops the instances and leaves their cards.
    #[schema(rename = "cancelCards")]
    cancel_cards: Option<bool>,
}

/// Cancel the flow's instances (all, or narrowed by the body) and by default their cards.
/// Work queued before the cancel and not yet done will not create cards either.
#[utoipa::path(
    post, path = "/v1/{environmentId}/action-flow/{flowConfigId}/task/cancel", tag = "triggers", operation_id = "cancelFlow",
    params(("environmentId" = String, Path, description = "Environment id"), ("flowConfigId" = String, Path, description = "Action Flow id")),
    request_body(content = CancelRequest, description = "Optional"),
    responses(
        (status = 202, description = "Accepted; poll the `cancel-status` link", body = CancelCreatedResponse),
        (status = 400, description = "Request validation failed", body = Problem, content_type = "application/problem+json"),
        (status = 401, description = UNAUTHORIZED, body = Problem, content_type = "application/problem+json"),
        (status = 403, description = FORBIDDEN, body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "No such Action Flow", body = Problem, content_type = "application/problem+json"),
        (status = 415, description = "A body that is not application/json", body = Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = []))
)]
pub async fn cancel(
    state: web::Data<AppState>,
    caller: Caller,
    path: web::Path<(EnvironmentId, FlowId)>,
    req: HttpRequest,
    body: web::Bytes,
) -> Result<HttpResponse, ApiError> {
    let (env, flow) = path.into_inner();
    // The key before the body (contract §16): 401 and 403 come before 400.
    caller
        .0
        .authorize(&env, domain::Permission::ActionFlowsTrigger)?;
    let body = if body.iter().all(u8::is_ascii_whitespace) {
        None
    } else {
        Some(Value::Object(json_object(&req, &body)?))
    };
    let task = state
        .cancels
        .start(&caller.0, &env, &flow, body.as_ref())
        .await?;
    let href = format!(
        "{}/v1/{env}/action-flow/{flow}/task/{}/status",
        state.public_url, task.id
    );
    Ok(HttpResponse::Accepted().json(CancelCreatedResponse {
        data: CancelCreated {
            links: vec![Link {
                href,
                rel: "cancel-status".into(),
                title: "Status of the cancel task".into(),
                method: "GET".into(),
            }],
            task_id: task.id.into(),
        },
    }))
}

/// The progress of a cancel task.
#[utoipa::path(
    get, path = "/v1/{environmentId}/action-flow/{flowConfigId}/task/{taskId}/status", tag = "triggers", operation_id = "cancelStatus",
    params(
        ("environmentId" = String, Path, description = "Environment id"),
        ("flowConfigId" = String, Path, description = "Action Flow id"),
        ("taskId" = String, Path, description = "The cancel task's id (UUID)"),
    ),
    responses(
        (status = 200, description = "The status (not wrapped in `data`)", body = CancelStatusResponse),
        (status = 400, description = "The task id is not a UUID", body = Problem, content_type = "application/problem+json"),
        (status = 401, description = UNAUTHORIZED, body = Problem, content_type = "application/problem+json"),
        (status = 403, description = FORBIDDEN, body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "No such task of this flow", body = Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = []))
)]
pub async fn cancel_status(
    state: web::Data<AppState>,
    caller: Caller,
    path: web::Path<(EnvironmentId, FlowId, TaskId)>,
) -> Result<HttpResponse, ApiError> {
    let (env, flow, task) = path.into_inner();
    let task = state.cancels.status(&caller.0, &env, &flow, &task).await?;
    Ok(HttpResponse::Ok().json(CancelStatusResponse::from(task)))
}

pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.service(
        web::resource("/v1/{environmentId}/action-flow/{flowConfigId}/task/cancel")
            .route(web::post().to(cancel)),
    )
    .service(
        web::resource("/v1/{environmentId}/action-flow/{flowConfigId}/task/{taskId}/status")
            .route(web::get().to(cancel_status)),
    );
}
