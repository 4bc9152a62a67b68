//! The middleware every request passes through: request id, tracing span, metrics, panic
//! capture, and the guarantee that every error response is a problem document.

use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use actix_web::body::{BoxBody, MessageBody};
use actix_web::dev::{ServiceRequest, ServiceResponse};
use actix_web::http::header::{self, HeaderName, HeaderValue};
use actix_web::http::StatusCode;
use actix_web::middleware::Next;
use actix_web::{web, HttpMessage, ResponseError};
use futures_util::FutureExt;
use tracing::Instrument;

use crate::problem::{ApiError, PROBLEM_CONTENT_TYPE};
use crate::AppState;

pub const REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");

/// A client-sent request id is echoed when it is 1–128 visible ASCII characters without
/// spaces; otherwise (or when absent) a new one is minted.
fn request_id(req: &ServiceRequest) -> String {
    req.headers()
        .get(&REQUEST_ID)
        .and_then(|v| v.to_str().ok())
        .filter(|v| !v.is_empty() && v.len() <= 128 && v.bytes().all(|b| b.is_ascii_graphic()))
        .map(str::to_owned)
        .unwrap_or_else(|| ulid::Ulid::new().to_string().to_ascii_lowercase())
}

/// Why a request's path cannot name anything (contract §16): a percent-escape that is not
/// two hex digits, escapes that decode to no UTF-8, or a control character. Such a path is
/// refused, never decoded lossily.
fn path_problem(path: &str) -> Option<&'static str> {
    let bytes = path.as_bytes();
    let mut decoded = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while let Some(&b) = bytes.get(i) {
        if b == b'%' {
            let hex = bytes
                .get(i + 1..i + 3)
                .and_then(|h| std::str::from_utf8(h).ok())
                .and_then(|h| u8::from_str_radix(h, 16).ok());
            let Some(byte) = hex else {
                return Some("has a `%` that is not followed by two hex digits");
            };
            decoded.push(byte);
            i += 3;
        } else {
            decoded.push(b);
            i += 1;
        }
    }
    match std::str::from_utf8(&decoded) {
        Err(_) => Some("has percent-escapes that are not UTF-8"),
        Ok(text) if text.chars().any(char::is_control) => Some("has a control character"),
        Ok(_) => None,
    }
}

/// Whether a request starts new work or creates a resource, which the low-disk guard refuses
/// (contract §18): every `POST`, `PUT` and `PATCH` but card actions, cancels and access
/// tokens, which finish or stop what was accepted. Reads and deletes go on.
fn new_work(method: &str, route: &str) -> bool {
    const GOES_ON: [&str; 12] = [
        "/v1/{environmentId}/users/{endUserId}/cards/{cardInstanceId}/actions",
        "/v1/{environmentId}/action-flow/{flowConfigId}/task/cancel",
        "/oauth/token",
        // The console's sign-in and sign-out, its deletes, revokes, discards and cancels.
        "/console/sign-in",
        "/console/sign-out",
        "/console/{env}/folders/{id}/delete",
        "/console/{env}/credentials/{client_id}/revoke",
        "/console/{env}/flows/{id}/discard",
        "/console/{env}/flows/{id}/cancel",
        "/console/{env}/push/delete",
        "/console/{env}/segments/{id}/delete",
        "/console/{env}/streams/{id}/delete",
    ];
    matches!(method, "POST" | "PUT" | "PATCH") && !GOES_ON.contains(&route)
}

/// What the edge knows of a request from its start, for its metrics and its refusals.
struct Seen {
    started: Instant,
    id: String,
    method: String,
    state: Option<web::Data<AppState>>,
}

impl Seen {
    /// Counts the answer in the metrics, when the app has its state.
    fn count(&self, route: &str, status: u16, elapsed: Duration) {
        if let Some(state) = &self.state {
            state.metrics.observe(&self.method, route, status, elapsed);
        }
    }

