//! Delivery of queued events: one attempt at a time, and what follows it (docs/api.md,
//! Webhooks: Delivery).

use std::sync::Arc;

use chrono::Duration;

pub use crate::retry::RetryPolicy;
use rand::Rng;
use serde_json::Value;

use super::{
    payload, Attempt, CallFailure, OutgoingCall, Subscription, TransportResponse,
    WebhookRepository, WebhookTransport,
};
use crate::unit;
use crate::{Clock, StorageError, Timestamp};

/// 5 s, 5 min, 30 min, 2 h, 5 h, 10 h, 10 h: eight attempts over about 27.5 hours. The
/// default of `WORKBENCH_WEBHOOK_RETRY_SCHEDULE`, in [`RetryPolicy::parse`]'s format.
pub const DEFAULT_RETRY_SCHEDULE: &str = "5s,5m,30m,2h,5h,10h,10h";
/// A subscription whose calls have all failed for this long is disabled (`failing`).
pub const FAILING_DISABLE_AFTER: Duration = Duration::days(5);
/// The webhook schedule, [`DEFAULT_RETRY_SCHEDULE`] (docs/api.md, Webhooks: Delivery).
impl Default for RetryPolicy {
    fn default() -> Self {
        #[allow(clippy::unwrap_used)] // a constant known to parse (tested)
        RetryPolicy::parse(DEFAULT_RETRY_SCHEDULE).unwrap()
    }
}

/// A leased delivery: one event for one subscription.
#[derive(Debug, Clone, PartialEq)]
pub struct DeliveryJob {
    /// `whd_…`: the delivery, and the payload's `requestId`.
    pub delivery_id: String,
    /// The subscription as it is now, secrets opened.
    pub subscription: Subscription,
    /// The event (`webhook-id`).
    pub event_id: String,
    /// The event's name (`card-completed`, ...).
    pub event_name: String,
    /// The event's `data`, as [`AnalyticsEvent::data`](crate::card::AnalyticsEvent::data)
    /// builds it.
    pub data: Value,
    /// The number of this attempt, from 1.
    pub attempt: u32,
    /// `scheduled` or `manual`.
    pub trigger: String,
    /// The end of the claim's lease, which is also its fencing token (docs/architecture.md,
    /// Time, leases and fencing): the outcome is recorded only while the delivery is still
    /// leased until exactly this.
    pub lease_until: Timestamp,
}

/// What one attempt got.
#[derive(Debug, Clone, PartialEq)]
pub struct AttemptOutcome {
    /// The receiver's HTTP status; None when no answer came.
    pub status_code: Option<u16>,
    /// The transport's error when it reported one, else `HTTP {status}` for an answer other
    /// than 2xx; None for a 2xx read whole.
    pub error: Option<String>,
    /// How long the call took, in milliseconds.
    pub duration_ms: u64,
    /// The start of the answer's body (at most 20 KB).
    pub response_body: String,
    /// The answer's `Retry-After`, in seconds, when it had one.
    pub retry_after_seconds: Option<u64>,
    /// What kind of failure `error` is, when the call failed before or while its answer
    /// arrived ([`TransportResponse::failure`]).
    pub failure: Option<CallFailure>,
}

impl AttemptOutcome {
    /// 2xx, and only 2xx, is delivered (redirects are not followed).
    pub fn delivered(&self) -> bool {
        matches!(self.status_code, Some(200..=299))
    }

