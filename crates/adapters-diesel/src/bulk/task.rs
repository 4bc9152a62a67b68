//! A bulk task's row, written and read back as the domain's [`BulkTask`].

use chrono::NaiveDateTime;
use diesel::prelude::*;
use domain::bulk::{BulkStatus, BulkTask};
use domain::trigger::Mode;
use domain::StorageError;

use crate::db::{AnyConnection, Failure};
use crate::error::{corrupt, read_number};
use crate::schema::bulk_tasks;

#[derive(Queryable, Selectable)]
#[diesel(table_name = bulk_tasks)]
pub(super) struct TaskRow {
    pub(super) id: i64,
    pub(super) environment_id: String,
    pub(super) flow_id: String,
    pub(super) mode: String,
    pub(super) status: String,
    pub(super) header: Option<String>,
    pub(super) rows_total: i64,
    pub(super) rows_processed: i64,
    pub(super) rows_failed: i64,
    pub(super) errors: String,
    pub(super) cursor: i64,
    pub(super) created: NaiveDateTime,
    pub(super) updated: NaiveDateTime,
    pub(super) queued: bool,
    pub(super) lease_until: Option<NaiveDateTime>,
}

#[derive(Insertable)]
#[diesel(table_name = bulk_tasks)]
pub(super) struct NewTask<'a> {
    pub(super) environment_id: &'a str,
    pub(super) flow_id: &'a str,
    pub(super) mode: &'a str,
    pub(super) status: &'a str,
    pub(super) rows_total: i64,
    pub(super) rows_processed: i64,
    pub(super) rows_failed: i64,
    pub(super) errors: &'a str,
    pub(super) cursor: i64,
    pub(super) created: NaiveDateTime,
    pub(super) updated: NaiveDateTime,
}

pub(super) fn task(row: TaskRow) -> Result<BulkTask, StorageError> {
    Ok(BulkTask {
        mode: Mode::parse(&row.mode).ok_or_else(|| corrupt("bulk task mode", &row.mode))?,
        status: BulkStatus::parse(&row.status)
            .ok_or_else(|| corrupt("bulk task status", &row.status))?,
        header: row
            .header
            .as_deref()
            .map(serde_json::from_str)
            .transpose()
            .map_err(|e| corrupt("bulk task header", e))?,
        errors: serde_json::from_str(&row.errors).map_err(|e| corrupt("bulk task errors", e))?,
        id: row.id,
        environment_id: row.environment_id,
        flow_id: row.flow_id,
        rows_total: read_number("bulk task rows total", row.rows_total)?,
        rows_processed: read_number("bulk task rows processed", row.rows_processed)?,
        rows_failed: read_number("bulk task rows failed", row.rows_failed)?,
        cursor: read_number("bulk task cursor", row.cursor)?,
        queued: row.queued,
        created: row.created.and_utc(),
        updated: row.updated.and_utc(),
        lease_until: row.lease_until.map(|t| t.and_utc()),
    })
}

pub(super) fn load(
    conn: &mut AnyConnection,
    env: &str,
    id: i64,
) -> Result<Option<TaskRow>, Failure> {
    Ok(bulk_tasks::table
        .filter(bulk_tasks::environment_id.eq(env))
        .filter(bulk_tasks::id.eq(id))
        .select(TaskRow::as_select())
        .first(conn)
        .optional()?)
}
