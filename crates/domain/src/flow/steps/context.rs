//! What the checks of one step share: the scope of the whole configuration (its steps' types,
//! its variables, its templates), the problems found so far, the ancestry claims checked once
//! the graph is known, and the helpers that read a step's targets.

use std::collections::{BTreeMap, HashSet};

use serde_json::{Map, Value};

use super::graph::{Ancestry, Edge, Site};
use super::vocabulary::{StepType, VariableType};
use crate::flow::problems::{object, string_list, Path, Problems};

/// A flow variable as a wait or a condition sees it: its declared type (None when the type is
/// missing or unknown, a problem reported on the definition) and its default.
#[derive(Debug, Clone, Copy)]
pub(super) struct Declared<'v> {
    pub(super) ty: Option<VariableType>,
    pub(super) default: Option<&'v Value>,
}

pub(super) fn declared_variables(value: Option<&Value>) -> BTreeMap<&str, Declared<'_>> {
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

/// What the checks of one step may look up about the rest of the configuration.
pub(super) struct Scope<'a> {
    /// Every step's type, as written (None when it is missing or unknown).
    pub(super) kinds: BTreeMap<&'a str, Option<StepType>>,
    /// The flow's variables.
    pub(super) variables: &'a BTreeMap<&'a str, Declared<'a>>,
    pub(super) templates: &'a HashSet<&'a str>,
    pub(super) steps: &'a Map<String, Value>,
}

/// The state of a check: the problems, the scope, and the ancestry claims that can only be
/// checked once the whole graph is known.
pub(super) struct Cx<'a, 'p> {
    pub(super) p: &'p mut Problems,
    pub(super) scope: Scope<'a>,
    pub(super) ancestry: Vec<Ancestry<'a>>,
}

/// The ids of a list of step ids that name steps; a problem for each that does not.
pub(super) fn targets<'a>(
    cx: &mut Cx<'a, '_>,
    value: Option<&'a Value>,
    path: &Path<'_>,
    required: bool,
) -> Vec<&'a str> {
    let mut out = Vec::new();
    for (i, target) in string_list(cx.p, value, path, required) {
        if cx.scope.steps.contains_key(target) {
            out.push(target);
        } else {
            cx.p.add(&path.index(i), format!("names no step: `{target}`"));
        }
    }
    out
}

pub(super) fn edges<'a>(targets: &[&'a str], site: Site<'a>) -> Vec<Edge<'a>> {
    targets.iter().map(|target| Edge { target, site }).collect()
}

pub(super) fn owned(ids: &[&str]) -> Vec<String> {
    ids.iter().map(|id| (*id).to_owned()).collect()
}

/// A step that goes on to its `next` steps and needs its `properties`: those targets, their
/// edges, and the properties object (none, with its problem recorded, when it is missing or
/// not an object).
pub(super) fn next_and_properties<'a>(
    cx: &mut Cx<'a, '_>,
    step: &'a Map<String, Value>,
    step_path: &Path<'_>,
) -> (Vec<&'a str>, Vec<Edge<'a>>, Option<&'a Map<String, Value>>) {
    let next = targets(cx, step.get("next"), &step_path.key("next"), false);
    let out = edges(&next, Site::Next);
    let props = object(
        cx.p,
        step.get("properties"),
        &step_path.key("properties"),
        true,
    );
    (next, out, props)
}

/// A `next` on a step type whose properties say where each path goes would make a path
/// ambiguous; an empty one says nothing and passes.
pub(super) fn refuse_next(
    p: &mut Problems,
    step: &Map<String, Value>,
    step_path: &Path<'_>,
    why: &str,
) {
    match step.get("next") {
        None | Some(Value::Null) => {}
        Some(Value::Array(items)) if items.is_empty() => {}
        Some(_) => {
            let ty = step.get("type").and_then(Value::as_str).unwrap_or_default();
            p.add(
                &step_path.key("next"),
                format!("is refused on `{ty}` steps: {why}"),
            );
        }
    }
}
