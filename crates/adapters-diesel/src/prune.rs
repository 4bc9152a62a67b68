//! Pruning (contract §14, [`PruneRepository`]): the rows a cut-off reaches, in transactions of
//! at most a batch of rows, with what only they use; and SQLite's incremental vacuum.
//!
//! Cards, events, deliveries, attempts and push jobs are found by their ids, which start
//! with the time they were minted (a ULID after the kind's prefix): the ids minted before the
//! cut-off are one range of the primary key, and the row's own time and status decide within
//! it. A batch starts after the last id the batch before looked at, so rows kept (an open
//! card, an event a pending delivery is still to be built from) are looked at once per pass.
//! Final invocations, whose ids a caller may choose, are found through the partial index
//! `invocations_ended`, a batch after the last one the batch before looked at; one with a card
//! of an active instance that can still be cancelled stays (cancel tasks find a flow's cards
//! through its invocations).

use std::collections::BTreeMap;

use async_trait::async_trait;
use chrono::NaiveDateTime;
use diesel::prelude::*;
use domain::bulk::BulkStatus;
use domain::card::{CardStatus, InstanceStatus};
use domain::push::PushJobStatus;
use domain::retention::{PruneBatch, PruneKind, PruneRepository};
use domain::trigger::InvocationStatus;
use domain::webhook::DeliveryStatus;
use domain::{StorageError, Timestamp};

use crate::db::{AnyConnection, Backend, Database, Failure};
use crate::millis::At;
use crate::schema::{
    access_tokens, analytics_events, bulk_chunks, bulk_tasks, card_instances, flow_instances,
    instance_counts, invocations, leases, push_jobs, webhook_attempts, webhook_deliveries,
    webhook_subscriptions,
};

/// The one lease of pruning.
const LEASE: &str = "pruner";
/// Ids per `IN (...)`.
const CHUNK: usize = 500;
/// Pages one `PRAGMA incremental_vacuum` frees (4 KiB each): a writer waits at most for so
/// many.
const VACUUM_PAGES: u32 = 2_048;

/// The condition of the partial index `invocations_ended`, written literally (a bound status
/// cannot choose a partial index).
static ENDED: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
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

/// Pruning on diesel.
#[derive(Clone)]
pub struct DieselPruneRepository {
    db: Database,
}

impl DieselPruneRepository {
    /// Over `db`.
    pub fn new(db: Database) -> Self {
        DieselPruneRepository { db }
    }
}

const CROCKFORD: &[u8; 32] = b"0123456789abcdefghjkmnpqrstvwxyz";

/// The first id of kind `prefix` minted at `at` or later: `prefix_` and the ULID's time
/// (milliseconds, ten lower-case Crockford base-32 characters); every id minted before sorts
/// below it.
pub(crate) fn id_bound(prefix: &str, at: NaiveDateTime) -> String {
    let ms = u64::try_from(at.and_utc().timestamp_millis()).unwrap_or(0) & ((1 << 48) - 1);
    let mut time = [0u8; 10];
    for (i, c) in time.iter_mut().enumerate() {
        let shift = 5 * (9 - i);
        // Masked to 5 bits: an index within the alphabet.
        *c = CROCKFORD[((ms >> shift) & 31) as usize];
    }
    format!("{prefix}_{}", String::from_utf8_lossy(&time))
}

fn closed_cards() -> Vec<&'static str> {
    CardStatus::ALL
        .into_iter()
        .filter(|s| s.is_closed())
        .map(CardStatus::as_str)
        .collect()
}

fn final_deliveries() -> Vec<&'static str> {
    DeliveryStatus::ALL
        .into_iter()
        .filter(|s| *s != DeliveryStatus::Pending)
        .map(DeliveryStatus::as_str)
        .collect()
}

fn final_bulk() -> [&'static str; 2] {
    [BulkStatus::Completed.as_str(), BulkStatus::Failed.as_str()]
}

fn count(n: usize) -> u64 {
    u64::try_from(n).unwrap_or(u64::MAX)
}

/// The next batch's start: the last id looked at, when the batch was full.
fn next_of(ids: &[String], limit: usize) -> Option<String> {
    (ids.len() >= limit).then(|| ids.last().cloned()).flatten()
}

