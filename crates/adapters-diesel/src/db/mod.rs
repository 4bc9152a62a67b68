//! Connections, the pool, migrations and the blocking-call bridge.

use std::sync::Arc;
use std::time::Duration;

use diesel::connection::{AnsiTransactionManager, SimpleConnection, TransactionManager};
use diesel::sqlite::SqliteConnection;
use diesel::{Connection, RunQueryDsl};
use diesel_migrations::MigrationHarness;
use domain::StorageError;

mod calls;
mod cancel;
// diesel's `MultiConnection` derive writes items of its own, without docs.
#[allow(missing_docs)]
mod connection;
mod migrations;
pub(crate) mod notices;
mod threads;
mod url;

use calls::*;
use cancel::Canceller;
pub use connection::{AnyConnection, Backend, DatabaseError, MultiBackend};
pub use migrations::{SchemaStatus, POSTGRES_MIGRATIONS, SQLITE_MIGRATIONS};
use url::Manager;
pub use url::{DatabaseUrl, Synchronous, Waits};

/// The longest a readiness check waits for the database.
const READY_WITHIN: Duration = Duration::from_secs(5);

/// The WAL's largest size at rest (contract §18). At rest it is in fact empty: a checkpoint
/// that finds every frame copied and none added since the last one truncates it.
pub const WAL_LIMIT_BYTES: u64 = 16 << 20;

/// Below this many free bytes, a disk I/O error on a write is taken for a full disk (SQLite
/// reports ENOSPC on its files as a plain I/O error).
const LOW_SPACE_BYTES: u64 = 1 << 20;

/// Runs the same statement on whichever backend the connection is, for the few statements
/// diesel's MultiConnection cannot express (upserts, `FOR UPDATE SKIP LOCKED`).
#[macro_export]
#[doc(hidden)]
macro_rules! per_backend {
    ($conn:expr, $c:ident => $body:expr) => {
        match $conn {
            $crate::db::AnyConnection::Postgresql($c) => $body,
            $crate::db::AnyConnection::Sqlite($c) => $body,
        }
    };
}

/// The first row of `query`, skipping rows other transactions hold (`FOR UPDATE SKIP LOCKED`)
/// on PostgreSQL, where several processes claim work; SQLite serves one process and its
/// `BEGIN IMMEDIATE` already serialises claims. For the claim of a leased job.
#[macro_export]
#[doc(hidden)]
macro_rules! first_unclaimed {
    ($conn:expr, $query:expr) => {
        match $conn {
            $crate::db::AnyConnection::Postgresql(c) => $query
                .limit(1)
                .for_update()
                .skip_locked()
                .first(c)
                .optional(),
            $crate::db::AnyConnection::Sqlite(c) => $query.limit(1).first(c).optional(),
        }
    };
}

/// The failure of a unit of work: a diesel error, or a domain answer decided inside it.
pub(crate) enum Failure {
    Query(diesel::result::Error),
    Domain(StorageError),
    /// The work asks for its transaction to be rolled back and run again: the `/start`
    /// recorder's signal that an id it took to be new was stored meanwhile. Only
    /// [`Database::transaction_blocking_or_retry`] takes it; it never leaves this crate.
    Retry,
}

impl From<diesel::result::Error> for Failure {
    fn from(e: diesel::result::Error) -> Self {
        Failure::Query(e)
    }
}

