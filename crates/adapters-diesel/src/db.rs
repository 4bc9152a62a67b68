//! Connections, the pool, migrations and the blocking-call bridge.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use diesel::connection::{AnsiTransactionManager, SimpleConnection, TransactionManager};
use diesel::pg::PgConnection;
use diesel::r2d2::R2D2Connection;
use diesel::sqlite::SqliteConnection;
use diesel::{Connection, RunQueryDsl};
use diesel_migrations::{embed_migrations, EmbeddedMigrations, MigrationHarness};
use domain::StorageError;

pub const SQLITE_MIGRATIONS: EmbeddedMigrations = embed_migrations!("../../migrations/sqlite");
pub const POSTGRES_MIGRATIONS: EmbeddedMigrations = embed_migrations!("../../migrations/postgres");

/// WAL pages after which a committing SQLite writer checkpoints by itself, 32 MiB (SQLite's
/// default is 1,000 pages: with 4 KiB pages every other engine batch paid ~17 ms for it).
const WRITER_CHECKPOINT_PAGES: u32 = (32 << 20) / SQLITE_PAGE_SIZE;

/// Page size of a new SQLite database (SQLite's default is 4,096). Fixed when the file is
/// created: an existing database keeps its own (docs/operations.md says how to convert one).
/// Measured in docs/benchmarks.md: wider pages split and link fewer pages per card written.
const SQLITE_PAGE_SIZE: u32 = 8_192;

/// Key of the PostgreSQL advisory lock held while migrations run, so that several processes
/// starting together on one database apply them once.
const MIGRATION_LOCK_KEY: i64 = 0x776f_726b_6265_6e63; // "workbenc"

/// One connection to either backend. `Postgresql` comes first: diesel's generated
/// `establish` tries variants in order and SQLite accepts any string as a path. We never use
/// that path (see [`Manager`]), but the order keeps it harmless.
#[derive(diesel::MultiConnection)]
pub enum AnyConnection {
    Postgresql(PgConnection),
    Sqlite(SqliteConnection),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Sqlite,
    Postgres,
}

#[derive(Debug, thiserror::Error)]
pub enum DatabaseError {
    #[error("unsupported database URL scheme (use sqlite://PATH or postgres://...)")]
    UnsupportedUrl,
    #[error("cannot connect to the database: {0}")]
    Connect(String),
    #[error("cannot apply migrations: {0}")]
    Migrate(String),
}

/// SQLite's `PRAGMA synchronous` (contract §18). `Full`, the default, fsyncs the WAL at every
/// commit: a write acknowledged survives a power loss. `Normal` fsyncs only at checkpoints:
/// faster, and on a power loss the writes acknowledged since the last checkpoint are lost
/// (docs/operations.md has the measured trade-off).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Synchronous {
    #[default]
    Full,
    Normal,
}

impl Synchronous {
    /// `full` or `normal`, as `WORKBENCH_SQLITE_SYNCHRONOUS` is written.
    pub fn parse(text: &str) -> Option<Self> {
        match text.trim().to_ascii_lowercase().as_str() {
            "full" => Some(Self::Full),
            "normal" => Some(Self::Normal),
            _ => None,
        }
    }

    const fn pragma(self) -> &'static str {
        match self {
            Self::Full => "FULL",
            Self::Normal => "NORMAL",
        }
    }
}

/// The WAL's largest size at rest (contract §18). At rest it is in fact empty: a checkpoint
/// that finds every frame copied and none added since the last one truncates it.
pub const WAL_LIMIT_BYTES: u64 = 16 << 20;

/// Below this many free bytes, a disk I/O error on a write is taken for a full disk (SQLite
/// reports ENOSPC on its files as a plain I/O error).
const LOW_SPACE_BYTES: u64 = 1 << 20;

/// A parsed database URL. Never printed: it may hold a password.
#[derive(Clone)]
pub struct DatabaseUrl {
    backend: Backend,
    /// For SQLite the file path (or `file:` URI); for PostgreSQL the URL as given.
    target: String,
    synchronous: Synchronous,
}

