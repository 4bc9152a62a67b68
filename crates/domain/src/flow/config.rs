//! Action Flow configuration validation (docs/api.md, Configuration validation): every
//! problem at once, each with the JSON path of the offending value
//! (`config.steps.s1.properties.cardTemplateId`).
//!
//! The configuration stays a JSON document: fields this service does not know are kept as
//! they are. What it does know is checked:
//! - `type` is `card`; `version`, when present, is a string;
//! - `steps` is a map; each step's `id` equals its key, its `type` is a known [`StepType`], each
//!   `next` names a step; `initialSteps` is non-empty and names steps; every step is reachable
//!   from `initialSteps`; the step graph has no cycle;
//! - a `create-card` step names a card template of `cardTemplates`;
//! - a card template has a non-empty `metadata.cardName`, a `metadata.delivery.priority` of
//!   1–10 when given, views whose element keys are unique, known element types with their
//!   required attributes (unknown element types pass untouched: the SDKs render them), and
//!   `%{name}` references that resolve to a variable of the template or of the flow
//!   (`%{assetv1:name}` references an asset and is always accepted);
//! - a variable definition has a known `type` and `source`, a default of that type (a date is
//!   RFC 3339 or matches `defaultFormatterOption`), and a boolean `required` when given.

use std::collections::{BTreeMap, HashMap, HashSet};

use serde_json::{Map, Value};

use crate::FieldError;

/// Step types the engine can run. Adding a step type means adding a variant here, its
/// validation in this module (`validate_step_properties`), and its execution in the engine.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StepType {
    /// `create-card`: creates a card for each targeted user from the card template its
    /// `properties.cardTemplateId` names.
    CreateCard,
}

crate::spelling::spelled!(StepType {
    CreateCard => "create-card",
});

/// Variable types of definitions (docs/api.md, Configuration validation).
pub const VARIABLE_TYPES: [&str; 4] = ["number", "string", "date", "boolean"];
/// Variable sources: sent with the trigger (`event`), fixed (`static`), computed by the
/// template's default script (`script`, which a trigger may not override).
pub const VARIABLE_SOURCES: [&str; 3] = ["event", "static", "script"];

/// Element types whose attributes this service checks, with the attribute each requires.
const KNOWN_ELEMENTS: [(&str, &str); 4] = [
    ("headline", "text"),
    ("text", "text"),
    ("image", "src"),
    ("submitButton", "text"),
];

/// The JSON path of the value being looked at, as a chain of borrowed segments: it costs
/// nothing until a problem is reported, when it is rendered
/// (`config.steps.s1.next[0]`, `config.cardTemplates["a b"]`).
#[derive(Clone, Copy)]
enum Path<'a> {
    Root(&'a str),
    Key(&'a Path<'a>, &'a str),
    Index(&'a Path<'a>, usize),
}

impl<'a> Path<'a> {
    fn key(&'a self, key: &'a str) -> Path<'a> {
        Path::Key(self, key)
    }

    fn index(&'a self, index: usize) -> Path<'a> {
        Path::Index(self, index)
    }
}

impl std::fmt::Display for Path<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Path::Root(name) => f.write_str(name),
            Path::Key(parent, key) => {
                let plain = !key.is_empty()
                    && key
                        .chars()
                        .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
                if plain {
                    write!(f, "{parent}.{key}")
                } else {
                    write!(
                        f,
                        "{parent}[{}]",
                        serde_json::to_string(key).unwrap_or_default()
                    )
                }
            }
            Path::Index(parent, index) => write!(f, "{parent}[{index}]"),
        }
    }
}

/// Collected problems.
struct Problems {
    errors: Vec<FieldError>,
}

impl Problems {
    fn add(&mut self, path: &Path<'_>, message: impl Into<String>) {
        self.errors.push(FieldError::new(path.to_string(), message));
    }
}

