//! The schema's versions: which migrations a database has, against those this binary carries,
//! and applying them (contract §17). A database with a migration newer than any this binary
//! knows was migrated by a newer version: it is refused, never used.

use diesel::connection::SimpleConnection;
use diesel::migration::MigrationSource;
use diesel::{QueryableByName, RunQueryDsl};
use diesel_migrations::{embed_migrations, EmbeddedMigrations, MigrationHarness};

use diesel::sqlite::SqliteConnection;
use diesel::Connection;

use super::connection::{AnyConnection, DatabaseError, SQLITE_PAGE_SIZE};
use super::url::DatabaseUrl;

/// The SQLite schema's migrations, embedded in the binary.
pub const SQLITE_MIGRATIONS: EmbeddedMigrations = embed_migrations!("../../migrations/sqlite");
/// The PostgreSQL schema's migrations, embedded in the binary.
pub const POSTGRES_MIGRATIONS: EmbeddedMigrations = embed_migrations!("../../migrations/postgres");

/// Key of the PostgreSQL advisory lock held while migrations run, so that several processes
/// starting together on one database apply them once.
const MIGRATION_LOCK_KEY: i64 = 0x776f_726b_6265_6e63; // "workbenc"

/// A database's schema against the migrations this binary carries. Versions are the
/// migrations' timestamps (`20261125000018`), in ascending order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SchemaStatus {
    /// Versions this binary carries that the database has.
    pub applied: Vec<String>,
    /// Versions this binary carries that the database lacks.
    pub pending: Vec<String>,
    /// Versions the database has that this binary does not carry, newer than all it does:
    /// the database was migrated by a newer version.
    pub newer: Vec<String>,
    /// The newest version this binary carries.
    pub latest: String,
}

impl SchemaStatus {
    /// The database's version: its newest migration, or `None` for an empty database.
    pub fn current(&self) -> Option<&str> {
        self.newer
            .last()
            .or_else(|| self.applied.last())
            .map(String::as_str)
    }

    /// The refusal to use this database: a newer schema, or (when migrations may not be
    /// applied) pending ones.
    pub fn refusal(&self, may_migrate: bool) -> Option<DatabaseError> {
        if let Some(newest) = self.newer.last() {
            return Some(DatabaseError::NewerSchema {
                database: newest.clone(),
                binary: self.latest.clone(),
            });
        }
        (!may_migrate && !self.pending.is_empty())
            .then(|| DatabaseError::PendingMigrations(self.pending.clone()))
    }
}

fn failed(e: &dyn std::fmt::Display) -> DatabaseError {
    DatabaseError::Migrate(e.to_string())
}

/// The versions a migration source carries, ascending.
fn carried<DB: diesel::backend::Backend>(
    source: &impl MigrationSource<DB>,
) -> Result<Vec<String>, DatabaseError> {
    let mut versions: Vec<String> = source
        .migrations()
        .map_err(|e| failed(&e))?
        .iter()
        .map(|m| m.name().version().to_string())
        .collect();
    versions.sort();
    Ok(versions)
}

#[derive(QueryableByName)]
struct Version {
    #[diesel(sql_type = diesel::sql_types::Text)]
    version: String,
}

/// The versions the database records as applied, ascending; none when it has no record of
/// migrations at all. Reads only: the record's table is not created.
fn recorded(conn: &mut AnyConnection) -> Result<Vec<String>, DatabaseError> {
    #[derive(QueryableByName)]
    struct Exists {
        #[diesel(sql_type = diesel::sql_types::Bool)]
        present: bool,
    }
    let probe = match conn {
        AnyConnection::Postgresql(_) => {
            "SELECT to_regclass('__diesel_schema_migrations') IS NOT NULL AS present"
        }
        AnyConnection::Sqlite(_) => {
            "SELECT EXISTS (SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = \
                '__diesel_schema_migrations') AS present"
        }
    };
    let present = diesel::sql_query(probe)
        .get_result::<Exists>(conn)
        .map_err(|e| failed(&e))?
        .present;
    if !present {
        return Ok(Vec::new());
    }
    let mut versions: Vec<String> =
        diesel::sql_query("SELECT version FROM __diesel_schema_migrations ORDER BY version")
            .load::<Version>(conn)
            .map_err(|e| failed(&e))?
            .into_iter()
            .map(|v| v.version)
            .collect();
    versions.sort();
    Ok(versions)
}

/// The database's schema against this binary's migrations. Changes nothing.
pub(crate) fn status(conn: &mut AnyConnection) -> Result<SchemaStatus, DatabaseError> {
    let carried = match conn {
        AnyConnection::Postgresql(_) => carried::<diesel::pg::Pg>(&POSTGRES_MIGRATIONS)?,
        AnyConnection::Sqlite(_) => carried::<diesel::sqlite::Sqlite>(&SQLITE_MIGRATIONS)?,
    };
    let recorded = recorded(conn)?;
    let latest = carried.last().cloned().unwrap_or_default();
    Ok(SchemaStatus {
        applied: carried
            .iter()
            .filter(|v| recorded.contains(v))
            .cloned()
            .collect(),
        pending: carried
            .iter()
            .filter(|v| !recorded.contains(v))
            .cloned()
            .collect(),
        newer: recorded
            .into_iter()
            .filter(|v| !carried.contains(v) && *v > latest)
            .collect(),
        latest,
    })
}

