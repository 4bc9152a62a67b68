//! Webhook subscriptions themselves: subscribe, read, change, disable or delete, enable, and
//! rotate the signing secret.

use std::collections::BTreeMap;

use actix_web::HttpRequest;
use domain::id::{EnvironmentId, WebhookId};
use domain::webhook::Subscription;
use domain::Permission;
use serde::Serialize;
use serde_json::Value;
use utoipa::ToSchema;

use super::requests::{SubscribeRequest, UpdateWebhookRequest};
use crate::problem::Problem;
use crate::routes::query::Query;
use crate::routes::shape::{created, no_content, ok, valid, Body, Call, Reply};
use crate::routes::timestamp;

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

/// 200 with the subscription, its secret shown or not.
fn one(s: Subscription, with_secret: bool) -> Reply {
    ok(SubscriptionResponse {
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
pub async fn subscribe(call: Call<EnvironmentId>, body: Body) -> Reply {
    let body = Value::Object(call.read(Permission::WebhooksWrite, &body)?);
    let (state, env) = (&call.state, &call.path);
    let s = state.webhooks.subscribe(&call.caller, env, &body).await?;
    let location = format!("{}/v1/{}/webhook/{}", state.public_url, env, s.id);
    let data = SubscriptionDto::new(s, true);
    created(location, SubscriptionResponse { data })
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
pub async fn list(call: Call<EnvironmentId>) -> Reply {
    let subs = call.state.webhooks.list(&call.caller, &call.path).await?;
    let without_secrets = subs.into_iter().map(|s| SubscriptionDto::new(s, false));
    ok(SubscriptionListResponse {
        data: without_secrets.collect(),
    })
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
pub async fn get(call: Call<(EnvironmentId, WebhookId)>) -> Reply {
    let (env, id) = &call.path;
    one(call.state.webhooks.get(&call.caller, env, id).await?, true)
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
pub async fn update(call: Call<(EnvironmentId, WebhookId)>, body: Body) -> Reply {
    let body = Value::Object(call.read(Permission::WebhooksWrite, &body)?);
    let (env, id) = &call.path;
    let webhooks = &call.state.webhooks;
    one(webhooks.update(&call.caller, env, id, &body).await?, true)
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
pub async fn disable(call: Call<(EnvironmentId, WebhookId)>, req: HttpRequest) -> Reply {
    // The key before the query (contract §16): 401 and 403 come before 400.
    call.authorize(Permission::WebhooksWrite)?;
    let mut errors = Vec::new();
    let permanent = Query::parse(&req)?.flag("permanent", &mut errors);
    valid(errors)?;
    let (webhooks, (env, id)) = (&call.state.webhooks, &call.path);
    if permanent == Some(true) {
        webhooks.delete(&call.caller, env, id).await?;
        return no_content();
    }
    one(webhooks.disable(&call.caller, env, id).await?, false)
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
pub async fn enable(call: Call<(EnvironmentId, WebhookId)>) -> Reply {
    let (env, id) = &call.path;
    one(
        call.state.webhooks.enable(&call.caller, env, id).await?,
        false,
    )
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
pub async fn rotate_secret(call: Call<(EnvironmentId, WebhookId)>) -> Reply {
    let (env, id) = &call.path;
    let webhooks = &call.state.webhooks;
    one(webhooks.rotate_secret(&call.caller, env, id).await?, true)
}
