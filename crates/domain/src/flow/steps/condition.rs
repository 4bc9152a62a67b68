//! A branch's conditions (contract §21): a comparison of one name with a value, or `all`,
//! `any` and `not` of conditions, nested at most [`MAX_CONDITION_DEPTH`] deep. Parsing checks
//! every name, operator and value against what the name can hold, so a condition that
//! validates can only be true or false at run time, never an error.

use serde_json::{Map, Value};

use super::context::Cx;
use super::graph::Ancestry;
use super::vocabulary::{Outcome, StepType, VariableType, MAX_CONDITION_DEPTH};
use crate::flow::problems::{describe, object, show, Path};
use crate::flow::values::check_value;
use crate::time::parse_timestamp;

/// A condition of a branch.
#[derive(Debug, Clone, PartialEq)]
pub enum Condition {
    /// `{"variable": NAME, "op": OP, "value": V}`.
    Compare(Comparison),
    /// `{"all": [..]}`: every condition holds (at least one is given).
    All(Vec<Condition>),
    /// `{"any": [..]}`: some condition holds (at least one is given).
    Any(Vec<Condition>),
    /// `{"not": C}`: plain negation of `C`, also when `C` compares an absent value.
    Not(Box<Condition>),
}

impl Condition {
    /// How deep it nests: a comparison is 1; `all`, `any` and `not` add 1 to their deepest.
    pub fn depth(&self) -> usize {
        match self {
            Condition::Compare(_) => 1,
            Condition::All(items) | Condition::Any(items) => {
                1 + items.iter().map(Condition::depth).max().unwrap_or(0)
            }
            Condition::Not(inner) => 1 + inner.depth(),
        }
    }
}

/// A comparison of the value a name has for an instance with a value of the configuration.
#[derive(Debug, Clone, PartialEq)]
pub struct Comparison {
    /// What is compared.
    pub subject: Subject,
    /// How.
    pub op: Op,
    /// With what: absent for [`Op::Exists`], a list for [`Op::In`].
    pub value: Option<Value>,
}

/// What a comparison's `variable` names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Subject {
    /// A flow variable: its value for the instance (payload, else default), read by its
    /// declared type.
    Variable {
        /// The variable's name.
        name: String,
        /// Its declared type.
        declared: VariableType,
    },
    /// `steps.<id>.outcome` of a `wait` or `wait-for-card` step.
    Outcome {
        /// The step's id.
        step: String,
    },
    /// `steps.<id>.values.<field>` of a `wait-for-card` step: a value the submitted card
    /// carried. Its type is whatever the card sent.
    CardValue {
        /// The step's id.
        step: String,
        /// The field of the card's values (the rest of the name, dots included).
        field: String,
    },
}

/// A comparison's operator.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Op {
    /// Same type and equal.
    Equals,
    /// Same type and not equal.
    NotEquals,
    /// Numbers or instants, greater.
    GreaterThan,
    /// Numbers or instants, greater or equal.
    GreaterOrEqual,
    /// Numbers or instants, less.
    LessThan,
    /// Numbers or instants, less or equal.
    LessOrEqual,
    /// Equal to one of a list.
    In,
    /// The name has a value (no `value` given).
    Exists,
}

crate::spelling::spelled!(Op {
    Equals => "equals",
    NotEquals => "notEquals",
    GreaterThan => "greaterThan",
    GreaterOrEqual => "greaterOrEqual",
    LessThan => "lessThan",
    LessOrEqual => "lessOrEqual",
    In => "in",
    Exists => "exists",
});

impl Op {
    /// Whether it orders its operands, which only numbers and instants allow.
    pub fn orders(self) -> bool {
        matches!(
            self,
            Op::GreaterThan | Op::GreaterOrEqual | Op::LessThan | Op::LessOrEqual
        )
    }
}

const FORMS: [&str; 4] = ["variable", "all", "any", "not"];