/// Prepares a database for use: refuses a newer schema, then applies pending migrations, or
/// (`may_migrate` false) refuses when there are any. On PostgreSQL under an advisory lock, so
/// that processes starting together apply them once. Returns the versions applied.
pub(crate) fn prepare(
    conn: &mut AnyConnection,
    may_migrate: bool,
) -> Result<Vec<String>, DatabaseError> {
    match conn {
        AnyConnection::Postgresql(c) => {
            // A migration may rewrite a large table: no statement timeout for it (the lock
            // wait included: another process may be migrating).
            c.batch_execute("SET statement_timeout = 0")
                .map_err(|e| failed(&e))?;
            diesel::sql_query(format!("SELECT pg_advisory_lock({MIGRATION_LOCK_KEY})"))
                .execute(c)
                .map_err(|e| failed(&e))?;
        }
        AnyConnection::Sqlite(c) => {
            // The page size first: it only takes effect before the file's first page is
            // written, and WAL mode writes it.
            // Incremental auto-vacuum too: set before the first page, it holds from the start;
            // an older file is converted below, once.
            c.batch_execute(&format!(
                "PRAGMA page_size = {SQLITE_PAGE_SIZE}; PRAGMA auto_vacuum = INCREMENTAL; \
                 PRAGMA journal_mode = WAL;"
            ))
            .map_err(|e| failed(&e))?;
        }
    }
    let result = apply(conn, may_migrate);
    if let (AnyConnection::Sqlite(c), Ok(_), true) = (&mut *conn, &result, may_migrate) {
        incremental_vacuum(c)?;
    }
    if let AnyConnection::Postgresql(c) = conn {
        let unlocked =
            diesel::sql_query(format!("SELECT pg_advisory_unlock({MIGRATION_LOCK_KEY})"))
                .execute(c);
        let applied = result?;
        unlocked.map_err(|e| failed(&e))?;
        return Ok(applied);
    }
    result
}

/// Converts a SQLite file made before incremental auto-vacuum: the setting takes effect on an
/// existing file only through a `VACUUM`, which rewrites it whole (once; it needs as much free
/// disk as the file, and holds the database meanwhile). A new file has it from the start.
fn incremental_vacuum(c: &mut diesel::SqliteConnection) -> Result<(), DatabaseError> {
    #[derive(diesel::QueryableByName)]
    struct Mode {
        #[diesel(sql_type = diesel::sql_types::Integer)]
        auto_vacuum: i32,
    }
    /// SQLite's number for `INCREMENTAL`.
    const INCREMENTAL: i32 = 2;
    let mode: Mode = diesel::sql_query("PRAGMA auto_vacuum")
        .get_result(c)
        .map_err(|e| failed(&e))?;
    if mode.auto_vacuum == INCREMENTAL {
        return Ok(());
    }
    let began = std::time::Instant::now();
    c.batch_execute("PRAGMA auto_vacuum = INCREMENTAL; VACUUM;")
        .map_err(|e| failed(&e))?;
    tracing::info!(took = ?began.elapsed(),
        "the SQLite database now gives freed pages back (incremental auto-vacuum)");
    Ok(())
}

fn apply(conn: &mut AnyConnection, may_migrate: bool) -> Result<Vec<String>, DatabaseError> {
    let before = status(conn)?;
    if let Some(refusal) = before.refusal(may_migrate) {
        return Err(refusal);
    }
    if before.pending.is_empty() {
        return Ok(Vec::new());
    }
    let applied = match conn {
        AnyConnection::Postgresql(c) => c
            .run_pending_migrations(POSTGRES_MIGRATIONS)
            .map(|v| v.iter().map(ToString::to_string).collect()),
        AnyConnection::Sqlite(c) => c
            .run_pending_migrations(SQLITE_MIGRATIONS)
            .map(|v| v.iter().map(ToString::to_string).collect()),
    };
    let mut applied: Vec<String> = applied.map_err(|e| failed(&e))?;
    applied.sort();
    Ok(applied)
}

/// Applies pending migrations (refusing a newer schema); the versions applied.
pub(crate) fn migrate(conn: &mut AnyConnection) -> Result<Vec<String>, DatabaseError> {
    prepare(conn, true)
}

/// The schema of the database at `url` against this binary's migrations, changing nothing.
/// A SQLite file that does not exist yet is not created: everything is pending.
pub fn schema_status(url: &DatabaseUrl) -> Result<SchemaStatus, DatabaseError> {
    if let Some(file) = url.sqlite_file() {
        if !file.exists() {
            let mut empty = SqliteConnection::establish(":memory:")
                .map(AnyConnection::Sqlite)
                .map_err(|e| DatabaseError::Connect(e.to_string()))?;
            return status(&mut empty);
        }
    }
    let mut conn = url
        .establish()
        .map_err(|e| DatabaseError::Connect(e.to_string()))?;
    status(&mut conn)
}

/// Applies the pending migrations of the database at `url` (`workbench migrate`); the
/// versions applied, and the schema after.
pub fn apply_migrations(url: &DatabaseUrl) -> Result<(Vec<String>, SchemaStatus), DatabaseError> {
    let mut conn = url
        .establish()
        .map_err(|e| DatabaseError::Connect(e.to_string()))?;
    let applied = migrate(&mut conn)?;
    Ok((applied, status(&mut conn)?))
}
