//! An upload's rows as stored: in chunks of consecutive rows, one database row each, dropped
//! as steps go through them.

use diesel::prelude::*;
use domain::StorageError;

use crate::db::{AnyConnection, Failure};
use crate::error::{corrupt, write_number};
use crate::schema::bulk_chunks;

/// One batch of an upload's rows, stored as one row: `cells` is a JSON array of
/// `[number, [cell, ...]]` in ascending order of number, `last_row` the last number.
#[derive(Insertable)]
#[diesel(table_name = bulk_chunks)]
pub(super) struct ChunkRow {
    pub(super) task_id: i64,
    pub(super) last_row: i64,
    pub(super) first_row: i64,
    pub(super) row_count: i32,
    pub(super) cells: String,
}

impl ChunkRow {
    /// The chunk of `rows` (in ascending order of number) of task `task`; none when empty.
    pub(super) fn of(
        task: i64,
        rows: &[(u64, Vec<String>)],
    ) -> Result<Option<ChunkRow>, StorageError> {
        let (Some(&(first, _)), Some(&(last, _))) = (rows.first(), rows.last()) else {
            return Ok(None);
        };
        Ok(Some(ChunkRow {
            task_id: task,
            last_row: write_number("bulk row number", last)?,
            first_row: write_number("bulk row number", first)?,
            row_count: write_number("bulk rows in a chunk", rows.len())?,
            cells: serde_json::to_string(rows).map_err(|e| corrupt("bulk rows", e))?,
        }))
    }
}

/// The rows a chunk's `cells` hold, as [`ChunkRow::of`] wrote them.
pub(super) fn chunk_rows(cells: &str) -> Result<Vec<(u64, Vec<String>)>, StorageError> {
    serde_json::from_str(cells).map_err(|e| corrupt("bulk rows", e))
}

/// Drops a task's rows up to `cursor` from the chunk a step stopped within, if any: the rest
/// of the chunk stays. Steps and chunks both hold 2,000 rows, so this is rare.
pub(super) fn trim_chunk(conn: &mut AnyConnection, task: i64, cursor: i64) -> Result<(), Failure> {
    let within: Option<(i64, String)> = bulk_chunks::table
        .filter(bulk_chunks::task_id.eq(task))
        .filter(bulk_chunks::last_row.gt(cursor))
        .filter(bulk_chunks::first_row.le(cursor))
        .select((bulk_chunks::last_row, bulk_chunks::cells))
        .first(conn)
        .optional()?;
    let Some((last, cells)) = within else {
        return Ok(());
    };
    let mut rows = chunk_rows(&cells).map_err(Failure::Domain)?;
    let after = u64::try_from(cursor).unwrap_or(0);
    rows.retain(|(n, _)| *n > after);
    let Some(trimmed) = ChunkRow::of(task, &rows).map_err(Failure::Domain)? else {
        return Ok(());
    };
    diesel::update(
        bulk_chunks::table
            .filter(bulk_chunks::task_id.eq(task))
            .filter(bulk_chunks::last_row.eq(last)),
    )
    .set((
        bulk_chunks::first_row.eq(trimmed.first_row),
        bulk_chunks::row_count.eq(trimmed.row_count),
        bulk_chunks::cells.eq(trimmed.cells),
    ))
    .execute(conn)?;
    Ok(())
}
