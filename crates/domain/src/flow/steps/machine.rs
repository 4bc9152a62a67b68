//! The step machine (contract §21) as pure transitions: a step's definition, its state and an
//! event in; its new state and the steps that follow out. The engine stores the states and
//! brings the events (the clock's readings, the card's closing); every decision is here.
//!
//! A step goes `pending` → `running` (a `create-card` step making its card) or `waiting` (a
//! wait) → `done` with its outcome, or `cancelled`, or `failed` (with the error kept). A final
//! state never changes again, so an event that comes twice (a timer that fires again after a
//! restart) changes nothing the second time: [`Transition::changed`] is false.

use std::collections::BTreeSet;

use chrono::Duration;
use serde_json::{Map, Value};

use super::definition::{Branch, StepDefinition, StepKind, WaitForCard, WaitUntil};
use super::evaluate::{evaluate, Lookup};
use super::vocabulary::{Outcome, MAX_WAIT};
use crate::time::{checked_after, parse_timestamp, saturating_after};
use crate::Timestamp;

/// The state of a flow instance.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum InstanceState {
    /// A step is pending, running or waiting, or a card it created is still open.
    Active,
    /// Neither holds any more.
    Completed,
    /// A cancel reached it.
    Cancelled,
    /// A step failed for good.
    Failed,
}

crate::spelling::spelled!(InstanceState {
    Active => "active",
    Completed => "completed",
    Cancelled => "cancelled",
    Failed => "failed",
});

/// A step state's name, as storage and the API spell it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum StepStatus {
    /// Reached, not yet started.
    Pending,
    /// Started; a `create-card` step making its card.
    Running,
    /// A wait until its deadline or its card.
    Waiting,
    /// Ended with an outcome.
    Done,
    /// Cancelled before it ended.
    Cancelled,
    /// Failed for good.
    Failed,
}

crate::spelling::spelled!(StepStatus {
    Pending => "pending",
    Running => "running",
    Waiting => "waiting",
    Done => "done",
    Cancelled => "cancelled",
    Failed => "failed",
});

/// Why a step failed for good.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StepError {
    /// A `wait` step's `untilVariable` had no value that reads as an RFC 3339 timestamp, so
    /// the wait has no deadline.
    #[error("the variable `{name}` holds no RFC 3339 timestamp for the wait's deadline")]
    NoDate {
        /// The variable.
        name: String,
    },
    /// What the engine reported (a card that could not be made, after its retries).
    #[error("{0}")]
    Engine(String),
}

/// What a finished step keeps beside its outcome.
#[derive(Debug, Clone, PartialEq)]
pub enum StepData {
    /// Nothing more.
    None,
    /// The values a `wait-for-card` step's card was submitted with.
    Values(Map<String, Value>),
    /// The index in `conditions` of the branch's condition that held.
    Condition(usize),
}

/// The state of one step of one instance.
#[derive(Debug, Clone, PartialEq)]
pub enum StepState {
    /// Reached, not yet started.
    Pending,
    /// A `create-card` step making its card.
    Running,
    /// A wait: until `deadline` (on the database's clock), or, for `wait-for-card`, until its
    /// card closes first.
    Waiting {
        /// Fixed once, when the step started.
        deadline: Timestamp,
    },
    /// Ended.
    Done {
        /// How.
        outcome: Outcome,
        /// What it keeps.
        data: StepData,
    },
    /// Cancelled before it ended.
    Cancelled,
    /// Failed for good.
    Failed {
        /// Why.
        error: StepError,
    },
}

impl StepState {
    /// Its name.
    pub fn status(&self) -> StepStatus {
        match self {
            StepState::Pending => StepStatus::Pending,
            StepState::Running => StepStatus::Running,
            StepState::Waiting { .. } => StepStatus::Waiting,
            StepState::Done { .. } => StepStatus::Done,
            StepState::Cancelled => StepStatus::Cancelled,
            StepState::Failed { .. } => StepStatus::Failed,
        }
    }

    /// Whether it can never change again.
    pub fn is_final(&self) -> bool {
        matches!(
            self,
            StepState::Done { .. } | StepState::Cancelled | StepState::Failed { .. }
        )
    }
}

/// How a card closed, as a `wait-for-card` step hears it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CardClosure {
    /// Submitted (the card's `completed`).
    Submitted,
    /// Dismissed.
    Dismissed,
    /// Expired.
    Expired,
    /// Cancelled.
    Cancelled,
}

