//! Bulk (CSV) tasks and their rows.

use async_trait::async_trait;
use chrono::NaiveDateTime;
use diesel::prelude::*;
use domain::bulk::{BulkRepository, BulkStatus, BulkTask, PublicStatus, RowError, MAX_ROW_ERRORS};
use domain::page::After;
use domain::{StorageError, Timestamp};

use crate::db::{AnyConnection, Database, Failure};
use crate::error::{corrupt, write_number};
use crate::page::after;
use crate::schema::{bulk_chunks, bulk_tasks};

mod chunks;
mod slots;
mod task;
use chunks::{chunk_rows, trim_chunk, ChunkRow};
pub(crate) use slots::slots_held;
use task::{load, task, NewTask, TaskRow};

/// Chunks read by the largest of the reads that gather a step's rows: the first reads one
/// (an upload's chunk holds a step's rows), each next one twice as many as the one before.
const READ_CHUNKS: i64 = 256;
/// Started tasks looked at per claim (another worker may take some meanwhile).
const CLAIM_CANDIDATES: i64 = 32;

/// The domain's `BulkRepository` port on the service's database.
pub struct DieselBulkRepository {
    db: Database,
}

impl DieselBulkRepository {
    /// Over `db`.
    pub fn new(db: Database) -> Self {
        Self { db }
    }
}

#[async_trait]
impl BulkRepository for DieselBulkRepository {
    async fn create(&self, t: &BulkTask) -> Result<i64, StorageError> {
        let t = t.clone();
        self.db
            .transaction(move |conn| {
                let new = NewTask {
                    environment_id: &t.environment_id,
                    flow_id: &t.flow_id,
                    mode: t.mode.as_str(),
                    status: t.status.as_str(),
                    rows_total: 0,
                    rows_processed: 0,
                    rows_failed: 0,
                    errors: "[]",
                    cursor: 0,
                    created: t.created.naive_utc(),
                    updated: t.updated.naive_utc(),
                };
                let id: i64 = crate::per_backend!(&mut *conn,
                    c => diesel::insert_into(bulk_tasks::table)
                    .values(&new)
                    .returning(bulk_tasks::id)
                    .get_result(c))?;
                Ok(id)
            })
            .await
    }

    async fn get(&self, environment_id: &str, id: i64) -> Result<Option<BulkTask>, StorageError> {
        let env = environment_id.to_owned();
        let row = self.db.run(move |conn| load(conn, &env, id)).await?;
        row.map(task).transpose()
    }

    async fn list(
        &self,
        environment_id: &str,
        flow_id: &str,
        status: Option<PublicStatus>,
        after: Option<After<i64>>,
        limit: u32,
    ) -> Result<Vec<BulkTask>, StorageError> {
        let (env, flow) = (environment_id.to_owned(), flow_id.to_owned());
        let rows = self
            .db
            .run(move |conn| {
                // Read through `bulk_tasks_flow` (environment, flow, created, id), backwards.
                let query = bulk_tasks::table
                    .filter(bulk_tasks::environment_id.eq(env))
                    .filter(bulk_tasks::flow_id.eq(flow))
                    .select(TaskRow::as_select())
                    .order((bulk_tasks::created.desc(), bulk_tasks::id.desc()))
                    .limit(i64::from(limit))
                    .into_boxed();
                // As `BulkTask::public_status` shows them: queued is pending, whatever is stored.
                let stored = |s: BulkStatus| bulk_tasks::status.eq(s.as_str());
                let query = match status {
                    None => query,
                    Some(PublicStatus::Pending) => query.filter(
                        bulk_tasks::queued
                            .eq(true)
                            .or(stored(BulkStatus::Pending))
                            .or(stored(BulkStatus::Uploading)),
                    ),
                    Some(PublicStatus::Processing) => query
                        .filter(bulk_tasks::queued.eq(false))
                        .filter(stored(BulkStatus::Processing)),
                    Some(PublicStatus::Completed) => query
                        .filter(bulk_tasks::queued.eq(false))
                        .filter(stored(BulkStatus::Completed)),
                    Some(PublicStatus::Failed) => query
                        .filter(bulk_tasks::queued.eq(false))
                        .filter(stored(BulkStatus::Failed)),
                };
                let query = after!(query, bulk_tasks::created, bulk_tasks::id, after);
                Ok(query.load(conn)?)
            })
            .await?;
        rows.into_iter().map(task).collect()
    }

