//! Webhook subscriptions (spec 4.4, contract §7). Role `workbench`, or the `webhooks:*` scopes.

use domain::id::{EnvironmentId, EventId, WebhookId};
use std::collections::BTreeMap;

use actix_web::http::header;
use actix_web::{web, HttpRequest, HttpResponse};
use domain::webhook::{Attempt, Subscription};
use domain::{FieldError, Timestamp};
use serde::Serialize;
use serde_json::Value;
use utoipa::ToSchema;

use super::query::{cursor, Query};
use super::timestamp;
use crate::auth::Caller;
use crate::body::json_object;
use crate::problem::{ApiError, Problem};
use crate::AppState;

/// A webhook subscription (spec 2.8).
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct SubscriptionDto {
    #[schema(example = "whk_01jd3m5y6q8k9r2t4v6w8x0z1a")]
    pub id: String,
    #[schema(example = json!(["card-completed"]))]
    pub types: Vec<String>,
    #[schema(example = "https://example.com/hooks/workbench")]
    pub url: String,
    /// `POST` (default) or `PUT`.
    pub method: String,
    /// Sent with every call.
    pub headers: BTreeMap<String, String>,
    /// `whsec_…`: verifies the `webhook-signature` header (Standard Webhooks). Returned by
    /// subscribe, the subscription's details and rotate-secret; not in the list.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub secret: Option<String>,
    pub card_template_id: Option<String>,
    pub action_flow_config_id: Option<String>,
    /// What the subscription is for; null when none was given.
    #[schema(example = "Completed cards to the CRM")]
    pub description: Option<String>,
    /// `active` or `disabled`.
    pub status: String,
    /// `api` (DELETE), `gone` (the endpoint answered 410) or `failing` (5 days of failures).
    pub disabled_reason: Option<String>,
    /// Since when every call has failed; null when the last call succeeded.
    #[schema(format = DateTime)]
    pub failing_since: Option<String>,
    #[schema(format = DateTime)]
    pub created: String,
    #[schema(format = DateTime)]
    pub updated: String,
}

impl SubscriptionDto {
    fn new(s: Subscription, with_secret: bool) -> Self {
        SubscriptionDto {
            secret: with_secret.then_some(s.secret),
            status: if s.enabled { "active" } else { "disabled" }.into(),
            method: s.method.as_str().into(),
            failing_since: s.failing_since.as_ref().map(timestamp),
            created: timestamp(&s.created),
            updated: timestamp(&s.updated),
            id: s.id.into(),
            types: s.types,
            url: s.url,
            headers: s.headers,
            card_template_id: s.card_template_id,
            action_flow_config_id: s.flow_id,
            description: s.description,
            disabled_reason: s.disabled_reason,
        }
    }
}

#[derive(Serialize, ToSchema)]
pub struct SubscriptionResponse {
    pub data: SubscriptionDto,
}

#[derive(Serialize, ToSchema)]
pub struct SubscriptionListResponse {
    pub data: Vec<SubscriptionDto>,
}

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

/// Body of a subscribe request.
#[derive(ToSchema)]
#[allow(dead_code)] // documents the request; the domain reads the body field by field
#[schema(example = json!({"types": ["card-completed"], "url": "https://93.184.215.14/hooks",
    "headers": {"X-Token": "abc"}}))]
pub struct SubscribeRequest {
    /// Event names: card-published, card-embargoed, card-snoozed, card-unsnoozed,
    /// card-completed, card-dismissed, card-expired, card-cancelled.
    types: Vec<String>,
    /// http(s); must not resolve to a private, loopback, link-local or metadata address.
    url: String,
    /// At most 20; `webhook-*`, `content-type` and the like are reserved.
    headers: Option<BTreeMap<String, String>>,
    #[schema(rename = "cardTemplateId")]
    card_template_id: Option<String>,
    #[schema(rename = "actionFlowConfigId")]
    action_flow_config_id: Option<String>,
    /// `POST` (default) or `PUT`.
    method: Option<String>,
    /// What the subscription is for; tabs and line breaks allowed, no other control character.
    #[schema(
        max_length = 1000,
        pattern = "^[^\\u0000-\\u0008\\u000b\\u000c\\u000e-\\u001f\\u007f-\\u009f]*$"
    )]
    description: Option<String>,
}

