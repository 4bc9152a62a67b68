//! Upkeep of the database besides calls: SQLite's WAL checkpoints, the database's clock, and
//! whether its schema is current.

use std::time::Duration;

use diesel::connection::SimpleConnection;
use diesel::RunQueryDsl;
use diesel_migrations::MigrationHarness;
use domain::StorageError;

use super::connection::{AnyConnection, Backend};
use super::failure::Failure;
use super::migrations::{POSTGRES_MIGRATIONS, SQLITE_MIGRATIONS};
use super::Database;

/// The longest a readiness check waits for the database.
const READY_WITHIN: Duration = Duration::from_secs(5);

impl Database {
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
