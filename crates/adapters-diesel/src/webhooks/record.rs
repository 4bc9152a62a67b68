//! Recording the outcomes of delivery attempts: saved only by the claim that holds the
//! delivery, logged, and reflected in the subscription's health and the daily totals.

use std::collections::{BTreeMap, HashMap, HashSet};

use chrono::NaiveDateTime;
use diesel::prelude::*;
use domain::id::{new_id, IdKind};
use domain::webhook::{AttemptRecord, DeliveryStatus, NextStep, SubscriptionChange};
use domain::StorageError;

use super::pending::cancel_pending;
use super::rows::{AttemptRow, INSERT_CHUNK};
use crate::db::{AnyConnection, Failure};
use crate::error::write_number;
use crate::millis::At;
use crate::schema::{
    analytics_events, card_instances, webhook_attempts, webhook_deliveries, webhook_subscriptions,
};
use crate::totals::{CardOf, Totals};

/// Inside one transaction: saves `records`, and answers how many were stale (their claim's
/// lease ran out, so they changed nothing).
pub(super) fn record(conn: &mut AnyConnection, records: &[AttemptRecord]) -> Result<u64, Failure> {
    let records = of_existing(conn, records)?;
    // Contract §19: a delivery's outcome is saved only by the claim that holds it: still
    // pending, at the attempt before this one, leased until exactly this claim's lease.
    // `UPDATE ... RETURNING` says which were; the others' lease ran out and the delivery was
    // claimed again, so their outcome changes nothing.
    let mut held: HashSet<String> = HashSet::new();
    remove_delivered(conn, &records, &mut held)?;
    save_retried_or_failed(conn, &records, &mut held)?;
    // Test calls have no delivery: always kept.
    let (kept, stale): (Vec<&AttemptRecord>, Vec<&AttemptRecord>) = records
        .into_iter()
        .partition(|r| r.delivery_id.as_ref().is_none_or(|id| held.contains(id)));
    log_attempts(conn, &kept)?;
    // The subscription's health as the kept outcomes say.
    for r in &kept {
        change_health(conn, r)?;
    }
    count_done(conn, &kept)?;
    Ok(u64::try_from(stale.len()).unwrap_or(u64::MAX))
}

/// The records of subscriptions that still exist. A subscription deleted while its calls were
/// in flight takes their outcomes with it (and its attempt log): they are dropped rather than
/// fail the whole batch.
fn of_existing<'a>(
    conn: &mut AnyConnection,
    records: &'a [AttemptRecord],
) -> Result<Vec<&'a AttemptRecord>, Failure> {
    let mut ids: Vec<&String> = records.iter().map(|r| &r.subscription_id).collect();
    ids.sort_unstable();
    ids.dedup();
    let existing: HashSet<String> = webhook_subscriptions::table
        .filter(webhook_subscriptions::id.eq_any(ids))
        .select(webhook_subscriptions::id)
        .load::<String>(conn)?
        .into_iter()
        .collect();
    Ok(records
        .iter()
        .filter(|r| existing.contains(&r.subscription_id))
        .collect())
}

/// Deliveries done, by attempt and claim: one statement per group (usually one). A delivery
/// done leaves the outbox (issue 27: it was a large share of a card's bytes at rest); the
/// attempt log is its record, and a resend of its event is a new delivery. Adds those removed
/// to `held`.
fn remove_delivered(
    conn: &mut AnyConnection,
    records: &[&AttemptRecord],
    held: &mut HashSet<String>,
) -> Result<(), Failure> {
    let mut delivered: BTreeMap<(u32, Option<NaiveDateTime>), Vec<&String>> = BTreeMap::new();
    for r in records {
        if let (Some(id), NextStep::Done) = (&r.delivery_id, &r.next) {
            delivered
                .entry((r.attempt, r.lease.map(|l| l.naive_utc())))
                .or_default()
                .push(id);
        }
    }
    for ((attempt, lease), ids) in &delivered {
        let before: i32 = write_number("webhook attempt number", attempt.saturating_sub(1))
            .map_err(Failure::Domain)?;
        for chunk in ids.chunks(INSERT_CHUNK) {
            let targets = webhook_deliveries::table
                .filter(webhook_deliveries::id.eq_any(chunk))
                .filter(webhook_deliveries::status.eq(DeliveryStatus::Pending.as_str()))
                .filter(webhook_deliveries::attempts.eq(before));
            let saved: Vec<String> = match lease {
                Some(lease) => {
                    diesel::delete(targets.filter(webhook_deliveries::next_attempt_at.eq(*lease)))
                        .returning(webhook_deliveries::id)
                        .get_results(conn)?
                }
                None => diesel::delete(targets)
                    .returning(webhook_deliveries::id)
                    .get_results(conn)?,
            };
            held.extend(saved);
        }
    }
    Ok(())
}

