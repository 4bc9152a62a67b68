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

impl AnyConnection {
    /// Which backend this connection is to.
    pub(crate) fn backend(&self) -> Backend {
        match self {
            AnyConnection::Sqlite(_) => Backend::Sqlite,
            AnyConnection::Postgresql(_) => Backend::Postgres,
        }
    }
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

/// The longest a readiness check waits for the database.
const READY_WITHIN: Duration = Duration::from_secs(5);

/// Bounded waits on the database (contract §20).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Waits {
    /// One request's deadline for the database (`WORKBENCH_DATABASE_REQUEST_TIMEOUT`): the
    /// wait for a connection, its health check, the queries and a batched commit's reply. A
    /// background step's call has one of its own.
    pub request: Duration,
    /// PostgreSQL: how long the network may be silent before a connection is given up
    /// (`WORKBENCH_DATABASE_TCP_TIMEOUT`): `connect_timeout`, TCP keepalives and
    /// `tcp_user_timeout`, on both ends of the connection.
    pub tcp: Duration,
}

impl Default for Waits {
    fn default() -> Self {
        Self {
            request: Duration::from_secs(5),
            tcp: Duration::from_secs(10),
        }
    }
}

impl Waits {
    /// libpq connection parameters bounding the network, appended to a URL that does not set
    /// them itself.
    fn libpq(&self) -> Vec<(&'static str, String)> {
        let (tcp, idle, interval) = self.keepalives();
        vec![
            ("connect_timeout", tcp.to_string()),
            ("keepalives", "1".into()),
            ("keepalives_idle", idle.to_string()),
            ("keepalives_interval", interval.to_string()),
            ("keepalives_count", "3".into()),
            ("tcp_user_timeout", (tcp * 1000).to_string()),
        ]
    }

    /// The network bound in seconds, and the keepalives' idle time and interval that give up
    /// within it (three probes).
    fn keepalives(&self) -> (u64, u64, u64) {
        let tcp = self.tcp.as_secs();
        (tcp, (tcp / 2).max(1), (tcp / 6).max(1))
    }

    /// Within the bounds every use of them is safe with (an instant plus the request
    /// deadline, milliseconds of the TCP bound in a server setting): the request deadline at
    /// most an hour, the TCP bound from 2 s to an hour.
    fn bounded(self) -> Self {
        const HOUR: Duration = Duration::from_secs(3600);
        Self {
            request: self.request.clamp(Duration::from_millis(1), HOUR),
            tcp: self.tcp.clamp(Duration::from_secs(2), HOUR),
        }
    }

    /// The server's end of the same bounds, and an abandoned transaction's (a client that
    /// vanished mid-transaction): so that no backend outlives its client for long.
    fn server_settings(&self) -> String {
        let (tcp, idle, interval) = self.keepalives();
        let abandoned = (self.request.as_millis() * 4).max(30_000);
        format!(
            "SET tcp_keepalives_idle = {idle}; SET tcp_keepalives_interval = {interval}; \
             SET tcp_keepalives_count = 3; SET tcp_user_timeout = {}; \
             SET idle_in_transaction_session_timeout = {abandoned}",
            tcp * 1000,
        )
    }
}

