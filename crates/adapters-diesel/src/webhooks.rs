//! Webhook subscriptions, the delivery outbox and the attempt log.
//!
//! [`enqueue`] is called by every transaction that appends analytics events, so an event and
//! its deliveries commit together. Secrets are sealed with [`SecretBox`] on write.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use async_trait::async_trait;
use chrono::NaiveDateTime;
use diesel::prelude::*;
use domain::id::{new_id, IdKind};
use domain::webhook::{
    Attempt, AttemptRecord, DeliveryJob, DeliveryStatus, NextStep, Subscription,
    SubscriptionChange, WebhookRepository,
};
use domain::{Page, PageRequest, StorageError, Timestamp};
use serde_json::Value;

use crate::crypto::SecretBox;
use crate::db::{AnyConnection, Database, Failure};
use crate::error::{read_number, write_number};
use crate::millis::At;
use crate::rows::EventRow;
use crate::schema::{
    analytics_events, card_instances, webhook_attempts, webhook_deliveries, webhook_subscriptions,
};
use crate::totals::{CardOf, Totals};

mod enqueue;
mod pending;
mod rows;
mod sealing;
pub(crate) use enqueue::enqueue;
#[cfg(test)]
pub(crate) use enqueue::subscriptions_of;
use pending::pending_subscriptions;
use rows::{AttemptRow, DeliveryRow, SubscriptionRow, INSERT_CHUNK};
use sealing::{open, seal};

/// The domain's `WebhookRepository` port on the service's database.
pub struct DieselWebhookRepository {
    db: Database,
    secrets: Arc<SecretBox>,
    /// Which subscription a claim looks at first, so none is always last.
    rotation: std::sync::atomic::AtomicUsize,
}

impl DieselWebhookRepository {
    /// Over `db`, with `secrets` sealing what it stores secret.
    pub fn new(db: Database, secrets: Arc<SecretBox>) -> Self {
        Self {
            db,
            secrets,
            rotation: Default::default(),
        }
    }

    /// Seals the custom header values of subscriptions written before they were sealed
    /// (contract §16); run at start. Each row is changed only if it still holds what was read,
    /// so a process writing the same row meanwhile wins. Returns how many were sealed.
    pub async fn seal_plain_headers(&self) -> Result<usize, StorageError> {
        sealing::seal_plain_headers(&self.db, &self.secrets).await
    }
}

fn attempt(row: AttemptRow) -> Result<Attempt, StorageError> {
    Ok(Attempt {
        id: row.id,
        subscription_id: row.subscription_id,
        event_id: row.event_id,
        event_name: row.event_name,
        attempt: read_number("webhook attempt number", row.attempt)?,
        trigger: row.trigger_kind,
        status_code: row
            .status_code
            .map(|s| read_number("webhook attempt status code", s))
            .transpose()?,
        error: row.error,
        duration_ms: read_number("webhook attempt duration", row.duration_ms)?,
        response_body: row.response_body,
        next_attempt_at: row.next_attempt_at.map(At::utc),
        created: row.created.utc(),
    })
}

fn load_subscription(
    conn: &mut AnyConnection,
    env: &str,
    id: &str,
) -> Result<Option<SubscriptionRow>, Failure> {
    Ok(webhook_subscriptions::table
        .filter(webhook_subscriptions::environment_id.eq(env))
        .filter(webhook_subscriptions::id.eq(id))
        .select(SubscriptionRow::as_select())
        .first(conn)
        .optional()?)
}

/// Cancels what is still queued for a subscription (it was disabled).
fn cancel_pending(conn: &mut AnyConnection, id: &str, now: NaiveDateTime) -> Result<(), Failure> {
    diesel::update(
        webhook_deliveries::table
            .filter(webhook_deliveries::subscription_id.eq(id))
            .filter(webhook_deliveries::status.eq(DeliveryStatus::Pending.as_str())),
    )
    .set((
        webhook_deliveries::status.eq(DeliveryStatus::Cancelled.as_str()),
        webhook_deliveries::updated.eq(now),
    ))
    .execute(conn)?;
    Ok(())
}