fn describe(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// Validates a configuration. `path` is the name the configuration has in the request
/// (`config`). Returns every problem found, ordered by path.
pub fn validate(config: &Value, path: &str) -> Vec<FieldError> {
    let mut p = Problems { errors: Vec::new() };
    let root = Path::Root(path);
    let Some(config) = config.as_object() else {
        p.add(
            &root,
            format!("must be an object, not {}", describe(config)),
        );
        return p.errors;
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
    steps(&mut p, config, &root, &templates);
    // A stable order for callers: by path (the sort keeps problems of one path in order).
    p.errors.sort_by(|a, b| a.field.cmp(&b.field));
    p.errors
}

fn show(value: &Value) -> String {
    match value {
        Value::String(s) => format!("`{s}`"),
        other => describe(other).to_owned(),
    }
}

fn object<'v>(
    p: &mut Problems,
    value: Option<&'v Value>,
    path: &Path<'_>,
    required: bool,
) -> Option<&'v Map<String, Value>> {
    match value {
        Some(Value::Object(map)) => Some(map),
        None if !required => None,
        None => {
            p.add(path, "is required and must be an object");
            None
        }
        Some(other) => {
            p.add(path, format!("must be an object, not {}", describe(other)));
            None
        }
    }
}

// ---- steps ----

fn steps(
    p: &mut Problems,
    config: &Map<String, Value>,
    root: &Path<'_>,
    templates: &HashSet<&str>,
) {
    let steps_path = root.key("steps");
    let initial_path = root.key("initialSteps");
    let Some(steps) = object(p, config.get("steps"), &steps_path, true) else {
        // Without steps, initialSteps cannot be checked against them; still check its shape.
        string_list(p, config.get("initialSteps"), &initial_path, true);
        return;
    };
    let mut graph: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for (id, step) in steps {
        let step_path = steps_path.key(id);
        let Some(step) = object(p, Some(step), &step_path, true) else {
            graph.insert(id, Vec::new());
            continue;
        };
        match step.get("id") {
            Some(Value::String(own)) if own == id => {}
            Some(Value::String(own)) => p.add(
                &step_path.key("id"),
                format!("must equal the step's key `{id}`, not `{own}`"),
            ),
            Some(other) => p.add(
                &step_path.key("id"),
                format!("must be a string, not {}", describe(other)),
            ),
            None => p.add(
                &step_path.key("id"),
                format!("is required and must be `{id}`"),
            ),
        }
        let step_type = match step.get("type") {
            Some(Value::String(t)) => match StepType::parse(t) {
                Some(known) => Some(known),
                None => {
                    let known: Vec<&str> = StepType::ALL.iter().map(|t| t.as_str()).collect();
                    p.add(
                        &step_path.key("type"),
                        format!("unknown step type `{t}` (known: {})", known.join(", ")),
                    );
                    None
                }
            },
            Some(other) => {
                p.add(
                    &step_path.key("type"),
                    format!("must be a string, not {}", describe(other)),
                );
                None
            }
            None => {
                p.add(&step_path.key("type"), "is required");
                None
            }
        };
        let next_path = step_path.key("next");
        let next = string_list(p, step.get("next"), &next_path, false);
        let mut edges = Vec::with_capacity(next.len());
        for (i, target) in next {
            if steps.contains_key(target) {
                edges.push(target);
            } else {
                p.add(&next_path.index(i), format!("names no step: `{target}`"));
            }
        }
        graph.insert(id, edges);
        if let Some(step_type) = step_type {
            validate_step_properties(p, step_type, step, &step_path, templates);
        }
    }

    let mut roots = Vec::new();
    let initial = string_list(p, config.get("initialSteps"), &initial_path, true);
    if config
        .get("initialSteps")
        .is_some_and(|v| v.as_array().is_some_and(Vec::is_empty))
    {
        p.add(&initial_path, "must name at least one step");
    }
    for (i, id) in initial {
        if steps.contains_key(id) {
            roots.push(id);
        } else {
            p.add(&initial_path.index(i), format!("names no step: `{id}`"));
        }
    }
    if !roots.is_empty() {
        reachability_and_cycles(p, &graph, &roots, &steps_path);
    }
}

