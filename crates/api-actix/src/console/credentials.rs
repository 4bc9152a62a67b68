//! Credentials: the keys that may use the environment, revoking one, and creating one whose
//! secret is shown once, on the answer to the change that made it.

use actix_web::http::StatusCode;
use actix_web::{web, HttpResponse};
use domain::id::{EnvironmentId, KeyId};
use domain::tenancy::{IssuedKey, KeySummary, Role};
use domain::{PageRequest, Permission};
use maud::{html, Markup};
use serde::Deserialize;

use super::environments;
use super::page::{self, Frame, Problems};
use super::session::{Posted, Refusal, Session};
use super::shell::{respond, see_other, ROOT};
use crate::AppState;

pub(super) fn configure(cfg: &mut web::ServiceConfig) {
    cfg.route("/console/{env}/credentials", web::get().to(show))
        .route("/console/{env}/credentials", web::post().to(create))
        .route(
            "/console/{env}/credentials/{client_id}/revoke",
            web::post().to(revoke),
        );
}

#[derive(Deserialize)]
struct Shown {
    done: Option<String>,
    /// The key of the previous page's last key.
    after: Option<String>,
}

async fn show(
    state: web::Data<AppState>,
    session: Session,
    env: web::Path<EnvironmentId>,
    query: web::Query<Shown>,
) -> Result<HttpResponse, Refusal> {
    let notice = (query.done.as_deref() == Some("revoked")).then_some("The key was revoked.");
    let shown = Extras {
        notice,
        after: query.after.as_deref(),
        ..Extras::default()
    };
    render(&state, &session, &env, StatusCode::OK, shown).await
}

/// The page again, with the API's status and messages for a refused change.
async fn refused(
    state: &AppState,
    session: &Session,
    env: &EnvironmentId,
    err: domain::DomainError,
) -> Result<HttpResponse, Refusal> {
    let problems = Problems::of(err);
    let shown = Extras {
        problems: Some(&problems),
        ..Extras::default()
    };
    render(state, session, env, problems.status, shown).await
}

/// What the page shows besides the keys.
#[derive(Default)]
struct Extras<'a> {
    /// A change's notice.
    notice: Option<&'a str>,
    /// The key a create just made, with its secret.
    issued: Option<&'a IssuedKey>,
    /// A refused change's problems.
    problems: Option<&'a Problems>,
    /// The key of the previous page's last key, for a later page.
    after: Option<&'a str>,
}

async fn render(
    state: &AppState,
    session: &Session,
    env: &EnvironmentId,
    status: StatusCode,
    shown: Extras<'_>,
) -> Result<HttpResponse, Refusal> {
    let Extras {
        notice,
        issued,
        problems,
        after,
    } = shown;
    let page_request = PageRequest {
        limit: 100,
        after: page::query_value(after, "after")?,
    };
    let keys = match state
        .auth
        .list_credentials(&session.principal, env, page_request)
        .await
    {
        Ok(keys) => keys,
        // A key just made is shown even when the list cannot be (a key that may create keys
        // but not list them): its secret is never shown again.
        Err(_) if issued.is_some() => domain::Page {
            items: Vec::new(),
            next_after: None,
        },
        Err(err) => return page::unreadable(err, "Credentials"),
    };
    let environments = environments(state, session).await.unwrap_or_default();
    let may_write = session.may(env, Permission::CredentialsWrite);
    let frame = Frame {
        title: "Credentials",
        section: "credentials",
        env,
        environments: &environments,
        session,
    };
    let content = html! {
        (page::notice(notice))
        (page::alert(problems, &["role"]))
        @if let Some(issued) = issued { (issued_section(issued)) }
        (keys_table(session, env, &keys.items, may_write))
        (page::pages(&format!("{ROOT}/{env}/credentials"), &[], "after", after,
            keys.next_after.as_deref()))
        @if may_write { (create_section(session, env, problems)) }
    };
    Ok(respond(status, page::frame(&frame, content)))
}

