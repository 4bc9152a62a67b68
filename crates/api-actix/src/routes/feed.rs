//! The end-user feed in real time (contract §12): the open-card count, and a Server-Sent Events
//! stream of each change of the user's cards, resumable with `Last-Event-ID`.

use std::collections::VecDeque;
use std::time::Duration;

use actix_web::http::header;
use actix_web::web::Bytes;
use actix_web::{web, FromRequest, HttpRequest, HttpResponse};
use domain::feed::{FeedCursor, FeedEvent};
use domain::id::{EndUserId, EnvironmentId};
use domain::sdk::TicketGrant;
use domain::{DomainError, Permission};
use serde::Serialize;
use serde_json::json;
use tokio::time::Instant;
use utoipa::ToSchema;

use super::query::Query;
use super::shape::{ok, Call, Reply};
use super::timestamp;
use super::trigger::{feed_stream, CardDto};
use crate::auth::UserCaller;
use crate::hub::Watch;
use crate::problem::ApiError;
use crate::AppState;

/// A comment line this often keeps the connection open through proxies; and as often the
/// stream checks that its credential still holds (a revoked key, a deleted SDK key or an
/// expired token ends it). One timer for both: 10,000 idle streams wake 667 times a second.
pub const KEEP_ALIVE: Duration = Duration::from_secs(15);
/// Before sending what changed, the stream checks its credential again if it last did longer
/// ago than this: a revoked key never gets another event.
const CHECKED_FOR: Duration = Duration::from_secs(1);
/// After a failed read (the database unavailable), the stream waits this long and reads again.
const RETRY_READ: Duration = Duration::from_secs(1);
/// The longest `Last-Event-ID` read; a longer one names no event.
const LAST_EVENT_ID_MAX: usize = 64;

#[derive(Serialize, ToSchema)]
pub struct CardCount {
    /// The user's open (active) cards, as the feed lists them.
    #[schema(example = 3)]
    pub total: u64,
}

#[derive(Serialize, ToSchema)]
pub struct CardCountResponse {
    pub data: CardCount,
}

/// How many cards the user's feed holds: the badge count.
#[utoipa::path(
    get, path = "/v1/{environmentId}/users/{endUserId}/cards/count", tag = "cards",
        operation_id = "countCards",
    params(
        ("environmentId" = String, Path, description = "Environment id"),
        ("endUserId" = String, Path, description = "Your id for the user"),
        ("streamId" = Option<String>, Query, description = "Only cards in this stream"),
    ),
    responses((status = 200, description = "The open-card total", body = CardCountResponse)),
    security(("bearer" = ["cards:write"]), ("userToken" = []))
)]
pub async fn count(call: Call<(EnvironmentId, EndUserId), UserCaller>, req: HttpRequest) -> Reply {
    let stream = feed_stream(&call, &req)?;
    let (env, user) = &call.path;
    let total = call
        .state
        .feed
        .count(&call.caller, env, user, stream)
        .await?;
    ok(CardCountResponse {
        data: CardCount { total },
    })
}

