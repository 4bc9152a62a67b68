//! An instance run forward (contract §21): from its start, or from what happened since it last
//! stopped, through every step that can go on now, to the waits it stops at. Pure: the engine
//! brings the clock's reading and the closed cards, and stores what comes out in one
//! transaction with the cards it asks for.
//!
//! What an instance keeps is a [`StepRecord`] per step it reached, by step id, stored as
//! compact JSON ([`encode`], [`decode`]): a step is reached once per instance, so a record, once
//! there, is never made again, and a `create-card` step's card is asked for once.

use std::collections::{BTreeMap, VecDeque};

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::definition::{Program, StepKind};
use super::evaluate::Facts;
use super::machine::{
    instance_state, transition, ClosedCard, Event, InstanceState, Start, StepData, StepError,
    StepState, StepStatus,
};
use super::vocabulary::Outcome;
use crate::Timestamp;

/// What an instance records of one step it reached.
#[derive(Debug, Clone, PartialEq)]
pub struct StepRecord {
    /// Its state: for a wait, with its deadline; once done, with its outcome and data.
    pub state: StepState,
    /// When it was reached and started.
    pub started: Timestamp,
    /// When it ended, once final.
    pub finished: Option<Timestamp>,
    /// The card a `create-card` step made.
    pub card: Option<String>,
    /// Its place in the order the instance reached its steps, from 0.
    pub order: usize,
}

/// An instance's records, by step id.
pub type Records = BTreeMap<String, StepRecord>;

/// What running an instance forward came to.
#[derive(Debug, Clone, PartialEq)]
pub struct Advance {
    /// Every record, the new ones and the changed ones included.
    pub records: Records,
    /// The `create-card` steps reached, in the order they ran, with the id of the card each
    /// must make (from the caller's `new_card`).
    pub cards: Vec<(String, String)>,
    /// The earliest deadline of a step still waiting: when to look at the instance again.
    pub due: Option<Timestamp>,
    /// The instance's state: active while a step waits, failed once one failed, else
    /// completed. (Its open cards do not keep it active here: a cancel finds them itself.)
    pub state: InstanceState,
    /// Whether anything changed.
    pub changed: bool,
}

/// Runs a new instance from `initialSteps` at `at`, with the instance's flow `variables`.
/// `new_card` gives each card's id.
pub fn start(
    program: &Program,
    variables: &Map<String, Value>,
    at: Timestamp,
    new_card: &mut dyn FnMut() -> String,
) -> Advance {
    let mut run = Run::new(program, variables, Records::new(), at, &no_card);
    run.forward(program.initial_steps.iter().cloned(), new_card);
    run.finish()
}

/// Runs an instance on from its `records` at `at`: each waiting step whose deadline has come,
/// or whose card has closed (`closed` answers for a card id), ends, and the steps that follow
/// run. An instance whose waits have not come changes nothing.
pub fn resume(
    program: &Program,
    variables: &Map<String, Value>,
    records: Records,
    at: Timestamp,
    closed: &dyn Fn(&str) -> Option<ClosedCard>,
    new_card: &mut dyn FnMut() -> String,
) -> Advance {
    let mut run = Run::new(program, variables, records, at, closed);
    let mut follow = Vec::new();
    let waiting: Vec<String> = run
        .records
        .iter()
        .filter(|(_, r)| matches!(r.state, StepState::Waiting { .. }))
        .map(|(id, _)| id.clone())
        .collect();
    for id in waiting {
        let Some(step) = program.step(&id) else {
            continue;
        };
        let card = run.card_of(step).and_then(closed);
        let Some(record) = run.records.get(&id) else {
            continue;
        };
        let event = match &card {
            Some(card) => Event::CardClosed(card),
            None => Event::DeadlineReached { at },
        };
        let t = transition(step, &record.state, event);
        if t.changed {
            run.set(&id, t.state);
            follow.extend(t.follow);
        }
    }
    run.forward(follow, new_card);
    run.finish()
}

