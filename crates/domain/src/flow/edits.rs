//! The common edits of a configuration, made without writing JSON (the console's form): a card
//! template's words, a wait's duration, where a wait-for-card's outcomes lead, and a step added
//! after another. Each changes only what it names, on the configuration as stored; the result
//! is saved as the draft, which validates it whole.

use serde_json::{json, Map, Value};

use super::{Flow, FlowService, FlowVersion, VersionRef};
use crate::id::{EnvironmentId, FlowId};
use crate::tenancy::Principal;
use crate::{DomainError, FieldError};

/// A unit of a wait's duration, as a form offers them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unit {
    /// Minutes.
    Minutes,
    /// Hours.
    Hours,
    /// Days.
    Days,
    /// Weeks.
    Weeks,
}

crate::spelling::spelled!(Unit {
    Minutes => "minutes",
    Hours => "hours",
    Days => "days",
    Weeks => "weeks",
});

impl Unit {
    /// `amount` of this unit as an ISO 8601 duration: `PT30M`, `PT2H`, `P1D`, `P2W`.
    pub fn iso(self, amount: u32) -> String {
        match self {
            Unit::Minutes => format!("PT{amount}M"),
            Unit::Hours => format!("PT{amount}H"),
            Unit::Days => format!("P{amount}D"),
            Unit::Weeks => format!("P{amount}W"),
        }
    }
}

/// The kind of a step added by [`Edit::AddAfter`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NewStep {
    /// A card of a new template of that id, named and headed `name`.
    Card {
        /// The card's name and headline.
        name: String,
    },
    /// A wait of that long.
    Wait {
        /// How many units.
        amount: u32,
        /// Of what.
        unit: Unit,
    },
}

/// One edit of a configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Edit {
    /// A template's headline, text and first submit button; an empty text removes that
    /// element.
    Template {
        /// The template's id in `cardTemplates`.
        template: String,
        /// The `headline` element's text.
        headline: String,
        /// The `text` element's text.
        text: String,
        /// The first `submitButton`'s text.
        button: String,
    },
    /// A `wait` step's `duration` (replacing `until` or `untilVariable`).
    WaitDuration {
        /// The step's id.
        step: String,
        /// How many units.
        amount: u32,
        /// Of what.
        unit: Unit,
    },
    /// Where one outcome of a `wait-for-card` step leads: a step, or nowhere (the path ends).
    Outcome {
        /// The step's id.
        step: String,
        /// A key of `properties.on`: an outcome or `closed`.
        outcome: String,
        /// The step it leads to.
        target: Option<String>,
    },
    /// A new step `id` between `after` and what followed it; `after` must be a card or a
    /// wait (a wait for card's or a branch's successors are set by outcome or condition).
    AddAfter {
        /// The step it follows.
        after: String,
        /// Its id: not already a step's or a template's.
        id: String,
        /// What it does.
        kind: NewStep,
    },
}

fn problem(field: &str, message: impl Into<String>) -> Vec<FieldError> {
    vec![FieldError::new(field, message)]
}

/// `config` with `edit` made; every problem of the edit itself (a step that is not there or
/// not of its kind, an id taken) at its form field. The result is not validated here.
///
/// ```
/// use workbench_domain::flow::edits::{apply, Edit, Unit};
/// use workbench_domain::serde_json::json;
///
/// let config = json!({"steps": {"pause": {"id": "pause", "type": "wait",
///     "properties": {"until": "2027-01-01T00:00:00Z"}}}});
/// let edit = Edit::WaitDuration { step: "pause".into(), amount: 2, unit: Unit::Hours };
/// let edited = apply(&config, &edit).unwrap();
/// assert_eq!(edited["steps"]["pause"]["properties"], json!({"duration": "PT2H"}));
/// ```
pub fn apply(config: &Value, edit: &Edit) -> Result<Value, Vec<FieldError>> {
    let mut config = config.clone();
    match edit {
        Edit::Template {
            template,
            headline,
            text,
            button,
        } => set_words(&mut config, template, headline, text, button)?,
        Edit::WaitDuration { step, amount, unit } => {
            let wait = step_of(&mut config, step, "wait")?;
            wait["properties"] = json!({"duration": unit.iso(*amount)});
        }
        Edit::Outcome {
            step,
            outcome,
            target,
        } => set_outcome(&mut config, step, outcome, target.as_deref())?,
        Edit::AddAfter { after, id, kind } => add_after(&mut config, after, id, kind)?,
    }
    Ok(config)
}