impl DatabaseUrl {
    pub fn parse(url: &str) -> Result<Self, DatabaseError> {
        if url.starts_with("postgres://") || url.starts_with("postgresql://") {
            Ok(Self {
                backend: Backend::Postgres,
                target: url.to_owned(),
                synchronous: Synchronous::Full,
            })
        } else if let Some(path) = url.strip_prefix("sqlite://") {
            if path.is_empty() {
                return Err(DatabaseError::UnsupportedUrl);
            }
            Ok(Self {
                backend: Backend::Sqlite,
                target: path.to_owned(),
                synchronous: Synchronous::Full,
            })
        } else {
            Err(DatabaseError::UnsupportedUrl)
        }
    }

    pub fn backend(&self) -> Backend {
        self.backend
    }

    /// SQLite's `synchronous` for every connection (PostgreSQL's commits are never lowered).
    pub fn with_synchronous(mut self, synchronous: Synchronous) -> Self {
        self.synchronous = synchronous;
        self
    }

    /// The SQLite database file, for placing files "beside the database".
    pub fn sqlite_file(&self) -> Option<PathBuf> {
        match self.backend {
            Backend::Sqlite => {
                let path = self.target.strip_prefix("file:").unwrap_or(&self.target);
                Some(PathBuf::from(path.split('?').next().unwrap_or(path)))
            }
            Backend::Postgres => None,
        }
    }

    pub(crate) fn establish(&self) -> Result<AnyConnection, diesel::ConnectionError> {
        match self.backend {
            Backend::Postgres => {
                PgConnection::establish(&self.target).map(AnyConnection::Postgresql)
            }
            Backend::Sqlite => {
                let mut conn = SqliteConnection::establish(&self.target)?;
                // Per connection: wait for locks instead of failing, enforce foreign keys.
                // WAL is persistent (set once at pool creation). `synchronous` is FULL unless
                // NORMAL is asked for (see [`Synchronous`]). The WAL is bounded at rest by the
                // checkpointer ([`Database::checkpoint`]), not by `journal_size_limit`, which
                // truncated it while busy (3% of `/start` throughput, docs/benchmarks.md).
                // Checkpoints are the background checkpointer's ([`Database::checkpoint`]): a
                // writer checkpoints at commit only when the WAL passes 32 MiB,
                // when the checkpointer has fallen behind or is not running. Temporary files
                // (statement journals: a packed insert calls SQL functions, which may fail) in memory:
                // on disk each was created and deleted per transaction.
                conn.batch_execute(&format!(
                    "PRAGMA busy_timeout = 5000; PRAGMA foreign_keys = ON; PRAGMA synchronous = {}; \
                     PRAGMA wal_autocheckpoint = {WRITER_CHECKPOINT_PAGES}; PRAGMA temp_store = MEMORY;",
                    self.synchronous.pragma()
                ))
                .map_err(|e| diesel::ConnectionError::BadConnection(e.to_string()))?;
                Ok(AnyConnection::Sqlite(conn))
            }
        }
    }
}

/// An r2d2 manager that dispatches on the URL scheme itself, so a PostgreSQL connection error
/// reaches the operator as it is (diesel's generated `establish` would hide it).
struct Manager(DatabaseUrl);

impl r2d2::ManageConnection for Manager {
    type Connection = AnyConnection;
    type Error = diesel::r2d2::Error;

    fn connect(&self) -> Result<AnyConnection, Self::Error> {
        self.0
            .establish()
            .map_err(diesel::r2d2::Error::ConnectionError)
    }

    fn is_valid(&self, conn: &mut AnyConnection) -> Result<(), Self::Error> {
        conn.ping().map_err(diesel::r2d2::Error::QueryError)
    }

    fn has_broken(&self, conn: &mut AnyConnection) -> bool {
        std::thread::panicking() || conn.is_broken()
    }
}

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
    /// slept through the moments the lock was free. Measured in docs/benchmarks.md.
    writers: Option<Arc<tokio::sync::Mutex<()>>>,
    /// Writes refused for lack of space, and those that succeed (contract §18).
    storage: Arc<domain::health::Storage>,
    /// SQLite: the WAL's frames at the last checkpoint, to tell when it is at rest.
    wal_frames: Arc<std::sync::atomic::AtomicI32>,
    /// SQLite's `synchronous` for every connection.
    synchronous: Synchronous,
}

