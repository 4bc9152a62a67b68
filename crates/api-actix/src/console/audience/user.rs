//! One end user: attributes, tags, devices and open cards; marking them a test user, and a
//! test send of a flow to them alone.

use actix_web::http::StatusCode;
use actix_web::{web, HttpResponse};
use domain::audience::EndUser;
use domain::id::{EndUserId, EnvironmentId};
use domain::trigger::Mode;
use domain::{DomainError, Flow, PageRequest, Permission};
use maud::{html, Markup};
use serde::Deserialize;
use serde_json::Value;

use super::tabs;
use crate::console::framed;
use crate::console::page::{self, Problems};
use crate::console::session::{Posted, Refusal, Session};
use crate::console::shell::{respond, see_other, ROOT};
use crate::AppState;

pub(super) fn configure(cfg: &mut web::ServiceConfig) {
    cfg.route("/console/{env}/users/{user}", web::get().to(user))
        .route(
            "/console/{env}/users/{user}/test-user",
            web::post().to(mark_test_user),
        )
        .route(
            "/console/{env}/users/{user}/send-test",
            web::post().to(send_test),
        );
}

/// One user: attributes, tags, devices and open cards.
async fn user(
    state: web::Data<AppState>,
    session: Session,
    path: web::Path<(EnvironmentId, EndUserId)>,
) -> Result<HttpResponse, Refusal> {
    let (env, id) = path.into_inner();
    user_page(&state, session, env, id, None).await
}

/// One user's page, with the problems of a refused change above it.
async fn user_page(
    state: &AppState,
    session: Session,
    env: EnvironmentId,
    id: EndUserId,
    problems: Option<Problems>,
) -> Result<HttpResponse, Refusal> {
    let who = &session.principal;
    let found = match state.audience.get_user(who, &env, &id).await {
        Ok(u) => u,
        Err(err) => return page::unreadable(err, "End user"),
    };
    // What the key may not read is left out, not refused.
    let devices = state.devices.list(who, &env, &id).await.unwrap_or_default();
    let cards = if session.may(&env, Permission::CardsWrite) {
        state
            .cards
            .feed(who, &env, &id, None)
            .await
            .unwrap_or_default()
    } else {
        Vec::new()
    };
    let flows = trigger_flows(state, &session, &env).await;
    let here = format!("{ROOT}/{env}/users/{}", page::url_path(&id));
    let title = format!("End user {}", found.id);
    let content = html! {
        (tabs(&env, "users"))
        (page::alert(problems.as_ref(), &[]))
        (about(&session, &env, &found, &here))
        @if !flows.is_empty() { (send_test_form(&session, &flows, &here)) }
        (devices_section(&devices))
        (cards_section(&env, &cards))
    };
    let status = problems.as_ref().map_or(StatusCode::OK, |p| p.status);
    let body = framed(state, &session, &env, "users", &title, content).await?;
    Ok(respond(status, body))
}

/// The flows a test can be sent of (the first hundred not archived), for a key that may.
async fn trigger_flows(state: &AppState, session: &Session, env: &EnvironmentId) -> Vec<Flow> {
    if !session.may(env, Permission::ActionFlowsTrigger) {
        return Vec::new();
    }
    let first = PageRequest {
        limit: 100,
        after: None,
    };
    state
        .flows
        .list(
            &session.principal,
            env,
            domain::flow::FlowFilter::default(),
            first,
        )
        .await
        .map(|p| p.items.into_iter().filter(|f| !f.archived).collect())
        .unwrap_or_default()
}

/// Whether the user is a test user (with the button that changes it), tags, attributes.
fn about(session: &Session, env: &str, found: &EndUser, here: &str) -> Markup {
    let attributes =
        serde_json::to_string_pretty(&Value::Object(found.attributes.clone())).unwrap_or_default();
    html! {
    section.card aria-labelledby="about" {
        h2 #about { "About" }
        p { "Test user: " span #test-user { @if found.test_user { "yes" } @else { "no" } }
            " · tags: " (found.tags.join(", ")) }
        @if session.may(env, Permission::UsersWrite) {
            form method="post" action={ (here) "/test-user" } {
                (page::csrf(session))
                input type="hidden" name="test_user"
                    value=(if found.test_user { "off" } else { "on" });
                button.secondary type="submit" {
                    @if found.test_user { "Unmark as a test user" }
                    @else { "Mark as a test user" } }
            }
        }
        h3 { "Attributes" }
        (page::pre(&attributes))
    }
    }
}