    /// How the attempt ended, among a bounded set ([`AttemptKind`]): a 2xx is a success
    /// even when its body broke off; any other answer is an HTTP error; no answer is told by
    /// the transport's [`CallFailure`].
    ///
    /// ```
    /// use workbench_domain::webhook::{AttemptKind, AttemptOutcome, CallFailure,
    ///     TransportResponse};
    ///
    /// let got = |status: Option<u16>, failure: Option<CallFailure>| {
    ///     AttemptOutcome::from(TransportResponse {
    ///         status,
    ///         retry_after_seconds: None,
    ///         body: String::new(),
    ///         error: failure.map(|f| format!("{f:?}")),
    ///         failure,
    ///         duration_ms: 1,
    ///     })
    ///     .kind()
    /// };
    /// assert_eq!(got(Some(204), None), AttemptKind::Success);
    /// assert_eq!(got(Some(503), None), AttemptKind::HttpError);
    /// assert_eq!(got(None, Some(CallFailure::Timeout)), AttemptKind::Timeout);
    /// assert_eq!(got(None, Some(CallFailure::Refused)), AttemptKind::Refused);
    /// assert_eq!(AttemptKind::ConnectError.as_str(), "connect_error");
    /// ```
    pub fn kind(&self) -> AttemptKind {
        match (self.status_code, self.failure) {
            (Some(200..=299), _) => AttemptKind::Success,
            (Some(_), _) => AttemptKind::HttpError,
            (None, Some(CallFailure::Timeout)) => AttemptKind::Timeout,
            (None, Some(CallFailure::Connect)) => AttemptKind::ConnectError,
            (None, Some(CallFailure::Refused)) => AttemptKind::Refused,
            (None, Some(CallFailure::Other) | None) => AttemptKind::Error,
        }
    }
}

/// Where a delivery of one event to one subscription stands. `Pending` is due (now or at its
/// next attempt); the others are final.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeliveryStatus {
    /// Not delivered yet: due at its next attempt.
    Pending,
    /// A 2xx answer came.
    Delivered,
    /// Given up: out of retries, or failed as a unit of work.
    Failed,
    /// Not to be delivered any more (its subscription went away or was disabled).
    Cancelled,
}

crate::spelling::spelled!(DeliveryStatus {
    Pending => "pending",
    Delivered => "delivered",
    Failed => "failed",
    Cancelled => "cancelled",
});

/// How one attempt ended, among a bounded set: what
/// `workbench_webhook_attempts_total{outcome}` counts (docs/operations.md, Metrics).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AttemptKind {
    /// A 2xx answer: delivered.
    Success,
    /// Any other answer (3xx, 4xx, 5xx; 410 among them).
    HttpError,
    /// No answer in time.
    Timeout,
    /// No connection: refused, reset, unreachable, TLS.
    ConnectError,
    /// Not called: the address policy refused the URL or what its name resolves to.
    Refused,
    /// Anything else: a call that could not be built, an answer that broke off, an attempt
    /// that panicked.
    Error,
}

crate::spelling::spelled!(AttemptKind {
    Success => "success",
    HttpError => "http_error",
    Timeout => "timeout",
    ConnectError => "connect_error",
    Refused => "refused",
    Error => "error",
});

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
            failure: r.failure,
        }
    }
}

/// What becomes of the delivery after an attempt.
#[derive(Debug, Clone, PartialEq)]
pub enum NextStep {
    /// Delivered (or a test call, which is never retried).
    Done,
    /// Not delivered: due again at this time.
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
    Failing {
        /// When the run began: this attempt's time.
        since: Timestamp,
    },
    /// 410 Gone (`gone`) or five days of failures (`failing`).
    Disable {
        /// `gone` or `failing`: the subscription's `disabled_reason`.
        reason: String,
    },
}

