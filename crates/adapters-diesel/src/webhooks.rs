//! Webhook subscriptions, the delivery outbox and the attempt log.
//!
//! [`enqueue`] is called by every transaction that appends analytics events, so an event and
//! its deliveries commit together. Secrets are sealed with [`SecretBox`] on write.

use std::sync::Arc;

use async_trait::async_trait;
use diesel::prelude::*;
use domain::id::{new_id, IdKind};
use domain::webhook::{
    Attempt, AttemptRecord, DeliveryJob, DeliveryStatus, Subscription, WebhookRepository,
};
use domain::{Page, PageRequest, StorageError, Timestamp};

use crate::crypto::SecretBox;
use crate::db::{AnyConnection, Database, Failure};
use crate::error::read_number;
use crate::millis::At;
use crate::schema::{
    analytics_events, webhook_attempts, webhook_deliveries, webhook_subscriptions,
};

mod claim;
mod enqueue;
mod pending;
mod record;
mod rows;
mod sealing;
use claim::{claim_due, Share};
pub(crate) use enqueue::enqueue;
#[cfg(test)]
pub(crate) use enqueue::subscriptions_of;
use pending::cancel_pending;
use rows::{AttemptRow, DeliveryRow, SubscriptionRow};
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
        let share = Share {
            per_subscription,
            exclude,
            limit,
            rotation: self
                .rotation
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed),
        };
        let read = self
            .db
            .claim_transaction(move |conn| claim_due(conn, now, lease, &share))
            .await?;
        claim::jobs(&self.secrets, read, lease_until)
    }

    async fn record(&self, records: Vec<AttemptRecord>) -> Result<u64, StorageError> {
        if records.is_empty() {
            return Ok(0);
        }
        self.db
            .transaction(move |conn| record::record(conn, &records))
            .await
    }
}