#[async_trait]
impl WebhookRepository for DieselWebhookRepository {
    async fn create(&self, subscription: &Subscription, limit: u32) -> Result<bool, StorageError> {
        let row = seal(&self.secrets, subscription)?;
        self.db
            .transaction(move |conn| {
                let count: i64 = webhook_subscriptions::table
                    .filter(webhook_subscriptions::environment_id.eq(&row.environment_id))
                    .count()
                    .get_result(conn)?;
                if count >= i64::from(limit) {
                    return Ok(false);
                }
                diesel::insert_into(webhook_subscriptions::table)
                    .values(&row)
                    .execute(conn)?;
                Ok(true)
            })
            .await
    }

    async fn get(
        &self,
        environment_id: &str,
        id: &str,
    ) -> Result<Option<Subscription>, StorageError> {
        let (env, id) = (environment_id.to_owned(), id.to_owned());
        let row = self
            .db
            .run(move |conn| load_subscription(conn, &env, &id))
            .await?;
        row.map(|r| open(&self.secrets, r)).transpose()
    }

    async fn list(&self, environment_id: &str) -> Result<Vec<Subscription>, StorageError> {
        let env = environment_id.to_owned();
        let rows: Vec<SubscriptionRow> = self
            .db
            .run(move |conn| {
                Ok(webhook_subscriptions::table
                    .filter(webhook_subscriptions::environment_id.eq(env))
                    .order(webhook_subscriptions::id)
                    .select(SubscriptionRow::as_select())
                    .load(conn)?)
            })
            .await?;
        rows.into_iter().map(|r| open(&self.secrets, r)).collect()
    }

    async fn update(&self, subscription: &Subscription) -> Result<(), StorageError> {
        let row = seal(&self.secrets, subscription)?;
        self.db
            .transaction(move |conn| {
                diesel::update(
                    webhook_subscriptions::table
                        .filter(webhook_subscriptions::environment_id.eq(&row.environment_id))
                        .filter(webhook_subscriptions::id.eq(&row.id)),
                )
                .set(&row)
                .execute(conn)?;
                if !row.enabled {
                    cancel_pending(conn, &row.id, row.updated)?;
                }
                Ok(())
            })
            .await
    }

    async fn edit(&self, subscription: &Subscription) -> Result<(), StorageError> {
        let row = seal(&self.secrets, subscription)?;
        self.db
            .run(move |conn| {
                diesel::update(
                    webhook_subscriptions::table
                        .filter(webhook_subscriptions::environment_id.eq(&row.environment_id))
                        .filter(webhook_subscriptions::id.eq(&row.id)),
                )
                .set((
                    webhook_subscriptions::url.eq(&row.url),
                    webhook_subscriptions::method.eq(&row.method),
                    webhook_subscriptions::headers.eq(&row.headers),
                    webhook_subscriptions::types.eq(&row.types),
                    webhook_subscriptions::card_template_id.eq(&row.card_template_id),
                    webhook_subscriptions::flow_id.eq(&row.flow_id),
                    webhook_subscriptions::description.eq(&row.description),
                    webhook_subscriptions::updated.eq(row.updated),
                ))
                .execute(conn)?;
                Ok(())
            })
            .await
    }

    async fn delete(&self, environment_id: &str, id: &str) -> Result<bool, StorageError> {
        let (env, id) = (environment_id.to_owned(), id.to_owned());
        self.db
            .transaction(move |conn| {
                if load_subscription(conn, &env, &id)?.is_none() {
                    return Ok(false);
                }
                diesel::delete(
                    webhook_attempts::table.filter(webhook_attempts::subscription_id.eq(&id)),
                )
                .execute(conn)?;
                diesel::delete(
                    webhook_deliveries::table.filter(webhook_deliveries::subscription_id.eq(&id)),
                )
                .execute(conn)?;
                diesel::delete(
                    webhook_subscriptions::table.filter(webhook_subscriptions::id.eq(&id)),
                )
                .execute(conn)?;
                Ok(true)
            })
            .await
    }