/// The step `id` of `config`, which must be of `kind`.
fn step_of<'a>(
    config: &'a mut Value,
    id: &str,
    kind: &str,
) -> Result<&'a mut Value, Vec<FieldError>> {
    let step = config
        .pointer_mut(&format!("/steps/{}", crate::json::pointer_token(id)))
        .filter(|s| s.is_object())
        .ok_or_else(|| {
            problem(
                "step",
                format!("`{id}` is not a step of this configuration"),
            )
        })?;
    if step.get("type").and_then(Value::as_str) != Some(kind) {
        return Err(problem("step", format!("`{id}` is not a `{kind}` step")));
    }
    Ok(step)
}

fn set_words(
    config: &mut Value,
    template: &str,
    headline: &str,
    text: &str,
    button: &str,
) -> Result<(), Vec<FieldError>> {
    let t = config
        .pointer_mut(&format!(
            "/cardTemplates/{}",
            crate::json::pointer_token(template)
        ))
        .and_then(Value::as_object_mut)
        .ok_or_else(|| problem("template", format!("`{template}` is not a card template")))?;
    let view = t
        .entry("defaultView")
        .or_insert_with(|| json!({}))
        .as_object_mut()
        .ok_or_else(|| problem("template", "its `defaultView` is not an object"))?;
    let content = view
        .entry("content")
        .or_insert_with(|| json!([]))
        .as_array_mut()
        .ok_or_else(|| problem("template", "its `defaultView.content` is not a list"))?;
    set_element(content, "headline", "headline", headline);
    set_element(content, "text", "text", text);
    let actions = view
        .entry("actions")
        .or_insert_with(|| json!([]))
        .as_array_mut()
        .ok_or_else(|| problem("template", "its `defaultView.actions` is not a list"))?;
    set_element(actions, "submitButton", "submit", button);
    Ok(())
}

/// The first element of `type` in `list` gets `text`, or is added (keyed `key`) for a text
/// that is not empty; an empty text removes it.
fn set_element(list: &mut Vec<Value>, element_type: &str, key: &str, text: &str) {
    let at = list
        .iter()
        .position(|e| e.get("type").and_then(Value::as_str) == Some(element_type));
    match (at, text.trim().is_empty()) {
        (Some(i), true) => {
            list.remove(i);
        }
        (Some(i), false) => {
            // `attributes` that is not an object (validation does not read it) is replaced.
            if let Some(element) = list[i].as_object_mut() {
                let attributes = element.entry("attributes").or_insert_with(|| json!({}));
                if !attributes.is_object() {
                    *attributes = json!({});
                }
                if let Some(attributes) = attributes.as_object_mut() {
                    attributes.insert("text".to_owned(), json!(text));
                }
            }
        }
        (None, true) => {}
        (None, false) => {
            let new = json!({"key": key, "type": element_type, "attributes": {"text": text}});
            // A headline goes first.
            if element_type == "headline" {
                list.insert(0, new);
            } else {
                list.push(new);
            }
        }
    }
}

fn set_outcome(
    config: &mut Value,
    step: &str,
    outcome: &str,
    target: Option<&str>,
) -> Result<(), Vec<FieldError>> {
    let wait = step_of(config, step, "wait-for-card")?;
    let on = wait["properties"]
        .as_object_mut()
        .ok_or_else(|| problem("step", "its `properties` is not an object"))?
        .entry("on")
        .or_insert_with(|| json!({}));
    let Some(on) = on.as_object_mut() else {
        return Err(problem("step", "its `properties.on` is not an object"));
    };
    match target {
        Some(t) => {
            on.insert(outcome.to_owned(), json!([t]));
        }
        None => {
            on.remove(outcome);
        }
    }
    Ok(())
}