fn validate_step_properties(
    p: &mut Problems,
    step_type: StepType,
    step: &Map<String, Value>,
    step_path: &Path<'_>,
    templates: &HashSet<&str>,
) {
    let props_path = step_path.key("properties");
    match step_type {
        StepType::CreateCard => {
            let Some(props) = object(p, step.get("properties"), &props_path, true) else {
                return;
            };
            let template_path = props_path.key("cardTemplateId");
            match props.get("cardTemplateId") {
                Some(Value::String(id)) if templates.contains(id.as_str()) => {}
                Some(Value::String(id)) => {
                    p.add(&template_path, format!("names no card template: `{id}`"))
                }
                Some(other) => p.add(
                    &template_path,
                    format!("must be a string, not {}", describe(other)),
                ),
                None => p.add(&template_path, "is required"),
            }
            let output_path = props_path.key("output");
            if let Some(output) = object(p, props.get("output"), &output_path, false) {
                if output.get("type").is_some_and(|t| !t.is_string()) {
                    p.add(&output_path.key("type"), "must be a string");
                }
            }
        }
    }
}

/// Every step reachable from the roots; no cycle. Iterative DFS with colours.
fn reachability_and_cycles(
    p: &mut Problems,
    graph: &BTreeMap<&str, Vec<&str>>,
    roots: &[&str],
    steps_path: &Path<'_>,
) {
    #[derive(Clone, Copy, PartialEq)]
    enum Colour {
        White,
        Grey,
        Black,
    }
    let mut colour: HashMap<&str, Colour> = graph.keys().map(|k| (*k, Colour::White)).collect();
    let mut reported_cycle = HashSet::new();
    for root in roots {
        if colour.get(root) != Some(&Colour::White) {
            continue;
        }
        // Stack of (node, index of the next edge to follow).
        let mut stack: Vec<(&str, usize)> = vec![(root, 0)];
        colour.insert(root, Colour::Grey);
        while let Some((node, edge)) = stack.last_mut() {
            let edges = graph.get(node).map(Vec::as_slice).unwrap_or(&[]);
            if let Some(next) = edges.get(*edge) {
                *edge += 1;
                let (from, to) = (*node, *next);
                match colour.get(to).copied() {
                    Some(Colour::White) => {
                        colour.insert(to, Colour::Grey);
                        stack.push((to, 0));
                    }
                    Some(Colour::Grey) if reported_cycle.insert((from, to)) => {
                        p.add(
                            &steps_path.key(from).key("next"),
                            format!("`{from}` → `{to}` closes a cycle; steps must form a directed acyclic graph"),
                        );
                    }
                    _ => {}
                }
            } else {
                colour.insert(node, Colour::Black);
                stack.pop();
            }
        }
    }
    for (id, c) in &colour {
        if *c == Colour::White {
            p.add(&steps_path.key(id), "is not reachable from initialSteps");
        }
    }
}

