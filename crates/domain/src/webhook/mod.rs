//! Webhook subscriptions and the rules of their delivery (docs/api.md, Webhooks).
//!
//! Deliveries are an outbox: the storage adapter writes one delivery row per matching enabled
//! subscription in the same transaction as each analytics event ([`Subscription::matches`]
//! decides which). Workers claim due deliveries, [`DeliveryService::attempt`] sends one through
//! the [`WebhookTransport`] port and decides what happens next ([`RetryPolicy`]), and the
//! outcomes are recorded in batches, each only by the claim that still holds its delivery
//! (docs/architecture.md, Time, leases and fencing).

mod delivery;
mod request;
mod service;
#[cfg(test)]
mod tests;

use crate::id::WebhookId;
use std::collections::BTreeMap;

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
    AttemptKind, AttemptOutcome, AttemptRecord, DeliveryJob, DeliveryService, DeliveryStatus,
    NextStep, RetryPolicy, SubscriptionChange, DEFAULT_RETRY_SCHEDULE, FAILING_DISABLE_AFTER,
};
pub use request::{SubscriptionRequest, MAX_DESCRIPTION_CHARS, MAX_HEADERS, MAX_URL_CHARS};
pub use service::WebhookService;

/// Every event a subscription can name in `types` (docs/api.md, Webhooks): the analytics
/// events of cards.
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
/// The most subscriptions an environment may have, enabled or disabled; a subscribe beyond is
/// refused with 409 `webhook_limit_reached` (docs/api.md, Webhooks).
pub const MAX_SUBSCRIPTIONS_PER_ENVIRONMENT: u32 = 100;
/// How long a rotated-out secret keeps signing beside the new one.
pub const SECRET_ROTATION_GRACE_HOURS: i64 = 24;

/// The HTTP method of a subscription's calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HttpMethod {
    /// `POST`, the default.
    Post,
    /// `PUT`.
    Put,
}

crate::spelling::spelled!(HttpMethod {
    Post => "POST",
    Put => "PUT",
});

/// A webhook subscription: which events of an environment are sent where, and how
/// (docs/api.md, Webhooks).
#[derive(Debug, Clone, PartialEq)]
pub struct Subscription {
    /// `whk_…`.
    pub id: WebhookId,
    /// The environment whose events it receives.
    pub environment_id: String,
    /// The http(s) URL called, allowed by the SSRF policy when subscribed.
    pub url: String,
    /// The method of every call.
    pub method: HttpMethod,
    /// Sent with every call, in name order.
    pub headers: BTreeMap<String, String>,
    /// The events it receives: names from [`EVENT_TYPES`], without duplicates.
    pub types: Vec<String>,
    /// `cardTemplateId`: only events of cards of this template (its key in the flow's
    /// `config.cardTemplates`).
    pub card_template_id: Option<String>,
    /// `actionFlowConfigId`: only events of cards of this flow.
    pub flow_id: Option<String>,
    /// `description`: what the subscription is for, in its owners' words; `None` when none
    /// was given.
    pub description: Option<String>,
    /// `whsec_…`; plaintext here, encrypted by the storage adapter.
    pub secret: String,
    /// The secret before the last rotation, valid until `previous_secret_until`.
    pub previous_secret: Option<String>,
    /// When the previous secret stops signing: 24 hours after the rotation.
    pub previous_secret_until: Option<Timestamp>,
    /// Whether events are queued for it and its deliveries are made.
    pub enabled: bool,
    /// Why it was disabled: `"api"`, `"gone"` (410) or `"failing"` (5 days of failures).
    pub disabled_reason: Option<String>,
    /// The first failure of the current run of failures; cleared by a success.
    pub failing_since: Option<Timestamp>,
    /// When it was subscribed.
    pub created: Timestamp,
    /// When it was last enabled, disabled or given a new secret.
    pub updated: Timestamp,
}

impl Subscription {
    /// The subscription as a caller that may only read webhooks sees it (docs/api.md,
    /// Webhooks): the signing secret, which is enough to forge deliveries, shown by its prefix
    /// and last 4 characters, the previous one dropped, and custom header values (a receiver's
    /// `Authorization`, say) shown by their last 4 characters.
    pub fn masked(self) -> Subscription {
        let prefix = self.secret.find('_').map_or("", |at| &self.secret[..=at]);
        Subscription {
            secret: format!("{prefix}{}", mask(&self.secret)),
            previous_secret: None,
            headers: self
                .headers
                .iter()
                .map(|(name, value)| (name.clone(), mask(value)))
                .collect(),
            ..self
        }
    }

