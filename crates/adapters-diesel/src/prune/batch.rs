//! What the batches of every kind share: the id bound of a cut-off, the cursor of the next
//! batch, deletes a chunk at a time, and the events a pending delivery still needs.

use std::collections::HashSet;

use chrono::NaiveDateTime;
use diesel::prelude::*;
use domain::retention::{PruneBatch, PruneKind};
use domain::webhook::DeliveryStatus;

use crate::db::{AnyConnection, Failure};
use crate::schema::webhook_deliveries;

/// One batch of a kind, as asked: the rows past `cutoff` after the cursor `after`, at most
/// `limit` of them, removed or (in a dry run) counted.
pub(super) struct Batch<'a> {
    pub(super) cutoff: NaiveDateTime,
    pub(super) after: &'a str,
    pub(super) limit: usize,
    pub(super) dry_run: bool,
}

/// Ids per `IN (...)`.
pub(super) const CHUNK: usize = 500;

const CROCKFORD: &[u8; 32] = b"0123456789abcdefghjkmnpqrstvwxyz";

/// The first id of kind `prefix` minted at `at` or later: `prefix_` and the ULID's time
/// (milliseconds, ten lower-case Crockford base-32 characters); every id minted before sorts
/// below it.
pub(super) fn id_bound(prefix: &str, at: NaiveDateTime) -> String {
    let ms = u64::try_from(at.and_utc().timestamp_millis()).unwrap_or(0) & ((1 << 48) - 1);
    let mut time = [0u8; 10];
    for (i, c) in time.iter_mut().enumerate() {
        let shift = 5 * (9 - i);
        // Masked to 5 bits: an index within the alphabet.
        *c = CROCKFORD[((ms >> shift) & 31) as usize];
    }
    format!("{prefix}_{}", String::from_utf8_lossy(&time))
}

pub(super) fn count(n: usize) -> u64 {
    u64::try_from(n).unwrap_or(u64::MAX)
}

/// A batch's `limit` as a query's `LIMIT`.
pub(super) fn rows(limit: usize) -> i64 {
    i64::try_from(limit).unwrap_or(i64::MAX)
}

/// The next batch's start: the last id looked at, when the batch was full.
pub(super) fn next_of(ids: &[String], limit: usize) -> Option<String> {
    (ids.len() >= limit).then(|| ids.last().cloned()).flatten()
}

/// A batch that removed `n` rows of `kind` alone.
pub(super) fn one(kind: PruneKind, n: u64, next: Option<String>) -> PruneBatch {
    PruneBatch {
        removed: vec![(kind, n)],
        next,
    }
}

/// The events among `events` a pending delivery is still to be built from.
pub(super) fn with_pending_delivery(
    conn: &mut AnyConnection,
    events: &[String],
) -> Result<HashSet<String>, Failure> {
    let mut found = HashSet::new();
    for chunk in events.chunks(CHUNK) {
        let ids: Vec<String> = webhook_deliveries::table
            .filter(webhook_deliveries::status.eq(DeliveryStatus::Pending.as_str()))
            .filter(webhook_deliveries::event_id.eq_any(chunk))
            .select(webhook_deliveries::event_id)
            .load(conn)?;
        found.extend(ids);
    }
    Ok(found)
}

/// The batch of `kind` that found `ids`: removed (or counted) with `delete`, and the next
/// batch's start when it was full.
pub(super) fn remove_found(
    conn: &mut AnyConnection,
    kind: PruneKind,
    ids: &[String],
    batch: &Batch,
    delete: impl FnMut(&mut AnyConnection, &[String]) -> Result<usize, diesel::result::Error>,
) -> Result<PruneBatch, Failure> {
    let next = next_of(ids, batch.limit);
    let n = delete_ids(conn, ids, batch.dry_run, delete)?;
    Ok(one(kind, n, next))
}

/// Removes the rows of `ids` (or counts them, in a dry run) with `delete`, a chunk at a time.
pub(super) fn delete_ids(
    conn: &mut AnyConnection,
    ids: &[String],
    dry_run: bool,
    mut delete: impl FnMut(&mut AnyConnection, &[String]) -> Result<usize, diesel::result::Error>,
) -> Result<u64, Failure> {
    if dry_run {
        return Ok(count(ids.len()));
    }
    let mut n = 0;
    for chunk in ids.chunks(CHUNK) {
        n += count(delete(conn, chunk)?);
    }
    Ok(n)
}