impl Database {
    /// Connects, applies pending migrations, and builds the pool. Blocking: call it before the
    /// HTTP server starts, or from `spawn_blocking`.
    pub fn connect(url: &str, pool_size: u32) -> Result<Self, DatabaseError> {
        Self::open(DatabaseUrl::parse(url)?, pool_size)
    }

    /// [`Database::connect`] with a parsed URL and its settings.
    pub fn open(url: DatabaseUrl, pool_size: u32) -> Result<Self, DatabaseError> {
        let (backend, synchronous) = (url.backend(), url.synchronous);
        let mut first = url
            .establish()
            .map_err(|e| DatabaseError::Connect(e.to_string()))?;
        migrate(&mut first)?;
        drop(first);
        let pool = r2d2::Pool::builder()
            .max_size(pool_size.max(1))
            .connection_timeout(Duration::from_secs(5))
            // Ping on checkout: after a database restart, dead connections are replaced
            // instead of failing requests.
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
        })
    }

    pub fn backend(&self) -> Backend {
        self.backend
    }

    /// The storage state this database reports to (refused and successful writes).
    pub fn storage(&self) -> Arc<domain::health::Storage> {
        self.storage.clone()
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
        let outcome = self.run_unreported(work).await;
        self.reported(outcome, false)
    }

    async fn run_unreported<T, F>(&self, work: F) -> Result<T, StorageError>
    where
        T: Send + 'static,
        F: FnOnce(&mut AnyConnection) -> Result<T, Failure> + Send + 'static,
    {
        let pool = self.pool.clone();
        let span = tracing::Span::current();
        tokio::task::spawn_blocking(move || {
            let _entered = span.enter();
            let mut conn = pool
                .get()
                .map_err(|e| StorageError::Unavailable(e.to_string()))?;
            work(&mut conn).map_err(StorageError::from)
        })
        .await
        .map_err(|e| StorageError::Internal(format!("database task failed: {e}")))?
    }

    /// Like [`Database::run`], inside one write transaction (see [`write_transaction`]).
    pub(crate) async fn transaction<T, F>(&self, work: F) -> Result<T, StorageError>
    where
        T: Send + 'static,
        F: FnOnce(&mut AnyConnection) -> Result<T, Failure> + Send + 'static,
    {
        let _turn = match &self.writers {
            Some(writers) => Some(writers.lock().await),
            None => None,
        };
        let outcome = self
            .run_unreported(move |conn| write_transaction(conn, work))
            .await;
        self.reported(outcome, true)
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
        let _turn = match &self.writers {
            Some(writers) => Some(writers.lock().await),
            None => None,
        };
        let relax = self.synchronous == Synchronous::Full;
        let outcome = self
            .run_unreported(move |conn| match conn {
                AnyConnection::Sqlite(c) if relax => {
                    c.batch_execute("PRAGMA synchronous = NORMAL")?;
                    let outcome = write_transaction(conn, work);
                    // Setting a pragma outside a transaction fails only on a broken
                    // connection, which the pool discards.
                    let restored = match conn {
                        AnyConnection::Sqlite(c) => c.batch_execute("PRAGMA synchronous = FULL"),
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
            })
            .await;
        self.reported(outcome, true)
    }

    /// Like [`Database::transaction`], on the calling thread, which must be a thread of its own
    /// (not one of an async runtime): it blocks while waiting for its turn and the connection.
    pub(crate) fn transaction_blocking<T, F>(&self, work: F) -> Result<T, StorageError>
    where
        F: FnOnce(&mut AnyConnection) -> Result<T, Failure>,
    {
        let _turn = self.writers.as_ref().map(|writers| writers.blocking_lock());
        let mut conn = self
            .pool
            .get()
            .map_err(|e| StorageError::Unavailable(e.to_string()))?;
        let outcome = write_transaction(&mut conn, work).map_err(StorageError::from);
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
    pub(crate) async fn migrations_current(&self) -> Result<bool, StorageError> {
        self.run(|conn| {
            let pending = match conn {
                AnyConnection::Postgresql(c) => c.has_pending_migration(POSTGRES_MIGRATIONS),
                AnyConnection::Sqlite(c) => c.has_pending_migration(SQLITE_MIGRATIONS),
            };
            pending
                .map(|p| !p)
                .map_err(|e| Failure::Domain(StorageError::Internal(e.to_string())))
        })
        .await
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
                let _ = Manager::rollback_transaction(conn);
                Err(commit.into())
            }
        },
        Err(failure) => {
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

pub(crate) fn migrate(conn: &mut AnyConnection) -> Result<(), DatabaseError> {
    let failed = |e: &dyn std::fmt::Display| DatabaseError::Migrate(e.to_string());
    match conn {
        AnyConnection::Postgresql(c) => {
            diesel::sql_query(format!("SELECT pg_advisory_lock({MIGRATION_LOCK_KEY})"))
                .execute(c)
                .map_err(|e| failed(&e))?;
            let result = c.run_pending_migrations(POSTGRES_MIGRATIONS).map(|_| ());
            let unlocked =
                diesel::sql_query(format!("SELECT pg_advisory_unlock({MIGRATION_LOCK_KEY})"))
                    .execute(c);
            result.map_err(|e| failed(&e))?;
            unlocked.map_err(|e| failed(&e))?;
        }
        AnyConnection::Sqlite(c) => {
            // The page size first: it only takes effect before the file's first page is
            // written, and WAL mode writes it.
            c.batch_execute(&format!(
                "PRAGMA page_size = {SQLITE_PAGE_SIZE}; PRAGMA journal_mode = WAL;"
            ))
            .map_err(|e| failed(&e))?;
            c.run_pending_migrations(SQLITE_MIGRATIONS)
                .map_err(|e| failed(&e))?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_choose_the_backend_by_scheme() {
        let sqlite = DatabaseUrl::parse("sqlite://./data/workbench.db").expect("sqlite");
        assert_eq!(sqlite.backend(), Backend::Sqlite);
        assert_eq!(
            sqlite.sqlite_file(),
            Some(PathBuf::from("./data/workbench.db"))
        );
        for pg in ["postgres://u:p@localhost/db", "postgresql://localhost/db"] {
            let url = DatabaseUrl::parse(pg).expect("postgres");
            assert_eq!(url.backend(), Backend::Postgres);
            assert_eq!(url.sqlite_file(), None);
        }
        for bad in ["mysql://x", "sqlite://", "workbench.db", ""] {
            assert!(
                matches!(DatabaseUrl::parse(bad), Err(DatabaseError::UnsupportedUrl)),
                "{bad}"
            );
        }
    }

    #[test]
    fn a_new_sqlite_database_gets_the_page_size_and_wal() {
        let db = crate::testing::TestDatabase::sqlite();
        Database::connect(db.url(), 1).expect("connect");
        let pragma = |name: &str| {
            crate::testing::raw_texts(
                db.url(),
                &format!("SELECT CAST({name} AS TEXT) AS v FROM pragma_{name}"),
            )
        };
        assert_eq!(pragma("page_size"), [SQLITE_PAGE_SIZE.to_string()]);
        assert_eq!(pragma("journal_mode"), ["wal"]);
    }

    #[test]
    fn every_pooled_sqlite_connection_is_synchronous_full_unless_normal_is_asked_for() {
        let synchronous = |db: &Database| -> Vec<i32> {
            #[derive(diesel::QueryableByName)]
            struct Value {
                #[diesel(sql_type = diesel::sql_types::Integer)]
                synchronous: i32,
            }
            // Every connection of the pool at once: each was set up on its own.
            let mut held = Vec::new();
            let mut values = Vec::new();
            for _ in 0..3 {
                let mut conn = db.pool.get().expect("connection");
                let v: Value = diesel::sql_query("PRAGMA synchronous")
                    .get_result(&mut *conn)
                    .expect("pragma");
                values.push(v.synchronous);
                held.push(conn);
            }
            values
        };
        let test = crate::testing::TestDatabase::sqlite();
        let url = DatabaseUrl::parse(test.url()).expect("url");
        // SQLite: FULL is 2, NORMAL is 1.
        let full = Database::open(url.clone(), 3).expect("connect");
        assert_eq!(synchronous(&full), [2, 2, 2]);
        // A claim's commit is relaxed for itself only: its connection is FULL again after it,
        // whether it committed or failed.
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("runtime");
        for fails in [false, true] {
            let during = rt
                .block_on(full.claim_transaction(move |conn| {
                    #[derive(diesel::QueryableByName)]
                    struct Value {
                        #[diesel(sql_type = diesel::sql_types::Integer)]
                        synchronous: i32,
                    }
                    let v: Value = diesel::sql_query("PRAGMA synchronous").get_result(conn)?;
                    if fails {
                        return Err(Failure::Domain(StorageError::Internal("refused".into())));
                    }
                    Ok(v.synchronous)
                }))
                .ok();
            assert_eq!(during, (!fails).then_some(1));
            assert_eq!(synchronous(&full), [2, 2, 2]);
        }
        let normal = Database::open(url.with_synchronous(Synchronous::Normal), 3).expect("connect");
        assert_eq!(synchronous(&normal), [1, 1, 1]);
        assert_eq!(Synchronous::parse(" NORMAL "), Some(Synchronous::Normal));
        assert_eq!(Synchronous::parse("off"), None);
    }

    #[tokio::test]
    async fn a_write_past_the_databases_room_is_full_and_nothing_of_it_is_stored() {
        let test = crate::testing::TestDatabase::sqlite();
        let db = Database::connect(test.url(), 1).expect("connect");
        let count = |db: &Database| {
            let db = db.clone();
            async move {
                db.run(|conn| {
                    #[derive(diesel::QueryableByName)]
                    struct N {
                        #[diesel(sql_type = diesel::sql_types::BigInt)]
                        n: i64,
                    }
                    let n: N =
                        diesel::sql_query("SELECT count(*) AS n FROM filler").get_result(conn)?;
                    Ok(n.n)
                })
                .await
                .expect("count")
            }
        };
        db.transaction(|conn| {
            conn.batch_execute("CREATE TABLE filler (b BLOB NOT NULL)")?;
            Ok(())
        })
        .await
        .expect("table");
        // The database may not grow past its pages now (as a full disk would refuse them).
        db.run(|conn| {
            #[derive(diesel::QueryableByName)]
            struct P {
                #[diesel(sql_type = diesel::sql_types::BigInt)]
                page_count: i64,
            }
            let p: P = diesel::sql_query("PRAGMA page_count").get_result(conn)?;
            conn.batch_execute(&format!("PRAGMA max_page_count = {}", p.page_count + 2))?;
            Ok(())
        })
        .await
        .expect("limit");
        let storage = db.storage();
        let refused = db
            .transaction(|conn| {
                // One row fits; the second transaction's rows do not, all or nothing.
                for _ in 0..50 {
                    conn.batch_execute("INSERT INTO filler VALUES (zeroblob(4000))")?;
                }
                Ok(())
            })
            .await;
        assert!(matches!(refused, Err(StorageError::Full(_))), "{refused:?}");
        assert!(storage.full(), "reported");
        assert_eq!(storage.full_errors(), 1);
        assert_eq!(count(&db).await, 0, "nothing half-written");
        db.transaction(|conn| {
            conn.batch_execute("DELETE FROM filler")?;
            Ok(())
        })
        .await
        .expect("a write that fits");
        assert!(!storage.full(), "a write that succeeds clears it");
    }

    #[test]
    fn a_bad_postgres_url_reports_the_real_error() {
        let err = Database::connect("postgres://nobody@127.0.0.1:1/none", 1)
            .err()
            .expect("fails");
        let DatabaseError::Connect(message) = err else {
            panic!("{err:?}")
        };
        assert!(message.to_lowercase().contains("connect"), "{message}");
    }
}
