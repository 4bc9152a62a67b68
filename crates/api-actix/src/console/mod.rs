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
//! - [`folders`], [`flows`], [`runs`], [`audience`], [`webhooks`], [`push`], [`credentials`]:
//!   the pages.

mod audience;
mod credentials;
mod flows;
mod folders;
mod graph;
mod insights;
mod instances;
mod page;
mod push;
mod runs;
mod sdk_example;
mod session;
mod shell;
mod webhooks;

use actix_web::http::{header, StatusCode};
use actix_web::{web, HttpRequest, HttpResponse};
use domain::tenancy::Environment;
use domain::DomainError;
use maud::{html, Markup};
use serde::Deserialize;

use page::{Frame, Problems, SECTIONS};
use session::{Posted, Refusal, Session};
use shell::ROOT;
use shell::{respond, see_other};

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
    runs::configure(cfg);
    instances::configure(cfg);
    insights::configure(cfg);
    push::configure(cfg);
    audience::configure(cfg);
    credentials::configure(cfg);
    webhooks::configure(cfg);
    sdk_example::configure(cfg);
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

/// The first environment the key may use (oldest first), at the first section it may read.
async fn root(state: web::Data<AppState>, session: Session) -> Result<HttpResponse, Refusal> {
    let environments = environments(&state, &session).await?;
    let first = environments
        .iter()
        .find_map(|e| first_section(&session, &e.id).map(|section| (e, section)));
    match first {
        Some((e, section)) => Ok(see_other(&format!("{ROOT}/{}/{section}", e.id))),
        None => Ok(nothing_to_show(&session)),
    }
}

/// The first section the key may read in `env`, if any.
fn first_section(session: &Session, env: &str) -> Option<&'static str> {
    SECTIONS
        .iter()
        .find(|(_, _, permission)| session.may(env, *permission))
        .map(|(path, _, _)| *path)
}

/// For a key that may read none of the console's sections: a page that says so, with a way
/// to sign out.
fn nothing_to_show(session: &Session) -> HttpResponse {
    respond(
        StatusCode::FORBIDDEN,
        shell::bare(
            "Nothing to show",
            html! {
                h1 { "Nothing to show" }
                p role="alert" {
                    "This key may read none of the console's sections (flows, folders, audience, \
                        webhooks, push platforms, credentials) in any environment it may use." }
                form method="post" action={ (ROOT) "/sign-out" } {
                    (page::csrf(session))
                    button type="submit" { "Sign out" }
                }
            },
        ),
    )
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

/// A page of `env` in the console's frame (`section` marked in the navigation), with the
/// switcher of the environments the key may use: what every page of an environment shares.
pub(super) async fn framed(
    state: &AppState,
    session: &Session,
    env: &str,
    section: &str,
    title: &str,
    content: Markup,
) -> Result<Markup, Refusal> {
    let environments = environments(state, session).await?;
    let frame = Frame {
        title,
        section,
        env,
        environments: &environments,
        session,
    };
    Ok(page::frame(&frame, content))
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

/// The environment switcher: the same section of another environment, or the first there
/// the key may read. Only an environment the key may use is gone to.
async fn switch(
    state: web::Data<AppState>,
    session: Session,
    query: web::Query<SwitchQuery>,
) -> Result<HttpResponse, Refusal> {
    let environments = environments(&state, &session).await?;
    let Some(env) = environments.iter().find(|e| e.id.as_str() == query.env) else {
        return Err(Refusal::NotFound);
    };
    let asked = SECTIONS
        .iter()
        .map(|(path, _, _)| *path)
        .find(|path| query.section.as_deref() == Some(*path));
    let section = asked
        .filter(|path| {
            SECTIONS
                .iter()
                .any(|(p, _, permission)| p == path && session.may(&env.id, *permission))
        })
        .or_else(|| first_section(&session, &env.id));
    match section {
        Some(section) => Ok(see_other(&format!("{ROOT}/{}/{section}", env.id))),
        None => Ok(nothing_to_show(&session)),
    }
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
        shell::bare(
            "Sign in",
            html! {
                h1 { "Sign in" }
                p { "Sign in with an API key's client id and secret. The console can do what the \
                    key may do." }
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
/// its rate limits) and keeps the token in the session cookie. A sign-in another site's page
/// sent is refused before its form is read.
async fn sign_in(
    state: web::Data<AppState>,
    req: HttpRequest,
    body: web::Bytes,
) -> Result<HttpResponse, Refusal> {
    // Signing in from another site's page would sign the browser into the other's key.
    if session::cross_site(&req, &state.public_url) {
        return Err(Refusal::CrossSite);
    }
    let by_address = state
        .limits
        .admit_token_address(&req)
        .map_err(Refusal::Limited)?;
    let form: SignIn = serde_urlencoded::from_bytes(&body)
        .map_err(|_| Refusal::BadForm("the form needs a client id and a client secret".into()))?;
    // One spelling of the client id for its rate limit and its exchange; no id is longer.
    let client_id: String = form.client_id.trim().chars().take(200).collect();
    state
        .limits
        .admit_token_client(&req, &client_id, by_address)
        .map_err(Refusal::Limited)?;
    let issued = state
        .auth
        .exchange_client_credentials(&client_id, &form.client_secret)
        .await;
    let secure = state.public_url.starts_with("https://");
    match issued {
        Ok(token) => Ok(HttpResponse::SeeOther()
            .insert_header((header::LOCATION, format!("{ROOT}/")))
            .insert_header((header::CACHE_CONTROL, "no-store"))
            .cookie(session::cookie(
                &token.access_token,
                secure,
                token.expires_in,
            ))
            .finish()),
        Err(DomainError::Unauthenticated) => Ok(sign_in_form(
            StatusCode::UNAUTHORIZED,
            None,
            Some("The client id or secret is wrong, or the key was revoked."),
            &client_id,
        )),
        Err(err) => Err(failed(&err)),
    }
}

#[derive(Deserialize)]
struct Nothing {}

async fn sign_out(state: web::Data<AppState>, posted: Posted<Nothing>) -> HttpResponse {
    let _ = posted.session;
    HttpResponse::SeeOther()
        .insert_header((header::LOCATION, format!("{ROOT}/sign-in")))
        .cookie(session::removal(state.public_url.starts_with("https://")))
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