    /// A refusal without a response, counted under `route`: the problem is returned as an
    /// error that carries the request id, and actix renders it through
    /// `ApiError::error_response`.
    fn refuse(self, route: &str, problem: ApiError) -> actix_web::Error {
        let status = problem.status_code().as_u16();
        self.count(route, status, self.started.elapsed());
        problem.with_request_id(self.id).into()
    }
}

/// What the rest of the chain answered, or the panic it raised.
type Caught<B> = std::thread::Result<Result<ServiceResponse<B>, actix_web::Error>>;

pub async fn edge(
    mut req: ServiceRequest,
    next: Next<impl MessageBody + 'static>,
) -> Result<ServiceResponse<BoxBody>, actix_web::Error> {
    let seen = Seen {
        started: Instant::now(),
        id: request_id(&req),
        method: req.method().to_string(),
        state: req.app_data::<web::Data<AppState>>().cloned(),
    };
    if let Some(why) = path_problem(req.path()) {
        return Err(refuse_path(seen, why));
    }
    // The route pattern, not the path, names the request in metrics and logs (bounded label
    // values). It is read after routing, from the route taken (matching the path against every
    // pattern first cost `/start` a measurable share of its CPU); a request that leaves no
    // response is named from its path by this thread's copy of the routes.
    remember_routes(&req);
    let path = req.path().to_owned();
    if seen
        .state
        .as_ref()
        .is_some_and(|s| s.storage.guard_tripped())
    {
        let route = route_of(&path);
        if new_work(&seen.method, &route) {
            return Err(refuse_low_disk(seen, &route));
        }
    }
    let span = request_span(&mut req, &seen);
    // The request cannot be kept aside (actix needs sole ownership of it while routing), so
    // a failure that leaves no response is answered by returning the problem as an error.
    let caught = match call_in_time(req, next, &span).await {
        Ok(caught) => caught,
        Err((limit, arrived)) => {
            let route = route_of(&path);
            span.record("route", route.as_str());
            let problem = timed_out(&span, limit, arrived);
            return Err(seen.refuse(&route, problem));
        }
    };
    let route = route_taken(&caught, &path);
    span.record("route", route.as_str());
    let mut response = match response_of(caught, &span) {
        Ok(response) => response,
        Err(problem) => return Err(seen.refuse(&route, problem)),
    };
    let status = response.status();
    if (status.is_client_error() || status.is_server_error()) && !is_problem(&response, &route) {
        response = as_problem(response, &span);
    }
    stamp_headers(&mut response, &seen.id, &route);
    log_completed(&seen, &span, &route, status);
    Ok(response)
}

/// A path that cannot name anything (contract §16): 400, counted under `invalid`.
fn refuse_path(seen: Seen, why: &str) -> actix_web::Error {
    tracing::info!(request_id = %seen.id, "request refused: the path {why}");
    let problem = ApiError::new(
        StatusCode::BAD_REQUEST,
        "invalid_path",
        "Invalid path",
        format!("the path {why}"),
    );
    seen.refuse("invalid", problem)
}

/// Contract §18: below the low-disk guard, the last free space serves what was promised; new
/// work and new resources wait.
fn refuse_low_disk(seen: Seen, route: &str) -> actix_web::Error {
    LOW_DISK.refused(&seen.method, route);
    tracing::info!(
        request_id = %seen.id,
        method = %seen.method,
        route = %route,
        status = 503u16,
        "request refused below the low-disk guard"
    );
    seen.refuse(route, ApiError::storage_full())
}

/// The request's span. Contract §17: it names who called, as the proxies trusted say, and the
/// address is kept on the request for the rate limits.
fn request_span(req: &mut ServiceRequest, seen: &Seen) -> tracing::Span {
    let client = seen
        .state
        .as_ref()
        .and_then(|state| crate::client::of(req, &state.trusted_proxies));
    if let Some(address) = client {
        req.extensions_mut()
            .insert(crate::client::ClientAddress(address));
    }
    let client = client.map(|a| a.to_string()).unwrap_or_default();
    tracing::info_span!("request", request_id = %seen.id, method = %seen.method,
        route = tracing::field::Empty, client = %client)
}