/// An attempt and its consequences, saved by [`WebhookRepository::record`].
#[derive(Debug, Clone, PartialEq)]
pub struct AttemptRecord {
    /// None for a test call, which has no delivery row.
    pub delivery_id: Option<String>,
    /// The subscription called.
    pub subscription_id: String,
    /// The subscription's environment.
    pub environment_id: String,
    /// The event sent.
    pub event_id: String,
    /// The event's name; `webhook-test` for a test call.
    pub event_name: String,
    /// The attempt's number, from 1 ([`DeliveryJob::attempt`]; 1 for a test call).
    pub attempt: u32,
    /// `scheduled`, `manual` or `test`.
    pub trigger: String,
    /// What the call got.
    pub outcome: AttemptOutcome,
    /// What becomes of the delivery.
    pub next: NextStep,
    /// What the attempt says of the subscription's health; None when nothing changes (and
    /// for a test call).
    pub subscription: Option<SubscriptionChange>,
    /// When the attempt ended, by the service's clock.
    pub at: Timestamp,
    /// The claim this outcome belongs to ([`DeliveryJob::lease_until`]); None for a test call.
    pub lease: Option<Timestamp>,
}

impl AttemptRecord {
    /// Whether saving this record disables its subscription (410 Gone, or five days of
    /// failures): until it is saved, a deliverer should claim no more of the subscription's
    /// deliveries, whose calls would fail alike.
    pub fn disables_subscription(&self) -> bool {
        matches!(self.subscription, Some(SubscriptionChange::Disable { .. }))
    }

