//! What running a flow version needs of its configuration, worked out once per version: a
//! published version never changes, and a CSV task runs one for every row.

use std::collections::{BTreeSet, VecDeque};
use std::sync::Arc;

use serde_json::Value;

use crate::flow::steps::{Program, StepKind};

use super::variables::ViewTemplate;

/// A flow version's configuration and its `create-card` steps in the order they run.
#[derive(Debug, Clone, PartialEq)]
pub struct FlowPlan {
    /// The version's configuration, as stored.
    pub config: Value,
    pub(crate) cards: Vec<CardStep>,
    /// For a configuration with a step that waits or branches (contract §21): its program,
    /// which each flow instance runs, stored as it goes. `None` for one of `create-card` steps
    /// only, whose cards are all made at once and which stores no instance.
    pub(crate) program: Option<Arc<Program>>,
}

/// A `create-card` step and its card template, ready to render.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct CardStep {
    pub step_id: String,
    pub template_id: String,
    /// The template's `metadata.cardName`.
    pub template_name: String,
    /// The template's `metadata.delivery.priority`, when it has one that fits.
    pub priority: Option<u8>,
    pub view: ViewTemplate,
}

impl FlowPlan {
    /// The plan of a configuration: its `create-card` steps reachable from `initialSteps`,
    /// breadth first, each once, with their templates compiled. Meant for a configuration that
    /// passed validation; a step naming a missing template gets an empty view.
    pub fn of(config: Value) -> Self {
        let program = Program::parse(&config).ok().filter(|p| {
            p.steps
                .values()
                .any(|s| !matches!(s.kind, StepKind::CreateCard(_)))
        });
        let steps = match &program {
            // Every `create-card` step: which of them an instance reaches is its own.
            Some(program) => program
                .steps
                .values()
                .filter_map(|s| match &s.kind {
                    StepKind::CreateCard(c) => Some((s.id.clone(), c.card_template_id.clone())),
                    _ => None,
                })
                .collect(),
            None => steps_in_order(&config),
        };
        let cards = steps
            .into_iter()
            .map(|(step_id, template_id)| {
                let template = config
                    .get("cardTemplates")
                    .and_then(|t| t.get(&template_id))
                    .unwrap_or(&Value::Null);
                CardStep {
                    template_name: template
                        .pointer("/metadata/cardName")
                        .and_then(Value::as_str)
                        .unwrap_or_default()
                        .to_owned(),
                    priority: template
                        .pointer("/metadata/delivery/priority")
                        .and_then(Value::as_u64)
                        .and_then(|p| u8::try_from(p).ok()),
                    view: ViewTemplate::compile(template),
                    step_id,
                    template_id,
                }
            })
            .collect();
        FlowPlan {
            config,
            cards,
            program: program.map(Arc::new),
        }
    }

    /// The `create-card` step with this id.
    pub(crate) fn card_step(&self, id: &str) -> Option<&CardStep> {
        self.cards.iter().find(|c| c.step_id == id)
    }

    /// The templates (by id, each once) of the steps whose cards notify.
    pub(crate) fn notifying_templates(&self) -> Vec<(&str, &Value)> {
        let mut seen = BTreeSet::new();
        self.cards
            .iter()
            .filter(|c| c.view.notifies() && seen.insert(c.template_id.as_str()))
            .filter_map(|c| {
                let template = self.config.get("cardTemplates")?.get(&c.template_id)?;
                Some((c.template_id.as_str(), template))
            })
            .collect()
    }
}

/// The `create-card` steps reachable from `initialSteps`, breadth first, each once, with
/// their card template.
fn steps_in_order(config: &Value) -> Vec<(String, String)> {
    let steps = config.get("steps").and_then(Value::as_object);
    let mut queue: VecDeque<String> = config
        .get("initialSteps")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|s| s.as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default();
    let mut seen = BTreeSet::new();
    let mut out = Vec::new();
    while let Some(id) = queue.pop_front() {
        if !seen.insert(id.clone()) {
            continue;
        }
        let Some(step) = steps.and_then(|s| s.get(&id)) else {
            continue;
        };
        if step.get("type").and_then(Value::as_str) == Some("create-card") {
            if let Some(template) = step
                .pointer("/properties/cardTemplateId")
                .and_then(Value::as_str)
            {
                out.push((id.clone(), template.to_owned()));
            }
        }
        if let Some(next) = step.get("next").and_then(Value::as_array) {
            queue.extend(next.iter().filter_map(|s| s.as_str().map(str::to_owned)));
        }
    }
    out
}