/// Every waiting step of `records` cancelled, for an instance a cancel reached.
pub fn cancel(records: &mut Records, at: Timestamp) {
    for record in records.values_mut() {
        if !record.state.is_final() {
            record.state = StepState::Cancelled;
            record.finished = Some(at);
        }
    }
}

/// Cards made in a new instance's first run are all open.
fn no_card(_: &str) -> Option<ClosedCard> {
    None
}

struct Run<'a> {
    program: &'a Program,
    closed: &'a dyn Fn(&str) -> Option<ClosedCard>,
    facts: Facts,
    records: Records,
    at: Timestamp,
    cards: Vec<(String, String)>,
    changed: bool,
}

impl<'a> Run<'a> {
    fn new(
        program: &'a Program,
        variables: &Map<String, Value>,
        records: Records,
        at: Timestamp,
        closed: &'a dyn Fn(&str) -> Option<ClosedCard>,
    ) -> Self {
        let mut facts = Facts {
            variables: variables.clone(),
            ..Facts::default()
        };
        for (id, record) in &records {
            learn(&mut facts, id, &record.state);
        }
        Run {
            program,
            closed,
            facts,
            records,
            at,
            cards: Vec::new(),
            changed: false,
        }
    }

    /// The card a `wait-for-card` step listens to, once its card step made one.
    fn card_of(&self, step: &super::StepDefinition) -> Option<&str> {
        let StepKind::WaitForCard(w) = &step.kind else {
            return None;
        };
        self.records.get(&w.card_step)?.card.as_deref()
    }

    fn set(&mut self, id: &str, state: StepState) {
        learn(&mut self.facts, id, &state);
        if let Some(record) = self.records.get_mut(id) {
            if state.is_final() {
                record.finished = Some(self.at);
            }
            record.state = state;
            self.changed = true;
        }
    }

    /// Starts each step of `queue` not reached yet, and those that follow them, breadth first.
    fn forward(
        &mut self,
        queue: impl IntoIterator<Item = String>,
        new_card: &mut dyn FnMut() -> String,
    ) {
        let mut queue: VecDeque<String> = queue.into_iter().collect();
        while let Some(id) = queue.pop_front() {
            if self.records.contains_key(&id) {
                continue;
            }
            let Some(step) = self.program.step(&id) else {
                continue;
            };
            let (state, follow, card) = {
                // A card closed before its wait starts ends the wait at once: nothing is missed.
                let closed = self.card_of(step).and_then(|c| (self.closed)(c));
                let start = Start {
                    at: self.at,
                    facts: &self.facts,
                    card: closed.as_ref(),
                };
                let t = transition(step, &StepState::Pending, Event::Started(start));
                match t.state {
                    StepState::Running => {
                        let made = transition(step, &StepState::Running, Event::CardCreated);
                        let card = new_card();
                        self.cards.push((id.clone(), card.clone()));
                        (made.state, made.follow, Some(card))
                    }
                    state => (state, t.follow, None),
                }
            };
            learn(&mut self.facts, &id, &state);
            let finished = state.is_final().then_some(self.at);
            let order = self.records.len();
            self.records.insert(
                id,
                StepRecord {
                    state,
                    started: self.at,
                    finished,
                    card,
                    order,
                },
            );
            self.changed = true;
            queue.extend(follow);
        }
    }

    fn finish(self) -> Advance {
        let due = self
            .records
            .values()
            .filter_map(|r| match r.state {
                StepState::Waiting { deadline } => Some(deadline),
                _ => None,
            })
            .min();
        let mut state = instance_state(self.records.values().map(|r| &r.state), false, false);
        if state == InstanceState::Active && due.is_none() {
            state = InstanceState::Completed;
        }
        Advance {
            records: self.records,
            cards: self.cards,
            due,
            state,
            changed: self.changed,
        }
    }
}