    async fn attempts(
        &self,
        environment_id: &str,
        subscription_id: &str,
        page: PageRequest,
    ) -> Result<Page<Attempt>, StorageError> {
        let (env, id) = (environment_id.to_owned(), subscription_id.to_owned());
        let limit = page.limit;
        let rows: Vec<AttemptRow> = self
            .db
            .run(move |conn| {
                // An attempt's environment is its subscription's.
                let owned = webhook_subscriptions::table
                    .filter(webhook_subscriptions::environment_id.eq(env))
                    .filter(webhook_subscriptions::id.eq(id))
                    .select(webhook_subscriptions::id);
                let mut q = webhook_attempts::table
                    .filter(webhook_attempts::subscription_id.eq_any(owned))
                    .select(AttemptRow::as_select())
                    .order(webhook_attempts::id.desc())
                    .limit(i64::from(limit) + 1)
                    .into_boxed();
                if let Some(after) = page.after {
                    q = q.filter(webhook_attempts::id.lt(after));
                }
                Ok(q.load(conn)?)
            })
            .await?;
        Ok(Page::from_overfetch(
            rows.into_iter().map(attempt).collect::<Result<_, _>>()?,
            limit,
            |a: &Attempt| a.id.clone(),
        ))
    }

    async fn resend(
        &self,
        environment_id: &str,
        subscription_id: &str,
        event_id: &str,
        now: Timestamp,
    ) -> Result<bool, StorageError> {
        let (env, sub, event) = (
            environment_id.to_owned(),
            subscription_id.to_owned(),
            event_id.to_owned(),
        );
        let now = now.naive_utc();
        self.db
            .transaction(move |conn| {
                let name: Option<String> = analytics_events::table
                    .filter(analytics_events::environment_id.eq(&env))
                    .filter(analytics_events::id.eq(&event))
                    .select(analytics_events::name)
                    .first(conn)
                    .optional()?;
                let Some(name) = name else {
                    return Ok(false);
                };
                let updated = diesel::update(
                    webhook_deliveries::table
                        .filter(webhook_deliveries::subscription_id.eq(&sub))
                        .filter(webhook_deliveries::event_id.eq(&event)),
                )
                .set((
                    webhook_deliveries::status.eq(DeliveryStatus::Pending.as_str()),
                    webhook_deliveries::trigger_kind.eq("manual"),
                    webhook_deliveries::next_attempt_at.eq(now),
                    webhook_deliveries::updated.eq(now),
                ))
                .execute(conn)?;
                if updated == 0 {
                    diesel::insert_into(webhook_deliveries::table)
                        .values(DeliveryRow {
                            id: new_id(IdKind::Delivery),
                            environment_id: env.clone(),
                            subscription_id: sub.clone(),
                            event_id: event.clone(),
                            event_name: name,
                            status: DeliveryStatus::Pending.as_str().into(),
                            attempts: 0,
                            trigger_kind: "manual".into(),
                            next_attempt_at: now,
                            created: now,
                            updated: now,
                        })
                        .execute(conn)?;
                }
                crate::db::notices::queued(crate::Work::Deliveries);
                Ok(true)
            })
            .await
    }

    async fn recover(
        &self,
        environment_id: &str,
        subscription_id: &str,
        since: Timestamp,
        now: Timestamp,
    ) -> Result<u64, StorageError> {
        let (env, sub) = (environment_id.to_owned(), subscription_id.to_owned());
        let (since, now) = (since.naive_utc(), now.naive_utc());
        let n = self
            .db
            .transaction(move |conn| {
                let n = diesel::update(
                    webhook_deliveries::table
                        .filter(webhook_deliveries::environment_id.eq(&env))
                        .filter(webhook_deliveries::subscription_id.eq(&sub))
                        .filter(webhook_deliveries::status.eq_any([
                            DeliveryStatus::Failed.as_str(),
                            DeliveryStatus::Cancelled.as_str(),
                        ]))
                        .filter(webhook_deliveries::created.ge(since)),
                )
                .set((
                    webhook_deliveries::status.eq(DeliveryStatus::Pending.as_str()),
                    webhook_deliveries::trigger_kind.eq("manual"),
                    webhook_deliveries::next_attempt_at.eq(now),
                    webhook_deliveries::updated.eq(now),
                ))
                .execute(conn)?;
                if n > 0 {
                    crate::db::notices::queued(crate::Work::Deliveries);
                }
                Ok(n)
            })
            .await?;
        Ok(u64::try_from(n).unwrap_or(0))
    }