/// Calls the rest of the chain, a panic caught. Contract §16: a request with a body is answered
/// 408, and its connection closed, when the body has not arrived in time (a slow client holds a
/// connection and a worker's attention); `Err` is the time that ran out and whether the body
/// had arrived whole.
async fn call_in_time<B: MessageBody + 'static>(
    mut req: ServiceRequest,
    next: Next<B>,
    span: &tracing::Span,
) -> Result<Caught<B>, (Duration, bool)> {
    let body_timeout = req
        .app_data::<web::Data<crate::BodyTimeout>>()
        .map(|t| t.0)
        .filter(|_| has_body(&req));
    let whole = body_timeout.map(|_| watch_body(&mut req));
    let call = AssertUnwindSafe(next.call(req))
        .catch_unwind()
        .instrument(span.clone());
    match body_timeout {
        None => Ok(call.await),
        Some(limit) => tokio::time::timeout(limit, call).await.map_err(|_| {
            let arrived = whole.is_some_and(|w| w.load(Ordering::Relaxed));
            (limit, arrived)
        }),
    }
}

/// The route pattern of the route taken, or of the path when the request left no response.
fn route_taken<B>(caught: &Caught<B>, path: &str) -> String {
    match caught {
        Ok(Ok(response)) => response
            .request()
            .match_pattern()
            .unwrap_or_else(|| "unmatched".to_owned()),
        _ => route_of(path),
    }
}

/// The response, or the problem that answers a failure that left none (logged; a panic's
/// message is not sent).
fn response_of<B: MessageBody + 'static>(
    caught: Caught<B>,
    span: &tracing::Span,
) -> Result<ServiceResponse<BoxBody>, ApiError> {
    match caught {
        Ok(Ok(response)) => Ok(response.map_into_boxed_body()),
        Ok(Err(err)) => {
            tracing::error!(parent: span, error = %err, "request failed without a response");
            Err(ApiError::from_status(err.as_response_error().status_code()))
        }
        Err(panic) => {
            let message = panic
                .downcast_ref::<&str>()
                .map(|s| (*s).to_owned())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "unknown panic".to_owned());
            tracing::error!(parent: span, panic = %message, "handler panicked");
            Err(ApiError::internal())
        }
    }
}

/// Whether an error response is a problem document already, or a console page (which shows
/// its error itself).
fn is_problem(response: &ServiceResponse<BoxBody>, route: &str) -> bool {
    response
        .headers()
        .get(header::CONTENT_TYPE)
        .is_some_and(|v| {
            v.as_bytes().starts_with(PROBLEM_CONTENT_TYPE.as_bytes())
                || (route.starts_with("/console/") && v.as_bytes().starts_with(b"text/html"))
        })
}

/// A framework's error response replaced by the problem of its status.
fn as_problem(response: ServiceResponse<BoxBody>, span: &tracing::Span) -> ServiceResponse {
    if let Some(err) = response.response().error() {
        tracing::debug!(parent: span, error = %err,
            "framework error replaced by a problem");
    }
    let (request, original) = response.into_parts();
    let mut replacement = ApiError::from_status(original.status()).error_response();
    // What the allowed methods, the wait and a browser's access (CORS) said holds for the
    // problem too.
    for (name, value) in original.headers() {
        let kept = matches!(*name, header::ALLOW | header::RETRY_AFTER | header::VARY)
            || name.as_str().starts_with("access-control-");
        if kept {
            replacement
                .headers_mut()
                .append(name.clone(), value.clone());
        }
    }
    ServiceResponse::new(request, replacement)
}

