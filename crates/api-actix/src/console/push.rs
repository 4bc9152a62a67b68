//! Push notification platforms: the list with each credential's derived facts, create (with
//! the offline validation's messages at their fields), enable, disable and delete.

use actix_web::http::StatusCode;
use actix_web::{web, HttpResponse};
use domain::id::EnvironmentId;
use domain::push::PushPlatform;
use domain::{DomainError, Permission};
use maud::{html, Markup};
use serde::Deserialize;
use serde_json::{json, Map, Value};

use super::framed;
use super::page::{self, Problems, TextArea};
use super::session::{Posted, Refusal, Session};
use super::shell::{respond, see_other, ROOT};
use crate::AppState;

pub(super) fn configure(cfg: &mut web::ServiceConfig) {
    cfg.route("/console/{env}/push", web::get().to(list))
        .route("/console/{env}/push", web::post().to(create))
        .route("/console/{env}/push/enabled", web::post().to(set_enabled))
        .route("/console/{env}/push/delete", web::post().to(delete));
}

/// What each platform value (`domain::push::PLATFORMS`) is, for the choice.
fn platform_name(value: &str) -> &str {
    match value {
        "GCM" => "Firebase Cloud Messaging (GCM)",
        "FCM" => "Firebase Cloud Messaging (FCM)",
        "APNS" => "Apple Push Notification service",
        "APNS_SANDBOX" => "Apple Push Notification service, sandbox",
        other => other,
    }
}

#[derive(Deserialize, Default)]
struct CreateForm {
    #[serde(default)]
    app_id: String,
    #[serde(default)]
    platform: String,
    #[serde(default)]
    credential: String,
    #[serde(default)]
    principal: String,
    #[serde(default)]
    properties: String,
}

impl CreateForm {
    /// The body the API would be sent; the service validates it. Properties that are not a
    /// JSON object are refused here.
    fn body(&self) -> Result<Value, DomainError> {
        let mut body = Map::new();
        body.insert("appId".into(), json!(self.app_id.trim()));
        body.insert("platform".into(), json!(self.platform));
        body.insert("platformCredential".into(), json!(self.credential));
        body.insert("platformPrincipal".into(), json!(self.principal));
        let properties = match self.properties.trim() {
            "" => json!({}),
            text => serde_json::from_str::<Value>(text)
                .ok()
                .filter(Value::is_object)
                .ok_or_else(|| {
                    DomainError::invalid("platformProperties", "must be a JSON object")
                })?,
        };
        body.insert("platformProperties".into(), properties);
        Ok(Value::Object(body))
    }
}

async fn list(
    state: web::Data<AppState>,
    session: Session,
    env: web::Path<EnvironmentId>,
    query: web::Query<page::Done>,
) -> Result<HttpResponse, Refusal> {
    let notice = match query.done.as_deref() {
        Some("created") => Some("The platform was created."),
        Some("enabled") => Some("The platform was enabled."),
        Some("disabled") => Some("The platform was disabled."),
        Some("deleted") => Some("The platform was deleted."),
        _ => None,
    };
    let shown = Shown {
        notice,
        ..Shown::default()
    };
    render(&state, &session, &env, StatusCode::OK, shown).await
}

/// What the page shows besides the platforms: a change's notice, or a refused change.
#[derive(Default)]
struct Shown<'a> {
    notice: Option<&'a str>,
    /// A refused create: the form as sent, and its problems.
    sent: Option<&'a CreateForm>,
    problems: Option<&'a Problems>,
    /// A refused enable, disable or delete.
    action: Option<&'a Problems>,
}