    async fn claim(
        &self,
        now: Timestamp,
        lease_until: Timestamp,
        per_subscription: u32,
        exclude: Vec<String>,
        limit: u32,
    ) -> Result<Vec<DeliveryJob>, StorageError> {
        let (now, lease) = (now.naive_utc(), lease_until.naive_utc());
        let rotation = self
            .rotation
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        type Claimed = (String, String, String, String, i32, String);
        let (claimed, subs, events) = self
            .db
            .claim_transaction(move |conn| {
                // Which subscriptions have pending work: a loose index scan, one index probe
                // per such subscription however long its backlog (a dead endpoint's backlog
                // must not slow the claims of healthy ones). Rotated for fairness.
                let mut with_work: Vec<String> = pending_subscriptions(conn)?
                    .into_iter()
                    .filter(|s| !exclude.contains(s))
                    .collect();
                if !with_work.is_empty() {
                    let turn = rotation % with_work.len();
                    with_work.rotate_left(turn);
                }
                let enabled: std::collections::HashSet<String> = webhook_subscriptions::table
                    .filter(webhook_subscriptions::id.eq_any(&with_work))
                    .filter(webhook_subscriptions::enabled.eq(true))
                    .select(webhook_subscriptions::id)
                    .load::<String>(conn)?
                    .into_iter()
                    .collect();
                with_work.retain(|s| enabled.contains(s));
                let mut claimed: Vec<Claimed> = Vec::new();
                for sub_id in &with_work {
                    let room = i64::from(limit) - claimed.len() as i64;
                    if room <= 0 {
                        break;
                    }
                    let take = room.min(i64::from(per_subscription));
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
                    diesel::update(
                        webhook_deliveries::table.filter(webhook_deliveries::id.eq_any(ids)),
                    )
                    .set(webhook_deliveries::next_attempt_at.eq(lease))
                    .execute(conn)?;
                    claimed.extend(rows);
                }
                let claimed_subs: std::collections::HashSet<&String> =
                    claimed.iter().map(|c| &c.1).collect();
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
            })
            .await?;
        let mut by_id = HashMap::new();
        for row in subs {
            let s = open(&self.secrets, row)?;
            by_id.insert(s.id.as_str().to_owned(), s);
        }
        let mut jobs = Vec::with_capacity(claimed.len());
        for (delivery_id, sub_id, event_id, event_name, attempts, trigger) in claimed {
            let (Some(subscription), Some(data)) =
                (by_id.get(&sub_id), events.get(&event_id).cloned())
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

    async fn record(&self, records: Vec<AttemptRecord>) -> Result<u64, StorageError> {
        if records.is_empty() {
            return Ok(0);
        }
        self.db
            .transaction(move |conn| {
                // A subscription deleted while its calls were in flight takes their outcomes
                // with it (and its attempt log): drop them rather than fail the whole batch.
                let mut ids: Vec<&String> = records.iter().map(|r| &r.subscription_id).collect();
                ids.sort_unstable();
                ids.dedup();
                let existing: std::collections::HashSet<String> = webhook_subscriptions::table
                    .filter(webhook_subscriptions::id.eq_any(ids))
                    .select(webhook_subscriptions::id)
                    .load::<String>(conn)?
                    .into_iter()
                    .collect();
                let records: Vec<&AttemptRecord> = records
                    .iter()
                    .filter(|r| existing.contains(&r.subscription_id))
                    .collect();
                // Contract §19: a delivery's outcome is saved only by the claim that holds it:
                // still pending, at the attempt before this one, leased until exactly this
                // claim's lease. `UPDATE ... RETURNING` says which were; the others' lease ran
                // out and the delivery was claimed again, so their outcome changes nothing.
                let mut held: std::collections::HashSet<String> = std::collections::HashSet::new();
                // Deliveries done, by attempt and claim: one statement per group (usually one).
                // A delivery done leaves the outbox (issue 27: it was a large share of a card's
                // bytes at rest); the attempt log, written below, is its record, and a resend of
                // its event is a new delivery.
                let mut delivered: BTreeMap<(u32, Option<NaiveDateTime>), Vec<&String>> =
                    BTreeMap::new();
                for r in &records {
                    if let (Some(id), NextStep::Done) = (&r.delivery_id, &r.next) {
                        delivered
                            .entry((r.attempt, r.lease.map(|l| l.naive_utc())))
                            .or_default()
                            .push(id);
                    }
                }
                for ((attempt, lease), ids) in &delivered {
                    let before: i32 =
                        write_number("webhook attempt number", attempt.saturating_sub(1))
                            .map_err(Failure::Domain)?;
                    for chunk in ids.chunks(INSERT_CHUNK) {
                        let targets = webhook_deliveries::table
                            .filter(webhook_deliveries::id.eq_any(chunk))
                            .filter(webhook_deliveries::status.eq(DeliveryStatus::Pending.as_str()))
                            .filter(webhook_deliveries::attempts.eq(before));
                        let saved: Vec<String> = match lease {
                            Some(lease) => diesel::delete(
                                targets.filter(webhook_deliveries::next_attempt_at.eq(*lease)),
                            )
                            .returning(webhook_deliveries::id)
                            .get_results(conn)?,
                            None => diesel::delete(targets)
                                .returning(webhook_deliveries::id)
                                .get_results(conn)?,
                        };
                        held.extend(saved);
                    }
                }
                for r in &records {
                    let at = r.at.naive_utc();
                    if let (Some(delivery), false) = (&r.delivery_id, r.next == NextStep::Done) {
                        let (status, next) = match r.next {
                            NextStep::Done => (DeliveryStatus::Delivered, at), // removed above
                            NextStep::RetryAt(t) => (DeliveryStatus::Pending, t.naive_utc()),
                            NextStep::Failed => (DeliveryStatus::Failed, at),
                        };
                        let before: i32 =
                            write_number("webhook attempt number", r.attempt.saturating_sub(1))
                                .map_err(Failure::Domain)?;
                        let attempt: i32 = write_number("webhook attempt number", r.attempt)
                            .map_err(Failure::Domain)?;
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
                        let changed =
                            match r.lease {
                                Some(lease) => diesel::update(targets.filter(
                                    webhook_deliveries::next_attempt_at.eq(lease.naive_utc()),
                                ))
                                .set(values)
                                .execute(conn)?,
                                None => diesel::update(targets).set(values).execute(conn)?,
                            };
                        if changed == 1 {
                            held.insert(delivery.clone());
                        }
                    }
                }
                // Test calls have no delivery: always kept.
                let (kept, stale): (Vec<&AttemptRecord>, Vec<&AttemptRecord>) = records
                    .into_iter()
                    .partition(|r| r.delivery_id.as_ref().is_none_or(|id| held.contains(id)));
                let rows: Vec<AttemptRow> = kept
                    .iter()
                    .map(|r| {
                        let a = r.to_attempt(new_id(IdKind::Attempt));
                        Ok(AttemptRow {
                            id: a.id,
                            subscription_id: a.subscription_id,
                            // A delivery done leaves the outbox: its last attempt needs no link
                            // to it. A failed one stays, and can be sent again (recover,
                            // resend): the pruner keeps its log while it is pending.
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
                    })
                    .collect::<Result<_, StorageError>>()
                    .map_err(Failure::Domain)?;
                for chunk in rows.chunks(INSERT_CHUNK) {
                    crate::per_backend!(&mut *conn,
                        c => diesel::insert_into(webhook_attempts::table).values(chunk)
                            .execute(c))?;
                }
                // The subscription's health as the kept outcomes say.
                for r in &kept {
                    let at = r.at.naive_utc();
                    let sub = webhook_subscriptions::table
                        .filter(webhook_subscriptions::id.eq(&r.subscription_id));
                    match &r.subscription {
                        None => {}
                        Some(SubscriptionChange::Recovered) => {
                            diesel::update(sub)
                                .set(webhook_subscriptions::failing_since.eq(None::<NaiveDateTime>))
                                .execute(conn)?;
                        }
                        Some(SubscriptionChange::Failing { since }) => {
                            diesel::update(
                                sub.filter(webhook_subscriptions::failing_since.is_null()),
                            )
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
                }
                // Deliveries done for good, in the daily totals of their event's flow: their
                // events' cards read in one query per chunk, not one per delivery.
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
                Ok(u64::try_from(stale.len()).unwrap_or(u64::MAX))
            })
            .await
    }
}
