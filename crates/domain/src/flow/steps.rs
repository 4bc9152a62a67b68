//! Steps that wait and branch (contract §21), as pure domain: the typed step definitions a
//! configuration's `steps` hold, their validation (every problem at once, with its path), the
//! condition evaluator, and the step machine's transitions.
//!
//! - [`definition`]: [`StepDefinition`] and its kinds, parsed from a configuration's JSON;
//!   [`Program`] is a whole configuration's steps once it validates.
//! - [`condition`]: a branch's [`Condition`]s, checked against the variables' declared types.
//! - [`evaluate`](mod@evaluate): [`evaluate()`](evaluate::evaluate) over a [`Lookup`] of an
//!   instance's facts; total over every JSON value.
//! - [`machine`]: [`StepState`] and [`transition`]: a step definition, its state and an
//!   [`Event`] in, the new state and the steps that follow out.
//!
//! [`crate::flow::config::validate`] checks the `steps` and `initialSteps` of a configuration
//! here, so publishing and saving a draft refuse what this module refuses.

pub mod condition;
pub(super) mod context;
pub mod definition;
pub mod evaluate;
mod graph;
pub mod machine;
pub(super) mod properties;
pub mod run;
pub mod vocabulary;
mod waits;

use std::collections::BTreeMap;

use serde_json::Value;

use crate::FieldError;
use context::declared_variables;

pub use condition::{Comparison, Condition, Op, Subject};
pub use definition::{
    Branch, CreateCard, Program, Rule, StepDefinition, StepKind, Wait, WaitForCard, WaitUntil,
};
pub use evaluate::{evaluate, Facts, Lookup};
pub use machine::{
    first_reached, instance_state, transition, wait_deadline, CardClosure, ClosedCard, Deadline,
    Event, InstanceState, Start, StepData, StepError, StepState, StepStatus, Transition,
};
pub use vocabulary::{
    OnKey, Outcome, StepType, VariableType, CARD_OUTCOMES, MAX_CONDITIONS, MAX_CONDITION_DEPTH,
    MAX_STEPS, MAX_WAIT, MIN_WAIT, WAIT_OUTCOMES,
};

/// The flow variables the configuration's `wait` steps read (`properties.untilVariable`), each
/// with the ids of the steps that read it. Read from the JSON as it is: for a configuration
/// that validates, every name is a `date` variable of the flow.
pub fn wait_variables(config: &Value) -> BTreeMap<String, Vec<String>> {
    let mut out: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let Some(steps) = config.get("steps").and_then(Value::as_object) else {
        return out;
    };
    for (id, step) in steps {
        if step.get("type").and_then(Value::as_str) != Some(StepType::Wait.as_str()) {
            continue;
        }
        if let Some(name) = step
            .pointer("/properties/untilVariable")
            .and_then(Value::as_str)
        {
            out.entry(name.to_owned()).or_default().push(id.clone());
        }
    }
    out
}

/// The problems of a trigger element whose value of a variable a wait reads is not an RFC 3339
/// timestamp: the wait would have no deadline. The declared `date` type lets a value through
/// in the variable's display format too; a wait needs an instant. `value_of` gives a
/// variable's resolved value (payload, else default); `path` as for
/// [`missing_wait_variables`].
pub fn unreadable_wait_dates(
    config: &Value,
    value_of: &dyn Fn(&str) -> Option<String>,
    path: &str,
) -> Vec<FieldError> {
    let waits = wait_variables(config);
    let mut out = Vec::new();
    for (name, steps) in waits {
        let Some(value) = value_of(&name) else {
            continue;
        };
        if crate::time::parse_timestamp(&value).is_ok() {
            continue;
        }
        let steps: Vec<String> = steps.iter().map(|s| format!("`{s}`")).collect();
        out.push(FieldError::new(
            format!("{path}.variables.{name}"),
            format!(
                "must be an RFC 3339 timestamp: the wait step {} waits until it",
                steps.join(", ")
            ),
        ));
    }
    out
}

/// The problems of a trigger element whose payload leaves out a variable a wait reads when
/// that variable has no default: such a wait would have no deadline. `is_sent` says whether
/// the payload carries a variable; `path` is the element's payload path
/// (`flows[0].payload`), so each problem is at `{path}.variables.<name>`.
pub fn missing_wait_variables(
    config: &Value,
    is_sent: &dyn Fn(&str) -> bool,
    path: &str,
) -> Vec<FieldError> {
    // On the `/start` path for every element: a flow without such waits (most) costs a scan
    // of its steps, nothing more.
    let waits = wait_variables(config);
    if waits.is_empty() {
        return Vec::new();
    }
    let defaults = declared_variables(config.get("variables"));
    waits
        .into_iter()
        .filter(|(name, _)| !is_sent(name))
        .filter(|(name, _)| {
            defaults
                .get(name.as_str())
                .is_none_or(|d| d.default.is_none())
        })
        .map(|(name, steps)| {
            let steps: Vec<String> = steps.iter().map(|s| format!("`{s}`")).collect();
            FieldError::new(
                format!("{path}.variables.{name}"),
                format!(
                    "is required: the wait step {} waits for it and it has no default",
                    steps.join(", ")
                ),
            )
        })
        .collect()
}

#[cfg(test)]
mod tests;
