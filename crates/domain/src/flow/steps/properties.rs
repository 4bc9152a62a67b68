//! Validation of a configuration's `steps` and `initialSteps`: each step's id, type and
//! properties, every target, then the graph. Each step type's properties become its typed
//! definition on the way, so what validates is exactly what runs.

use std::collections::{BTreeMap, HashSet};

use serde_json::{Map, Value};

use super::context::{
    declared_variables, edges, next_and_properties, owned, refuse_next, targets, Cx, Declared,
    Scope,
};
use super::definition::{Branch, CreateCard, Program, Rule, StepDefinition, StepKind};
use super::graph::{self, Edge, Site};
use super::vocabulary::{StepType, MAX_CONDITIONS, MAX_STEPS};
use super::{condition, waits};
use crate::flow::problems::{describe, object, string_list, Path, Problems};

/// Checks the `steps` and `initialSteps` of a configuration for
/// [`validate`](crate::flow::config::validate): step ids and types, each type's properties,
/// every target, and the graph. Returns the typed steps when this part had no problem.
pub(in crate::flow) fn check(
    p: &mut Problems,
    config: &Map<String, Value>,
    root: &Path<'_>,
    templates: &HashSet<&str>,
) -> Option<Program> {
    let before = p.len();
    let variables = declared_variables(config.get("variables"));
    let program = check_steps(p, config, root, templates, &variables);
    program.filter(|_| p.len() == before)
}

/// Checks `steps` and `initialSteps`; the program when every step parsed (the caller still
/// decides by the problems whether it stands).
pub(super) fn check_steps<'a>(
    p: &mut Problems,
    config: &'a Map<String, Value>,
    root: &Path<'_>,
    templates: &'a HashSet<&'a str>,
    variables: &'a BTreeMap<&'a str, Declared<'a>>,
) -> Option<Program> {
    let steps_path = root.key("steps");
    let initial_path = root.key("initialSteps");
    let Some(steps) = object(p, config.get("steps"), &steps_path, true) else {
        // Without steps, initialSteps cannot be checked against them; still check its shape.
        string_list(p, config.get("initialSteps"), &initial_path, true);
        return None;
    };
    if steps.len() > MAX_STEPS {
        p.add(
            &steps_path,
            format!("holds {} steps; at most {MAX_STEPS}", steps.len()),
        );
    }
    let kinds = steps
        .iter()
        .map(|(id, step)| {
            let ty = step.get("type").and_then(Value::as_str);
            (id.as_str(), ty.and_then(StepType::parse))
        })
        .collect();
    let scope = Scope {
        kinds,
        variables,
        templates,
        steps,
    };
    let mut cx = Cx {
        p,
        scope,
        ancestry: Vec::new(),
    };
    let mut edges = BTreeMap::new();
    let mut definitions = BTreeMap::new();
    let mut complete = true;
    for (id, step) in steps {
        let (out, definition) = check_step(&mut cx, id, step, &steps_path.key(id));
        edges.insert(id.as_str(), out);
        match definition {
            Some(definition) => {
                definitions.insert(id.clone(), definition);
            }
            None => complete = false,
        }
    }
    let roots = initial_steps(cx.p, config, &initial_path, steps);
    if !roots.is_empty() {
        let acyclic = graph::reachability_and_cycles(cx.p, &edges, &roots, &steps_path);
        // Ancestry is only defined on a graph without cycles; a large one was refused anyway.
        if acyclic && steps.len() <= MAX_STEPS {
            graph::check_ancestry(cx.p, &edges, &roots, &cx.ancestry);
        }
    }
    let program = Program {
        initial_steps: roots.iter().map(|r| (*r).to_owned()).collect(),
        steps: definitions,
        variables: variables
            .iter()
            .filter_map(|(name, d)| Some(((*name).to_owned(), d.ty?)))
            .collect(),
    };
    (complete && !roots.is_empty()).then_some(program)
}