/// The events among `events` a pending delivery is still to be built from.
fn with_pending_delivery(
    conn: &mut AnyConnection,
    events: &[String],
) -> Result<std::collections::HashSet<String>, Failure> {
    let mut found = std::collections::HashSet::new();
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

/// A batch of closed cards: those with a pending push job, or an event a pending delivery is
/// still to be built from (its outcome is counted through the card), stay. (Their push jobs
/// in a final state go by the deliveries' retention.)
fn prune_cards(
    conn: &mut AnyConnection,
    cutoff: NaiveDateTime,
    after: &str,
    limit: usize,
    dry_run: bool,
) -> Result<PruneBatch, Failure> {
    let found: Vec<(String, String, String)> = card_instances::table
        .filter(card_instances::id.lt(id_bound("crd", cutoff)))
        .filter(card_instances::id.gt(after))
        .filter(card_instances::status.eq_any(closed_cards()))
        .filter(card_instances::updated.lt(At(cutoff)))
        .order(card_instances::id)
        .limit(i64::try_from(limit).unwrap_or(i64::MAX))
        .select((
            card_instances::id,
            card_instances::environment_id,
            card_instances::flow_instance_id,
        ))
        .load(conn)?;
    let ids: Vec<String> = found.iter().map(|(id, _, _)| id.clone()).collect();
    let next = next_of(&ids, limit);
    let mut kept = std::collections::HashSet::new();
    // A card of an instance that still waits stays: a `wait-for-card` step may yet read how it
    // closed.
    let mut by_env_instances: std::collections::BTreeMap<&str, Vec<&str>> = Default::default();
    for (_, env, instance) in &found {
        by_env_instances
            .entry(env.as_str())
            .or_default()
            .push(instance.as_str());
    }
    for (env, instances) in by_env_instances {
        for chunk in instances.chunks(CHUNK) {
            let waiting: Vec<String> = flow_instances::table
                .filter(flow_instances::environment_id.eq(env))
                .filter(flow_instances::id.eq_any(chunk))
                .filter(flow_instances::status.eq(InstanceStatus::Active.as_str()))
                .select(flow_instances::id)
                .load(conn)?;
            let waiting: std::collections::HashSet<String> = waiting.into_iter().collect();
            kept.extend(
                found
                    .iter()
                    .filter(|(_, e, i)| e == env && waiting.contains(i))
                    .map(|(id, _, _)| id.clone()),
            );
        }
    }
    for chunk in ids.chunks(CHUNK) {
        let pushing: Vec<String> = push_jobs::table
            .filter(push_jobs::status.eq(PushJobStatus::Pending.as_str()))
            .filter(push_jobs::card_instance_id.eq_any(chunk))
            .select(push_jobs::card_instance_id)
            .load(conn)?;
        kept.extend(pushing);
        let events: Vec<(String, String)> = analytics_events::table
            .filter(analytics_events::card_instance_id.eq_any(chunk))
            .select((analytics_events::id, analytics_events::card_instance_id))
            .load(conn)?;
        let event_ids: Vec<String> = events.iter().map(|(e, _)| e.clone()).collect();
        let pending = with_pending_delivery(conn, &event_ids)?;
        kept.extend(
            events
                .into_iter()
                .filter(|(e, _)| pending.contains(e))
                .map(|(_, card)| card),
        );
    }
    let mut by_env: std::collections::BTreeMap<String, Vec<String>> = Default::default();
    for (id, env, _) in found {
        if !kept.contains(&id) {
            by_env.entry(env).or_default().push(id);
        }
    }
    let mut cards = 0u64;
    for ids in by_env.values() {
        cards += delete_ids(conn, ids, dry_run, |c, chunk| {
            diesel::delete(card_instances::table.filter(card_instances::id.eq_any(chunk)))
                .execute(c)
        })?;
    }
    Ok(PruneBatch {
        removed: vec![(PruneKind::Cards, cards)],
        next,
    })
}

/// Removes the rows of `ids` (or counts them, in a dry run) with `delete`, a chunk at a time.
fn delete_ids(
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

/// The attempt log past `cutoff`, one subscription at a time: SQLite's table is keyed by
/// (subscription, id) alone (migration `20261126000061_attempts_by_subscription`), so each
/// read and delete names the subscription. The cursor is `"{subscription} {attempt}"`; ids
/// hold no space.
fn prune_attempts(
    conn: &mut AnyConnection,
    cutoff: NaiveDateTime,
    after: &str,
    limit: usize,
    dry_run: bool,
) -> Result<PruneBatch, Failure> {
    let (sub_after, id_after) = after.split_once(' ').unwrap_or(("", ""));
    let subscriptions: Vec<String> = webhook_subscriptions::table
        .filter(webhook_subscriptions::id.ge(sub_after))
        .order(webhook_subscriptions::id)
        .select(webhook_subscriptions::id)
        .load(conn)?;
    let bound = id_bound("wha", cutoff);
    // (subscription, attempt, delivery).
    let mut found: Vec<(String, String, Option<String>)> = Vec::new();
    for sub in subscriptions {
        let left = limit.saturating_sub(found.len());
        if left == 0 {
            break;
        }
        let from = if sub == sub_after { id_after } else { "" };
        let rows: Vec<(String, Option<String>)> = webhook_attempts::table
            .filter(webhook_attempts::subscription_id.eq(&sub))
            .filter(webhook_attempts::id.gt(from))
            .filter(webhook_attempts::id.lt(&bound))
            .filter(webhook_attempts::created.lt(At(cutoff)))
            .order(webhook_attempts::id)
            .limit(i64::try_from(left).unwrap_or(i64::MAX))
            .select((webhook_attempts::id, webhook_attempts::delivery_id))
            .load(conn)?;
        found.extend(rows.into_iter().map(|(id, d)| (sub.clone(), id, d)));
    }
    let next = (found.len() >= limit)
        .then(|| found.last().map(|(sub, id, _)| format!("{sub} {id}")))
        .flatten();
    // The log of a delivery still being retried stays with it.
    let deliveries: Vec<String> = found.iter().filter_map(|(_, _, d)| d.clone()).collect();
    let mut live = std::collections::HashSet::new();
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
        n += delete_ids(conn, ids, dry_run, |c, chunk| {
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

fn prune(
    conn: &mut AnyConnection,
    kind: PruneKind,
    cutoff: NaiveDateTime,
    after: Option<String>,
    limit: usize,
    dry_run: bool,
) -> Result<PruneBatch, Failure> {
    let after = after.unwrap_or_default();
    let rows = i64::try_from(limit).unwrap_or(i64::MAX);
    let one = |n: u64, next: Option<String>| PruneBatch {
        removed: vec![(kind, n)],
        next,
    };
    match kind {
        PruneKind::Cards => prune_cards(conn, cutoff, &after, limit, dry_run),
        PruneKind::Events => {
            let ids: Vec<String> = analytics_events::table
                .filter(analytics_events::id.lt(id_bound("evt", cutoff)))
                .filter(analytics_events::id.gt(&after))
                .filter(analytics_events::created.lt(At(cutoff)))
                .order(analytics_events::id)
                .limit(rows)
                .select(analytics_events::id)
                .load(conn)?;
            let next = next_of(&ids, limit);
            let pending = with_pending_delivery(conn, &ids)?;
            let gone: Vec<String> = ids.into_iter().filter(|e| !pending.contains(e)).collect();
            let n = delete_ids(conn, &gone, dry_run, |c, chunk| {
                diesel::delete(analytics_events::table.filter(analytics_events::id.eq_any(chunk)))
                    .execute(c)
            })?;
            Ok(one(n, next))
        }
        PruneKind::Deliveries => {
            let ids: Vec<String> = webhook_deliveries::table
                .filter(webhook_deliveries::id.lt(id_bound("whd", cutoff)))
                .filter(webhook_deliveries::id.gt(&after))
                .filter(webhook_deliveries::status.eq_any(final_deliveries()))
                .filter(webhook_deliveries::updated.lt(cutoff))
                .order(webhook_deliveries::id)
                .limit(rows)
                .select(webhook_deliveries::id)
                .load(conn)?;
            let next = next_of(&ids, limit);
            let n = delete_ids(conn, &ids, dry_run, |c, chunk| {
                diesel::delete(
                    webhook_deliveries::table.filter(webhook_deliveries::id.eq_any(chunk)),
                )
                .execute(c)
            })?;
            Ok(one(n, next))
        }
        PruneKind::Attempts => prune_attempts(conn, cutoff, &after, limit, dry_run),
        PruneKind::PushJobs => {
            let ids: Vec<String> = push_jobs::table
                .filter(push_jobs::id.lt(id_bound("psh", cutoff)))
                .filter(push_jobs::id.gt(&after))
                .filter(push_jobs::status.ne(PushJobStatus::Pending.as_str()))
                .filter(push_jobs::updated.lt(cutoff))
                .order(push_jobs::id)
                .limit(rows)
                .select(push_jobs::id)
                .load(conn)?;
            let next = next_of(&ids, limit);
            let n = delete_ids(conn, &ids, dry_run, |c, chunk| {
                diesel::delete(push_jobs::table.filter(push_jobs::id.eq_any(chunk))).execute(c)
            })?;
            Ok(one(n, next))
        }
        PruneKind::Invocations => {
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
            if dry_run {
                let n: i64 = invocations::table
                    .filter(ended())
                    .filter(invocations::updated.lt(At(cutoff)))
                    .filter(diesel::dsl::not(cancellable()))
                    .filter(diesel::dsl::not(waiting()))
                    .count()
                    .get_result(conn)?;
                return Ok(one(u64::try_from(n).unwrap_or(0), None));
            }
            // In the order (time ended, environment, id), after the last one the batch before
            // looked at (`[microseconds, environment, id]`; a pass starts with an empty one,
            // read as the front), so that an invocation kept is looked at once a pass.
            let mut found = invocations::table
                .filter(ended())
                .filter(invocations::updated.lt(At(cutoff)))
                .order((
                    invocations::updated,
                    invocations::environment_id,
                    invocations::id,
                ))
                .limit(rows)
                .select((
                    invocations::environment_id,
                    invocations::id,
                    invocations::updated,
                    cancellable().or(waiting()),
                ))
                .into_boxed();
            let from = serde_json::from_str::<(i64, String, String)>(&after)
                .ok()
                .and_then(|(micros, env, id)| {
                    Some((
                        chrono::DateTime::from_timestamp_micros(micros)?.naive_utc(),
                        env,
                        id,
                    ))
                });
            if let Some((ended_at, env, id)) = from {
                found = found.filter(invocations::updated.ge(At(ended_at))).filter(
                    invocations::updated
                        .gt(At(ended_at))
                        .or(invocations::updated.eq(At(ended_at)).and(
                            invocations::environment_id.gt(env.clone()).or(
                                invocations::environment_id
                                    .eq(env)
                                    .and(invocations::id.gt(id)),
                            ),
                        )),
                );
            }
            let found: Vec<(String, String, NaiveDateTime, bool)> = found.load(conn)?;
            let next =
                found
                    .last()
                    .filter(|_| found.len() >= limit)
                    .map(|(env, id, ended_at, _)| {
                        serde_json::json!([ended_at.and_utc().timestamp_micros(), env, id])
                            .to_string()
                    });
            let mut by_env: std::collections::BTreeMap<String, Vec<String>> = Default::default();
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
            Ok(one(n, next))
        }
        PruneKind::BulkRows => {
            // The rows of a finished task, a batch at a time, in row order.
            let tasks: Vec<i64> = bulk_tasks::table
                .filter(bulk_tasks::status.eq_any(final_bulk()))
                .filter(bulk_tasks::id.gt(after.parse::<i64>().unwrap_or(0)))
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
                    .limit(rows)
                    .select(bulk_chunks::last_row)
                    .load(conn)?;
                let Some(last) = chunks.last() else {
                    continue;
                };
                if dry_run {
                    let all: i64 = bulk_chunks::table
                        .filter(bulk_chunks::task_id.eq(task))
                        .count()
                        .get_result(conn)?;
                    n += u64::try_from(all).unwrap_or(0);
                    // One task per batch: the next starts after it.
                    return Ok(one(n, Some(task.to_string())));
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
                return Ok(one(n, Some(task.saturating_sub(1).to_string())));
            }
            Ok(one(n, None))
        }
        PruneKind::BulkTasks => {
            let ids: Vec<i64> = bulk_tasks::table
                .filter(bulk_tasks::status.eq_any(final_bulk()))
                .filter(bulk_tasks::updated.lt(cutoff))
                .filter(bulk_tasks::id.gt(after.parse::<i64>().unwrap_or(0)))
                .order(bulk_tasks::id)
                .limit(rows)
                .select(bulk_tasks::id)
                .load(conn)?;
            let next = (ids.len() >= limit)
                .then(|| ids.last().map(i64::to_string))
                .flatten();
            let mut n = 0;
            for id in ids {
                let left: i64 = bulk_chunks::table
                    .filter(bulk_chunks::task_id.eq(id))
                    .count()
                    .get_result(conn)?;
                if dry_run {
                    n += 1;
                    continue;
                }
                // Its rows go first (bulk_chunks), a batch at a time; a task with rows left
                // waits for the next pass.
                if left == 0 {
                    n += count(
                        diesel::delete(bulk_tasks::table.filter(bulk_tasks::id.eq(id)))
                            .execute(conn)?,
                    );
                }
            }
            Ok(one(n, next))
        }
        PruneKind::AccessTokens => {
            let hashes: Vec<String> = access_tokens::table
                .filter(access_tokens::expires.lt(cutoff))
                .filter(access_tokens::token_hash.gt(&after))
                .order(access_tokens::token_hash)
                .limit(rows)
                .select(access_tokens::token_hash)
                .load(conn)?;
            let next = next_of(&hashes, limit);
            let n = delete_ids(conn, &hashes, dry_run, |c, chunk| {
                diesel::delete(access_tokens::table.filter(access_tokens::token_hash.eq_any(chunk)))
                    .execute(c)
            })?;
            Ok(one(n, next))
        }
    }
}

#[async_trait]
impl PruneRepository for DieselPruneRepository {
    async fn lease(
        &self,
        holder: &str,
        now: Timestamp,
        until: Timestamp,
    ) -> Result<bool, StorageError> {
        let (holder, now, until) = (holder.to_owned(), now.naive_utc(), until.naive_utc());
        self.db
            .transaction(move |conn| {
                let renewed = diesel::update(
                    leases::table
                        .filter(leases::name.eq(LEASE))
                        .filter(leases::holder.eq(&holder).or(leases::until.lt(now))),
                )
                .set((leases::holder.eq(&holder), leases::until.eq(until)))
                .execute(conn)?;
                if renewed == 1 {
                    return Ok(true);
                }
                let row = (
                    leases::name.eq(LEASE),
                    leases::holder.eq(&holder),
                    leases::until.eq(until),
                );
                let inserted = crate::per_backend!(conn, c => diesel::insert_into(leases::table)
                    .values(row)
                    .on_conflict_do_nothing()
                    .execute(c)?);
                Ok(inserted == 1)
            })
            .await
    }

    async fn prune(
        &self,
        kind: PruneKind,
        cutoff: Timestamp,
        after: Option<String>,
        limit: u32,
        dry_run: bool,
    ) -> Result<PruneBatch, StorageError> {
        let cutoff = cutoff.naive_utc();
        let limit = usize::try_from(limit.clamp(1, 10_000)).unwrap_or(1_000);
        if dry_run {
            self.db
                .run(move |conn| prune(conn, kind, cutoff, after, limit, true))
                .await
        } else {
            self.db
                .transaction(move |conn| prune(conn, kind, cutoff, after, limit, false))
                .await
        }
    }

    async fn compact(&self) -> Result<(), StorageError> {
        if self.db.backend() != Backend::Sqlite {
            return Ok(());
        }
        // A step at a time, each its own write, until no free page is left.
        loop {
            let free = self
                .db
                .write(move |conn| {
                    #[derive(diesel::QueryableByName)]
                    struct Free {
                        #[diesel(sql_type = diesel::sql_types::BigInt)]
                        freelist_count: i64,
                    }
                    diesel::sql_query(format!("PRAGMA incremental_vacuum({VACUUM_PAGES})"))
                        .execute(conn)?;
                    let left: Free = diesel::sql_query("PRAGMA freelist_count").get_result(conn)?;
                    Ok(left.freelist_count)
                })
                .await?;
            if free <= 0 {
                return Ok(());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_id_bound_sorts_above_every_id_minted_before() {
        let at = |ms: i64| {
            chrono::DateTime::from_timestamp_millis(ms)
                .expect("time")
                .naive_utc()
        };
        assert_eq!(id_bound("crd", at(0)), "crd_0000000000");
        assert_eq!(id_bound("crd", at(1)), "crd_0000000001");
        assert_eq!(id_bound("crd", at(32)), "crd_0000000010");
        // A ULID's time is its first ten characters: an id of the millisecond before sorts
        // below, whatever its random part; one of the same millisecond above.
        let bound = id_bound("evt", at(1_764_000_000_000));
        let mut before = id_bound("evt", at(1_763_999_999_999));
        before.push_str("zzzzzzzzzzzzzzzz");
        let mut same = bound.clone();
        same.push_str("0000000000000000");
        assert!(before < bound && same > bound);
        assert_eq!(&*ENDED, "status IN ('completed', 'failed', 'cancelled')");
    }
}
