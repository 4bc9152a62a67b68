//! Invocations: recorded through the recorder, claimed by the engine, saved batch by batch.

use std::collections::HashMap;

use async_trait::async_trait;
use chrono::NaiveDateTime;
use diesel::prelude::*;
use domain::page::After;
use domain::trigger::{
    BatchResult, Invocation, InvocationFilter, InvocationRepository, InvocationStatus, SaveTurn,
};
use domain::{StorageError, Timestamp};

use crate::db::{AnyConnection, Database, Failure};
use crate::error::write_number;
use crate::markers::{apply_cancels, apply_markers, known, markers_for, Known, Markers};
use crate::millis::At;
use crate::page::after;
use crate::recorder::*;
use crate::rows::*;
use crate::schema::invocations;
use crate::totals::{Ended, Totals};
use crate::writes::*;

/// The domain's `InvocationRepository` port on the service's database.
pub struct DieselInvocationRepository {
    db: Database,
    /// Group commit: `record_run` calls queue here, and one thread writes all those waiting in
    /// one transaction: SQLite takes one writer at a time, so that thread does nothing but
    /// write. A thread before it builds each group's rows and packed statements
    /// ([`NewWrites`]) while the group before is written, and one after it frees what each
    /// group recorded (in a CSV task's profile, building and freeing took much of the writing
    /// thread's time). Threads rather than tasks, so that they work however busy their
    /// callers' runtimes are (a CSV step prepares its next rows while the last ones are
    /// recorded), and each group saves a hop to the blocking pool. Started on first use; they
    /// end when the repository is dropped.
    recorder: std::sync::OnceLock<tokio::sync::mpsc::Sender<Pending>>,
    /// The recorder's writing threads on PostgreSQL (see [`Self::with_writers`]).
    writers: usize,
}

impl DieselInvocationRepository {
    /// Over `db`.
    pub fn new(db: Database) -> Self {
        Self {
            db,
            recorder: std::sync::OnceLock::new(),
            writers: 1,
        }
    }

    /// On PostgreSQL, `writers` threads write the recorder's groups, each taking the next
    /// group while the others write theirs (at least one). A writer waits on PostgreSQL for
    /// most of a transaction, so two keep it busier where the cores have room: a CSV task's
    /// rows went faster. Under a `/start` load that already fills the cores they did not (both
    /// A/B measured; see the git history of docs/benchmarks.md). SQLite takes one writer at a
    /// time: one thread there, whatever `writers`.
    pub fn with_writers(mut self, writers: usize) -> Self {
        self.writers = writers.max(1);
        self
    }

    fn recorder(&self) -> Result<&tokio::sync::mpsc::Sender<Pending>, StorageError> {
        if let Some(sender) = self.recorder.get() {
            return Ok(sender);
        }
        let (sender, queue) = tokio::sync::mpsc::channel::<Pending>(RECORDER_QUEUE);
        start_recorder(self.db.clone(), queue, self.writers).map_err(|e| {
            StorageError::Unavailable(format!("cannot start the invocation recorder: {e}"))
        })?;
        // Two first callers at once: the second's threads end with its unused sender.
        Ok(self.recorder.get_or_init(|| sender))
    }
}

/// The conditions of the statuses an engine claims, each the condition of its partial index
/// (`invocations_pending`, `invocations_running`): written literally, since a bound status
/// cannot choose a partial index.
static DUE_STATUSES: std::sync::LazyLock<[String; 2]> = std::sync::LazyLock::new(|| {
    [InvocationStatus::Pending, InvocationStatus::Running]
        .map(|status| format!("status = '{}'", status.as_str()))
});

/// The oldest invocations of one of [`DUE_STATUSES`] whose lease (if any) ran out by `$now`:
/// (created, environment, id), read in the order of the status's partial index.
macro_rules! invocations_due {
    ($status:expr, $now:expr, $limit:expr) => {
        invocations::table
            .filter(diesel::dsl::sql::<diesel::sql_types::Bool>($status))
            .filter(
                invocations::lease_until
                    .is_null()
                    .or(invocations::lease_until.lt($now)),
            )
            .order(invocations::created)
            .select((
                invocations::created,
                invocations::environment_id,
                invocations::id,
            ))
            .limit($limit)
    };
}

