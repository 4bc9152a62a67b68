//! Finished CSV tasks: their stored rows first, a batch at a time, then the tasks.

use diesel::prelude::*;
use domain::bulk::BulkStatus;
use domain::retention::{PruneBatch, PruneKind};

use super::batch::{count, one, rows, Batch};
use crate::db::{AnyConnection, Failure};
use crate::schema::{bulk_chunks, bulk_tasks};

fn final_bulk() -> [&'static str; 2] {
    [BulkStatus::Completed.as_str(), BulkStatus::Failed.as_str()]
}

/// The task after `after` (a task id), or the first.
fn task_after(after: &str) -> i64 {
    after.parse::<i64>().unwrap_or(0)
}

/// The rows of a finished task, a batch at a time, in row order.
pub(super) fn prune_bulk_rows(
    conn: &mut AnyConnection,
    batch: &Batch,
) -> Result<PruneBatch, Failure> {
    let tasks: Vec<i64> = bulk_tasks::table
        .filter(bulk_tasks::status.eq_any(final_bulk()))
        .filter(bulk_tasks::id.gt(task_after(batch.after)))
        .order(bulk_tasks::id)
        .select(bulk_tasks::id)
        .load(conn)?;
    let mut n = 0u64;
    for task in tasks {
        // Its stored rows (`bulk_chunks`, up to 2,000 CSV rows to a database row), up
        // to `rows` of them.
        let chunks: Vec<i64> = bulk_chunks::table
            .filter(bulk_chunks::task_id.eq(task))
            .order(bulk_chunks::last_row)
            .limit(rows(batch.limit))
            .select(bulk_chunks::last_row)
            .load(conn)?;
        let Some(last) = chunks.last() else {
            continue;
        };
        if batch.dry_run {
            let all: i64 = bulk_chunks::table
                .filter(bulk_chunks::task_id.eq(task))
                .count()
                .get_result(conn)?;
            n += u64::try_from(all).unwrap_or(0);
            // One task per batch: the next starts after it.
            return Ok(one(PruneKind::BulkRows, n, Some(task.to_string())));
        }
        n += count(
            diesel::delete(
                bulk_chunks::table
                    .filter(bulk_chunks::task_id.eq(task))
                    .filter(bulk_chunks::last_row.le(last)),
            )
            .execute(conn)?,
        );
        // One batch of one task per transaction; the same task again next.
        return Ok(one(
            PruneKind::BulkRows,
            n,
            Some(task.saturating_sub(1).to_string()),
        ));
    }
    Ok(one(PruneKind::BulkRows, n, None))
}

/// A batch of finished tasks whose rows are all gone.
pub(super) fn prune_bulk_tasks(
    conn: &mut AnyConnection,
    batch: &Batch,
) -> Result<PruneBatch, Failure> {
    let ids: Vec<i64> = bulk_tasks::table
        .filter(bulk_tasks::status.eq_any(final_bulk()))
        .filter(bulk_tasks::updated.lt(batch.cutoff))
        .filter(bulk_tasks::id.gt(task_after(batch.after)))
        .order(bulk_tasks::id)
        .limit(rows(batch.limit))
        .select(bulk_tasks::id)
        .load(conn)?;
    let next = (ids.len() >= batch.limit)
        .then(|| ids.last().map(i64::to_string))
        .flatten();
    let mut n = 0;
    for id in ids {
        let left: i64 = bulk_chunks::table
            .filter(bulk_chunks::task_id.eq(id))
            .count()
            .get_result(conn)?;
        if batch.dry_run {
            n += 1;
            continue;
        }
        // Its rows go first (bulk_chunks), a batch at a time; a task with rows left
        // waits for the next pass.
        if left == 0 {
            n += count(
                diesel::delete(bulk_tasks::table.filter(bulk_tasks::id.eq(id))).execute(conn)?,
            );
        }
    }
    Ok(one(PruneKind::BulkTasks, n, next))
}
