//! Triggering flows (spec 4.2 test/start, 4.3), invocation progress (contract §4), and the
//! end-user card API the SDKs would call (contract §4).

use std::collections::BTreeMap;

use actix_web::{web, HttpRequest, HttpResponse};
use domain::card::{AnalyticsEvent, CardAction, CardInstance};
use domain::id::{CardId, EndUserId, EnvironmentId, FlowId, InvocationId};
use domain::trigger::views::InvocationView;
use domain::trigger::Mode;
use domain::trigger::{Invocation, InvocationFilter, InvocationStatus};
use domain::{FieldError, PageRequest, Permission};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use utoipa::ToSchema;

use super::instances::{counts_of, StepCountsDto};
use super::query::{cursor, one_of, Query};
use super::timestamp;
use crate::auth::{Caller, UserCaller};
use crate::body::{json_object, Fields};
use crate::problem::{ApiError, Problem};
use crate::AppState;

/// Largest trigger body: 1,000 elements are allowed, each with up to 10,000 user ids.
pub const MAX_TRIGGER_BODY_BYTES: usize = 32 * 1024 * 1024;

#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct TriggeredFlow {
    pub flow_invocation_id: String,
}

#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct TriggeredFlows {
    pub triggered_flows: Vec<TriggeredFlow>,
}

#[derive(Serialize, ToSchema)]
pub struct TriggerResponse {
    pub data: TriggeredFlows,
}

#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct InvocationDto {
    pub flow_invocation_id: String,
    pub flow_config_id: String,
    pub flow_config_version: u32,
    /// `live` or `test`.
    pub mode: &'static str,
    /// `pending`, `running`, `completed`, `failed` or `cancelled`.
    pub status: &'static str,
    pub users_targeted: u64,
    pub cards_created: u64,
    pub errors: Vec<String>,
    #[schema(format = DateTime)]
    pub created: String,
    #[schema(format = DateTime)]
    pub updated: String,
    /// For a flow that waits or branches (contract §21): its instances by state (`active`,
    /// `completed`, `cancelled`, `failed`). The invocation stays `running` while one is
    /// `active`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub instances: Option<BTreeMap<String, u64>>,
    /// For a flow that waits or branches: per step id, the instances that reached it, wait at
    /// it, are done with it, and by outcome.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub steps: Option<BTreeMap<String, StepCountsDto>>,
}

impl From<InvocationView> for InvocationDto {
    fn from(view: InvocationView) -> Self {
        let status = view.status();
        let (instances, steps) = match view.instances.map(counts_of) {
            Some((instances, steps)) => (Some(instances), Some(steps)),
            None => (None, None),
        };
        InvocationDto {
            status: status.as_str(),
            instances,
            steps,
            ..view.invocation.into()
        }
    }
}

impl From<Invocation> for InvocationDto {
    fn from(i: Invocation) -> Self {
        InvocationDto {
            instances: None,
            steps: None,
            created: timestamp(&i.created),
            updated: timestamp(&i.updated),
            flow_invocation_id: i.id.into(),
            flow_config_id: i.flow_id,
            flow_config_version: i.flow_version,
            mode: i.mode.as_str(),
            status: i.status.as_str(),
            users_targeted: i.users_targeted,
            cards_created: i.cards_created,
            errors: i.errors,
        }
    }
}

#[derive(Serialize, ToSchema)]
pub struct InvocationResponse {
    pub data: InvocationDto,
}

/// A page of a flow's invocations, newest first.
#[derive(Serialize, ToSchema)]
#[schema(example = json!({
    "data": [{
        "flowInvocationId": "welcome-user-1",
        "flowConfigId": "flw_01jd3m5y6q8k9r2t4v6w8x0z1a",
        "flowConfigVersion": 1,
        "mode": "live",
        "status": "completed",
        "usersTargeted": 1,
        "cardsCreated": 1,
        "errors": [],
        "created": "2026-11-22T10:00:00.000Z",
        "updated": "2026-11-22T10:00:00.000Z"
    }],
    "next": "MjAyNi0xMS0yMlQxMDowMDowMC4wMDAwMDAwMDBafHdlbGNvbWUtdXNlci0x"
}))]
pub struct InvocationListResponse {
    /// Each in the shape of `GET .../invocations/{flowInvocationId}`.
    pub data: Vec<InvocationDto>,
    /// Pass as `cursor` for the next page; null on the last page.
    pub next: Option<String>,
}

