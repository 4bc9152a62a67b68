//! Connections, the pool, migrations and the blocking-call bridge.

use std::sync::Arc;

use domain::StorageError;

mod bridge;
mod calls;
mod cancel;
// diesel's `MultiConnection` derive writes items of its own, without docs.
#[allow(missing_docs)]
mod connection;
mod failure;
mod migrations;
pub(crate) mod notices;
mod threads;
mod transaction;
mod upkeep;
mod url;
mod writers;

use cancel::Canceller;
pub use connection::{AnyConnection, Backend, DatabaseError, MultiBackend};
pub(crate) use failure::Failure;
pub use migrations::{apply_migrations, schema_status};
pub use migrations::{SchemaStatus, POSTGRES_MIGRATIONS, SQLITE_MIGRATIONS};
use url::Manager;
pub use url::{DatabaseUrl, Synchronous, Waits};
pub(crate) use writers::Others;
use writers::Writers;

/// The WAL's largest size at rest (contract §18). At rest it is in fact empty: a checkpoint
/// that finds every frame copied and none added since the last one truncates it.
pub const WAL_LIMIT_BYTES: u64 = 16 << 20;

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
    writers: Option<Arc<Writers>>,
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
}

#[cfg(test)]
mod tests;
