//! Webhooks: subscriptions (create, edit, disable, enable, rotate the secret, send a test), and
//! a subscription's attempt log with resend and recover-since.

use actix_web::http::StatusCode;
use actix_web::{web, HttpResponse};
use domain::id::{EnvironmentId, EventId, WebhookId};
use domain::webhook::{Attempt, Subscription, EVENT_TYPES};
use domain::{DomainError, PageRequest, Permission};
use maud::{html, Markup};
use serde::Deserialize;
use serde_json::{json, Map, Value};

use super::framed;
use super::page::{self, Problems};
use super::session::{Posted, Refusal, Session};
use super::shell::{respond, see_other, ROOT};
use crate::AppState;

pub(super) fn configure(cfg: &mut web::ServiceConfig) {
    cfg.route("/console/{env}/webhooks", web::get().to(list))
        .route("/console/{env}/webhooks", web::post().to(create))
        .route("/console/{env}/webhooks/{id}", web::get().to(show))
        .route("/console/{env}/webhooks/{id}/edit", web::post().to(edit))
        .route(
            "/console/{env}/webhooks/{id}/do/{action}",
            web::post().to(act),
        )
        .route(
            "/console/{env}/webhooks/{id}/resend",
            web::post().to(resend),
        )
        .route(
            "/console/{env}/webhooks/{id}/recover",
            web::post().to(recover),
        );
}

/// The subscription form's fields, as sent or as stored.
#[derive(Default)]
struct SubscriptionForm {
    url: String,
    /// Event types, one checkbox each (`types` repeated, which a struct cannot be read from:
    /// the form is read as its pairs).
    types: Vec<String>,
    description: String,
}

impl SubscriptionForm {
    fn sent(pairs: Vec<(String, String)>) -> Self {
        let mut form = SubscriptionForm::default();
        for (name, value) in pairs {
            match name.as_str() {
                "url" => form.url = value,
                "types" => form.types.push(value),
                "description" => form.description = value,
                _ => {}
            }
        }
        form
    }

    fn of(s: &Subscription) -> Self {
        SubscriptionForm {
            url: s.url.clone(),
            types: s.types.clone(),
            description: s.description.clone().unwrap_or_default(),
        }
    }

    /// The request the API would be sent; the service validates it.
    fn body(&self) -> Value {
        let mut body = Map::new();
        body.insert("url".into(), json!(self.url.trim()));
        body.insert("types".into(), json!(self.types));
        body.insert(
            "description".into(),
            if self.description.is_empty() {
                Value::Null
            } else {
                json!(self.description)
            },
        );
        Value::Object(body)
    }
}

/// The fields of a subscription form, with the problems of each next to it.
fn fields(prefix: &str, form: &SubscriptionForm, problems: Option<&Problems>) -> maud::Markup {
    let type_errors = problems.map(|p| p.about("types", true)).unwrap_or_default();
    let description_errors = problems
        .map(|p| p.about("description", false))
        .unwrap_or_default();
    html! {
        (page::text_field(&format!("{prefix}-url"), "URL", "url", &form.url, "url", problems))
        fieldset.field {
            legend { "Events" }
            @for t in EVENT_TYPES {
                label { input type="checkbox" name="types" value=(t)
                    checked[form.types.iter().any(|s| s == t)]; " " (t) }
            }
            (page::field_errors(&format!("{prefix}-types-errors"), &type_errors))
        }
        div.field {
            label for={ (prefix) "-description" } { "Description" }
            input id={ (prefix) "-description" } type="text" name="description"
                value=(form.description);
            (page::field_errors(&format!("{prefix}-description-errors"), &description_errors))
        }
    }
}

async fn list(
    state: web::Data<AppState>,
    session: Session,
    env: web::Path<EnvironmentId>,
) -> Result<HttpResponse, Refusal> {
    list_page(&state, &session, &env, StatusCode::OK, None).await
}