/// The database: a pool of connections to one backend.
#[derive(Clone)]
pub struct Database {
    pool: r2d2::Pool<Manager>,
    backend: Backend,
    /// SQLite only: its writers take turns here, first come first served. SQLite admits one
    /// writer at a time and lets the others poll with growing sleeps (its busy handler), so a
    /// long transaction (an engine step, a CSV chunk) starved short ones (a `/start`) that
    /// slept through the moments the lock was free. Measured; see the git history of
    /// docs/benchmarks.md.
    writers: Option<Arc<tokio::sync::Mutex<()>>>,
    /// Writes refused for lack of space, and those that succeed (contract §18).
    storage: Arc<domain::health::Storage>,
    /// SQLite: the WAL's frames at the last checkpoint, to tell when it is at rest.
    wal_frames: Arc<std::sync::atomic::AtomicI32>,
    /// SQLite's `synchronous` for every connection.
    synchronous: Synchronous,
    /// Bounds of every wait (contract §20).
    waits: Waits,
    /// Calls holding or waiting for a connection, at most the pool's size: while the database
    /// hangs, the calls beyond wait here, as futures, not as blocked threads.
    gate: Arc<tokio::sync::Semaphore>,
    /// The threads the calls run on: at most the pool's size.
    threads: Arc<threads::Threads>,
    /// PostgreSQL: cancels on the server what calls given up were running.
    canceller: Option<Canceller>,
    /// How long calls waited for a connection: for a turn at the gate and for the pool
    /// (`workbench_db_pool_wait_seconds`).
    checkouts: Arc<domain::health::Durations>,
    /// Told whose cards changed when a write transaction commits (contract §12), and which
    /// kinds of background work it queued.
    told: notices::Told,
}

/// The buckets of the waits for a connection, in seconds: from a free connection at once to
/// the longest pool timeout worth waiting.
const CHECKOUT_BUCKETS: &[f64] = &[
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
];

impl Database {
    /// Connects, applies pending migrations, and builds the pool. Blocking: call it before the
    /// HTTP server starts, or from `spawn_blocking`.
    pub fn connect(url: &str, pool_size: u32) -> Result<Self, DatabaseError> {
        Self::open(DatabaseUrl::parse(url)?, pool_size)
    }

    /// [`Database::connect`] with a parsed URL and its settings.
    pub fn open(url: DatabaseUrl, pool_size: u32) -> Result<Self, DatabaseError> {
        Self::open_with(url, pool_size, true)
    }

    /// [`Database::open`]; with `may_migrate` false, a database lacking migrations is refused
    /// ([`DatabaseError::PendingMigrations`]) instead of migrated. A database migrated by a
    /// newer version is always refused ([`DatabaseError::NewerSchema`]).
    pub fn open_with(
        url: DatabaseUrl,
        pool_size: u32,
        may_migrate: bool,
    ) -> Result<Self, DatabaseError> {
        let (backend, synchronous, waits) = (url.backend(), url.synchronous, url.waits);
        let mut first = url
            .establish()
            .map_err(|e| DatabaseError::Connect(e.to_string()))?;
        let applied = migrations::prepare(&mut first, may_migrate)?;
        if !applied.is_empty() {
            tracing::info!(applied = %applied.join(","), "migrations applied");
        }
        drop(first);
        let canceller = match backend {
            Backend::Postgres => Some(
                Canceller::start(url.clone()).map_err(|e| DatabaseError::Connect(e.to_string()))?,
            ),
            Backend::Sqlite => None,
        };
        let pool = r2d2::Pool::builder()
            .max_size(pool_size.max(1))
            // PostgreSQL: connections open as calls need them, not all at start, and close
            // after 10 minutes unused; each is a server process. (With a minimum of idle
            // ones, r2d2 would open a spare at every checkout that takes the last.) SQLite's
            // are a file handle and a page cache each, and opened as needed they measurably
            // slowed `/start`: all open at start (the idle-RSS goal of docs/benchmarks.md is
            // met with them open).
            .min_idle((backend == Backend::Postgres).then_some(0))
            .connection_timeout(waits.pool)
            // Ping on checkout a connection idle for a while (see `calls::FRESH`): after a
            // database restart, dead connections are replaced instead of failing requests.
            .test_on_check_out(true)
            .build(Manager(url))
            .map_err(|e| DatabaseError::Connect(e.to_string()))?;
        let writers = (backend == Backend::Sqlite).then(Arc::default);
        Ok(Self {
            pool,
            backend,
            writers,
            storage: Arc::default(),
            wal_frames: Arc::default(),
            synchronous,
            waits,
            gate: Arc::new(tokio::sync::Semaphore::new(pool_size.max(1) as usize)),
            threads: Arc::new(threads::Threads::new(pool_size.max(1) as usize, "db-call")),
            canceller,
            checkouts: Arc::new(domain::health::Durations::new(CHECKOUT_BUCKETS)),
            told: Default::default(),
        })
    }

