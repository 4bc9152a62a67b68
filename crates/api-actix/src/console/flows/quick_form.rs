//! The editor's form for the common edits, for a user who would rather not write JSON: a
//! card's words, a wait's duration, where a wait for card's outcomes lead, and a step added
//! after another. Its forms post to [`super::quick`].

use domain::flow::edits::Unit;
use maud::{html, Markup};
use serde_json::Value;

use crate::console::page;
use crate::console::session::Session;

/// The keys of a wait for card's `on`, as the form offers them.
const OUTCOMES: [&str; 6] = [
    "submitted",
    "dismissed",
    "expired",
    "cancelled",
    "timeout",
    "closed",
];
const UNITS: [Unit; 4] = [Unit::Minutes, Unit::Hours, Unit::Days, Unit::Weeks];

/// The texts of a template's first headline, text and submit button.
fn words(template: &Value) -> [String; 3] {
    let first = |list: &str, kind: &str| {
        template
            .pointer(&format!("/defaultView/{list}"))
            .and_then(Value::as_array)
            .and_then(|items| {
                items
                    .iter()
                    .find(|e| e.get("type").and_then(Value::as_str) == Some(kind))
            })
            .and_then(|e| e.pointer("/attributes/text"))
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_owned()
    };
    [
        first("content", "headline"),
        first("content", "text"),
        first("actions", "submitButton"),
    ]
}

/// The first step a wait for card's outcome `key` leads to now, if it names one.
fn outcome_target(config: &Value, step: &str, key: &str) -> Option<String> {
    let path = format!(
        "/steps/{}/properties/on/{key}/0",
        domain::json::pointer_token(step)
    );
    config
        .pointer(&path)
        .and_then(Value::as_str)
        .map(str::to_owned)
}

/// A wait step's `duration` in the largest unit that says it exactly; a day when it has
/// none (it waits until a date) or one the form's units cannot say.
fn current_duration(config: &Value, step: &str) -> (u32, Unit) {
    let seconds = config
        .pointer(&format!(
            "/steps/{}/properties/duration",
            domain::json::pointer_token(step)
        ))
        .and_then(Value::as_str)
        .and_then(domain::time::parse_duration)
        .map(|d| d.num_seconds())
        .unwrap_or(0);
    for (size, unit) in [
        (604_800, Unit::Weeks),
        (86_400, Unit::Days),
        (3_600, Unit::Hours),
        (60, Unit::Minutes),
    ] {
        if seconds > 0 && seconds % size == 0 {
            if let Ok(n) = u32::try_from(seconds / size) {
                return (n, unit);
            }
        }
    }
    (1, Unit::Days)
}

/// Each step's id and type, in the configuration's order.
fn steps(config: &Value) -> Vec<(String, String)> {
    config
        .get("steps")
        .and_then(Value::as_object)
        .map(|s| {
            s.iter()
                .map(|(id, step)| {
                    let kind = step.get("type").and_then(Value::as_str).unwrap_or("");
                    (id.clone(), kind.to_owned())
                })
                .collect()
        })
        .unwrap_or_default()
}

/// The forms, for the configuration shown.
pub(super) fn forms(session: &Session, base: &str, config: &Value) -> Markup {
    let steps = steps(config);
    let of = |kind: &'static str| {
        steps
            .iter()
            .filter(move |(_, k)| k == kind)
            .map(|(id, _)| id)
    };
    let templates = config.get("cardTemplates").and_then(Value::as_object);
    html! {
        section.card aria-labelledby="quick" {
            h2 #quick { "Edit in a form" }
            p.muted { "Each change is saved as the draft; publish it when it is right." }
            @for (id, template) in templates.into_iter().flatten().take(20) {
                @let [headline, text, button] = words(template);
                form.inline method="post" action={ (base) "/edit/template" }
                    aria-label={ "Words of " (id) } {
                    (page::csrf(session))
                    input type="hidden" name="template" value=(id);
                    (field(&format!("t-{id}-headline"), &format!("{id}: headline"), "headline",
                        &headline))
                    (field(&format!("t-{id}-text"), "Text", "text", &text))
                    (field(&format!("t-{id}-button"), "Button", "button", &button))
                    button.secondary type="submit" { "Save words" }
                }
            }
            @for id in of("wait") {
                @let (amount, unit) = current_duration(config, id);
                form.inline method="post" action={ (base) "/edit/wait" }
                    aria-label={ "Duration of " (id) } {
                    (page::csrf(session))
                    input type="hidden" name="step" value=(id);
                    (field(&format!("w-{id}-amount"), &format!("{id}: wait for"), "amount",
                        &amount.to_string()))
                    (units(&format!("w-{id}-unit"), unit))
                    button.secondary type="submit" { "Save duration" }
                }
            }
            @for id in of("wait-for-card") {
                @for o in OUTCOMES {
                    @let current = outcome_target(config, id, o);
                    form.inline method="post" action={ (base) "/edit/outcome" }
                        aria-label={ "When " (id) "'s card is " (o) } {
                        (page::csrf(session))
                        input type="hidden" name="step" value=(id);
                        input type="hidden" name="outcome" value=(o);
                        div.field {
                            label for={ "o-" (id) "-" (o) } { (id) ": when the card is " (o)
                                ", go to" }
                            select id={ "o-" (id) "-" (o) } name="target" {
                                option value="" selected[current.is_none()] {
                                    "(the path ends)" }
                                @for (s, _) in &steps { @if s != id {
                                    option value=(s)
                                        selected[current.as_deref() == Some(s.as_str())] { (s) }
                                } }
                            }
                        }
                        button.secondary type="submit" { "Save" }
                    }
                }
            }
            (add_form(session, base, &steps))
        }
    }
}

fn add_form(session: &Session, base: &str, steps: &[(String, String)]) -> Markup {
    html! {
        form.inline method="post" action={ (base) "/edit/add" } aria-label="Add a step" {
            (page::csrf(session))
            div.field {
                label for="add-after" { "Add a step after" }
                select #add-after name="after" {
                    @for (id, kind) in steps {
                        @if kind == "create-card" || kind == "wait" {
                            option value=(id) { (id) } }
                    }
                }
            }
            div.field {
                label for="add-kind" { "of kind" }
                select #add-kind name="kind" {
                    option value="card" { "card" } option value="wait" { "wait" } }
            }
            (field("add-id", "Its id", "id", ""))
            (field("add-name", "Card name (a card)", "name", ""))
            (field("add-amount", "Wait for (a wait)", "amount", "1"))
            (units("add-unit", Unit::Days))
            button.secondary type="submit" { "Add step" }
        }
    }
}

fn field(id: &str, label: &str, name: &str, value: &str) -> Markup {
    html! {
        div.field {
            label for=(id) { (label) }
            input type="text" id=(id) name=(name) value=(value);
        }
    }
}

fn units(id: &str, chosen: Unit) -> Markup {
    html! {
        div.field {
            label for=(id) { "unit" }
            select id=(id) name="unit" {
                @for u in UNITS { option value=(u.as_str()) selected[u == chosen] {
                    (u.as_str()) } }
            }
        }
    }
}