    async fn begin_upload(
        &self,
        environment_id: &str,
        id: i64,
        now: Timestamp,
    ) -> Result<bool, StorageError> {
        let env = environment_id.to_owned();
        let now = now.naive_utc();
        let changed = self
            .db
            .transaction(move |conn| {
                Ok(diesel::update(
                    bulk_tasks::table
                        .filter(bulk_tasks::environment_id.eq(env))
                        .filter(bulk_tasks::id.eq(id))
                        .filter(bulk_tasks::status.eq(BulkStatus::Pending.as_str())),
                )
                .set((
                    bulk_tasks::status.eq(BulkStatus::Uploading.as_str()),
                    bulk_tasks::updated.eq(now),
                ))
                .execute(conn)?)
            })
            .await?;
        Ok(changed == 1)
    }

    async fn add_rows(
        &self,
        _environment_id: &str,
        id: i64,
        mut rows: Vec<(u64, Vec<String>)>,
    ) -> Result<(), StorageError> {
        // One row of `bulk_chunks` for the whole batch: a CSV row costs no entry of its own in
        // a table or an index (docs/scaling.md, CSV tasks on PostgreSQL).
        rows.sort_unstable_by_key(|(number, _)| *number);
        if let Some(twice) = rows.windows(2).find(|w| w[0].0 == w[1].0) {
            return Err(StorageError::UniqueViolation(format!(
                "bulk row {} is in the batch twice",
                twice[0].0
            )));
        }
        let Some(chunk) = ChunkRow::of(id, &rows)? else {
            return Ok(());
        };
        self.db
            .transaction(move |conn| {
                // After every row stored before it: a row at or before the last one stored
                // would be read out of order, or deleted before it is handled. On PostgreSQL
                // the task's row is locked first, so that two batches added at once are
                // checked one after the other (SQLite writes one transaction at a time).
                if let AnyConnection::Postgresql(c) = &mut *conn {
                    bulk_tasks::table
                        .filter(bulk_tasks::id.eq(chunk.task_id))
                        .select(bulk_tasks::id)
                        .for_no_key_update()
                        .load::<i64>(c)?;
                }
                let stored: Option<i64> = bulk_chunks::table
                    .filter(bulk_chunks::task_id.eq(chunk.task_id))
                    .select(diesel::dsl::max(bulk_chunks::last_row))
                    .first(conn)?;
                if stored.is_some_and(|stored| stored >= chunk.first_row) {
                    return Err(Failure::Domain(StorageError::UniqueViolation(format!(
                        "bulk row {} is not after the rows stored",
                        chunk.first_row
                    ))));
                }
                diesel::insert_into(bulk_chunks::table)
                    .values(&chunk)
                    .execute(conn)?;
                Ok(())
            })
            .await
    }

    async fn finish_upload(
        &self,
        environment_id: &str,
        id: i64,
        header: Vec<String>,
        rows: u64,
        now: Timestamp,
    ) -> Result<(), StorageError> {
        let env = environment_id.to_owned();
        let header = serde_json::to_string(&header).map_err(|e| corrupt("header", e))?;
        let rows: i64 = write_number("bulk task rows total", rows)?;
        let now = now.naive_utc();
        self.db
            .transaction(move |conn| {
                diesel::update(
                    bulk_tasks::table
                        .filter(bulk_tasks::environment_id.eq(env))
                        .filter(bulk_tasks::id.eq(id)),
                )
                .set((
                    bulk_tasks::status.eq(BulkStatus::Processing.as_str()),
                    bulk_tasks::queued.eq(true),
                    bulk_tasks::header.eq(Some(header)),
                    bulk_tasks::rows_total.eq(rows),
                    bulk_tasks::updated.eq(now),
                ))
                .execute(conn)?;
                crate::db::notices::queued(crate::Work::CsvTasks);
                Ok(())
            })
            .await
    }