    /// Tells `notices` whose cards changed each time a write transaction of this database (or
    /// of a clone) commits card events (contract §12). On PostgreSQL, other processes'
    /// changes come through [`crate::listen_for_feed`].
    pub fn tell_feed(&self, notices: Arc<dyn domain::feed::FeedNotices>) {
        self.told.set(notices);
    }

    /// A wake-up for one loop, notified each time a write transaction of this database (or of
    /// a clone) that queued `work` commits, so that the loop claiming it need not poll for it
    /// often; each call makes a new one, and every one asked for `work` is notified. Work
    /// queued by other processes, and work that comes due with time (a retry, a lease run
    /// out), is not told.
    pub fn queued(&self, work: notices::Work) -> Arc<tokio::sync::Notify> {
        self.told.queued(work)
    }

    /// When a call starting now must be answered (contract §20): one deadline for the wait
    /// for a connection, its health check, the queries and a batched commit's reply. (Per
    /// call, not per request: a CSV upload streams for as long as its body takes, and each of
    /// its calls is bounded. While the database hangs, a request's first call to wait ends it.)
    pub(crate) fn deadline(&self) -> tokio::time::Instant {
        tokio::time::Instant::now() + self.waits.request
    }

    /// How long a request waits for the database at most.
    pub(crate) fn request_wait(&self) -> std::time::Duration {
        self.waits.request
    }

    pub(crate) fn timed_out(&self) -> StorageError {
        StorageError::Unavailable(format!(
            "the database did not answer within {} ms",
            self.waits.request.as_millis()
        ))
    }

    /// Which backend it is.
    pub fn backend(&self) -> Backend {
        self.backend
    }

    /// The storage state this database reports to (refused and successful writes).
    pub fn storage(&self) -> Arc<domain::health::Storage> {
        self.storage.clone()
    }

    /// The pool as it is now: connections idle and in use, and how long calls have waited
    /// for one (each call's wait for its turn and its connection, the waits that ran out
    /// included).
    pub fn pool_state(&self) -> domain::health::Pool {
        let state = self.pool.state();
        domain::health::Pool {
            idle: state.idle_connections,
            active: state.connections.saturating_sub(state.idle_connections),
            waits: self.checkouts.snapshot(),
        }
    }

    /// `outcome` of a call, reported to [`Database::storage`]: a write refused for lack of
    /// space (also a disk I/O error when the last sample found the disk all but full, as SQLite
    /// reports ENOSPC) is [`StorageError::Full`]; a write transaction that succeeded while the
    /// disk has room (as last sampled, on SQLite) clears it.
    fn reported<T>(
        &self,
        outcome: Result<T, StorageError>,
        wrote: bool,
    ) -> Result<T, StorageError> {
        match outcome {
            Ok(value) => {
                // A transaction that committed ends a refusal only when the disk has room
                // again: one that changed nothing (an empty claim) commits on a full disk too.
                let room = self
                    .storage
                    .free_bytes()
                    .is_none_or(|free| free >= LOW_SPACE_BYTES);
                if wrote && room {
                    self.storage.write_succeeded();
                }
                Ok(value)
            }
            Err(StorageError::Internal(message))
                if message.contains("disk I/O error")
                    && self
                        .storage
                        .free_bytes()
                        .is_some_and(|free| free < LOW_SPACE_BYTES) =>
            {
                self.storage.write_refused();
                Err(StorageError::Full(message))
            }
            Err(full @ StorageError::Full(_)) => {
                self.storage.write_refused();
                Err(full)
            }
            Err(other) => Err(other),
        }
    }

    /// Runs `work` with a pooled connection on tokio's blocking pool.
    pub(crate) async fn run<T, F>(&self, work: F) -> Result<T, StorageError>
    where
        T: Send + 'static,
        F: FnOnce(&mut AnyConnection) -> Result<T, Failure> + Send + 'static,
    {
        let outcome = self.run_unreported(self.deadline(), work).await;
        self.reported(outcome, false)
    }