#[async_trait]
impl InvocationRepository for DieselInvocationRepository {
    /// Answered by the call's deadline (contract §20), even while the recorder's transaction
    /// is stuck on a hung database; a call given up is then left out of the recorder's next
    /// transaction if it has not begun.
    async fn record_run(&self, asked: Vec<Asked>) -> Recorded {
        let deadline = self.db.deadline();
        let (reply, answer) = tokio::sync::oneshot::channel();
        self.recorder()?
            .try_send(Pending { asked, reply })
            .map_err(|e| match e {
                tokio::sync::mpsc::error::TrySendError::Full(_) => StorageError::Unavailable(
                    "the invocation recorder is full: the database is not keeping up".into(),
                ),
                tokio::sync::mpsc::error::TrySendError::Closed(_) => {
                    StorageError::Unavailable("the invocation recorder stopped".into())
                }
            })?;
        match tokio::time::timeout_at(deadline, answer).await {
            Ok(answered) => answered
                .map_err(|_| StorageError::Unavailable("the invocation recorder stopped".into()))?,
            Err(_) => Err(self.db.timed_out()),
        }
    }

    async fn get(
        &self,
        environment_id: &str,
        id: &str,
    ) -> Result<Option<Invocation>, StorageError> {
        let (env, id) = (environment_id.to_owned(), id.to_owned());
        let row = self
            .db
            .run(move |conn| load_invocation(conn, &env, &id))
            .await?;
        row.map(InvocationRow::into_invocation).transpose()
    }

    async fn list(
        &self,
        environment_id: &str,
        flow_id: &str,
        filter: InvocationFilter,
        after: Option<After<String>>,
        limit: u32,
    ) -> Result<Vec<Invocation>, StorageError> {
        let (env, flow) = (environment_id.to_owned(), flow_id.to_owned());
        let rows = self
            .db
            .run(move |conn| {
                // Read through `invocations_flow` backwards: (flow, created, id) on SQLite, with
                // the environment first on PostgreSQL.
                let mut query = invocations::table
                    .filter(invocations::environment_id.eq(env))
                    .filter(invocations::flow_id.eq(flow))
                    .select(InvocationRow::as_select())
                    .order((invocations::created.desc(), invocations::id.desc()))
                    .limit(i64::from(limit))
                    .into_boxed();
                if let Some(status) = filter.status {
                    query = query.filter(invocations::status.eq(status.as_str()));
                }
                if let Some(mode) = filter.mode {
                    query = query.filter(invocations::mode.eq(mode_text(mode)));
                }
                let query = after!(query, invocations::created, invocations::id, after, At);
                Ok(query.load(conn)?)
            })
            .await?;
        rows.into_iter()
            .map(InvocationRow::into_invocation)
            .collect()
    }

    async fn running_bulk(&self, environment_id: &str) -> Result<u64, StorageError> {
        let env = environment_id.to_owned();
        self.db
            .run(move |conn| crate::bulk::slots_held(conn, &env))
            .await
    }

