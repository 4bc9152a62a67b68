//! An element's `target`: who gets its cards, by ids, segment, tag, filter or every test user.

use serde_json::{Map, Value};

use super::problem::err;
use crate::audience::filter::Filter;
use crate::audience::validate_user_id;
use crate::FieldError;

/// The most `targetUserIds` one `user` target may have.
pub const MAX_TARGET_USERS: usize = 10_000;

/// Who an element targets, its `target`. In test mode only test users of it get cards.
#[derive(Debug, Clone, PartialEq)]
pub enum Target {
    /// `user`: these end users (`targetUserIds`), sorted, without duplicates. A user need not
    /// exist.
    Users(Vec<String>),
    /// `segment`: the users the segment (`targetSegmentId`) matches when the invocation runs.
    Segment(String),
    /// `tag`: the users with this tag (`tagName`, or `tag`).
    Tag(String),
    /// `allTestUsers`: every test user of the environment.
    AllTestUsers,
    /// `filters`: the users the filter (`filter`) matches when the invocation runs.
    Filters(Filter),
}

impl Target {
    /// Segment, tag and filter targets are "bulk targets" (docs/api.md, Triggers): at most
    /// five run at once per environment.
    pub fn is_bulk(&self) -> bool {
        matches!(
            self,
            Target::Segment(_) | Target::Tag(_) | Target::Filters(_)
        )
    }
}

/// The target at `path`, or (with its problems in `errors`) none.
pub(super) fn target(errors: &mut Vec<FieldError>, raw: &Value, path: &str) -> Option<Target> {
    let Some(object) = raw.as_object() else {
        err(errors, path, "is required: an object with a `type`");
        return None;
    };
    match object.get("type").and_then(Value::as_str) {
        Some("user") => user_ids(errors, object.get("targetUserIds"), path),
        Some("segment") => named(errors, object, &["targetSegmentId"], path).map(Target::Segment),
        Some("tag") => named(errors, object, &["tagName", "tag"], path).map(Target::Tag),
        Some("allTestUsers") => Some(Target::AllTestUsers),
        Some("filters") => filter(errors, object.get("filter"), path),
        _ => {
            err(
                errors,
                format!("{path}.type"),
                "must be user, segment, tag, allTestUsers or filters",
            );
            None
        }
    }
}

/// A `user` target: its `targetUserIds`, each a valid user id.
fn user_ids(errors: &mut Vec<FieldError>, ids: Option<&Value>, path: &str) -> Option<Target> {
    let ids = match ids {
        Some(Value::Array(ids)) if !ids.is_empty() && ids.len() <= MAX_TARGET_USERS => ids,
        _ => {
            err(
                errors,
                format!("{path}.targetUserIds"),
                format!("must be an array of 1 to {MAX_TARGET_USERS} user ids"),
            );
            return None;
        }
    };
    let mut users = Vec::with_capacity(ids.len());
    let before = errors.len();
    for (i, id) in ids.iter().enumerate() {
        match id {
            Value::String(id) => {
                validate_user_id(errors, &format!("{path}.targetUserIds[{i}]"), id);
                users.push(id.clone());
            }
            _ => err(
                errors,
                format!("{path}.targetUserIds[{i}]"),
                "must be a string",
            ),
        }
    }
    users.sort();
    users.dedup();
    (errors.len() == before).then_some(Target::Users(users))
}

/// The name a segment or tag target gives, under the first of `keys` it has (the first key
/// is the one a missing name is reported at).
fn named(
    errors: &mut Vec<FieldError>,
    object: &Map<String, Value>,
    keys: &[&str],
    path: &str,
) -> Option<String> {
    match keys.iter().find_map(|k| object.get(*k).map(|v| (k, v))) {
        // A segment id or a tag never holds a control character (none is stored).
        Some((_, Value::String(s))) if !s.is_empty() && !s.chars().any(char::is_control) => {
            Some(s.clone())
        }
        Some((k, _)) => {
            err(
                errors,
                format!("{path}.{k}"),
                "must be a non-empty string without control characters",
            );
            None
        }
        None => {
            err(errors, format!("{path}.{}", keys[0]), "is required");
            None
        }
    }
}

/// A `filters` target: its `filter`, parsed.
fn filter(errors: &mut Vec<FieldError>, filter: Option<&Value>, path: &str) -> Option<Target> {
    let Some(filter) = filter else {
        err(
            errors,
            format!("{path}.filter"),
            "is required for a `filters` target",
        );
        return None;
    };
    match Filter::parse(filter, &format!("{path}.filter")) {
        Ok(filter) => Some(Target::Filters(filter)),
        Err(mut e) => {
            errors.append(&mut e);
            None
        }
    }
}