/// The deliveries to retry or failed for good, one statement each; adds those saved to
/// `held`.
fn save_retried_or_failed(
    conn: &mut AnyConnection,
    records: &[&AttemptRecord],
    held: &mut HashSet<String>,
) -> Result<(), Failure> {
    for r in records {
        let at = r.at.naive_utc();
        if let (Some(delivery), false) = (&r.delivery_id, r.next == NextStep::Done) {
            let (status, next) = match r.next {
                NextStep::Done => (DeliveryStatus::Delivered, at), // removed above
                NextStep::RetryAt(t) => (DeliveryStatus::Pending, t.naive_utc()),
                NextStep::Failed => (DeliveryStatus::Failed, at),
            };
            let before: i32 = write_number("webhook attempt number", r.attempt.saturating_sub(1))
                .map_err(Failure::Domain)?;
            let attempt: i32 =
                write_number("webhook attempt number", r.attempt).map_err(Failure::Domain)?;
            let targets = webhook_deliveries::table
                .filter(webhook_deliveries::id.eq(delivery))
                .filter(webhook_deliveries::status.eq(DeliveryStatus::Pending.as_str()))
                .filter(webhook_deliveries::attempts.eq(before));
            let values = (
                webhook_deliveries::status.eq(status.as_str()),
                webhook_deliveries::attempts.eq(attempt),
                webhook_deliveries::trigger_kind.eq("scheduled"),
                webhook_deliveries::next_attempt_at.eq(next),
                webhook_deliveries::updated.eq(at),
            );
            let changed = match r.lease {
                Some(lease) => diesel::update(
                    targets.filter(webhook_deliveries::next_attempt_at.eq(lease.naive_utc())),
                )
                .set(values)
                .execute(conn)?,
                None => diesel::update(targets).set(values).execute(conn)?,
            };
            if changed == 1 {
                held.insert(delivery.clone());
            }
        }
    }
    Ok(())
}

/// Writes the attempt log of the kept records.
fn log_attempts(conn: &mut AnyConnection, kept: &[&AttemptRecord]) -> Result<(), Failure> {
    let rows: Vec<AttemptRow> = kept
        .iter()
        .map(|r| attempt_row(r))
        .collect::<Result<_, StorageError>>()
        .map_err(Failure::Domain)?;
    for chunk in rows.chunks(INSERT_CHUNK) {
        crate::per_backend!(&mut *conn,
            c => diesel::insert_into(webhook_attempts::table).values(chunk)
                .execute(c))?;
    }
    Ok(())
}

/// The attempt log's row of `r`.
fn attempt_row(r: &AttemptRecord) -> Result<AttemptRow, StorageError> {
    let a = r.to_attempt(new_id(IdKind::Attempt));
    Ok(AttemptRow {
        id: a.id,
        subscription_id: a.subscription_id,
        // A delivery done leaves the outbox: its last attempt needs no link to it. A failed
        // one stays, and can be sent again (recover, resend): the pruner keeps its log while
        // it is pending.
        delivery_id: match r.next {
            NextStep::Done => None,
            NextStep::RetryAt(_) | NextStep::Failed => r.delivery_id.clone(),
        },
        event_id: a.event_id,
        event_name: a.event_name,
        attempt: write_number("webhook attempt number", a.attempt)?,
        trigger_kind: a.trigger,
        status_code: a.status_code.map(i32::from),
        error: a.error,
        duration_ms: write_number("webhook attempt duration", a.duration_ms)?,
        response_body: a.response_body,
        next_attempt_at: a.next_attempt_at.map(At::of),
        created: At::of(a.created),
    })
}

/// The change to its subscription's health that `r` says.
fn change_health(conn: &mut AnyConnection, r: &AttemptRecord) -> Result<(), Failure> {
    let at = r.at.naive_utc();
    let sub = webhook_subscriptions::table.filter(webhook_subscriptions::id.eq(&r.subscription_id));
    match &r.subscription {
        None => {}
        Some(SubscriptionChange::Recovered) => {
            diesel::update(sub)
                .set(webhook_subscriptions::failing_since.eq(None::<NaiveDateTime>))
                .execute(conn)?;
        }
        Some(SubscriptionChange::Failing { since }) => {
            diesel::update(sub.filter(webhook_subscriptions::failing_since.is_null()))
                .set(webhook_subscriptions::failing_since.eq(since.naive_utc()))
                .execute(conn)?;
        }
        Some(SubscriptionChange::Disable { reason }) => {
            diesel::update(sub)
                .set((
                    webhook_subscriptions::enabled.eq(false),
                    webhook_subscriptions::disabled_reason.eq(reason),
                    webhook_subscriptions::updated.eq(at),
                ))
                .execute(conn)?;
            cancel_pending(conn, &r.subscription_id, at)?;
        }
    }
    Ok(())
}

/// Deliveries done for good, in the daily totals of their event's flow: their events' cards
/// read in one query per chunk, not one per delivery.
fn count_done(conn: &mut AnyConnection, kept: &[&AttemptRecord]) -> Result<(), Failure> {
    let done: Vec<(&AttemptRecord, bool)> = kept
        .iter()
        .filter(|r| r.delivery_id.is_some())
        .filter_map(|r| match r.next {
            NextStep::Done => Some((*r, true)),
            NextStep::Failed => Some((*r, false)),
            NextStep::RetryAt(_) => None,
        })
        .collect();
    let events: Vec<&str> = done.iter().map(|(r, _)| r.event_id.as_str()).collect();
    let mut cards: HashMap<String, CardOf> = HashMap::with_capacity(events.len());
    for chunk in events.chunks(INSERT_CHUNK) {
        let found: Vec<(String, CardOf)> = analytics_events::table
            .inner_join(card_instances::table)
            .filter(analytics_events::id.eq_any(chunk))
            .select((
                analytics_events::id,
                (
                    card_instances::environment_id,
                    card_instances::flow_id,
                    card_instances::flow_version,
                    card_instances::context,
                    card_instances::created,
                ),
            ))
            .load(conn)?;
        cards.extend(found);
    }
    let mut totals = Totals::default();
    for (r, succeeded) in done {
        if let Some(card) = cards.get(&r.event_id) {
            totals.delivery(card, succeeded, r.at.naive_utc());
        }
    }
    totals.flush(conn)?;
    Ok(())
}
