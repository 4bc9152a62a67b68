//! Browser access to the end-user routes (docs/api.md, Browser access): CORS for the origins
//! an environment's SDK keys list in `allowedOrigins`. The end-user routes are those under
//! `/v1/{environmentId}/users/{endUserId}/cards` and `.../devices`, which a user token
//! reaches (a card's `pushes`, for keys only, left out); every other route answers a browser
//! of another origin as it answers anyone, with no CORS header, so that the browser keeps the
//! answer from the page.
//!
//! An allowed origin's preflight is answered here (204, its `Access-Control-Allow-*`), and
//! its requests get `Access-Control-Allow-Origin` with the origin itself (never `*`) and the
//! headers a page may read. A preflight from an origin no key lists is refused (403) with no
//! CORS header; its other requests are answered as usual, with none either. Credentials
//! (cookies) are never needed: the user token travels in `Authorization`.

use actix_web::body::{BoxBody, MessageBody};
use actix_web::dev::{ServiceRequest, ServiceResponse};
use actix_web::http::header::{self, HeaderMap, HeaderValue};
use actix_web::http::{Method, StatusCode};
use actix_web::middleware::Next;
use actix_web::{web, HttpResponse, ResponseError};
use domain::id::EnvironmentId;

use crate::problem::ApiError;
use crate::AppState;

/// The methods of the end-user routes.
const METHODS: &str = "GET, POST, PUT, DELETE";
/// The request headers a page may send.
const HEADERS: &str = "authorization, content-type, last-event-id, x-request-id";
/// The answer's headers a page may read, beyond the CORS-safelisted ones.
const EXPOSED: &str = "x-request-id, retry-after, www-authenticate, ratelimit-limit, \
                       ratelimit-remaining, ratelimit-reset";
/// How long a browser may keep a preflight's answer, in seconds: a key's origins changed
/// reach browsers within it.
const MAX_AGE: &str = "600";
/// The longest `Origin` read; a longer one is no origin a key can list.
const ORIGIN_MAX_BYTES: usize = 256;

/// The environment of an end-user route's path (`/v1/{env}/users/{user}/cards...` or
/// `/devices...`), if the path is one.
pub(crate) fn end_user_environment(path: &str) -> Option<&str> {
    let mut parts = path.strip_prefix("/v1/")?.split('/');
    let env = parts.next().filter(|e| !e.is_empty())?;
    let users = parts.next()?;
    parts.next().filter(|u| !u.is_empty())?;
    let what = parts.next()?;
    // A card's pushes (`.../cards/{id}/pushes`) are for API keys only.
    let pushes = what == "cards" && parts.nth(1) == Some("pushes");
    (users == "users" && matches!(what, "cards" | "devices") && !pushes).then_some(env)
}

/// The request's `Origin`, when it has one that a key could list.
fn origin(headers: &HeaderMap) -> Option<&str> {
    headers
        .get(header::ORIGIN)
        .and_then(|v| v.to_str().ok())
        .filter(|o| !o.is_empty() && o.len() <= ORIGIN_MAX_BYTES)
}

/// CORS for the end-user routes; every other request passes untouched.
pub async fn cors(
    req: ServiceRequest,
    next: Next<impl MessageBody + 'static>,
) -> Result<ServiceResponse<BoxBody>, actix_web::Error> {
    let asked = end_user_environment(req.path())
        .zip(origin(req.headers()))
        .map(|(env, origin)| (EnvironmentId::from(env), origin.to_owned()));
    let Some((env, origin)) = asked else {
        return next
            .call(req)
            .await
            .map(ServiceResponse::map_into_boxed_body);
    };
    let state = req.app_data::<web::Data<AppState>>().cloned();
    let allowed = match state {
        Some(state) => match state.sdk.allows_origin(&env, &origin).await {
            Ok(allowed) => allowed,
            Err(e) => {
                // Unreadable keys allow nothing; the request itself says what failed.
                tracing::warn!(error = %e, "the SDK keys' origins could not be read");
                false
            }
        },
        None => false,
    };
    let preflight = req.method() == Method::OPTIONS
        && req
            .headers()
            .contains_key(header::ACCESS_CONTROL_REQUEST_METHOD);
    if preflight {
        let response = if allowed {
            let mut ok = HttpResponse::NoContent();
            ok.insert_header((header::ACCESS_CONTROL_ALLOW_METHODS, METHODS))
                .insert_header((header::ACCESS_CONTROL_ALLOW_HEADERS, HEADERS))
                .insert_header((header::ACCESS_CONTROL_MAX_AGE, MAX_AGE));
            let mut response = ok.finish();
            allow(response.headers_mut(), &origin);
            vary(response.headers_mut());
            response
        } else {
            let mut refused = ApiError::new(
                StatusCode::FORBIDDEN,
                "origin_not_allowed",
                "Origin not allowed",
                "no SDK key of the environment lists this origin in `allowedOrigins`",
            )
            .error_response();
            vary(refused.headers_mut());
            refused
        };
        return Ok(req.into_response(response));
    }
    let mut response = next.call(req).await?.map_into_boxed_body();
    vary(response.headers_mut());
    if allowed {
        allow(response.headers_mut(), &origin);
        response.headers_mut().insert(
            header::ACCESS_CONTROL_EXPOSE_HEADERS,
            HeaderValue::from_static(EXPOSED),
        );
    }
    Ok(response)
}

/// `Access-Control-Allow-Origin` for `origin`, which was read as a header value.
fn allow(headers: &mut HeaderMap, origin: &str) {
    if let Ok(value) = HeaderValue::from_str(origin) {
        headers.insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, value);
    }
}

/// The answer depends on `Origin`: caches keep one per origin.
fn vary(headers: &mut HeaderMap) {
    headers.append(header::VARY, HeaderValue::from_static("origin"));
}

#[cfg(test)]
mod tests {
    use super::end_user_environment;

    #[test]
    fn only_end_user_routes_are_open_to_browsers() {
        for (path, env) in [
            ("/v1/env_1/users/u1/cards", Some("env_1")),
            ("/v1/env_1/users/u1/cards/stream", Some("env_1")),
            ("/v1/env_1/users/u1/cards/stream-tickets", Some("env_1")),
            ("/v1/env_1/users/u1/cards/ci_1/actions", Some("env_1")),
            ("/v1/env_1/users/u1/devices/tok", Some("env_1")),
            ("/v1/env_1/users/u1", None),
            ("/v1/env_1/users/u1/cards/ci_1/pushes", None),
            ("/v1/env_1/users//cards", None),
            ("/v1//users/u1/cards", None),
            ("/v1/env_1/action-flow/f/start", None),
            ("/v1/env_1/sdk-keys", None),
            ("/oauth/token", None),
            ("/console/", None),
        ] {
            assert_eq!(end_user_environment(path), env, "{path}");
        }
    }
}
