//! Saving instances run on, each whole in one transaction (on SQLite, a save of many in parts
//! that hand the writers' turn on to a writer waiting): each one a cancel of its flow now covers
//! stops as it was read; the others are saved fenced by their revision, with the cards and
//! events of their steps, their invocations' counts and the daily totals.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use diesel::prelude::*;
use domain::cancel::CancelTask;
use domain::card::{AnalyticsEvent, CardInstance};
use domain::flow::steps::run::{self, Records};
use domain::flow::steps::InstanceState;
use domain::trigger::instances::{FlowInstance, InstanceAdvance};
use domain::trigger::{BatchResult, InvocationStatus};
use domain::Timestamp;

use super::counting::count;
use super::fenced::save_fenced;
use crate::db::{AnyConnection, Failure, Others};
use crate::markers::markers_since;
use crate::schema::invocations;
use crate::totals::Totals;
use crate::writes::RunWrites;

/// An instance to save: as it is now, its records and state as read, and its cards and
/// events (none once a cancel covers it).
type Decided = (
    FlowInstance,
    (Records, InstanceState),
    Vec<Arc<CardInstance>>,
    Vec<AnalyticsEvent>,
);

/// The cancels of each flow, by (environment, flow).
type Markers = HashMap<(String, String), Vec<CancelTask>>;

/// What the saves that kept their revision make: the cards and events (carried by one batch),
/// the instances with their records and state before, and the cards made per invocation.
struct Kept {
    made: BatchResult,
    saved: Vec<(FlowInstance, (Records, InstanceState))>,
    cards_created: BTreeMap<(String, String), i64>,
}

/// How many instances a save writes before it looks whether another writer waits.
const PART: usize = 100;

/// Inside the save's transaction: saves `advances` part by part, and answers how many were
/// stale (their revision had changed: nothing of theirs is written) and those not saved yet,
/// left when another writer waits for the turn after a part ([`Others::waiting`]).
pub(super) fn in_parts(
    conn: &mut AnyConnection,
    mut advances: Vec<InstanceAdvance>,
    others: &Others,
) -> Result<(u64, Vec<InstanceAdvance>), Failure> {
    // Rows are locked in one order, (environment, id), as cancels lock them, across the parts
    // too.
    advances.sort_by(|a, b| {
        (&a.instance.environment_id, &a.instance.id)
            .cmp(&(&b.instance.environment_id, &b.instance.id))
    });
    if !others.take_turns() {
        return Ok((advance(conn, advances)?, Vec::new()));
    }
    by_parts(
        advances,
        PART,
        || others.waiting(),
        |part| advance(conn, part),
    )
}

/// Hands `save` the items `part` at a time until all are saved or, after a part, `stop` says
/// so: the stale ones counted, and those left.
fn by_parts<T, E>(
    mut items: Vec<T>,
    part: usize,
    stop: impl Fn() -> bool,
    mut save: impl FnMut(Vec<T>) -> Result<u64, E>,
) -> Result<(u64, Vec<T>), E> {
    let mut stale = 0;
    while !items.is_empty() {
        let rest = items.split_off(items.len().min(part.max(1)));
        stale += save(items)?;
        items = rest;
        if stop() {
            break;
        }
    }
    Ok((stale, items))
}

/// Inside the save's transaction: saves `advances`, in the order of their rows, and answers
/// how many were stale (their revision had changed: nothing of theirs is written).
fn advance(conn: &mut AnyConnection, advances: Vec<InstanceAdvance>) -> Result<u64, Failure> {
    let markers = cancels_since(conn, &advances)?;
    let decided: Vec<Decided> = advances
        .into_iter()
        .map(|advance| decide(advance, &markers))
        .collect();
    let fenced = save_fenced(conn, decided.iter().map(|(i, ..)| i))?;
    let (stale, kept) = keep_saved(decided, fenced);
    // Then the invocations' rows, in key order, then their counts: the order of the
    // engine's saves (an invocation's row before its counts).
    for ((env, invocation), n) in kept.cards_created {
        diesel::update(
            invocations::table
                .filter(invocations::environment_id.eq(env))
                .filter(invocations::id.eq(invocation)),
        )
        .set(invocations::cards_created.eq(invocations::cards_created + n))
        .execute(conn)?;
    }
    let mut totals = Totals::default();
    let changes: Vec<_> = kept
        .saved
        .iter()
        .map(|(i, (records, state))| (i, Some((records, *state))))
        .collect();
    count(conn, &changes, &mut totals)?;
    let made = kept.made;
    if !made.cards.is_empty() {
        RunWrites::of(&[&made], conn.backend())
            .map_err(Failure::Domain)?
            .write(conn, &[&made], &mut totals)?;
    }
    totals.flush(conn)?;
    Ok(stale)
}

