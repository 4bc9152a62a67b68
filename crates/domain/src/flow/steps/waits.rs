//! The properties of `wait` and `wait-for-card` steps: a deadline's bounds and sources, and
//! the card a listener hears, which must exist on every path to it.

use std::collections::BTreeMap;

use chrono::Duration;
use serde_json::{Map, Value};

use super::context::{edges, next_and_properties, owned, refuse_next, targets, Cx};
use super::definition::{StepKind, Wait, WaitForCard, WaitUntil};
use super::graph::{Ancestry, Edge, Site};
use super::vocabulary::{OnKey, StepType, VariableType, MAX_WAIT, MIN_WAIT};
use crate::flow::problems::{describe, object, show, Path, Problems};
use crate::time::{parse_duration, parse_signed_duration, parse_timestamp};

pub(super) fn wait<'a>(
    cx: &mut Cx<'a, '_>,
    step: &'a Map<String, Value>,
    step_path: &Path<'_>,
) -> (Vec<Edge<'a>>, Option<StepKind>) {
    let (next, out, props) = next_and_properties(cx, step, step_path);
    let Some(props) = props else {
        return (out, None);
    };
    let props_path = step_path.key("properties");
    let kind = wait_until(cx, props, &props_path).map(|until| {
        StepKind::Wait(Wait {
            until,
            next: owned(&next),
        })
    });
    (out, kind)
}

const WAIT_KEYS: [&str; 3] = ["duration", "until", "untilVariable"];

fn wait_until(
    cx: &mut Cx<'_, '_>,
    props: &Map<String, Value>,
    path: &Path<'_>,
) -> Option<WaitUntil> {
    let present = |key: &str| props.get(key).filter(|v| !v.is_null());
    let given: Vec<&str> = WAIT_KEYS
        .into_iter()
        .filter(|k| present(k).is_some())
        .collect();
    match given.as_slice() {
        [] => cx.p.add(
            path,
            "needs exactly one of `duration`, `until` and `untilVariable`",
        ),
        [_] => {}
        several => {
            let names: Vec<String> = several.iter().map(|k| format!("`{k}`")).collect();
            let message = format!("holds {}; exactly one is allowed", names.join(" and "));
            cx.p.add(path, message);
        }
    }
    let offset_path = path.key("offset");
    let offset = match present("offset") {
        None => Some(Duration::zero()),
        Some(_) if !given.contains(&"untilVariable") => {
            cx.p.add(&offset_path, "is allowed only with `untilVariable`");
            None
        }
        Some(value) => signed_offset(cx.p, value, &offset_path),
    };
    let duration = present("duration").and_then(|v| bounded(cx.p, v, &path.key("duration")));
    let until = present("until").and_then(|v| timestamp(cx.p, v, &path.key("until")));
    let variable =
        present("untilVariable").and_then(|v| date_variable(cx, v, &path.key("untilVariable")));
    if given.len() != 1 {
        return None;
    }
    match (duration, until, variable, offset) {
        (Some(d), None, None, _) => Some(WaitUntil::After(d)),
        (None, Some(t), None, _) => Some(WaitUntil::At(t)),
        (None, None, Some(name), Some(offset)) => Some(WaitUntil::Variable { name, offset }),
        _ => None,
    }
}

/// A duration from [`MIN_WAIT`] to [`MAX_WAIT`]: a wait's `duration`, a listener's `timeout`.
fn bounded(p: &mut Problems, value: &Value, path: &Path<'_>) -> Option<Duration> {
    let parsed = value.as_str().and_then(parse_duration);
    match parsed.filter(|d| (MIN_WAIT..=MAX_WAIT).contains(d)) {
        Some(d) => Some(d),
        None => {
            let message = format!(
                "must be an ISO 8601 duration from PT1S to P365D (`PT30M`, `P1D`), not {}",
                show(value)
            );
            p.add(path, message);
            None
        }
    }
}

fn signed_offset(p: &mut Problems, value: &Value, path: &Path<'_>) -> Option<Duration> {
    let parsed = value.as_str().and_then(parse_signed_duration);
    let within = |d: &Duration| *d >= -MAX_WAIT && *d <= MAX_WAIT;
    match parsed.filter(within) {
        Some(d) => Some(d),
        None => {
            let message = format!(
                "must be a signed ISO 8601 duration within ±P365D (`-P1D`: a day before), not {}",
                show(value)
            );
            p.add(path, message);
            None
        }
    }
}