crate::spelling::spelled!(CardClosure {
    Submitted => "submitted",
    Dismissed => "dismissed",
    Expired => "expired",
    Cancelled => "cancelled",
});

impl CardClosure {
    /// The outcome a `wait-for-card` step records for it.
    pub fn outcome(self) -> Outcome {
        match self {
            CardClosure::Submitted => Outcome::Submitted,
            CardClosure::Dismissed => Outcome::Dismissed,
            CardClosure::Expired => Outcome::Expired,
            CardClosure::Cancelled => Outcome::Cancelled,
        }
    }
}

/// A card that closed: how, and the values it was submitted with (empty otherwise).
#[derive(Debug, Clone, PartialEq)]
pub struct ClosedCard {
    /// How it closed.
    pub closure: CardClosure,
    /// The submitted values.
    pub values: Map<String, Value>,
}

/// What a step needs to know when it starts.
#[derive(Clone, Copy)]
pub struct Start<'a> {
    /// When, on the database's clock.
    pub at: Timestamp,
    /// The instance's variables and finished steps.
    pub facts: &'a dyn Lookup,
    /// For a `wait-for-card` step: its card, when it closed before the wait started.
    pub card: Option<&'a ClosedCard>,
}

/// What happens to a step.
#[derive(Clone)]
pub enum Event<'a> {
    /// It starts (from `pending`).
    Started(Start<'a>),
    /// A `create-card` step's card was made.
    CardCreated,
    /// The database's clock read `at`, at or after a waiting step's deadline.
    DeadlineReached {
        /// The reading; one before the deadline changes nothing.
        at: Timestamp,
    },
    /// The card a `wait-for-card` step listens to closed.
    CardClosed(&'a ClosedCard),
    /// It failed for good.
    Failed(StepError),
    /// Its instance was cancelled.
    Cancel,
}

/// A step's new state and the steps that follow it.
#[derive(Debug, Clone, PartialEq)]
pub struct Transition {
    /// The new state (the old one when nothing changed).
    pub state: StepState,
    /// The steps that follow, when it has just ended; empty otherwise.
    pub follow: Vec<String>,
    /// Whether the state changed: false for an event that does not apply to it.
    pub changed: bool,
}

fn to(state: StepState, follow: &[String]) -> Transition {
    Transition {
        state,
        follow: follow.to_vec(),
        changed: true,
    }
}

fn done(outcome: Outcome, data: StepData, follow: &[String]) -> Transition {
    to(StepState::Done { outcome, data }, follow)
}

/// Where a `wait` step's deadline is, decided when it starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Deadline {
    /// Ahead, within [`MAX_WAIT`]: wait until then.
    At(Timestamp),
    /// Not after the start: the wait ends at once with `past`.
    Past,
    /// More than [`MAX_WAIT`] ahead (or past the latest instant the service computes): the wait
    /// ends at once with `capped`.
    Capped,
}

/// The deadline of a wait that starts at `at`. A deadline equal to `at` counts as passed.
/// Every step is checked, so no value of a variable can make it panic.
pub fn wait_deadline(
    until: &WaitUntil,
    at: Timestamp,
    facts: &dyn Lookup,
) -> Result<Deadline, StepError> {
    let target = match until {
        WaitUntil::After(d) => match checked_after(at, *d) {
            Some(t) => t,
            None if *d < Duration::zero() => return Ok(Deadline::Past),
            None => return Ok(Deadline::Capped),
        },
        WaitUntil::At(t) => *t,
        WaitUntil::Variable { name, offset } => {
            let base = facts
                .variable(name)
                .and_then(Value::as_str)
                .and_then(|text| parse_timestamp(text).ok())
                .ok_or_else(|| StepError::NoDate { name: name.clone() })?;
            match checked_after(base, *offset) {
                Some(t) => t,
                None if *offset < Duration::zero() => return Ok(Deadline::Past),
                None => return Ok(Deadline::Capped),
            }
        }
    };
    if target <= at {
        Ok(Deadline::Past)
    } else if checked_after(at, MAX_WAIT).is_some_and(|limit| target > limit) {
        Ok(Deadline::Capped)
    } else {
        Ok(Deadline::At(target))
    }
}

