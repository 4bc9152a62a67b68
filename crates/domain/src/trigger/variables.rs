//! Variables of a trigger: what the request sends, checked against the flow's definitions,
//! and the card content rendered with them (docs/api.md, Triggers: request > flow definition >
//! template default; required variables must be sent; script variables cannot be; with
//! `strictVariables`, unknown variables fail the request).

use std::collections::BTreeMap;

use serde_json::{Map, Value};

use super::request::{Payload, VariableValue};
use crate::card::content::{push_json_escaped, push_json_string};
use crate::flow::values::check_value;
use crate::FieldError;

/// A variable's value on each platform.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlatformValues {
    /// On Web: the value sent.
    pub web: String,
    /// On iOS: `valueIos` when sent, else the value.
    pub ios: String,
    /// On Android: `valueAndroid` when sent, else the value.
    pub android: String,
}

/// A platform a card is rendered for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Platform {
    /// `Web`.
    Web,
    /// `iOS`.
    Ios,
    /// `Android`.
    Android,
}

impl PlatformValues {
    fn on(&self, platform: Platform) -> &str {
        match platform {
            Platform::Web => &self.web,
            Platform::Ios => &self.ios,
            Platform::Android => &self.android,
        }
    }
}

/// The values a trigger resolved: sent values, else flow-level defaults. Template defaults
/// apply when a card of that template is rendered.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ResolvedVariables {
    /// By variable name: the value as text on each platform (strings as they are, numbers and
    /// booleans as JSON writes them).
    pub values: BTreeMap<String, PlatformValues>,
}

