//! A subscription's deliveries: a test call now, the attempt log, and sending events again.

use actix_web::HttpRequest;
use domain::id::{EnvironmentId, EventId, WebhookId};
use domain::webhook::Attempt;
use domain::{FieldError, Permission, Timestamp};
use serde::Serialize;
use serde_json::{Map, Value};
use utoipa::ToSchema;

use crate::problem::{ApiError, Problem};
use crate::routes::query::{page_only, paged};
use crate::routes::shape::{accepted, ok, Body, Call, Reply};
use crate::routes::timestamp;

/// One call made to a subscription's URL.
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct AttemptDto {
    pub id: String,
    /// The event (`webhook-id` header, `data.id` of the payload).
    pub event_id: String,
    pub event_type: String,
    /// 1 for the first call of a delivery.
    pub attempt: u32,
    /// `scheduled`, `manual` (resend, recover) or `test`.
    pub trigger: String,
    /// Null when no HTTP answer arrived.
    pub status_code: Option<u16>,
    pub error: Option<String>,
    pub duration_ms: u64,
    /// The first 20 KB of the answer.
    pub response_body: String,
    /// When the next attempt is due; null when this was the last.
    #[schema(format = DateTime)]
    pub next_attempt: Option<String>,
    #[schema(format = DateTime)]
    pub created: String,
}

impl From<Attempt> for AttemptDto {
    fn from(a: Attempt) -> Self {
        AttemptDto {
            next_attempt: a.next_attempt_at.as_ref().map(timestamp),
            created: timestamp(&a.created),
            id: a.id,
            event_id: a.event_id,
            event_type: a.event_name,
            attempt: a.attempt,
            trigger: a.trigger,
            status_code: a.status_code,
            error: a.error,
            duration_ms: a.duration_ms,
            response_body: a.response_body,
        }
    }
}

#[derive(Serialize, ToSchema)]
pub struct AttemptResponse {
    pub data: AttemptDto,
}

#[derive(Serialize, ToSchema)]
pub struct AttemptListResponse {
    pub data: Vec<AttemptDto>,
    /// Pass as `cursor` for the next page; null on the last page.
    pub next: Option<String>,
}

#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct QueuedDto {
    /// How many deliveries were queued.
    pub queued: u64,
}

#[derive(Serialize, ToSchema)]
pub struct QueuedResponse {
    pub data: QueuedDto,
}

impl QueuedResponse {
    /// The answer for `queued` deliveries queued.
    fn of(queued: u64) -> Self {
        QueuedResponse {
            data: QueuedDto { queued },
        }
    }
}

/// Send a `webhook-test` event now; the answer is the attempt's outcome (also logged).
#[utoipa::path(
    post, path = "/v1/{environmentId}/webhook/{webhookId}/test", tag = "webhooks",
        operation_id = "testWebhook",
    params(("environmentId" = String, Path, description = "Environment id"), ("webhookId" = String,
        Path, description = "Subscription id")),
    responses(
        (status = 200,
            description = "The attempt: status code (null when the call failed), duration, answer",
                body = AttemptResponse),
        (status = 404, response = crate::problem::NotFound),
    ),
    security(("bearer" = ["webhooks:write"]))
)]
pub async fn test(call: Call<(EnvironmentId, WebhookId)>) -> Reply {
    let (env, id) = &call.path;
    let attempt = call.state.webhooks.test(&call.caller, env, id).await?;
    ok(AttemptResponse {
        data: attempt.into(),
    })
}

/// The attempt log, newest first.
#[utoipa::path(
    get, path = "/v1/{environmentId}/webhook/{webhookId}/deliveries", tag = "webhooks",
        operation_id = "listWebhookDeliveries",
    params(
        ("environmentId" = String, Path, description = "Environment id"),
        ("webhookId" = String, Path, description = "Subscription id"),
        ("limit" = Option<u32>, Query, description = "1–500, default 50", minimum = 1,
            maximum = 500),
        ("cursor" = Option<String>, Query, description = "`next` of the previous page"),
    ),
    responses(
        (status = 200, description = "A page of attempts", body = AttemptListResponse),
        (status = 404, response = crate::problem::NotFound),
    ),
    security(("bearer" = ["webhooks:read"]))
)]
pub async fn deliveries(call: Call<(EnvironmentId, WebhookId)>, req: HttpRequest) -> Reply {
    // The key before the query (contract §16): 401 and 403 come before 400.
    call.authorize(Permission::WebhooksRead)?;
    let page = page_only(&req)?;
    let (env, id) = &call.path;
    let page = call.state.webhooks.attempts(&call.caller, env, id, page);
    let (data, next) = paged(page.await?);
    ok(AttemptListResponse { data, next })
}

/// Send one event to the subscription again (whatever happened to it before).
#[utoipa::path(
    post, path = "/v1/{environmentId}/webhook/{webhookId}/deliveries/{eventId}/resend",
        tag = "webhooks", operation_id = "resendWebhookEvent",
    params(
        ("environmentId" = String, Path, description = "Environment id"),
        ("webhookId" = String, Path, description = "Subscription id"),
        ("eventId" = String, Path, description = "Event id"),
    ),
    responses(
        (status = 202, description = "Queued", body = QueuedResponse),
        (status = 404, response = crate::problem::NotFound),
        (status = 409, description = "The subscription is disabled (`webhook_disabled`)",
            body = Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = ["webhooks:write"]))
)]
pub async fn resend(call: Call<(EnvironmentId, WebhookId, EventId)>) -> Reply {
    let (env, id, event) = &call.path;
    let webhooks = &call.state.webhooks;
    webhooks.resend(&call.caller, env, id, event).await?;
    accepted(QueuedResponse::of(1))
}

/// Queue again every failed or cancelled delivery of events since a time.
#[utoipa::path(
    post, path = "/v1/{environmentId}/webhook/{webhookId}/recover", tag = "webhooks",
        operation_id = "recoverWebhook",
    params(("environmentId" = String, Path, description = "Environment id"), ("webhookId" = String,
        Path, description = "Subscription id")),
    request_body = crate::schemas::RecoverRequest,
    responses(
        (status = 202, description = "How many deliveries were queued", body = QueuedResponse),
        (status = 400, description = "`since` missing or not RFC 3339", body = Problem,
            content_type = "application/problem+json"),
        (status = 404, response = crate::problem::NotFound),
        (status = 409, description = "The subscription is disabled (`webhook_disabled`)",
            body = Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = ["webhooks:write"]))
)]
pub async fn recover(call: Call<(EnvironmentId, WebhookId)>, body: Body) -> Reply {
    let since = since(&call.read(Permission::WebhooksWrite, &body)?)?;
    let (env, id) = &call.path;
    let queued = call.state.webhooks.recover(&call.caller, env, id, since);
    accepted(QueuedResponse::of(queued.await?))
}

/// The `since` of a recover body: an RFC 3339 timestamp.
fn since(object: &Map<String, Value>) -> Result<Timestamp, ApiError> {
    let mut errors: Vec<FieldError> = Vec::new();
    let since: Option<Timestamp> = match object.get("since") {
        Some(Value::String(s)) => match domain::time::parse_timestamp(s) {
            Ok(t) => Some(t),
            Err(message) => {
                errors.push(FieldError::new("since", message));
                None
            }
        },
        _ => {
            errors.push(FieldError::new(
                "since",
                "is required: an RFC 3339 timestamp",
            ));
            None
        }
    };
    let Some(since) = since.filter(|_| errors.is_empty()) else {
        return Err(ApiError::validation(errors));
    };
    Ok(since)
}
