//! Action Flow configuration validation (docs/api.md, Configuration validation): every
//! problem at once, each with the JSON path of the offending value
//! (`config.steps.s1.properties.cardTemplateId`).
//!
//! The configuration stays a JSON document: fields this service does not know are kept as
//! they are. What it does know is checked:
//! - `type` is `card`; `version`, when present, is a string;
//! - `steps` is a map; each step's `id` equals its key, its `type` is a known
//!   [`StepType`](crate::flow::steps::StepType), each target names a step; `initialSteps` is
//!   non-empty and names steps; every step is reachable from `initialSteps`; the step graph
//!   has no cycle; each step type's properties hold (a `create-card` step names a card
//!   template of `cardTemplates`; waits, card listeners and branches as
//!   [`super::steps`] checks them);
//! - a card template has a non-empty `metadata.cardName`, a `metadata.delivery.priority` of
//!   1–10 when given, views whose element keys are unique, known element types with their
//!   required attributes (unknown element types pass untouched: the SDKs render them), and
//!   `%{name}` references that resolve to a variable of the template or of the flow
//!   (`%{assetv1:name}` references an asset and is always accepted);
//! - a variable definition has a known `type` and `source`, a default of that type (a date is
//!   RFC 3339 or matches `defaultFormatterOption`), and a boolean `required` when given.

use std::collections::{HashMap, HashSet};

use serde_json::{Map, Value};

use super::problems::{describe, object, show, Path, Problems};
use super::steps::properties::check;
use super::steps::Program;
use super::values::check_value;
use crate::FieldError;

/// The priorities a card may have, in a template's `metadata.delivery.priority` and a
/// trigger's `cardOptions.priority`.
pub const PRIORITIES: std::ops::RangeInclusive<u8> = 1..=10;

/// Variable types of definitions (docs/api.md, Configuration validation).
pub const VARIABLE_TYPES: [&str; 4] = ["number", "string", "date", "boolean"];
/// Variable sources: sent with the trigger (`event`), fixed (`static`), computed by the
/// template's default script (`script`, which a trigger may not override).
pub const VARIABLE_SOURCES: [&str; 3] = ["event", "static", "script"];

/// Element types whose attributes this service checks, with the attribute each requires (a
/// non-empty string).
pub const KNOWN_ELEMENTS: [(&str, &str); 4] = [
    ("headline", "text"),
    ("text", "text"),
    ("image", "src"),
    ("submitButton", "text"),
];

impl Program {
    /// The program of a configuration, or every problem [`validate`] finds in it (paths under
    /// `config`).
    pub fn parse(config: &Value) -> Result<Program, Vec<FieldError>> {
        validate_program(config, "config")
    }
}

/// Validates a configuration. `path` is the name the configuration has in the request
/// (`config`). Returns every problem found, ordered by path.
pub fn validate(config: &Value, path: &str) -> Vec<FieldError> {
    match validate_program(config, path) {
        Ok(_) => Vec::new(),
        Err(errors) => errors,
    }
}

/// [`validate`], with the typed steps of a configuration that has no problem.
fn validate_program(config: &Value, path: &str) -> Result<Program, Vec<FieldError>> {
    let mut p = Problems::new();
    let root = Path::Root(path);
    let Some(config) = config.as_object() else {
        p.add(
            &root,
            format!("must be an object, not {}", describe(config)),
        );
        return Err(p.into_sorted());
    };
    match config.get("type") {
        Some(Value::String(t)) if t == "card" => {}
        Some(other) => p.add(
            &root.key("type"),
            format!("must be `card`, not {}", show(other)),
        ),
        None => p.add(&root.key("type"), "is required and must be `card`"),
    }
    if config.get("version").is_some_and(|v| !v.is_string()) {
        p.add(&root.key("version"), "must be a string");
    }
    let flow_variables = variables(&mut p, config.get("variables"), &root.key("variables"));
    let templates = card_templates(
        &mut p,
        config.get("cardTemplates"),
        &root.key("cardTemplates"),
        &flow_variables,
    );
    let program = check(&mut p, config, &root, &templates);
    // A stable order for callers: by path.
    let errors = p.into_sorted();
    match program {
        Some(program) if errors.is_empty() => Ok(program),
        // Steps that check out but no program would mean a step problem went unreported.
        _ if errors.is_empty() => Err(vec![FieldError::new(path, "has no valid steps")]),
        _ => Err(errors),
    }
}

// ---- variables ----