fn text(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

/// Every definition in the configuration: flow-level first, then each template's.
fn definitions(config: &Value) -> Vec<(&str, &Map<String, Value>)> {
    let templates = config.get("cardTemplates").and_then(Value::as_object);
    std::iter::once(config.get("variables"))
        .chain(
            templates
                .into_iter()
                .flat_map(|t| t.values().map(|template| template.get("variables"))),
        )
        .filter_map(|defs| defs.and_then(Value::as_object))
        .flat_map(|defs| {
            defs.iter()
                .filter_map(|(name, def)| def.as_object().map(|d| (name.as_str(), d)))
        })
        .collect()
}

/// Checks the sent variables against the configuration; `path` is the element's payload
/// path (`flows[0].payload`).
///
/// A variable is found among the flow's `variables`, then each card template's. Problems, all
/// at once, at `{path}.variables.<name>` (with `.valueIos` or `.valueAndroid` for those): a
/// value not of the definition's type (`string` when it names none), a script variable sent,
/// a variable the flow does not define when `strict` (ignored otherwise), and a flow-level
/// variable with `required: true` that was not sent, or without a default that a `wait` step
/// reads (`untilVariable`). Flow-level defaults fill in the variables not sent; template
/// defaults apply when a card is rendered.
pub fn resolve(
    config: &Value,
    payload: &Payload,
    strict: bool,
    path: &str,
) -> Result<ResolvedVariables, Vec<FieldError>> {
    let mut errors = Vec::new();
    let defs = definitions(config);
    let find = |name: &str| defs.iter().find(|(n, _)| *n == name).map(|(_, d)| *d);
    let mut values = BTreeMap::new();
    for (name, sent) in &payload.variables {
        // Written only for a problem: most variables have none.
        let var_path = || format!("{path}.variables.{name}");
        let Some(def) = find(name) else {
            if strict {
                errors.push(FieldError::new(
                    var_path(),
                    "is not a variable of this flow (strictVariables is on)",
                ));
            }
            continue;
        };
        if let Some(value) = sent_value(&mut errors, def, sent, &var_path) {
            values.insert(name.clone(), value);
        }
    }
    fill_in_flow_defaults(&mut errors, config, payload, &mut values, path);
    check_wait_variables(&mut errors, config, payload, &values, path);
    if errors.is_empty() {
        Ok(ResolvedVariables { values })
    } else {
        Err(errors)
    }
}

/// A sent variable's values per platform, when each is of its definition's type (and it is
/// not a script variable, which cannot be sent).
fn sent_value(
    errors: &mut Vec<FieldError>,
    def: &Map<String, Value>,
    sent: &VariableValue,
    var_path: &dyn Fn() -> String,
) -> Option<PlatformValues> {
    if def.get("source").and_then(Value::as_str) == Some("script") {
        errors.push(FieldError::new(
            var_path(),
            "is a script variable: its value comes from the template's script and cannot be \
                sent",
        ));
        return None;
    }
    let var_type = def.get("type").and_then(Value::as_str).unwrap_or("string");
    let pattern = def.get("defaultFormatterOption").and_then(Value::as_str);
    let mut ok = true;
    for (suffix, value) in [
        ("", Some(&sent.value)),
        (".valueIos", sent.ios.as_ref()),
        (".valueAndroid", sent.android.as_ref()),
    ] {
        if let Some(value) = value {
            if let Err(message) = check_value(var_type, value, pattern) {
                errors.push(FieldError::new(format!("{}{suffix}", var_path()), message));
                ok = false;
            }
        }
    }
    if !ok {
        return None;
    }
    let web = text(&sent.value);
    Some(PlatformValues {
        ios: sent.ios.as_ref().map(text).unwrap_or_else(|| web.clone()),
        android: sent
            .android
            .as_ref()
            .map(text)
            .unwrap_or_else(|| web.clone()),
        web,
    })
}

/// Required variables must be sent; flow-level defaults fill in the rest.
fn fill_in_flow_defaults(
    errors: &mut Vec<FieldError>,
    config: &Value,
    payload: &Payload,
    values: &mut BTreeMap<String, PlatformValues>,
    path: &str,
) {
    let Some(flow_defs) = config.get("variables").and_then(Value::as_object) else {
        return;
    };
    for (name, def) in flow_defs {
        if values.contains_key(name) || payload.variables.iter().any(|(n, _)| n == name) {
            continue;
        }
        if def.get("required").and_then(Value::as_bool) == Some(true) {
            errors.push(FieldError::new(
                format!("{path}.variables.{name}"),
                "is required by the flow",
            ));
        } else if let Some(default) = def.get("default").filter(|d| !d.is_null()) {
            let v = text(default);
            values.insert(
                name.clone(),
                PlatformValues {
                    web: v.clone(),
                    ios: v.clone(),
                    android: v,
                },
            );
        }
    }
}

/// A wait on a variable needs its date: without a value or a default it has no deadline.
/// A problem already found at the same field is not reported again.
fn check_wait_variables(
    errors: &mut Vec<FieldError>,
    config: &Value,
    payload: &Payload,
    values: &BTreeMap<String, PlatformValues>,
    path: &str,
) {
    let sent = |name: &str| payload.variables.iter().any(|(n, _)| n == name);
    for problem in crate::flow::steps::missing_wait_variables(config, &sent, path) {
        if !errors.iter().any(|e| e.field == problem.field) {
            errors.push(problem);
        }
    }
    let value_of = |name: &str| values.get(name).map(|v| v.web.clone());
    for problem in crate::flow::steps::unreadable_wait_dates(config, &value_of, path) {
        if !errors.iter().any(|e| e.field == problem.field) {
            errors.push(problem);
        }
    }
}

/// The template's own default for a variable, as text.
fn template_default(template: &Value, name: &str) -> Option<String> {
    template
        .get("variables")?
        .get(name)?
        .get("default")
        .filter(|d| !d.is_null())
        .map(text)
}

/// A part of a template string.
enum Part<'a> {
    /// Text as it is.
    Text(&'a str),
    /// A `%{name}`: its name, trimmed, and its text.
    Variable { name: &'a str, raw: &'a str },
}

/// The parts of template string `s`, in order. `%{assetv1:...}` (left for the SDK) and a `%{`
/// never closed are text.
fn for_each_part<'a>(s: &'a str, mut each: impl FnMut(Part<'a>)) {
    let mut rest = s;
    while let Some(start) = rest.find("%{") {
        each(Part::Text(&rest[..start]));
        let after = &rest[start + 2..];
        let Some(end) = after.find('}') else {
            each(Part::Text(&rest[start..]));
            return;
        };
        let name = after[..end].trim();
        let raw = &rest[start..start + 2 + end + 1];
        each(if name.starts_with("assetv1:") {
            Part::Text(raw)
        } else {
            Part::Variable { name, raw }
        });
        rest = &after[end + 1..];
    }
    each(Part::Text(rest));
}

/// Replaces every `%{name}` in the strings below `value`; `%{assetv1:...}` stays for the SDK.
fn substitute(value: &Value, lookup: &dyn Fn(&str) -> Option<String>) -> Value {
    match value {
        Value::String(s) if s.contains("%{") => {
            let mut out = String::with_capacity(s.len());
            for_each_part(s, |part| match part {
                Part::Text(text) => out.push_str(text),
                Part::Variable { name, raw } => match lookup(name) {
                    Some(v) => out.push_str(&v),
                    None => out.push_str(raw),
                },
            });
            Value::String(out)
        }
        Value::Array(items) => Value::Array(items.iter().map(|i| substitute(i, lookup)).collect()),
        Value::Object(map) => Value::Object(
            map.iter()
                .map(|(k, v)| (k.clone(), substitute(v, lookup)))
                .collect(),
        ),
        other => other.clone(),
    }
}

/// A card's content on one platform: the template's views and notification with variables
/// substituted (a variable without a value renders empty).
pub fn render(template: &Value, variables: &ResolvedVariables, platform: Platform) -> Value {
    let lookup = |name: &str| {
        Some(
            variables
                .values
                .get(name)
                .map(|v| v.on(platform).to_owned())
                .or_else(|| template_default(template, name))
                .unwrap_or_default(),
        )
    };
    let mut out = Map::new();
    for key in ["defaultView", "subviews", "notification"] {
        if let Some(part) = template.get(key) {
            out.insert(key.to_owned(), substitute(part, &lookup));
        }
    }
    Value::Object(out)
}

/// A card template's view (the parts [`render`] renders) compiled for rendering to JSON text:
/// the JSON text of the parts with a gap at each `%{name}`, filled with the variable's value
/// escaped. It renders the text `serde_json` writes of [`render`]'s value: one string built,
/// where a JSON tree was built, serialised and freed for each card.
#[derive(Debug, Clone, PartialEq)]
pub struct ViewTemplate {
    pieces: Vec<Piece>,
    notifies: bool,
}

#[derive(Debug, Clone, PartialEq)]
enum Piece {
    /// JSON text, as it is.
    Json(String),
    /// A variable's value inside a JSON string: the template's own default when the trigger
    /// resolved none.
    Variable { name: String, default: String },
}

impl ViewTemplate {
    /// Compiles a card template (a value of the configuration's `cardTemplates`): its
    /// `defaultView`, `subviews` and `notification`, each gap taking the template's own
    /// default when the trigger resolved no value. Parts the template lacks are left out.
    pub fn compile(template: &Value) -> Self {
        let mut parts = Map::new();
        for key in ["defaultView", "subviews", "notification"] {
            if let Some(part) = template.get(key) {
                parts.insert(key.to_owned(), part.clone());
            }
        }
        let mut compiler = Compiler {
            template,
            pieces: Vec::new(),
            text: String::new(),
        };
        compiler.value(&Value::Object(parts));
        compiler.flush();
        ViewTemplate {
            pieces: compiler.pieces,
            notifies: template.get("notification").is_some(),
        }
    }

    /// Whether the view has a notification.
    pub fn notifies(&self) -> bool {
        self.notifies
    }

    /// Whether the view renders alike on every platform with `variables`: none of its
    /// variables has a platform's own value.
    pub fn same_on_every_platform(&self, variables: &ResolvedVariables) -> bool {
        self.pieces.iter().all(|piece| match piece {
            Piece::Json(_) => true,
            Piece::Variable { name, .. } => variables
                .values
                .get(name)
                .is_none_or(|v| v.web == v.ios && v.web == v.android),
        })
    }

    /// The view on `platform`, as JSON text.
    pub fn render(&self, variables: &ResolvedVariables, platform: Platform) -> String {
        let mut out = String::with_capacity(self.len_hint());
        for piece in &self.pieces {
            match piece {
                Piece::Json(text) => out.push_str(text),
                Piece::Variable { name, default } => {
                    let value = variables
                        .values
                        .get(name)
                        .map_or(default.as_str(), |v| v.on(platform));
                    push_json_escaped(&mut out, value);
                }
            }
        }
        out
    }

    fn len_hint(&self) -> usize {
        self.pieces
            .iter()
            .map(|p| match p {
                Piece::Json(text) => text.len(),
                Piece::Variable { .. } => 16,
            })
            .sum()
    }
}

struct Compiler<'a> {
    template: &'a Value,
    pieces: Vec<Piece>,
    /// JSON text not yet in a piece.
    text: String,
}

