//! Who is using the console (contract §13): the access token of a key, exchanged at sign-in and
//! kept in an `HttpOnly`, `SameSite=Strict` cookie, authenticated on every request exactly as
//! an API bearer is ([`AuthService::authenticate_for`](domain::AuthService)), within the key's
//! rate limit.
//!
//! Cross-site requests: every change is a `POST` whose form carries a token derived from the
//! session's own access token (which another site can neither read nor guess), and a `POST`
//! another site sent (`Sec-Fetch-Site: cross-site`, or an `Origin` that is not this one) is
//! refused before it is read. [`Session`] answers only `GET` and `HEAD`; a change is read
//! through [`Posted`], which checks both, so no handler can forget them.

use std::future::Future;
use std::pin::Pin;

use actix_web::cookie::{Cookie, SameSite};
use actix_web::dev::Payload;
use actix_web::http::{header, Method, StatusCode};
use actix_web::{web, FromRequest, HttpRequest, HttpResponse, ResponseError};
use domain::{DomainError, Principal};
use serde::de::DeserializeOwned;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use super::shell::{message, ROOT};
use crate::AppState;

/// The cookie that holds the session's access token.
pub(crate) const COOKIE: &str = "workbench_console";

/// A signed-in console user: the key's principal, and the token forms must carry.
pub(crate) struct Session {
    pub(crate) principal: Principal,
    pub(crate) csrf: String,
}

impl Session {
    /// Whether the key may do `permission` in `env` (actions it may not are not shown; the
    /// service refuses them anyway).
    pub(crate) fn may(&self, env: &str, permission: domain::Permission) -> bool {
        self.principal.authorize(env, permission).is_ok()
    }
}

/// The token a form of this session carries: a hash of the session's access token, so that
/// only a page this session was shown can know it.
pub(crate) fn csrf_of(token: &str) -> String {
    let digest = Sha256::digest(format!("workbench console form\0{token}").as_bytes());
    digest.iter().take(16).map(|b| format!("{b:02x}")).collect()
}

/// Why a console request did not reach its handler.
#[derive(Debug)]
pub(crate) enum Refusal {
    /// No session, or one no longer valid (expired, key revoked): to the sign-in page.
    SignIn { expired: bool },
    /// A change sent from another site, or without this session's form token.
    CrossSite,
    /// No such page or action.
    NotFound,
    /// The form cannot be read.
    BadForm(String),
    /// The form is larger than the console reads.
    TooLarge,
    /// Past the key's rate limit.
    Limited(crate::ApiError),
    /// The service failed.
    Failed,
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{self:?}")
    }
}

impl ResponseError for Refusal {
    fn status_code(&self) -> StatusCode {
        match self {
            Refusal::SignIn { .. } => StatusCode::SEE_OTHER,
            Refusal::CrossSite => StatusCode::FORBIDDEN,
            Refusal::NotFound => StatusCode::NOT_FOUND,
            Refusal::BadForm(_) => StatusCode::BAD_REQUEST,
            Refusal::TooLarge => StatusCode::PAYLOAD_TOO_LARGE,
            Refusal::Limited(e) => e.status_code(),
            Refusal::Failed => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    fn error_response(&self) -> HttpResponse {
        match self {
            Refusal::SignIn { expired } => {
                let to = if *expired {
                    format!("{ROOT}/sign-in?expired=1")
                } else {
                    format!("{ROOT}/sign-in")
                };
                let mut response = HttpResponse::SeeOther();
                response.insert_header((header::LOCATION, to));
                if *expired {
                    response.cookie(removal(false));
                }
                response.finish()
            }
            Refusal::CrossSite => message(
                StatusCode::FORBIDDEN,
                "Refused",
                "This change was not sent from a page of this console, so it was not made. Reload \
                    the page and try again.",
            ),
            Refusal::BadForm(why) => {
                message(StatusCode::BAD_REQUEST, "The form cannot be read", why)
            }
            Refusal::NotFound => {
                message(StatusCode::NOT_FOUND, "Not found", "There is no such page.")
            }
            Refusal::TooLarge => message(
                StatusCode::PAYLOAD_TOO_LARGE,
                "The form is too large",
                "The console reads forms of up to 1 MiB.",
            ),
            Refusal::Limited(e) => {
                let mut page = message(
                    e.status_code(),
                    "Too many requests",
                    "This key is past its rate limit. Wait a moment and try again.",
                );
                // When to try again, as the API says it.
                if let Some(after) = e.error_response().headers().get(header::RETRY_AFTER) {
                    page.headers_mut()
                        .insert(header::RETRY_AFTER, after.clone());
                }
                page
            }
            Refusal::Failed => message(
                StatusCode::INTERNAL_SERVER_ERROR,
                "Something went wrong",
                "The service could not answer. Try again shortly.",
            ),
        }
    }
}

/// The cookie that signs a session in: the token, for the console's paths only, unreadable to
/// scripts, never sent along a request another site started, and only over HTTPS when the
/// service is served over it.
pub(crate) fn cookie(token: &str, secure: bool, max_age_seconds: i64) -> Cookie<'static> {
    Cookie::build(COOKIE, token.to_owned())
        .path(ROOT)
        .http_only(true)
        .same_site(SameSite::Strict)
        .secure(secure)
        .max_age(actix_web::cookie::time::Duration::seconds(max_age_seconds))
        .finish()
}

/// The cookie that signs a session out.
pub(crate) fn removal(secure: bool) -> Cookie<'static> {
    let mut cookie = Cookie::build(COOKIE, "")
        .path(ROOT)
        .http_only(true)
        .same_site(SameSite::Strict)
        .secure(secure)
        .finish();
    cookie.make_removal();
    cookie
}