async fn list_page(
    state: &AppState,
    session: &Session,
    env: &EnvironmentId,
    status: StatusCode,
    failed: Option<(&SubscriptionForm, Problems)>,
) -> Result<HttpResponse, Refusal> {
    let subscriptions = match state.webhooks.list(&session.principal, env).await {
        Ok(s) => s,
        Err(err) => return page::unreadable(err, "Webhooks"),
    };
    let empty = SubscriptionForm::default();
    let (form, problems) = match &failed {
        Some((form, p)) => (*form, Some(p)),
        None => (&empty, None),
    };
    let content = html! {
        div.scroll { table {
            caption.muted { (subscriptions.len()) " subscriptions" }
            thead { tr { th scope="col" { "URL" } th scope="col" { "Events" } th scope="col" {
                "State" } th scope="col" { "Description" } } }
            tbody { @for s in &subscriptions { tr {
                td { a href={ (ROOT) "/" (env) "/webhooks/" (s.id) } { (s.url) } }
                td { (s.types.join(", ")) }
                td { span.status { @if s.enabled { "enabled" } @else { "disabled" } } }
                td { (s.description.as_deref().unwrap_or("")) }
            } } }
        } }
        @if session.may(env, Permission::WebhooksWrite) {
            section.card aria-labelledby="subscribe" {
                h2 #subscribe { "New subscription" }
                (page::alert(problems, &["url", "types", "description"]))
                form method="post" action={ (ROOT) "/" (env) "/webhooks" } {
                    (page::csrf(session))
                    (fields("new", form, problems))
                    button type="submit" { "Subscribe" }
                }
            }
        }
    };
    let body = framed(state, session, env, "webhooks", "Webhooks", content).await?;
    Ok(respond(status, body))
}

async fn create(
    state: web::Data<AppState>,
    env: web::Path<EnvironmentId>,
    posted: Posted<Vec<(String, String)>>,
) -> Result<HttpResponse, Refusal> {
    let Posted { session, form } = posted;
    let form = SubscriptionForm::sent(form);
    match state
        .webhooks
        .subscribe(&session.principal, &env, &form.body())
        .await
    {
        Ok(s) => Ok(see_other(&format!(
            "{ROOT}/{env}/webhooks/{}?done=created",
            s.id
        ))),
        Err(err) => {
            let problems = Problems::of(err);
            let status = problems.status;
            list_page(&state, &session, &env, status, Some((&form, problems))).await
        }
    }
}

/// What the subscription's page shows again after a refused change.
#[derive(Default)]
struct Shown<'a> {
    edit: Option<(&'a SubscriptionForm, Problems)>,
    action: Option<Problems>,
    /// The answer of "send test": status code or error, and the duration.
    tested: Option<Attempt>,
    notice: Option<String>,
    /// The recover form's time as typed, shown again after a refusal.
    since: Option<&'a str>,
    /// The key of the previous page's last attempt, for a later page of the log.
    after: Option<&'a str>,
}

#[derive(Deserialize)]
struct ShowQuery {
    done: Option<String>,
    /// The key of the previous page's last attempt.
    after: Option<String>,
}

async fn show(
    state: web::Data<AppState>,
    session: Session,
    path: web::Path<(EnvironmentId, WebhookId)>,
    query: web::Query<ShowQuery>,
) -> Result<HttpResponse, Refusal> {
    let (env, id) = path.into_inner();
    let notice = match query.done.as_deref() {
        Some("created") => Some("The subscription was created."),
        Some("saved") => Some("The subscription was saved."),
        Some("disabled") => Some("The subscription was disabled."),
        Some("enabled") => Some("The subscription was enabled."),
        Some("rotated") => {
            Some("The signing secret was rotated; the previous one still signs for 24 hours.")
        }
        Some("resent") => Some("The event was queued again."),
        _ => None,
    };
    let shown = Shown {
        notice: notice.map(str::to_owned),
        after: query.after.as_deref().filter(|a| !a.is_empty()),
        ..Shown::default()
    };
    subscription_page(&state, &session, &env, &id, StatusCode::OK, shown).await
}