    async fn fail(
        &self,
        environment_id: &str,
        id: i64,
        errors: Vec<RowError>,
        now: Timestamp,
        held: Option<Timestamp>,
    ) -> Result<bool, StorageError> {
        let env = environment_id.to_owned();
        let errors = serde_json::to_string(&errors).map_err(|e| corrupt("errors", e))?;
        let now = now.naive_utc();
        self.db
            .transaction(move |conn| {
                let task = bulk_tasks::table
                    .filter(bulk_tasks::environment_id.eq(env))
                    .filter(bulk_tasks::id.eq(id));
                let set = (
                    bulk_tasks::status.eq(BulkStatus::Failed.as_str()),
                    bulk_tasks::errors.eq(errors),
                    bulk_tasks::lease_until.eq(None::<NaiveDateTime>),
                    bulk_tasks::updated.eq(now),
                );
                // Fenced first, so that a stale holder deletes no rows (PostgreSQL: the lease
                // is checked again under the row's lock).
                if let Some(lease) = held {
                    let held = task
                        .filter(bulk_tasks::status.eq(BulkStatus::Processing.as_str()))
                        .filter(bulk_tasks::lease_until.eq(lease.naive_utc()));
                    if diesel::update(held).set(set).execute(conn)? == 0 {
                        return Ok(false);
                    }
                } else {
                    diesel::update(task).set(set).execute(conn)?;
                }
                diesel::delete(bulk_chunks::table.filter(bulk_chunks::task_id.eq(id)))
                    .execute(conn)?;
                Ok(true)
            })
            .await
    }

    async fn claim(
        &self,
        now: Timestamp,
        lease_until: Timestamp,
        slots: u64,
    ) -> Result<Option<BulkTask>, StorageError> {
        let (now, lease) = (now.naive_utc(), lease_until.naive_utc());
        let row = self
            .db
            .claim_transaction(move |conn| {
                let due = || {
                    bulk_tasks::table
                        .filter(bulk_tasks::status.eq(BulkStatus::Processing.as_str()))
                        .filter(
                            bulk_tasks::lease_until
                                .is_null()
                                .or(bulk_tasks::lease_until.lt(now)),
                        )
                };
                // Started tasks first (they hold their slot), oldest first; then, per
                // environment, its oldest queued task, taken only while the environment has a
                // slot free. One row per environment, however many wait in full ones.
                let started: Vec<(String, i64)> = due()
                    .filter(bulk_tasks::queued.eq(false))
                    .order(bulk_tasks::id)
                    .select((bulk_tasks::environment_id, bulk_tasks::id))
                    .limit(CLAIM_CANDIDATES)
                    .load(&mut *conn)?;
                let waiting: Vec<(String, Option<i64>)> = due()
                    .filter(bulk_tasks::queued.eq(true))
                    .group_by(bulk_tasks::environment_id)
                    .select((bulk_tasks::environment_id, diesel::dsl::min(bulk_tasks::id)))
                    .load(&mut *conn)?;
                let mut waiting: Vec<(String, i64)> = waiting
                    .into_iter()
                    .filter_map(|(env, id)| Some((env, id?)))
                    .collect();
                waiting.sort_by_key(|(_, id)| *id);
                let mut candidates = started;
                for (env, id) in waiting {
                    if slots_held(conn, &env)? < slots {
                        candidates.push((env, id));
                    }
                }
                for (env, id) in candidates {
                    // Taken only if no other worker took it meanwhile (PostgreSQL: the
                    // lease and status are checked again under the row's lock).
                    let taken = diesel::update(
                        bulk_tasks::table
                            .filter(bulk_tasks::id.eq(id))
                            .filter(bulk_tasks::status.eq(BulkStatus::Processing.as_str()))
                            .filter(
                                bulk_tasks::lease_until
                                    .is_null()
                                    .or(bulk_tasks::lease_until.lt(now)),
                            ),
                    )
                    .set((
                        bulk_tasks::lease_until.eq(Some(lease)),
                        bulk_tasks::queued.eq(false),
                    ))
                    .execute(conn)?;
                    if taken == 1 {
                        return load(conn, &env, id);
                    }
                }
                Ok(None)
            })
            .await?;
        row.map(task).transpose()
    }

    async fn rows(
        &self,
        _environment_id: &str,
        id: i64,
        after: u64,
        limit: u32,
    ) -> Result<Vec<(u64, Vec<String>)>, StorageError> {
        let mut from: i64 = write_number("bulk row number", after)?;
        let limit = usize::try_from(limit).unwrap_or(usize::MAX);
        let mut out: Vec<(u64, Vec<String>)> = Vec::new();
        // The chunks that end after `after`, in order, until `limit` rows are gathered: a
        // chunk's rows at or before `after` (a step that stopped within it) are passed over.
        let mut read = 1;
        loop {
            let chunks: Vec<(i64, String)> = self
                .db
                .run(move |conn| {
                    Ok(bulk_chunks::table
                        .filter(bulk_chunks::task_id.eq(id))
                        .filter(bulk_chunks::last_row.gt(from))
                        .order(bulk_chunks::last_row)
                        .limit(read)
                        .select((bulk_chunks::last_row, bulk_chunks::cells))
                        .load(conn)?)
                })
                .await?;
            let full = chunks.len() == usize::try_from(read).unwrap_or(0);
            for (last, cells) in chunks {
                let rows = chunk_rows(&cells)?;
                let left = limit.saturating_sub(out.len());
                out.extend(rows.into_iter().filter(|(n, _)| *n > after).take(left));
                if out.len() >= limit {
                    return Ok(out);
                }
                from = last;
            }
            if !full {
                return Ok(out);
            }
            read = (read * 2).min(READ_CHUNKS);
        }
    }

