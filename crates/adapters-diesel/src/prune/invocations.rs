//! Final invocations, found through the partial index `invocations_ended`: one stays while a
//! card of its can still be cancelled or an instance of its still waits.

use std::collections::BTreeMap;

use chrono::NaiveDateTime;
use diesel::prelude::*;
use domain::card::{CardStatus, InstanceStatus};
use domain::retention::{PruneBatch, PruneKind};
use domain::trigger::InvocationStatus;

use super::batch::{delete_ids, one, rows, Batch};
use crate::db::{AnyConnection, Failure};
use crate::millis::At;
use crate::schema::{card_instances, flow_instances, instance_counts, invocations};

/// The condition of the partial index `invocations_ended`, written literally (a bound status
/// cannot choose a partial index).
pub(super) static ENDED: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
    let statuses: Vec<String> = [
        InvocationStatus::Completed,
        InvocationStatus::Failed,
        InvocationStatus::Cancelled,
    ]
    .iter()
    .map(|s| format!("'{}'", s.as_str()))
    .collect();
    format!("status IN ({})", statuses.join(", "))
});

/// An ended invocation found: (environment, id, time ended, whether it stays).
type Found = (String, String, NaiveDateTime, bool);

/// A batch of final invocations ended before `cutoff` (all of them counted, in a dry run).
pub(super) fn prune_invocations(
    conn: &mut AnyConnection,
    batch: &Batch,
) -> Result<PruneBatch, Failure> {
    let ended = || diesel::dsl::sql::<diesel::sql_types::Bool>(&ENDED);
    // An invocation stays while a card of its can still be cancelled: cancel tasks find
    // a flow's cards through its invocations (docs/architecture.md).
    let cancellable = || {
        diesel::dsl::exists(
            card_instances::table
                .filter(card_instances::environment_id.eq(invocations::environment_id))
                .filter(card_instances::invocation_id.eq(invocations::id))
                .filter(card_instances::instance_status.eq(InstanceStatus::Active.as_str()))
                .filter(card_instances::status.eq_any(CardStatus::cancellable())),
        )
    };
    // And while an instance of its still waits: running on reads the invocation.
    let waiting = || {
        diesel::dsl::exists(
            flow_instances::table
                .filter(flow_instances::environment_id.eq(invocations::environment_id))
                .filter(flow_instances::invocation_id.eq(invocations::id))
                .filter(flow_instances::status.eq(InstanceStatus::Active.as_str())),
        )
    };
    if batch.dry_run {
        let n: i64 = invocations::table
            .filter(ended())
            .filter(invocations::updated.lt(At(batch.cutoff)))
            .filter(diesel::dsl::not(cancellable()))
            .filter(diesel::dsl::not(waiting()))
            .count()
            .get_result(conn)?;
        return Ok(one(
            PruneKind::Invocations,
            u64::try_from(n).unwrap_or(0),
            None,
        ));
    }
    // In the order (time ended, environment, id), after the last one the batch before
    // looked at, so that an invocation kept is looked at once a pass.
    let mut found = invocations::table
        .filter(ended())
        .filter(invocations::updated.lt(At(batch.cutoff)))
        .order((
            invocations::updated,
            invocations::environment_id,
            invocations::id,
        ))
        .limit(rows(batch.limit))
        .select((
            invocations::environment_id,
            invocations::id,
            invocations::updated,
            cancellable().or(waiting()),
        ))
        .into_boxed();
    if let Some((ended_at, env, id)) = cursor_of(batch.after) {
        found = found.filter(invocations::updated.ge(At(ended_at))).filter(
            invocations::updated
                .gt(At(ended_at))
                .or(invocations::updated.eq(At(ended_at)).and(
                    invocations::environment_id
                        .gt(env.clone())
                        .or(invocations::environment_id
                            .eq(env)
                            .and(invocations::id.gt(id))),
                )),
        );
    }
    let found: Vec<Found> = found.load(conn)?;
    let next = next_cursor(&found, batch.limit);
    let n = delete_ended(conn, found)?;
    Ok(one(PruneKind::Invocations, n, next))
}

/// Where the batch before stopped: `[microseconds, environment, id]`; a pass starts with an
/// empty one, read as the front.
fn cursor_of(after: &str) -> Option<(NaiveDateTime, String, String)> {
    serde_json::from_str::<(i64, String, String)>(after)
        .ok()
        .and_then(|(micros, env, id)| {
            Some((
                chrono::DateTime::from_timestamp_micros(micros)?.naive_utc(),
                env,
                id,
            ))
        })
}

/// The cursor of the next batch, when this one was full: its last invocation.
fn next_cursor(found: &[Found], limit: usize) -> Option<String> {
    found
        .last()
        .filter(|_| found.len() >= limit)
        .map(|(env, id, ended_at, _)| {
            serde_json::json!([ended_at.and_utc().timestamp_micros(), env, id]).to_string()
        })
}

/// Removes the invocations of `found` that do not stay, with their instances and counts.
fn delete_ended(conn: &mut AnyConnection, found: Vec<Found>) -> Result<u64, Failure> {
    let mut by_env: BTreeMap<String, Vec<String>> = Default::default();
    for (env, id, _, kept) in found {
        if !kept {
            by_env.entry(env).or_default().push(id);
        }
    }
    let mut n = 0;
    for (env, ids) in by_env {
        n += delete_ids(conn, &ids, false, |c, chunk| {
            // Their instances, all final, go with them.
            diesel::delete(
                flow_instances::table
                    .filter(flow_instances::environment_id.eq(&env))
                    .filter(flow_instances::invocation_id.eq_any(chunk)),
            )
            .execute(c)?;
            diesel::delete(
                instance_counts::table
                    .filter(instance_counts::environment_id.eq(&env))
                    .filter(instance_counts::invocation_id.eq_any(chunk)),
            )
            .execute(c)?;
            diesel::delete(
                invocations::table
                    .filter(invocations::environment_id.eq(&env))
                    .filter(invocations::id.eq_any(chunk)),
            )
            .execute(c)
        })?;
    }
    Ok(n)
}
