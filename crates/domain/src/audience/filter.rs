//! The filter of segments and of the `filters` trigger target (docs/api.md, Audience):
//! `{"match": "all"|"any", "conditions": [{"field", "op", "value"}]}`.
//!
//! Fields: `id`, `testUser`, `tags`, `attributes.<name>`. Operators and the values they take:
//! - `eq`, `neq`: a scalar (for `testUser` a boolean; for `tags`: has / has not that tag);
//! - `in`: a non-empty array of scalars (for `tags`: has any of them);
//! - `contains`: a string (substring of the value; for `tags`: has that tag);
//! - `exists`: `true` or `false` (or no value, meaning `true`); for `tags`: has any tag;
//! - `gt`, `lt`: a number, or a string compared as text (RFC 3339 timestamps compare in time
//!   order); only on `attributes.*` and `id`.
//!
//! Comparisons are exact: strings are case-sensitive, numbers compare as numbers (an attribute
//! stored as the string "5" does not equal the number 5).

use std::cmp::Ordering;

use serde_json::Value;

use super::EndUser;
use crate::FieldError;

/// The most conditions one filter may have (at least one is needed).
pub const MAX_CONDITIONS: usize = 50;

/// What a condition looks at, its `field`.
#[derive(Debug, Clone, PartialEq)]
pub enum FilterField {
    /// `id`: the user's id.
    Id,
    /// `testUser`: the test flag (takes `eq` and `neq` only).
    TestUser,
    /// `tags`: the user's tags (not `gt` or `lt`).
    Tags,
    /// `attributes.<name>`: the attribute with this name (the text after `attributes.`); an
    /// attribute that is missing or `null` has no value.
    Attribute(String),
}

/// A condition's operator, its `op`. What each compares, and the value it takes, is in the
/// module documentation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    /// `eq`: equal to the value (for `tags`: has that tag).
    Eq,
    /// `neq`: not equal (for `tags`: has not that tag); also true when there is no value.
    Neq,
    /// `in`: equal to one of the values (for `tags`: has one of them).
    In,
    /// `contains`: the user's string holds the value as a substring (for `tags`: has that
    /// tag).
    Contains,
    /// `exists`: has a value (for `tags`: has any tag), or, with `false`, has none.
    Exists,
    /// `gt`: greater than the value, numbers as numbers and strings as text.
    Gt,
    /// `lt`: less than the value, numbers as numbers and strings as text.
    Lt,
}

impl Op {
    fn parse(s: &str) -> Option<Op> {
        Some(match s {
            "eq" => Op::Eq,
            "neq" => Op::Neq,
            "in" => Op::In,
            "contains" => Op::Contains,
            "exists" => Op::Exists,
            "gt" => Op::Gt,
            "lt" => Op::Lt,
            _ => return None,
        })
    }
}

/// One validated condition of a filter.
#[derive(Debug, Clone, PartialEq)]
pub struct Condition {
    /// What the condition looks at.
    pub field: FilterField,
    /// How it compares.
    pub op: Op,
    /// What it compares with, of a kind the field and operator take; `Null` for an `exists`
    /// sent without a value (meaning `true`).
    pub value: Value,
}

/// A validated filter. `source` is the document as the caller sent it, kept for display.
///
/// ```
/// use serde_json::json;
/// use workbench_domain::audience::Filter;
///
/// let vip_in_nz = Filter::parse(
///     &json!({"match": "all", "conditions": [
///         {"field": "tags", "op": "contains", "value": "vip"},
///         {"field": "attributes.country", "op": "eq", "value": "NZ"}
///     ]}),
///     "filter",
/// )
/// .expect("a valid filter");
/// assert!(vip_in_nz.match_all);
/// assert_eq!(vip_in_nz.conditions.len(), 2);
///
/// let problems = Filter::parse(&json!({"conditions": [{"field": "name", "op": "eq"}]}), "f")
///     .expect_err("`name` is not a field");
/// assert_eq!(problems[0].field, "f.conditions[0].field");
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct Filter {
    /// `match`: `all` (the default; every condition must hold) or `any` (false: one is
    /// enough).
    pub match_all: bool,
    /// 1 to [`MAX_CONDITIONS`] conditions, in the order sent.
    pub conditions: Vec<Condition>,
    /// The filter document as sent: what is stored and shown back.
    pub source: Value,
}

fn scalar(v: &Value) -> bool {
    matches!(v, Value::String(_) | Value::Number(_) | Value::Bool(_))
}