    /// Runs `work` on one of the database's threads, answering by the call's deadline
    /// (contract §20). At most the pool's size of calls hold a thread; the others wait for
    /// their turn as futures. A call past its deadline is answered `Unavailable` at once; its
    /// thread, blocked on a hung server, ends when the server or the network gives up, runs
    /// none of its work if it had not started, and discards its connection.
    async fn run_unreported<T, F>(
        &self,
        deadline: tokio::time::Instant,
        work: F,
    ) -> Result<T, StorageError>
    where
        T: Send + 'static,
        F: FnOnce(&mut AnyConnection) -> Result<T, Failure> + Send + 'static,
    {
        let asked = std::time::Instant::now();
        // A full pool queues callers here: WORKBENCH_DATABASE_POOL_TIMEOUT bounds that wait too.
        let turn_by = deadline.min(tokio::time::Instant::now() + self.waits.pool);
        let Ok(Ok(turn)) =
            tokio::time::timeout_at(turn_by, self.gate.clone().acquire_owned()).await
        else {
            self.checkouts.observe(asked.elapsed());
            return Err(self.timed_out());
        };
        let (pool, pool_wait, checkouts) =
            (self.pool.clone(), self.waits.pool, self.checkouts.clone());
        // The turn goes back when both sides let go of it: after the waiter has the answer
        // (the thread is then back among the idle ones, so the next call reuses it rather
        // than starting another), or, for a call given up, when its thread ends.
        let turn = Arc::new(turn);
        let thread_turn = turn.clone();
        let span = tracing::Span::current();
        // Where the call stands, decided under one lock by the thread and by the waiter, so
        // that a cancel only ever reaches a statement of this call, and a connection goes back
        // to the pool only when its work ended before the call was given up.
        let state: Arc<std::sync::Mutex<CallState>> = Arc::default();
        let shared = state.clone();
        let (answer, answered) = tokio::sync::oneshot::channel();
        let call = move || {
            let _turn = thread_turn;
            let _entered = span.enter();
            let gave_up = || StorageError::Unavailable("gave up before starting".into());
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            if left.is_zero() || lock(&shared).is_abandoned() {
                return Err(gave_up());
            }
            let pooled = pool.get_timeout(left.min(pool_wait));
            checkouts.observe(asked.elapsed());
            let mut pooled = pooled.map_err(|e| StorageError::Unavailable(e.to_string()))?;
            {
                let mut state = lock(&shared);
                if state.is_abandoned() {
                    pooled.discard = true;
                    return Err(gave_up());
                }
                *state = CallState::Running(pooled.backend);
            }
            let outcome = work(&mut pooled.conn).map_err(StorageError::from);
            let mut state = lock(&shared);
            if state.is_abandoned() {
                pooled.discard = true;
            } else {
                *state = CallState::Ended;
            }
            outcome
        };
        let handed = self.threads.run(Box::new(move || {
            let _ = answer.send(call());
        }));
        if let Err(e) = handed {
            return Err(StorageError::Unavailable(format!(
                "no thread could be started for the database: {e}"
            )));
        }
        let joined = tokio::time::timeout_at(deadline, answered).await;
        drop(turn);
        match joined {
            Ok(answer) => answer.unwrap_or_else(|_| {
                Err(StorageError::Internal(
                    "database task failed: the call panicked".into(),
                ))
            }),
            Err(_) => {
                let running = std::mem::replace(&mut *lock(&state), CallState::Abandoned);
                if let (Some(canceller), CallState::Running(Some(process))) =
                    (&self.canceller, running)
                {
                    canceller.cancel(process);
                }
                Err(self.timed_out())
            }
        }
    }

    /// Like [`Database::run`], inside one write transaction (see [`write_transaction`]).
    pub(crate) async fn transaction<T, F>(&self, work: F) -> Result<T, StorageError>
    where
        T: Send + 'static,
        F: FnOnce(&mut AnyConnection) -> Result<T, Failure> + Send + 'static,
    {
        let deadline = self.deadline();
        let _turn = self.writers_turn(deadline).await?;
        let told = self.told.clone();
        let outcome = self
            .run_unreported(deadline, move |conn| {
                let outcome = write_transaction(conn, work);
                told.tell(notices::take());
                outcome
            })
            .await;
        self.reported(outcome, true)
    }