async fn render(
    state: &AppState,
    session: &Session,
    env: &EnvironmentId,
    status: StatusCode,
    shown: Shown<'_>,
) -> Result<HttpResponse, Refusal> {
    let Shown {
        notice,
        sent,
        problems,
        action,
    } = shown;
    let platforms = match state.push.list(&session.principal, env).await {
        Ok(p) => p,
        Err(err) => return page::unreadable(err, "Push platforms"),
    };
    let may_write = session.may(env, Permission::NotificationPlatformsWrite);
    let content = html! {
        (page::notice(notice))
        (page::alert(action, &[]))
        (platforms_table(session, env, &platforms, may_write))
        @if may_write { (create_section(session, env, sent, problems)) }
    };
    let body = framed(state, session, env, "push", "Push platforms", content).await?;
    Ok(respond(status, body))
}

/// The platforms with their credentials' facts, each with its buttons for a key that may
/// write.
fn platforms_table(
    session: &Session,
    env: &EnvironmentId,
    platforms: &[PushPlatform],
    may_write: bool,
) -> Markup {
    html! {
        div.scroll { table {
            caption.muted { (platforms.len()) " platforms" }
            thead { tr {
                th scope="col" { "App" } th scope="col" { "Platform" } th scope="col" { "State" }
                th scope="col" { "Credential" }
                @if may_write { th scope="col" { span.muted { "Actions" } } }
            } }
            tbody { @for p in platforms { tr.platform-row {
                td { (p.app_id) }
                td { (p.platform) }
                td { span.status { @if p.enabled { "enabled" } @else { "disabled" } } }
                td { dl { @for (fact, value) in &p.facts { dt { (fact) } dd { (value) } } } }
                @if may_write { td { (platform_actions(session, env, p)) } }
            } } }
        } }
    }
}

/// A platform's enable or disable button and its delete button.
fn platform_actions(session: &Session, env: &EnvironmentId, p: &PushPlatform) -> Markup {
    html! {
        div.actions {
            form method="post" action={ (ROOT) "/" (env) "/push/enabled" } {
                (page::csrf(session))
                input type="hidden" name="id" value=(p.id);
                input type="hidden" name="enabled"
                    value=(if p.enabled { "false" } else { "true" });
                button.secondary type="submit" aria-label={
                    (if p.enabled { "Disable " } else { "Enable " }) (p.app_id) " "
                        (p.platform) } {
                    @if p.enabled { "Disable" } @else { "Enable" }
                }
            }
            form method="post" action={ (ROOT) "/" (env) "/push/delete" } {
                (page::csrf(session))
                input type="hidden" name="app_id" value=(p.app_id);
                input type="hidden" name="platform" value=(p.platform);
                button.danger type="submit" aria-label={ "Delete " (p.app_id) " "
                    (p.platform) } { "Delete" }
            }
        }
    }
}

/// The form that creates a platform: what was sent again after a refusal, with the problems
/// at their fields (the credential is a secret, so it is never shown back).
fn create_section(
    session: &Session,
    env: &EnvironmentId,
    sent: Option<&CreateForm>,
    problems: Option<&Problems>,
) -> Markup {
    let empty = CreateForm::default();
    let form = sent.unwrap_or(&empty);
    let errors_of = |field: &str| problems.map(|p| p.about(field, true)).unwrap_or_default();
    let platform_errors = errors_of("platform");
    html! {
        section.card aria-labelledby="create" {
            h2 #create { "New platform" }
            p.muted { "The credential is checked when it is saved: its type, its key, its \
                expiry." }
            (page::alert(problems, &["appId", "platform", "platformCredential",
                "platformPrincipal", "platformProperties"]))
            form method="post" action={ (ROOT) "/" (env) "/push" } {
                (page::csrf(session))
                (page::text_field("app-id", "App id (bundle id or package name)", "app_id",
                    &form.app_id, "appId", problems))
                div.field {
                    label for="platform" { "Platform" }
                    select #platform name="platform"
                        aria-invalid=[(!platform_errors.is_empty()).then_some("true")]
                        aria-describedby=[(!platform_errors.is_empty())
                            .then_some("platform-errors")] {
                        @for value in domain::push::PLATFORMS {
                            option value=(value) selected[form.platform == value] {
                                (platform_name(value)) }
                        }
                    }
                    (page::field_errors("platform-errors", &platform_errors))
                }
                (page::text_area(&TextArea {
                    id: "credential",
                    name: "credential",
                    label: "Credential (a service account's JSON, a certificate's private key \
                        or a .p8 key)",
                    rows: "6",
                    value: "",
                    errors: &errors_of("platformCredential"),
                }))
                (page::text_area(&TextArea {
                    id: "principal",
                    name: "principal",
                    label: "Principal (a certificate, a key id; empty for FCM)",
                    rows: "3",
                    value: &form.principal,
                    errors: &errors_of("platformPrincipal"),
                }))
                (page::text_area(&TextArea {
                    id: "properties",
                    name: "properties",
                    label: "Properties (a JSON object, e.g. teamId and bundleId for a .p8 key)",
                    rows: "3",
                    value: &form.properties,
                    errors: &errors_of("platformProperties"),
                }))
                button type="submit" { "Create platform" }
            }
        }
    }
}

