//! The console (contract §13): web pages for the people who run the product, served at
//! `/console/` by the same process, with their assets embedded.
//!
//! Pages are HTML rendered here (maud) and plain forms: each change is a `POST` that calls one
//! domain service method, exactly as the API's handler for it does, and answers `303` to the
//! page that shows the result, or that page again with the API's error messages next to the
//! fields they name. Nothing is loaded from another origin, and no script is needed to use it.
//!
//! - [`session`]: sign-in by a key's client id and secret, the cookie, cross-site refusals;
//! - [`page`]: the frame, messages and fields every page shares;
//! - [`folders`], [`flows`], [`webhooks`], [`credentials`]: the pages.

mod credentials;
mod flows;
mod folders;
mod page;
mod session;
mod webhooks;

use actix_web::http::{header, StatusCode};
use actix_web::{web, HttpMessage, HttpRequest, HttpResponse};
use domain::tenancy::Environment;
use domain::{DomainError, Permission};
use maud::html;
use serde::Deserialize;

use page::{respond, see_other, Problems};
use session::{Posted, Refusal, Session, ROOT};

use crate::AppState;

/// The console's routes, under `/console`.
pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.route("/console", web::get().to(to_root))
        .route("/console/", web::get().to(root))
        .route("/console/assets/console.css", web::get().to(css))
        .route("/console/assets/console.js", web::get().to(js))
        .route("/console/sign-in", web::get().to(sign_in_page))
        .route("/console/sign-in", web::post().to(sign_in))
        .route("/console/sign-out", web::post().to(sign_out))
        .route("/console/switch", web::get().to(switch));
    folders::configure(cfg);
    flows::configure(cfg);
    credentials::configure(cfg);
    webhooks::configure(cfg);
}

const CSS: &str = include_str!("assets/console.css");
const JS: &str = include_str!("assets/console.js");

async fn css() -> HttpResponse {
    asset("text/css; charset=utf-8", CSS)
}

async fn js() -> HttpResponse {
    asset("text/javascript; charset=utf-8", JS)
}

fn asset(kind: &'static str, body: &'static str) -> HttpResponse {
    HttpResponse::Ok()
        .content_type(kind)
        .insert_header((header::CACHE_CONTROL, "no-cache"))
        .body(body)
}

async fn to_root() -> HttpResponse {
    see_other(&format!("{ROOT}/"))
}

/// The first environment the key may use (oldest first), or a page saying it may use none.
async fn root(state: web::Data<AppState>, session: Session) -> Result<HttpResponse, Refusal> {
    let environments = environments(&state, &session).await?;
    match environments.first() {
        Some(e) => Ok(see_other(&format!(
            "{ROOT}/{}/{}",
            e.id,
            first_section(&session, &e.id)
        ))),
        None => Ok(page::message(
            StatusCode::FORBIDDEN,
            "No environment",
            "This key may use no environment.",
        )),
    }
}

/// The first section the key may read in `env`.
fn first_section(session: &Session, env: &str) -> &'static str {
    if session.may(env, Permission::ActionFlowsRead) {
        "flows"
    } else if session.may(env, Permission::FoldersRead) {
        "folders"
    } else if session.may(env, Permission::WebhooksRead) {
        "webhooks"
    } else {
        "credentials"
    }
}

/// The environments the session's key may use, for the switcher.
pub(super) async fn environments(
    state: &AppState,
    session: &Session,
) -> Result<Vec<Environment>, Refusal> {
    state
        .auth
        .list_environments(&session.principal)
        .await
        .map_err(|err| failed(&err))
}

/// A failure no page can show in place: logged, then a generic page.
pub(super) fn failed(err: &DomainError) -> Refusal {
    match err {
        DomainError::Unauthenticated => Refusal::SignIn { expired: true },
        _ => {
            tracing::warn!(error = %err, "console page failed");
            Refusal::Failed
        }
    }
}

#[derive(Deserialize)]
struct SwitchQuery {
    env: String,
    section: Option<String>,
}