    async fn claim(
        &self,
        now: Timestamp,
        lease_until: Timestamp,
        limit: u32,
    ) -> Result<Vec<Invocation>, StorageError> {
        let (now, lease) = (At(now.naive_utc()), At(lease_until.naive_utc()));
        let rows =
            self.db
                .claim_transaction(move |conn| {
                    // Oldest first. One query per status, each read in the order of its
                    // (status, created) index: one query with both statuses would sort every
                    // waiting invocation to find the first few (a CSV task queues hundreds of
                    // thousands).
                    let mut keys: Vec<(NaiveDateTime, String, String)> = Vec::new();
                    for status in DUE_STATUSES.iter() {
                        let due = invocations_due!(status.as_str(), now, i64::from(limit));
                        // Several processes share PostgreSQL: skip rows another one is claiming.
                        keys.extend(match &mut *conn {
                            AnyConnection::Postgresql(c) => due
                                .for_update()
                                .skip_locked()
                                .load::<(NaiveDateTime, String, String)>(c)?,
                            AnyConnection::Sqlite(c) => due.load(c)?,
                        });
                    }
                    keys.sort();
                    keys.truncate(usize::try_from(limit).unwrap_or(usize::MAX));
                    // One update and one read per environment (nearly always one).
                    let mut by_env: HashMap<String, Vec<String>> = HashMap::new();
                    for (_, env, id) in keys {
                        by_env.entry(env).or_default().push(id);
                    }
                    let mut rows = Vec::new();
                    for (env, ids) in by_env {
                        let claimed = || {
                            invocations::table
                                .filter(invocations::environment_id.eq(&env))
                                .filter(invocations::id.eq_any(&ids))
                        };
                        diesel::update(claimed())
                            .set((
                                invocations::status.eq(InvocationStatus::Running.as_str()),
                                invocations::lease_until.eq(Some(lease)),
                                invocations::attempts.eq(invocations::attempts + 1),
                            ))
                            .execute(conn)?;
                        rows.extend(
                            claimed()
                                .select(InvocationRow::as_select())
                                .load::<InvocationRow>(conn)?,
                        );
                    }
                    rows.sort_by_key(|r| r.created);
                    Ok(rows)
                })
                .await?;
        rows.into_iter()
            .map(InvocationRow::into_invocation)
            .collect()
    }

    async fn save_batches(&self, batches: Vec<BatchResult>) -> Result<u64, StorageError> {
        if batches.is_empty() {
            return Ok(0);
        }
        self.db
            .transaction(move |conn| {
                let mut batches = batches;
                apply_cancels(conn, &mut batches)?;
                let kept = save_progress(conn, &batches)?;
                let mut totals = Totals::default();
                let mut saved: Vec<&BatchResult> = Vec::with_capacity(batches.len());
                for (batch, kept) in batches.iter().zip(kept) {
                    if let Some(ended) = kept {
                        totals.ended(&ended, batch.status, batch.updated.naive_utc());
                        saved.push(batch);
                    }
                }
                RunWrites::of(&saved, conn.backend())
                    .map_err(Failure::Domain)?
                    .write(conn, &saved, &mut totals)?;
                crate::instances::insert_instances(conn, saved.iter().copied(), &mut totals)?;
                totals.flush(conn)?;
                Ok((batches.len() - saved.len()) as u64)
            })
            .await
    }

    async fn save_after(&self, batch: BatchResult, after: SaveTurn) -> Result<u64, StorageError> {
        // The wait for the turn ends with the call's own deadline.
        let until = std::time::Instant::now() + self.db.request_wait();
        self.db
            .transaction(move |conn| save_followed(conn, batch, &after, until))
            .await
    }
}

/// Why the writes of [`write_then_progress`] were rolled back to their savepoint.
enum Followed {
    /// The batch's invocation is no longer at its starting cursor.
    Stale,
    /// Cancels of its flow accepted since its invocation was created cover some of it: they
    /// were not applied.
    Cancels,
    Failed(Failure),
}

impl From<Failure> for Followed {
    fn from(e: Failure) -> Self {
        Followed::Failed(e)
    }
}

impl From<diesel::result::Error> for Followed {
    fn from(e: diesel::result::Error) -> Self {
        Followed::Failed(Failure::Query(e))
    }
}

