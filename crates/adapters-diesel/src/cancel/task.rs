//! The stored cancel task: its row, read back as the domain's [`CancelTask`].

use chrono::NaiveDateTime;
use diesel::prelude::*;
use domain::cancel::{CancelFilter, CancelStatus, CancelTask};
use domain::StorageError;

use crate::db::{AnyConnection, Failure};
use crate::error::{corrupt, read_number};
use crate::schema::cancel_tasks;

/// Ids per `IN (...)` of a cancel's statements.
pub(super) const CHUNK: usize = 500;

#[derive(Queryable, Selectable, Insertable)]
#[diesel(table_name = cancel_tasks)]
pub(crate) struct TaskRow {
    pub(super) id: String,
    pub(super) environment_id: String,
    pub(super) flow_id: String,
    pub(super) end_user_id: Option<String>,
    pub(super) invocation_id: Option<String>,
    pub(super) flow_version: Option<i32>,
    pub(super) before_version: Option<i32>,
    pub(super) cancel_cards: bool,
    pub(super) status: String,
    pub(super) expected: Option<i64>,
    pub(super) actual: i64,
    pub(super) cards_expected: Option<i64>,
    pub(super) cards_actual: i64,
    pub(super) errors: String,
    pub(super) lease_until: Option<NaiveDateTime>,
    pub(super) created: NaiveDateTime,
    pub(super) updated: NaiveDateTime,
}

pub(crate) fn task(row: TaskRow) -> Result<CancelTask, StorageError> {
    Ok(CancelTask {
        status: CancelStatus::parse(&row.status)
            .ok_or_else(|| corrupt("cancel status", &row.status))?,
        errors: serde_json::from_str(&row.errors).map_err(|e| corrupt("cancel errors", e))?,
        id: row.id.into(),
        environment_id: row.environment_id,
        flow_id: row.flow_id,
        filter: CancelFilter {
            end_user_id: row.end_user_id,
            invocation_id: row.invocation_id,
            flow_version: row
                .flow_version
                .map(|v| read_number("cancel flow version", v))
                .transpose()?,
            before_version: row
                .before_version
                .map(|v| read_number("cancel flow version", v))
                .transpose()?,
            cancel_cards: row.cancel_cards,
        },
        expected: row
            .expected
            .map(|n| read_number("cancel expected count", n))
            .transpose()?,
        actual: read_number("cancel count", row.actual)?,
        cards_expected: row
            .cards_expected
            .map(|n| read_number("cancel expected card count", n))
            .transpose()?,
        cards_actual: read_number("cancel card count", row.cards_actual)?,
        created: row.created.and_utc(),
        updated: row.updated.and_utc(),
        lease_until: row.lease_until.map(|t| t.and_utc()),
    })
}

pub(super) fn load(
    conn: &mut AnyConnection,
    env: &str,
    id: &str,
) -> Result<Option<TaskRow>, Failure> {
    Ok(cancel_tasks::table
        .filter(cancel_tasks::environment_id.eq(env))
        .filter(cancel_tasks::id.eq(id))
        .select(TaskRow::as_select())
        .first(conn)
        .optional()?)
}