/// The user's feed as it changes: `text/event-stream`, one event per change of one of the
/// user's cards. `id:` is the analytics event id, `event:` its name (`card-published`,
/// `card-snoozed`, `card-completed`, ...), `data:` `{"cardId", "card": <the card as the feed
/// shows it, or null when it is not in the feed>, "count": <the open-card total>}`, as they are
/// when the event is sent. A comment line every 15 s keeps the connection open. With
/// `Last-Event-ID` (or `lastEventId`), every event after that one is sent first (up to 24 h
/// back). A change made through any process sharing the database arrives within a second.
/// The stream ends when its key is revoked (or its SDK key deleted), found at the next change
/// or within 15 s, and when the service stops.
///
/// A browser's `EventSource`, which sends no `Authorization`, opens it with `?ticket=`: a
/// stream ticket of this user, used once (`POST .../cards/stream-tickets`). The stream then
/// lasts as long as the token the ticket was minted with would sign in.
#[utoipa::path(
    get, path = "/v1/{environmentId}/users/{endUserId}/cards/stream", tag = "cards",
        operation_id = "streamCards",
    params(
        ("environmentId" = String, Path, description = "Environment id"),
        ("endUserId" = String, Path, description = "Your id for the user"),
        ("streamId" = Option<String>, Query, description = "Only cards in this stream"),
        ("ticket" = Option<String>, Query,
            description = "A stream ticket of this user, instead of `Authorization`"),
        ("lastEventId" = Option<String>, Query,
            description = "As `Last-Event-ID`, for a client that cannot send headers"),
        ("Last-Event-ID" = Option<String>, Header,
            description = "Resume after this event (an `id:` the stream sent)"),
    ),
    responses(
        (status = 200, description = "Server-Sent Events, until the client leaves",
            content_type = "text/event-stream", body = String),
    ),
    security(("bearer" = ["cards:write"]), ("userToken" = []), ())
)]
pub async fn stream(
    state: web::Data<AppState>,
    path: web::Path<(EnvironmentId, EndUserId)>,
    req: HttpRequest,
) -> Result<HttpResponse, ApiError> {
    let (env, user) = path.into_inner();
    let query = match Query::parse(&req) {
        Ok(query) => query,
        // The credential before the query (contract §16): 401 comes before 400.
        Err(unreadable) => {
            UserCaller::extract(&req).await?;
            return Err(unreadable);
        }
    };
    let (caller, credential) = match query.get("ticket") {
        Some(ticket) => {
            let (principal, grant) = state.tickets.redeem(&env, &user, &ticket).await?;
            (principal, Credential::Ticket(grant))
        }
        None => {
            let UserCaller(principal) = UserCaller::extract(&req).await?;
            let bearer = crate::auth::bearer(&req).unwrap_or_default();
            (principal, Credential::Bearer(bearer))
        }
    };
    caller.authorize_user(&env, Permission::CardsWrite, &user)?;
    let stream_id = query.get("streamId");
    let usable = |v: &str| {
        let v = v.trim();
        (!v.is_empty() && v.len() <= LAST_EVENT_ID_MAX).then(|| v.to_owned())
    };
    let last = req
        .headers()
        .get("last-event-id")
        .and_then(|v| v.to_str().ok())
        .and_then(usable)
        .or_else(|| query.get("lastEventId").as_deref().and_then(usable));
    let cursor = state
        .feed
        .open(&caller, &env, &user, stream_id, last)
        .await?;
    let watch = state.hub.watch(&env, &user);
    let now = Instant::now();
    // Boxed: the stream holds its state and the future working on it, each then a pointer
    // (10,000 open streams are 10,000 of each).
    let open = Box::new(Open {
        state: state.clone(),
        cursor,
        watch,
        credential,
        // Reconnect after a second; and the first bytes go out at once.
        pending: VecDeque::from([Bytes::from_static(b"retry: 1000\n\n")]),
        read: true,
        keep_alive: now + KEEP_ALIVE,
        checked: now,
    });
    let body = futures_util::stream::unfold(open, next);
    Ok(HttpResponse::Ok()
        .content_type("text/event-stream")
        .insert_header((header::CACHE_CONTROL, "no-cache"))
        .insert_header(("x-accel-buffering", "no"))
        .streaming(body))
}

/// What a stream was opened with, checked again as it goes.
enum Credential {
    /// A key's secret or access token, or a user token, from `Authorization`.
    Bearer(String),
    /// A stream ticket, and what it kept of the user token it was minted with.
    Ticket(TicketGrant),
}

#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct StreamTicketDto {
    /// Opens this user's stream once, as `?ticket=`, before `expiresAt`.
    #[schema(example = "wst_3q2-7wJYV1oZbqk2mSxV8nA5dPYrLh6tCjU0eFgKiOw")]
    pub ticket: String,
    /// One minute after it was minted.
    #[schema(format = DateTime)]
    pub expires_at: String,
}

#[derive(Serialize, ToSchema)]
pub struct StreamTicketResponse {
    pub data: StreamTicketDto,
}

/// A stream ticket: what a browser's `EventSource`, which cannot send `Authorization`, opens
/// this user's stream with (`GET .../cards/stream?ticket=`). Minted with the user's own
/// token (an API key is refused: it never belongs in a browser); used once, within a minute.
#[utoipa::path(
    post, path = "/v1/{environmentId}/users/{endUserId}/cards/stream-tickets", tag = "cards",
        operation_id = "createStreamTicket",
    params(
        ("environmentId" = String, Path, description = "Environment id"),
        ("endUserId" = String, Path, description = "Your id for the user"),
    ),
    responses(
        (status = 201, description = "The ticket, shown once", body = StreamTicketResponse),
    ),
    security(("userToken" = []))
)]
pub async fn stream_ticket(
    call: Call<(EnvironmentId, EndUserId), UserCaller>,
    req: HttpRequest,
) -> Reply {
    let (env, user) = &call.path;
    call.caller
        .authorize_user(env, Permission::CardsWrite, user)?;
    let token = crate::auth::bearer(&req)?;
    if call.caller.end_user.is_none() || !crate::auth::is_jwt(&token) {
        return Err(DomainError::Forbidden(
            "a stream ticket is minted with the end user's own token, not an API key".into(),
        )
        .into());
    }
    let (ticket, expires) = call.state.tickets.mint(env, user, &token).await?;
    Ok(HttpResponse::Created()
        .insert_header((header::CACHE_CONTROL, "no-store"))
        .json(StreamTicketResponse {
            data: StreamTicketDto {
                ticket,
                expires_at: timestamp(&expires),
            },
        }))
}

