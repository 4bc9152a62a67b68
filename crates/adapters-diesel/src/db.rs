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

/// A parsed database URL. Never printed: it may hold a password.
#[derive(Clone)]
pub struct DatabaseUrl {
    backend: Backend,
    /// For SQLite the file path (or `file:` URI); for PostgreSQL the URL as given.
    target: String,
}

impl DatabaseUrl {
    pub fn parse(url: &str) -> Result<Self, DatabaseError> {
        if url.starts_with("postgres://") || url.starts_with("postgresql://") {
            Ok(Self {
                backend: Backend::Postgres,
                target: url.to_owned(),
            })
        } else if let Some(path) = url.strip_prefix("sqlite://") {
            if path.is_empty() {
                return Err(DatabaseError::UnsupportedUrl);
            }
            Ok(Self {
                backend: Backend::Sqlite,
                target: path.to_owned(),
            })
        } else {
            Err(DatabaseError::UnsupportedUrl)
        }
    }

    pub fn backend(&self) -> Backend {
        self.backend
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
                // WAL is persistent (set once at pool creation); synchronous=NORMAL is safe in WAL.
                // Checkpoints are the background checkpointer's ([`Database::checkpoint`]): a
                // writer checkpoints at commit only when the WAL passes 32 MiB,
                // when the checkpointer has fallen behind or is not running. Temporary files
                // (statement journals: a packed insert calls SQL functions, which may fail) in memory:
                // on disk each was created and deleted per transaction.
                conn.batch_execute(&format!(
                    "PRAGMA busy_timeout = 5000; PRAGMA foreign_keys = ON; PRAGMA synchronous = NORMAL; \
                     PRAGMA wal_autocheckpoint = {WRITER_CHECKPOINT_PAGES}; PRAGMA temp_store = MEMORY;"
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
}

impl Database {
    /// Connects, applies pending migrations, and builds the pool. Blocking: call it before the
    /// HTTP server starts, or from `spawn_blocking`.
    pub fn connect(url: &str, pool_size: u32) -> Result<Self, DatabaseError> {
        let url = DatabaseUrl::parse(url)?;
        let backend = url.backend();
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
        })
    }

    pub fn backend(&self) -> Backend {
        self.backend
    }

    /// Runs `work` with a pooled connection on tokio's blocking pool.
    pub(crate) async fn run<T, F>(&self, work: F) -> Result<T, StorageError>
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
        self.run(move |conn| write_transaction(conn, work)).await
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
        write_transaction(&mut conn, work).map_err(StorageError::from)
    }

    /// SQLite: copies what the WAL holds into the database file (a passive checkpoint: it never
    /// waits for or blocks writers or readers), off the writers' path; call it periodically.
    /// Returns the WAL pages left to copy. PostgreSQL checkpoints by itself: a no-op.
    pub async fn checkpoint(&self) -> Result<u64, StorageError> {
        if self.backend != Backend::Sqlite {
            return Ok(0);
        }
        self.run(|conn| {
            #[derive(diesel::QueryableByName)]
            struct Checkpoint {
                #[diesel(sql_type = diesel::sql_types::Integer)]
                log: i32,
                #[diesel(sql_type = diesel::sql_types::Integer)]
                checkpointed: i32,
            }
            let done: Checkpoint =
                diesel::sql_query("PRAGMA wal_checkpoint(PASSIVE)").get_result(conn)?;
            Ok(u64::try_from(done.log - done.checkpointed).unwrap_or(0))
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
            Manager::rollback_transaction(conn)?;
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
