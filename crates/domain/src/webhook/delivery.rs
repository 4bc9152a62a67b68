//! Delivery of queued events: one attempt at a time, and what follows it (contract §7).

use std::sync::Arc;

use chrono::Duration;

pub use crate::retry::RetryPolicy;
use rand::Rng;
use serde_json::Value;

use super::{
    payload, Attempt, OutgoingCall, Subscription, TransportResponse, WebhookRepository,
    WebhookTransport,
};
use crate::unit;
use crate::{Clock, StorageError, Timestamp};

/// 5 s, 5 min, 30 min, 2 h, 5 h, 10 h, 10 h: eight attempts over about 27.5 hours.
pub const DEFAULT_RETRY_SCHEDULE: &str = "5s,5m,30m,2h,5h,10h,10h";
/// A subscription whose calls have all failed for this long is disabled.
pub const FAILING_DISABLE_AFTER: Duration = Duration::days(5);
/// The webhook schedule of contract §7.
impl Default for RetryPolicy {
    fn default() -> Self {
        #[allow(clippy::unwrap_used)] // a constant known to parse (tested)
        RetryPolicy::parse(DEFAULT_RETRY_SCHEDULE).unwrap()
    }
}

/// A leased delivery: one event for one subscription.
#[derive(Debug, Clone, PartialEq)]
pub struct DeliveryJob {
    pub delivery_id: String,
    pub subscription: Subscription,
    pub event_id: String,
    pub event_name: String,
    /// The event's 2.9 `data`.
    pub data: Value,
    /// The number of this attempt, from 1.
    pub attempt: u32,
    /// `scheduled` or `manual`.
    pub trigger: String,
    /// The end of the claim's lease, which is also its fencing token (contract §19): the
    /// outcome is recorded only while the delivery is still leased until exactly this.
    pub lease_until: Timestamp,
}

/// What one attempt got.
#[derive(Debug, Clone, PartialEq)]
pub struct AttemptOutcome {
    pub status_code: Option<u16>,
    pub error: Option<String>,
    pub duration_ms: u64,
    pub response_body: String,
    pub retry_after_seconds: Option<u64>,
}

impl AttemptOutcome {
    /// 2xx, and only 2xx, is delivered (redirects are not followed).
    pub fn delivered(&self) -> bool {
        matches!(self.status_code, Some(200..=299))
    }
}

impl From<TransportResponse> for AttemptOutcome {
    fn from(r: TransportResponse) -> Self {
        let error = match (r.error, r.status) {
            (Some(e), _) => Some(e),
            (None, Some(s)) if !(200..=299).contains(&s) => Some(format!("HTTP {s}")),
            (None, _) => None,
        };
        AttemptOutcome {
            status_code: r.status,
            error,
            duration_ms: r.duration_ms,
            response_body: r.body,
            retry_after_seconds: r.retry_after_seconds,
        }
    }
}

/// What becomes of the delivery after an attempt.
#[derive(Debug, Clone, PartialEq)]
pub enum NextStep {
    /// Delivered (or a test call, which is never retried).
    Done,
    RetryAt(Timestamp),
    /// Out of retries, or the subscription was disabled by this attempt.
    Failed,
}

/// What the attempt says about the subscription's health.
#[derive(Debug, Clone, PartialEq)]
pub enum SubscriptionChange {
    /// A success ends a run of failures.
    Recovered,
    /// The first failure of a run.
    Failing { since: Timestamp },
    /// 410 Gone (`gone`) or five days of failures (`failing`).
    Disable { reason: String },
}

/// An attempt and its consequences, saved by [`WebhookRepository::record`].
#[derive(Debug, Clone, PartialEq)]
pub struct AttemptRecord {
    /// None for a test call, which has no delivery row.
    pub delivery_id: Option<String>,
    pub subscription_id: String,
    pub environment_id: String,
    pub event_id: String,
    pub event_name: String,
    pub attempt: u32,
    pub trigger: String,
    pub outcome: AttemptOutcome,
    pub next: NextStep,
    pub subscription: Option<SubscriptionChange>,
    pub at: Timestamp,
    /// The claim this outcome belongs to ([`DeliveryJob::lease_until`]); None for a test call.
    pub lease: Option<Timestamp>,
}

impl AttemptRecord {
    pub fn to_attempt(&self, id: String) -> Attempt {
        Attempt {
            id,
            subscription_id: self.subscription_id.clone(),
            event_id: self.event_id.clone(),
            event_name: self.event_name.clone(),
            attempt: self.attempt,
            trigger: self.trigger.clone(),
            status_code: self.outcome.status_code,
            error: self.outcome.error.clone(),
            duration_ms: self.outcome.duration_ms,
            response_body: self.outcome.response_body.clone(),
            next_attempt_at: match self.next {
                NextStep::RetryAt(t) => Some(t),
                _ => None,
            },
            created: self.at,
        }
    }
}

/// Claims, attempts and records deliveries. Concurrency is the caller's (the server's
/// workers); every decision is here.
pub struct DeliveryService {
    repo: Arc<dyn WebhookRepository>,
    transport: Arc<dyn WebhookTransport>,
    clock: Arc<dyn Clock>,
    policy: RetryPolicy,
}