/// The body of `PATCH /webhook/{id}`: the subscribe fields, every one optional; those left out
/// are kept, and `null` clears a filter (`cardTemplateId`, `actionFlowConfigId`) or the
/// description.
#[derive(ToSchema)]
#[allow(dead_code)] // documents the request; the domain reads the body field by field
#[schema(example = json!({"headers": {"X-Token": "abc"}, "types": ["card-completed"]}))]
pub struct UpdateWebhookRequest {
    /// Event names, as on subscribe.
    #[schema(nullable = false)]
    types: Option<Vec<String>>,
    /// http(s); must not resolve to a private, loopback, link-local or metadata address.
    #[schema(nullable = false)]
    url: Option<String>,
    /// At most 20; `webhook-*`, `content-type` and the like are reserved.
    headers: Option<BTreeMap<String, String>>,
    #[schema(rename = "cardTemplateId")]
    card_template_id: Option<String>,
    #[schema(rename = "actionFlowConfigId")]
    action_flow_config_id: Option<String>,
    /// `POST` or `PUT`.
    method: Option<String>,
    /// What the subscription is for; `null` clears it.
    #[schema(
        max_length = 1000,
        pattern = "^[^\\u0000-\\u0008\\u000b\\u000c\\u000e-\\u001f\\u007f-\\u009f]*$"
    )]
    description: Option<String>,
}

fn one(s: Subscription, with_secret: bool) -> HttpResponse {
    HttpResponse::Ok().json(SubscriptionResponse {
        data: SubscriptionDto::new(s, with_secret),
    })
}

/// Subscribe a URL to events. The answer carries the signing secret.
#[utoipa::path(
    post, path = "/v1/{environmentId}/webhook", tag = "webhooks", operation_id = "subscribeWebhook",
    params(("environmentId" = String, Path, description = "Environment id")),
    request_body = SubscribeRequest,
    responses(
        (status = 201, description = "The subscription, with its secret",
            body = SubscriptionResponse,
            headers(("Location" = String, description = "Address of the subscription"))),
        (status = 400,
            description = "Every invalid field (`validation_failed`), including a URL the SSRF \
                policy refuses", body = Problem, content_type = "application/problem+json"),
        (status = 409,
            description = "The environment has 100 subscriptions (`webhook_limit_reached`)",
                body = Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = ["webhooks:write"]))
)]
pub async fn subscribe(
    state: web::Data<AppState>,
    caller: Caller,
    env: web::Path<EnvironmentId>,
    req: HttpRequest,
    body: web::Bytes,
) -> Result<HttpResponse, ApiError> {
    // The key before the body (contract §16): 401 and 403 come before 400.
    caller
        .0
        .authorize(&env, domain::Permission::WebhooksWrite)?;
    let object = json_object(&req, &body)?;
    let s = state
        .webhooks
        .subscribe(&caller.0, &env, &Value::Object(object))
        .await?;
    let location = format!("{}/v1/{}/webhook/{}", state.public_url, env, s.id);
    Ok(HttpResponse::Created()
        .insert_header((header::LOCATION, location))
        .json(SubscriptionResponse {
            data: SubscriptionDto::new(s, true),
        }))
}

/// Every subscription of the environment (without secrets).
#[utoipa::path(
    get, path = "/v1/{environmentId}/webhook", tag = "webhooks", operation_id = "listWebhooks",
    params(("environmentId" = String, Path, description = "Environment id")),
    responses(
        (status = 200, description = "Every subscription, oldest first",
            body = SubscriptionListResponse),
    ),
    security(("bearer" = ["webhooks:read"]))
)]
pub async fn list(
    state: web::Data<AppState>,
    caller: Caller,
    env: web::Path<EnvironmentId>,
) -> Result<HttpResponse, ApiError> {
    let subs = state.webhooks.list(&caller.0, &env).await?;
    Ok(HttpResponse::Ok().json(SubscriptionListResponse {
        data: subs
            .into_iter()
            .map(|s| SubscriptionDto::new(s, false))
            .collect(),
    }))
}

/// A subscription's details, with its secret.
///
/// For a key that may only read webhooks, the secret and the custom header values are masked
/// (their last 4 characters).
#[utoipa::path(
    get, path = "/v1/{environmentId}/webhook/{webhookId}", tag = "webhooks",
        operation_id = "getWebhook",
    params(("environmentId" = String, Path, description = "Environment id"), ("webhookId" = String,
        Path, description = "Subscription id")),
    responses(
        (status = 200, description = "The subscription", body = SubscriptionResponse),
        (status = 404, response = crate::problem::NotFound),
    ),
    security(("bearer" = ["webhooks:read"]))
)]
pub async fn get(
    state: web::Data<AppState>,
    caller: Caller,
    path: web::Path<(EnvironmentId, WebhookId)>,
) -> Result<HttpResponse, ApiError> {
    let (env, id) = path.into_inner();
    Ok(one(state.webhooks.get(&caller.0, &env, &id).await?, true))
}

