//! A configuration's cards as its end users would see them, before anything is sent: each
//! card template rendered for the web with sample values of its variables, exactly as a
//! trigger renders it ([`crate::trigger::variables`]).

use std::collections::BTreeMap;

use serde_json::{Map, Value};

use super::{FlowService, FlowVersion, VersionRef};
use crate::id::{EnvironmentId, FlowId};
use crate::tenancy::Principal;

use crate::trigger::request::{Payload, VariableValue};
use crate::trigger::variables::{render, resolve, Platform, PlatformValues, ResolvedVariables};
use crate::{DomainError, FieldError};

/// A variable the preview fills: its name, its declared type, and the sample used.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    /// The variable's name.
    pub name: String,
    /// Its declared `type` (`string` when it names none).
    pub var_type: String,
    /// The value the cards are rendered with.
    pub value: Value,
}

/// One card template rendered.
#[derive(Debug, Clone, PartialEq)]
pub struct CardPreview {
    /// Its id in `cardTemplates`.
    pub template_id: String,
    /// `metadata.cardName`, else its id.
    pub name: String,
    /// The rendered parts: `defaultView`, `subviews` and `notification`, as a card holds them.
    pub content: Value,
}

/// Every card template of a configuration rendered with the samples.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Preview {
    /// Each variable of the flow and its templates, in name order, with the value used.
    pub samples: Vec<Sample>,
    /// Each card template, in id order.
    pub cards: Vec<CardPreview>,
    /// What a trigger would refuse of the samples, each at `variables.<name>`.
    pub problems: Vec<FieldError>,
}

/// A sample of a declared type, for a variable given no value and no default.
fn placeholder(name: &str, var_type: &str) -> Value {
    match var_type {
        "number" => Value::from(1),
        "boolean" => Value::Bool(true),
        "date" => Value::String("2026-12-24T09:00:00Z".into()),
        _ => Value::String(format!("[{name}]")),
    }
}

