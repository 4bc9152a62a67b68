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
pub mod definition;
pub mod evaluate;
mod graph;
pub mod machine;
mod properties;
pub mod run;
mod waits;

use std::collections::{BTreeMap, HashSet};

use chrono::Duration;
use serde_json::{Map, Value};

use super::config::{Path, Problems, StepType};
use crate::FieldError;

pub use condition::{Comparison, Condition, Op, Subject};
pub use definition::{
    Branch, CreateCard, Program, Rule, StepDefinition, StepKind, Wait, WaitForCard, WaitUntil,
};
pub use evaluate::{evaluate, Facts, Lookup};
pub use machine::{
    first_reached, instance_state, transition, wait_deadline, CardClosure, ClosedCard, Deadline,
    Event, InstanceState, Start, StepData, StepError, StepState, StepStatus, Transition,
};

/// The most steps a configuration may hold.
pub const MAX_STEPS: usize = 50;
/// The most conditions a `branch` step may hold.
pub const MAX_CONDITIONS: usize = 10;
/// How deep conditions may nest: a comparison alone is 1, each `all`, `any` or `not` around it
/// adds 1.
pub const MAX_CONDITION_DEPTH: usize = 5;
/// The shortest wait and the shortest `wait-for-card` timeout.
pub const MIN_WAIT: Duration = Duration::seconds(1);
/// The longest wait and the longest `wait-for-card` timeout; also how far a `wait`'s `offset`
/// may move its date, either way, and how far ahead a deadline may be before it is capped.
pub const MAX_WAIT: Duration = Duration::days(365);

/// The declared type of a flow variable (`config.variables.<name>.type`): what a condition's
/// value must be, and how the evaluator reads the variable's value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum VariableType {
    /// A JSON number, or a string that reads as a finite number.
    Number,
    /// A string, compared exactly.
    String,
    /// An RFC 3339 timestamp, compared as an instant.
    Date,
    /// `true` or `false` (or those strings).
    Boolean,
}

crate::spelling::spelled!(VariableType {
    Number => "number",
    String => "string",
    Date => "date",
    Boolean => "boolean",
});

/// How a step ended: what `done` records, what `steps.<id>.outcome` reads, and what the
/// per-step counts are kept by.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Outcome {
    /// A `create-card` step made its card.
    Created,
    /// A `wait` step's deadline came.
    Elapsed,
    /// A `wait` step's deadline had passed when it started: it ended at once.
    Past,
    /// A `wait` step's deadline was more than [`MAX_WAIT`] ahead when it started: it ended at
    /// once rather than wait that long.
    Capped,
    /// The card a `wait-for-card` step listens to was submitted.
    Submitted,
    /// That card was dismissed.
    Dismissed,
    /// That card expired.
    Expired,
    /// That card was cancelled.
    Cancelled,
    /// The `wait-for-card` step's timeout passed while the card was open.
    Timeout,
    /// A `branch` step's condition held (which one, [`StepData::Condition`] says).
    Matched,
    /// No condition of a `branch` step held and it has `otherwise`.
    Otherwise,
    /// No condition of a `branch` step held and it has no `otherwise`: the path ends.
    Unmatched,
}

crate::spelling::spelled!(Outcome {
    Created => "created",
    Elapsed => "elapsed",
    Past => "past",
    Capped => "capped",
    Submitted => "submitted",
    Dismissed => "dismissed",
    Expired => "expired",
    Cancelled => "cancelled",
    Timeout => "timeout",
    Matched => "matched",
    Otherwise => "otherwise",
    Unmatched => "unmatched",
});

/// The outcomes a `wait` step can record.
pub const WAIT_OUTCOMES: [Outcome; 3] = [Outcome::Elapsed, Outcome::Past, Outcome::Capped];
/// The outcomes a `wait-for-card` step can record.
pub const CARD_OUTCOMES: [Outcome; 5] = [
    Outcome::Submitted,
    Outcome::Dismissed,
    Outcome::Expired,
    Outcome::Cancelled,
    Outcome::Timeout,
];

impl Outcome {
    /// The outcomes a step of `step_type` can record, for checking a condition's value against
    /// them; empty for steps whose outcome a condition may not read.
    pub fn possible(step_type: StepType) -> &'static [Outcome] {
        match step_type {
            StepType::Wait => &WAIT_OUTCOMES,
            StepType::WaitForCard => &CARD_OUTCOMES,
            StepType::CreateCard | StepType::Branch => &[],
        }
    }
}

/// A key of a `wait-for-card` step's `properties.on`: an outcome, or `closed` for every way
/// the card can close that is not named.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum OnKey {
    /// The card was submitted.
    Submitted,
    /// The card was dismissed.
    Dismissed,
    /// The card expired.
    Expired,
    /// The card was cancelled.
    Cancelled,
    /// The timeout passed while the card was open (`closed` does not cover it).
    Timeout,
    /// Every closed state not named by its own key.
    Closed,
}

crate::spelling::spelled!(OnKey {
    Submitted => "submitted",
    Dismissed => "dismissed",
    Expired => "expired",
    Cancelled => "cancelled",
    Timeout => "timeout",
    Closed => "closed",
});

/// Checks the `steps` and `initialSteps` of a configuration for
/// [`validate`](crate::flow::config::validate): step ids and types, each type's properties,
/// every target, and the graph. Returns the typed steps when this part had no problem.
pub(super) fn check(
    p: &mut Problems,
    config: &Map<String, Value>,
    root: &Path<'_>,
    templates: &HashSet<&str>,
) -> Option<Program> {
    let before = p.len();
    let variables = declared_variables(config.get("variables"));
    let program = properties::check_steps(p, config, root, templates, &variables);
    program.filter(|_| p.len() == before)
}

/// A flow variable as a wait or a condition sees it: its declared type (None when the type is
/// missing or unknown, a problem reported on the definition) and its default.
#[derive(Debug, Clone, Copy)]
pub(super) struct Declared<'v> {
    pub(super) ty: Option<VariableType>,
    pub(super) default: Option<&'v Value>,
}

fn declared_variables(value: Option<&Value>) -> BTreeMap<&str, Declared<'_>> {
    let Some(defs) = value.and_then(Value::as_object) else {
        return BTreeMap::new();
    };
    defs.iter()
        .map(|(name, def)| {
            let ty = def
                .get("type")
                .and_then(Value::as_str)
                .and_then(VariableType::parse);
            let default = def.get("default").filter(|d| !d.is_null());
            (name.as_str(), Declared { ty, default })
        })
        .collect()
}

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