    async fn save_progress(
        &self,
        t: &BulkTask,
        from_cursor: u64,
        handled: u64,
        failed: u64,
        errors: Vec<RowError>,
    ) -> Result<bool, StorageError> {
        let from_cursor: i64 = write_number("bulk task cursor", from_cursor)?;
        let cursor: i64 = write_number("bulk task cursor", t.cursor)?;
        let handled: i64 = write_number("bulk rows handled", handled)?;
        let failed: i64 = write_number("bulk rows failed", failed)?;
        let t = t.clone();
        self.db
            .transaction(move |conn| {
                // Fenced first: only from the cursor the step started at and while this holder
                // has the lease (PostgreSQL: both are checked again under the row's lock, so
                // of two holders saving at once one changes nothing).
                let at = bulk_tasks::table
                    .filter(bulk_tasks::environment_id.eq(&t.environment_id))
                    .filter(bulk_tasks::id.eq(t.id))
                    .filter(bulk_tasks::status.eq(BulkStatus::Processing.as_str()))
                    .filter(bulk_tasks::cursor.eq(from_cursor));
                let set = (
                    bulk_tasks::status.eq(t.status.as_str()),
                    bulk_tasks::cursor.eq(cursor),
                    bulk_tasks::rows_processed.eq(bulk_tasks::rows_processed + handled),
                    bulk_tasks::rows_failed.eq(bulk_tasks::rows_failed + failed),
                    // The step is done: the next may be claimed at once.
                    bulk_tasks::lease_until.eq(None::<NaiveDateTime>),
                    bulk_tasks::updated.eq(t.updated.naive_utc()),
                );
                let moved = match t.lease_until {
                    Some(lease) => {
                        diesel::update(at.filter(bulk_tasks::lease_until.eq(lease.naive_utc())))
                            .set(set)
                            .execute(conn)?
                    }
                    None => diesel::update(at.filter(bulk_tasks::lease_until.is_null()))
                        .set(set)
                        .execute(conn)?,
                };
                if moved == 0 {
                    // Another worker took over after this one's lease ran out.
                    return Ok(false);
                }
                if !errors.is_empty() {
                    let current = load(conn, &t.environment_id, t.id)?
                        .ok_or_else(|| Failure::Domain(corrupt("bulk task", "vanished")))?;
                    let mut kept: Vec<RowError> = serde_json::from_str(&current.errors)
                        .map_err(|e| Failure::Domain(corrupt("errors", e)))?;
                    if kept.len() < MAX_ROW_ERRORS {
                        kept.extend(errors);
                        kept.truncate(MAX_ROW_ERRORS);
                        diesel::update(bulk_tasks::table.filter(bulk_tasks::id.eq(t.id)))
                            .set(
                                bulk_tasks::errors
                                    .eq(serde_json::to_string(&kept)
                                        .unwrap_or_else(|_| "[]".into())),
                            )
                            .execute(conn)?;
                    }
                }
                diesel::delete(
                    bulk_chunks::table
                        .filter(bulk_chunks::task_id.eq(t.id))
                        .filter(bulk_chunks::last_row.le(cursor)),
                )
                .execute(conn)?;
                trim_chunk(conn, t.id, cursor)?;
                Ok(true)
            })
            .await
    }
}

#[cfg(test)]
mod tests {
    use diesel_migrations::MigrationHarness;
    use domain::bulk::BulkRepository;

    use super::DieselBulkRepository;
    use crate::db::{AnyConnection, Database, DatabaseUrl, POSTGRES_MIGRATIONS, SQLITE_MIGRATIONS};
    use crate::testing::{raw_execute, raw_texts, TestDatabase};