impl Filter {
    /// Parses and validates a filter; every problem is reported with its path under `path`.
    pub fn parse(value: &Value, path: &str) -> Result<Filter, Vec<FieldError>> {
        let mut errors = Vec::new();
        let Some(object) = value.as_object() else {
            return Err(vec![FieldError::new(
                path,
                "must be an object with `match` and `conditions`",
            )]);
        };
        let match_all = match object.get("match") {
            None | Some(Value::Null) => true,
            Some(Value::String(s)) if s == "all" => true,
            Some(Value::String(s)) if s == "any" => false,
            Some(_) => {
                errors.push(FieldError::new(
                    format!("{path}.match"),
                    "must be `all` or `any`",
                ));
                true
            }
        };
        let mut conditions = Vec::new();
        match object.get("conditions") {
            Some(Value::Array(items)) if !items.is_empty() && items.len() <= MAX_CONDITIONS => {
                for (i, item) in items.iter().enumerate() {
                    match parse_condition(item, &format!("{path}.conditions[{i}]")) {
                        Ok(condition) => conditions.push(condition),
                        Err(mut e) => errors.append(&mut e),
                    }
                }
            }
            _ => errors.push(FieldError::new(
                format!("{path}.conditions"),
                format!("must be an array of 1 to {MAX_CONDITIONS} conditions"),
            )),
        }
        if errors.is_empty() {
            Ok(Filter {
                match_all,
                conditions,
                source: value.clone(),
            })
        } else {
            Err(errors)
        }
    }

    /// Whether `user` matches: every condition holds (`all`), or at least one does (`any`).
    pub fn matches(&self, user: &EndUser) -> bool {
        let mut results = self.conditions.iter().map(|c| c.matches(user));
        if self.match_all {
            results.all(|m| m)
        } else {
            results.any(|m| m)
        }
    }
}

fn parse_condition(item: &Value, path: &str) -> Result<Condition, Vec<FieldError>> {
    let mut errors = Vec::new();
    let Some(object) = item.as_object() else {
        return Err(vec![FieldError::new(
            path,
            "must be an object with `field`, `op` and `value`",
        )]);
    };
    let field = parse_field(&mut errors, object.get("field"), path);
    let op = parse_op(&mut errors, object.get("op"), path);
    let value = object.get("value").cloned().unwrap_or(Value::Null);
    if let (Some(field), Some(op)) = (&field, op) {
        let allowed = value_fits(&mut errors, field, op, &value, path);
        if allowed && errors.is_empty() {
            return Ok(Condition {
                field: field.clone(),
                op,
                value,
            });
        }
    }
    Err(errors)
}

/// A condition's `field`, or (with its problem in `errors`) none.
fn parse_field(
    errors: &mut Vec<FieldError>,
    field: Option<&Value>,
    path: &str,
) -> Option<FilterField> {
    match field.and_then(Value::as_str) {
        Some("id") => Some(FilterField::Id),
        Some("testUser") => Some(FilterField::TestUser),
        Some("tags") => Some(FilterField::Tags),
        Some(f) if f.starts_with("attributes.") && f.len() > "attributes.".len() => {
            Some(FilterField::Attribute(f["attributes.".len()..].to_owned()))
        }
        _ => {
            errors.push(FieldError::new(
                format!("{path}.field"),
                "must be `id`, `testUser`, `tags` or `attributes.<name>`",
            ));
            None
        }
    }
}

/// A condition's `op`, or (with its problem in `errors`) none.
fn parse_op(errors: &mut Vec<FieldError>, op: Option<&Value>, path: &str) -> Option<Op> {
    match op.and_then(Value::as_str).and_then(Op::parse) {
        Some(op) => Some(op),
        None => {
            errors.push(FieldError::new(
                format!("{path}.op"),
                "must be one of eq, neq, in, contains, exists, gt, lt",
            ));
            None
        }
    }
}

/// Whether `field` takes `op`, and `op` takes `value`; each problem goes to `errors`.
fn value_fits(
    errors: &mut Vec<FieldError>,
    field: &FilterField,
    op: Op,
    value: &Value,
    path: &str,
) -> bool {
    let value_path = format!("{path}.value");
    match (field, op) {
        (FilterField::TestUser, Op::Eq | Op::Neq) => {
            value.is_boolean() || problem(errors, &value_path, "must be true or false")
        }
        (FilterField::TestUser, _) => {
            problem(errors, &format!("{path}.op"), "testUser takes eq or neq")
        }
        (FilterField::Tags, Op::Gt | Op::Lt) => problem(
            errors,
            &format!("{path}.op"),
            "tags take eq, neq, in, contains or exists",
        ),
        (FilterField::Tags, Op::Eq | Op::Neq | Op::Contains) => {
            value.is_string() || problem(errors, &value_path, "must be a tag (a string)")
        }
        (_, Op::In) => match value {
            Value::Array(items) if !items.is_empty() && items.iter().all(scalar) => true,
            _ => problem(
                errors,
                &value_path,
                "must be a non-empty array of strings, numbers or booleans",
            ),
        },
        (_, Op::Exists) => {
            matches!(value, Value::Bool(_) | Value::Null)
                || problem(errors, &value_path, "must be true or false")
        }
        (_, Op::Contains) => value.is_string() || problem(errors, &value_path, "must be a string"),
        (_, Op::Gt | Op::Lt) => {
            matches!(value, Value::Number(_) | Value::String(_))
                || problem(errors, &value_path, "must be a number or a string")
        }
        (_, Op::Eq | Op::Neq) => {
            scalar(value)
                || problem(
                    errors,
                    &value_path,
                    "must be a string, a number or a boolean",
                )
        }
    }
}