    /// Like [`Database::run`], in this writer's turn on SQLite but in no transaction: for a
    /// statement that makes its own (`PRAGMA incremental_vacuum`).
    pub(crate) async fn write<T, F>(&self, work: F) -> Result<T, StorageError>
    where
        T: Send + 'static,
        F: FnOnce(&mut AnyConnection) -> Result<T, Failure> + Send + 'static,
    {
        let deadline = self.deadline();
        let _turn = self.writers_turn(deadline).await?;
        let outcome = self.run_unreported(deadline, work).await;
        self.reported(outcome, true)
    }

    /// SQLite: this writer's turn, within the call's deadline.
    async fn writers_turn(
        &self,
        deadline: tokio::time::Instant,
    ) -> Result<Option<tokio::sync::MutexGuard<'_, ()>>, StorageError> {
        match &self.writers {
            Some(writers) => tokio::time::timeout_at(deadline, writers.lock())
                .await
                .map(Some)
                .map_err(|_| self.timed_out()),
            None => Ok(None),
        }
    }

    /// Like [`Database::transaction`], for a claim: a write whose loss on a power failure (or
    /// a crash of PostgreSQL) is harmless, because the work it claims is then claimed again.
    /// Its commit does not wait for the disk: SQLite runs it with `synchronous = NORMAL`,
    /// PostgreSQL with `synchronous_commit = off`. The log is written in order, so the next
    /// durable commit makes it durable too: an outcome saved never outlives its claim.
    pub(crate) async fn claim_transaction<T, F>(&self, work: F) -> Result<T, StorageError>
    where
        T: Send + 'static,
        F: FnOnce(&mut AnyConnection) -> Result<T, Failure> + Send + 'static,
    {
        let deadline = self.deadline();
        let _turn = self.writers_turn(deadline).await?;
        let relax = self.synchronous == Synchronous::Full;
        let told = self.told.clone();
        let outcome = self
            .run_unreported(deadline, move |conn| {
                let outcome = match conn {
                    AnyConnection::Sqlite(c) if relax => {
                        c.batch_execute("PRAGMA synchronous = NORMAL")?;
                        let outcome = write_transaction(conn, work);
                        // Setting a pragma outside a transaction fails only on a broken
                        // connection, which the pool discards.
                        let restored = match conn {
                            AnyConnection::Sqlite(c) => {
                                c.batch_execute("PRAGMA synchronous = FULL")
                            }
                            AnyConnection::Postgresql(_) => Ok(()),
                        };
                        let value = outcome?;
                        restored?;
                        Ok(value)
                    }
                    AnyConnection::Sqlite(_) => write_transaction(conn, work),
                    AnyConnection::Postgresql(_) => write_transaction(conn, |conn| {
                        if let AnyConnection::Postgresql(c) = &mut *conn {
                            c.batch_execute("SET LOCAL synchronous_commit = off")?;
                        }
                        work(conn)
                    }),
                };
                told.tell(notices::take());
                outcome
            })
            .await;
        self.reported(outcome, true)
    }

    /// Like [`Database::transaction`], on the calling thread, which must be a thread of its own
    /// (not one of an async runtime): it blocks while waiting for its turn and the connection.
    /// Work that may ask to be run again ([`Failure::Retry`]): its transaction is then rolled
    /// back and `None` returned. So it is when PostgreSQL ended the transaction to break a
    /// deadlock: two writers inserting the same keys in other orders (two processes, or a
    /// recorder's two writers), of which the other went on.
    pub(crate) fn transaction_blocking_or_retry<T, F>(
        &self,
        work: F,
    ) -> Result<Option<T>, StorageError>
    where
        F: FnOnce(&mut AnyConnection) -> Result<T, Failure>,
    {
        let _turn = self.writers.as_ref().map(|writers| writers.blocking_lock());
        let started = std::time::Instant::now();
        let pooled = self.pool.get_timeout(self.waits.pool);
        self.checkouts.observe(started.elapsed());
        let mut pooled = pooled.map_err(|e| StorageError::Unavailable(e.to_string()))?;
        let written = write_transaction(&mut pooled.conn, work);
        self.told.tell(notices::take());
        let outcome = match written {
            Ok(value) => Ok(Some(value)),
            Err(Failure::Retry) => Ok(None),
            Err(Failure::Query(e)) if deadlocked(&e) => Ok(None),
            Err(failure) => Err(StorageError::from(failure)),
        };
        // Its callers were answered by their deadline (contract §20); a connection that took
        // longer than that hung, and is not used again.
        if started.elapsed() > self.waits.request {
            pooled.discard = true;
        }
        self.reported(outcome, true)
    }

    /// SQLite: copies what the WAL holds into the database file (a passive checkpoint: it never
    /// waits for or blocks writers or readers), off the writers' path; call it periodically.
    /// When a checkpoint finds every frame copied and none added since the one before, the
    /// database is at rest and the WAL file is truncated to nothing (a `TRUNCATE` checkpoint,
    /// which nothing is waiting behind then): contract §18's bound, at no cost to a busy
    /// database. Returns the WAL pages left to copy. PostgreSQL checkpoints by itself: a no-op.
    pub async fn checkpoint(&self) -> Result<u64, StorageError> {
        if self.backend != Backend::Sqlite {
            return Ok(0);
        }
        let last = self.wal_frames.clone();
        self.run(move |conn| {
            #[derive(diesel::QueryableByName)]
            struct Checkpoint {
                #[diesel(sql_type = diesel::sql_types::Integer)]
                log: i32,
                #[diesel(sql_type = diesel::sql_types::Integer)]
                checkpointed: i32,
            }
            let done: Checkpoint =
                diesel::sql_query("PRAGMA wal_checkpoint(PASSIVE)").get_result(conn)?;
            let left = u64::try_from(done.log - done.checkpointed).unwrap_or(0);
            let before = last.swap(done.log, std::sync::atomic::Ordering::Relaxed);
            if left == 0 && done.log > 0 && done.log == before {
                // Without waiting: a TRUNCATE checkpoint that finds a reader or a writer would
                // hold new writers back while it waits, so it gives up at once (SQLITE_BUSY,
                // its result's first column) and is tried at the next rest.
                conn.batch_execute("PRAGMA busy_timeout = 0")?;
                #[derive(diesel::QueryableByName)]
                struct Truncated {
                    #[diesel(sql_type = diesel::sql_types::Integer)]
                    busy: i32,
                }
                let truncated = diesel::sql_query("PRAGMA wal_checkpoint(TRUNCATE)")
                    .get_result::<Truncated>(conn);
                conn.batch_execute("PRAGMA busy_timeout = 5000")?;
                if truncated.is_ok_and(|t| t.busy == 0) {
                    last.store(0, std::sync::atomic::Ordering::Relaxed);
                }
            }
            Ok(left)
        })
        .await
    }

    /// The database's clock (contract §19), read between two readings of the host's, to
    /// measure the host's offset: `(before, database, after)`. On SQLite (one process, the
    /// host's own file) the database's clock is the host's, and nothing is read.
    pub async fn clock_reading(
        &self,
    ) -> Result<(domain::Timestamp, domain::Timestamp, domain::Timestamp), StorageError> {
        if self.backend != Backend::Postgres {
            let now = chrono::Utc::now();
            return Ok((now, now, now));
        }
        self.run(|conn| {
            #[derive(diesel::QueryableByName)]
            struct Now {
                #[diesel(sql_type = diesel::sql_types::Timestamp)]
                now: chrono::NaiveDateTime,
            }
            let before = chrono::Utc::now();
            let read: Now =
                diesel::sql_query("SELECT (clock_timestamp() AT TIME ZONE 'UTC') AS now")
                    .get_result(conn)?;
            let after = chrono::Utc::now();
            Ok((before, read.now.and_utc(), after))
        })
        .await
    }

    /// True when every embedded migration has been applied.
    /// Readiness: within the call's deadline, and never more than [`READY_WITHIN`] (contract
    /// §20: `/readyz` answers 503 within 6 s of the database hanging).
    pub(crate) async fn migrations_current(&self) -> Result<bool, StorageError> {
        let deadline = tokio::time::Instant::now() + self.waits.request.min(READY_WITHIN);
        let outcome = self
            .run_unreported(deadline, |conn| {
                let pending = match conn {
                    AnyConnection::Postgresql(c) => c.has_pending_migration(POSTGRES_MIGRATIONS),
                    AnyConnection::Sqlite(c) => c.has_pending_migration(SQLITE_MIGRATIONS),
                };
                pending
                    .map(|p| !p)
                    .map_err(|e| Failure::Domain(StorageError::Internal(e.to_string())))
            })
            .await;
        self.reported(outcome, false)
    }
}

