//! The vocabulary of configuration validation: the JSON path of a value, the problems found
//! so far, and the checks of a value's shape that every part of a configuration shares.

use serde_json::{Map, Value};

use crate::FieldError;

/// The JSON path of the value being looked at, as a chain of borrowed segments: it costs
/// nothing until a problem is reported, when it is rendered
/// (`config.steps.s1.next[0]`, `config.cardTemplates["a b"]`).
#[derive(Clone, Copy)]
pub(super) enum Path<'a> {
    Root(&'a str),
    Key(&'a Path<'a>, &'a str),
    Index(&'a Path<'a>, usize),
}

impl<'a> Path<'a> {
    pub(super) fn key(&'a self, key: &'a str) -> Path<'a> {
        Path::Key(self, key)
    }

    pub(super) fn index(&'a self, index: usize) -> Path<'a> {
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
pub(super) struct Problems {
    errors: Vec<FieldError>,
}

impl Problems {
    /// An empty collection.
    pub(super) fn new() -> Self {
        Problems { errors: Vec::new() }
    }

    pub(super) fn add(&mut self, path: &Path<'_>, message: impl Into<String>) {
        self.errors.push(FieldError::new(path.to_string(), message));
    }

    /// A problem whose path was rendered earlier (checks that wait for the whole graph).
    pub(super) fn add_field(&mut self, field: String, message: impl Into<String>) {
        self.errors.push(FieldError::new(field, message));
    }

    /// How many problems were collected so far.
    pub(super) fn len(&self) -> usize {
        self.errors.len()
    }

    /// The problems, ordered by path (the sort keeps problems of one path in order).
    pub(super) fn into_sorted(mut self) -> Vec<FieldError> {
        self.errors.sort_by(|a, b| a.field.cmp(&b.field));
        self.errors
    }
}

/// What kind of JSON value `value` is, as a problem names it ("a string", "null").
pub(super) fn describe(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// A value as a problem shows it: a string quoted, anything else by its kind.
pub(super) fn show(value: &Value) -> String {
    match value {
        Value::String(s) => format!("`{s}`"),
        other => describe(other).to_owned(),
    }
}

/// An object, or a problem at `path` (when it is missing and `required`, or not an object).
pub(super) fn object<'v>(
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

/// A list of strings: (index, value) of the valid entries; problems for the others.
pub(super) fn string_list<'v>(
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
