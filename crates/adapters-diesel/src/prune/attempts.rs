//! The attempt log of webhook deliveries, one subscription at a time.

use std::collections::{BTreeMap, HashSet};

use diesel::prelude::*;
use domain::retention::{PruneBatch, PruneKind};
use domain::webhook::DeliveryStatus;

use super::batch::{delete_ids, id_bound, Batch, CHUNK};
use crate::db::{AnyConnection, Failure};
use crate::millis::At;
use crate::schema::{webhook_attempts, webhook_deliveries, webhook_subscriptions};

/// The attempt log past `cutoff`, one subscription at a time: SQLite's table is keyed by
/// (subscription, id) alone (migration `20261126000061_attempts_by_subscription`), so each
/// read and delete names the subscription. The cursor is `"{subscription} {attempt}"`; ids
/// hold no space.
pub(super) fn prune_attempts(
    conn: &mut AnyConnection,
    batch: &Batch,
) -> Result<PruneBatch, Failure> {
    let (sub_after, id_after) = batch.after.split_once(' ').unwrap_or(("", ""));
    let subscriptions: Vec<String> = webhook_subscriptions::table
        .filter(webhook_subscriptions::id.ge(sub_after))
        .order(webhook_subscriptions::id)
        .select(webhook_subscriptions::id)
        .load(conn)?;
    let bound = id_bound("wha", batch.cutoff);
    // (subscription, attempt, delivery).
    let mut found: Vec<(String, String, Option<String>)> = Vec::new();
    for sub in subscriptions {
        let left = batch.limit.saturating_sub(found.len());
        if left == 0 {
            break;
        }
        let from = if sub == sub_after { id_after } else { "" };
        let rows: Vec<(String, Option<String>)> = webhook_attempts::table
            .filter(webhook_attempts::subscription_id.eq(&sub))
            .filter(webhook_attempts::id.gt(from))
            .filter(webhook_attempts::id.lt(&bound))
            .filter(webhook_attempts::created.lt(At(batch.cutoff)))
            .order(webhook_attempts::id)
            .limit(i64::try_from(left).unwrap_or(i64::MAX))
            .select((webhook_attempts::id, webhook_attempts::delivery_id))
            .load(conn)?;
        found.extend(rows.into_iter().map(|(id, d)| (sub.clone(), id, d)));
    }
    let next = (found.len() >= batch.limit)
        .then(|| found.last().map(|(sub, id, _)| format!("{sub} {id}")))
        .flatten();
    // The log of a delivery still being retried stays with it.
    let deliveries: Vec<String> = found.iter().filter_map(|(_, _, d)| d.clone()).collect();
    let mut live = HashSet::new();
    for chunk in deliveries.chunks(CHUNK) {
        let pending: Vec<String> = webhook_deliveries::table
            .filter(webhook_deliveries::id.eq_any(chunk))
            .filter(webhook_deliveries::status.eq(DeliveryStatus::Pending.as_str()))
            .select(webhook_deliveries::id)
            .load(conn)?;
        live.extend(pending);
    }
    let mut gone: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (sub, id, delivery) in found {
        if delivery.as_ref().is_none_or(|d| !live.contains(d)) {
            gone.entry(sub).or_default().push(id);
        }
    }
    let mut n = 0;
    for (sub, ids) in &gone {
        n += delete_ids(conn, ids, batch.dry_run, |c, chunk| {
            diesel::delete(
                webhook_attempts::table
                    .filter(webhook_attempts::subscription_id.eq(sub))
                    .filter(webhook_attempts::id.eq_any(chunk)),
            )
            .execute(c)
        })?;
    }
    Ok(PruneBatch {
        removed: vec![(PruneKind::Attempts, n)],
        next,
    })
}