/// Whether a request was sent by another site (refused for every change, and for signing in):
/// `Sec-Fetch-Site` says so, or its `Origin` is neither this host (as the request names it,
/// or a trusted proxy forwards it) nor the origin of `public_url` (`WORKBENCH_PUBLIC_URL`,
/// for a proxy that rewrites `Host`).
pub(crate) fn cross_site(req: &HttpRequest, public_url: &str) -> bool {
    let fetch_site = req
        .headers()
        .get("sec-fetch-site")
        .and_then(|v| v.to_str().ok());
    if matches!(fetch_site, Some("cross-site") | Some("same-site")) {
        return true;
    }
    let Some(origin) = req.headers().get(header::ORIGIN) else {
        // Browsers send `Origin` with every POST; a client without it is no browser another
        // site could drive.
        return false;
    };
    let Ok(origin) = origin.to_str() else {
        return true;
    };
    if !public_url.is_empty() && origin == origin_of(public_url) {
        return false;
    }
    let info = req.connection_info();
    let host = info.host();
    origin.strip_prefix("https://") != Some(host) && origin.strip_prefix("http://") != Some(host)
}

/// The origin (scheme, host and port) of a base URL.
fn origin_of(url: &str) -> &str {
    let after_scheme = url.find("://").map_or(0, |i| i + 3);
    match url.get(after_scheme..).and_then(|rest| rest.find('/')) {
        Some(path) => url.get(..after_scheme + path).unwrap_or(url),
        None => url,
    }
}

async fn authenticate(
    state: &AppState,
    req: &HttpRequest,
    token: &str,
) -> Result<Principal, Refusal> {
    let environment = req.match_info().get("env").map(str::to_owned);
    let principal = match state
        .auth
        .authenticate_for(token, environment.as_deref())
        .await
    {
        Ok(p) => p,
        Err(DomainError::Unauthenticated) => return Err(Refusal::SignIn { expired: true }),
        Err(err) => {
            tracing::warn!(error = %err, "console session could not be read");
            return Err(Refusal::Failed);
        }
    };
    state
        .limits
        .admit_key(req, &principal.key_id)
        .map_err(Refusal::Limited)?;
    Ok(principal)
}

fn token_of(req: &HttpRequest) -> Option<String> {
    req.cookie(COOKIE)
        .map(|c| c.value().to_owned())
        .filter(|t| !t.is_empty() && t.len() <= 200)
}

impl FromRequest for Session {
    type Error = Refusal;
    type Future = Pin<Box<dyn Future<Output = Result<Self, Self::Error>>>>;

    fn from_request(req: &HttpRequest, _: &mut Payload) -> Self::Future {
        let req = req.clone();
        Box::pin(async move {
            // A change goes through `Posted`, which checks that it came from this console.
            if req.method() != Method::GET && req.method() != Method::HEAD {
                return Err(Refusal::CrossSite);
            }
            let state = req
                .app_data::<web::Data<AppState>>()
                .cloned()
                .ok_or(Refusal::Failed)?;
            let token = token_of(&req).ok_or(Refusal::SignIn { expired: false })?;
            let principal = authenticate(&state, &req, &token).await?;
            Ok(Session {
                principal,
                csrf: csrf_of(&token),
            })
        })
    }
}