    /// Whether this subscription wants `event`: an event of its environment that passes
    /// [`wants`] (types, then the template and flow filters; docs/api.md, Webhooks). Disabled
    /// subscriptions want nothing.
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
    /// during its grace period (docs/api.md, Webhooks: `webhook-signature` carries a signature
    /// of each during a rotation).
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

/// The filter of a subscription (docs/api.md, Webhooks): one of its `types`, and when given,
/// the card template and the flow (`actionFlowConfigId`) the event is about. The storage
/// adapter applies it to every event it appends, to queue the event's deliveries.
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

/// A new subscription secret: `whsec_` + standard base64 of 32 bytes from the operating
/// system's random source.
///
/// ```
/// let secret = workbench_domain::webhook::new_secret();
/// assert!(secret.starts_with("whsec_") && secret.len() == 6 + 44);
/// assert_ne!(secret, workbench_domain::webhook::new_secret());
/// ```
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
    /// What kind of failure `error` is, when the call failed before or while its answer
    /// arrived; None for an answer read whole, whatever its status.
    pub failure: Option<CallFailure>,
    /// How long the call took, in milliseconds.
    pub duration_ms: u64,
}

/// Why a call got no answer, or lost it: a bounded set, so that attempts can be counted by
/// it (docs/operations.md, Metrics).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CallFailure {
    /// The call ran out of time: no connection, or no whole answer, in time.
    Timeout,
    /// No connection could be made or kept: refused, reset, unreachable, TLS.
    Connect,
    /// The address policy refused the URL, or its name resolves to no admitted address
    /// (docs/operations.md, Webhook SSRF policy): no call was made.
    Refused,
    /// Anything else: the call could not be built, or its answer broke off.
    Other,
}

/// One call to make.
#[derive(Debug, Clone, PartialEq)]
pub struct OutgoingCall {
    /// The subscription's URL.
    pub url: String,
    /// The subscription's method.
    pub method: HttpMethod,
    /// The subscription's headers; the transport adds its own (`webhook-*`, `content-type`,
    /// ...), which these never name.
    pub headers: BTreeMap<String, String>,
    /// `webhook-id`: the event id, the same on every attempt.
    pub message_id: String,
    /// The JSON body ([`payload`]).
    pub body: String,
    /// Every secret that signs the call.
    pub secrets: Vec<String>,
    /// `webhook-timestamp`, unix seconds: the service's clock (the database's:
    /// docs/operations.md, Clocks).
    pub timestamp: i64,
}

/// The outbound side: signs and sends, refusing addresses the SSRF policy forbids.
#[cfg_attr(feature = "mock", mockall::automock)]
#[async_trait]
pub trait WebhookTransport: Send + Sync {
    /// Whether the URL may be called (scheme, host resolving to allowed addresses only:
    /// docs/operations.md, Webhook SSRF policy). `Err` carries the reason, for the caller,
    /// who reports it as the `url` field's problem.
    async fn check_url(&self, url: &str) -> Result<(), String>;
    /// Signs the call with each of its secrets, sends it and reports what came back. Never
    /// fails: an address the SSRF policy forbids (checked again on every call, against the
    /// address actually connected to), a timeout (15 s, 5 s to connect) or a connection error
    /// is a response without a status, its `error` saying why. Redirects are not followed.
    async fn send(&self, call: OutgoingCall) -> TransportResponse;
}

/// One row of a subscription's attempt log.
#[derive(Debug, Clone, PartialEq)]
pub struct Attempt {
    /// `wha_…`.
    pub id: String,
    /// The subscription called.
    pub subscription_id: String,
    /// The event sent (`webhook-id`).
    pub event_id: String,
    /// The event's name (`eventType`), `webhook-test` for a test.
    pub event_name: String,
    /// The attempt's number for its delivery, from 1.
    pub attempt: u32,
    /// `scheduled`, `manual` (resend or recover) or `test`.
    pub trigger: String,
    /// The receiver's HTTP status; None when no answer came.
    pub status_code: Option<u16>,
    /// Why it was not delivered: the transport's error, `HTTP {status}`, or for an attempt
    /// given up as a unit of work, that failure with its `errorId`.
    pub error: Option<String>,
    /// How long the call took, in milliseconds.
    pub duration_ms: u64,
    /// The start of the answer's body (at most 20 KB).
    pub response_body: String,
    /// When the delivery is tried again; None when it is not.
    pub next_attempt_at: Option<Timestamp>,
    /// When the attempt was made.
    pub created: Timestamp,
}