/// PostgreSQL ended this transaction to break a deadlock (SQLSTATE 40P01), and running it
/// again may succeed. diesel has no kind for it; the server's message names it, in English
/// (`lc_messages`; docs/operations.md).
fn deadlocked(e: &diesel::result::Error) -> bool {
    match e {
        diesel::result::Error::DatabaseError(_, info) => {
            info.message().starts_with("deadlock detected")
        }
        _ => false,
    }
}

/// Runs `work` in a transaction meant to write. On SQLite it starts with `BEGIN IMMEDIATE`,
/// taking the write lock up front: a deferred transaction that reads and then writes cannot
/// wait for the lock (SQLite answers "database is locked" at once, whatever `busy_timeout`
/// says), while an immediate one waits its turn. diesel's MultiConnection delegates
/// transaction state to the inner connection, so beginning on the inner connection and
/// committing through the outer one is consistent.
pub(crate) fn write_transaction<T, F>(conn: &mut AnyConnection, work: F) -> Result<T, Failure>
where
    F: FnOnce(&mut AnyConnection) -> Result<T, Failure>,
{
    type Manager = <AnyConnection as Connection>::TransactionManager;
    notices::discard();
    match conn {
        AnyConnection::Sqlite(inner) => {
            AnsiTransactionManager::begin_transaction_sql(inner, "BEGIN IMMEDIATE")?
        }
        AnyConnection::Postgresql(_) => Manager::begin_transaction(conn)?,
    }
    match work(conn) {
        Ok(value) => match Manager::commit_transaction(conn) {
            Ok(()) => Ok(value),
            Err(commit) => {
                notices::discard();
                let _ = Manager::rollback_transaction(conn);
                Err(commit.into())
            }
        },
        Err(failure) => {
            notices::discard();
            // SQLite rolls a transaction back by itself on some errors (a full disk among
            // them): the rollback then finds none, and the failure that caused it is the
            // answer. A connection left in doubt is discarded by the pool (`has_broken`).
            if let Err(rollback) = Manager::rollback_transaction(conn) {
                tracing::debug!(error = %rollback, "rollback after a failed transaction");
            }
            Err(failure)
        }
    }
}