fn initial_steps<'v>(
    p: &mut Problems,
    config: &'v Map<String, Value>,
    path: &Path<'_>,
    steps: &Map<String, Value>,
) -> Vec<&'v str> {
    let initial = string_list(p, config.get("initialSteps"), path, true);
    if config
        .get("initialSteps")
        .is_some_and(|v| v.as_array().is_some_and(Vec::is_empty))
    {
        p.add(path, "must name at least one step");
    }
    let mut roots = Vec::new();
    for (i, id) in initial {
        if steps.contains_key(id) {
            roots.push(id);
        } else {
            p.add(&path.index(i), format!("names no step: `{id}`"));
        }
    }
    roots
}

/// One step: its edges (valid targets only) and its definition when it parsed.
fn check_step<'a>(
    cx: &mut Cx<'a, '_>,
    id: &'a str,
    step: &'a Value,
    step_path: &Path<'_>,
) -> (Vec<Edge<'a>>, Option<StepDefinition>) {
    let Some(step) = object(cx.p, Some(step), step_path, true) else {
        return (Vec::new(), None);
    };
    let id_ok = check_id(cx.p, id, step, step_path);
    let Some(step_type) = check_type(cx.p, step, step_path) else {
        // The type is unknown, but `next` still says where the path goes.
        let next = targets(cx, step.get("next"), &step_path.key("next"), false);
        return (edges(&next, Site::Next), None);
    };
    let (edges, kind) = match step_type {
        StepType::CreateCard => create_card(cx, step, step_path),
        StepType::Wait => waits::wait(cx, step, step_path),
        StepType::WaitForCard => waits::wait_for_card(cx, id, step, step_path),
        StepType::Branch => branch(cx, id, step, step_path),
    };
    let definition = kind.filter(|_| id_ok).map(|kind| StepDefinition {
        id: id.to_owned(),
        kind,
    });
    (edges, definition)
}

fn check_id(p: &mut Problems, id: &str, step: &Map<String, Value>, step_path: &Path<'_>) -> bool {
    let message = match step.get("id") {
        Some(Value::String(own)) if own == id => return true,
        Some(Value::String(own)) => format!("must equal the step's key `{id}`, not `{own}`"),
        Some(other) => format!("must be a string, not {}", describe(other)),
        None => format!("is required and must be `{id}`"),
    };
    p.add(&step_path.key("id"), message);
    false
}

fn check_type(
    p: &mut Problems,
    step: &Map<String, Value>,
    step_path: &Path<'_>,
) -> Option<StepType> {
    let message = match step.get("type") {
        Some(Value::String(t)) => match StepType::parse(t) {
            Some(known) => return Some(known),
            None => {
                let known: Vec<&str> = StepType::ALL.iter().map(|t| t.as_str()).collect();
                format!("unknown step type `{t}` (known: {})", known.join(", "))
            }
        },
        Some(other) => format!("must be a string, not {}", describe(other)),
        None => "is required".to_owned(),
    };
    p.add(&step_path.key("type"), message);
    None
}

fn create_card<'a>(
    cx: &mut Cx<'a, '_>,
    step: &'a Map<String, Value>,
    step_path: &Path<'_>,
) -> (Vec<Edge<'a>>, Option<StepKind>) {
    let (next, out, props) = next_and_properties(cx, step, step_path);
    let Some(props) = props else {
        return (out, None);
    };
    let props_path = step_path.key("properties");
    let template_path = props_path.key("cardTemplateId");
    let template = match props.get("cardTemplateId") {
        Some(Value::String(id)) if cx.scope.templates.contains(id.as_str()) => Some(id),
        Some(Value::String(id)) => {
            let message = format!("names no card template: `{id}`");
            cx.p.add(&template_path, message);
            None
        }
        Some(other) => {
            let message = format!("must be a string, not {}", describe(other));
            cx.p.add(&template_path, message);
            None
        }
        None => {
            cx.p.add(&template_path, "is required");
            None
        }
    };
    let output_path = props_path.key("output");
    if let Some(output) = object(cx.p, props.get("output"), &output_path, false) {
        if output.get("type").is_some_and(|t| !t.is_string()) {
            cx.p.add(&output_path.key("type"), "must be a string");
        }
    }
    let kind = template.map(|id| {
        StepKind::CreateCard(CreateCard {
            card_template_id: id.clone(),
            next: owned(&next),
        })
    });
    (out, kind)
}

