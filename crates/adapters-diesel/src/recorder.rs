//! The `/start` recorder: group commit of recorded invocations (and their runs) on threads of
//! its own.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Condvar, Mutex};

use diesel::prelude::*;
use domain::trigger::{BatchResult, Invocation};
use domain::StorageError;

use crate::db::{AnyConnection, Backend, Database, Failure};
use crate::error::write_number;
use crate::markers::{apply_markers, markers_for, Known};
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

/// Calls packed together at once, at most; a group that holds as many takes no more.
pub(crate) const RECORD_GROUP: usize = 256;
/// Calls waiting for the recorder, at most: while the database hangs, the ones beyond are
/// refused at once (contract §20).
pub(crate) const RECORDER_QUEUE: usize = 8_192;

/// Calls on their way to the writing thread, with what they write when every invocation they
/// ask for is new and no cancel applies to them (nearly always), built on the packing thread.
pub(crate) struct Group {
    calls: Vec<Pending>,
    writes: Option<NewWrites>,
    /// A hash of every (environment, id) asked, with `writes` only: a group joins another
    /// with what both wrote only when none of its ids is among the other's.
    asked: HashSet<u64>,
}

/// What a transaction recorded, freed on a thread of its own.
pub(crate) type Spent = (Vec<Vec<Asked>>, Option<NewWrites>);

/// The recorder's threads: packing, writing (`writers` of them on PostgreSQL, one on
/// SQLite), freeing. Each ends when the one before it does, the first when `queue`'s senders
/// are gone.
pub(crate) fn start_recorder(
    db: Database,
    mut queue: tokio::sync::mpsc::Receiver<Pending>,
    writers: usize,
) -> std::io::Result<()> {
    let (spent, freed) = std::sync::mpsc::channel::<Spent>();
    std::thread::Builder::new()
        .name("recorder-free".into())
        .spawn(move || freed.into_iter().for_each(drop))?;
    // On PostgreSQL the group the writer takes next stays open, the packing thread adding to
    // it until it is taken (or holds `RECORD_GROUP` calls): the calls that come while a
    // transaction is written are in the next one (on SQLite see `Next::joins`). Every group
    // costs its own statements (reads of the flows, cancels and subscriptions, then an insert
    // per table), each a round trip to PostgreSQL: a group per call as it came, several per
    // transaction, held `/start` on PostgreSQL far below what one group per transaction
    // makes. A group handed over whole, closed to the calls that came while it waited
    // for the writer, made a call wait for up to three transactions instead of two (both
    // measured; see the git history of docs/benchmarks.md). One transaction per call (a CSV
    // chunk) would rewrite the last pages of every table and index it appends to: a CSV task
    // wrote measurably more that way.
    let next = Arc::new(Next {
        joins: db.backend() == Backend::Postgres,
        ..Next::default()
    });
    let writer = db.clone();
    // Each thread's end is marked however it ends, and also when it never ran (its spawn
    // failed): the others do not wait for it. The packer's mark is made first, so that a
    // writer whose spawn fails ends the writers already started.
    // Several writers on PostgreSQL, each taking the next group: two groups written at once
    // are two transactions, as from two processes, and a call asked in both is decided by the
    // key of its invocation. The first writer to end ends the recorder.
    let packing = Ending(next.clone(), Side::Packer);
    let writers = match db.backend() {
        Backend::Postgres => writers.max(1),
        Backend::Sqlite => 1,
    };
    for _ in 0..writers {
        let writing = Ending(next.clone(), Side::Writer);
        let (writer, spent) = (writer.clone(), spent.clone());
        std::thread::Builder::new()
            .name("recorder".into())
            .spawn(move || {
                let ending = writing;
                while let Some(group) = ending.0.take() {
                    let _ = spent.send(record_group(&writer, group));
                }
            })?;
    }
    drop(spent);
    std::thread::Builder::new()
        .name("recorder-pack".into())
        .spawn(move || {
            let ending = packing;
            let next = &ending.0;
            let backend = db.backend();
            // Without joins, the calls that come while a group waits for the writer are
            // taken after it, into the next group whole.
            while next.joins || next.taken() {
                let Some(first) = queue.blocking_recv() else {
                    break;
                };
                let mut calls = vec![first];
                while calls.len() < RECORD_GROUP {
                    match queue.try_recv() {
                        Ok(call) => calls.push(call),
                        Err(_) => break,
                    }
                }
                if !next.add(Group::of(calls, backend)) {
                    break;
                }
            }
        })?;
    Ok(())
}