/// The headers every answer carries: its request id, a rate-limited caller's allowance, and
/// what no answer is sniffed or cached as.
fn stamp_headers(response: &mut ServiceResponse<BoxBody>, id: &str, route: &str) {
    if let Ok(value) = HeaderValue::from_str(id) {
        response.headers_mut().insert(REQUEST_ID, value);
    }
    // Contract §16: every answer to a rate-limited caller says where it stands.
    let allowance = response
        .request()
        .extensions()
        .get::<crate::limits::Allowance>()
        .copied();
    if let Some(allowance) = allowance {
        allowance.write(response.headers_mut());
    }
    // Contract §16: no answer is sniffed into another type, and no answer of the API (which
    // may carry a secret or a token: a new key, a webhook's signing secret) is stored by a
    // cache, unless its handler decided otherwise.
    let headers = response.headers_mut();
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    if carries_credentials(route) && !headers.contains_key(header::CACHE_CONTROL) {
        headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    }
}

/// Counts the answer and logs it: failures at ERROR, probes at DEBUG, the rest at INFO.
fn log_completed(seen: &Seen, span: &tracing::Span, route: &str, status: StatusCode) {
    let elapsed = seen.started.elapsed();
    seen.count(route, status.as_u16(), elapsed);
    let latency_ms = elapsed.as_secs_f64() * 1000.0;
    // A 503 (database unreachable, storage full) was logged where it was decided, once.
    if status.is_server_error() && status != StatusCode::SERVICE_UNAVAILABLE {
        tracing::error!(parent: span, status = status.as_u16(), latency_ms, "request failed");
    } else if is_probe(route) {
        // Probes and scrapes come every few seconds from every balancer and scraper.
        tracing::debug!(parent: span, status = status.as_u16(), latency_ms, "request completed");
    } else {
        tracing::info!(parent: span, status = status.as_u16(), latency_ms, "request completed");
    }
}

thread_local! {
    /// This thread's copy of its app's routes, by the address of the map it was copied from:
    /// names the route of a request that left no response (or before routing, below the
    /// low-disk guard). A copy shares the routes' nodes; it is made once per app and thread.
    static ROUTES: std::cell::RefCell<Option<(usize, actix_web::dev::ResourceMap)>> =
        const { std::cell::RefCell::new(None) };
}

fn remember_routes(req: &ServiceRequest) {
    let map = req.resource_map();
    let at = std::ptr::from_ref(map) as usize;
    ROUTES.with(|routes| {
        let mut routes = routes.borrow_mut();
        if routes.as_ref().map(|(a, _)| *a) != Some(at) {
            *routes = Some((at, map.clone()));
        }
    });
}

/// The route pattern `path` matches, from this thread's copy of the routes.
fn route_of(path: &str) -> String {
    ROUTES
        .with(|routes| {
            routes
                .borrow()
                .as_ref()
                .and_then(|(_, map)| map.match_pattern(path))
        })
        .unwrap_or_else(|| "unmatched".to_owned())
}

/// Health, readiness and metrics: logged at DEBUG (contract §17).
fn is_probe(route: &str) -> bool {
    matches!(route, "/healthz" | "/readyz" | "/metrics")
}

/// Marks when the request's body has been read to its end, so that a request whose time ran
/// out is told apart: a body still arriving (408), or one that arrived whole and whose work
/// took too long (503).
fn watch_body(req: &mut ServiceRequest) -> Arc<AtomicBool> {
    let whole = Arc::new(AtomicBool::new(false));
    let watched = Watched {
        inner: req.take_payload(),
        whole: whole.clone(),
    };
    let boxed: std::pin::Pin<
        Box<dyn futures_util::Stream<Item = <Watched as futures_util::Stream>::Item>>,
    > = Box::pin(watched);
    req.set_payload(actix_web::dev::Payload::from(boxed));
    whole
}

