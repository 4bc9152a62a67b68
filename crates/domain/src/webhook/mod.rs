//! Webhook subscriptions (spec 2.8, 4.4; contract §7) and the rules of their delivery.
//!
//! Deliveries are an outbox: the storage adapter writes one delivery row per matching enabled
//! subscription in the same transaction as each analytics event ([`Subscription::matches`]
//! decides which). Workers claim due deliveries, [`DeliveryService::attempt`] sends one through
//! the [`WebhookTransport`] port and decides what happens next ([`RetryPolicy`]), and the
//! outcomes are recorded in batches.

mod delivery;
mod request;
#[cfg(test)]
mod tests;

use std::collections::BTreeMap;
use std::sync::Arc;

use async_trait::async_trait;
use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use rand::RngCore;
use serde_json::Value;

use crate::card::AnalyticsEvent;
use crate::id::{new_id, IdKind};
use crate::{
    Clock, ConflictKind, DomainError, Page, PageRequest, Permission, Principal, Resource,
    StorageError, Timestamp,
};

pub use delivery::{
    AttemptOutcome, AttemptRecord, DeliveryJob, DeliveryService, NextStep, RetryPolicy,
    SubscriptionChange, DEFAULT_RETRY_SCHEDULE, FAILING_DISABLE_AFTER,
};
pub use request::{SubscriptionRequest, MAX_HEADERS, MAX_URL_CHARS};

/// Every event a subscription can name in `types` (spec 6): the analytics events of cards.
pub const EVENT_TYPES: &[&str] = &[
    "card-published",
    "card-embargoed",
    "card-snoozed",
    "card-unsnoozed",
    "card-completed",
    "card-dismissed",
    "card-expired",
    "card-cancelled",
];
/// The event sent by `POST /webhook/{id}/test`; not subscribable.
pub const TEST_EVENT: &str = "webhook-test";
/// Contract §7.
pub const MAX_SUBSCRIPTIONS_PER_ENVIRONMENT: u32 = 100;
/// How long a rotated-out secret keeps signing beside the new one.
pub const SECRET_ROTATION_GRACE_HOURS: i64 = 24;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HttpMethod {
    Post,
    Put,
}

