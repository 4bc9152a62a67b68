//! The `/start` recorder: group commit of recorded invocations (and their runs) on threads of
//! its own.

use std::collections::HashMap;

use diesel::prelude::*;
use domain::trigger::{BatchResult, Invocation};
use domain::StorageError;

use crate::cancel::{apply_markers, markers_for, Known};
use crate::db::{AnyConnection, Backend, Database, Failure};
use crate::error::write_number;
use crate::millis::At;
use crate::rows::*;
use crate::schema::invocations;
use crate::totals::{Ended, Totals};
use crate::writes::*;

/// What one `record` call gets back.
pub(crate) type Recorded = Result<Vec<Option<Invocation>>, StorageError>;

/// An invocation to record, and its run when it has one.
pub(crate) type Asked = (Invocation, Option<BatchResult>);

/// A `record_run` call waiting for the recorder.
pub(crate) struct Pending {
    pub(crate) asked: Vec<Asked>,
    pub(crate) reply: tokio::sync::oneshot::Sender<Recorded>,
}

/// Calls packed together, at most.
pub(crate) const RECORD_GROUP: usize = 256;
/// Calls waiting for the recorder, at most: while the database hangs, the ones beyond are
/// refused at once (contract §20).
pub(crate) const RECORDER_QUEUE: usize = 8_192;

/// Calls on their way to the writing thread, with what they write when every invocation they
/// ask for is new and no cancel applies to them (nearly always), built on the packing thread.
pub(crate) struct Group {
    calls: Vec<Pending>,
    writes: Option<NewWrites>,
}

/// What a transaction recorded, freed on a thread of its own.
pub(crate) type Spent = (Vec<Vec<Asked>>, Vec<Option<NewWrites>>);

/// The recorder's three threads: packing, writing, freeing. Each ends when the one before it
/// does, the first when `queue`'s senders are gone.
pub(crate) fn start_recorder(
    db: Database,
    mut queue: tokio::sync::mpsc::Receiver<Pending>,
) -> std::io::Result<()> {
    let (spent, freed) = std::sync::mpsc::channel::<Spent>();
    std::thread::Builder::new()
        .name("recorder-free".into())
        .spawn(move || freed.into_iter().for_each(drop))?;
    // A group is handed over only when the writer is free to take it (a channel of no
    // capacity): while a transaction is written, the calls that come wait in the queue and
    // are packed into one group, written in the next transaction. Every group costs its own
    // statements (reads of the flows, cancels and subscriptions, then an insert per table),
    // each a round trip to PostgreSQL: a group per call as it came, several per transaction,
    // held `/start` on PostgreSQL to a third of its throughput (docs/benchmarks.md, "One group
    // per transaction"). One transaction per call (a CSV chunk) would rewrite the last pages
    // of every table and index it appends to: a CSV task wrote a quarter more that way.
    let (packed, groups) = std::sync::mpsc::sync_channel::<Group>(0);
    let writer = db.clone();
    std::thread::Builder::new()
        .name("recorder".into())
        .spawn(move || {
            while let Ok(first) = groups.recv() {
                // The packing thread may be waiting with the next group already.
                let mut taken = vec![first];
                taken.extend(groups.try_recv().ok());
                let _ = spent.send(record_groups(&writer, taken));
            }
        })?;
    std::thread::Builder::new()
        .name("recorder-pack".into())
        .spawn(move || {
            let backend = db.backend();
            while let Some(first) = queue.blocking_recv() {
                let mut calls = vec![first];
                while calls.len() < RECORD_GROUP {
                    match queue.try_recv() {
                        Ok(next) => calls.push(next),
                        Err(_) => break,
                    }
                }
                let all: Vec<(&Invocation, Option<&BatchResult>)> = calls
                    .iter()
                    .flat_map(|c| c.asked.iter().map(|(i, run)| (i, run.as_ref())))
                    .collect();
                // Not built when a number is out of its column's range: built again in the
                // transaction, which fails with that error.
                let writes = distinct(&all)
                    .then(|| NewWrites::of(&all, backend).ok())
                    .flatten();
                drop(all);
                if packed.send(Group { calls, writes }).is_err() {
                    break;
                }
            }
        })?;
    Ok(())
}

/// Every invocation `calls` ask for, in order, with its run.
pub(crate) fn asked_in(calls: &[Vec<Asked>]) -> Vec<(&Invocation, Option<&BatchResult>)> {
    calls
        .iter()
        .flatten()
        .map(|(i, run)| (i, run.as_ref()))
        .collect()
}

/// True when no (environment, id) is asked twice.
pub(crate) fn distinct(all: &[(&Invocation, Option<&BatchResult>)]) -> bool {
    let mut seen = std::collections::HashSet::with_capacity(all.len());
    all.iter()
        .all(|(i, _)| seen.insert((i.environment_id.as_str(), i.id.as_str())))
}