/// Change a subscription's `url`, `types`, `method`, `headers` or filters (`cardTemplateId`,
/// `actionFlowConfigId`; `null` clears one). Fields left out keep their values; the secret and
/// the state are unchanged. The result is validated as a subscription is, and a new `url`
/// passes the SSRF check again.
#[utoipa::path(
    patch, path = "/v1/{environmentId}/webhook/{webhookId}", tag = "webhooks",
        operation_id = "updateWebhook",
    params(("environmentId" = String, Path, description = "Environment id"), ("webhookId" = String,
        Path, description = "Subscription id")),
    request_body(content = UpdateWebhookRequest,
        description = "Any of the subscribe fields; those left out are kept"),
    responses(
        (status = 200, description = "The subscription as changed", body = SubscriptionResponse),
        (status = 400,
            description = "Every invalid field (`validation_failed`), including a URL the SSRF \
                policy refuses", body = Problem, content_type = "application/problem+json"),
        (status = 404, response = crate::problem::NotFound),
    ),
    security(("bearer" = ["webhooks:write"]))
)]
pub async fn update(
    state: web::Data<AppState>,
    caller: Caller,
    path: web::Path<(EnvironmentId, WebhookId)>,
    req: HttpRequest,
    body: web::Bytes,
) -> Result<HttpResponse, ApiError> {
    let (env, id) = path.into_inner();
    // The key before the body (contract §16): 401 and 403 come before 400.
    caller
        .0
        .authorize(&env, domain::Permission::WebhooksWrite)?;
    let object = json_object(&req, &body)?;
    let s = state
        .webhooks
        .update(&caller.0, &env, &id, &Value::Object(object))
        .await?;
    Ok(one(s, true))
}

/// Disable (stops deliveries, cancels queued ones), or with `permanent=true` delete a disabled
/// subscription with its delivery log.
#[utoipa::path(
    delete, path = "/v1/{environmentId}/webhook/{webhookId}", tag = "webhooks",
        operation_id = "disableWebhook",
    params(
        ("environmentId" = String, Path, description = "Environment id"),
        ("webhookId" = String, Path, description = "Subscription id"),
        ("permanent" = Option<bool>, Query,
            description = "Delete instead of disabling; only a disabled subscription"),
    ),
    responses(
        (status = 200, description = "Disabled: the subscription with `status: disabled`",
            body = SubscriptionResponse),
        (status = 204, description = "Deleted (permanent=true)"),
        (status = 400, description = "`permanent` is not true or false", body = Problem,
            content_type = "application/problem+json"),
        (status = 404, response = crate::problem::NotFound),
        (status = 409,
            description = "Permanent delete of an enabled subscription (`webhook_enabled`)",
                body = Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = ["webhooks:write"]))
)]
pub async fn disable(
    state: web::Data<AppState>,
    caller: Caller,
    path: web::Path<(EnvironmentId, WebhookId)>,
    req: HttpRequest,
) -> Result<HttpResponse, ApiError> {
    let (env, id) = path.into_inner();
    // The key before the query (contract §16): 401 and 403 come before 400.
    caller
        .0
        .authorize(&env, domain::Permission::WebhooksWrite)?;
    let permanent = match Query::parse(&req)?.get("permanent").as_deref() {
        None | Some("false") => false,
        Some("true") => true,
        Some(_) => {
            return Err(ApiError::validation(vec![FieldError::new(
                "permanent",
                "must be true or false",
            )]))
        }
    };
    if permanent {
        state.webhooks.delete(&caller.0, &env, &id).await?;
        return Ok(HttpResponse::NoContent().finish());
    }
    Ok(one(
        state.webhooks.disable(&caller.0, &env, &id).await?,
        false,
    ))
}

/// Enable a disabled subscription again (what was cancelled stays cancelled; see recover).
#[utoipa::path(
    post, path = "/v1/{environmentId}/webhook/{webhookId}/enable", tag = "webhooks",
        operation_id = "enableWebhook",
    params(("environmentId" = String, Path, description = "Environment id"), ("webhookId" = String,
        Path, description = "Subscription id")),
    responses(
        (status = 200, description = "The subscription, active", body = SubscriptionResponse),
        (status = 404, response = crate::problem::NotFound),
    ),
    security(("bearer" = ["webhooks:write"]))
)]
pub async fn enable(
    state: web::Data<AppState>,
    caller: Caller,
    path: web::Path<(EnvironmentId, WebhookId)>,
) -> Result<HttpResponse, ApiError> {
    let (env, id) = path.into_inner();
    Ok(one(
        state.webhooks.enable(&caller.0, &env, &id).await?,
        false,
    ))
}