/// Storage of subscriptions, their delivery outbox and their attempt log. An implementation
/// seals secrets at rest and opens them on every read, and scopes every call that names an
/// environment to it: a subscription, event or delivery of another environment is never
/// found, changed or queued. Deliveries are written by the storage adapter in the transaction
/// that appends their event (one per enabled subscription that [`wants`] it); this port
/// claims them and records their outcomes.
#[cfg_attr(feature = "mock", mockall::automock)]
#[async_trait]
pub trait WebhookRepository: Send + Sync {
    /// Inserts the subscription unless the environment already has `limit` (enabled or not);
    /// false then. The count and the insert must be one atomic step, so that concurrent
    /// subscribes cannot exceed the limit.
    async fn create(&self, subscription: &Subscription, limit: u32) -> Result<bool, StorageError>;
    /// The environment's subscription with this id, secrets opened; None when there is none.
    async fn get(
        &self,
        environment_id: &str,
        id: &str,
    ) -> Result<Option<Subscription>, StorageError>;
    /// Every subscription of the environment, by id.
    async fn list(&self, environment_id: &str) -> Result<Vec<Subscription>, StorageError>;
    /// Saves status, secrets and failure state. Disabling also cancels its pending deliveries.
    /// Replaces every stored field by the given subscription's, in one transaction with the
    /// cancelling; a subscription deleted meanwhile is not an error (nothing is saved).
    async fn update(&self, subscription: &Subscription) -> Result<(), StorageError>;
    /// Saves what an edit may change (`PATCH /webhook/{id}`): the URL, method, headers, event
    /// types, both filters and `updated`, nothing else, so that a secret rotated or a state
    /// changed meanwhile is kept. A subscription deleted meanwhile is not an error.
    async fn edit(&self, subscription: &Subscription) -> Result<(), StorageError>;
    /// Deletes the subscription with its deliveries and attempt log, in one transaction; false
    /// when absent.
    async fn delete(&self, environment_id: &str, id: &str) -> Result<bool, StorageError>;
    /// The attempt log, newest first, one page of it (`page.after` is the id of the last
    /// attempt of the page before).
    async fn attempts(
        &self,
        environment_id: &str,
        subscription_id: &str,
        page: PageRequest,
    ) -> Result<Page<Attempt>, StorageError>;
    /// Queues the event again for the subscription, due at `now`, whatever became of its
    /// delivery (a delivery made pending again, or a new one when there was none), as a
    /// `manual` attempt whose number continues from the attempts made. False when the
    /// environment has no such event.
    async fn resend(
        &self,
        environment_id: &str,
        subscription_id: &str,
        event_id: &str,
        now: Timestamp,
    ) -> Result<bool, StorageError>;
    /// Queues again (due at `now`, `manual`) every failed or cancelled delivery of the
    /// subscription for events at or after `since`; answers how many.
    async fn recover(
        &self,
        environment_id: &str,
        subscription_id: &str,
        since: Timestamp,
        now: Timestamp,
    ) -> Result<u64, StorageError>;
    /// Leases up to `per_subscription` due deliveries of each enabled subscription not in
    /// `exclude`, at most `limit` in all, oldest due first, until `lease_until`.
    ///
    /// Due: pending, next attempt at or before `now`. The claim writes `lease_until` into each
    /// delivery, which is then not due again until that time, and hands it over as
    /// [`DeliveryJob::lease_until`]; two claims at once (several processes) never take the
    /// same delivery. Each job carries its subscription (secrets opened) and its event's
    /// `data`; [`DeliveryJob::attempt`] is the attempts made plus one. Subscriptions should
    /// take turns, so that one with a long backlog does not always come first.
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
    /// fencing token, docs/architecture.md, Time, leases and fencing); otherwise nothing of it
    /// is saved. Returns how many outcomes were refused so.
    ///
    /// A delivery's state follows [`AttemptRecord::next`]: delivered, pending again at the
    /// retry time, or failed. [`SubscriptionChange::Recovered`] clears `failing_since`,
    /// [`SubscriptionChange::Failing`] sets it unless it is set already, and
    /// [`SubscriptionChange::Disable`] disables the subscription with that reason and cancels
    /// its pending deliveries. An outcome without a delivery (a test call) only adds its
    /// attempt to the log.
    /// Outcomes of a subscription deleted meanwhile are dropped.
    async fn record(&self, records: Vec<AttemptRecord>) -> Result<u64, StorageError>;
}

/// The body of a call (docs/api.md, Webhooks: Payload): the event's `data` wrapped with the
/// request, environment and subscription ids. Never batched. A delivery's `request_id` is its
/// delivery id, the same on every attempt.
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

/// A secret or a header value as a read-only caller sees it: `…` and its last 4 characters;
/// a value of 12 characters or fewer shows nothing.
fn mask(value: &str) -> String {
    let chars: Vec<char> = value.chars().collect();
    match chars.len().checked_sub(4) {
        Some(from) if chars.len() > 12 => format!("…{}", chars[from..].iter().collect::<String>()),
        _ => "…".to_owned(),
    }
}