/// Records the calls of `groups` in one transaction and answers each, on the writing thread;
/// returns what they recorded, to be freed elsewhere. Every call is decided on its own, in
/// queue order, as if it ran alone: an id that clashes refuses that call only, and an id asked
/// by two calls is inserted by the first and found by the second.
pub(crate) fn record_groups(db: &Database, groups: Vec<Group>) -> Spent {
    let mut calls: Vec<Vec<Asked>> = Vec::new();
    let mut replies = Vec::new();
    let mut writes = Vec::with_capacity(groups.len());
    for mut group in groups {
        // Calls whose caller gave up (its deadline passed while an earlier transaction hung)
        // are not recorded: it was answered 503. What was built for the group then covers
        // calls left out, so it is built again in the transaction.
        if group.calls.iter().any(|c| c.reply.is_closed()) {
            group.calls.retain(|c| !c.reply.is_closed());
            group.writes = None;
        }
        if group.calls.is_empty() {
            continue;
        }
        writes.push((group.calls.len(), group.writes));
        for pending in group.calls {
            calls.push(pending.asked);
            replies.push(pending.reply);
        }
    }
    if calls.is_empty() {
        return (calls, Vec::new());
    }
    // A racing insert of a conflicting id (PostgreSQL, another process) rolls this attempt
    // back; the next attempt sees it before inserting anything.
    let mut outcome = Err(StorageError::Unavailable(
        "invocation ids kept being reused concurrently".into(),
    ));
    // First as if every asked id were new; once one was not, each call decided on its own.
    let mut all_new = true;
    for _ in 0..4 {
        match db.transaction_blocking_or_retry(|conn| record_calls(conn, &calls, &writes, all_new))
        {
            Ok(Some(answers)) => {
                outcome = Ok(answers);
                break;
            }
            Ok(None) => all_new = false,
            Err(e) => {
                outcome = Err(e);
                break;
            }
        }
    }
    match outcome {
        Ok(answers) => {
            for (reply, answer) in replies.into_iter().zip(answers) {
                let _ = reply.send(Ok(answer));
            }
        }
        Err(e) => {
            for reply in replies {
                let _ = reply.send(Err(e.clone()));
            }
        }
    }
    (calls, writes.into_iter().map(|(_, w)| w).collect())
}

/// The whole of one transaction. With `all_new`, as if every asked id were new (nearly always
/// so): all are inserted, with the rows of their runs, group by group, from `writes` (per
/// group, its count of calls and what the packing thread built for them); when one was stored
/// already, the transaction is rolled back ([`Failure::Retry`]) to be run again without `all_new`
/// (a savepoint to roll back to made SQLite journal the pages the inserts changed). Without
/// `all_new`, or when an id is asked twice, every call is decided on its own: one read per
/// environment for every asked id, then the new ones of every call that clashes with nothing
/// inserted.
pub(crate) fn record_calls(
    conn: &mut AnyConnection,
    calls: &[Vec<Asked>],
    writes: &[(usize, Option<NewWrites>)],
    all_new: bool,
) -> Result<Vec<Vec<Option<Invocation>>>, Failure> {
    let all = asked_in(calls);
    let mut totals = Totals::default();
    if all_new && distinct(&all) {
        let mut from = 0;
        for (count, built) in writes {
            let group = asked_in(&calls[from..from + count]);
            from += count;
            if !insert_new(conn, &group, built.as_ref(), &mut totals)? {
                return Err(Failure::Retry);
            }
        }
        totals.flush(conn)?;
        return Ok(calls.iter().map(|c| vec![None; c.len()]).collect());
    }
    let mut found: HashMap<(String, String), Invocation> = HashMap::new();
    let mut by_env: HashMap<&str, Vec<&str>> = HashMap::new();
    for (i, _) in &all {
        by_env
            .entry(i.environment_id.as_str())
            .or_default()
            .push(i.id.as_str());
    }
    for (env, mut ids) in by_env {
        ids.sort_unstable();
        ids.dedup();
        for chunk in ids.chunks(INSERT_CHUNK) {
            let rows: Vec<InvocationRow> = invocations::table
                .filter(invocations::environment_id.eq(env))
                .filter(invocations::id.eq_any(chunk))
                .select(InvocationRow::as_select())
                .load(conn)?;
            for row in rows {
                let stored = row.into_invocation().map_err(Failure::Domain)?;
                found.insert(
                    (stored.environment_id.clone(), stored.id.clone().into()),
                    stored,
                );
            }
        }
    }
    let mut new: Vec<(&Invocation, Option<&BatchResult>)> = Vec::new();
    let mut answers = Vec::with_capacity(calls.len());
    for asked in calls {
        let key = |i: &Invocation| (i.environment_id.clone(), i.id.as_str().to_owned());
        let stored: Vec<Option<Invocation>> = asked
            .iter()
            .map(|(i, _)| found.get(&key(i)).cloned())
            .collect();
        let clash = stored
            .iter()
            .zip(asked)
            .any(|(stored, (i, _))| stored.as_ref().is_some_and(|s| !s.same_run(i)));
        if !clash {
            // The same id asked twice in one call is inserted once; a later call finds it.
            for (i, run) in asked {
                if let std::collections::hash_map::Entry::Vacant(slot) = found.entry(key(i)) {
                    new.push((i, run.as_ref()));
                    slot.insert(i.clone());
                }
            }
        }
        answers.push(stored);
    }
    if !insert_new(conn, &new, None, &mut totals)? {
        // A racing request inserted some of these ids first: decide again.
        return Err(Failure::Retry);
    }
    totals.flush(conn)?;
    Ok(answers)
}