fn problem(errors: &mut Vec<FieldError>, path: &str, message: &str) -> bool {
    errors.push(FieldError::new(path, message));
    false
}

/// Order of two scalars of the same kind; `None` across kinds.
fn compare(a: &Value, b: &Value) -> Option<Ordering> {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => x.as_f64()?.partial_cmp(&y.as_f64()?),
        (Value::String(x), Value::String(y)) => Some(x.cmp(y)),
        (Value::Bool(x), Value::Bool(y)) => Some(x.cmp(y)),
        _ => None,
    }
}

fn equal(a: &Value, b: &Value) -> bool {
    compare(a, b) == Some(Ordering::Equal)
}

impl Condition {
    /// Whether the condition holds for `user`. Values of different kinds never compare (the
    /// string "5" is not the number 5): `eq`, `in`, `gt` and `lt` are then false, `neq` true.
    pub fn matches(&self, user: &EndUser) -> bool {
        match &self.field {
            FilterField::Tags => {
                let has = |tag: &Value| {
                    tag.as_str()
                        .is_some_and(|t| user.tags.iter().any(|u| u == t))
                };
                match self.op {
                    Op::Eq | Op::Contains => has(&self.value),
                    Op::Neq => !has(&self.value),
                    Op::In => self
                        .value
                        .as_array()
                        .is_some_and(|tags| tags.iter().any(has)),
                    Op::Exists => {
                        let has_any = !user.tags.is_empty();
                        has_any == self.value.as_bool().unwrap_or(true)
                    }
                    Op::Gt | Op::Lt => false,
                }
            }
            FilterField::TestUser => {
                let value = Value::Bool(user.test_user);
                match self.op {
                    Op::Eq => equal(&value, &self.value),
                    Op::Neq => !equal(&value, &self.value),
                    _ => false,
                }
            }
            FilterField::Id => scalar_matches(
                Some(&Value::String(user.id.clone().into())),
                self.op,
                &self.value,
            ),
            FilterField::Attribute(name) => scalar_matches(
                user.attributes.get(name).filter(|v| !v.is_null()),
                self.op,
                &self.value,
            ),
        }
    }
}

fn scalar_matches(actual: Option<&Value>, op: Op, expected: &Value) -> bool {
    match (op, actual) {
        (Op::Exists, actual) => actual.is_some() == expected.as_bool().unwrap_or(true),
        (Op::Neq, None) => true,
        (_, None) => false,
        (Op::Eq, Some(a)) => equal(a, expected),
        (Op::Neq, Some(a)) => !equal(a, expected),
        (Op::In, Some(a)) => expected
            .as_array()
            .is_some_and(|items| items.iter().any(|e| equal(a, e))),
        (Op::Contains, Some(a)) => match (a, expected.as_str()) {
            (Value::String(s), Some(needle)) => s.contains(needle),
            (Value::Array(items), Some(needle)) => items.iter().any(|i| i.as_str() == Some(needle)),
            _ => false,
        },
        (Op::Gt, Some(a)) => compare(a, expected) == Some(Ordering::Greater),
        (Op::Lt, Some(a)) => compare(a, expected) == Some(Ordering::Less),
    }
}

#[cfg(test)]
mod tests {
    use chrono::TimeZone;
    use serde_json::{json, Map};

    use super::*;

    fn user(id: &str, test: bool, tags: &[&str], attributes: Value) -> EndUser {
        let t = chrono::Utc
            .with_ymd_and_hms(2026, 11, 22, 0, 0, 0)
            .single()
            .expect("time");
        EndUser {
            environment_id: "env_1".into(),
            id: id.into(),
            test_user: test,
            tags: tags.iter().map(|t| (*t).to_owned()).collect(),
            attributes: attributes.as_object().cloned().unwrap_or_else(Map::new),
            created: t,
            updated: t,
        }
    }

    fn filter(v: Value) -> Filter {
        Filter::parse(&v, "filter").unwrap_or_else(|e| panic!("{v}: {e:?}"))
    }

