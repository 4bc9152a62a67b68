//! The kinds found by their ids alone, one range of the primary key a batch: analytics events,
//! webhook deliveries, push jobs and access tokens.

use diesel::prelude::*;
use domain::push::PushJobStatus;
use domain::retention::{PruneBatch, PruneKind};
use domain::webhook::DeliveryStatus;

use super::batch::{
    delete_ids, id_bound, next_of, one, remove_found, rows, with_pending_delivery, Batch,
};
use crate::db::{AnyConnection, Failure};
use crate::millis::At;
use crate::schema::{access_tokens, analytics_events, push_jobs, webhook_deliveries};

fn final_deliveries() -> Vec<&'static str> {
    DeliveryStatus::ALL
        .into_iter()
        .filter(|s| *s != DeliveryStatus::Pending)
        .map(DeliveryStatus::as_str)
        .collect()
}

/// A batch of events: one a pending delivery is still to be built from stays.
pub(super) fn prune_events(conn: &mut AnyConnection, batch: &Batch) -> Result<PruneBatch, Failure> {
    let ids: Vec<String> = analytics_events::table
        .filter(analytics_events::id.lt(id_bound("evt", batch.cutoff)))
        .filter(analytics_events::id.gt(batch.after))
        .filter(analytics_events::created.lt(At(batch.cutoff)))
        .order(analytics_events::id)
        .limit(rows(batch.limit))
        .select(analytics_events::id)
        .load(conn)?;
    let next = next_of(&ids, batch.limit);
    let pending = with_pending_delivery(conn, &ids)?;
    let gone: Vec<String> = ids.into_iter().filter(|e| !pending.contains(e)).collect();
    let n = delete_ids(conn, &gone, batch.dry_run, |c, chunk| {
        diesel::delete(analytics_events::table.filter(analytics_events::id.eq_any(chunk)))
            .execute(c)
    })?;
    Ok(one(PruneKind::Events, n, next))
}

/// A batch of deliveries in a final state.
pub(super) fn prune_deliveries(
    conn: &mut AnyConnection,
    batch: &Batch,
) -> Result<PruneBatch, Failure> {
    let ids: Vec<String> = webhook_deliveries::table
        .filter(webhook_deliveries::id.lt(id_bound("whd", batch.cutoff)))
        .filter(webhook_deliveries::id.gt(batch.after))
        .filter(webhook_deliveries::status.eq_any(final_deliveries()))
        .filter(webhook_deliveries::updated.lt(batch.cutoff))
        .order(webhook_deliveries::id)
        .limit(rows(batch.limit))
        .select(webhook_deliveries::id)
        .load(conn)?;
    remove_found(conn, PruneKind::Deliveries, &ids, batch, |c, chunk| {
        diesel::delete(webhook_deliveries::table.filter(webhook_deliveries::id.eq_any(chunk)))
            .execute(c)
    })
}

/// A batch of push jobs in a final state.
pub(super) fn prune_push_jobs(
    conn: &mut AnyConnection,
    batch: &Batch,
) -> Result<PruneBatch, Failure> {
    let ids: Vec<String> = push_jobs::table
        .filter(push_jobs::id.lt(id_bound("psh", batch.cutoff)))
        .filter(push_jobs::id.gt(batch.after))
        .filter(push_jobs::status.ne(PushJobStatus::Pending.as_str()))
        .filter(push_jobs::updated.lt(batch.cutoff))
        .order(push_jobs::id)
        .limit(rows(batch.limit))
        .select(push_jobs::id)
        .load(conn)?;
    remove_found(conn, PruneKind::PushJobs, &ids, batch, |c, chunk| {
        diesel::delete(push_jobs::table.filter(push_jobs::id.eq_any(chunk))).execute(c)
    })
}

/// A batch of expired access tokens, by hash.
pub(super) fn prune_access_tokens(
    conn: &mut AnyConnection,
    batch: &Batch,
) -> Result<PruneBatch, Failure> {
    let hashes: Vec<String> = access_tokens::table
        .filter(access_tokens::expires.lt(batch.cutoff))
        .filter(access_tokens::token_hash.gt(batch.after))
        .order(access_tokens::token_hash)
        .limit(rows(batch.limit))
        .select(access_tokens::token_hash)
        .load(conn)?;
    remove_found(conn, PruneKind::AccessTokens, &hashes, batch, |c, chunk| {
        diesel::delete(access_tokens::table.filter(access_tokens::token_hash.eq_any(chunk)))
            .execute(c)
    })
}