/// A new secret. The previous one keeps signing beside it for 24 hours.
#[utoipa::path(
    post, path = "/v1/{environmentId}/webhook/{webhookId}/rotate-secret", tag = "webhooks",
        operation_id = "rotateWebhookSecret",
    params(("environmentId" = String, Path, description = "Environment id"), ("webhookId" = String,
        Path, description = "Subscription id")),
    responses(
        (status = 200, description = "The subscription, with its new secret",
            body = SubscriptionResponse),
        (status = 404, response = crate::problem::NotFound),
    ),
    security(("bearer" = ["webhooks:write"]))
)]
pub async fn rotate_secret(
    state: web::Data<AppState>,
    caller: Caller,
    path: web::Path<(EnvironmentId, WebhookId)>,
) -> Result<HttpResponse, ApiError> {
    let (env, id) = path.into_inner();
    Ok(one(
        state.webhooks.rotate_secret(&caller.0, &env, &id).await?,
        true,
    ))
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
pub async fn test(
    state: web::Data<AppState>,
    caller: Caller,
    path: web::Path<(EnvironmentId, WebhookId)>,
) -> Result<HttpResponse, ApiError> {
    let (env, id) = path.into_inner();
    let attempt = state.webhooks.test(&caller.0, &env, &id).await?;
    Ok(HttpResponse::Ok().json(AttemptResponse {
        data: attempt.into(),
    }))
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
pub async fn deliveries(
    state: web::Data<AppState>,
    caller: Caller,
    path: web::Path<(EnvironmentId, WebhookId)>,
    req: HttpRequest,
) -> Result<HttpResponse, ApiError> {
    let (env, id) = path.into_inner();
    // The key before the query (contract §16): 401 and 403 come before 400.
    caller.0.authorize(&env, domain::Permission::WebhooksRead)?;
    let mut errors = Vec::new();
    let page = Query::parse(&req)?.page(&mut errors);
    if !errors.is_empty() {
        return Err(ApiError::validation(errors));
    }
    let page = state.webhooks.attempts(&caller.0, &env, &id, page).await?;
    Ok(HttpResponse::Ok().json(AttemptListResponse {
        data: page.items.into_iter().map(Into::into).collect(),
        next: cursor(page.next_after),
    }))
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
pub async fn resend(
    state: web::Data<AppState>,
    caller: Caller,
    path: web::Path<(EnvironmentId, WebhookId, EventId)>,
) -> Result<HttpResponse, ApiError> {
    let (env, id, event) = path.into_inner();
    state.webhooks.resend(&caller.0, &env, &id, &event).await?;
    Ok(HttpResponse::Accepted().json(QueuedResponse {
        data: QueuedDto { queued: 1 },
    }))
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
pub async fn recover(
    state: web::Data<AppState>,
    caller: Caller,
    path: web::Path<(EnvironmentId, WebhookId)>,
    req: HttpRequest,
    body: web::Bytes,
) -> Result<HttpResponse, ApiError> {
    let (env, id) = path.into_inner();
    // The key before the body (contract §16): 401 and 403 come before 400.
    caller
        .0
        .authorize(&env, domain::Permission::WebhooksWrite)?;
    let object = json_object(&req, &body)?;
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
    let queued = state.webhooks.recover(&caller.0, &env, &id, since).await?;
    Ok(HttpResponse::Accepted().json(QueuedResponse {
        data: QueuedDto { queued },
    }))
}

pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.service(
        web::resource("/v1/{environmentId}/webhook")
            .route(web::get().to(list))
            .route(web::post().to(subscribe)),
    )
    .service(
        web::resource("/v1/{environmentId}/webhook/{webhookId}")
            .route(web::get().to(get))
            .route(web::patch().to(update))
            .route(web::delete().to(disable)),
    )
    .service(
        web::resource("/v1/{environmentId}/webhook/{webhookId}/enable")
            .route(web::post().to(enable)),
    )
    .service(
        web::resource("/v1/{environmentId}/webhook/{webhookId}/rotate-secret")
            .route(web::post().to(rotate_secret)),
    )
    .service(
        web::resource("/v1/{environmentId}/webhook/{webhookId}/test").route(web::post().to(test)),
    )
    .service(
        web::resource("/v1/{environmentId}/webhook/{webhookId}/deliveries")
            .route(web::get().to(deliveries)),
    )
    .service(
        web::resource("/v1/{environmentId}/webhook/{webhookId}/deliveries/{eventId}/resend")
            .route(web::post().to(resend)),
    )
    .service(
        web::resource("/v1/{environmentId}/webhook/{webhookId}/recover")
            .route(web::post().to(recover)),
    );
}

#[cfg(test)]
mod tests {
    use utoipa::PartialSchema;

    #[test]
    fn the_documented_description_limit_is_the_validators() {
        for schema in [
            super::SubscribeRequest::schema(),
            super::UpdateWebhookRequest::schema(),
        ] {
            let json = serde_json::to_value(schema).expect("json");
            assert_eq!(
                json["properties"]["description"]["maxLength"],
                domain::webhook::MAX_DESCRIPTION_CHARS
            );
        }
    }
}