/// The environment switcher: the same section of another environment.
async fn switch(session: Session, query: web::Query<SwitchQuery>) -> HttpResponse {
    let section = match query.section.as_deref() {
        Some(s @ ("folders" | "flows" | "webhooks" | "credentials")) => s,
        _ => first_section(&session, &query.env),
    };
    // An environment the key may not use is refused by the page itself (401 as in the API).
    let env: String = query
        .env
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || *c == '_')
        .take(64)
        .collect();
    see_other(&format!("{ROOT}/{env}/{section}"))
}

#[derive(Deserialize)]
struct SignInQuery {
    expired: Option<String>,
}

async fn sign_in_page(query: web::Query<SignInQuery>) -> HttpResponse {
    let note = query
        .expired
        .is_some()
        .then_some("You were signed out: the session expired, or its key was revoked.");
    sign_in_form(StatusCode::OK, note, None, "")
}

fn sign_in_form(
    status: StatusCode,
    note: Option<&str>,
    error: Option<&str>,
    client_id: &str,
) -> HttpResponse {
    respond(
        status,
        page::bare(
            "Sign in",
            html! {
                h1 { "Sign in" }
                p { "Sign in with an API key's client id and secret. The console can do what the key may do." }
                (page::notice(note))
                @if let Some(error) = error {
                    div.alert role="alert" { p { (error) } }
                }
                form method="post" action={ (ROOT) "/sign-in" } {
                    div.field {
                        label for="client_id" { "Client id" }
                        input #client_id type="text" name="client_id" value=(client_id)
                            autocomplete="username" required;
                    }
                    div.field {
                        label for="client_secret" { "Client secret" }
                        input #client_secret type="password" name="client_secret"
                            autocomplete="current-password" required;
                    }
                    button type="submit" { "Sign in" }
                }
            },
        ),
    )
}

#[derive(Deserialize)]
struct SignIn {
    client_id: String,
    client_secret: String,
}

/// Exchanges the key's credentials for an access token (as `POST /oauth/token` does, under
/// its rate limits) and keeps the token in the session cookie.
async fn sign_in(
    state: web::Data<AppState>,
    req: HttpRequest,
    form: web::Form<SignIn>,
) -> Result<HttpResponse, Refusal> {
    // Signing in from another site's page would sign the browser into the other's key.
    if session::cross_site(&req) {
        return Err(Refusal::CrossSite);
    }
    let client = req
        .extensions()
        .get::<crate::client::ClientAddress>()
        .map(|c| c.0);
    let by_address = state.limits.token_address(client);
    if let Some(refusal) = by_address.and_then(|a| a.refusal("this client address")) {
        return Err(Refusal::Limited(refusal));
    }
    let by_client = state.limits.token_client(&form.client_id, by_address);
    if let Some(refusal) = by_client.and_then(|a| a.refusal("this client id")) {
        return Err(Refusal::Limited(refusal));
    }
    let issued = state
        .auth
        .exchange_client_credentials(form.client_id.trim(), &form.client_secret)
        .await;
    match issued {
        Ok(token) => {
            let secure = state.public_url.starts_with("https://");
            Ok(HttpResponse::SeeOther()
                .insert_header((header::LOCATION, format!("{ROOT}/")))
                .insert_header((header::CACHE_CONTROL, "no-store"))
                .cookie(session::cookie(
                    &token.access_token,
                    secure,
                    token.expires_in,
                ))
                .finish())
        }
        Err(DomainError::Unauthenticated) => Ok(sign_in_form(
            StatusCode::UNAUTHORIZED,
            None,
            Some("The client id or secret is wrong, or the key was revoked."),
            form.client_id.trim(),
        )),
        Err(err) => Err(failed(&err)),
    }
}

#[derive(Deserialize)]
struct Nothing {}

async fn sign_out(posted: Posted<Nothing>) -> HttpResponse {
    let _ = posted.session;
    HttpResponse::SeeOther()
        .insert_header((header::LOCATION, format!("{ROOT}/sign-in")))
        .cookie(session::removal())
        .finish()
}

/// A change's outcome: back to `to` with a notice, or the page again with the problems.
pub(super) fn outcome<T>(
    result: Result<T, DomainError>,
    to: impl FnOnce(&T) -> String,
) -> Result<String, Problems> {
    match result {
        Ok(value) => Ok(to(&value)),
        Err(err) => Err(Problems::of(err)),
    }
}