impl Group {
    /// `calls`, with what they write when every invocation they ask for is new and no cancel
    /// applies; without it when an id is asked twice, or a number is out of its column's range
    /// (built again in the transaction, which fails with that error).
    fn of(calls: Vec<Pending>, backend: Backend) -> Group {
        let all: Vec<(&Invocation, Option<&BatchResult>)> = calls
            .iter()
            .flat_map(|c| c.asked.iter().map(|(i, run)| (i, run.as_ref())))
            .collect();
        let asked: HashSet<u64> = all.iter().map(|(i, _)| asked_hash(i)).collect();
        // Fewer hashes than ids: an id asked twice (or, rarely, two ids of one hash).
        let writes = (asked.len() == all.len())
            .then(|| NewWrites::of(&all, backend).ok())
            .flatten();
        drop(all);
        Group {
            calls,
            asked: if writes.is_some() {
                asked
            } else {
                HashSet::new()
            },
            writes,
        }
    }

    /// This group and `more` as one, in this order.
    fn merge(mut self, more: Group) -> Group {
        self.calls.extend(more.calls);
        self.writes = match (self.writes, more.writes) {
            (Some(mut writes), Some(more_writes)) => {
                let apart = more.asked.iter().all(|h| !self.asked.contains(h));
                self.asked.extend(more.asked);
                (apart && writes.append(more_writes)).then_some(writes)
            }
            _ => None,
        };
        if self.writes.is_none() {
            self.asked = HashSet::new();
        }
        self
    }
}

/// A hash of the (environment, id) of `i`, the same in every group.
fn asked_hash(i: &Invocation) -> u64 {
    use std::hash::BuildHasher;
    std::hash::BuildHasherDefault::<std::collections::hash_map::DefaultHasher>::default()
        .hash_one((i.environment_id.as_str(), i.id.as_str()))
}

/// The group a writer takes next, between the packing thread and the writers.
#[derive(Default)]
struct Next {
    slot: Mutex<Slot>,
    changed: Condvar,
    /// Whether a group joins the one waiting (PostgreSQL), or the next one is packed only
    /// once it is taken (SQLite). On SQLite the writes of a group are packed into few
    /// statements when it is built, and joined groups keep each its own statements. On
    /// PostgreSQL joined inserts of columns are one insert.
    joins: bool,
}

#[derive(Default)]
struct Slot {
    group: Option<Group>,
    /// The packing thread has ended.
    packer_ended: bool,
    /// A writing thread has ended: the calls packed after it are answered at once, as calls
    /// of a recorder that stopped.
    writer_ended: bool,
}

impl Next {
    /// Adds `group` to the one waiting for the writer, or waits it there; waits first while
    /// that one holds [`RECORD_GROUP`] calls. False when the writer is gone.
    fn add(&self, group: Group) -> bool {
        let Ok(mut slot) = self.slot.lock() else {
            return false;
        };
        while slot
            .group
            .as_ref()
            .is_some_and(|g| g.calls.len() >= RECORD_GROUP)
            && !slot.writer_ended
        {
            slot = match self.changed.wait(slot) {
                Ok(slot) => slot,
                Err(_) => return false,
            };
        }
        if slot.writer_ended {
            return false;
        }
        slot.group = Some(match slot.group.take() {
            Some(waiting) => waiting.merge(group),
            None => group,
        });
        self.changed.notify_all();
        true
    }

    /// Whether the group waiting was taken, waiting until it is; false when the writer is
    /// gone.
    fn taken(&self) -> bool {
        let Ok(mut slot) = self.slot.lock() else {
            return false;
        };
        while slot.group.is_some() && !slot.writer_ended {
            slot = match self.changed.wait(slot) {
                Ok(slot) => slot,
                Err(_) => return false,
            };
        }
        !slot.writer_ended
    }

    /// The next group, waiting for one; none once the packing thread has ended and nothing
    /// is left.
    fn take(&self) -> Option<Group> {
        let mut slot = self.slot.lock().ok()?;
        loop {
            if let Some(group) = slot.group.take() {
                self.changed.notify_all();
                return Some(group);
            }
            if slot.packer_ended {
                return None;
            }
            slot = self.changed.wait(slot).ok()?;
        }
    }
}

/// The packing thread, or one of the writing threads, that share [`Next`].
#[derive(Clone, Copy, PartialEq)]
enum Side {
    Packer,
    Writer,
}

/// Marks its thread ended when dropped, so that the others do not wait for it; when a writer
/// ends, the group waiting is dropped (its callers told the recorder stopped).
struct Ending(Arc<Next>, Side);