/// [`InvocationRepository::save_after`] in its transaction.
///
/// First the batch's cards, events and outbox rows, as built; then the wait for `after`;
/// only then the flow's lock and its cancels ([`markers_for`]), so that the flow's row is
/// never share-locked by two saves of one fan-out without a gap, which would hold a cancel
/// being recorded (it locks the row exclusively) until the step ends. When cancels cover any
/// of it, the batch is written again after them, in the order of every other save. Its
/// progress last, fenced by its starting cursor.
///
/// Returns 1, with everything it wrote rolled back to a savepoint, when its invocation is no
/// longer at that cursor (the batch before was not saved, or another worker took the
/// invocation over), and when the unique card key (invocation, user, step) refused its cards
/// and the invocation has moved on: another worker saved them. A refusal while the invocation
/// is still at the batch's cursor is an error. A turn not ended by `until` is an error too.
fn save_followed(
    conn: &mut AnyConnection,
    batch: BatchResult,
    after: &SaveTurn,
    until: std::time::Instant,
) -> Result<u64, Failure> {
    let mut batch = [batch];
    let known = known(conn, &batch)?;
    let first = write_then_progress(conn, &batch[0], |conn| {
        wait_for(after, until)?;
        let markers = markers_for(conn, batch.iter(), &known)?;
        if changed_by(&batch[0], &markers, &known) {
            Err(Followed::Cancels)
        } else {
            Ok(())
        }
    });
    let outcome = match first {
        Err(Followed::Cancels) => {
            crate::db::notices::discard();
            apply_markers(conn, &mut batch, &known)?;
            write_then_progress(conn, &batch[0], |_| Ok(()))
        }
        other => other,
    };
    match outcome {
        Ok(()) => Ok(0),
        Err(Followed::Stale) => {
            // Nothing of it is committed: no feed is told of its cards.
            crate::db::notices::discard();
            Ok(1)
        }
        Err(Followed::Failed(Failure::Query(diesel::result::Error::DatabaseError(
            diesel::result::DatabaseErrorKind::UniqueViolation,
            info,
        )))) => {
            crate::db::notices::discard();
            wait_for(after, until)?;
            if at_cursor(conn, &batch[0])? {
                Err(Failure::Query(diesel::result::Error::DatabaseError(
                    diesel::result::DatabaseErrorKind::UniqueViolation,
                    info,
                )))
            } else {
                Ok(1)
            }
        }
        Err(Followed::Failed(failure)) => Err(failure),
        Err(Followed::Cancels) => Err(Failure::Domain(StorageError::Internal(
            "a batch's cancels changed under the flow's lock".into(),
        ))),
    }
}

/// Whether `markers` (its flow's cancels, read for `known` invocations) drop any of `batch` or
/// stop its invocation.
fn changed_by(batch: &BatchResult, markers: &Markers, known: &Known) -> bool {
    let env = batch.environment_id.clone();
    let Some((flow, version, created)) = known.get(&(env.clone(), batch.invocation_id.clone()))
    else {
        return false;
    };
    let Some(found) = markers.get(&(env, flow.clone())) else {
        return false;
    };
    let mut applied = batch.clone();
    applied.apply_cancels(found, *version, created.and_utc());
    applied.status != batch.status
        || applied.cursor != batch.cursor
        || applied.cards.len() != batch.cards.len()
        || applied.instances.len() != batch.instances.len()
}

/// In a savepoint: `batch`'s cards, events and outbox rows; then `before`; then its progress,
/// fenced by its starting cursor, and its daily totals.
fn write_then_progress(
    conn: &mut AnyConnection,
    batch: &BatchResult,
    before: impl FnOnce(&mut AnyConnection) -> Result<(), Followed>,
) -> Result<(), Followed> {
    conn.transaction::<_, Followed, _>(|conn| {
        let saved = [batch];
        let mut totals = Totals::default();
        RunWrites::of(&saved, conn.backend())
            .map_err(Failure::Domain)?
            .write(conn, &saved, &mut totals)?;
        before(conn)?;
        let ended = save_one(conn, batch)?.ok_or(Followed::Stale)?;
        // After the invocation's row, as every save orders them: then its instances' counts.
        crate::instances::insert_instances(conn, saved, &mut totals)?;
        totals.ended(&ended, batch.status, batch.updated.naive_utc());
        totals.flush(conn)?;
        Ok(())
    })
}