impl HttpMethod {
    pub fn as_str(self) -> &'static str {
        match self {
            HttpMethod::Post => "POST",
            HttpMethod::Put => "PUT",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "POST" => Some(HttpMethod::Post),
            "PUT" => Some(HttpMethod::Put),
            _ => None,
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct Subscription {
    pub id: String,
    pub environment_id: String,
    pub url: String,
    pub method: HttpMethod,
    /// Sent with every call, in name order.
    pub headers: BTreeMap<String, String>,
    pub types: Vec<String>,
    pub card_template_id: Option<String>,
    /// `actionFlowConfigId`: only events of cards of this flow.
    pub flow_id: Option<String>,
    /// `whsec_…`; plaintext here, encrypted by the storage adapter.
    pub secret: String,
    /// The secret before the last rotation, valid until `previous_secret_until`.
    pub previous_secret: Option<String>,
    pub previous_secret_until: Option<Timestamp>,
    pub enabled: bool,
    /// Why it was disabled: `"api"`, `"gone"` (410) or `"failing"` (5 days of failures).
    pub disabled_reason: Option<String>,
    /// The first failure of the current run of failures; cleared by a success.
    pub failing_since: Option<Timestamp>,
    pub created: Timestamp,
    pub updated: Timestamp,
}

impl Subscription {
    /// Whether this subscription wants `event` (spec 6: types, then the template and flow
    /// filters). Disabled subscriptions want nothing.
    pub fn matches(&self, event: &AnalyticsEvent) -> bool {
        self.enabled
            && event.environment_id() == self.environment_id
            && wants(
                &self.types,
                self.card_template_id.as_deref(),
                self.flow_id.as_deref(),
                event,
            )
    }

    /// The secrets that sign a call made at `now`: the current one, and the previous one
    /// during its grace period (contract §7: several signatures during rotation).
    pub fn signing_secrets(&self, now: Timestamp) -> Vec<String> {
        let mut secrets = vec![self.secret.clone()];
        if let (Some(previous), Some(until)) = (&self.previous_secret, self.previous_secret_until) {
            if now < until {
                secrets.push(previous.clone());
            }
        }
        secrets
    }
}

/// The filter of a subscription (spec 6): one of its `types`, and when given, the card template
/// and the flow (`actionFlowConfigId`) the event is about.
pub fn wants(
    types: &[String],
    card_template_id: Option<&str>,
    flow_id: Option<&str>,
    event: &AnalyticsEvent,
) -> bool {
    if !types.iter().any(|t| t == &event.name) {
        return false;
    }
    if flow_id.is_some_and(|f| f != event.flow_id()) {
        return false;
    }
    card_template_id.is_none_or(|t| t == event.card.template_id)
}

/// `whsec_` + base64 of 32 random bytes (contract §7).
pub fn new_secret() -> String {
    let mut bytes = [0u8; 32];
    rand::rngs::OsRng.fill_bytes(&mut bytes);
    format!("whsec_{}", STANDARD.encode(bytes))
}

/// What the transport reports of one call.
#[derive(Debug, Clone, PartialEq)]
pub struct TransportResponse {
    /// None when no HTTP answer arrived (connection refused, timeout, refused address).
    pub status: Option<u16>,
    /// The `Retry-After` header, in seconds, when the answer had one.
    pub retry_after_seconds: Option<u64>,
    /// The start of the answer body (at most 20 KB).
    pub body: String,
    /// Why no answer arrived, or what was wrong with it.
    pub error: Option<String>,
    pub duration_ms: u64,
}

/// One call to make.
#[derive(Debug, Clone, PartialEq)]
pub struct OutgoingCall {
    pub url: String,
    pub method: HttpMethod,
    pub headers: BTreeMap<String, String>,
    /// `webhook-id`: the event id, the same on every attempt.
    pub message_id: String,
    pub body: String,
    /// Every secret that signs the call.
    pub secrets: Vec<String>,
    /// `webhook-timestamp`, unix seconds: the service's clock (the database's, contract §19).
    pub timestamp: i64,
}

/// The outbound side: signs and sends, refusing addresses the SSRF policy forbids.
#[cfg_attr(feature = "mock", mockall::automock)]
#[async_trait]
pub trait WebhookTransport: Send + Sync {
    /// Whether the URL may be called (scheme, host resolving to allowed addresses only).
    /// `Err` carries the reason, for the caller.
    async fn check_url(&self, url: &str) -> Result<(), String>;
    async fn send(&self, call: OutgoingCall) -> TransportResponse;
}

/// One row of a subscription's attempt log.
#[derive(Debug, Clone, PartialEq)]
pub struct Attempt {
    pub id: String,
    pub subscription_id: String,
    pub event_id: String,
    pub event_name: String,
    pub attempt: u32,
    /// `scheduled`, `manual` (resend or recover) or `test`.
    pub trigger: String,
    pub status_code: Option<u16>,
    pub error: Option<String>,
    pub duration_ms: u64,
    pub response_body: String,
    pub next_attempt_at: Option<Timestamp>,
    pub created: Timestamp,
}

#[cfg_attr(feature = "mock", mockall::automock)]
#[async_trait]
pub trait WebhookRepository: Send + Sync {
    /// Inserts the subscription unless the environment already has `limit`; false then.
    async fn create(&self, subscription: &Subscription, limit: u32) -> Result<bool, StorageError>;
    async fn get(
        &self,
        environment_id: &str,
        id: &str,
    ) -> Result<Option<Subscription>, StorageError>;
    async fn list(&self, environment_id: &str) -> Result<Vec<Subscription>, StorageError>;
    /// Saves status, secrets and failure state. Disabling also cancels its pending deliveries.
    async fn update(&self, subscription: &Subscription) -> Result<(), StorageError>;
    /// Deletes the subscription with its deliveries and attempt log; false when absent.
    async fn delete(&self, environment_id: &str, id: &str) -> Result<bool, StorageError>;
    /// The attempt log, newest first.
    async fn attempts(
        &self,
        environment_id: &str,
        subscription_id: &str,
        page: PageRequest,
    ) -> Result<Page<Attempt>, StorageError>;
    /// Queues the event again for the subscription, due at `now`. False when the environment
    /// has no such event.
    async fn resend(
        &self,
        environment_id: &str,
        subscription_id: &str,
        event_id: &str,
        now: Timestamp,
    ) -> Result<bool, StorageError>;
    /// Queues again every failed or cancelled delivery of events since `since`; how many.
    async fn recover(
        &self,
        environment_id: &str,
        subscription_id: &str,
        since: Timestamp,
        now: Timestamp,
    ) -> Result<u64, StorageError>;
    /// Leases up to `per_subscription` due deliveries of each enabled subscription not in
    /// `exclude`, at most `limit` in all, oldest due first, until `lease_until`.
    async fn claim(
        &self,
        now: Timestamp,
        lease_until: Timestamp,
        per_subscription: u32,
        exclude: Vec<String>,
        limit: u32,
    ) -> Result<Vec<DeliveryJob>, StorageError>;
    /// Saves outcomes in one transaction: attempt rows, delivery states, subscription failure
    /// state (and disabling). An outcome with a lease is saved only while its delivery is
    /// still pending, at the attempt before it and leased until exactly that lease (the claim's
    /// fencing token, contract §19); otherwise nothing of it is saved. Returns how many outcomes
    /// were refused so.
    async fn record(&self, records: Vec<AttemptRecord>) -> Result<u64, StorageError>;
}

/// The webhook API (role `workbench`).
pub struct WebhookService {
    repo: Arc<dyn WebhookRepository>,
    transport: Arc<dyn WebhookTransport>,
    clock: Arc<dyn Clock>,
}

impl WebhookService {
    pub fn new(
        repo: Arc<dyn WebhookRepository>,
        transport: Arc<dyn WebhookTransport>,
        clock: Arc<dyn Clock>,
    ) -> Self {
        Self {
            repo,
            transport,
            clock,
        }
    }

    /// Subscribes: validated request, URL checked against the SSRF policy, at most 100 per
    /// environment. The answer carries the secret.
    pub async fn subscribe(
        &self,
        who: &Principal,
        env: &str,
        body: &Value,
    ) -> Result<Subscription, DomainError> {
        who.authorize(env, Permission::WebhooksWrite)?;
        let request = SubscriptionRequest::parse(body)?;
        if let Err(reason) = self.transport.check_url(&request.url).await {
            return Err(DomainError::invalid("url", reason));
        }
        let now = self.clock.now();
        let subscription = Subscription {
            id: new_id(IdKind::Webhook),
            environment_id: env.to_owned(),
            url: request.url,
            method: request.method,
            headers: request.headers,
            types: request.types,
            card_template_id: request.card_template_id,
            flow_id: request.flow_id,
            secret: new_secret(),
            previous_secret: None,
            previous_secret_until: None,
            enabled: true,
            disabled_reason: None,
            failing_since: None,
            created: now,
            updated: now,
        };
        if !self
            .repo
            .create(&subscription, MAX_SUBSCRIPTIONS_PER_ENVIRONMENT)
            .await?
        {
            return Err(DomainError::conflict(
                ConflictKind::SubscriptionLimit,
                format!(
                    "this environment already has {MAX_SUBSCRIPTIONS_PER_ENVIRONMENT} webhook \
                     subscriptions; delete one first"
                ),
            ));
        }
        Ok(subscription)
    }

    pub async fn list(&self, who: &Principal, env: &str) -> Result<Vec<Subscription>, DomainError> {
        who.authorize(env, Permission::WebhooksRead)?;
        Ok(self.repo.list(env).await?)
    }

    pub async fn get(
        &self,
        who: &Principal,
        env: &str,
        id: &str,
    ) -> Result<Subscription, DomainError> {
        who.authorize(env, Permission::WebhooksRead)?;
        self.find(env, id).await
    }

    async fn find(&self, env: &str, id: &str) -> Result<Subscription, DomainError> {
        self.repo
            .get(env, id)
            .await?
            .ok_or(DomainError::NotFound(Resource::Webhook))
    }

    /// `DELETE /webhook/{id}`: stops deliveries; pending ones are cancelled. Idempotent.
    pub async fn disable(
        &self,
        who: &Principal,
        env: &str,
        id: &str,
    ) -> Result<Subscription, DomainError> {
        who.authorize(env, Permission::WebhooksWrite)?;
        let mut sub = self.find(env, id).await?;
        if sub.enabled {
            sub.enabled = false;
            sub.disabled_reason = Some("api".into());
            sub.updated = self.clock.now();
            self.repo.update(&sub).await?;
        }
        Ok(sub)
    }

    /// Re-enables a disabled subscription; its failure history starts afresh.
    pub async fn enable(
        &self,
        who: &Principal,
        env: &str,
        id: &str,
    ) -> Result<Subscription, DomainError> {
        who.authorize(env, Permission::WebhooksWrite)?;
        let mut sub = self.find(env, id).await?;
        if !sub.enabled {
            sub.enabled = true;
            sub.disabled_reason = None;
            sub.failing_since = None;
            sub.updated = self.clock.now();
            self.repo.update(&sub).await?;
        }
        Ok(sub)
    }

    /// `DELETE /webhook/{id}?permanent=true`: only a disabled subscription (409 otherwise).
    pub async fn delete(&self, who: &Principal, env: &str, id: &str) -> Result<(), DomainError> {
        who.authorize(env, Permission::WebhooksWrite)?;
        let sub = self.find(env, id).await?;
        if sub.enabled {
            return Err(DomainError::conflict(
                ConflictKind::SubscriptionEnabled,
                "disable the subscription (DELETE without permanent=true) before deleting it",
            ));
        }
        if !self.repo.delete(env, id).await? {
            return Err(DomainError::NotFound(Resource::Webhook));
        }
        Ok(())
    }

    /// A new secret; the old one keeps signing beside it for 24 hours.
    pub async fn rotate_secret(
        &self,
        who: &Principal,
        env: &str,
        id: &str,
    ) -> Result<Subscription, DomainError> {
        who.authorize(env, Permission::WebhooksWrite)?;
        let mut sub = self.find(env, id).await?;
        let now = self.clock.now();
        sub.previous_secret = Some(std::mem::replace(&mut sub.secret, new_secret()));
        sub.previous_secret_until =
            Some(now + chrono::Duration::hours(SECRET_ROTATION_GRACE_HOURS));
        sub.updated = now;
        self.repo.update(&sub).await?;
        Ok(sub)
    }

    pub async fn attempts(
        &self,
        who: &Principal,
        env: &str,
        id: &str,
        page: PageRequest,
    ) -> Result<Page<Attempt>, DomainError> {
        who.authorize(env, Permission::WebhooksRead)?;
        self.find(env, id).await?;
        Ok(self.repo.attempts(env, id, page).await?)
    }

    /// Sends one event again (whatever happened to it before).
    pub async fn resend(
        &self,
        who: &Principal,
        env: &str,
        id: &str,
        event_id: &str,
    ) -> Result<(), DomainError> {
        who.authorize(env, Permission::WebhooksWrite)?;
        let sub = self.find(env, id).await?;
        if !sub.enabled {
            return Err(disabled_conflict());
        }
        if !self
            .repo
            .resend(env, id, event_id, self.clock.now())
            .await?
        {
            return Err(DomainError::NotFound(Resource::Event));
        }
        Ok(())
    }

    /// Queues again every delivery that failed (or was cancelled) for events since `since`.
    pub async fn recover(
        &self,
        who: &Principal,
        env: &str,
        id: &str,
        since: Timestamp,
    ) -> Result<u64, DomainError> {
        who.authorize(env, Permission::WebhooksWrite)?;
        let sub = self.find(env, id).await?;
        if !sub.enabled {
            return Err(disabled_conflict());
        }
        Ok(self.repo.recover(env, id, since, self.clock.now()).await?)
    }

    /// Sends a `webhook-test` event right away and answers with the attempt, which is also
    /// logged.
    pub async fn test(&self, who: &Principal, env: &str, id: &str) -> Result<Attempt, DomainError> {
        who.authorize(env, Permission::WebhooksWrite)?;
        let sub = self.find(env, id).await?;
        let now = self.clock.now();
        let event_id = new_id(IdKind::Event);
        let data = test_event_data(&event_id, &now);
        let request_id = new_id(IdKind::Delivery);
        let body = payload(&request_id, &sub, &data);
        let response = self
            .transport
            .send(OutgoingCall {
                url: sub.url.clone(),
                method: sub.method,
                headers: sub.headers.clone(),
                message_id: event_id.clone(),
                body,
                secrets: sub.signing_secrets(now),
                timestamp: now.timestamp(),
            })
            .await;
        let record = AttemptRecord {
            delivery_id: None,
            subscription_id: sub.id.clone(),
            environment_id: env.to_owned(),
            event_id,
            event_name: TEST_EVENT.to_owned(),
            attempt: 1,
            trigger: "test".into(),
            outcome: AttemptOutcome::from(response),
            next: NextStep::Done,
            // A test says nothing about the subscription's health.
            subscription: None,
            at: now,
            lease: None,
        };
        let attempt = record.to_attempt(new_id(IdKind::Attempt));
        self.repo.record(vec![record]).await?;
        Ok(attempt)
    }
}

fn disabled_conflict() -> DomainError {
    DomainError::conflict(
        ConflictKind::SubscriptionDisabled,
        "the subscription is disabled; enable it first",
    )
}

/// The body of a call (spec 2.9): the event's `data` wrapped with the request, environment and
/// subscription ids. Never batched.
pub fn payload(request_id: &str, sub: &Subscription, data: &Value) -> String {
    serde_json::json!({
        "requestId": request_id,
        "environmentId": sub.environment_id,
        "webhookId": sub.id,
        "isBatched": false,
        "data": data,
    })
    .to_string()
}

/// The `data` of a test call: the 2.9 shape with empty contexts.
fn test_event_data(event_id: &str, now: &Timestamp) -> Value {
    serde_json::json!({
        "id": event_id,
        "analyticsEvent": TEST_EVENT,
        "endUserId": null,
        "timestamp": crate::time::format_timestamp(now),
        "cardContext": {},
        "eventContext": {},
        "properties": {"values": {}},
        "sdkContext": {},
        "streamContext": {},
        "platformContext": {},
    })
}