#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct CardDto {
    pub id: String,
    /// embargoed, active, snoozed, completed, dismissed, cancelled or expired.
    pub status: &'static str,
    /// 10 is the top of the feed, 1 the bottom.
    pub priority: u8,
    pub stream_ids: Vec<String>,
    pub platforms: Vec<String>,
    /// Rendered views and notification, per platform.
    #[schema(value_type = Object)]
    pub content: Map<String, Value>,
    pub card_template_id: String,
    pub card_template_name: String,
    pub flow_config_id: String,
    pub flow_config_version: u32,
    pub flow_invocation_id: String,
    pub flow_instance_id: String,
    #[schema(format = DateTime)]
    pub published_at: Option<String>,
    #[schema(format = DateTime)]
    pub expires_at: Option<String>,
    #[schema(format = DateTime)]
    pub snoozed_until: Option<String>,
    #[schema(format = DateTime)]
    pub created: String,
    #[schema(format = DateTime)]
    pub updated: String,
}

impl From<CardInstance> for CardDto {
    fn from(c: CardInstance) -> Self {
        CardDto {
            content: c.content.views(&c.platforms),
            status: c.status.as_str(),
            published_at: c.published_at.as_ref().map(timestamp),
            expires_at: c.expires_at.as_ref().map(timestamp),
            snoozed_until: c.snoozed_until.as_ref().map(timestamp),
            created: timestamp(&c.created),
            updated: timestamp(&c.updated),
            id: c.id.into(),
            priority: c.priority,
            stream_ids: c.stream_ids,
            platforms: c.platforms,
            card_template_id: c.template_id,
            card_template_name: c.template_name,
            flow_config_id: c.flow_id,
            flow_config_version: c.flow_version,
            flow_invocation_id: c.invocation_id,
            flow_instance_id: c.flow_instance_id,
        }
    }
}

#[derive(Serialize, ToSchema)]
pub struct CardResponse {
    pub data: CardDto,
}

#[derive(Serialize, ToSchema)]
pub struct FeedResponse {
    pub data: Vec<CardDto>,
}

#[derive(Serialize, ToSchema)]
pub struct EventListResponse {
    /// Each event's `data` (spec 2.9), oldest first.
    #[schema(value_type = Vec<Object>)]
    pub data: Vec<Value>,
}

async fn trigger(
    state: web::Data<AppState>,
    caller: Caller,
    path: web::Path<(EnvironmentId, FlowId)>,
    req: HttpRequest,
    body: web::Bytes,
    mode: Mode,
) -> Result<HttpResponse, ApiError> {
    let (env, flow) = path.into_inner();
    caller.0.authorize(&env, Permission::ActionFlowsTrigger)?;
    let object = json_object(&req, &body)?;
    let ids = state
        .triggers
        .trigger_body(&caller.0, &env, &flow, mode, &Value::Object(object))
        .await?;
    Ok(HttpResponse::Ok().json(TriggerResponse {
        data: TriggeredFlows {
            triggered_flows: ids
                .into_iter()
                .map(|flow_invocation_id| TriggeredFlow { flow_invocation_id })
                .collect(),
        },
    }))
}

const TRIGGER_400: &str = "Every invalid field of the request (`validation_failed`), paths like \
        `flows[0].payload.cardOptions.priority`";

/// Start a published flow for users, a segment, a tag, all test users or a filter.
#[utoipa::path(
    post, path = "/v1/{environmentId}/action-flow/{flowConfigId}/start", tag = "triggers",
        operation_id = "startActionFlow",
    params(("environmentId" = String, Path, description = "Environment id"),
        ("flowConfigId" = String, Path, description = "Flow id")),
    request_body = crate::schemas::TriggerRequestBody,
    responses(
        (status = 200, description = "Accepted durably (also for a replay of the same invocation)",
            body = TriggerResponse),
        (status = 400, description = TRIGGER_400, body = Problem,
            content_type = "application/problem+json"),
        (status = 404, response = crate::problem::NotFound),
        (status = 409,
            description = "`invocation_conflict` (an id reused with another target or payload) or \
                `flow_archived`", body = Problem, content_type = "application/problem+json"),
        (status = 422,
            description = "`invocation_mismatch`: an id reused with another flow or mode",
                body = Problem, content_type = "application/problem+json"),
        (status = 429,
            description = "`rate_limited`: five bulk-target tasks already run (see Retry-After)",
                body = Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = ["action_flows:trigger"]))
)]
pub async fn start(
    state: web::Data<AppState>,
    caller: Caller,
    path: web::Path<(EnvironmentId, FlowId)>,
    req: HttpRequest,
    body: web::Bytes,
) -> Result<HttpResponse, ApiError> {
    trigger(state, caller, path, req, body, Mode::Live).await
}