/// Waits for the save before to end, until `until`; an error when it has not.
fn wait_for(after: &SaveTurn, until: std::time::Instant) -> Result<(), Failure> {
    if after.wait(until.saturating_duration_since(std::time::Instant::now())) {
        Ok(())
    } else {
        Err(Failure::Domain(StorageError::Unavailable(
            "the save of the batch before did not end within the database's wait".into(),
        )))
    }
}

/// Whether `batch`'s invocation is still at the cursor the batch starts at, pending or running.
fn at_cursor(conn: &mut AnyConnection, batch: &BatchResult) -> Result<bool, Failure> {
    let found: i64 = at_start!(batch, |key| key.count().get_result(conn)?);
    Ok(found > 0)
}

/// Saves the batches' progress, each only from the cursor it started at; None for a batch
/// whose invocation is no longer there (another worker took it over and saved this batch
/// first), and nothing of that batch is to be written; else what its invocation is counted
/// under in the daily totals.
///
/// Batches that start at no cursor and change their invocations alike (the one batch of each
/// one-user invocation of a `/start` load or a CSV task) are saved with one statement per
/// 500, the saved ones told apart by `RETURNING`; the others one by one.
pub(crate) fn save_progress(
    conn: &mut AnyConnection,
    batches: &[BatchResult],
) -> Result<Vec<Option<Ended>>, Failure> {
    let mut kept: Vec<Option<Ended>> = vec![None; batches.len()];
    let mut alike: HashMap<ProgressKey, Vec<usize>> = HashMap::new();
    for (i, batch) in batches.iter().enumerate() {
        match batch.from_cursor {
            None => alike.entry(ProgressKey::of(batch)).or_default().push(i),
            Some(_) => kept[i] = save_one(conn, batch)?,
        }
    }
    for (key, members) in alike {
        if let [only] = members[..] {
            kept[only] = save_one(conn, &batches[only])?;
            continue;
        }
        let batch = &batches[members[0]];
        for chunk in members.chunks(INSERT_CHUNK) {
            let ids: Vec<&str> = chunk
                .iter()
                .map(|&i| batches[i].invocation_id.as_str())
                .collect();
            let saved: Vec<(String, Ended)> = diesel::update(
                invocations::table
                    .filter(invocations::environment_id.eq(&key.environment_id))
                    .filter(invocations::id.eq_any(&ids))
                    .filter(invocations::cursor.is_null())
                    .filter(
                        invocations::status
                            .eq(InvocationStatus::Pending.as_str())
                            .or(invocations::status.eq(InvocationStatus::Running.as_str())),
                    ),
            )
            .set(progress(batch)?)
            .returning((invocations::id, ENDED))
            .get_results(conn)?;
            let mut saved: HashMap<String, Ended> = saved.into_iter().collect();
            for &i in chunk {
                kept[i] = saved.remove(&batches[i].invocation_id);
            }
        }
    }
    Ok(kept)
}

/// What a batch that starts at no cursor changes in its invocation, besides its key.
#[derive(PartialEq, Eq, Hash)]
pub(crate) struct ProgressKey {
    environment_id: String,
    status: &'static str,
    cursor: Option<String>,
    users_targeted: u64,
    cards_created: u64,
    errors: String,
    updated: NaiveDateTime,
    lease_until: Option<NaiveDateTime>,
}

impl ProgressKey {
    fn of(batch: &BatchResult) -> Self {
        ProgressKey {
            environment_id: batch.environment_id.clone(),
            status: batch.status.as_str(),
            cursor: batch.cursor.clone(),
            users_targeted: batch.users_targeted,
            cards_created: batch.cards_created,
            errors: errors_text(batch),
            updated: batch.updated.naive_utc(),
            lease_until: batch.lease_until.map(|t| t.naive_utc()),
        }
    }
}