fn branch<'a>(
    cx: &mut Cx<'a, '_>,
    id: &'a str,
    step: &'a Map<String, Value>,
    step_path: &Path<'_>,
) -> (Vec<Edge<'a>>, Option<StepKind>) {
    let why =
        "`properties.conditions[].next` and `properties.otherwise` name the steps that follow";
    refuse_next(cx.p, step, step_path, why);
    let props_path = step_path.key("properties");
    let Some(props) = object(cx.p, step.get("properties"), &props_path, true) else {
        return (Vec::new(), None);
    };
    let conditions_path = props_path.key("conditions");
    let mut out = Vec::new();
    let mut rules = Some(Vec::new());
    match props.get("conditions") {
        Some(Value::Array(items)) => {
            if items.is_empty() {
                cx.p.add(&conditions_path, "must hold at least one condition");
            } else if items.len() > MAX_CONDITIONS {
                let message = format!("holds {} conditions; at most {MAX_CONDITIONS}", items.len());
                cx.p.add(&conditions_path, message);
            }
            for (i, item) in items.iter().enumerate() {
                let (rule_edges, parsed) = rule(cx, id, item, &conditions_path.index(i), i);
                out.extend(rule_edges);
                match (parsed, rules.as_mut()) {
                    (Some(parsed), Some(rules)) => rules.push(parsed),
                    _ => rules = None,
                }
            }
        }
        None | Some(Value::Null) => {
            let message = "is required: 1 to 10 `{\"if\": condition, \"next\": [step ids]}`";
            cx.p.add(&conditions_path, message);
            rules = None;
        }
        Some(other) => {
            let message = format!("must be an array of conditions, not {}", describe(other));
            cx.p.add(&conditions_path, message);
            rules = None;
        }
    }
    let otherwise = match props.get("otherwise") {
        None | Some(Value::Null) => None,
        Some(list) => {
            let next = targets(cx, Some(list), &props_path.key("otherwise"), true);
            out.extend(edges(&next, Site::Otherwise));
            Some(owned(&next))
        }
    };
    let kind = rules.map(|conditions| {
        StepKind::Branch(Branch {
            conditions,
            otherwise,
        })
    });
    (out, kind)
}

fn rule<'a>(
    cx: &mut Cx<'a, '_>,
    id: &'a str,
    item: &'a Value,
    path: &Path<'_>,
    index: usize,
) -> (Vec<Edge<'a>>, Option<Rule>) {
    let Some(item) = object(cx.p, Some(item), path, true) else {
        return (Vec::new(), None);
    };
    let if_path = path.key("if");
    let condition = match item.get("if") {
        None | Some(Value::Null) => {
            cx.p.add(&if_path, "is required: the condition");
            None
        }
        Some(value) => condition::parse(cx, id, value, &if_path, 1),
    };
    let next_path = path.key("next");
    let next = match item.get("next") {
        None | Some(Value::Null) => {
            let message = "is required: the steps that follow when the condition holds \
                           (an empty list ends the path)";
            cx.p.add(&next_path, message);
            return (Vec::new(), None);
        }
        Some(list) => targets(cx, Some(list), &next_path, true),
    };
    let out = edges(&next, Site::Condition(index));
    let rule = condition.map(|condition| Rule {
        condition,
        next: owned(&next),
    });
    (out, rule)
}