impl Drop for Ending {
    fn drop(&mut self) {
        let left = match self.0.slot.lock() {
            Ok(mut slot) => match self.1 {
                Side::Packer => {
                    slot.packer_ended = true;
                    None
                }
                Side::Writer => {
                    slot.writer_ended = true;
                    slot.group.take()
                }
            },
            Err(_) => None,
        };
        drop(left);
        self.0.changed.notify_all();
    }
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

/// Records the calls of `group` in one transaction and answers each, on the writing thread;
/// returns what they recorded, to be freed elsewhere. Every call is decided on its own, in
/// queue order, as if it ran alone: an id that clashes refuses that call only, and an id asked
/// by two calls is inserted by the first and found by the second. Groups written at once (a
/// recorder with two writers) are decided in the order they commit, as two processes' are.
pub(crate) fn record_group(db: &Database, mut group: Group) -> Spent {
    // Calls whose caller gave up (its deadline passed while an earlier transaction hung) are
    // not recorded: it was answered 503. What was built for the group then covers calls left
    // out, so it is built again in the transaction.
    if group.calls.iter().any(|c| c.reply.is_closed()) {
        group.calls.retain(|c| !c.reply.is_closed());
        group.writes = None;
    }
    let writes = group.writes;
    let (calls, replies): (Vec<Vec<Asked>>, Vec<_>) = group
        .calls
        .into_iter()
        .map(|pending| (pending.asked, pending.reply))
        .unzip();
    if calls.is_empty() {
        return (calls, writes);
    }
    // A racing insert of a conflicting id (PostgreSQL, another process) rolls this attempt
    // back; the next attempt sees it before inserting anything.
    let mut outcome = Err(StorageError::Unavailable(
        "invocation ids kept being reused concurrently".into(),
    ));
    // First as if every asked id were new; once one was not, each call decided on its own.
    let mut all_new = true;
    for _ in 0..4 {
        match db.transaction_blocking_or_retry(|conn| {
            record_calls(conn, &calls, writes.as_ref(), all_new)
        }) {
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
    (calls, writes)
}

/// The whole of one transaction. With `all_new`, as if every asked id were new (nearly always
/// so): all are inserted, with the rows of their runs, from `built` (what the packing thread
/// built for them, when it could); when one was stored already, the transaction is rolled back
/// ([`Failure::Retry`]) to be run again without `all_new` (a savepoint to roll back to made
/// SQLite journal the pages the inserts changed). Without
/// `all_new`, or when an id is asked twice, every call is decided on its own: one read per
/// environment for every asked id, then the new ones of every call that clashes with nothing
/// inserted.
pub(crate) fn record_calls(
    conn: &mut AnyConnection,
    calls: &[Vec<Asked>],
    built: Option<&NewWrites>,
    all_new: bool,
) -> Result<Vec<Vec<Option<Invocation>>>, Failure> {
    let all = asked_in(calls);
    let mut totals = Totals::default();
    if all_new && distinct(&all) {
        insert_new(conn, &all, built, &mut totals)?;
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
    // A racing request may have inserted some of these ids first: then decided again.
    insert_new(conn, &new, None, &mut totals)?;
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

    /// Appends `more`, built for the same backend; false (this left in any state) otherwise.
    fn append(&mut self, more: NewWrites) -> bool {
        self.invocations.append(more.invocations) && self.runs.append(more.runs)
    }
}

/// Inserts invocations taken to be new, and the rows of their runs (cancel markers applied;
/// the invocations known without reading), from `built` when it was built from `new`.
/// [`Failure::Retry`], with the runs not saved, when some of the invocations were stored
/// already.
pub(crate) fn insert_new(
    conn: &mut AnyConnection,
    new: &[(&Invocation, Option<&BatchResult>)],
    built: Option<&NewWrites>,
    totals: &mut Totals,
) -> Result<(), Failure> {
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

/// Writes what was built from `new`, counted in `totals`; [`Failure::Retry`], with the runs
/// not written, when some of the invocations were stored already.
pub(crate) fn write_new(
    conn: &mut AnyConnection,
    writes: &NewWrites,
    new: &[(&Invocation, Option<&BatchResult>)],
    totals: &mut Totals,
) -> Result<(), Failure> {
    writes.invocations.write(conn)?;
    let runs: Vec<&BatchResult> = new.iter().filter_map(|(_, run)| *run).collect();
    writes.runs.write(conn, &runs, totals)?;
    // A run of a flow that waits or branches stores its instances (after the invocations'
    // rows, as every save orders them).
    crate::instances::insert_instances(conn, runs.iter().copied(), totals)?;
    let mut for_engine = false;
    for (i, run) in new {
        totals.started(i);
        match run {
            Some(run) => {
                totals.ended(&Ended::of(i), run.status, run.updated.naive_utc());
                for_engine |= !run.status.is_final();
            }
            None => for_engine = true,
        }
    }
    if for_engine {
        crate::db::notices::queued(crate::Work::Invocations);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A call asking for `inv_N` of each N of `ids`.
    fn call(ids: &[usize]) -> Pending {
        answered(ids, tokio::sync::oneshot::channel().0)
    }

    fn answered(ids: &[usize], reply: tokio::sync::oneshot::Sender<Recorded>) -> Pending {
        let asked = ids
            .iter()
            .map(|&n| (crate::waits_tests::invocation(n), None))
            .collect();
        Pending { asked, reply }
    }

    /// The invocation rows of `group`'s writes, checked whole: on SQLite every row either
    /// packed or listed once among the others, on PostgreSQL every column as long as the rows.
    fn rows(group: &Group) -> Option<usize> {
        group.writes.as_ref().map(|w| match &w.invocations {
            InvocationWrites::Sqlite {
                rows,
                packed,
                other,
            } => {
                // Runs shorter than a packed statement's are left as others.
                assert!(packed.is_empty());
                assert_eq!(*other, (0..rows.len()).collect::<Vec<_>>());
                rows.len()
            }
            InvocationWrites::Postgres(insert) => {
                assert!(insert.columns_len().iter().all(|&n| n == insert.len()));
                insert.len()
            }
        })
    }

    /// Groups join with what they write only when no id is asked in both; otherwise it is
    /// built again in the transaction, where every call is decided on its own.
    #[test]
    fn groups_join_their_writes_only_when_their_ids_are_apart() {
        for backend in [Backend::Sqlite, Backend::Postgres] {
            let joined =
                Group::of(vec![call(&[1, 2])], backend).merge(Group::of(vec![call(&[3])], backend));
            assert_eq!((joined.calls.len(), rows(&joined)), (2, Some(3)));
            let joined = joined.merge(Group::of(vec![call(&[4]), call(&[5])], backend));
            assert_eq!((joined.calls.len(), rows(&joined)), (4, Some(5)));
            // An id of a group joined earlier, not of the first.
            let clashing = joined.merge(Group::of(vec![call(&[4])], backend));
            assert_eq!((clashing.calls.len(), rows(&clashing)), (5, None));
            // Once without, a group stays without.
            let after = clashing.merge(Group::of(vec![call(&[6])], backend));
            assert_eq!((after.calls.len(), rows(&after)), (6, None));
            // A group asking one id twice has nothing built, and passes that on.
            let twice = Group::of(vec![call(&[7]), call(&[7])], backend);
            assert_eq!(rows(&twice), None);
            let joined = Group::of(vec![call(&[8])], backend).merge(twice);
            assert_eq!((joined.calls.len(), rows(&joined)), (3, None));
        }
    }

    /// Runs `f` on a thread of its own; what it returns within five seconds.
    fn within<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
        let (done, result) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let _ = done.send(f());
        });
        result
            .recv_timeout(std::time::Duration::from_secs(5))
            .expect("woken within five seconds")
    }

    /// Neither thread waits for the other once it has ended: a writer that ended (a panic)
    /// drops the group waiting, whose callers are told the recorder stopped, and wakes the
    /// packing thread; a packing thread that ended leaves the writer the group waiting, then
    /// wakes it to end.
    #[test]
    fn neither_thread_waits_for_one_that_ended() {
        let next = Arc::new(Next {
            joins: true,
            ..Next::default()
        });
        let (reply, mut answer) = tokio::sync::oneshot::channel();
        let mut full = vec![answered(&[0], reply)];
        full.extend((1..RECORD_GROUP).map(|k| call(&[k])));
        assert!(next.add(Group::of(full, Backend::Postgres)));
        // The group waiting is full: the packing thread waits until the writer ends.
        let packer = next.clone();
        let adding = std::thread::spawn(move || {
            packer.add(Group::of(vec![call(&[RECORD_GROUP])], Backend::Postgres))
        });
        std::thread::sleep(std::time::Duration::from_millis(50));
        drop(Ending(next.clone(), Side::Writer));
        assert!(!within(move || adding.join().expect("join")));
        assert!(matches!(
            answer.try_recv(),
            Err(tokio::sync::oneshot::error::TryRecvError::Closed)
        ));
        assert!(!next.add(Group::of(vec![call(&[2])], Backend::Postgres)));
        assert!(!next.taken());

        let next = Arc::new(Next::default());
        assert!(next.add(Group::of(vec![call(&[1])], Backend::Sqlite)));
        assert!(next.take().is_some_and(|g| g.calls.len() == 1));
        // Nothing waiting: the writer waits until the packing thread ends.
        let writer = next.clone();
        let taking = std::thread::spawn(move || writer.take().is_none());
        std::thread::sleep(std::time::Duration::from_millis(50));
        drop(Ending(next, Side::Packer));
        assert!(within(move || taking.join().expect("join")));
    }
}