/// The URL with `params` appended, each unless the URL sets it already. The query is what
/// follows the first `?` after the user information (a password may hold a `?` of its own).
fn with_params(url: &str, params: &[(&'static str, String)]) -> String {
    let authority = url.find("://").map_or(0, |i| i + 3);
    let after_user = url[authority..]
        .rfind('@')
        .map_or(authority, |i| authority + i + 1);
    let mut url = url.to_owned();
    for (name, value) in params {
        let query = url[after_user..].find('?').map(|i| after_user + i + 1);
        let set = query.is_some_and(|q| {
            url[q..]
                .split('&')
                .any(|p| p.split('=').next() == Some(*name))
        });
        if set {
            continue;
        }
        if query.is_none() {
            url.push('?');
        } else if !(url.ends_with('?') || url.ends_with('&')) {
            url.push('&');
        }
        url.push_str(&format!("{name}={value}"));
    }
    url
}

#[cfg(test)]
mod params_tests {
    use super::{with_params, Waits};
    use std::time::Duration;

    #[test]
    fn waits_from_outside_are_bounded_before_any_arithmetic() {
        let url = super::DatabaseUrl::parse("postgres://h/db")
            .expect("url")
            .with_waits(Waits {
                request: Duration::MAX,
                tcp: Duration::ZERO,
            });
        assert_eq!(url.waits.request, Duration::from_secs(3600));
        assert_eq!(url.waits.tcp, Duration::from_secs(2));
        assert!(url
            .waits
            .server_settings()
            .contains("tcp_user_timeout = 2000"));
        let huge = Waits {
            request: Duration::from_secs(1),
            tcp: Duration::MAX,
        }
        .bounded();
        assert!(huge
            .libpq()
            .contains(&("tcp_user_timeout", "3600000".to_owned())));
    }

    #[test]
    fn parameters_are_appended_to_the_query_only_when_the_url_does_not_set_them() {
        let params = [
            ("connect_timeout", "10".to_owned()),
            ("keepalives", "1".to_owned()),
        ];
        let cases = [
            (
                "postgres://h/db",
                "postgres://h/db?connect_timeout=10&keepalives=1",
            ),
            (
                "postgres://h/db?",
                "postgres://h/db?connect_timeout=10&keepalives=1",
            ),
            (
                "postgres://h/db?sslmode=require&",
                "postgres://h/db?sslmode=require&connect_timeout=10&keepalives=1",
            ),
            (
                "postgres://h/db?connect_timeout=3",
                "postgres://h/db?connect_timeout=3&keepalives=1",
            ),
            (
                "postgres://u:p?ss@h/db",
                "postgres://u:p?ss@h/db?connect_timeout=10&keepalives=1",
            ),
            (
                "postgres://u:p?connect_timeout=1@h/db",
                "postgres://u:p?connect_timeout=1@h/db?connect_timeout=10&keepalives=1",
            ),
        ];
        for (url, expected) in cases {
            assert_eq!(with_params(url, &params), expected, "{url}");
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
    waits: Waits,
}

impl DatabaseUrl {
    pub fn parse(url: &str) -> Result<Self, DatabaseError> {
        if url.starts_with("postgres://") || url.starts_with("postgresql://") {
            Ok(Self {
                backend: Backend::Postgres,
                target: url.to_owned(),
                synchronous: Synchronous::Full,
                waits: Waits::default(),
            })
        } else if let Some(path) = url.strip_prefix("sqlite://") {
            if path.is_empty() {
                return Err(DatabaseError::UnsupportedUrl);
            }
            Ok(Self {
                backend: Backend::Sqlite,
                target: path.to_owned(),
                synchronous: Synchronous::Full,
                waits: Waits::default(),
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

    /// The bounds of every wait on the database (contract §20).
    pub fn with_waits(mut self, waits: Waits) -> Self {
        self.waits = waits.bounded();
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
                // The network bounded on this end (libpq) and on the server's (contract §20).
                let mut conn =
                    PgConnection::establish(&with_params(&self.target, &self.waits.libpq()))?;
                conn.batch_execute(&self.waits.server_settings())
                    .map_err(|e| diesel::ConnectionError::BadConnection(e.to_string()))?;
                Ok(AnyConnection::Postgresql(conn))
            }
            Backend::Sqlite => {
                // Contract §16: a database this creates is readable by its owner only (SQLite
                // gives its `-wal` and `-shm` files the database file's mode).
                if let Some(file) = self.sqlite_file().filter(|f| !f.exists()) {
                    use std::os::unix::fs::OpenOptionsExt;
                    // Another process may create it meanwhile: then it is theirs, as it is.
                    let _ = std::fs::OpenOptions::new()
                        .write(true)
                        .create_new(true)
                        .mode(0o600)
                        .open(&file);
                }
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
    type Connection = Pooled;
    type Error = diesel::r2d2::Error;

    fn connect(&self) -> Result<Pooled, Self::Error> {
        let mut conn = self
            .0
            .establish()
            .map_err(diesel::r2d2::Error::ConnectionError)?;
        let backend = match &mut conn {
            AnyConnection::Postgresql(c) => {
                Some(ServerProcess::of(c).map_err(diesel::r2d2::Error::QueryError)?)
            }
            AnyConnection::Sqlite(_) => None,
        };
        Ok(Pooled {
            conn,
            discard: false,
            backend,
        })
    }

    fn is_valid(&self, pooled: &mut Pooled) -> Result<(), Self::Error> {
        pooled.conn.ping().map_err(diesel::r2d2::Error::QueryError)
    }

    fn has_broken(&self, pooled: &mut Pooled) -> bool {
        pooled.discard || std::thread::panicking() || pooled.conn.is_broken()
    }
}

/// A pooled connection, discarded instead of returned when a call on it outlived its deadline
/// (contract §20): what it was doing is unknown, and the server may still be hung.
pub(crate) struct Pooled {
    conn: AnyConnection,
    discard: bool,
    /// PostgreSQL: the server process serving it, to cancel what it runs once given up.
    backend: Option<ServerProcess>,
}

/// A PostgreSQL backend: its pid and when it started, which together name it (a pid alone may
/// be reused by a later backend).
#[derive(Debug, Clone, Copy, PartialEq)]
struct ServerProcess {
    pid: i32,
    started: chrono::NaiveDateTime,
}

impl ServerProcess {
    fn of(conn: &mut PgConnection) -> Result<Self, diesel::result::Error> {
        #[derive(diesel::QueryableByName)]
        struct Row {
            #[diesel(sql_type = diesel::sql_types::Integer)]
            pid: i32,
            #[diesel(sql_type = diesel::sql_types::Timestamp)]
            started: chrono::NaiveDateTime,
        }
        let row: Row = diesel::sql_query(
            "SELECT pid, (backend_start AT TIME ZONE 'UTC') AS started \
             FROM pg_stat_activity WHERE pid = pg_backend_pid()",
        )
        .get_result(conn)?;
        Ok(Self {
            pid: row.pid,
            started: row.started,
        })
    }
}

/// Where a database call stands, shared by its thread and its waiter.
#[derive(Debug, Default)]
enum CallState {
    /// Waiting for a thread or a connection.
    #[default]
    Waiting,
    /// Its work runs on a connection to this backend (PostgreSQL).
    Running(Option<ServerProcess>),
    /// Its work ended; its connection went back to the pool.
    Ended,
    /// Its waiter gave up: what it runs is cancelled, its connection discarded.
    Abandoned,
}

impl CallState {
    fn is_abandoned(&self) -> bool {
        matches!(self, CallState::Abandoned)
    }
}

/// The lock, even if a thread panicked while holding it (the state stays meaningful).
fn lock<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Cancels, on the server, what calls given up were running (contract §20), one at a time on
/// a thread and a connection of its own, so that no backend goes on working for a client that
/// is gone. Requests beyond [`CANCELS_WAITING`] are dropped: while the server hangs, the
/// cancels wait with everything else, and the connections they name are discarded anyway.
#[derive(Clone)]
struct Canceller(std::sync::mpsc::SyncSender<ServerProcess>);

const CANCELS_WAITING: usize = 64;

impl Canceller {
    fn start(url: DatabaseUrl) -> std::io::Result<Self> {
        let (sender, asked) = std::sync::mpsc::sync_channel::<ServerProcess>(CANCELS_WAITING);
        std::thread::Builder::new()
            .name("db-canceller".into())
            .spawn(move || {
                let mut conn: Option<PgConnection> = None;
                for process in asked {
                    if conn.is_none() {
                        conn = match url.establish() {
                            Ok(AnyConnection::Postgresql(c)) => Some(c),
                            _ => None,
                        };
                    }
                    let Some(c) = conn.as_mut() else { continue };
                    let cancelled = diesel::sql_query(
                        "SELECT pg_cancel_backend(pid) FROM pg_stat_activity \
                         WHERE pid = $1 AND (backend_start AT TIME ZONE 'UTC') = $2",
                    )
                    .bind::<diesel::sql_types::Integer, _>(process.pid)
                    .bind::<diesel::sql_types::Timestamp, _>(process.started)
                    .execute(c);
                    if let Err(e) = cancelled {
                        tracing::debug!(error = %e, pid = process.pid, "cancelling a given-up query failed");
                        conn = None;
                    }
                }
            })?;
        Ok(Self(sender))
    }

    fn cancel(&self, process: ServerProcess) {
        let _ = self.0.try_send(process);
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
    /// slept through the moments the lock was free. Measured in docs/benchmarks.md.
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
    /// PostgreSQL: cancels on the server what calls given up were running.
    canceller: Option<Canceller>,
}

impl Database {
    /// Connects, applies pending migrations, and builds the pool. Blocking: call it before the
    /// HTTP server starts, or from `spawn_blocking`.
    pub fn connect(url: &str, pool_size: u32) -> Result<Self, DatabaseError> {
        Self::open(DatabaseUrl::parse(url)?, pool_size)
    }

    /// [`Database::connect`] with a parsed URL and its settings.
    pub fn open(url: DatabaseUrl, pool_size: u32) -> Result<Self, DatabaseError> {
        let (backend, synchronous, waits) = (url.backend(), url.synchronous, url.waits);
        let mut first = url
            .establish()
            .map_err(|e| DatabaseError::Connect(e.to_string()))?;
        migrate(&mut first)?;
        drop(first);
        let canceller = match backend {
            Backend::Postgres => Some(
                Canceller::start(url.clone()).map_err(|e| DatabaseError::Connect(e.to_string()))?,
            ),
            Backend::Sqlite => None,
        };
        let pool = r2d2::Pool::builder()
            .max_size(pool_size.max(1))
            .connection_timeout(waits.request)
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
            waits,
            gate: Arc::new(tokio::sync::Semaphore::new(pool_size.max(1) as usize)),
            canceller,
        })
    }

    /// When a call starting now must be answered (contract §20): one deadline for the wait
    /// for a connection, its health check, the queries and a batched commit's reply. (Per
    /// call, not per request: a CSV upload streams for as long as its body takes, and each of
    /// its calls is bounded. While the database hangs, a request's first call to wait ends it.)
    pub(crate) fn deadline(&self) -> tokio::time::Instant {
        tokio::time::Instant::now() + self.waits.request
    }

    pub(crate) fn timed_out(&self) -> StorageError {
        StorageError::Unavailable(format!(
            "the database did not answer within {} ms",
            self.waits.request.as_millis()
        ))
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
        let outcome = self.run_unreported(self.deadline(), work).await;
        self.reported(outcome, false)
    }

    /// Runs `work` on a thread of the blocking pool, answering by the call's deadline
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
        let Ok(Ok(turn)) =
            tokio::time::timeout_at(deadline, self.gate.clone().acquire_owned()).await
        else {
            return Err(self.timed_out());
        };
        let pool = self.pool.clone();
        let span = tracing::Span::current();
        // Where the call stands, decided under one lock by the thread and by the waiter, so
        // that a cancel only ever reaches a statement of this call, and a connection goes back
        // to the pool only when its work ended before the call was given up.
        let state: Arc<std::sync::Mutex<CallState>> = Arc::default();
        let shared = state.clone();
        let call = tokio::task::spawn_blocking(move || {
            let _turn = turn;
            let _entered = span.enter();
            let gave_up = || StorageError::Unavailable("gave up before starting".into());
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            if left.is_zero() || lock(&shared).is_abandoned() {
                return Err(gave_up());
            }
            let mut pooled = pool
                .get_timeout(left)
                .map_err(|e| StorageError::Unavailable(e.to_string()))?;
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
        });
        match tokio::time::timeout_at(deadline, call).await {
            Ok(joined) => {
                joined.map_err(|e| StorageError::Internal(format!("database task failed: {e}")))?
            }
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
        let outcome = self
            .run_unreported(deadline, move |conn| write_transaction(conn, work))
            .await;
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
        let outcome = self
            .run_unreported(deadline, move |conn| match conn {
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
    /// Work that may ask to be run again ([`Failure::Retry`]): its transaction is then rolled
    /// back and `None` returned.
    pub(crate) fn transaction_blocking_or_retry<T, F>(
        &self,
        work: F,
    ) -> Result<Option<T>, StorageError>
    where
        F: FnOnce(&mut AnyConnection) -> Result<T, Failure>,
    {
        let _turn = self.writers.as_ref().map(|writers| writers.blocking_lock());
        let started = std::time::Instant::now();
        let mut pooled = self
            .pool
            .get_timeout(self.waits.request)
            .map_err(|e| StorageError::Unavailable(e.to_string()))?;
        let outcome = match write_transaction(&mut pooled.conn, work) {
            Ok(value) => Ok(Some(value)),
            Err(Failure::Retry) => Ok(None),
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
    fn a_new_sqlite_database_and_its_wal_are_readable_by_their_owner_only() {
        use std::os::unix::fs::PermissionsExt;
        let test = crate::testing::TestDatabase::sqlite();
        let db = Database::connect(test.url(), 1).expect("connect");
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        rt.block_on(db.run(|conn| {
            conn.batch_execute("CREATE TABLE IF NOT EXISTS touched (x INTEGER)")?;
            Ok(())
        }))
        .expect("write");
        let file = DatabaseUrl::parse(test.url())
            .expect("url")
            .sqlite_file()
            .expect("file");
        for suffix in ["", "-wal", "-shm"] {
            let mut path = file.clone().into_os_string();
            path.push(suffix);
            let mode = std::fs::metadata(&path)
                .expect("exists")
                .permissions()
                .mode()
                & 0o777;
            assert_eq!(mode, 0o600, "{}", std::path::Path::new(&path).display());
        }
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
                let mut pooled = db.pool.get().expect("connection");
                let v: Value = diesel::sql_query("PRAGMA synchronous")
                    .get_result(&mut pooled.conn)
                    .expect("pragma");
                values.push(v.synchronous);
                held.push(pooled);
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
            .enable_all()
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