/// Send a flow (its draft when it has one) to test users only; others are ignored silently.
#[utoipa::path(
    post, path = "/v1/{environmentId}/action-flow/{flowConfigId}/test", tag = "triggers",
        operation_id = "testActionFlow",
    params(("environmentId" = String, Path, description = "Environment id"),
        ("flowConfigId" = String, Path, description = "Flow id")),
    request_body = crate::schemas::TriggerRequestBody,
    responses(
        (status = 200, description = "Accepted durably (also for a replay of the same invocation)",
            body = TriggerResponse),
        (status = 400, description = TRIGGER_400, body = Problem,
            content_type = "application/problem+json"),
        (status = 404, response = crate::problem::NotFound),
        (status = 409,
            description = "`invocation_conflict`: an id reused with another target or payload",
                body = Problem, content_type = "application/problem+json"),
        (status = 422,
            description = "`invocation_mismatch`: an id reused with another flow or mode",
                body = Problem, content_type = "application/problem+json"),
        (status = 429,
            description = "`rate_limited`: five bulk-target tasks already run (see Retry-After)",
                body = Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = ["action_flows:trigger"]))
)]
pub async fn test(
    state: web::Data<AppState>,
    caller: Caller,
    path: web::Path<(EnvironmentId, FlowId)>,
    req: HttpRequest,
    body: web::Bytes,
) -> Result<HttpResponse, ApiError> {
    trigger(state, caller, path, req, body, Mode::Test).await
}

/// An invocation's progress.
#[utoipa::path(
    get, path = "/v1/{environmentId}/action-flow/{flowConfigId}/invocations/{flowInvocationId}",
        tag = "triggers", operation_id = "getInvocation",
    params(
        ("environmentId" = String, Path, description = "Environment id"),
        ("flowConfigId" = String, Path, description = "Flow id"),
        ("flowInvocationId" = String, Path, description = "The invocation id a trigger answered"),
    ),
    responses(
        (status = 200, description = "Status, users targeted, cards created, errors",
            body = InvocationResponse),
        (status = 404, response = crate::problem::NotFound),
    ),
    security(("bearer" = ["action_flows:read"]))
)]
pub async fn invocation(
    state: web::Data<AppState>,
    caller: Caller,
    path: web::Path<(EnvironmentId, FlowId, InvocationId)>,
) -> Result<HttpResponse, ApiError> {
    let (env, flow, id) = path.into_inner();
    let invocation = state
        .instances
        .invocation(&caller.0, &env, &flow, &id)
        .await?;
    Ok(HttpResponse::Ok().json(InvocationResponse {
        data: invocation.into(),
    }))
}

/// `status` of the invocation list: where the invocations listed are.
#[derive(Clone, Copy, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum InvocationStatusParam {
    Pending,
    Running,
    Completed,
    Failed,
    Cancelled,
}

impl From<InvocationStatusParam> for InvocationStatus {
    fn from(s: InvocationStatusParam) -> Self {
        match s {
            InvocationStatusParam::Pending => InvocationStatus::Pending,
            InvocationStatusParam::Running => InvocationStatus::Running,
            InvocationStatusParam::Completed => InvocationStatus::Completed,
            InvocationStatusParam::Failed => InvocationStatus::Failed,
            InvocationStatusParam::Cancelled => InvocationStatus::Cancelled,
        }
    }
}

/// `mode` of the invocation list: live (`/start`) or test (`/test`) invocations.
#[derive(Clone, Copy, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum ModeParam {
    Live,
    Test,
}

impl From<ModeParam> for Mode {
    fn from(m: ModeParam) -> Self {
        match m {
            ModeParam::Live => Mode::Live,
            ModeParam::Test => Mode::Test,
        }
    }
}

/// The list's query: every problem reported at once.
fn invocation_query(req: &HttpRequest) -> Result<(InvocationFilter, PageRequest), ApiError> {
    let query = Query::parse(req)?;
    let mut errors = Vec::new();
    let status = query.get_sent("status").and_then(|s| {
        let status = one_of::<InvocationStatusParam>(&s).map(InvocationStatus::from);
        if status.is_none() {
            errors.push(FieldError::new(
                "status",
                "must be pending, running, completed, failed or cancelled",
            ));
        }
        status
    });
    let mode = query.get_sent("mode").and_then(|m| {
        let mode = one_of::<ModeParam>(&m).map(Mode::from);
        if mode.is_none() {
            errors.push(FieldError::new("mode", "must be live or test"));
        }
        mode
    });
    let page = query.page(&mut errors);
    if !errors.is_empty() {
        return Err(ApiError::validation(errors));
    }
    Ok((InvocationFilter { status, mode }, page))
}