/// Parses the condition at `path` of the branch `branch`; `depth` is its own depth (1 for
/// a rule's `if`). Reports every problem; the condition when it had none.
pub(super) fn parse<'a>(
    cx: &mut Cx<'a, '_>,
    branch: &'a str,
    value: &'a Value,
    path: &Path<'_>,
    depth: usize,
) -> Option<Condition> {
    let map = object(cx.p, Some(value), path, true)?;
    let given: Vec<&str> = FORMS.into_iter().filter(|k| map.contains_key(*k)).collect();
    let form = match given.as_slice() {
        [form] => *form,
        [] => {
            let message = "needs one of `variable` (with `op`), `all`, `any` and `not`";
            cx.p.add(path, message);
            return None;
        }
        several => {
            let names: Vec<String> = several.iter().map(|k| format!("`{k}`")).collect();
            let message = format!(
                "holds {}; a condition is exactly one of them",
                names.join(" and ")
            );
            cx.p.add(path, message);
            return None;
        }
    };
    if form == "variable" {
        return comparison(cx, branch, map, path).map(Condition::Compare);
    }
    // Deeper nesting is refused before it is read, which also bounds the recursion.
    if depth >= MAX_CONDITION_DEPTH {
        let message = format!("nests conditions more than {MAX_CONDITION_DEPTH} deep");
        cx.p.add(&path.key(form), message);
        return None;
    }
    let inner_path = path.key(form);
    let inner = map.get(form)?;
    if form == "not" {
        let inner = parse(cx, branch, inner, &inner_path, depth + 1)?;
        return Some(Condition::Not(Box::new(inner)));
    }
    let Value::Array(items) = inner else {
        let message = format!("must be an array of conditions, not {}", describe(inner));
        cx.p.add(&inner_path, message);
        return None;
    };
    if items.is_empty() {
        cx.p.add(&inner_path, "must hold at least one condition");
        return None;
    }
    let mut out = Some(Vec::with_capacity(items.len()));
    for (i, item) in items.iter().enumerate() {
        let parsed = parse(cx, branch, item, &inner_path.index(i), depth + 1);
        match (parsed, out.as_mut()) {
            (Some(parsed), Some(out)) => out.push(parsed),
            _ => out = None,
        }
    }
    let items = out?;
    Some(if form == "all" {
        Condition::All(items)
    } else {
        Condition::Any(items)
    })
}

fn comparison<'a>(
    cx: &mut Cx<'a, '_>,
    branch: &'a str,
    map: &'a Map<String, Value>,
    path: &Path<'_>,
) -> Option<Comparison> {
    let subject = subject(cx, branch, map.get("variable"), &path.key("variable"));
    let op_path = path.key("op");
    let op = match map.get("op") {
        Some(Value::String(text)) if Op::parse(text).is_some() => Op::parse(text),
        other => {
            let known: Vec<&str> = Op::ALL.iter().map(|o| o.as_str()).collect();
            let message = match other {
                Some(other) => format!("must be one of {}, not {}", known.join(", "), show(other)),
                None => format!("is required: one of {}", known.join(", ")),
            };
            cx.p.add(&op_path, message);
            None
        }
    };
    let (subject, op) = (subject?, op?);
    let kind = Kind::of(cx, &subject);
    if op.orders() && !kind.orders() {
        let message = format!("`{op}` compares numbers and dates; {}", kind.describe());
        cx.p.add(&op_path, message);
        return None;
    }
    let value_path = path.key("value");
    let value = map.get("value");
    let ok = match (op, value) {
        (Op::Exists, None) => true,
        (Op::Exists, Some(_)) => {
            cx.p.add(&value_path, "is not allowed with `exists`");
            false
        }
        (_, None) => {
            cx.p.add(&value_path, format!("is required with `{op}`"));
            false
        }
        (Op::In, Some(Value::Array(items))) if !items.is_empty() => {
            let mut ok = true;
            for (i, item) in items.iter().enumerate() {
                ok &= operand(cx, &kind, op, item, &value_path.index(i));
            }
            ok
        }
        (Op::In, Some(other)) => {
            let message = format!("must be a non-empty list with `in`, not {}", show(other));
            cx.p.add(&value_path, message);
            false
        }
        (_, Some(value)) => operand(cx, &kind, op, value, &value_path),
    };
    ok.then(|| Comparison {
        subject,
        op,
        value: value.cloned(),
    })
}

/// What a comparison's subject can hold, for checking its operator and value.
enum Kind {
    Typed(String, VariableType),
    Outcome(String, &'static [Outcome]),
    CardValue(String),
}

impl Kind {
    fn of(cx: &Cx<'_, '_>, subject: &Subject) -> Kind {
        match subject {
            Subject::Variable { name, declared } => Kind::Typed(name.clone(), *declared),
            Subject::Outcome { step } => {
                let ty = cx.scope.kinds.get(step.as_str()).copied().flatten();
                Kind::Outcome(step.clone(), ty.map_or(&[], Outcome::possible))
            }
            Subject::CardValue { step, .. } => Kind::CardValue(step.clone()),
        }
    }

    fn orders(&self) -> bool {
        match self {
            Kind::Typed(_, ty) => matches!(ty, VariableType::Number | VariableType::Date),
            Kind::Outcome(..) => false,
            Kind::CardValue(_) => true,
        }
    }

