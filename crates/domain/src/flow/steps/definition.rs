//! Typed step definitions (contract §21): what a configuration's `steps` say once they
//! validate. The engine runs these, never the JSON.

use std::collections::BTreeMap;

use chrono::Duration;

use super::condition::Condition;
use super::vocabulary::{OnKey, Outcome, StepType, VariableType};
use crate::Timestamp;

/// One step of a configuration: its id (its key in `steps`) and what it does.
#[derive(Debug, Clone, PartialEq)]
pub struct StepDefinition {
    /// The step's id.
    pub id: String,
    /// What the step does, by type.
    pub kind: StepKind,
}

/// What a step does, one variant per [`StepType`].
#[derive(Debug, Clone, PartialEq)]
pub enum StepKind {
    /// `create-card`.
    CreateCard(CreateCard),
    /// `wait`.
    Wait(Wait),
    /// `wait-for-card`.
    WaitForCard(WaitForCard),
    /// `branch`.
    Branch(Branch),
}

/// A `create-card` step: a card from a template, then `next`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CreateCard {
    /// `properties.cardTemplateId`: a template of `cardTemplates`.
    pub card_template_id: String,
    /// The steps that follow once the card is made.
    pub next: Vec<String>,
}

/// A `wait` step: a deadline fixed when the step starts, then `next`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Wait {
    /// Where the deadline comes from.
    pub until: WaitUntil,
    /// The steps that follow once the wait ends, whatever its outcome.
    pub next: Vec<String>,
}

/// Where a `wait` step's deadline comes from: exactly one of its three properties.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WaitUntil {
    /// `duration`: this long after the step starts ([`super::MIN_WAIT`] to
    /// [`super::MAX_WAIT`]).
    After(Duration),
    /// `until`: this instant.
    At(Timestamp),
    /// `untilVariable` (a `date` variable of the flow), moved by `offset` (zero when none was
    /// given; within [`super::MAX_WAIT`] either way).
    Variable {
        /// The variable's name.
        name: String,
        /// How far to move its instant; negative is earlier.
        offset: Duration,
    },
}

/// A `wait-for-card` step: listens to the card of an earlier `create-card` step.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WaitForCard {
    /// `properties.cardStep`: a `create-card` step that is an ancestor on every path here.
    pub card_step: String,
    /// `properties.timeout`: how long after the step starts the wait ends with `timeout`.
    pub timeout: Duration,
    /// `properties.on`: the steps that follow each outcome; an outcome not mapped (and, for a
    /// closed card, not covered by `closed`) ends the path.
    pub on: BTreeMap<OnKey, Vec<String>>,
}

impl WaitForCard {
    /// The steps that follow `outcome`: its own entry of `on`, else for a closed card the
    /// `closed` entry, else none.
    pub fn follows(&self, outcome: Outcome) -> &[String] {
        let (own, closed) = match outcome {
            Outcome::Submitted => (OnKey::Submitted, true),
            Outcome::Dismissed => (OnKey::Dismissed, true),
            Outcome::Expired => (OnKey::Expired, true),
            Outcome::Cancelled => (OnKey::Cancelled, true),
            Outcome::Timeout => (OnKey::Timeout, false),
            _ => return &[],
        };
        match self.on.get(&own) {
            Some(next) => next,
            None if closed => self.on.get(&OnKey::Closed).map_or(&[], Vec::as_slice),
            None => &[],
        }
    }
}

/// A `branch` step: the first condition that holds picks the steps that follow.
#[derive(Debug, Clone, PartialEq)]
pub struct Branch {
    /// `properties.conditions`, in order (1 to [`super::MAX_CONDITIONS`]).
    pub conditions: Vec<Rule>,
    /// `properties.otherwise`: the steps that follow when no condition holds; `None` when the
    /// property is absent, so the path ends.
    pub otherwise: Option<Vec<String>>,
}

/// One entry of a branch's `conditions`.
#[derive(Debug, Clone, PartialEq)]
pub struct Rule {
    /// `if`.
    pub condition: Condition,
    /// `next`: the steps that follow when it holds.
    pub next: Vec<String>,
}

impl StepDefinition {
    /// The step's type.
    pub fn step_type(&self) -> StepType {
        match self.kind {
            StepKind::CreateCard(_) => StepType::CreateCard,
            StepKind::Wait(_) => StepType::Wait,
            StepKind::WaitForCard(_) => StepType::WaitForCard,
            StepKind::Branch(_) => StepType::Branch,
        }
    }

    /// Every step this one can lead to, each once, in the order the configuration names them.
    pub fn targets(&self) -> Vec<&str> {
        let lists: Vec<&[String]> = match &self.kind {
            StepKind::CreateCard(c) => vec![&c.next],
            StepKind::Wait(w) => vec![&w.next],
            StepKind::WaitForCard(w) => w.on.values().map(Vec::as_slice).collect(),
            StepKind::Branch(b) => b
                .conditions
                .iter()
                .map(|r| r.next.as_slice())
                .chain(b.otherwise.as_deref())
                .collect(),
        };
        let mut out: Vec<&str> = Vec::new();
        for id in lists.into_iter().flatten() {
            if !out.contains(&id.as_str()) {
                out.push(id);
            }
        }
        out
    }
}

/// A configuration's steps once it validates: what an instance runs.
#[derive(Debug, Clone, PartialEq)]
pub struct Program {
    /// `initialSteps`, in order.
    pub initial_steps: Vec<String>,
    /// Every step, by id.
    pub steps: BTreeMap<String, StepDefinition>,
    /// The flow variables with their declared types, for the evaluator and the waits.
    pub variables: BTreeMap<String, VariableType>,
}

impl Program {
    /// The step with this id.
    pub fn step(&self, id: &str) -> Option<&StepDefinition> {
        self.steps.get(id)
    }
}