/// The step's new state after `event`, and the steps that follow when it ends. An event that
/// does not apply (a second start, a deadline before its time, any event on a final state)
/// leaves the state as it is.
pub fn transition(step: &StepDefinition, state: &StepState, event: Event<'_>) -> Transition {
    let unchanged = || Transition {
        state: state.clone(),
        follow: Vec::new(),
        changed: false,
    };
    if state.is_final() {
        return unchanged();
    }
    match (state, event, &step.kind) {
        (_, Event::Cancel, _) => to(StepState::Cancelled, &[]),
        (_, Event::Failed(error), _) => to(StepState::Failed { error }, &[]),
        (StepState::Pending, Event::Started(start), _) => start_step(&step.kind, start),
        (StepState::Running, Event::CardCreated, StepKind::CreateCard(c)) => {
            done(Outcome::Created, StepData::None, &c.next)
        }
        (StepState::Waiting { deadline }, Event::DeadlineReached { at }, kind)
            if at >= *deadline =>
        {
            match kind {
                StepKind::Wait(w) => done(Outcome::Elapsed, StepData::None, &w.next),
                StepKind::WaitForCard(w) => done(
                    Outcome::Timeout,
                    StepData::None,
                    w.follows(Outcome::Timeout),
                ),
                StepKind::CreateCard(_) | StepKind::Branch(_) => unchanged(),
            }
        }
        (StepState::Waiting { .. }, Event::CardClosed(card), StepKind::WaitForCard(w)) => {
            card_closed(w, card)
        }
        _ => unchanged(),
    }
}

fn start_step(kind: &StepKind, start: Start<'_>) -> Transition {
    match kind {
        StepKind::CreateCard(_) => to(StepState::Running, &[]),
        StepKind::Wait(w) => match wait_deadline(&w.until, start.at, start.facts) {
            Ok(Deadline::At(deadline)) => to(StepState::Waiting { deadline }, &[]),
            Ok(Deadline::Past) => done(Outcome::Past, StepData::None, &w.next),
            Ok(Deadline::Capped) => done(Outcome::Capped, StepData::None, &w.next),
            Err(error) => to(StepState::Failed { error }, &[]),
        },
        // A card that closed before the wait started ends it at once: nothing is missed.
        StepKind::WaitForCard(w) => match start.card {
            Some(card) => card_closed(w, card),
            None => {
                let deadline = saturating_after(start.at, w.timeout);
                to(StepState::Waiting { deadline }, &[])
            }
        },
        StepKind::Branch(b) => branch(b, start.facts),
    }
}

fn card_closed(step: &WaitForCard, card: &ClosedCard) -> Transition {
    let outcome = card.closure.outcome();
    let data = match card.closure {
        CardClosure::Submitted => StepData::Values(card.values.clone()),
        _ => StepData::None,
    };
    done(outcome, data, step.follows(outcome))
}

fn branch(step: &Branch, facts: &dyn Lookup) -> Transition {
    let held = step
        .conditions
        .iter()
        .position(|rule| evaluate(&rule.condition, facts));
    match (
        held.and_then(|i| Some((i, step.conditions.get(i)?))),
        &step.otherwise,
    ) {
        (Some((i, rule)), _) => done(Outcome::Matched, StepData::Condition(i), &rule.next),
        (None, Some(otherwise)) => done(Outcome::Otherwise, StepData::None, otherwise),
        (None, None) => done(Outcome::Unmatched, StepData::None, &[]),
    }
}

/// The state of an instance from its steps' states, whether a card it created is still open,
/// and whether a cancel reached it. A cancel wins over all; then a step that failed; then
/// anything still to do or open keeps it active.
pub fn instance_state<'a>(
    steps: impl IntoIterator<Item = &'a StepState>,
    open_cards: bool,
    cancelled: bool,
) -> InstanceState {
    if cancelled {
        return InstanceState::Cancelled;
    }
    let mut active = open_cards;
    for state in steps {
        match state {
            StepState::Failed { .. } => return InstanceState::Failed,
            StepState::Pending | StepState::Running | StepState::Waiting { .. } => active = true,
            StepState::Done { .. } | StepState::Cancelled => {}
        }
    }
    if active {
        InstanceState::Active
    } else {
        InstanceState::Completed
    }
}

/// The steps of `follow` not yet `reached`, each once, in order: a step with several parents
/// runs once per instance, when the first parent leads to it.
pub fn first_reached(reached: &BTreeSet<String>, follow: &[String]) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for id in follow {
        if !reached.contains(id) && !out.contains(id) {
            out.push(id.clone());
        }
    }
    out
}