/// A change: the session that sent it, and its form, read only once the request is known to
/// come from this console (its origin, then its form token).
pub(crate) struct Posted<T> {
    pub(crate) session: Session,
    pub(crate) form: T,
}

#[derive(serde::Deserialize)]
struct Token {
    csrf: String,
}

impl<T: DeserializeOwned + 'static> FromRequest for Posted<T> {
    type Error = Refusal;
    type Future = Pin<Box<dyn Future<Output = Result<Self, Self::Error>>>>;

    fn from_request(req: &HttpRequest, payload: &mut Payload) -> Self::Future {
        let req = req.clone();
        let body = web::Bytes::from_request(&req, payload);
        Box::pin(async move {
            let state = req
                .app_data::<web::Data<AppState>>()
                .cloned()
                .ok_or(Refusal::Failed)?;
            if req.method() != Method::POST || cross_site(&req, &state.public_url) {
                return Err(Refusal::CrossSite);
            }
            let token = token_of(&req).ok_or(Refusal::SignIn { expired: false })?;
            let principal = authenticate(&state, &req, &token).await?;
            let body = body.await.map_err(|e| {
                if e.as_response_error().status_code() == StatusCode::PAYLOAD_TOO_LARGE {
                    Refusal::TooLarge
                } else {
                    Refusal::BadForm("the form did not arrive whole".into())
                }
            })?;
            let csrf = csrf_of(&token);
            let sent: Token =
                serde_urlencoded::from_bytes(&body).map_err(|_| Refusal::CrossSite)?;
            if !bool::from(sent.csrf.as_bytes().ct_eq(csrf.as_bytes())) {
                return Err(Refusal::CrossSite);
            }
            let form = serde_urlencoded::from_bytes(&body)
                .map_err(|e| Refusal::BadForm(format!("the form cannot be read: {e}")))?;
            Ok(Posted {
                session: Session { principal, csrf },
                form,
            })
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use actix_web::test::TestRequest;

    #[test]
    fn the_form_token_depends_on_the_session_and_nothing_else() {
        assert_eq!(csrf_of("wbt_a"), csrf_of("wbt_a"));
        assert_ne!(csrf_of("wbt_a"), csrf_of("wbt_b"));
        assert_eq!(csrf_of("wbt_a").len(), 32);
        assert!(!csrf_of("wbt_a").contains("wbt_a"));
    }

    #[test]
    fn the_cookie_is_for_the_console_only_and_out_of_scripts_reach() {
        let c = cookie("wbt_x", true, 3600);
        assert_eq!(c.path(), Some("/console"));
        assert_eq!(c.http_only(), Some(true));
        assert_eq!(c.same_site(), Some(SameSite::Strict));
        assert_eq!(c.secure(), Some(true));
        assert_eq!(cookie("wbt_x", false, 3600).secure(), Some(false));
    }

    #[test]
    fn a_request_another_site_sent_is_told_apart() {
        let from = |origin: Option<&str>, site: Option<&str>| {
            let mut r = TestRequest::post().insert_header((header::HOST, "console.example"));
            if let Some(o) = origin {
                r = r.insert_header((header::ORIGIN, o));
            }
            if let Some(s) = site {
                r = r.insert_header(("sec-fetch-site", s));
            }
            cross_site(&r.to_http_request(), "https://console.example.org/base")
        };
        assert!(!from(None, None));
        assert!(!from(Some("http://console.example"), Some("same-origin")));
        assert!(!from(Some("https://console.example"), None));
        assert!(from(Some("https://evil.example"), None));
        assert!(from(Some("null"), None));
        assert!(from(None, Some("cross-site")));
        assert!(from(Some("http://console.example"), Some("same-site")));
        // The public URL's origin, for a proxy that rewrites Host.
        assert!(!from(Some("https://console.example.org"), None));
        assert!(from(Some("https://console.example.org.evil"), None));
        assert_eq!(
            origin_of("https://a.example:8443/x/y"),
            "https://a.example:8443"
        );
        assert_eq!(origin_of("http://a.example"), "http://a.example");
    }
}