/// Applies pending migrations (refusing a newer schema); the versions applied.
pub(crate) fn migrate(conn: &mut AnyConnection) -> Result<Vec<String>, DatabaseError> {
    migrations::prepare(conn, true)
}

/// The schema of the database at `url` against this binary's migrations, changing nothing.
/// A SQLite file that does not exist yet is not created: everything is pending.
pub fn schema_status(url: &DatabaseUrl) -> Result<SchemaStatus, DatabaseError> {
    if let Some(file) = url.sqlite_file() {
        if !file.exists() {
            let mut empty = SqliteConnection::establish(":memory:")
                .map(AnyConnection::Sqlite)
                .map_err(|e| DatabaseError::Connect(e.to_string()))?;
            return migrations::status(&mut empty);
        }
    }
    let mut conn = url
        .establish()
        .map_err(|e| DatabaseError::Connect(e.to_string()))?;
    migrations::status(&mut conn)
}

/// Applies the pending migrations of the database at `url` (`workbench migrate`); the
/// versions applied, and the schema after.
pub fn apply_migrations(url: &DatabaseUrl) -> Result<(Vec<String>, SchemaStatus), DatabaseError> {
    let mut conn = url
        .establish()
        .map_err(|e| DatabaseError::Connect(e.to_string()))?;
    let applied = migrate(&mut conn)?;
    Ok((applied, migrations::status(&mut conn)?))
}

#[cfg(test)]
mod tests;