/// A test send of one of `flows` to this user alone.
fn send_test_form(session: &Session, flows: &[Flow], here: &str) -> Markup {
    html! {
        section.card aria-labelledby="send-test" {
            h2 #send-test { "Send a test" }
            p.muted { "Starts a flow in test mode for this user alone: its draft, else its \
                published version. Test sends only reach test users." }
            form.inline method="post" action={ (here) "/send-test" } {
                (page::csrf(session))
                div.field {
                    label for="send-flow" { "Flow" }
                    select #send-flow name="flow_id" {
                        @for f in flows { option value=(f.id) { (f.name) } }
                    }
                }
                button type="submit" { "Send a test to this user" }
            }
        }
    }
}

fn devices_section(devices: &[domain::push::Device]) -> Markup {
    html! {
    section.card aria-labelledby="devices" {
        h2 #devices { "Devices" }
        @if devices.is_empty() { p.muted { "None." } } @else {
            div.scroll { table {
                thead { tr { th scope="col" { "App" } th scope="col" { "Platform" } th
                    scope="col" { "Token" } th scope="col" { "Registered" } } }
                tbody { @for d in devices { tr {
                    td { (d.app_id) } td { (d.platform) } td { code { (d.token) } } td {
                        (d.created.format("%Y-%m-%d %H:%M")) }
                } } }
            } }
        }
    }
    }
}

fn cards_section(env: &str, cards: &[domain::card::CardInstance]) -> Markup {
    html! {
    section.card aria-labelledby="cards" {
        h2 #cards { "Open cards" }
        @if cards.is_empty() { p.muted { "None." } } @else {
            div.scroll { table {
                thead { tr { th scope="col" { "Card" } th scope="col" { "Status" } th
                    scope="col" { "Flow" } th scope="col" { "Created" } } }
                tbody { @for c in cards { tr.card-row {
                    td { (c.template_name) } td { span.status { (c.status.as_str()) } }
                    td { a href={ (ROOT) "/" (env) "/flows/" (c.flow_id) } { code { (c.flow_id)
                        } } }
                    td { (c.created.format("%Y-%m-%d %H:%M")) }
                } } }
            } }
        }
    }
    }
}

#[derive(Deserialize)]
struct TestUserForm {
    test_user: String,
}

/// Marks the user as a test user, or not.
async fn mark_test_user(
    state: web::Data<AppState>,
    path: web::Path<(EnvironmentId, EndUserId)>,
    posted: Posted<TestUserForm>,
) -> Result<HttpResponse, Refusal> {
    let (env, id) = path.into_inner();
    let Posted { session, form } = posted;
    let on = match form.test_user.as_str() {
        "on" => true,
        "off" => false,
        _ => return Err(Refusal::BadForm("`test_user` must be `on` or `off`".into())),
    };
    match state
        .audience
        .set_test_user(&session.principal, &env, &id, on)
        .await
    {
        Ok(_) => Ok(see_other(&format!(
            "{ROOT}/{env}/users/{}",
            page::url_path(&id)
        ))),
        Err(err) => user_page(&state, session, env, id, Some(Problems::of(err))).await,
    }
}

#[derive(Deserialize)]
struct SendTestForm {
    flow_id: String,
}

/// A test send of a flow to this user alone; its invocation's page says what happened.
async fn send_test(
    state: web::Data<AppState>,
    path: web::Path<(EnvironmentId, EndUserId)>,
    posted: Posted<SendTestForm>,
) -> Result<HttpResponse, Refusal> {
    let (env, id) = path.into_inner();
    let Posted { session, form } = posted;
    let flow = domain::id::FlowId::from(form.flow_id.clone());
    let body = serde_json::json!({"flows": [{"target": {"type": "user",
        "targetUserIds": [id.as_str()]}}]});
    let started = state
        .triggers
        .trigger_body(&session.principal, &env, &flow, Mode::Test, &body)
        .await;
    match started.as_deref() {
        Ok([invocation, ..]) => Ok(see_other(&format!(
            "{ROOT}/{env}/flows/{flow}/invocations/{}",
            page::url_path(invocation)
        ))),
        Ok([]) => Err(crate::console::failed(&DomainError::invalid(
            "flows",
            "no invocation",
        ))),
        Err(_) => {
            let problems = started.err().map(Problems::of);
            user_page(&state, session, env, id, problems).await
        }
    }
}