async fn subscription_page(
    state: &AppState,
    session: &Session,
    env: &EnvironmentId,
    id: &WebhookId,
    status: StatusCode,
    shown: Shown<'_>,
) -> Result<HttpResponse, Refusal> {
    let who = &session.principal;
    let subscription = match state.webhooks.get(who, env, id).await {
        Ok(s) => s,
        Err(err) => return page::unreadable(err, "Webhook"),
    };
    let page_request = PageRequest {
        limit: 50,
        after: page::query_value(shown.after, "after")?,
    };
    let (attempts, next) = match state.webhooks.attempts(who, env, id, page_request).await {
        Ok(a) => (a.items, a.next_after),
        Err(err) => return page::unreadable(err, "Webhook"),
    };
    let may_write = session.may(env, Permission::WebhooksWrite);
    let stored = SubscriptionForm::of(&subscription);
    let (form, edit_problems) = match &shown.edit {
        Some((form, p)) => (*form, Some(p)),
        None => (&stored, None),
    };
    let base = format!("{ROOT}/{env}/webhooks/{id}");
    let content = html! {
        (page::notice(shown.notice.as_deref()))
        (page::alert(shown.action.as_ref(), &["since"]))
        @if let Some(t) = &shown.tested { (test_result(t)) }
        (about_section(session, &subscription, &base, may_write))
        @if may_write {
            section.card aria-labelledby="edit" {
                h2 #edit { "Edit" }
                (page::alert(edit_problems, &["url", "types", "description"]))
                form method="post" action={ (base) "/edit" } {
                    (page::csrf(session))
                    (fields("edit", form, edit_problems))
                    button type="submit" { "Save" }
                }
            }
        }
        section.card aria-labelledby="attempts" {
            h2 #attempts { "Attempts" }
            @if may_write {
                form.inline method="post" action={ (base) "/recover" } {
                    (page::csrf(session))
                    (page::text_field("since",
                        "Queue again what failed since (RFC 3339, e.g. 2026-01-31T00:00:00Z)",
                        "since", shown.since.unwrap_or(""), "since", shown.action.as_ref()))
                    button.secondary type="submit" { "Recover" }
                }
            }
            @if attempts.is_empty() {
                p.muted { "No attempt yet." }
            } @else {
                (attempts_table(session, &base, &attempts, may_write))
            }
            (page::pages(&base, &[], "after", shown.after, next.as_deref()))
        }
    };
    let body = framed(state, session, env, "webhooks", &subscription.url, content).await?;
    Ok(respond(status, body))
}

/// What "send test" got back: the receiver's status or the error, and how long it took.
fn test_result(t: &Attempt) -> Markup {
    html! {
        p.notice role="status" #test-result {
            "Test sent: "
            @match (t.status_code, &t.error) {
                (Some(code), _) => { "the receiver answered " (code) }
                (None, Some(e)) => { "no answer: " (e) }
                (None, None) => { "no answer" }
            }
            " in " (t.duration_ms) " ms."
        }
    }
}

