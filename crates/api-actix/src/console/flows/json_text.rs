//! A configuration as JSON text in the order a person writes one, for the editor when the
//! text the user saved is not at hand (a configuration sent through the API, or changed by the
//! form): `type`, `initialSteps`, `variables`, `steps` (from `initialSteps` outward), then
//! `cardTemplates`; in a step `id`, `type`, `properties`, `next`; in a template `metadata`
//! before its views. Other keys follow those a list names, in name order. Indented as
//! `serde_json`'s pretty printer indents.

use std::collections::{HashSet, VecDeque};

use serde_json::{Map, Value};

/// Keys written first, in this order, wherever they are.
const FIRST: [&str; 32] = [
    "type",
    "version",
    "id",
    "key",
    "initialSteps",
    "variables",
    "steps",
    "cardTemplates",
    "metadata",
    "cardName",
    "properties",
    "cardTemplateId",
    "cardStep",
    "duration",
    "until",
    "untilVariable",
    "offset",
    "timeout",
    "on",
    "conditions",
    "if",
    "variable",
    "op",
    "value",
    "otherwise",
    "next",
    "defaultView",
    "subviews",
    "content",
    "actions",
    "attributes",
    "notification",
];

/// `config` written in reading order.
pub(super) fn reading_order(config: &Value) -> String {
    let mut out = String::new();
    write(&mut out, config, 0, Place::Top, config);
    out
}

/// Where an object sits, when that decides the order of its keys.
#[derive(Clone, Copy, PartialEq)]
enum Place {
    Top,
    Steps,
    Other,
}

fn write(out: &mut String, v: &Value, depth: usize, place: Place, config: &Value) {
    match v {
        Value::Object(map) if map.is_empty() => out.push_str("{}"),
        Value::Object(map) => {
            out.push_str("{\n");
            let keys = match place {
                Place::Steps => step_order(map, config),
                _ => key_order(map),
            };
            for (i, key) in keys.iter().enumerate() {
                indent(out, depth + 1);
                out.push_str(&serde_json::to_string(key).unwrap_or_default());
                out.push_str(": ");
                let inner = if place == Place::Top && key == "steps" {
                    Place::Steps
                } else {
                    Place::Other
                };
                if let Some(value) = map.get(key.as_str()) {
                    write(out, value, depth + 1, inner, config);
                }
                if i + 1 < keys.len() {
                    out.push(',');
                }
                out.push('\n');
            }
            indent(out, depth);
            out.push('}');
        }
        Value::Array(items) if items.is_empty() => out.push_str("[]"),
        Value::Array(items) => {
            out.push_str("[\n");
            for (i, item) in items.iter().enumerate() {
                indent(out, depth + 1);
                write(out, item, depth + 1, Place::Other, config);
                if i + 1 < items.len() {
                    out.push(',');
                }
                out.push('\n');
            }
            indent(out, depth);
            out.push(']');
        }
        scalar => out.push_str(&serde_json::to_string(scalar).unwrap_or_default()),
    }
}

fn indent(out: &mut String, depth: usize) {
    for _ in 0..depth {
        out.push_str("  ");
    }
}

/// The keys of `map`: those of [`FIRST`] in its order, then the rest by name.
fn key_order(map: &Map<String, Value>) -> Vec<String> {
    let mut keys: Vec<String> = FIRST
        .iter()
        .filter(|k| map.contains_key(**k))
        .map(|k| (*k).to_owned())
        .collect();
    keys.extend(map.keys().filter(|k| !FIRST.contains(&k.as_str())).cloned());
    keys
}

/// The ids of `steps` from `initialSteps` outward (breadth first, by each step's `next`,
/// `on`, `conditions` and `otherwise` in their order), then any others by id.
fn step_order(steps: &Map<String, Value>, config: &Value) -> Vec<String> {
    let mut order = Vec::new();
    let mut seen = HashSet::new();
    let initial = config
        .get("initialSteps")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str);
    let mut queue: VecDeque<&str> = initial.collect();
    while let Some(id) = queue.pop_front() {
        let Some(step) = steps.get(id) else { continue };
        if !seen.insert(id.to_owned()) {
            continue;
        }
        order.push(id.to_owned());
        queue.extend(successors(step));
    }
    order.extend(steps.keys().filter(|k| !seen.contains(*k)).cloned());
    order
}

/// The ids in a list of step ids.
fn ids(v: Option<&Value>) -> Vec<&str> {
    v.and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect()
}

/// The step ids a step names as what follows it.
fn successors(step: &Value) -> Vec<&str> {
    let props = step.get("properties");
    let mut out = ids(step.get("next"));
    if let Some(on) = props.and_then(|p| p.get("on")).and_then(Value::as_object) {
        for next in on.values() {
            out.extend(ids(Some(next)));
        }
    }
    let conditions = props
        .and_then(|p| p.get("conditions"))
        .and_then(Value::as_array);
    for rule in conditions.into_iter().flatten() {
        out.extend(ids(rule.get("next")));
    }
    out.extend(ids(props.and_then(|p| p.get("otherwise"))));
    out
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_configuration_reads_top_down_and_parses_back_the_same() {
        let config = json!({
            "cardTemplates": {"t": {"defaultView": {"content": []}, "metadata": {"cardName": "T"}}},
            "steps": {
                "b": {"type": "create-card", "properties": {"cardTemplateId": "t"}, "id": "b"},
                "a": {"next": ["b"], "type": "wait", "properties": {"duration": "PT1H"},
                      "id": "a"},
                "z": {"id": "z", "type": "create-card", "properties": {"cardTemplateId": "t"}}
            },
            "initialSteps": ["a"],
            "type": "card",
            "zeta": [1, "two", null, {"y": true}]
        });
        let text = reading_order(&config);
        let at = |needle: &str| {
            text.find(needle)
                .unwrap_or_else(|| panic!("{needle}: {text}"))
        };
        assert!(at("\"type\": \"card\"") < at("\"initialSteps\""));
        assert!(at("\"initialSteps\"") < at("\"steps\""));
        assert!(at("\"steps\"") < at("\"cardTemplates\""));
        assert!(at("\"a\": {") < at("\"b\": {"), "from initialSteps outward");
        assert!(at("\"b\": {") < at("\"z\": {"), "then the others");
        assert!(at("\"metadata\"") < at("\"defaultView\""));
        let back: Value = serde_json::from_str(&text).expect("JSON");
        assert_eq!(back, config);
        assert_eq!(reading_order(&json!({})), "{}");
        assert_eq!(reading_order(&json!("\"<x>\"")), "\"\\\"<x>\\\"\"");
    }
}