/// An open stream.
struct Open {
    state: web::Data<AppState>,
    cursor: FeedCursor,
    watch: Watch,
    credential: Credential,
    /// Frames to send, in order.
    pending: VecDeque<Bytes>,
    /// Whether to read the user's changes before waiting again.
    read: bool,
    /// When the next keep-alive comment goes out, after the credential is checked again.
    keep_alive: Instant,
    /// When the credential was last found to hold.
    checked: Instant,
}

/// The stream's next frame; `None` ends it (the service stops, or the credential no longer
/// holds).
async fn next(mut open: Box<Open>) -> Option<(Result<Bytes, actix_web::Error>, Box<Open>)> {
    loop {
        if let Some(frame) = open.pending.pop_front() {
            return Some((Ok(frame), open));
        }
        if open.state.hub.is_closing() {
            return None;
        }
        if open.read {
            // The reads and checks are boxed: a stream waiting between changes holds its
            // wake-up and its timer, not their state.
            if open.checked.elapsed() >= CHECKED_FOR {
                if !Box::pin(still_signed_in(&open)).await {
                    return None;
                }
                open.checked = Instant::now();
            }
            let read = Box::pin(open.state.feed.changes(&mut open.cursor)).await;
            match read {
                Ok(changes) => {
                    open.read = changes.more;
                    open.pending.extend(changes.events.into_iter().map(frame));
                }
                Err(e) => {
                    tracing::warn!(error = %e,
                        "a feed stream could not read its changes; reading again shortly");
                    tokio::time::sleep(RETRY_READ).await;
                }
            }
            continue;
        }
        let now = Instant::now();
        if now >= open.keep_alive {
            if !Box::pin(still_signed_in(&open)).await {
                return None;
            }
            open.checked = now;
            open.keep_alive = now + KEEP_ALIVE;
            open.pending
                .push_back(Bytes::from_static(b": keep-alive\n\n"));
            continue;
        }
        let woken = tokio::select! {
            () = open.watch.watcher().changed() => true,
            () = tokio::time::sleep_until(open.keep_alive) => false,
        };
        open.read |= woken;
    }
}

/// Whether the stream's credential still reaches its user's feed. A storage fault is no
/// refusal: the stream goes on, and is checked again later.
async fn still_signed_in(open: &Open) -> bool {
    let state = &open.state;
    let (env, user) = (open.cursor.environment_id(), open.cursor.user_id());
    let checked = match &open.credential {
        Credential::Ticket(grant) => match state.tickets.holds(env, grant).await {
            Ok(true) => Ok(()),
            Ok(false) => Err(DomainError::Unauthenticated),
            Err(e) => Err(e),
        },
        Credential::Bearer(bearer) if crate::auth::is_jwt(bearer) => state
            .sdk
            .authenticate_user(env, user, bearer)
            .await
            .map(|_| ()),
        Credential::Bearer(bearer) => match state.auth.authenticate_for(bearer, Some(env)).await {
            Ok(principal) => principal.authorize_user(env, Permission::CardsWrite, user),
            Err(e) => Err(e),
        },
    };
    !matches!(
        checked,
        Err(DomainError::Unauthenticated
            | DomainError::Forbidden(_)
            | DomainError::TokenRefused(_))
    )
}

/// One event as the stream sends it.
fn frame(event: FeedEvent) -> Bytes {
    let data = json!({
        "cardId": event.head.card_id,
        "card": event.card.map(CardDto::from),
        "count": event.count,
    });
    Bytes::from(format!(
        "id: {}\nevent: {}\ndata: {data}\n\n",
        event.head.id, event.head.name
    ))
}

pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.service(
        web::resource("/v1/{environmentId}/users/{endUserId}/cards/count")
            .route(web::get().to(count)),
    )
    .service(
        web::resource("/v1/{environmentId}/users/{endUserId}/cards/stream")
            .route(web::get().to(stream)),
    )
    .service(
        web::resource("/v1/{environmentId}/users/{endUserId}/cards/stream-tickets")
            .route(web::post().to(stream_ticket)),
    );
}
