//! The condition evaluator: total over every JSON value, never an error and never a panic.
//!
//! Each side of a comparison is read as a number, an instant, a string or a boolean, by the
//! declared type of the variable (a number variable's `"12.5"` is the number 12.5, a date
//! variable's RFC 3339 text is an instant) and otherwise by its JSON type. Then:
//! - numbers compare as numbers (whole numbers exactly, others as `f64`), instants as
//!   instants, strings exactly (equality only), booleans by equality;
//! - a comparison across types is false, whatever the operator (`notEquals` included), and so
//!   is one with an absent value (a missing name or `null`); arrays and objects compare with
//!   nothing;
//! - `not` is plain boolean negation: `not` of a comparison over an absent value is true. A
//!   branch that must tell "absent" from "different" says so with `exists`.

use std::cmp::Ordering;
use std::collections::BTreeMap;

use serde_json::{Map, Number, Value};

use super::condition::{Comparison, Condition, Op, Subject};
use super::vocabulary::{Outcome, VariableType};
use crate::time::parse_timestamp;
use crate::Timestamp;

/// What an instance knows when a branch runs: its variables, and what its finished wait
/// steps recorded.
pub trait Lookup {
    /// A flow variable's value for the instance (payload, else default); None when absent.
    fn variable(&self, name: &str) -> Option<&Value>;
    /// The outcome the wait step `step` recorded; None before it is done.
    fn outcome(&self, step: &str) -> Option<Outcome>;
    /// A field of the values the card of the `wait-for-card` step `step` was submitted with.
    fn card_value(&self, step: &str, field: &str) -> Option<&Value>;
}

/// A [`Lookup`] held in maps: for tests, and for an engine that loads an instance's facts at
/// once.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Facts {
    /// Flow variables by name.
    pub variables: Map<String, Value>,
    /// Outcomes of finished steps, by step id.
    pub outcomes: BTreeMap<String, Outcome>,
    /// Submitted values of `wait-for-card` steps, by step id.
    pub values: BTreeMap<String, Map<String, Value>>,
}

impl Lookup for Facts {
    fn variable(&self, name: &str) -> Option<&Value> {
        self.variables.get(name)
    }

    fn outcome(&self, step: &str) -> Option<Outcome> {
        self.outcomes.get(step).copied()
    }

    fn card_value(&self, step: &str, field: &str) -> Option<&Value> {
        self.values.get(step)?.get(field)
    }
}

/// Whether `condition` holds for the instance `facts` describes. Total: every input gives
/// true or false (see the module's rules).
pub fn evaluate(condition: &Condition, facts: &dyn Lookup) -> bool {
    match condition {
        Condition::Compare(comparison) => compare(comparison, facts),
        Condition::All(items) => items.iter().all(|c| evaluate(c, facts)),
        Condition::Any(items) => items.iter().any(|c| evaluate(c, facts)),
        Condition::Not(inner) => !evaluate(inner, facts),
    }
}

/// A side of a comparison, read.
#[derive(Debug, Clone, Copy)]
enum Scalar<'a> {
    Whole(i128),
    Real(f64),
    Instant(Timestamp),
    Text(&'a str),
    Bool(bool),
    /// An array or an object: equal to nothing, ordered with nothing.
    Other,
}

fn number(n: &Number) -> Scalar<'static> {
    if let Some(i) = n.as_i64() {
        Scalar::Whole(i128::from(i))
    } else if let Some(u) = n.as_u64() {
        Scalar::Whole(i128::from(u))
    } else {
        // JSON numbers are finite; NaN (never produced) would compare with nothing.
        Scalar::Real(n.as_f64().unwrap_or(f64::NAN))
    }
}

/// Reads a value by the declared type, when there is one; None for `null`.
fn read(value: &Value, declared: Option<VariableType>) -> Option<Scalar<'_>> {
    let natural = match value {
        Value::Null => return None,
        Value::Number(n) => number(n),
        Value::String(s) => Scalar::Text(s),
        Value::Bool(b) => Scalar::Bool(*b),
        Value::Array(_) | Value::Object(_) => Scalar::Other,
    };
    let Value::String(text) = value else {
        return Some(natural);
    };
    let typed = match declared {
        Some(VariableType::Number) => text
            .trim()
            .parse::<f64>()
            .ok()
            .filter(|f| f.is_finite())
            .map(Scalar::Real),
        Some(VariableType::Date) => parse_timestamp(text).ok().map(Scalar::Instant),
        Some(VariableType::Boolean) => match text.as_str() {
            "true" => Some(Scalar::Bool(true)),
            "false" => Some(Scalar::Bool(false)),
            _ => None,
        },
        Some(VariableType::String) | None => None,
    };
    Some(typed.unwrap_or(natural))
}

fn as_real(s: Scalar<'_>) -> Option<f64> {
    match s {
        // Rounding to the nearest f64 is the comparison's precision past 2^53.
        Scalar::Whole(i) => Some(i as f64),
        Scalar::Real(f) => Some(f),
        _ => None,
    }
}

/// The order of two sides of one type that orders (numbers, instants); None otherwise.
fn order(a: Scalar<'_>, b: Scalar<'_>) -> Option<Ordering> {
    match (a, b) {
        (Scalar::Whole(x), Scalar::Whole(y)) => Some(x.cmp(&y)),
        (Scalar::Instant(x), Scalar::Instant(y)) => Some(x.cmp(&y)),
        _ => as_real(a)?.partial_cmp(&as_real(b)?),
    }
}

/// Whether two sides are equal; None across types (and for arrays and objects).
fn equal(a: Scalar<'_>, b: Scalar<'_>) -> Option<bool> {
    match (a, b) {
        (Scalar::Text(x), Scalar::Text(y)) => Some(x == y),
        (Scalar::Bool(x), Scalar::Bool(y)) => Some(x == y),
        _ => order(a, b).map(|o| o == Ordering::Equal),
    }
}

fn compare(comparison: &Comparison, facts: &dyn Lookup) -> bool {
    let outcome;
    let (left, declared) = match &comparison.subject {
        Subject::Variable { name, declared } => (facts.variable(name), Some(*declared)),
        Subject::Outcome { step } => {
            outcome = facts.outcome(step).map(|o| Value::from(o.as_str()));
            (outcome.as_ref(), None)
        }
        Subject::CardValue { step, field } => (facts.card_value(step, field), None),
    };
    let Some(left) = left.and_then(|v| read(v, declared)) else {
        return false;
    };
    if comparison.op == Op::Exists {
        return true;
    }
    let Some(value) = comparison.value.as_ref() else {
        return false;
    };
    let with = |want: fn(Ordering) -> bool| {
        read(value, declared)
            .and_then(|r| order(left, r))
            .is_some_and(want)
    };
    match comparison.op {
        Op::Equals => read(value, declared).and_then(|r| equal(left, r)) == Some(true),
        Op::NotEquals => read(value, declared).and_then(|r| equal(left, r)) == Some(false),
        Op::GreaterThan => with(Ordering::is_gt),
        Op::GreaterOrEqual => with(Ordering::is_ge),
        Op::LessThan => with(Ordering::is_lt),
        Op::LessOrEqual => with(Ordering::is_le),
        Op::In => value.as_array().is_some_and(|items| {
            items
                .iter()
                .any(|item| read(item, declared).and_then(|r| equal(left, r)) == Some(true))
        }),
        Op::Exists => true,
    }
}
