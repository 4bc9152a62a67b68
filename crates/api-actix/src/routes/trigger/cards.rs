//! The end-user card API the SDKs call (contract §4): a user's feed, acting on a card, and a
//! card's analytics events.

use actix_web::HttpRequest;
use domain::card::{AnalyticsEvent, CardAction, CardInstance};
use domain::id::{CardId, EndUserId, EnvironmentId};
use domain::Permission;
use serde::Serialize;
use serde_json::{Map, Value};
use utoipa::ToSchema;

use crate::auth::UserCaller;
use crate::body::Fields;
use crate::problem::{ApiError, Problem};
use crate::routes::query::Query;
use crate::routes::shape::{invalid, listed, ok, Body, Call, Reply};
use crate::routes::timestamp;

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
pub async fn feed(call: Call<(EnvironmentId, EndUserId), UserCaller>, req: HttpRequest) -> Reply {
    let stream = feed_stream(&call, &req)?;
    let (env, user) = &call.path;
    let cards = call.state.cards.feed(&call.caller, env, user, stream);
    ok(FeedResponse {
        data: listed(cards.await?),
    })
}

/// The `streamId` filter of a user's feed (its cards, or their count), read once the caller
/// is found to reach that feed: the key before the query (contract §16), so that 401 and 403
/// come before 400.
pub(crate) fn feed_stream(
    call: &Call<(EnvironmentId, EndUserId), UserCaller>,
    req: &HttpRequest,
) -> Result<Option<String>, ApiError> {
    let (env, user) = &call.path;
    call.caller
        .authorize_user(env, Permission::CardsWrite, user)?;
    Ok(Query::parse(req)?.get("streamId"))
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
pub async fn act(call: Call<(EnvironmentId, EndUserId, CardId), UserCaller>, body: Body) -> Reply {
    let (env, user, card) = &call.path;
    call.caller
        .authorize_user(env, Permission::CardsWrite, user)?;
    let action = card_action(&body.object()?)?;
    let card = call.state.cards.act(&call.caller, env, user, card, action);
    ok(CardResponse {
        data: card.await?.into(),
    })
}

/// The action of an action's body, with what it carries: every problem reported at once.
fn card_action(object: &Map<String, Value>) -> Result<CardAction, ApiError> {
    let mut fields = Fields::new(object);
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
    action.ok_or_else(|| invalid("action", "is required"))
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
pub async fn events(call: Call<(EnvironmentId, EndUserId, CardId)>) -> Reply {
    let (env, user, card) = &call.path;
    let cards = &call.state.cards;
    let events = cards.events(&call.caller, env, user, card).await?;
    ok(EventListResponse {
        data: events.iter().map(AnalyticsEvent::data).collect(),
    })
}