/// A flow's invocations, newest first, each as `GET .../invocations/{flowInvocationId}` answers
/// it. Filters apply together.
#[utoipa::path(
    get, path = "/v1/{environmentId}/action-flow/{flowConfigId}/invocations", tag = "triggers",
        operation_id = "listInvocations",
    params(
        ("environmentId" = String, Path, description = "Environment id"),
        ("flowConfigId" = String, Path, description = "Flow id"),
        ("status" = inline(Option<InvocationStatusParam>), Query,
            description = "Only invocations in this status (any letter case)"),
        ("mode" = inline(Option<ModeParam>), Query,
            description = "Only live (`/start`) or test (`/test`) invocations (any letter case)"),
        ("limit" = Option<u32>, Query, description = "1–500, default 50", minimum = 1,
            maximum = 500),
        ("cursor" = Option<String>, Query, description = "`next` of the previous page"),
    ),
    responses(
        (status = 200, description = "A page of invocations, newest first",
            body = InvocationListResponse),
        (status = 400,
            description = "A query parameter is invalid (`status`, `mode`, `limit`, `cursor`), \
                each reported", body = Problem, content_type = "application/problem+json"),
        (status = 403, description = "Needs role `events` or `action_flows:read`", body = Problem,
            content_type = "application/problem+json"),
        (status = 404, description = "No such flow in this environment", body = Problem,
            content_type = "application/problem+json"),
    ),
    security(("bearer" = []))
)]
pub async fn invocations(
    state: web::Data<AppState>,
    caller: Caller,
    path: web::Path<(EnvironmentId, FlowId)>,
    req: HttpRequest,
) -> Result<HttpResponse, ApiError> {
    let (env, flow) = path.into_inner();
    // The key before the query (contract §16): 401 and 403 come before 400.
    caller.0.authorize(&env, Permission::ActionFlowsRead)?;
    let (filter, page) = invocation_query(&req)?;
    let page = state
        .triggers
        .invocations(&caller.0, &env, &flow, filter, page)
        .await?;
    Ok(HttpResponse::Ok().json(InvocationListResponse {
        data: page.items.into_iter().map(Into::into).collect(),
        next: cursor(page.next_after),
    }))
}

/// A user's feed: active cards, priority 10 first, newest first within a priority.
#[utoipa::path(
    get, path = "/v1/{environmentId}/users/{endUserId}/cards", tag = "cards",
        operation_id = "getFeed",
    params(
        ("environmentId" = String, Path, description = "Environment id"),
        ("endUserId" = String, Path, description = "Your id for the user"),
        ("streamId" = Option<String>, Query, description = "Only cards in this stream"),
    ),
    responses(
        (status = 200, description = "The feed", body = FeedResponse),
    ),
    security(("bearer" = ["cards:write"]), ("userToken" = []))
)]
pub async fn feed(
    state: web::Data<AppState>,
    caller: UserCaller,
    path: web::Path<(EnvironmentId, EndUserId)>,
    req: HttpRequest,
) -> Result<HttpResponse, ApiError> {
    let (env, user) = path.into_inner();
    // The key before the query (contract §16): 401 and 403 come before 400.
    caller
        .0
        .authorize_user(&env, domain::Permission::CardsWrite, &user)?;
    let stream = Query::parse(&req)?.get("streamId");
    let cards = state.cards.feed(&caller.0, &env, &user, stream).await?;
    Ok(HttpResponse::Ok().json(FeedResponse {
        data: cards.into_iter().map(Into::into).collect(),
    }))
}