/// A request's body, which says when it ended.
struct Watched {
    inner: actix_web::dev::Payload,
    whole: Arc<AtomicBool>,
}

impl futures_util::Stream for Watched {
    type Item = Result<actix_web::web::Bytes, actix_web::error::PayloadError>;

    fn poll_next(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Self::Item>> {
        let polled = futures_util::StreamExt::poll_next_unpin(&mut self.inner, cx);
        if let std::task::Poll::Ready(None) = polled {
            self.whole.store(true, Ordering::Relaxed);
        }
        polled
    }
}

/// The answer to a request whose time ran out, logged once: 408 while its body was still
/// arriving; 503 when it had arrived whole (the work was stopped, and may be tried again).
fn timed_out(span: &tracing::Span, limit: Duration, arrived: bool) -> ApiError {
    let limit_ms = u64::try_from(limit.as_millis()).unwrap_or(u64::MAX);
    if arrived {
        tracing::warn!(parent: span, limit_ms, "request stopped: it was not processed in time");
        ApiError::processing_timeout(limit)
    } else {
        tracing::warn!(parent: span, limit_ms, "request refused: its body did not arrive in time");
        ApiError::body_timeout(limit)
    }
}

/// The low-disk guard's refusals, logged once a minute at most with how many there were:
/// each request has its own line already, and a line per refusal flooded the log.
struct Throttled {
    /// Refusals since the last line.
    refused: AtomicU64,
    /// When the last line was written, in seconds since `origin`; `u64::MAX` before the first.
    last: AtomicU64,
    origin: std::sync::OnceLock<Instant>,
}

/// How often the guard's refusals are logged at most.
const REFUSALS_LOGGED_EVERY: u64 = 60;

static LOW_DISK: Throttled = Throttled {
    refused: AtomicU64::new(0),
    last: AtomicU64::new(u64::MAX),
    origin: std::sync::OnceLock::new(),
};

impl Throttled {
    fn refused(&self, method: &str, route: &str) {
        self.refused.fetch_add(1, Ordering::Relaxed);
        let now = self.origin.get_or_init(Instant::now).elapsed().as_secs();
        let last = self.last.load(Ordering::Relaxed);
        let due = last == u64::MAX || now.saturating_sub(last) >= REFUSALS_LOGGED_EVERY;
        if due
            && self
                .last
                .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
        {
            let refused = self.refused.swap(0, Ordering::Relaxed);
            tracing::warn!(
                refused,
                method = %method,
                route = %route,
                "new work refused: free disk space is below WORKBENCH_MIN_FREE_DISK \
                 (refusals counted since the last such line; at most one a minute)"
            );
        }
    }
}

/// Whether the request announces a body: a non-zero length, or a chunked one.
fn has_body(req: &ServiceRequest) -> bool {
    let headers = req.headers();
    headers.contains_key(header::TRANSFER_ENCODING)
        || headers
            .get(header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<u64>().ok())
            .is_some_and(|n| n > 0)
}

/// Routes of the API proper (under `/v1/`, and the token exchange), whose answers may carry
/// secrets or tokens: not the documentation, health or metrics.
fn carries_credentials(route: &str) -> bool {
    route.starts_with("/v1/") || route == "/oauth/token" || route.starts_with("/console/")
}

#[cfg(test)]
mod path_tests {
    use super::{new_work, path_problem};