/// The subscription's state, events and secret, with its actions for a key that may write.
fn about_section(
    session: &Session,
    subscription: &Subscription,
    base: &str,
    may_write: bool,
) -> Markup {
    html! {
        section.card aria-labelledby="about" {
            h2 #about { "Subscription" }
            p {
                "State " span.status { @if subscription.enabled { "enabled" } @else { "disabled" } }
                @if let Some(reason) = &subscription.disabled_reason { " (" (reason) ")" }
                " · events " (subscription.types.join(", "))
            }
            p { "Signing secret " code #signing-secret { (subscription.secret) } }
            @if may_write {
                div.actions {
                    @if subscription.enabled {
                        form method="post" action={ (base) "/do/disable" } { (page::csrf(session))
                            button.secondary type="submit" { "Disable" } }
                    } @else {
                        form method="post" action={ (base) "/do/enable" } { (page::csrf(session))
                            button.secondary type="submit" { "Enable" } }
                    }
                    form method="post" action={ (base) "/do/rotate" } { (page::csrf(session))
                        button.secondary type="submit" { "Rotate secret" } }
                    form method="post" action={ (base) "/do/test" } { (page::csrf(session)) button
                        type="submit" { "Send test" } }
                }
            }
        }
    }
}

/// The delivery attempts of this page of the log, each with its resend button for a key that
/// may write.
fn attempts_table(session: &Session, base: &str, attempts: &[Attempt], may_write: bool) -> Markup {
    html! {
        div.scroll { table {
            thead { tr {
                th scope="col" { "When" } th scope="col" { "Event" } th scope="col" { "Try"
                    }
                th scope="col" { "Status" } th scope="col" { "Duration" } th scope="col" {
                    "Response" }
                @if may_write { th scope="col" { span.muted { "Actions" } } }
            } }
            tbody { @for a in attempts { tr.attempt-row {
                td { (a.created.format("%Y-%m-%d %H:%M:%S")) }
                td { (a.event_name) br; code { (a.event_id) } }
                td { (a.attempt) " (" (a.trigger) ")" }
                td { @match (a.status_code, &a.error) {
                    (Some(code), _) => { (code) }
                    (None, Some(e)) => { (e) }
                    (None, None) => { "–" }
                } }
                td { (a.duration_ms) " ms" }
                td { @if !a.response_body.is_empty() { details { summary { "Body" } pre {
                    (a.response_body) } } } }
                @if may_write { td {
                    form method="post" action={ (base) "/resend" } {
                        (page::csrf(session))
                        input type="hidden" name="event_id" value=(a.event_id);
                        button.secondary type="submit" aria-label={ "Resend " (a.event_id)
                            } { "Resend" }
                    }
                } }
            } } }
        } }
    }
}

async fn edit(
    state: web::Data<AppState>,
    path: web::Path<(EnvironmentId, WebhookId)>,
    posted: Posted<Vec<(String, String)>>,
) -> Result<HttpResponse, Refusal> {
    let (env, id) = path.into_inner();
    let Posted { session, form } = posted;
    let form = SubscriptionForm::sent(form);
    match state
        .webhooks
        .update(&session.principal, &env, &id, &form.body())
        .await
    {
        Ok(_) => Ok(see_other(&format!("{ROOT}/{env}/webhooks/{id}?done=saved"))),
        Err(err) => {
            let problems = Problems::of(err);
            let status = problems.status;
            let shown = Shown {
                edit: Some((&form, problems)),
                ..Shown::default()
            };
            subscription_page(&state, &session, &env, &id, status, shown).await
        }
    }
}

#[derive(Deserialize)]
struct Empty {}

/// Disable, enable, rotate the secret, or send a test (whose answer the page shows).
async fn act(
    state: web::Data<AppState>,
    path: web::Path<(EnvironmentId, WebhookId, String)>,
    posted: Posted<Empty>,
) -> Result<HttpResponse, Refusal> {
    let (env, id, action) = path.into_inner();
    let session = posted.session;
    let who = &session.principal;
    let hooks = &state.webhooks;
    let result = match action.as_str() {
        "disable" => hooks.disable(who, &env, &id).await.map(|_| "disabled"),
        "enable" => hooks.enable(who, &env, &id).await.map(|_| "enabled"),
        "rotate" => hooks.rotate_secret(who, &env, &id).await.map(|_| "rotated"),
        "test" => match hooks.test(who, &env, &id).await {
            Ok(attempt) => {
                let shown = Shown {
                    tested: Some(attempt),
                    ..Shown::default()
                };
                return subscription_page(&state, &session, &env, &id, StatusCode::OK, shown).await;
            }
            Err(err) => Err(err),
        },
        _ => return Err(Refusal::NotFound),
    };
    action_outcome(&state, &session, &env, &id, result).await
}

async fn action_outcome(
    state: &AppState,
    session: &Session,
    env: &EnvironmentId,
    id: &WebhookId,
    result: Result<&'static str, DomainError>,
) -> Result<HttpResponse, Refusal> {
    match result {
        Ok(done) => Ok(see_other(&format!(
            "{ROOT}/{env}/webhooks/{id}?done={done}"
        ))),
        Err(err) => {
            let problems = Problems::of(err);
            let status = problems.status;
            let shown = Shown {
                action: Some(problems),
                ..Shown::default()
            };
            subscription_page(state, session, env, id, status, shown).await
        }
    }
}

#[derive(Deserialize)]
struct ResendForm {
    event_id: String,
}

async fn resend(
    state: web::Data<AppState>,
    path: web::Path<(EnvironmentId, WebhookId)>,
    posted: Posted<ResendForm>,
) -> Result<HttpResponse, Refusal> {
    let (env, id) = path.into_inner();
    let Posted { session, form } = posted;
    let Some(event) = page::query_value(Some(&form.event_id), "event_id")? else {
        return Err(Refusal::BadForm("`event_id` is required".into()));
    };
    let event = EventId::from(event);
    let result = state
        .webhooks
        .resend(&session.principal, &env, &id, &event)
        .await
        .map(|()| "resent");
    action_outcome(&state, &session, &env, &id, result).await
}

#[derive(Deserialize)]
struct RecoverForm {
    since: String,
}

async fn recover(
    state: web::Data<AppState>,
    path: web::Path<(EnvironmentId, WebhookId)>,
    posted: Posted<RecoverForm>,
) -> Result<HttpResponse, Refusal> {
    let (env, id) = path.into_inner();
    let Posted { session, form } = posted;
    let result = match domain::time::parse_timestamp(form.since.trim()) {
        Ok(since) => {
            state
                .webhooks
                .recover(&session.principal, &env, &id, since)
                .await
        }
        Err(message) => Err(DomainError::invalid("since", message)),
    };
    match result {
        Ok(queued) => {
            let shown = Shown {
                notice: Some(format!("{queued} deliveries queued again.")),
                ..Shown::default()
            };
            subscription_page(&state, &session, &env, &id, StatusCode::ACCEPTED, shown).await
        }
        Err(err) => {
            let problems = Problems::of(err);
            let status = problems.status;
            let shown = Shown {
                action: Some(problems),
                since: Some(&form.since),
                ..Shown::default()
            };
            subscription_page(&state, &session, &env, &id, status, shown).await
        }
    }
}