impl DeliveryService {
    pub fn new(
        repo: Arc<dyn WebhookRepository>,
        transport: Arc<dyn WebhookTransport>,
        clock: Arc<dyn Clock>,
        policy: RetryPolicy,
    ) -> Self {
        Self {
            repo,
            transport,
            clock,
            policy,
        }
    }

    /// Leases due deliveries: at most `per_subscription` of each subscription not in
    /// `exclude` (those already at their concurrency cap here), `limit` in all. The lease
    /// outlasts the 15 s call timeout with room to record the outcome.
    pub async fn claim(
        &self,
        per_subscription: u32,
        exclude: Vec<String>,
        limit: u32,
        lease: Duration,
    ) -> Result<Vec<DeliveryJob>, StorageError> {
        let now = self.clock.now();
        self.repo
            .claim(now, now + lease, per_subscription, exclude, limit)
            .await
    }

    /// Makes the call and decides what follows. Never fails: every problem is an outcome, and a
    /// panic is caught (contract §10): the attempt is made again up to [`unit::ATTEMPTS`]
    /// times in all, then the delivery is failed with an `errorId` in its last error and in the
    /// log.
    pub async fn attempt(&self, job: DeliveryJob) -> AttemptRecord {
        let mut cause = String::new();
        for attempt in 1..=unit::ATTEMPTS {
            // Borrowed, not cloned: a job carries its event's data, a JSON tree.
            cause = match unit::catch(self.attempt_once(&job)).await {
                Ok(record) => return record,
                Err(panic) => format!("panic: {panic}"),
            };
            tracing::warn!(unit = "webhook delivery", id = %job.delivery_id, attempt, cause = %cause, "a webhook delivery attempt failed; trying it again");
        }
        let failure = unit::Failure::new("webhook delivery", &job.delivery_id, cause);
        AttemptRecord {
            delivery_id: Some(job.delivery_id),
            subscription_id: job.subscription.id,
            environment_id: job.subscription.environment_id,
            event_id: job.event_id,
            event_name: job.event_name,
            attempt: job.attempt,
            trigger: job.trigger,
            outcome: AttemptOutcome {
                status_code: None,
                error: Some(failure.message()),
                duration_ms: 0,
                response_body: String::new(),
                retry_after_seconds: None,
            },
            next: NextStep::Failed,
            subscription: None,
            at: self.clock.now(),
            lease: Some(job.lease_until),
        }
    }

    async fn attempt_once(&self, job: &DeliveryJob) -> AttemptRecord {
        let started = self.clock.now();
        let call = OutgoingCall {
            url: job.subscription.url.clone(),
            method: job.subscription.method,
            headers: job.subscription.headers.clone(),
            message_id: job.event_id.clone(),
            body: payload(&job.delivery_id, &job.subscription, &job.data),
            secrets: job.subscription.signing_secrets(started),
            timestamp: started.timestamp(),
        };
        let outcome = AttemptOutcome::from(self.transport.send(call).await);
        let at = self.clock.now();
        let jitter = rand::thread_rng().gen_range(-1.0..=1.0);
        let (next, subscription) = decide(&self.policy, job, &outcome, at, jitter);
        AttemptRecord {
            delivery_id: Some(job.delivery_id.clone()),
            subscription_id: job.subscription.id.clone(),
            environment_id: job.subscription.environment_id.clone(),
            event_id: job.event_id.clone(),
            event_name: job.event_name.clone(),
            attempt: job.attempt,
            trigger: job.trigger.clone(),
            outcome,
            next,
            subscription,
            at,
            lease: Some(job.lease_until),
        }
    }

    /// Saves outcomes, each only if its claim still holds the delivery (contract §19).
    /// Returns how many were stale: their delivery was claimed again meanwhile (this holder's
    /// lease ran out), so another holder's outcome counts, and theirs changed nothing.
    pub async fn record(&self, records: Vec<AttemptRecord>) -> Result<u64, StorageError> {
        self.repo.record(records).await
    }
}

/// The rules of contract §7 after one attempt.
pub(crate) fn decide(
    policy: &RetryPolicy,
    job: &DeliveryJob,
    outcome: &AttemptOutcome,
    at: Timestamp,
    jitter: f64,
) -> (NextStep, Option<SubscriptionChange>) {
    let failing_since = job.subscription.failing_since;
    if outcome.delivered() {
        let change = failing_since.map(|_| SubscriptionChange::Recovered);
        return (NextStep::Done, change);
    }
    if outcome.status_code == Some(410) {
        let change = SubscriptionChange::Disable {
            reason: "gone".into(),
        };
        return (NextStep::Failed, Some(change));
    }
    let since = failing_since.unwrap_or(at);
    if at - since >= FAILING_DISABLE_AFTER {
        let change = SubscriptionChange::Disable {
            reason: "failing".into(),
        };
        return (NextStep::Failed, Some(change));
    }
    let change = failing_since
        .is_none()
        .then_some(SubscriptionChange::Failing { since });
    let next = match policy.delay_after(job.attempt, outcome.retry_after_seconds, jitter) {
        Some(delay) => NextStep::RetryAt(at + delay),
        None => NextStep::Failed,
    };
    (next, change)
}