/// Each flow's cancels since its oldest invocation here, read once.
fn cancels_since(
    conn: &mut AnyConnection,
    advances: &[InstanceAdvance],
) -> Result<Markers, Failure> {
    let mut since: BTreeMap<(String, String), Timestamp> = BTreeMap::new();
    for a in advances {
        let key = (
            a.instance.environment_id.clone(),
            a.instance.flow_id.clone(),
        );
        let at = since.entry(key).or_insert(a.invocation_created);
        *at = (*at).min(a.invocation_created);
    }
    let mut markers = HashMap::new();
    for ((env, flow), at) in since {
        let found = markers_since(conn, &env, &flow, at)?;
        markers.insert((env, flow), found);
    }
    Ok(markers)
}

/// `advance` as it is to be saved: when a cancel of its flow covers it, nothing of the run
/// happens, and its steps stop as they were read.
fn decide(advance: InstanceAdvance, markers: &Markers) -> Decided {
    let InstanceAdvance {
        mut instance,
        before,
        invocation_created,
        cards,
        events,
    } = advance;
    let key = (instance.environment_id.clone(), instance.flow_id.clone());
    let covered = markers.get(&key).is_some_and(|found| {
        found.iter().any(|m| {
            m.covers(
                &instance.invocation_id,
                instance.flow_version,
                invocation_created,
                &instance.user_id,
            )
        })
    });
    let (cards, events) = if covered {
        instance.records = before.0.clone();
        run::cancel(&mut instance.records, instance.updated);
        instance.state = InstanceState::Cancelled;
        instance.due = None;
        (Vec::new(), Vec::new())
    } else {
        (cards, events)
    };
    (instance, before, cards, events)
}

/// The instances `fenced` says were saved, with what they make; and how many were stale.
fn keep_saved(decided: Vec<Decided>, fenced: Vec<bool>) -> (u64, Kept) {
    let mut stale = 0;
    let mut kept = Kept {
        made: carrier(),
        saved: Vec::new(),
        cards_created: BTreeMap::new(),
    };
    for ((instance, before, cards, events), saved) in decided.into_iter().zip(fenced) {
        if !saved {
            stale += 1;
            continue;
        }
        if !cards.is_empty() {
            let key = (
                instance.environment_id.clone(),
                instance.invocation_id.clone(),
            );
            *kept.cards_created.entry(key).or_insert(0) +=
                i64::try_from(cards.len()).unwrap_or(i64::MAX);
        }
        kept.made.cards.extend(cards);
        kept.made.events.extend(events);
        kept.saved.push((instance, before));
    }
    (stale, kept)
}

/// A batch that carries the cards of instances run on to the writes of cards and events, which
/// take batches; its progress is never saved.
fn carrier() -> BatchResult {
    BatchResult {
        environment_id: String::new(),
        invocation_id: String::new(),
        from_cursor: None,
        cursor: None,
        status: InvocationStatus::Running,
        users_targeted: 0,
        cards_created: 0,
        errors: Vec::new(),
        cards: Vec::<Arc<domain::card::CardInstance>>::new(),
        events: Vec::new(),
        instances: Vec::new(),
        updated: Timestamp::default(),
        lease_until: None,
    }
}

#[cfg(test)]
mod tests {
    use std::cell::Cell;

    use super::by_parts;

    #[test]
    fn a_save_goes_through_every_part_while_no_writer_waits() {
        let mut parts = Vec::new();
        let saved = by_parts(
            (0..250).collect(),
            100,
            || false,
            |part: Vec<u32>| {
                parts.push(part.len());
                Ok::<_, ()>(u64::from(part[0] % 2))
            },
        );
        assert_eq!(saved, Ok((0, Vec::new())));
        assert_eq!(parts, [100, 100, 50]);
    }

    #[test]
    fn a_save_stops_after_the_part_when_a_writer_waits() {
        let looked = Cell::new(0);
        let (stale, left) = by_parts(
            (0..250).collect(),
            100,
            || {
                looked.set(looked.get() + 1);
                looked.get() == 2
            },
            |part: Vec<u32>| Ok::<_, ()>(part.len() as u64),
        )
        .expect("saved");
        assert_eq!(stale, 200, "two parts saved");
        assert_eq!(left, (200..250).collect::<Vec<_>>(), "in order");
    }

    #[test]
    fn a_failed_part_fails_the_save() {
        let failed = by_parts(vec![1, 2, 3], 2, || false, |_| Err::<u64, _>("no"));
        assert_eq!(failed, Err("no"));
    }
}