/// A list of strings: (index, value) of the valid entries; problems for the others.
fn string_list<'v>(
    p: &mut Problems,
    value: Option<&'v Value>,
    path: &Path<'_>,
    required: bool,
) -> Vec<(usize, &'v str)> {
    match value {
        None | Some(Value::Null) if required => {
            p.add(
                path,
                "is required and must be a non-empty array of step ids",
            );
            Vec::new()
        }
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(items)) => items
            .iter()
            .enumerate()
            .filter_map(|(i, item)| match item {
                Value::String(s) => Some((i, s.as_str())),
                other => {
                    p.add(
                        &path.index(i),
                        format!("must be a string, not {}", describe(other)),
                    );
                    None
                }
            })
            .collect(),
        Some(other) => {
            p.add(
                path,
                format!("must be an array of strings, not {}", describe(other)),
            );
            Vec::new()
        }
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

/// Checks that `value` has the variable type `var_type`. Shared with the trigger, which
/// type-checks the variables a request sends.
pub fn check_value(
    var_type: &str,
    value: &Value,
    date_pattern: Option<&str>,
) -> Result<(), String> {
    let ok = match (var_type, value) {
        (_, Value::Null) => true,
        ("string", Value::String(_)) => true,
        ("number", Value::Number(_)) => true,
        ("number", Value::String(s)) => s.trim().parse::<f64>().is_ok_and(f64::is_finite),
        ("boolean", Value::Bool(_)) => true,
        ("boolean", Value::String(s)) => s == "true" || s == "false",
        ("date", Value::String(s)) => {
            crate::time::parse_timestamp(s).is_ok()
                || date_pattern.is_some_and(|pat| matches_pattern(s, pat))
        }
        _ => false,
    };
    if ok {
        Ok(())
    } else if var_type == "date" {
        Err(match date_pattern {
            Some(pat) => format!(
                "must be a date: RFC 3339 or the pattern `{pat}`, not {}",
                show(value)
            ),
            None => format!("must be an RFC 3339 date, not {}", show(value)),
        })
    } else {
        Err(format!("must be a {var_type}, not {}", show(value)))
    }
}

/// Whether `text` fits a date pattern such as `dd/MM/yyyy HH:mm`: each run of a pattern
/// letter (y, M, d, H, h, m, s, S) stands for that many digits (`yyyy` four, `M` one or two
/// with `MM` exactly two), `a` for AM/PM; anything else must appear literally.
pub fn matches_pattern(text: &str, pattern: &str) -> bool {
    let pat: Vec<char> = pattern.chars().collect();
    let txt: Vec<char> = text.chars().collect();
    let (mut i, mut j) = (0, 0);
    while i < pat.len() {
        let c = pat[i];
        let mut run = 1;
        while i + run < pat.len() && pat[i + run] == c {
            run += 1;
        }
        match c {
            'y' | 'M' | 'd' | 'H' | 'h' | 'm' | 's' | 'S' => {
                let digits = txt[j..].iter().take_while(|c| c.is_ascii_digit()).count();
                // A single letter means "one or two digits"; more letters mean exactly that many.
                let take = if run == 1 { digits.min(2) } else { run };
                if digits < take || take == 0 {
                    return false;
                }
                j += take;
            }
            'a' => {
                let rest: String = txt[j..]
                    .iter()
                    .take(2)
                    .collect::<String>()
                    .to_ascii_uppercase();
                if rest != "AM" && rest != "PM" {
                    return false;
                }
                j += 2;
            }
            literal => {
                for _ in 0..run {
                    if txt.get(j) != Some(&literal) {
                        return false;
                    }
                    j += 1;
                }
            }
        }
        i += run;
    }
    j == txt.len()
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
                    if !priority.as_i64().is_some_and(|n| (1..=10).contains(&n)) {
                        p.add(
                            &delivery_path.key("priority"),
                            format!("must be a whole number from 1 to 10, not {priority}"),
                        );
                    }
                }
            }
        }

        let default_view_path = template_path.key("defaultView");
        if let Some(view) = object(p, template.get("defaultView"), &default_view_path, false) {
            check_view(p, view, &default_view_path, &known);
        }
        let subviews_path = template_path.key("subviews");
        if let Some(subviews) = object(p, template.get("subviews"), &subviews_path, false) {
            for (name, view) in subviews {
                let view_path = subviews_path.key(name);
                if let Some(view) = object(p, Some(view), &view_path, true) {
                    check_view(p, view, &view_path, &known);
                }
            }
        }
        let notification_path = template_path.key("notification");
        if object(p, template.get("notification"), &notification_path, false).is_some() {
            if let Some(notification) = template.get("notification") {
                check_references(p, notification, &notification_path, &known);
            }
        }
    }
    templates.keys().map(String::as_str).collect()
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
            None | Some(Value::Null) => continue,
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
            match element.get("key") {
                Some(Value::String(key)) if !key.is_empty() => {
                    if let Some((first_list, first_index)) = keys.insert(key.as_str(), (list, i)) {
                        let first = path.key(first_list);
                        let first = first.index(first_index);
                        p.add(&element_path.key("key"), format!("`{key}` is already the key of {first}; keys are unique within a view"));
                    }
                }
                Some(Value::String(_)) | None => p.add(
                    &element_path.key("key"),
                    "is required and must not be empty",
                ),
                Some(other) => p.add(
                    &element_path.key("key"),
                    format!("must be a string, not {}", describe(other)),
                ),
            }
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
                    p.add(path, format!("references `%{{{name}}}`, which is not a variable of the card template or the flow"));
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