    /// The attempt log's row of this record, with the id `id` (`wha_…`).
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
///
/// A worker [`claim`](Self::claim)s due deliveries, makes each [`attempt`](Self::attempt)
/// (which never fails) and saves the outcomes with [`record`](Self::record).
///
/// ```
/// use std::sync::Arc;
///
/// use workbench_domain::chrono::{Duration, TimeZone, Utc};
/// use workbench_domain::mocks::{MockClock, MockWebhookRepository, MockWebhookTransport};
/// use workbench_domain::serde_json::json;
/// use workbench_domain::webhook::{
///     DeliveryJob, DeliveryService, HttpMethod, NextStep, RetryPolicy, Subscription,
///     SubscriptionChange, TransportResponse,
/// };
///
/// let now = Utc.with_ymd_and_hms(2026, 11, 22, 10, 0, 0).unwrap();
/// let mut clock = MockClock::new();
/// clock.expect_now().returning(move || now);
/// let mut transport = MockWebhookTransport::new();
/// // The receiver is down.
/// transport
///     .expect_send()
///     .withf(|call| call.message_id == "evt_1" && call.secrets.len() == 1)
///     .times(1)
///     .returning(|_| TransportResponse {
///         status: Some(503),
///         retry_after_seconds: None,
///         body: String::new(),
///         error: None,
///         failure: None,
///         duration_ms: 12,
///     });
/// let mut repo = MockWebhookRepository::new();
/// // The claim still holds the delivery: its outcome is saved, none refused.
/// repo.expect_record().times(1).returning(|_| Ok(0));
/// let deliveries = DeliveryService::new(
///     Arc::new(repo),
///     Arc::new(transport),
///     Arc::new(clock),
///     RetryPolicy::default(),
/// );
///
/// # let subscription = Subscription {
/// #     id: "whk_1".into(),
/// #     environment_id: "env_1".into(),
/// #     url: "https://example.com/hooks".into(),
/// #     method: HttpMethod::Post,
/// #     headers: Default::default(),
/// #     types: vec!["card-completed".into()],
/// #     card_template_id: None,
/// #     description: None,
/// #     flow_id: None,
/// #     secret: workbench_domain::webhook::new_secret(),
/// #     previous_secret: None,
/// #     previous_secret_until: None,
/// #     enabled: true,
/// #     disabled_reason: None,
/// #     failing_since: None,
/// #     created: now,
/// #     updated: now,
/// # };
/// // A delivery of a healthy subscription, claimed for a minute.
/// let job = DeliveryJob {
///     delivery_id: "whd_1".into(),
///     subscription,
///     event_id: "evt_1".into(),
///     event_name: "card-completed".into(),
///     data: json!({"id": "evt_1", "analyticsEvent": "card-completed"}),
///     attempt: 1,
///     trigger: "scheduled".into(),
///     lease_until: now + Duration::minutes(1),
/// };
/// # let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
/// # rt.block_on(async {
/// let record = deliveries.attempt(job).await;
/// assert_eq!(record.outcome.error.as_deref(), Some("HTTP 503"));
/// // Tried again on the schedule: 5 s after the first attempt, ±20%.
/// let NextStep::RetryAt(at) = record.next else {
///     panic!("expected a retry, got {:?}", record.next)
/// };
/// assert!(at >= now + Duration::seconds(4) && at <= now + Duration::seconds(6));
/// // The first failure of a run: the subscription is failing from now.
/// assert_eq!(record.subscription, Some(SubscriptionChange::Failing { since: now }));
/// assert_eq!(deliveries.record(vec![record]).await, Ok(0));
/// # });
/// ```
pub struct DeliveryService {
    repo: Arc<dyn WebhookRepository>,
    transport: Arc<dyn WebhookTransport>,
    clock: Arc<dyn Clock>,
    policy: RetryPolicy,
}

impl DeliveryService {
    /// A service over these ports. `clock` is the time of claims, signatures and outcomes
    /// (the database's: docs/operations.md, Clocks); `policy` the retry schedule
    /// (`RetryPolicy::default()` is [`DEFAULT_RETRY_SCHEDULE`]).
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
    /// `exclude` (those already at their concurrency cap here), `limit` in all, for `lease`
    /// from now ([`WebhookRepository::claim`]). `lease` must outlast the 15 s call timeout
    /// with room to record the outcome: when it runs out, the delivery is due again and this
    /// holder's outcome is refused.
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
    /// panic is caught (docs/operations.md, When one unit of work fails): the attempt is made
    /// again up to [`unit::ATTEMPTS`] times in all, then the delivery is failed with an
    /// `errorId` in its last error and in the log.
    ///
    /// The call is signed with every secret signing at the clock's now, and stamped with it.
    /// A 2xx is [`NextStep::Done`] (and [`SubscriptionChange::Recovered`] after failures). A
    /// 410 fails the delivery and disables the subscription (`gone`). Any other answer, or
    /// none, disables it (`failing`) once its calls have failed for [`FAILING_DISABLE_AFTER`];
    /// otherwise the delivery is retried on the policy (±20%, a `Retry-After` honoured up to
    /// twice the step) or, out of retries, [`NextStep::Failed`], and the first failure of a
    /// run is [`SubscriptionChange::Failing`]. Nothing is saved here: the record goes to
    /// [`record`](Self::record).
    pub async fn attempt(&self, job: DeliveryJob) -> AttemptRecord {
        let mut cause = String::new();
        for attempt in 1..=unit::ATTEMPTS {
            // Borrowed, not cloned: a job carries its event's data, a JSON tree.
            cause = match unit::catch(self.attempt_once(&job)).await {
                Ok(record) => return record,
                Err(panic) => format!("panic: {panic}"),
            };
            tracing::warn!(unit = "webhook delivery", id = %job.delivery_id, attempt,
                cause = %cause, "a webhook delivery attempt failed; trying it again");
        }
        let failure = unit::Failure::new("webhook delivery", &job.delivery_id, cause);
        AttemptRecord {
            delivery_id: Some(job.delivery_id),
            subscription_id: job.subscription.id.into(),
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
                failure: Some(CallFailure::Other),
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
            subscription_id: job.subscription.id.clone().into(),
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

    /// Saves outcomes, each only if its claim still holds the delivery (docs/architecture.md,
    /// Time, leases and fencing; see [`WebhookRepository::record`]).
    /// Returns how many were stale: their delivery was claimed again meanwhile (this holder's
    /// lease ran out), so another holder's outcome counts, and theirs changed nothing.
    pub async fn record(&self, records: Vec<AttemptRecord>) -> Result<u64, StorageError> {
        self.repo.record(records).await
    }
}

/// The rules after one attempt (docs/api.md, Webhooks: Delivery).
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