fn timestamp(p: &mut Problems, value: &Value, path: &Path<'_>) -> Option<crate::Timestamp> {
    let parsed = match value {
        Value::String(text) => parse_timestamp(text),
        other => Err(format!(
            "must be an RFC 3339 timestamp, not {}",
            describe(other)
        )),
    };
    parsed.map_err(|message| p.add(path, message)).ok()
}

fn date_variable(cx: &mut Cx<'_, '_>, value: &Value, path: &Path<'_>) -> Option<String> {
    let Value::String(name) = value else {
        let message = format!(
            "must be the name of a date variable, not {}",
            describe(value)
        );
        cx.p.add(path, message);
        return None;
    };
    let Some(declared) = cx.scope.variables.get(name.as_str()) else {
        cx.p.add(path, format!("names no variable of the flow: `{name}`"));
        return None;
    };
    match declared.ty {
        // Its type problem is reported on its definition.
        None => None,
        Some(VariableType::Date) => {
            let usable = declared
                .default
                .is_none_or(|d| d.as_str().is_some_and(|t| parse_timestamp(t).is_ok()));
            if !usable {
                let message = format!(
                    "names `{name}`, whose default is not an RFC 3339 timestamp: a wait needs one"
                );
                cx.p.add(path, message);
            }
            usable.then(|| name.clone())
        }
        Some(other) => {
            let message = format!("names the {other} variable `{name}`; a wait needs a date");
            cx.p.add(path, message);
            None
        }
    }
}

pub(super) fn wait_for_card<'a>(
    cx: &mut Cx<'a, '_>,
    id: &'a str,
    step: &'a Map<String, Value>,
    step_path: &Path<'_>,
) -> (Vec<Edge<'a>>, Option<StepKind>) {
    let why = "`properties.on` names the steps that follow each outcome";
    refuse_next(cx.p, step, step_path, why);
    let props_path = step_path.key("properties");
    let Some(props) = object(cx.p, step.get("properties"), &props_path, true) else {
        return (Vec::new(), None);
    };
    let card_step = card_step(cx, id, props.get("cardStep"), &props_path.key("cardStep"));
    let timeout_path = props_path.key("timeout");
    let timeout = match props.get("timeout") {
        None | Some(Value::Null) => {
            let message = "is required: an ISO 8601 duration from PT1S to P365D";
            cx.p.add(&timeout_path, message);
            None
        }
        Some(value) => bounded(cx.p, value, &timeout_path),
    };
    let on_path = props_path.key("on");
    let mut out = Vec::new();
    let mut on = BTreeMap::new();
    let mut on_ok = true;
    for (key, list) in object(cx.p, props.get("on"), &on_path, false)
        .into_iter()
        .flatten()
    {
        let list_path = on_path.key(key);
        let next = targets(cx, Some(list), &list_path, true);
        out.extend(edges(&next, Site::On(key)));
        match OnKey::parse(key) {
            Some(outcome) => {
                on.insert(outcome, owned(&next));
            }
            None => {
                let known: Vec<&str> = OnKey::ALL.iter().map(|k| k.as_str()).collect();
                let message = format!("is not an outcome (one of {})", known.join(", "));
                cx.p.add(&list_path, message);
                on_ok = false;
            }
        }
    }
    let kind = match (card_step, timeout, on_ok) {
        (Some(card_step), Some(timeout), true) => Some(StepKind::WaitForCard(WaitForCard {
            card_step,
            timeout,
            on,
        })),
        _ => None,
    };
    (out, kind)
}

fn card_step<'a>(
    cx: &mut Cx<'a, '_>,
    id: &'a str,
    value: Option<&'a Value>,
    path: &Path<'_>,
) -> Option<String> {
    let message = match value {
        Some(Value::String(name)) => match cx.scope.kinds.get(name.as_str()) {
            Some(Some(StepType::CreateCard)) => {
                cx.ancestry.push(Ancestry {
                    step: id,
                    ancestor: name,
                    field: path.to_string(),
                    message: format!(
                        "`{name}` is not an ancestor of `{id}` on every path: \
                         the card it listens to may not exist"
                    ),
                });
                return Some(name.clone());
            }
            Some(Some(other)) => {
                format!("names the `{other}` step `{name}`; it must name a create-card step")
            }
            // The step's type problem is reported on the step.
            Some(None) => return None,
            None => format!("names no step: `{name}`"),
        },
        None | Some(Value::Null) => {
            "is required: the create-card step whose card this step listens to".to_owned()
        }
        Some(other) => format!("must be a step id, not {}", describe(other)),
    };
    cx.p.add(path, message);
    None
}
