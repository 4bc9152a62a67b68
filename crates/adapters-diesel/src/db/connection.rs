//! One connection to either backend, and which backend it is.

use diesel::pg::PgConnection;
use diesel::sqlite::SqliteConnection;

/// WAL pages after which a committing SQLite writer checkpoints by itself, 32 MiB (SQLite's
/// default is 1,000 pages: with 4 KiB pages every other engine batch paid for a checkpoint).
pub(crate) const WRITER_CHECKPOINT_PAGES: u32 = (32 << 20) / SQLITE_PAGE_SIZE;

/// Page size of a new SQLite database (SQLite's default is 4,096). Fixed when the file is
/// created: an existing database keeps its own (docs/operations.md says how to convert one).
/// Measured (see the git history of docs/benchmarks.md): wider pages split and link fewer
/// pages per card written.
pub(crate) const SQLITE_PAGE_SIZE: u32 = 8_192;

/// One connection to either backend. `Postgresql` comes first: diesel's generated
/// `establish` tries variants in order and SQLite accepts any string as a path. We never use
/// that path (see `url::Manager`), but the order keeps it harmless.
#[derive(diesel::MultiConnection)]
pub enum AnyConnection {
    /// To PostgreSQL.
    Postgresql(PgConnection),
    /// To an SQLite file.
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

/// Which database a URL or a connection is of.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    /// SQLite, embedded.
    Sqlite,
    /// PostgreSQL.
    Postgres,
}

/// Why the database could not be opened for the service.
#[derive(Debug, thiserror::Error)]
pub enum DatabaseError {
    /// A URL that is neither `sqlite://PATH` nor `postgres://...`.
    #[error("unsupported database URL scheme (use sqlite://PATH or postgres://...)")]
    UnsupportedUrl,
    /// The first connection failed.
    #[error("cannot connect to the database: {0}")]
    Connect(String),
    /// A migration failed.
    #[error("cannot apply migrations: {0}")]
    Migrate(String),
    /// The database was migrated by a newer version of the service (contract §17).
    #[error(
        "the database's schema ({database}) is newer than this binary knows ({binary}): run \
        the newer version, or restore a backup taken before it migrated"
    )]
    NewerSchema {
        /// The newest migration the database has.
        database: String,
        /// The newest this binary has.
        binary: String,
    },
    /// Migrations were not to be applied (`--no-migrate`), and some are pending.
    #[error("the database lacks migrations {}: run `workbench migrate` first", .0.join(", "))]
    PendingMigrations(Vec<String>),
}
