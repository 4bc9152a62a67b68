//! Closed cards: a batch of them goes, but for those something still reads.

use std::collections::{BTreeMap, HashSet};

use chrono::NaiveDateTime;
use diesel::prelude::*;
use domain::card::{CardStatus, InstanceStatus};
use domain::push::PushJobStatus;
use domain::retention::{PruneBatch, PruneKind};

use super::batch::{delete_ids, id_bound, next_of, rows, with_pending_delivery, Batch, CHUNK};
use crate::db::{AnyConnection, Failure};
use crate::millis::At;
use crate::schema::{analytics_events, card_instances, flow_instances, push_jobs};

/// A closed card found: (id, environment, flow instance).
type Found = (String, String, String);

fn closed_cards() -> Vec<&'static str> {
    CardStatus::ALL
        .into_iter()
        .filter(|s| s.is_closed())
        .map(CardStatus::as_str)
        .collect()
}

/// A batch of closed cards: those with a pending push job, or an event a pending delivery is
/// still to be built from (its outcome is counted through the card), stay. (Their push jobs
/// in a final state go by the deliveries' retention.)
pub(super) fn prune_cards(conn: &mut AnyConnection, batch: &Batch) -> Result<PruneBatch, Failure> {
    let found = closed_before(conn, batch.cutoff, batch.after, batch.limit)?;
    let ids: Vec<String> = found.iter().map(|(id, _, _)| id.clone()).collect();
    let next = next_of(&ids, batch.limit);
    let mut kept = HashSet::new();
    of_waiting_instances(conn, &found, &mut kept)?;
    still_sending(conn, &ids, &mut kept)?;
    let mut by_env: BTreeMap<String, Vec<String>> = Default::default();
    for (id, env, _) in found {
        if !kept.contains(&id) {
            by_env.entry(env).or_default().push(id);
        }
    }
    let mut cards = 0u64;
    for ids in by_env.values() {
        cards += delete_ids(conn, ids, batch.dry_run, |c, chunk| {
            diesel::delete(card_instances::table.filter(card_instances::id.eq_any(chunk)))
                .execute(c)
        })?;
    }
    Ok(PruneBatch {
        removed: vec![(PruneKind::Cards, cards)],
        next,
    })
}

/// Up to `limit` cards after `after`, minted and closed before `cutoff`, in id order.
fn closed_before(
    conn: &mut AnyConnection,
    cutoff: NaiveDateTime,
    after: &str,
    limit: usize,
) -> Result<Vec<Found>, Failure> {
    Ok(card_instances::table
        .filter(card_instances::id.lt(id_bound("crd", cutoff)))
        .filter(card_instances::id.gt(after))
        .filter(card_instances::status.eq_any(closed_cards()))
        .filter(card_instances::updated.lt(At(cutoff)))
        .order(card_instances::id)
        .limit(rows(limit))
        .select((
            card_instances::id,
            card_instances::environment_id,
            card_instances::flow_instance_id,
        ))
        .load(conn)?)
}

/// Adds to `kept` the cards of `found` whose instance still waits: a `wait-for-card` step may
/// yet read how it closed.
fn of_waiting_instances(
    conn: &mut AnyConnection,
    found: &[Found],
    kept: &mut HashSet<String>,
) -> Result<(), Failure> {
    let mut by_env_instances: BTreeMap<&str, Vec<&str>> = Default::default();
    for (_, env, instance) in found {
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
            let waiting: HashSet<String> = waiting.into_iter().collect();
            kept.extend(
                found
                    .iter()
                    .filter(|(_, e, i)| e == env && waiting.contains(i))
                    .map(|(id, _, _)| id.clone()),
            );
        }
    }
    Ok(())
}

/// Adds to `kept` the cards of `ids` with a pending push job, or with an event a pending
/// delivery is still to be built from.
fn still_sending(
    conn: &mut AnyConnection,
    ids: &[String],
    kept: &mut HashSet<String>,
) -> Result<(), Failure> {
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
    Ok(())
}