impl Compiler<'_> {
    fn flush(&mut self) {
        if !self.text.is_empty() {
            self.pieces
                .push(Piece::Json(std::mem::take(&mut self.text)));
        }
    }

    fn value(&mut self, value: &Value) {
        match value {
            Value::Object(map) => {
                self.text.push('{');
                for (i, (key, item)) in map.iter().enumerate() {
                    if i > 0 {
                        self.text.push(',');
                    }
                    push_json_string(&mut self.text, key);
                    self.text.push(':');
                    self.value(item);
                }
                self.text.push('}');
            }
            Value::Array(items) => {
                self.text.push('[');
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        self.text.push(',');
                    }
                    self.value(item);
                }
                self.text.push(']');
            }
            Value::String(s) if s.contains("%{") => self.templated(s),
            Value::String(s) => push_json_string(&mut self.text, s),
            other => self.text.push_str(&other.to_string()),
        }
    }

    /// A string with `%{...}`, split as [`substitute`] splits it ([`for_each_part`]).
    fn templated(&mut self, s: &str) {
        self.text.push('"');
        for_each_part(s, |part| match part {
            Part::Text(text) => push_json_escaped(&mut self.text, text),
            Part::Variable { name, .. } => {
                self.flush();
                self.pieces.push(Piece::Variable {
                    name: name.to_owned(),
                    default: template_default(self.template, name).unwrap_or_default(),
                });
            }
        });
        self.text.push('"');
    }
}