    #[test]
    fn the_low_disk_guard_refuses_new_work_and_lets_what_finishes_through() {
        assert!(new_work(
            "POST",
            "/v1/{environmentId}/action-flow/{flowConfigId}/start"
        ));
        assert!(new_work("PUT", "/v1/{environmentId}/users/{endUserId}"));
        assert!(new_work("POST", "/uploads/csv/{token}"));
        assert!(!new_work(
            "POST",
            "/v1/{environmentId}/users/{endUserId}/cards/{cardInstanceId}/actions"
        ));
        assert!(!new_work(
            "POST",
            "/v1/{environmentId}/action-flow/{flowConfigId}/task/cancel"
        ));
        assert!(!new_work(
            "DELETE",
            "/v1/{environmentId}/webhook/{webhookId}"
        ));
        assert!(!new_work("GET", "/v1/{environmentId}/action-flow"));
        assert!(!new_work("POST", "/console/sign-in"));
        assert!(!new_work("POST", "/console/{env}/folders/{id}/delete"));
        assert!(!new_work("POST", "/console/{env}/flows/{id}/cancel"));
        assert!(new_work("POST", "/console/{env}/folders"));
        assert!(new_work("POST", "/console/{env}/flows/{id}/draft/{action}"));
    }

    #[test]
    fn paths_are_refused_when_they_cannot_name_anything() {
        assert_eq!(path_problem("/v1/env_1/users/ann%20lee"), None);
        assert_eq!(path_problem("/v1/env_1/users/j%C3%BCrgen"), None);
        for bad in [
            "/v1/env/users/bad%FFid",
            "/v1/env/users/bad%ED%A0%80id",
            "/v1/env/users/bad%zzid",
            "/v1/env/users/bad%2",
            "/v1/env/action-flow/flw_%00/start",
            "/v1/env/users/a%0Ab",
        ] {
            assert!(path_problem(bad).is_some(), "{bad}");
        }
    }
}

#[cfg(test)]
mod tests {
    use actix_web::middleware::from_fn;
    use actix_web::{test, App, HttpResponse};

    use super::*;

    async fn boom() -> HttpResponse {
        panic!("handler bug")
    }

    #[actix_web::test]
    async fn a_panicking_handler_answers_a_500_problem_with_a_request_id() {
        let app = test::init_service(
            App::new()
                .wrap(from_fn(edge))
                .route("/boom", web::get().to(boom))
                .route(
                    "/ok",
                    web::get().to(|| async { HttpResponse::Ok().finish() }),
                ),
        )
        .await;
        let request = test::TestRequest::get()
            .uri("/boom")
            .insert_header(("x-request-id", "abc-1"))
            .to_request();
        let response = match test::try_call_service(&app, request).await {
            Ok(response) => response.into_parts().1,
            Err(err) => err.error_response(),
        };
        assert_eq!(response.status(), 500);
        assert_eq!(
            response
                .headers()
                .get("x-request-id")
                .and_then(|v| v.to_str().ok()),
            Some("abc-1")
        );
        assert_eq!(
            response
                .headers()
                .get(header::CONTENT_TYPE)
                .and_then(|v| v.to_str().ok()),
            Some(PROBLEM_CONTENT_TYPE)
        );
        let body = actix_web::body::to_bytes(response.into_body())
            .await
            .expect("body");
        let problem: serde_json::Value = serde_json::from_slice(&body).expect("json");
        assert_eq!(problem["code"], "internal_error");
        assert!(
            !problem.to_string().contains("handler bug"),
            "the panic message is not leaked"
        );

        // The worker survives: the next request is served.
        let next = test::call_service(&app, test::TestRequest::get().uri("/ok").to_request()).await;
        assert_eq!(next.status(), 200);
    }

    #[actix_web::test]
    async fn plain_text_framework_errors_become_problems() {
        let app = test::init_service(
            App::new()
                .wrap(from_fn(edge))
                .service(web::resource("/only-get").route(web::get().to(HttpResponse::Ok))),
        )
        .await;
        let response = test::call_service(
            &app,
            test::TestRequest::post().uri("/only-get").to_request(),
        )
        .await;
        assert_eq!(response.status(), 405);
        assert!(
            response.headers().get(header::ALLOW).is_some(),
            "Allow survives the conversion"
        );
        let body = test::read_body(response).await;
        let problem: serde_json::Value = serde_json::from_slice(&body).expect("json");
        assert_eq!(problem["code"], "method_not_allowed");
    }
}
