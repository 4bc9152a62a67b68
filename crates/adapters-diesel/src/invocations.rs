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
use crate::markers::apply_cancels;
use crate::millis::At;
use crate::page::after;
use crate::recorder::*;
use crate::rows::*;
use crate::schema::invocations;
use crate::totals::Totals;
use crate::writes::*;

mod followed;
mod progress;
use followed::save_followed;
use progress::save_progress;

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