async fn create(
    state: web::Data<AppState>,
    env: web::Path<EnvironmentId>,
    posted: Posted<CreateForm>,
) -> Result<HttpResponse, Refusal> {
    let Posted { session, form } = posted;
    let result = match form.body() {
        Ok(body) => state.push.create(&session.principal, &env, &body).await,
        Err(err) => Err(err),
    };
    match result {
        Ok(_) => Ok(see_other(&format!("{ROOT}/{env}/push?done=created"))),
        // The credential is not shown back: it is a secret, and it was refused.
        Err(err) => {
            let problems = Problems::of(err);
            let shown = Shown {
                sent: Some(&form),
                problems: Some(&problems),
                ..Shown::default()
            };
            render(&state, &session, &env, problems.status, shown).await
        }
    }
}

#[derive(Deserialize)]
struct EnabledForm {
    id: String,
    enabled: String,
}

async fn set_enabled(
    state: web::Data<AppState>,
    env: web::Path<EnvironmentId>,
    posted: Posted<EnabledForm>,
) -> Result<HttpResponse, Refusal> {
    let Posted { session, form } = posted;
    page::query_value(Some(&form.id), "id")?;
    let enabled = form.enabled == "true";
    let body = json!({"id": form.id, "enabled": enabled});
    match state
        .push
        .set_enabled(&session.principal, &env, &body)
        .await
    {
        Ok(_) => Ok(see_other(&format!(
            "{ROOT}/{env}/push?done={}",
            if enabled { "enabled" } else { "disabled" }
        ))),
        Err(err) => action_refused(&state, &session, &env, err).await,
    }
}

#[derive(Deserialize)]
struct DeleteForm {
    app_id: String,
    platform: String,
}

async fn delete(
    state: web::Data<AppState>,
    env: web::Path<EnvironmentId>,
    posted: Posted<DeleteForm>,
) -> Result<HttpResponse, Refusal> {
    let Posted { session, form } = posted;
    page::query_value(Some(&form.app_id), "app_id")?;
    page::query_value(Some(&form.platform), "platform")?;
    let body = json!({"appId": form.app_id, "platform": form.platform});
    match state.push.delete(&session.principal, &env, &body).await {
        Ok(()) => Ok(see_other(&format!("{ROOT}/{env}/push?done=deleted"))),
        Err(err) => action_refused(&state, &session, &env, err).await,
    }
}

/// The page again after a refused enable, disable or delete, with the API's status and
/// messages.
async fn action_refused(
    state: &AppState,
    session: &Session,
    env: &EnvironmentId,
    err: DomainError,
) -> Result<HttpResponse, Refusal> {
    let problems = Problems::of(err);
    let shown = Shown {
        action: Some(&problems),
        ..Shown::default()
    };
    render(state, session, env, problems.status, shown).await
}