/// What a finished step tells the steps after it.
fn learn(facts: &mut Facts, id: &str, state: &StepState) {
    if let StepState::Done { outcome, data } = state {
        facts.outcomes.insert(id.to_owned(), *outcome);
        if let StepData::Values(values) = data {
            facts.values.insert(id.to_owned(), values.clone());
        }
    }
}

/// A record as stored: short keys, instants in milliseconds.
///
/// Two forms are read. The one written is an object of records by step id, the states spelled
/// out and the instants since the epoch. The short one, `[base, {step id: record}]`, has
/// one-letter states ([`short`]) and instants after `base` (the earliest start), a start at the
/// base left out: about a quarter fewer bytes for a waiting instance. This version reads it so
/// that a later one may write it while replicas of this one still serve (docs/operations.md,
/// Upgrading).
#[derive(Serialize, Deserialize)]
struct Stored {
    s: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    o: Option<String>,
    /// When it started: since the epoch in the form written; in the short one after the base,
    /// left out at the base.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    t: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    d: Option<i64>,
    /// When it ended, if not when it started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    f: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    c: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    v: Option<Map<String, Value>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    i: Option<usize>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    e: Option<String>,
    /// Its place in the order reached.
    #[serde(default, skip_serializing_if = "is_first")]
    n: usize,
}

fn is_first(n: &usize) -> bool {
    *n == 0
}

/// A step state's letter as stored.
fn short(status: StepStatus) -> &'static str {
    match status {
        StepStatus::Pending => "p",
        StepStatus::Running => "r",
        StepStatus::Waiting => "w",
        StepStatus::Done => "d",
        StepStatus::Cancelled => "c",
        StepStatus::Failed => "f",
    }
}

/// A step state from its name (the form written) or its letter (the short form).
fn status_of(text: &str, written: bool) -> Option<StepStatus> {
    match written {
        true => StepStatus::parse(text),
        false => StepStatus::ALL.into_iter().find(|s| short(*s) == text),
    }
}

fn millis(t: Timestamp) -> i64 {
    t.timestamp_millis()
}

/// The instant `ms` after `base`, or why it cannot be one.
fn instant(base: i64, ms: i64) -> Result<Timestamp, String> {
    base.checked_add(ms)
        .and_then(Timestamp::from_timestamp_millis)
        .ok_or_else(|| format!("instant {base} + {ms} out of range"))
}

/// The records as the JSON text an instance stores.
pub fn encode(records: &Records) -> String {
    write(records, false)
}

/// The records in the short form, which this version reads and does not write.
#[cfg(test)]
pub(crate) fn encode_short(records: &Records) -> String {
    write(records, true)
}

/// The records as stored, in the short form or the one written.
fn write(records: &Records, short_form: bool) -> String {
    let base = match short_form {
        true => records
            .values()
            .map(|r| millis(r.started))
            .min()
            .unwrap_or(0),
        false => 0,
    };
    let after = |t: Timestamp| millis(t).saturating_sub(base);
    let state = |status: StepStatus| match short_form {
        true => short(status),
        false => status.as_str(),
    };
    let stored: BTreeMap<&str, Stored> = records
        .iter()
        .map(|(id, r)| {
            let mut s = Stored {
                s: state(r.state.status()).to_owned(),
                o: None,
                t: Some(after(r.started)).filter(|t| !short_form || *t != 0),
                d: None,
                // A step that ended as it started (most do) keeps one instant.
                f: r.finished.filter(|f| *f != r.started).map(after),
                c: r.card.clone(),
                v: None,
                i: None,
                e: None,
                n: r.order,
            };
            match &r.state {
                StepState::Waiting { deadline } => s.d = Some(after(*deadline)),
                StepState::Done { outcome, data } => {
                    s.o = Some(outcome.as_str().to_owned());
                    match data {
                        StepData::Values(v) => s.v = Some(v.clone()),
                        StepData::Condition(i) => s.i = Some(*i),
                        StepData::None => {}
                    }
                }
                StepState::Failed { error } => s.e = Some(error.to_string()),
                StepState::Pending | StepState::Running | StepState::Cancelled => {}
            }
            (id.as_str(), s)
        })
        .collect();
    let text = match short_form {
        true => serde_json::to_string(&(base, stored)),
        false => serde_json::to_string(&stored),
    };
    text.unwrap_or_else(|_| "{}".to_owned())
}