/// Checks a map of variable definitions; returns the names defined.
fn variables<'v>(p: &mut Problems, value: Option<&'v Value>, path: &Path<'_>) -> HashSet<&'v str> {
    let Some(defs) = object(p, value, path, false) else {
        return HashSet::new();
    };
    for (name, def) in defs {
        let def_path = path.key(name);
        let Some(def) = object(p, Some(def), &def_path, true) else {
            continue;
        };
        let var_type = match def.get("type") {
            Some(Value::String(t)) if VARIABLE_TYPES.contains(&t.as_str()) => Some(t.as_str()),
            Some(other) => {
                p.add(
                    &def_path.key("type"),
                    format!(
                        "must be one of {}, not {}",
                        VARIABLE_TYPES.join(", "),
                        show(other)
                    ),
                );
                None
            }
            None => {
                p.add(
                    &def_path.key("type"),
                    format!("is required: one of {}", VARIABLE_TYPES.join(", ")),
                );
                None
            }
        };
        match def.get("source") {
            None => {}
            Some(Value::String(s)) if VARIABLE_SOURCES.contains(&s.as_str()) => {}
            Some(other) => p.add(
                &def_path.key("source"),
                format!(
                    "must be one of {}, not {}",
                    VARIABLE_SOURCES.join(", "),
                    show(other)
                ),
            ),
        }
        if def.get("required").is_some_and(|r| !r.is_boolean()) {
            p.add(&def_path.key("required"), "must be a boolean");
        }
        let pattern = match def.get("defaultFormatterOption") {
            None | Some(Value::Null) => None,
            Some(Value::String(s)) => Some(s.as_str()),
            Some(other) => {
                p.add(
                    &def_path.key("defaultFormatterOption"),
                    format!("must be a string, not {}", describe(other)),
                );
                None
            }
        };
        if def.get("defaultFormatter").is_some_and(|f| !f.is_string()) {
            p.add(&def_path.key("defaultFormatter"), "must be a string");
        }
        if let (Some(var_type), Some(default)) = (var_type, def.get("default")) {
            if let Err(message) = check_value(var_type, default, pattern) {
                p.add(&def_path.key("default"), message);
            }
        }
    }
    defs.keys().map(String::as_str).collect()
}

// ---- card templates ----

/// Checks every template; returns the ids of the templates present (even invalid ones, so a
/// step naming an invalid template is not reported twice).
fn card_templates<'v>(
    p: &mut Problems,
    value: Option<&'v Value>,
    path: &Path<'_>,
    flow_variables: &HashSet<&str>,
) -> HashSet<&'v str> {
    let Some(templates) = object(p, value, path, false) else {
        return HashSet::new();
    };
    for (id, template) in templates {
        let template_path = path.key(id);
        let Some(template) = object(p, Some(template), &template_path, true) else {
            continue;
        };
        let own = variables(
            p,
            template.get("variables"),
            &template_path.key("variables"),
        );
        let known = |name: &str| own.contains(name) || flow_variables.contains(name);
        let metadata_path = template_path.key("metadata");
        if let Some(metadata) = object(p, template.get("metadata"), &metadata_path, true) {
            check_metadata(p, metadata, &metadata_path);
        }
        check_views(p, template, &template_path, &known);
        check_notification(p, template, &template_path, &known);
    }
    templates.keys().map(String::as_str).collect()
}

/// A template's `metadata`: a non-empty `cardName`, a string `cardDescription`, a known
/// `delivery.priority`.
fn check_metadata(p: &mut Problems, metadata: &Map<String, Value>, metadata_path: &Path<'_>) {
    match metadata.get("cardName") {
        Some(Value::String(name)) if !name.trim().is_empty() => {}
        Some(Value::String(_)) | None => p.add(
            &metadata_path.key("cardName"),
            "is required and must not be empty",
        ),
        Some(other) => p.add(
            &metadata_path.key("cardName"),
            format!("must be a string, not {}", describe(other)),
        ),
    }
    if metadata
        .get("cardDescription")
        .is_some_and(|d| !d.is_string())
    {
        p.add(&metadata_path.key("cardDescription"), "must be a string");
    }
    let delivery_path = metadata_path.key("delivery");
    if let Some(delivery) = object(p, metadata.get("delivery"), &delivery_path, false) {
        if let Some(priority) = delivery.get("priority") {
            let valid = priority
                .as_u64()
                .and_then(|n| u8::try_from(n).ok())
                .is_some_and(|n| PRIORITIES.contains(&n));
            if !valid {
                p.add(
                    &delivery_path.key("priority"),
                    format!("must be a whole number from 1 to 10, not {priority}"),
                );
            }
        }
    }
}

/// A template's `defaultView` and each of its `subviews`.
fn check_views(
    p: &mut Problems,
    template: &Map<String, Value>,
    template_path: &Path<'_>,
    known: &dyn Fn(&str) -> bool,
) {
    let default_view_path = template_path.key("defaultView");
    if let Some(view) = object(p, template.get("defaultView"), &default_view_path, false) {
        check_view(p, view, &default_view_path, known);
    }
    let subviews_path = template_path.key("subviews");
    if let Some(subviews) = object(p, template.get("subviews"), &subviews_path, false) {
        for (name, view) in subviews {
            let view_path = subviews_path.key(name);
            if let Some(view) = object(p, Some(view), &view_path, true) {
                check_view(p, view, &view_path, known);
            }
        }
    }
}