fn add_after(
    config: &mut Value,
    after: &str,
    id: &str,
    kind: &NewStep,
) -> Result<(), Vec<FieldError>> {
    let taken = |section: &str| config.get(section).and_then(|s| s.get(id)).is_some();
    if id.trim().is_empty() {
        return Err(problem("id", "must not be empty"));
    }
    if taken("steps") || (matches!(kind, NewStep::Card { .. }) && taken("cardTemplates")) {
        return Err(problem("id", format!("`{id}` is already used")));
    }
    let before = config
        .pointer_mut(&format!("/steps/{}", crate::json::pointer_token(after)))
        .filter(|s| s.is_object())
        .ok_or_else(|| problem("after", format!("`{after}` is not a step")))?;
    match before.get("type").and_then(Value::as_str) {
        Some("create-card" | "wait") => {}
        _ => {
            let message = "a step can be added after a card or a wait; a wait for card's and a \
                           branch's steps follow their outcomes and conditions";
            return Err(problem("after", message));
        }
    }
    let followed = before.get("next").cloned().unwrap_or_else(|| json!([]));
    before["next"] = json!([id]);
    let step = match kind {
        NewStep::Card { .. } => json!({"id": id, "type": "create-card",
            "properties": {"cardTemplateId": id}, "next": followed}),
        NewStep::Wait { amount, unit } => json!({"id": id, "type": "wait",
            "properties": {"duration": unit.iso(*amount)}, "next": followed}),
    };
    if let Some(steps) = config.get_mut("steps").and_then(Value::as_object_mut) {
        steps.insert(id.to_owned(), step);
    }
    if let NewStep::Card { name } = kind {
        let template = json!({"metadata": {"cardName": name},
            "defaultView": {"content": [{"key": "headline", "type": "headline",
                                         "attributes": {"text": name}}]}});
        let templates = config.as_object_mut().map(|c| {
            c.entry("cardTemplates")
                .or_insert_with(|| Value::Object(Map::new()))
        });
        if let Some(Value::Object(t)) = templates {
            t.insert(id.to_owned(), template);
        }
    }
    Ok(())
}