/// The records an instance stored, or why they cannot be read.
pub fn decode(text: &str) -> Result<Records, String> {
    let bad = |e: serde_json::Error| format!("an instance's steps: {e}");
    // The form written is an object, its instants since the epoch.
    let written = text.trim_start().starts_with('{');
    let (base, stored): (i64, BTreeMap<String, Stored>) = match written {
        true => (0, serde_json::from_str(text).map_err(bad)?),
        false => serde_json::from_str(text).map_err(bad)?,
    };
    let mut records = Records::new();
    for (id, s) in stored {
        let status = status_of(&s.s, written).ok_or_else(|| format!("step status `{}`", s.s))?;
        let state = match status {
            StepStatus::Pending => StepState::Pending,
            StepStatus::Running => StepState::Running,
            StepStatus::Waiting => StepState::Waiting {
                deadline: instant(base, s.d.ok_or("a waiting step without its deadline")?)?,
            },
            StepStatus::Done => {
                let text = s.o.as_deref().unwrap_or_default();
                let outcome = Outcome::parse(text).ok_or_else(|| format!("outcome `{text}`"))?;
                let data = match (s.v, s.i) {
                    (Some(v), _) => StepData::Values(v),
                    (None, Some(i)) => StepData::Condition(i),
                    (None, None) => StepData::None,
                };
                StepState::Done { outcome, data }
            }
            StepStatus::Cancelled => StepState::Cancelled,
            StepStatus::Failed => StepState::Failed {
                error: StepError::Engine(s.e.unwrap_or_default()),
            },
        };
        let started = match (s.t, written) {
            (Some(t), _) => instant(base, t)?,
            (None, false) => instant(base, 0)?,
            (None, true) => return Err("a step without its start".into()),
        };
        let finished = match s.f {
            Some(f) => Some(instant(base, f)?),
            None => state.is_final().then_some(started),
        };
        records.insert(
            id,
            StepRecord {
                state,
                started,
                finished,
                card: s.c,
                order: s.n,
            },
        );
    }
    Ok(records)
}

/// What a change of an instance adds to its invocation's counts: `(step id, metric)` to a
/// delta, the step id empty for the instance's own state. From `before` (none for a new
/// instance) to `after`. The metrics are the instance states (`active`, `completed`,
/// `cancelled`, `failed`), and per step `reached`, the step states a reached step is in
/// (`waiting`, `done`, `cancelled`, `failed`; `pending` and `running` never last past a save)
/// and `outcome.<name>` once it is done.
pub fn tally(
    before: Option<(&Records, InstanceState)>,
    after: (&Records, InstanceState),
    counts: &mut BTreeMap<(String, String), i64>,
) {
    let mut add = |step: &str, metric: String, delta: i64| {
        *counts.entry((step.to_owned(), metric)).or_insert(0) += delta;
    };
    let (records, state) = after;
    match before {
        Some((_, old)) if old == state => {}
        Some((_, old)) => {
            add("", old.as_str().to_owned(), -1);
            add("", state.as_str().to_owned(), 1);
        }
        None => add("", state.as_str().to_owned(), 1),
    }
    for (id, record) in records {
        let old = before.and_then(|(r, _)| r.get(id));
        if old.is_none() {
            add(id, "reached".to_owned(), 1);
        }
        let status = record.state.status();
        let old_status = old.map(|r| r.state.status());
        if old_status != Some(status) {
            if let Some(s) = old_status {
                add(id, s.as_str().to_owned(), -1);
            }
            add(id, status.as_str().to_owned(), 1);
            if let StepState::Done { outcome, .. } = &record.state {
                add(id, format!("outcome.{}", outcome.as_str()), 1);
            }
        }
    }
    counts.retain(|_, n| *n != 0);
}