    /// Rows stored one each (`bulk_rows`, before migration 66) become chunks, which the
    /// migration's `down` gives back one each, and are read back the same once migrated.
    fn stored_rows_become_chunks(db: TestDatabase) {
        let url = db.url();
        let mut conn = DatabaseUrl::parse(url)
            .expect("url")
            .establish()
            .expect("connect");
        let next = |conn: &mut AnyConnection| {
            match conn {
                AnyConnection::Sqlite(c) => c.run_next_migration(SQLITE_MIGRATIONS),
                AnyConnection::Postgresql(c) => c.run_next_migration(POSTGRES_MIGRATIONS),
            }
            .expect("migration")
            .to_string()
        };
        while next(&mut conn) != "20261127000065" {}
        const AT: &str = "'2026-11-27 10:00:00'";
        for seed in [
            format!("INSERT INTO organisations (id, name, created) VALUES ('org_1', 'o', {AT})"),
            format!(
                "INSERT INTO environments (id, organisation_id, name, created) \
                 VALUES ('env_a', 'org_1', 'a', {AT})"
            ),
            format!(
                "INSERT INTO action_flows (id, environment_id, organisation_id, name, name_folded, \
                 description, folder_id, archived, latest_version, published_version, \
                 draft_version, variables, revision, created, updated) VALUES ('flw_1', 'env_a', \
                 'org_1', 'F', 'f', '', NULL, FALSE, 1, 1, NULL, '[]', 1, {AT}, {AT})"
            ),
        ] {
            raw_execute(url, &seed);
        }
        raw_execute(
            url,
            "INSERT INTO bulk_tasks (id, environment_id, flow_id, mode, status, rows_total, \
             rows_processed, rows_failed, errors, cursor, created, updated) VALUES (7, 'env_a', \
             'flw_1', 'live', 'processing', 3, 1, 0, '[]', 1, '2026-11-27 10:00:00', \
             '2026-11-27 10:00:00')",
        );
        let cells = [r#"["u1","a"]"#, r#"["u2","a, \"b\" | é"]"#, r#"["u3",""]"#];
        for (n, cells) in (2..).zip(cells) {
            raw_execute(
                url,
                &format!(
                    "INSERT INTO bulk_rows (task_id, row_number, cells) VALUES (7, {n}, '{cells}')"
                ),
            );
        }
        let all = [
            (2, ["u1", "a"]),
            (3, ["u2", "a, \"b\" | é"]),
            (4, ["u3", ""]),
        ]
        .map(|(n, cells)| (n, cells.map(str::to_owned).to_vec()))
        .to_vec();
        // Migration 66, then its down: the rows come back one each, as they were.
        assert_eq!(next(&mut conn), "20261127000066");
        assert_eq!(
            raw_texts(url, "SELECT CAST(COUNT(*) AS TEXT) AS v FROM bulk_chunks"),
            ["3"]
        );
        match &mut conn {
            AnyConnection::Sqlite(c) => c.revert_last_migration(SQLITE_MIGRATIONS),
            AnyConnection::Postgresql(c) => c.revert_last_migration(POSTGRES_MIGRATIONS),
        }
        .expect("down");
        let back = raw_texts(
            url,
            "SELECT CAST(row_number AS TEXT) || ' ' || cells AS v FROM bulk_rows \
             ORDER BY row_number",
        );
        let parsed: Vec<(u64, Vec<String>)> = back
            .iter()
            .map(|v| {
                let (n, cells) = v.split_once(' ').expect("number and cells");
                (
                    n.parse().expect("number"),
                    serde_json::from_str(cells).expect("cells"),
                )
            })
            .collect();
        assert_eq!(parsed, all);

        // Up again, with every migration after it: read through the repository.
        let database = Database::connect(url, 2).expect("the remaining migrations");
        let repo = DieselBulkRepository::new(database);
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        let read = runtime
            .block_on(repo.rows("env_a", 7, 0, 10))
            .expect("rows");
        assert_eq!(read, all);
        let read = runtime.block_on(repo.rows("env_a", 7, 2, 1)).expect("rows");
        assert_eq!(read, all[1..2]);
    }

    #[test]
    fn stored_rows_become_chunks_sqlite() {
        stored_rows_become_chunks(TestDatabase::sqlite());
    }

    #[test]
    fn stored_rows_become_chunks_postgres() {
        if let Some(db) = TestDatabase::postgres() {
            stored_rows_become_chunks(db);
        }
    }
}