/// The variables of `config` (the flow's, then each template's, first definition winning),
/// with their type and default.
fn declared(config: &Value) -> Vec<(String, String, Option<Value>)> {
    let mut out: Vec<(String, String, Option<Value>)> = Vec::new();
    let templates = config.get("cardTemplates").and_then(Value::as_object);
    let sets = std::iter::once(config.get("variables")).chain(
        templates
            .into_iter()
            .flat_map(|t| t.values().map(|template| template.get("variables"))),
    );
    for defs in sets.filter_map(|d| d.and_then(Value::as_object)) {
        for (name, def) in defs {
            if out.iter().any(|(n, _, _)| n == name) {
                continue;
            }
            // A script variable's value comes from its template: it cannot be sent.
            if def.get("source").and_then(Value::as_str) == Some("script") {
                continue;
            }
            let var_type = def.get("type").and_then(Value::as_str).unwrap_or("string");
            let default = def.get("default").filter(|d| !d.is_null()).cloned();
            out.push((name.clone(), var_type.to_owned(), default));
        }
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

/// The cards of `config` rendered with `given` values (by variable name; a variable not
/// given takes its default, else a placeholder of its type). Never fails: values a trigger
/// would refuse are [`Preview::problems`], and the cards are rendered with what was given.
///
/// ```
/// use workbench_domain::flow::preview::preview;
/// use workbench_domain::serde_json::{json, Map};
///
/// let config = json!({"type": "card", "initialSteps": ["s"],
///     "variables": {"firstName": {"type": "string", "default": "there"}},
///     "steps": {"s": {"id": "s", "type": "create-card", "properties": {"cardTemplateId": "t"}}},
///     "cardTemplates": {"t": {"metadata": {"cardName": "Hello"},
///         "defaultView": {"content": [{"key": "h", "type": "headline",
///             "attributes": {"text": "Hi %{firstName}"}}]}}}});
/// let shown = preview(&config, &Map::new());
/// let headline = |p: &workbench_domain::flow::preview::Preview| {
///     p.cards[0].content["defaultView"]["content"][0]["attributes"]["text"].clone()
/// };
/// assert_eq!(headline(&shown), "Hi there");
/// let mut given = Map::new();
/// given.insert("firstName".into(), json!("Ada"));
/// let shown = preview(&config, &given);
/// assert_eq!(headline(&shown), "Hi Ada");
/// ```
pub fn preview(config: &Value, given: &Map<String, Value>) -> Preview {
    let samples: Vec<Sample> = declared(config)
        .into_iter()
        .map(|(name, var_type, default)| {
            let value = given
                .get(&name)
                .cloned()
                .or(default)
                .unwrap_or_else(|| placeholder(&name, &var_type));
            Sample {
                name,
                var_type,
                value,
            }
        })
        .collect();
    let payload = Payload {
        variables: samples
            .iter()
            .map(|s| {
                let value = VariableValue {
                    value: s.value.clone(),
                    ios: None,
                    android: None,
                };
                (s.name.clone(), value)
            })
            .collect(),
        ..Payload::default()
    };
    let (variables, problems) = match resolve(config, &payload, false, "") {
        Ok(v) => (v, Vec::new()),
        Err(problems) => {
            // Rendered with what was given, as text, so the user sees where each value goes.
            let values = samples
                .iter()
                .map(|s| {
                    let text = match &s.value {
                        Value::String(t) => t.clone(),
                        other => other.to_string(),
                    };
                    let on_each = PlatformValues {
                        web: text.clone(),
                        ios: text.clone(),
                        android: text,
                    };
                    (s.name.clone(), on_each)
                })
                .collect();
            (ResolvedVariables { values }, problems)
        }
    };
    let problems = problems
        .into_iter()
        .map(|p| FieldError::new(p.field.trim_start_matches('.'), p.message))
        .collect();
    let mut cards = Vec::new();
    if let Some(templates) = config.get("cardTemplates").and_then(Value::as_object) {
        for (id, template) in templates {
            let name = template
                .pointer("/metadata/cardName")
                .and_then(Value::as_str)
                .unwrap_or(id)
                .to_owned();
            cards.push(CardPreview {
                template_id: id.clone(),
                name,
                content: render(template, &variables, Platform::Web),
            });
        }
    }
    Preview {
        samples,
        cards,
        problems,
    }
}

/// Values typed in a form, by variable name, read by each variable's declared type: a
/// number or a boolean that reads as one becomes one; anything else stays text (and a
/// trigger would refuse it, which [`preview`] reports).
pub fn typed_values(config: &Value, texts: &BTreeMap<String, String>) -> Map<String, Value> {
    let types: BTreeMap<String, String> = declared(config)
        .into_iter()
        .map(|(name, var_type, _)| (name, var_type))
        .collect();
    texts
        .iter()
        .filter_map(|(name, text)| {
            let var_type = types.get(name)?;
            let value = match var_type.as_str() {
                "number" => text
                    .trim()
                    .parse::<f64>()
                    .ok()
                    .and_then(serde_json::Number::from_f64)
                    .map(|n| match n.as_f64() {
                        Some(f) if f.fract() == 0.0 && f.abs() < 9.0e15 => Value::from(f as i64),
                        _ => Value::Number(n),
                    })
                    .unwrap_or_else(|| Value::String(text.clone())),
                "boolean" => match text.trim() {
                    "true" => Value::Bool(true),
                    "false" => Value::Bool(false),
                    _ => Value::String(text.clone()),
                },
                _ => Value::String(text.clone()),
            };
            Some((name.clone(), value))
        })
        .collect()
}

impl FlowService {
    /// The cards of a version of the flow rendered with sample values typed in a form
    /// ([`typed_values`], [`preview`]), with the version. Needs [`Permission::ActionFlowsRead`];
    /// fails as [`get_config`](FlowService::get_config) does.
    ///
    /// [`Permission::ActionFlowsRead`]: crate::tenancy::Permission::ActionFlowsRead
    pub async fn preview(
        &self,
        who: &Principal,
        env: &EnvironmentId,
        id: &FlowId,
        version: VersionRef,
        texts: &BTreeMap<String, String>,
    ) -> Result<(FlowVersion, Preview), DomainError> {
        let (_, v) = self.get_config(who, env, id, version).await?;
        let given = typed_values(&v.config, texts);
        let shown = preview(&v.config, &given);
        Ok((v, shown))
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn config() -> Value {
        json!({"type": "card", "initialSteps": ["s"],
        "variables": {
            "firstName": {"type": "string", "source": "event", "default": "there"},
            "dueDate": {"type": "date", "source": "event", "required": true}
        },
        "steps": {"s": {"id": "s", "type": "create-card",
                        "properties": {"cardTemplateId": "t"}}},
        "cardTemplates": {"t": {
            "metadata": {"cardName": "Payment reminder"},
            "variables": {"amount": {"type": "number", "default": 0},
                          "code": {"type": "string", "source": "script"}},
            "defaultView": {"content": [
                {"key": "h", "type": "headline", "attributes": {"text": "Hi %{firstName}"}},
                {"key": "b", "type": "text",
                 "attributes": {"text": "%{amount} is due on %{dueDate}."}}]},
            "notification": {"attributes": {"title": "Due", "body": "By %{dueDate}"}}
        }}})
    }

    fn text(p: &Preview, pointer: &str) -> String {
        p.cards[0]
            .content
            .pointer(pointer)
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_owned()
    }

    #[test]
    fn samples_come_from_defaults_then_placeholders_and_script_variables_are_left_out() {
        let p = preview(&config(), &Map::new());
        let names: Vec<&str> = p.samples.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, ["amount", "dueDate", "firstName"]);
        assert!(p.problems.is_empty(), "{:?}", p.problems);
        assert_eq!(
            text(&p, "/defaultView/content/0/attributes/text"),
            "Hi there"
        );
        assert_eq!(
            text(&p, "/defaultView/content/1/attributes/text"),
            "0 is due on 2026-12-24T09:00:00Z."
        );
        assert_eq!(
            text(&p, "/notification/attributes/body"),
            "By 2026-12-24T09:00:00Z"
        );
        assert_eq!(p.cards[0].name, "Payment reminder");
    }

    #[test]
    fn a_value_a_trigger_would_refuse_is_a_problem_and_still_shown() {
        let mut given = Map::new();
        given.insert("dueDate".into(), json!("next week"));
        given.insert("amount".into(), json!(12.5));
        let p = preview(&config(), &given);
        assert_eq!(p.problems.len(), 1, "{:?}", p.problems);
        assert_eq!(p.problems[0].field, "variables.dueDate");
        assert_eq!(
            text(&p, "/defaultView/content/1/attributes/text"),
            "12.5 is due on next week."
        );
    }

    #[test]
    fn typed_values_follow_the_declared_types() {
        let texts = BTreeMap::from([
            ("amount".to_owned(), "12".to_owned()),
            ("firstName".to_owned(), "12".to_owned()),
            ("dueDate".to_owned(), "soon".to_owned()),
            ("unknown".to_owned(), "x".to_owned()),
        ]);
        let typed = typed_values(&config(), &texts);
        assert_eq!(typed["amount"], json!(12));
        assert_eq!(typed["firstName"], json!("12"));
        assert_eq!(typed["dueDate"], json!("soon"));
        assert!(!typed.contains_key("unknown"));
        let odd = BTreeMap::from([("amount".to_owned(), "NaN".to_owned())]);
        assert_eq!(typed_values(&config(), &odd)["amount"], json!("NaN"));
    }

    #[test]
    fn any_configuration_previews_without_panicking() {
        for config in [
            json!(null),
            json!({}),
            json!({"cardTemplates": 3}),
            json!({"variables": {"x": 1}, "cardTemplates": {"t": 1}}),
        ] {
            let _ = preview(&config, &Map::new());
        }
    }
}