/// The changes a batch makes to its invocation; an error when its counts are out of their
/// columns' range.
#[allow(clippy::type_complexity)]
pub(crate) fn progress(
    batch: &BatchResult,
) -> Result<
    (
        diesel::dsl::Eq<invocations::status, &'static str>,
        diesel::dsl::Eq<invocations::cursor, Option<String>>,
        diesel::dsl::Eq<
            invocations::users_targeted,
            diesel::dsl::Add<invocations::users_targeted, i64>,
        >,
        diesel::dsl::Eq<
            invocations::cards_created,
            diesel::dsl::Add<invocations::cards_created, i64>,
        >,
        diesel::dsl::Eq<invocations::errors, String>,
        diesel::dsl::Eq<invocations::lease_until, Option<At>>,
        diesel::dsl::Eq<invocations::updated, At>,
    ),
    Failure,
> {
    let users_targeted: i64 =
        write_number("batch users targeted", batch.users_targeted).map_err(Failure::Domain)?;
    let cards_created: i64 =
        write_number("batch cards created", batch.cards_created).map_err(Failure::Domain)?;
    Ok((
        invocations::status.eq(batch.status.as_str()),
        invocations::cursor.eq(batch.cursor.clone()),
        invocations::users_targeted.eq(invocations::users_targeted + users_targeted),
        invocations::cards_created.eq(invocations::cards_created + cards_created),
        invocations::errors.eq(errors_text(batch)),
        // The claim ends with the batch (the next one may be claimed at once), unless the
        // worker goes on with the next one itself.
        invocations::lease_until.eq(batch.lease_until.map(|t| At(t.naive_utc()))),
        invocations::updated.eq(At(batch.updated.naive_utc())),
    ))
}

/// What an invocation is counted under in the daily totals.
const ENDED: (
    invocations::environment_id,
    invocations::flow_id,
    invocations::flow_version,
    invocations::mode,
    invocations::created,
) = (
    invocations::environment_id,
    invocations::flow_id,
    invocations::flow_version,
    invocations::mode,
    invocations::created,
);

/// `$then` of `key`, the query of `$batch`'s invocation at the batch's starting point: its
/// cursor and a status not yet final (a one-batch invocation keeps a null cursor from start
/// to end). (`eq` OR `eq`, not `eq_any`: diesel caches the prepared statement only for a fixed
/// number of binds, and this runs once per invocation — re-parsing it was a large share of the
/// server's CPU while a CSV task ran.) A macro: the two cursors' queries are of two types.
macro_rules! at_start {
    ($batch:expr, |$key:ident| $then:expr) => {{
        let batch: &BatchResult = $batch;
        let start = invocations::table
            .filter(
                invocations::environment_id
                    .eq(&batch.environment_id)
                    .and(invocations::id.eq(&batch.invocation_id)),
            )
            .filter(
                invocations::status
                    .eq(InvocationStatus::Pending.as_str())
                    .or(invocations::status.eq(InvocationStatus::Running.as_str())),
            );
        match &batch.from_cursor {
            Some(from) => {
                let $key = start.filter(invocations::cursor.eq(from));
                $then
            }
            None => {
                let $key = start.filter(invocations::cursor.is_null());
                $then
            }
        }
    }};
}
use at_start;

/// Saves one batch's progress, only from the cursor it started at; None when its invocation
/// is no longer there, else what it is counted under.
pub(crate) fn save_one(
    conn: &mut AnyConnection,
    batch: &BatchResult,
) -> Result<Option<Ended>, Failure> {
    Ok(at_start!(batch, |key| diesel::update(key)
        .set(progress(batch)?)
        .returning(ENDED)
        .get_result(conn)
        .optional()?))
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::{TimeZone, Utc};

    #[test]
    fn claims_read_each_status_through_its_partial_index() {
        let now = Utc.timestamp_opt(1_700_000_000, 0).unwrap().naive_utc();
        for (status, index) in DUE_STATUSES
            .iter()
            .zip(["invocations_pending", "invocations_running"])
        {
            let query = invocations_due!(status.as_str(), At(now), 10);
            let plan = crate::testing::sqlite_query_plan(&query);
            assert!(
                plan.iter().any(|d| d.contains(index))
                    && !plan.iter().any(|d| d.contains("TEMP B-TREE")),
                "{status}: {plan:?}"
            );
        }
    }
}