/// Act on a card: submit (completes it, with values), dismiss, or snooze until a time.
#[utoipa::path(
    post, path = "/v1/{environmentId}/users/{endUserId}/cards/{cardInstanceId}/actions",
        tag = "cards", operation_id = "actOnCard",
    params(
        ("environmentId" = String, Path, description = "Environment id"),
        ("endUserId" = String, Path, description = "Your id for the user"),
        ("cardInstanceId" = String, Path, description = "Card id"),
    ),
    request_body = crate::schemas::CardActionRequest,
    responses(
        (status = 200, description = "The card after the action", body = CardResponse),
        (status = 400,
            description = "Unknown action, values not an object, snoozeUntil missing or past",
                body = Problem, content_type = "application/problem+json"),
        (status = 404, response = crate::problem::NotFound),
        (status = 409,
            description = "`card_closed` (completed, dismissed, cancelled, expired) or \
                `card_not_active` (embargoed, snoozed)", body = Problem,
                    content_type = "application/problem+json"),
    ),
    security(("bearer" = ["cards:write"]), ("userToken" = []))
)]
pub async fn act(
    state: web::Data<AppState>,
    caller: UserCaller,
    path: web::Path<(EnvironmentId, EndUserId, CardId)>,
    req: HttpRequest,
    body: web::Bytes,
) -> Result<HttpResponse, ApiError> {
    let (env, user, card) = path.into_inner();
    caller
        .0
        .authorize_user(&env, Permission::CardsWrite, &user)?;
    let object = json_object(&req, &body)?;
    let mut fields = Fields::new(&object);
    let action = fields.string("action");
    let action = match action.as_deref() {
        Some("submit") => match object.get("values") {
            None | Some(Value::Null) => Some(CardAction::Submit(Value::Object(Map::new()))),
            Some(Value::Object(values)) => Some(CardAction::Submit(Value::Object(values.clone()))),
            Some(_) => {
                fields.problem("values", "must be an object");
                None
            }
        },
        Some("dismiss") => Some(CardAction::Dismiss),
        Some("snooze") => match object.get("snoozeUntil").and_then(Value::as_str) {
            Some(text) => match domain::time::parse_timestamp(text) {
                Ok(until) => Some(CardAction::Snooze(until)),
                Err(message) => {
                    fields.problem("snoozeUntil", message);
                    None
                }
            },
            None => {
                fields.problem(
                    "snoozeUntil",
                    "is required with snooze: an RFC 3339 timestamp",
                );
                None
            }
        },
        Some(_) => {
            fields.problem("action", "must be submit, dismiss or snooze");
            None
        }
        None => None,
    };
    fields.finish()?;
    let action = action
        .ok_or_else(|| ApiError::validation(vec![FieldError::new("action", "is required")]))?;
    let card = state
        .cards
        .act(&caller.0, &env, &user, &card, action)
        .await?;
    Ok(HttpResponse::Ok().json(CardResponse { data: card.into() }))
}

/// A card's analytics events (spec 2.9 `data`), oldest first.
#[utoipa::path(
    get, path = "/v1/{environmentId}/users/{endUserId}/cards/{cardInstanceId}/events",
        tag = "cards", operation_id = "getCardEvents",
    params(
        ("environmentId" = String, Path, description = "Environment id"),
        ("endUserId" = String, Path, description = "Your id for the user"),
        ("cardInstanceId" = String, Path, description = "Card id"),
    ),
    responses(
        (status = 200, description = "The card's events", body = EventListResponse),
        (status = 404, response = crate::problem::NotFound),
    ),
    security(("bearer" = ["users:read"]))
)]
pub async fn events(
    state: web::Data<AppState>,
    caller: Caller,
    path: web::Path<(EnvironmentId, EndUserId, CardId)>,
) -> Result<HttpResponse, ApiError> {
    let (env, user, card) = path.into_inner();
    let events: Vec<AnalyticsEvent> = state.cards.events(&caller.0, &env, &user, &card).await?;
    Ok(HttpResponse::Ok().json(EventListResponse {
        data: events.iter().map(AnalyticsEvent::data).collect(),
    }))
}

pub fn configure(cfg: &mut web::ServiceConfig) {
    const FLOW: &str = "/v1/{environmentId}/action-flow/{flowConfigId}";
    cfg.service(
        web::resource(format!("{FLOW}/start"))
            .app_data(web::PayloadConfig::new(MAX_TRIGGER_BODY_BYTES))
            .route(web::post().to(start)),
    )
    .service(
        web::resource(format!("{FLOW}/test"))
            .app_data(web::PayloadConfig::new(MAX_TRIGGER_BODY_BYTES))
            .route(web::post().to(test)),
    )
    .service(web::resource(format!("{FLOW}/invocations")).route(web::get().to(invocations)))
    .service(
        web::resource(format!("{FLOW}/invocations/{{flowInvocationId}}"))
            .route(web::get().to(invocation)),
    )
    .service(
        web::resource(format!(
            "{FLOW}/invocations/{{flowInvocationId}}/users/{{endUserId}}"
        ))
        .route(web::get().to(super::instances::instance)),
    )
    .service(
        web::resource("/v1/{environmentId}/users/{endUserId}/cards").route(web::get().to(feed)),
    )
    .service(
        web::resource("/v1/{environmentId}/users/{endUserId}/cards/{cardInstanceId}/actions")
            .route(web::post().to(act)),
    )
    .service(
        web::resource("/v1/{environmentId}/users/{endUserId}/cards/{cardInstanceId}/events")
            .route(web::get().to(events)),
    );
}