impl FlowService {
    /// Makes `edit` on the flow's latest configuration (its draft, else its newest version)
    /// and saves the result as the draft ([`save_draft`](Self::save_draft)), which validates
    /// it. Needs [`Permission::ActionFlowsWrite`]; a flow with no configuration yet, or an
    /// edit that does not fit it, is [`DomainError::Validation`] at the edit's field.
    ///
    /// [`Permission::ActionFlowsWrite`]: crate::tenancy::Permission::ActionFlowsWrite
    pub async fn save_edit(
        &self,
        who: &Principal,
        env: &EnvironmentId,
        id: &FlowId,
        edit: &Edit,
    ) -> Result<(Flow, FlowVersion), DomainError> {
        who.authorize(env, crate::tenancy::Permission::ActionFlowsWrite)?;
        let flow = self.get(who, env, id).await?;
        if flow.latest_version == 0 {
            return Err(DomainError::invalid(
                "config",
                "the flow has no configuration yet",
            ));
        }
        let (_, latest) = self.get_config(who, env, id, VersionRef::Latest).await?;
        let edited = apply(&latest.config, edit).map_err(DomainError::Validation)?;
        self.save_draft(who, env, id, edited).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> Value {
        json!({"type": "card", "initialSteps": ["ask"],
            "steps": {
                "ask": {"id": "ask", "type": "create-card", "next": ["listen"],
                        "properties": {"cardTemplateId": "q"}},
                "listen": {"id": "listen", "type": "wait-for-card",
                           "properties": {"cardStep": "ask", "timeout": "P1D",
                                          "on": {"timeout": ["nudge"]}}},
                "nudge": {"id": "nudge", "type": "create-card",
                          "properties": {"cardTemplateId": "q"}}
            },
            "cardTemplates": {"q": {"metadata": {"cardName": "Q"},
                "defaultView": {"content": [
                    {"key": "h", "type": "headline", "attributes": {"text": "Old"}},
                    {"key": "t", "type": "text", "attributes": {"text": "Body"}}]}}}})
    }

    fn fields(e: Vec<FieldError>) -> Vec<String> {
        e.into_iter().map(|e| e.field).collect()
    }

    #[test]
    fn a_templates_words_are_set_added_and_removed() {
        let edit = Edit::Template {
            template: "q".into(),
            headline: "New".into(),
            text: String::new(),
            button: "Done".into(),
        };
        let c = apply(&config(), &edit).expect("edited");
        let view = &c["cardTemplates"]["q"]["defaultView"];
        assert_eq!(
            view["content"],
            json!([{"key": "h", "type": "headline",
            "attributes": {"text": "New"}}])
        );
        assert_eq!(view["actions"][0]["attributes"]["text"], "Done");
        let missing = Edit::Template {
            template: "none".into(),
            headline: String::new(),
            text: String::new(),
            button: String::new(),
        };
        assert_eq!(
            fields(apply(&config(), &missing).expect_err("refused")),
            ["template"]
        );
    }

    #[test]
    fn an_element_of_any_shape_takes_its_words_without_panicking() {
        let mut c = config();
        c["cardTemplates"]["q"]["defaultView"]["content"] =
            json!([{"type": "headline", "attributes": "x"}, {"type": "text"}, "loose", 7]);
        let edit = Edit::Template {
            template: "q".into(),
            headline: "H".into(),
            text: "T".into(),
            button: String::new(),
        };
        let edited = apply(&c, &edit).expect("edited");
        let content = &edited["cardTemplates"]["q"]["defaultView"]["content"];
        assert_eq!(content[0]["attributes"]["text"], "H");
        assert_eq!(content[1]["attributes"]["text"], "T");
        c["cardTemplates"]["q"]["defaultView"] = json!("not a view");
        assert!(apply(&c, &edit).is_err());
    }

    #[test]
    fn outcomes_are_pointed_at_a_step_or_nowhere() {
        let point = Edit::Outcome {
            step: "listen".into(),
            outcome: "submitted".into(),
            target: Some("nudge".into()),
        };
        let c = apply(&config(), &point).expect("edited");
        assert_eq!(
            c["steps"]["listen"]["properties"]["on"]["submitted"],
            json!(["nudge"])
        );
        let end = Edit::Outcome {
            step: "listen".into(),
            outcome: "timeout".into(),
            target: None,
        };
        let c = apply(&c, &end).expect("edited");
        assert!(c["steps"]["listen"]["properties"]["on"]
            .get("timeout")
            .is_none());
        let wrong = Edit::Outcome {
            step: "ask".into(),
            outcome: "timeout".into(),
            target: None,
        };
        assert_eq!(
            fields(apply(&config(), &wrong).expect_err("refused")),
            ["step"]
        );
    }

    #[test]
    fn a_step_added_after_another_takes_over_what_followed_it() {
        let add = Edit::AddAfter {
            after: "ask".into(),
            id: "pause".into(),
            kind: NewStep::Wait {
                amount: 30,
                unit: Unit::Minutes,
            },
        };
        let c = apply(&config(), &add).expect("edited");
        assert_eq!(c["steps"]["ask"]["next"], json!(["pause"]));
        assert_eq!(c["steps"]["pause"]["next"], json!(["listen"]));
        assert_eq!(c["steps"]["pause"]["properties"]["duration"], "PT30M");
        let card = Edit::AddAfter {
            after: "nudge".into(),
            id: "thanks".into(),
            kind: NewStep::Card {
                name: "Thanks".into(),
            },
        };
        let c = apply(&c, &card).expect("edited");
        assert_eq!(
            c["cardTemplates"]["thanks"]["metadata"]["cardName"],
            "Thanks"
        );
        assert_eq!(c["steps"]["thanks"]["next"], json!([]));
        let c = crate::flow::steps::Program::parse(&c);
        assert!(c.is_ok(), "the edited configuration validates: {c:?}");
        for (after, id, field) in [
            ("listen", "x", "after"),
            ("ask", "nudge", "id"),
            ("ask", " ", "id"),
            ("none", "x", "after"),
        ] {
            let edit = Edit::AddAfter {
                after: after.into(),
                id: id.into(),
                kind: NewStep::Card { name: "X".into() },
            };
            assert_eq!(
                fields(apply(&config(), &edit).expect_err("refused")),
                [field],
                "{after} {id}"
            );
        }
    }

    #[test]
    fn durations_are_written_in_iso_8601() {
        assert_eq!(Unit::Minutes.iso(5), "PT5M");
        assert_eq!(Unit::Weeks.iso(2), "P2W");
        assert_eq!(Unit::parse("days"), Some(Unit::Days));
    }
}