/// What recording invocations taken to be new writes: their rows, and the cards and events of
/// their runs as [`save_batches`](InvocationRepository::save_batches) writes batches, each
/// run's progress its invocation's.
pub(crate) struct NewWrites {
    invocations: InvocationWrites,
    runs: RunWrites,
}

impl NewWrites {
    /// For `new` with its runs as they are (no cancel applied); an error when a number is out
    /// of its column's range.
    fn of(
        new: &[(&Invocation, Option<&BatchResult>)],
        backend: Backend,
    ) -> Result<Self, StorageError> {
        let rows = new
            .iter()
            .map(|(i, run)| {
                let mut row = InvocationRow::from_invocation(i)?;
                if let Some(run) = run {
                    row.status = run.status.as_str().to_owned();
                    row.users_targeted = write_number(
                        "invocation users targeted",
                        i.users_targeted.saturating_add(run.users_targeted),
                    )?;
                    row.cards_created = write_number(
                        "invocation cards created",
                        i.cards_created.saturating_add(run.cards_created),
                    )?;
                    row.errors = errors_text(run);
                    row.cursor = run.cursor.clone();
                    row.updated = At::of(run.updated);
                }
                Ok(row)
            })
            .collect::<Result<_, StorageError>>()?;
        let runs: Vec<&BatchResult> = new.iter().filter_map(|(_, run)| *run).collect();
        Ok(NewWrites {
            invocations: InvocationWrites::of(rows, backend),
            runs: RunWrites::of(&runs, backend)?,
        })
    }
}

/// Inserts invocations taken to be new, and the rows of their runs (cancel markers applied;
/// the invocations known without reading), from `built` when it was built from `new`. False,
/// with the runs not saved, when some of the invocations were stored already.
pub(crate) fn insert_new(
    conn: &mut AnyConnection,
    new: &[(&Invocation, Option<&BatchResult>)],
    built: Option<&NewWrites>,
    totals: &mut Totals,
) -> Result<bool, Failure> {
    let mut known: Known = HashMap::new();
    for (i, run) in new {
        if run.is_some() {
            known.insert(
                (i.environment_id.clone(), i.id.clone().into()),
                (i.flow_id.clone(), i.flow_version, i.created.naive_utc()),
            );
        }
    }
    let runs = new.iter().filter_map(|(_, run)| *run);
    if markers_for(conn, runs, &known)?.is_empty() {
        // Nearly always: no cancel accepted since these invocations were created.
        let fresh;
        let writes = match built {
            Some(writes) => writes,
            None => {
                fresh = NewWrites::of(new, conn.backend()).map_err(Failure::Domain)?;
                &fresh
            }
        };
        return write_new(conn, writes, new, totals);
    }
    let mut runs: Vec<BatchResult> = new.iter().filter_map(|(_, run)| run.cloned()).collect();
    apply_markers(conn, &mut runs, &known)?;
    let mut applied = runs.iter();
    let new: Vec<(&Invocation, Option<&BatchResult>)> = new
        .iter()
        .map(|(i, run)| (*i, run.and_then(|_| applied.next())))
        .collect();
    let writes = NewWrites::of(&new, conn.backend()).map_err(Failure::Domain)?;
    write_new(conn, &writes, &new, totals)
}

/// Writes what was built from `new`, counted in `totals`; false, with the runs not written,
/// when some of the invocations were stored already.
pub(crate) fn write_new(
    conn: &mut AnyConnection,
    writes: &NewWrites,
    new: &[(&Invocation, Option<&BatchResult>)],
    totals: &mut Totals,
) -> Result<bool, Failure> {
    if !writes.invocations.write(conn)? {
        return Ok(false);
    }
    let runs: Vec<&BatchResult> = new.iter().filter_map(|(_, run)| *run).collect();
    writes.runs.write(conn, &runs, totals)?;
    for (i, run) in new {
        totals.started(i);
        if let Some(run) = run {
            totals.ended(&Ended::of(i), run.status, run.updated.naive_utc());
        }
    }
    Ok(true)
}