    fn describe(&self) -> String {
        match self {
            Kind::Typed(name, ty) => format!("`{name}` is a {ty} variable"),
            Kind::Outcome(step, _) => format!("the outcome of `{step}` is text"),
            Kind::CardValue(step) => format!("`{step}`'s values are the card's"),
        }
    }
}

/// Checks one value to compare with (an item, for `in`).
fn operand(cx: &mut Cx<'_, '_>, kind: &Kind, op: Op, value: &Value, path: &Path<'_>) -> bool {
    let problem = match kind {
        _ if value.is_null() => Some("must not be null (`exists` tests for a value)".to_owned()),
        Kind::Typed(name, VariableType::Date) => {
            let instant = value.as_str().is_some_and(|t| parse_timestamp(t).is_ok());
            (!instant).then(|| {
                format!(
                    "must be an RFC 3339 timestamp to compare with the date variable `{name}`, \
                     not {}",
                    show(value)
                )
            })
        }
        Kind::Typed(name, ty) => check_value(ty.as_str(), value, None)
            .err()
            .map(|message| format!("{message}: `{name}` is a {ty} variable")),
        Kind::Outcome(step, possible) => {
            let known = value
                .as_str()
                .and_then(Outcome::parse)
                .is_some_and(|o| possible.contains(&o));
            (!known).then(|| {
                let names: Vec<&str> = possible.iter().map(|o| o.as_str()).collect();
                format!(
                    "must be an outcome of `{step}` ({}), not {}",
                    names.join(", "),
                    show(value)
                )
            })
        }
        Kind::CardValue(_) if op.orders() => (!value.is_number())
            .then(|| format!("must be a number with `{op}`, not {}", show(value))),
        Kind::CardValue(_) => {
            (!matches!(value, Value::Number(_) | Value::String(_) | Value::Bool(_))).then(|| {
                format!(
                    "must be a number, a string or a boolean, not {}",
                    show(value)
                )
            })
        }
    };
    match problem {
        Some(message) => {
            cx.p.add(path, message);
            false
        }
        None => true,
    }
}

/// Resolves a comparison's `variable`: a flow variable first, then a step's outcome or values.
fn subject<'a>(
    cx: &mut Cx<'a, '_>,
    branch: &'a str,
    value: Option<&'a Value>,
    path: &Path<'_>,
) -> Option<Subject> {
    let name = match value {
        Some(Value::String(name)) => name.as_str(),
        other => {
            let message = match other {
                Some(other) => format!("must be a name, not {}", describe(other)),
                None => "is required".to_owned(),
            };
            cx.p.add(path, message);
            return None;
        }
    };
    if let Some(declared) = cx.scope.variables.get(name) {
        // A variable whose type is wrong is reported on its definition.
        return declared.ty.map(|declared| Subject::Variable {
            name: name.to_owned(),
            declared,
        });
    }
    let Some((step, ty, field)) = step_reference(cx, name) else {
        let message = if name.starts_with("steps.") {
            format!(
                "names no step's outcome or values: `{name}` \
                 (steps.<id>.outcome, steps.<id>.values.<field>)"
            )
        } else {
            format!("names no variable of the flow: `{name}`")
        };
        cx.p.add(path, message);
        return None;
    };
    // The step's type problem is reported on the step.
    let ty = ty?;
    let problem = match (field, ty) {
        (None, StepType::Wait | StepType::WaitForCard) => {
            let step = step.to_owned();
            return Some(Subject::Outcome { step });
        }
        (None, _) => format!("`{step}` is a {ty} step; only wait steps have an outcome"),
        (Some(field), StepType::WaitForCard) => {
            cx.ancestry.push(Ancestry {
                step: branch,
                ancestor: step,
                field: path.to_string(),
                message: format!(
                    "`{step}` is not an ancestor of `{branch}` on every path: \
                     its values may not exist"
                ),
            });
            let (step, field) = (step.to_owned(), field.to_owned());
            return Some(Subject::CardValue { step, field });
        }
        (Some(_), _) => format!("`{step}` is a {ty} step; only wait-for-card steps have values"),
    };
    cx.p.add(path, problem);
    None
}

/// The step a `steps.…` name refers to, its type, and the field of `values` (None for
/// `outcome`). Step ids may hold dots, so the longest id that fits wins.
fn step_reference<'a>(
    cx: &Cx<'a, '_>,
    name: &'a str,
) -> Option<(&'a str, Option<StepType>, Option<&'a str>)> {
    let rest = name.strip_prefix("steps.")?;
    cx.scope
        .kinds
        .iter()
        .filter_map(|(id, ty)| {
            let after = rest.strip_prefix(id)?;
            if after == ".outcome" {
                return Some((*id, *ty, None));
            }
            let field = after.strip_prefix(".values.").filter(|f| !f.is_empty())?;
            Some((*id, *ty, Some(field)))
        })
        .max_by_key(|(id, _, _)| id.len())
}
