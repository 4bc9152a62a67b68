//! A version's cards previewed as the end user sees them: rendered as the browser SDK's
//! `<workbench-feed>` renders a card (headline, text, image, buttons), with the notification a
//! phone would show, from sample values the user edits. Images are named, not loaded: the
//! console loads nothing from another origin.

use std::collections::BTreeMap;

use actix_web::http::StatusCode;
use actix_web::{web, HttpResponse};
use domain::flow::preview::{CardPreview, Preview};
use domain::flow::VersionRef;
use domain::id::{EnvironmentId, FlowId};
use maud::{html, Markup};
use serde_json::Value;

use crate::console::framed;
use crate::console::page;
use crate::console::session::{Refusal, Session};
use crate::console::shell::{respond, ROOT};
use crate::AppState;

/// The prefix of a sample value's parameter: `v.firstName=Ada`.
const SAMPLE: &str = "v.";

pub(super) fn configure(cfg: &mut web::ServiceConfig) {
    cfg.route("/console/{env}/flows/{id}/preview", web::get().to(show));
}

async fn show(
    state: web::Data<AppState>,
    session: Session,
    path: web::Path<(EnvironmentId, FlowId)>,
    query: web::Query<BTreeMap<String, String>>,
) -> Result<HttpResponse, Refusal> {
    let (env, id) = path.into_inner();
    let version = match query.get("version").map(|v| v.parse::<u32>()) {
        None => VersionRef::Latest,
        Some(Ok(n)) => VersionRef::Number(n),
        Some(Err(_)) => return Err(Refusal::BadForm("`version` must be a number".into())),
    };
    let texts: BTreeMap<String, String> = query
        .iter()
        .filter_map(|(k, v)| {
            k.strip_prefix(SAMPLE)
                .map(|name| (name.to_owned(), v.clone()))
        })
        .collect();
    let (v, shown) = match state
        .flows
        .preview(&session.principal, &env, &id, version, &texts)
        .await
    {
        Ok(found) => found,
        Err(err) => return page::unreadable(err, "Preview"),
    };
    let title = format!("Preview of v{}", v.version);
    let back = format!("{ROOT}/{env}/flows/{id}");
    let content = html! {
        p { a href={ (back) "?version=" (v.version) } { "Back to the flow" } }
        (samples_form(&back, v.version, &shown))
        @if shown.cards.is_empty() { p.muted { "This configuration has no card template." } }
        div.previews { @for card in &shown.cards { (card_preview(card)) } }
    };
    let body = framed(&state, &session, &env, "flows", &title, content).await?;
    Ok(respond(StatusCode::OK, body))
}

/// The sample values, one field each, with what a trigger would refuse at its field.
fn samples_form(back: &str, version: u32, shown: &Preview) -> Markup {
    html! {
        section.card aria-labelledby="samples" {
            h2 #samples { "Sample values" }
            @if shown.samples.is_empty() {
                p.muted { "Its cards use no variable." }
            } @else {
                form.inline method="get" action={ (back) "/preview" } {
                    input type="hidden" name="version" value=(version);
                    @for s in &shown.samples {
                        @let id = format!("sample-{}", s.name);
                        @let errors: Vec<&str> = shown.problems.iter()
                            .filter(|p| p.field == format!("variables.{}", s.name))
                            .map(|p| p.message.as_str()).collect();
                        div.field {
                            label for=(id) { (s.name) " " span.muted { "(" (s.var_type) ")" } }
                            input type="text" id=(id) name={ (SAMPLE) (s.name) }
                                value=(text_of(&s.value))
                                aria-invalid=[(!errors.is_empty()).then_some("true")]
                                aria-describedby=[(!errors.is_empty())
                                    .then(|| format!("{id}-errors"))];
                            @if !errors.is_empty() {
                                ul.errors id={ (id) "-errors" } {
                                    @for e in &errors { li { (e) } } }
                            }
                        }
                    }
                    button type="submit" { "Show" }
                }
            }
        }
    }
}

fn text_of(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// One template: the card as the feed shows it, and its notification.
fn card_preview(card: &CardPreview) -> Markup {
    let view = card.content.get("defaultView");
    let content = view
        .and_then(|v| v.get("content"))
        .and_then(Value::as_array);
    let actions = view
        .and_then(|v| v.get("actions"))
        .and_then(Value::as_array);
    let attribute = |element: &Value, name: &str| {
        element
            .pointer(&format!("/attributes/{name}"))
            .and_then(Value::as_str)
            .map(str::to_owned)
    };
    let notification = card.content.get("notification");
    html! {
        section.card.preview aria-label={ "Preview of " (card.name) } {
            h2 { (card.name) " " span.muted { code { (card.template_id) } } }
            div.feed-frame {
                p.muted { "In the feed" }
                article.wb-card data-template=(card.template_id) {
                    @for element in content.into_iter().flatten() {
                        @match element.get("type").and_then(Value::as_str) {
                            Some("headline") => { @if let Some(t) = attribute(element, "text") {
                                h3.headline { (t) } } },
                            Some("text") => { @if let Some(t) = attribute(element, "text") {
                                p.text { (t) } } },
                            Some("image") => { @if let Some(src) = attribute(element, "src") {
                                p.image role="img" aria-label=(attribute(element, "label")
                                    .unwrap_or_else(|| "image".into())) {
                                    "Image: " code { (src) } } } },
                            _ => {},
                        }
                    }
                    div.actions {
                        @for a in actions.into_iter().flatten() {
                            @if a.get("type").and_then(Value::as_str) == Some("submitButton") {
                                span.action { (attribute(a, "text").unwrap_or_else(|| a
                                    .get("key").and_then(Value::as_str).unwrap_or("OK").into())) }
                            }
                        }
                        span.dismiss { "Dismiss" }
                    }
                }
            }
            @if let Some(n) = notification {
                div.notification-frame {
                    p.muted { "As a notification" }
                    div.notification {
                        @if let Some(t) = attribute(n, "title") { strong { (t) } }
                        p { (attribute(n, "body").unwrap_or_default()) }
                    }
                }
            }
        }
    }
}