    #[test]
    fn a_match_that_is_not_a_string_is_refused_not_read_as_all() {
        let conditions = json!([{"field": "tags", "op": "eq", "value": "vip"}]);
        for bad in [json!(5), json!(true), json!(["any"]), json!("ALL")] {
            let problems = Filter::parse(&json!({"match": bad, "conditions": conditions}), "f")
                .expect_err("refused");
            assert_eq!(problems[0].field, "f.match", "{bad}");
        }
        for (good, all) in [
            (json!(null), true),
            (json!("all"), true),
            (json!("any"), false),
        ] {
            let filter = Filter::parse(&json!({"match": good, "conditions": conditions}), "f")
                .expect("accepted");
            assert_eq!(filter.match_all, all);
        }
    }

    #[test]
    fn table_of_conditions() {
        let nz = user(
            "u1",
            true,
            &["vip", "beta"],
            json!({"country": "NZ", "age": 42, "plan": "gold-annual",
                "since": "2026-01-01T00:00:00Z"}),
        );
        let cases: Vec<(Value, bool)> = vec![
            (
                json!({"field": "attributes.country", "op": "eq", "value": "NZ"}),
                true,
            ),
            (
                json!({"field": "attributes.country", "op": "eq", "value": "nz"}),
                false,
            ),
            (
                json!({"field": "attributes.country", "op": "neq", "value": "AU"}),
                true,
            ),
            (
                json!({"field": "attributes.missing", "op": "neq", "value": "AU"}),
                true,
            ),
            (
                json!({"field": "attributes.country", "op": "in", "value": ["AU", "NZ"]}),
                true,
            ),
            (
                json!({"field": "attributes.plan", "op": "contains", "value": "gold"}),
                true,
            ),
            (
                json!({"field": "attributes.age", "op": "gt", "value": 40}),
                true,
            ),
            (
                json!({"field": "attributes.age", "op": "lt", "value": 40}),
                false,
            ),
            (
                json!({"field": "attributes.age", "op": "eq", "value": "42"}),
                false,
            ),
            (
                json!({"field": "attributes.since", "op": "lt", "value": "2026-06-01T00:00:00Z"}),
                true,
            ),
            (json!({"field": "attributes.age", "op": "exists"}), true),
            (
                json!({"field": "attributes.missing", "op": "exists", "value": false}),
                true,
            ),
            (
                json!({"field": "tags", "op": "contains", "value": "vip"}),
                true,
            ),
            (json!({"field": "tags", "op": "eq", "value": "gold"}), false),
            (json!({"field": "tags", "op": "neq", "value": "gold"}), true),
            (
                json!({"field": "tags", "op": "in", "value": ["gold", "beta"]}),
                true,
            ),
            (
                json!({"field": "tags", "op": "exists", "value": true}),
                true,
            ),
            (
                json!({"field": "testUser", "op": "eq", "value": true}),
                true,
            ),
            (
                json!({"field": "testUser", "op": "neq", "value": true}),
                false,
            ),
            (
                json!({"field": "id", "op": "in", "value": ["u1", "u2"]}),
                true,
            ),
            (json!({"field": "id", "op": "gt", "value": "u0"}), true),
        ];
        for (condition, expected) in cases {
            let f = filter(json!({"match": "all", "conditions": [condition.clone()]}));
            assert_eq!(f.matches(&nz), expected, "{condition}");
        }
    }

    #[test]
    fn all_and_any_combine_conditions() {
        let u = user("u1", false, &["vip"], json!({"country": "NZ"}));
        let c = json!([{"field": "tags", "op": "contains", "value": "vip"},
            {"field": "attributes.country", "op": "eq", "value": "AU"}]);
        assert!(!filter(json!({"match": "all", "conditions": c})).matches(&u));
        assert!(filter(json!({"match": "any", "conditions": c})).matches(&u));
        assert!(
            !filter(json!({"conditions": c})).matches(&u),
            "match defaults to all"
        );
    }

    #[test]
    fn invalid_filters_report_every_problem() {
        let errors = Filter::parse(
            &json!({"match": "some", "conditions": [
                {"field": "name", "op": "eq", "value": "x"},
                {"field": "testUser", "op": "gt", "value": 1},
                {"field": "attributes.a", "op": "in", "value": []},
                {"field": "tags", "op": "like", "value": "x"},
                {"field": "attributes.b", "op": "eq", "value": {"nested": true}}
            ]}),
            "filter",
        )
        .expect_err("invalid");
        let fields: Vec<_> = errors.iter().map(|e| e.field.as_str()).collect();
        assert_eq!(
            fields,
            [
                "filter.match",
                "filter.conditions[0].field",
                "filter.conditions[1].op",
                "filter.conditions[2].value",
                "filter.conditions[3].op",
                "filter.conditions[4].value"
            ]
        );
        assert!(Filter::parse(&json!({"conditions": []}), "f").is_err());
        assert!(Filter::parse(&json!("x"), "f").is_err());
    }
}
