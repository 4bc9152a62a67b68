//! The claim of due deliveries: a fair share of each subscription with work, leased, with
//! what their jobs carry (the subscription and the event's data).

use std::collections::{HashMap, HashSet};

use chrono::NaiveDateTime;
use diesel::prelude::*;
use domain::webhook::{DeliveryJob, DeliveryStatus};
use domain::{StorageError, Timestamp};
use serde_json::Value;

use super::pending::pending_subscriptions;
use super::rows::SubscriptionRow;
use super::sealing::open;
use crate::crypto::SecretBox;
use crate::db::{AnyConnection, Failure};
use crate::error::read_number;
use crate::rows::EventRow;
use crate::schema::{analytics_events, webhook_deliveries, webhook_subscriptions};

/// A delivery claimed: id, subscription, event, event name, attempts, trigger.
pub(super) type Claimed = (String, String, String, String, i32, String);

/// What a claim read in its transaction: the deliveries, their subscriptions and their events'
/// data by id.
pub(super) type ClaimRead = (Vec<Claimed>, Vec<SubscriptionRow>, HashMap<String, Value>);

/// How much a claim takes: at most `limit` deliveries, `per_subscription` of each
/// subscription, none of those `exclude`d.
pub(super) struct Share {
    pub(super) per_subscription: u32,
    pub(super) exclude: Vec<String>,
    pub(super) limit: u32,
    /// Which subscription it looks at first.
    pub(super) rotation: usize,
}

/// Inside the claim's transaction: leases the due deliveries of `share` until `lease`, and
/// reads what their jobs need.
pub(super) fn claim_due(
    conn: &mut AnyConnection,
    now: NaiveDateTime,
    lease: NaiveDateTime,
    share: &Share,
) -> Result<ClaimRead, Failure> {
    let with_work = with_work(conn, share)?;
    let claimed = lease_due(conn, &with_work, now, lease, share)?;
    let claimed_subs: HashSet<&String> = claimed.iter().map(|c| &c.1).collect();
    let subs: Vec<SubscriptionRow> = webhook_subscriptions::table
        .filter(webhook_subscriptions::id.eq_any(claimed_subs))
        .select(SubscriptionRow::as_select())
        .load(conn)?;
    let event_ids: Vec<&String> = claimed.iter().map(|c| &c.2).collect();
    let rows: Vec<EventRow> = analytics_events::table
        .filter(analytics_events::id.eq_any(event_ids))
        .select(EventRow::as_select())
        .load(conn)?;
    let events: HashMap<String, Value> = crate::rows::with_cards(conn, rows)?
        .into_iter()
        .map(|e| (e.id.as_str().to_owned(), e.data()))
        .collect();
    Ok((claimed, subs, events))
}

/// Which enabled subscriptions have pending work: a loose index scan, one index probe per such
/// subscription however long its backlog (a dead endpoint's backlog must not slow the claims
/// of healthy ones). Rotated for fairness.
fn with_work(conn: &mut AnyConnection, share: &Share) -> Result<Vec<String>, Failure> {
    let mut with_work: Vec<String> = pending_subscriptions(conn)?
        .into_iter()
        .filter(|s| !share.exclude.contains(s))
        .collect();
    if !with_work.is_empty() {
        let turn = share.rotation % with_work.len();
        with_work.rotate_left(turn);
    }
    let enabled: HashSet<String> = webhook_subscriptions::table
        .filter(webhook_subscriptions::id.eq_any(&with_work))
        .filter(webhook_subscriptions::enabled.eq(true))
        .select(webhook_subscriptions::id)
        .load::<String>(conn)?
        .into_iter()
        .collect();
    with_work.retain(|s| enabled.contains(s));
    Ok(with_work)
}

/// The due deliveries of each subscription of `with_work` in turn, leased until `lease`.
fn lease_due(
    conn: &mut AnyConnection,
    with_work: &[String],
    now: NaiveDateTime,
    lease: NaiveDateTime,
    share: &Share,
) -> Result<Vec<Claimed>, Failure> {
    let mut claimed: Vec<Claimed> = Vec::new();
    for sub_id in with_work {
        let room = i64::from(share.limit) - claimed.len() as i64;
        if room <= 0 {
            break;
        }
        let take = room.min(i64::from(share.per_subscription));
        let due = webhook_deliveries::table
            .filter(webhook_deliveries::status.eq(DeliveryStatus::Pending.as_str()))
            .filter(webhook_deliveries::subscription_id.eq(sub_id))
            .filter(webhook_deliveries::next_attempt_at.le(now))
            .order(webhook_deliveries::next_attempt_at)
            .limit(take)
            .select((
                webhook_deliveries::id,
                webhook_deliveries::subscription_id,
                webhook_deliveries::event_id,
                webhook_deliveries::event_name,
                webhook_deliveries::attempts,
                webhook_deliveries::trigger_kind,
            ));
        // Several processes share PostgreSQL: skip rows another one is claiming.
        let rows: Vec<Claimed> = match &mut *conn {
            AnyConnection::Postgresql(c) => due.for_update().skip_locked().load(c)?,
            AnyConnection::Sqlite(c) => due.load(c)?,
        };
        let ids: Vec<&String> = rows.iter().map(|r| &r.0).collect();
        diesel::update(webhook_deliveries::table.filter(webhook_deliveries::id.eq_any(ids)))
            .set(webhook_deliveries::next_attempt_at.eq(lease))
            .execute(conn)?;
        claimed.extend(rows);
    }
    Ok(claimed)
}

/// The jobs of what a claim read: each delivery with its subscription (secrets opened) and its
/// event's data; one whose subscription or event is gone is left out.
pub(super) fn jobs(
    secrets: &SecretBox,
    (claimed, subs, events): ClaimRead,
    lease_until: Timestamp,
) -> Result<Vec<DeliveryJob>, StorageError> {
    let mut by_id = HashMap::new();
    for row in subs {
        let s = open(secrets, row)?;
        by_id.insert(s.id.as_str().to_owned(), s);
    }
    let mut jobs = Vec::with_capacity(claimed.len());
    for (delivery_id, sub_id, event_id, event_name, attempts, trigger) in claimed {
        let (Some(subscription), Some(data)) = (by_id.get(&sub_id), events.get(&event_id).cloned())
        else {
            continue;
        };
        jobs.push(DeliveryJob {
            delivery_id,
            subscription: subscription.clone(),
            event_id,
            event_name,
            data,
            attempt: read_number::<_, u32>("webhook delivery attempts", attempts)? + 1,
            trigger,
            lease_until,
        });
    }
    Ok(jobs)
}
