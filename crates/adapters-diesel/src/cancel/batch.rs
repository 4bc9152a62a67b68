//! One batch of a cancel task, in one transaction: the instances it reaches next are stopped,
//! their open cards cancelled (when asked), and the task's counts and cursor moved on.

use std::collections::HashSet;

use chrono::NaiveDateTime;
use diesel::prelude::*;
use domain::cancel::CancelTask;
use domain::card::{cancel_card, AnalyticsEvent, CardStatus, InstanceStatus};
use domain::Timestamp;

use super::task::CHUNK;
use super::waiting::cancel_instances;
use super::walk::{held, walk, Cursor};
use crate::db::{AnyConnection, Failure};
use crate::error::corrupt;
use crate::millis::At;
use crate::rows::{CardRow, SharedParse};
use crate::schema::{cancel_tasks, card_instances};
use crate::writes::insert_events;

/// Cancels up to `limit` more of `t`'s instances: how many, or None once the task no longer
/// holds the lease it was claimed with.
pub(super) fn cancel_batch(
    conn: &mut AnyConnection,
    t: &CancelTask,
    limit: usize,
    now: Timestamp,
) -> Result<Option<u64>, Failure> {
    let Some(mut at) = held(conn, t)? else {
        return Ok(None);
    };
    let start = at.clone();
    let (ids, n) = walk(conn, t, &mut at, limit)?;
    let rows = lock_cards(conn, &ids)?;
    let ids: Vec<String> = rows.iter().map(|r| r.id.clone()).collect();
    // The instances of a flow that waits or branches stop too (contract §21).
    let mut instances: Vec<String> = rows.iter().map(|r| r.flow_instance_id.clone()).collect();
    instances.sort_unstable();
    instances.dedup();
    let instances: Vec<&str> = instances.iter().map(String::as_str).collect();
    cancel_instances(conn, &t.environment_id, &instances, now)?;
    let now_at = now.naive_utc();
    // The open cards to cancel with their instances (when asked), each updated once.
    let mut events = Vec::new();
    if t.filter.cancel_cards {
        let mut shared = SharedParse::default();
        for row in rows {
            let card = shared.card(row).map_err(Failure::Domain)?;
            events.extend(cancel_card(card, now));
        }
    }
    mark_cancelled(conn, &ids, &events, now_at)?;
    if n == 0 && at == start {
        return Ok(Some(0));
    }
    insert_events(conn, &events)?;
    advance_task(conn, t, n, events.len() as i64, at, now_at)?;
    Ok(Some(n as u64))
}

/// The cards of `ids`, locked for the update on PostgreSQL, read by id.
fn lock_cards(conn: &mut AnyConnection, ids: &[String]) -> Result<Vec<CardRow>, Failure> {
    let mut rows: Vec<CardRow> = Vec::with_capacity(ids.len());
    for chunk in ids.chunks(CHUNK) {
        // A macro, as each arm's selection is of its own backend.
        macro_rules! by_id {
            () => {
                card_instances::table
                    .filter(card_instances::id.eq_any(chunk))
                    .select(CardRow::as_select())
            };
        }
        rows.extend(match &mut *conn {
            AnyConnection::Postgresql(c) => by_id!().for_update().load(c)?,
            AnyConnection::Sqlite(c) => by_id!().load(c)?,
        });
    }
    Ok(rows)
}

/// Marks the cards of `ids` of cancelled instances: those `events` cancel are cancelled too.
fn mark_cancelled(
    conn: &mut AnyConnection,
    ids: &[String],
    events: &[AnalyticsEvent],
    now_at: NaiveDateTime,
) -> Result<(), Failure> {
    let open: HashSet<&str> = events.iter().map(|e| e.card_instance_id()).collect();
    let (open_ids, others): (Vec<&str>, Vec<&str>) = ids
        .iter()
        .map(String::as_str)
        .partition(|id| open.contains(id));
    for chunk in open_ids.chunks(CHUNK) {
        diesel::update(card_instances::table.filter(card_instances::id.eq_any(chunk)))
            .set((
                card_instances::instance_status.eq(InstanceStatus::Cancelled.as_str()),
                card_instances::status.eq(CardStatus::Cancelled.as_str()),
                card_instances::updated.eq(At(now_at)),
            ))
            .execute(conn)?;
    }
    for chunk in others.chunks(CHUNK) {
        diesel::update(card_instances::table.filter(card_instances::id.eq_any(chunk)))
            .set(card_instances::instance_status.eq(InstanceStatus::Cancelled.as_str()))
            .execute(conn)?;
    }
    Ok(())
}

/// Adds the batch's `n` instances and `cancelled_cards` to the task's counts, and stores
/// where it stopped.
fn advance_task(
    conn: &mut AnyConnection,
    t: &CancelTask,
    n: usize,
    cancelled_cards: i64,
    at: Cursor,
    now_at: NaiveDateTime,
) -> Result<(), Failure> {
    let instances = i64::try_from(n)
        .map_err(|_| Failure::Domain(corrupt("count of instances cancelled", n)))?;
    diesel::update(cancel_tasks::table.filter(cancel_tasks::id.eq(t.id.as_str())))
        .set((
            cancel_tasks::actual.eq(cancel_tasks::actual + instances),
            cancel_tasks::cards_actual.eq(cancel_tasks::cards_actual + cancelled_cards),
            cancel_tasks::updated.eq(now_at),
            cancel_tasks::cursor_created
                .eq(at.invocation.as_ref().map(|(created, _)| At(*created))),
            cancel_tasks::cursor_invocation.eq(at.invocation.map(|(_, id)| id)),
            cancel_tasks::cursor_user.eq(at.user),
        ))
        .execute(conn)?;
    Ok(())
}