/// A template's `notification`: text for the push's title and body, and references that
/// resolve.
fn check_notification(
    p: &mut Problems,
    template: &Map<String, Value>,
    template_path: &Path<'_>,
    known: &dyn Fn(&str) -> bool,
) {
    let notification_path = template_path.key("notification");
    let Some(notification) = object(p, template.get("notification"), &notification_path, false)
    else {
        return;
    };
    // The push's title and body are text: anything else was stored and pushed as JSON.
    let attributes_path = notification_path.key("attributes");
    if let Some(attributes) = object(p, notification.get("attributes"), &attributes_path, false) {
        for field in ["title", "body"] {
            match attributes.get(field) {
                None | Some(Value::String(_)) => {}
                Some(other) => p.add(
                    &attributes_path.key(field),
                    format!("must be a string, not {}", describe(other)),
                ),
            }
        }
    }
    if let Some(notification) = template.get("notification") {
        check_references(p, notification, &notification_path, known);
    }
}

fn check_view(
    p: &mut Problems,
    view: &Map<String, Value>,
    path: &Path<'_>,
    known: &dyn Fn(&str) -> bool,
) {
    // Element key → where it was first seen (list name, index).
    let mut keys: HashMap<&str, (&str, usize)> = HashMap::new();
    for list in ["actions", "content"] {
        let list_path = path.key(list);
        let items = match view.get(list) {
            None => continue,
            Some(Value::Array(items)) => items,
            Some(other) => {
                p.add(
                    &list_path,
                    format!("must be an array, not {}", describe(other)),
                );
                continue;
            }
        };
        for (i, element) in items.iter().enumerate() {
            let element_path = list_path.index(i);
            let Some(element) = object(p, Some(element), &element_path, true) else {
                continue;
            };
            if let Some(key) = element_key(p, element, &element_path) {
                if let Some((first_list, first_index)) = keys.insert(key, (list, i)) {
                    let first = path.key(first_list);
                    let first = first.index(first_index);
                    p.add(
                        &element_path.key("key"),
                        format!(
                            "`{key}` is already the key of {first}; keys are unique within \
                            a view"
                        ),
                    );
                }
            }
            check_element(p, element, &element_path, known);
        }
    }
}

/// An element's `key`, when it is a non-empty string.
fn element_key<'v>(
    p: &mut Problems,
    element: &'v Map<String, Value>,
    element_path: &Path<'_>,
) -> Option<&'v str> {
    match element.get("key") {
        Some(Value::String(key)) if !key.is_empty() => return Some(key.as_str()),
        Some(Value::String(_)) | None => p.add(
            &element_path.key("key"),
            "is required and must not be empty",
        ),
        Some(other) => p.add(
            &element_path.key("key"),
            format!("must be a string, not {}", describe(other)),
        ),
    }
    None
}

/// An element's `type`, the attribute a known type requires, and its attributes' references.
fn check_element(
    p: &mut Problems,
    element: &Map<String, Value>,
    element_path: &Path<'_>,
    known: &dyn Fn(&str) -> bool,
) {
    let element_type = match element.get("type") {
        Some(Value::String(t)) => Some(t.as_str()),
        Some(other) => {
            p.add(
                &element_path.key("type"),
                format!("must be a string, not {}", describe(other)),
            );
            None
        }
        None => {
            p.add(&element_path.key("type"), "is required");
            None
        }
    };
    let attributes_path = element_path.key("attributes");
    let attributes = object(p, element.get("attributes"), &attributes_path, false);
    if let Some((_, required)) =
        element_type.and_then(|t| KNOWN_ELEMENTS.iter().find(|(name, _)| *name == t))
    {
        match attributes.and_then(|a| a.get(*required)) {
            Some(Value::String(s)) if !s.is_empty() => {}
            Some(Value::String(_)) | None => p.add(
                &attributes_path.key(required),
                "is required and must not be empty",
            ),
            Some(other) => p.add(
                &attributes_path.key(required),
                format!("must be a string, not {}", describe(other)),
            ),
        }
    }
    if let Some(attributes) = element.get("attributes") {
        check_references(p, attributes, &attributes_path, known);
    }
}

/// Every `%{name}` in any string below `value` must name a known variable;
/// `%{assetv1:...}` names an asset and is accepted.
fn check_references(
    p: &mut Problems,
    value: &Value,
    path: &Path<'_>,
    known: &dyn Fn(&str) -> bool,
) {
    match value {
        Value::String(text) => {
            let mut rest = text.as_str();
            while let Some(start) = rest.find("%{") {
                let after = &rest[start + 2..];
                let Some(end) = after.find('}') else {
                    p.add(path, "has an unclosed `%{` reference");
                    break;
                };
                let name = after[..end].trim();
                if name.is_empty() {
                    p.add(path, "has an empty `%{}` reference");
                } else if let Some(asset) = name.strip_prefix("assetv1:") {
                    if asset.trim().is_empty() {
                        p.add(path, "has an `%{assetv1:}` reference without an asset name");
                    }
                } else if !known(name) {
                    p.add(
                        path,
                        format!(
                            "references `%{{{name}}}`, which is not a variable of the \
                        card template or the flow"
                        ),
                    );
                }
                rest = &after[end + 1..];
            }
        }
        Value::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                check_references(p, item, &path.index(i), known);
            }
        }
        Value::Object(map) => {
            for (key, item) in map {
                check_references(p, item, &path.key(key), known);
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests;