/// The key a change just made, with its secret (shown on this answer only).
fn issued_section(issued: &IssuedKey) -> Markup {
    html! {
        section.card aria-labelledby="issued" {
            h2 #issued { "New key" }
            p { "Client id " code #new-client-id { (issued.key.id) } }
            p { "Client secret (shown this once; copy it now):" }
            p.secret #new-secret { (issued.client_secret) }
        }
    }
}

/// The keys of this page, each with its revoke button for a key that may write.
fn keys_table(
    session: &Session,
    env: &EnvironmentId,
    keys: &[KeySummary],
    may_write: bool,
) -> Markup {
    html! {
        div.scroll { table {
            thead { tr {
                th scope="col" { "Client id" } th scope="col" { "Name" } th scope="col" { "Access" }
                th scope="col" { "Created" } th scope="col" { "Last used" } th scope="col" {
                    "Revoked" }
                @if may_write { th scope="col" { span.muted { "Actions" } } }
            } }
            tbody { @for k in keys { tr {
                td { code { (k.key.id) } }
                td { (k.key.name.as_deref().unwrap_or("")) }
                td { (access(&k.key.access)) }
                td { (k.key.created.format("%Y-%m-%d %H:%M")) }
                td { @if let Some(t) = k.last_used { (t.format("%Y-%m-%d %H:%M")) } }
                td { @if let Some(t) = k.key.revoked { (t.format("%Y-%m-%d %H:%M")) } }
                @if may_write { td {
                    @if k.key.revoked.is_none() {
                        form method="post" action={ (ROOT) "/" (env) "/credentials/" (k.key.id)
                            "/revoke" } {
                            (page::csrf(session))
                            button.danger type="submit" aria-label={ "Revoke " (k.key.id) } {
                                "Revoke" }
                        }
                    }
                } }
            } } }
        } }
    }
}

/// The form that makes a key of a role, with the role's problems next to its choice.
fn create_section(session: &Session, env: &EnvironmentId, problems: Option<&Problems>) -> Markup {
    let role_errors = problems.map(|p| p.about("role", false)).unwrap_or_default();
    html! {
        section.card aria-labelledby="create" {
            h2 #create { "New key" }
            form.inline method="post" action={ (ROOT) "/" (env) "/credentials" } {
                (page::csrf(session))
                div.field {
                    label for="role" { "Role" }
                    select #role name="role"
                        aria-invalid=[(!role_errors.is_empty()).then_some("true")]
                        aria-describedby=[(!role_errors.is_empty()).then_some("role-errors")] {
                        option value="events" { "events: Action Flows, end users and cards" }
                        option value="workbench" {
                            "workbench: webhooks, push platforms, SDK keys and end users" }
                    }
                    (page::field_errors("role-errors", &role_errors))
                }
                button type="submit" { "Create key" }
            }
        }
    }
}

/// A key's roles or scopes, as the API names them.
fn access(access: &domain::tenancy::KeyAccess) -> String {
    let roles = access.role_names();
    if roles.is_empty() {
        access.scope_names().join(", ")
    } else {
        roles.join(", ")
    }
}

#[derive(Deserialize)]
struct CreateForm {
    role: String,
}

async fn create(
    state: web::Data<AppState>,
    env: web::Path<EnvironmentId>,
    posted: Posted<CreateForm>,
) -> Result<HttpResponse, Refusal> {
    let Posted { session, form } = posted;
    let result = match Role::parse(&form.role) {
        Some(role) => {
            state
                .auth
                .create_credential(&session.principal, &env, role)
                .await
        }
        None => Err(domain::DomainError::invalid(
            "role",
            "must be `events` or `workbench`",
        )),
    };
    match result {
        // The secret is shown on this answer only (201, never cached). Reloading it sends the
        // form again, which the browser asks about first, and would make another key.
        Ok(issued) => {
            let shown = Extras {
                issued: Some(&issued),
                ..Extras::default()
            };
            render(&state, &session, &env, StatusCode::CREATED, shown).await
        }
        Err(err) => refused(&state, &session, &env, err).await,
    }
}

#[derive(Deserialize)]
struct RevokeForm {}

async fn revoke(
    state: web::Data<AppState>,
    path: web::Path<(EnvironmentId, KeyId)>,
    posted: Posted<RevokeForm>,
) -> Result<HttpResponse, Refusal> {
    let (env, client_id) = path.into_inner();
    let session = posted.session;
    match state
        .auth
        .revoke_credential(&session.principal, &env, &client_id)
        .await
    {
        // Revoking the session's own key signs it out: the next page finds its token refused.
        Ok(()) => Ok(see_other(&format!("{ROOT}/{env}/credentials?done=revoked"))),
        Err(err) => refused(&state, &session, &env, err).await,
    }
}
