//! Sending pushes (docs/api.md, Sending pushes). When a card whose template has a
//! `notification` becomes active for the first time (`card-published`), the storage adapter
//! writes one job per device of the card's user whose app has an enabled platform, in the same
//! transaction as the event ([`wants`], [`reaches`] and [`serves`] decide which). Workers claim
//! due jobs, [`PushService::attempt`] builds the message ([`PushMessage::of_card`]) and sends it
//! through the [`PushSender`] port, and decides what follows: done, a retry on the
//! [`RetryPolicy`], a failure, or the removal of a token the provider reports dead. Claims are
//! leases and fences (docs/architecture.md, Time, leases and fencing).

use crate::id::{CardId, EndUserId, EnvironmentId};
use std::sync::Arc;

use async_trait::async_trait;
use chrono::Duration;
use rand::Rng;

use super::{Device, PushPlatform};
use crate::card::{CardInstance, CardStatus};
use crate::retry::RetryPolicy;
use crate::{Clock, StorageError, Timestamp};

mod message;
mod target;

pub use message::{PushMessage, MAX_PUSH_PAYLOAD_BYTES, PAYLOAD_KEY};
pub use target::{card_platform, platform_for, reaches, serves, targeted_platforms, wants};

/// 5 s, 30 s, 2 min, 10 min, 1 h, 4 h: a push is worth little a day late. The default of
/// `WORKBENCH_PUSH_RETRY_SCHEDULE`, in [`RetryPolicy::parse`]'s format.
pub const DEFAULT_PUSH_RETRY_SCHEDULE: &str = "5s,30s,2m,10m,1h,4h";

/// What the provider said of one push.
#[derive(Debug, Clone, PartialEq)]
pub enum SendOutcome {
    /// The provider accepted the push.
    Delivered,
    /// The token will never work again (FCM `UNREGISTERED`, APNs 410 or `BadDeviceToken`).
    DeadToken(String),
    /// A passing failure: no answer, 429, 5xx, a provider token to renew.
    Transient {
        /// What went wrong, kept as the push's error.
        reason: String,
        /// The provider's `Retry-After`, in seconds, when it gave one; honoured up to twice
        /// the schedule's step.
        retry_after_seconds: Option<u64>,
    },
    /// The provider refused the message or the credentials; sending again will not help.
    Refused(String),
}

/// One call to a provider.
#[derive(Debug, Clone, PartialEq)]
pub struct SendReport {
    /// The provider's HTTP status, when it answered.
    pub status: Option<u16>,
    /// What the answer (or its absence) means for the push.
    pub outcome: SendOutcome,
}

/// The outbound side: FCM HTTP v1 and APNs, authenticated with the platform's credentials.
#[cfg_attr(feature = "mock", mockall::automock)]
#[async_trait]
pub trait PushSender: Send + Sync {
    /// Sends `message` to the device `token` through `platform` (its provider, credentials
    /// and properties), in the provider's format (docs/api.md, Sending pushes). Never fails:
    /// every problem is an outcome. A token the provider reports gone is
    /// [`SendOutcome::DeadToken`]; what may pass (no answer, a timeout, 429, 5xx, a provider
    /// token to renew) [`SendOutcome::Transient`]; what sending again cannot mend (bad
    /// credentials or topic, a payload refused, a platform value it cannot send to)
    /// [`SendOutcome::Refused`]. A call must end well within the claim's lease (a push is
    /// leased for a minute, four times the 15 s call timeout: docs/operations.md, Background
    /// work).
    async fn send(&self, platform: &PushPlatform, token: &str, message: &PushMessage)
        -> SendReport;
}

/// A leased push: one card to one device.
#[derive(Debug, Clone, PartialEq)]
pub struct PushJob {
    /// `psh_…`.
    pub id: String,
    /// The environment of the card, the device and the platform.
    pub environment_id: String,
    /// The card's user, whose device the push was queued for.
    pub user_id: String,
    /// The device token the push was queued for.
    pub token: String,
    /// The number of this attempt, from 1.
    pub attempt: u32,
    /// The device as registered now; None when it was unregistered or moved to another user.
    pub device: Option<Device>,
    /// None when the card no longer exists.
    pub card: Option<CardInstance>,
    /// The platform of the device's app and platform, None when there is none.
    pub platform: Option<PushPlatform>,
    /// The end of the claim's lease, which is also its fencing token (docs/architecture.md,
    /// Time, leases and fencing): the outcome is recorded only while the push is still leased
    /// until exactly this.
    pub lease_until: Timestamp,
}

/// Where a push job stands. `Pending` is due (now or at its next attempt); the others are
/// final.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PushJobStatus {
    /// Not sent yet: due at its next attempt.
    Pending,
    /// The provider accepted it.
    Sent,
    /// Given up.
    Failed,
    /// The provider reported the device's token dead.
    DeadToken,
    /// Nothing to send any more.
    Skipped,
}

crate::spelling::spelled!(PushJobStatus {
    Pending => "pending",
    Sent => "sent",
    Failed => "failed",
    DeadToken => "dead_token",
    Skipped => "skipped",
});

/// What becomes of a push after an attempt.
#[derive(Debug, Clone, PartialEq)]
pub enum PushNext {
    /// The provider accepted it (`sent`).
    Sent,
    /// A passing failure: due again at this time (`pending`).
    RetryAt(Timestamp),
    /// Given up (`failed`): refused by the provider, out of retries or past the card's expiry,
    /// over the payload limit, or failed as a unit of work.
    Failed,
    /// The provider reported the token dead: the device is removed.
    DeadToken,
    /// Nothing to send any more (the card closed, the device or platform went away).
    Skipped,
}

impl PushNext {
    /// The job's stored status.
    pub fn status(&self) -> PushJobStatus {
        match self {
            PushNext::Sent => PushJobStatus::Sent,
            PushNext::RetryAt(_) => PushJobStatus::Pending,
            PushNext::Failed => PushJobStatus::Failed,
            PushNext::DeadToken => PushJobStatus::DeadToken,
            PushNext::Skipped => PushJobStatus::Skipped,
        }
    }
}

/// An attempt and its consequences, saved by [`PushJobRepository::record`].
#[derive(Debug, Clone, PartialEq)]
pub struct PushRecord {
    /// The push ([`PushJob::id`]).
    pub job_id: String,
    /// The job's environment.
    pub environment_id: String,
    /// The job's user: on a dead token, the device is removed only while it is still theirs.
    pub user_id: String,
    /// The job's device token.
    pub token: String,
    /// The attempt this records, from 1 ([`PushJob::attempt`]).
    pub attempt: u32,
    /// What becomes of the push.
    pub next: PushNext,
    /// The provider's HTTP status, when it answered.
    pub status_code: Option<u16>,
    /// Why it was not sent, when it was not: the provider's reason, why it was skipped, or
    /// the failure (with its `errorId`).
    pub error: Option<String>,
    /// When the attempt ended, by the service's clock.
    pub at: Timestamp,
    /// The claim this outcome belongs to ([`PushJob::lease_until`]).
    pub lease: Timestamp,
}

/// A push as the API shows it.
#[derive(Debug, Clone, PartialEq)]
pub struct PushStatus {
    /// `psh_…`.
    pub id: String,
    /// The card it is for.
    pub card_instance_id: String,
    /// `deviceToken`: the device it is for.
    pub token: String,
    /// The device's app, as when the push was queued.
    pub app_id: String,
    /// The device's platform (`GCM`, `FCM`, `APNS`, `APNS_SANDBOX`), as when it was queued.
    pub platform: String,
    /// `pending`, `sent`, `failed`, `dead_token` or `skipped`.
    pub status: String,
    /// Attempts recorded so far.
    pub attempts: u32,
    /// The provider's HTTP status at the last attempt, when it answered.
    pub status_code: Option<u16>,
    /// The last attempt's error, if any.
    pub error: Option<String>,
    /// When the next attempt is due; None unless the push is pending.
    pub next_attempt_at: Option<Timestamp>,
    /// When it was queued: the time of the card's `card-published` event.
    pub created: Timestamp,
    /// When its last outcome was recorded.
    pub updated: Timestamp,
}

/// The push outbox (docs/architecture.md, The engine). Its jobs are written by the storage
/// adapter in the transaction that appends a `card-published` event calling for them, one per
/// device of the card's user that the card reaches through an enabled platform of the device's
/// app ([`wants`], [`reaches`], [`serves`]); this port claims them and records their outcomes.
/// Everything a job is read with belongs to the job's environment.
#[cfg_attr(feature = "mock", mockall::automock)]
#[async_trait]
pub trait PushJobRepository: Send + Sync {
    /// Leases due jobs until `lease_until`, with their device, card and platform as they are
    /// now (credentials opened).
    ///
    /// Due: pending, next attempt at or before `now`; oldest due first, at most `limit`. The
    /// claim writes `lease_until` into each job, which is then not due again until that time,
    /// and hands it over as [`PushJob::lease_until`]; two claims at once (several processes)
    /// never take the same job. [`PushJob::attempt`] is the attempts recorded plus one. The
    /// device is the environment's device with the job's token, whoever it belongs to now;
    /// the platform is the one [`platform_for`] picks for it; the card is None unless it
    /// exists in the job's environment.
    async fn claim(
        &self,
        now: Timestamp,
        lease_until: Timestamp,
        limit: u32,
    ) -> Result<Vec<PushJob>, StorageError>;
    /// Saves outcomes in one transaction; a [`PushNext::DeadToken`] also removes the device
    /// (if it still belongs to the job's user). An outcome is saved only while its push is
    /// still pending, at the attempt before it and leased until exactly its lease (the claim's
    /// fencing token, docs/architecture.md, Time, leases and fencing); otherwise nothing of it
    /// is. Returns how many were refused; an outcome saved again after it was saved is refused
    /// too, and changes nothing.
    async fn record(&self, records: Vec<PushRecord>) -> Result<u64, StorageError>;
    /// The pushes of a card of the user, oldest first; None when the user has no such card
    /// (an empty list when the card has no pushes).
    async fn of_card(
        &self,
        environment_id: &str,
        user_id: &str,
        card_id: &str,
    ) -> Result<Option<Vec<PushStatus>>, StorageError>;
}

/// Claims, sends and records pushes. Concurrency is the caller's; every decision is here.
///
/// A worker [`claim`](Self::claim)s due pushes, makes each [`attempt`](Self::attempt) (which
/// never fails) and saves the outcomes with [`record`](Self::record).
///
/// ```
/// use std::sync::Arc;
///
/// use workbench_domain::card::{CardContent, CardInstance, CardStatus};
/// use workbench_domain::chrono::{Duration, TimeZone, Utc};
/// use workbench_domain::mocks::{MockClock, MockPushJobRepository, MockPushSender};
/// use workbench_domain::push::{
///     Device, PushJob, PushNext, PushPlatform, PushService, SendOutcome, SendReport,
///     DEFAULT_PUSH_RETRY_SCHEDULE,
/// };
/// use workbench_domain::retry::RetryPolicy;
///
/// let now = Utc.with_ymd_and_hms(2026, 11, 22, 10, 0, 0).unwrap();
/// let mut clock = MockClock::new();
/// clock.expect_now().returning(move || now);
/// let mut sender = MockPushSender::new();
/// sender
///     .expect_send()
///     .withf(|_, token, message| token == "tok_1" && message.body == "Your order has shipped")
///     .times(1)
///     .returning(|_, _, _| SendReport { status: Some(200), outcome: SendOutcome::Delivered });
/// let mut repo = MockPushJobRepository::new();
/// // The claim still holds the push: its outcome is saved, none refused.
/// repo.expect_record().times(1).returning(|_| Ok(0));
/// let pushes = PushService::new(
///     Arc::new(repo),
///     Arc::new(sender),
///     Arc::new(clock),
///     RetryPolicy::parse(DEFAULT_PUSH_RETRY_SCHEDULE).unwrap(),
/// );
///
/// // An active iOS card whose template notifies, for a device of its user on an app with an
/// // enabled APNs platform.
/// let content = CardContent::shared(
///     r#"{"notification": {"attributes": {"body": "Your order has shipped"}}}"#,
///     true,
/// );
/// # let card = CardInstance {
/// #     id: "crd_1".into(),
/// #     environment_id: "env_1".into(),
/// #     user_id: "user-1".into(),
/// #     flow_instance_id: "fin_1".into(),
/// #     invocation_id: "inv_1".into(),
/// #     flow_id: "flw_1".into(),
/// #     flow_version: 1,
/// #     step_id: "s1".into(),
/// #     template_id: "shipped".into(),
/// #     template_name: "Shipped".into(),
/// #     status: CardStatus::Active,
/// #     priority: 5,
/// #     stream_ids: vec!["str_all".into()],
/// #     platforms: vec!["iOS".into()],
/// #     content,
/// #     context: workbench_domain::serde_json::json!({}).into(),
/// #     embargo_until: None,
/// #     expires_at: None,
/// #     snoozed_until: None,
/// #     published_at: Some(now),
/// #     created: now,
/// #     updated: now,
/// # };
/// # let device = Device {
/// #     environment_id: "env_1".into(),
/// #     user_id: "user-1".into(),
/// #     token: "tok_1".into(),
/// #     app_id: "com.example".into(),
/// #     platform: "APNS".into(),
/// #     created: now,
/// #     updated: now,
/// # };
/// # let platform = PushPlatform {
/// #     id: "npl_1".into(),
/// #     environment_id: "env_1".into(),
/// #     app_id: "com.example".into(),
/// #     platform: "APNS".into(),
/// #     arn: workbench_domain::push::arn("env_1", "APNS", "com.example"),
/// #     enabled: true,
/// #     credential: "-----BEGIN PRIVATE KEY-----...".into(),
/// #     principal: Some("ABC123DEFG".into()),
/// #     properties: Default::default(),
/// #     facts: Default::default(),
/// #     created: now,
/// #     updated: now,
/// # };
/// let job = PushJob {
///     id: "psh_1".into(),
///     environment_id: "env_1".into(),
///     user_id: "user-1".into(),
///     token: "tok_1".into(),
///     attempt: 1,
///     device: Some(device),
///     card: Some(card),
///     platform: Some(platform),
///     lease_until: now + Duration::minutes(1),
/// };
/// # let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
/// # rt.block_on(async {
/// let record = pushes.attempt(job).await;
/// assert_eq!(record.next, PushNext::Sent);
/// assert_eq!((record.status_code, record.error.as_deref()), (Some(200), None));
/// assert_eq!(record.lease, now + Duration::minutes(1));
/// assert_eq!(pushes.record(vec![record]).await, Ok(0));
/// # });
/// ```
pub struct PushService {
    repo: Arc<dyn PushJobRepository>,
    sender: Arc<dyn PushSender>,
    clock: Arc<dyn Clock>,
    policy: RetryPolicy,
}

impl PushService {
    /// A service over these ports. `clock` is the time of claims and outcomes (the
    /// database's: docs/operations.md, Clocks); `policy` the schedule passing failures are
    /// retried on ([`DEFAULT_PUSH_RETRY_SCHEDULE`] unless configured otherwise).
    pub fn new(
        repo: Arc<dyn PushJobRepository>,
        sender: Arc<dyn PushSender>,
        clock: Arc<dyn Clock>,
        policy: RetryPolicy,
    ) -> Self {
        Self {
            repo,
            sender,
            clock,
            policy,
        }
    }

    /// Leases up to `limit` due pushes for `lease` from now ([`PushJobRepository::claim`]).
    /// `lease` must outlast a send and the saving of its outcome: when it runs out, the push is
    /// due again and this holder's outcome is refused.
    pub async fn claim(&self, limit: u32, lease: Duration) -> Result<Vec<PushJob>, StorageError> {
        let now = self.clock.now();
        self.repo.claim(now, now + lease, limit).await
    }

    /// Sends one push and decides what follows. Never fails: every problem is an outcome, and a
    /// panic is caught (docs/operations.md, When one unit of work fails): the send is tried
    /// again up to [`crate::unit::ATTEMPTS`] times in all, then the push is failed with an
    /// `errorId` in its error and in the log.
    ///
    /// Nothing is sent, and the push is [`PushNext::Skipped`] with the reason, when the device
    /// was unregistered or moved to another user, the card no longer exists or is not active,
    /// the platform is gone or disabled, or the card has no notification for the device's
    /// platform; a payload over [`MAX_PUSH_PAYLOAD_BYTES`] is [`PushNext::Failed`] without a
    /// call. Otherwise the [`PushSender`]'s outcome decides: delivered is
    /// [`PushNext::Sent`], a dead token [`PushNext::DeadToken`], a refusal
    /// [`PushNext::Failed`], and a passing failure [`PushNext::RetryAt`] the policy's next
    /// step (±20%, a `Retry-After` honoured up to twice the step) while it comes before the
    /// card expires, else [`PushNext::Failed`]. Nothing is saved here: the record goes to
    /// [`record`](Self::record).
    pub async fn attempt(&self, job: PushJob) -> PushRecord {
        let mut cause = String::new();
        for attempt in 1..=crate::unit::ATTEMPTS {
            // Borrowed, not cloned: a job carries its card, device and platform.
            cause = match crate::unit::catch(self.attempt_once(&job)).await {
                Ok(record) => return record,
                Err(panic) => format!("panic: {panic}"),
            };
            tracing::warn!(unit = "push", id = %job.id, attempt, cause = %cause,
                "a push attempt failed; trying it again");
        }
        let failure = crate::unit::Failure::new("push", &job.id, cause);
        PushRecord {
            error: Some(failure.message()),
            job_id: job.id,
            environment_id: job.environment_id,
            user_id: job.user_id,
            token: job.token,
            attempt: job.attempt,
            next: PushNext::Failed,
            status_code: None,
            at: self.clock.now(),
            lease: job.lease_until,
        }
    }

    async fn attempt_once(&self, job: &PushJob) -> PushRecord {
        let record = |next: PushNext, status_code: Option<u16>, error: Option<String>| PushRecord {
            job_id: job.id.clone(),
            environment_id: job.environment_id.clone(),
            user_id: job.user_id.clone(),
            token: job.token.clone(),
            attempt: job.attempt,
            next,
            status_code,
            error,
            at: self.clock.now(),
            lease: job.lease_until,
        };
        let (message, platform, device) = match ready(job) {
            Ok(ready) => ready,
            Err(why) => return record(PushNext::Skipped, None, Some(why)),
        };
        let size = message.payload_bytes();
        if size > MAX_PUSH_PAYLOAD_BYTES {
            let why =
                format!("the push payload is {size} bytes; the limit is {MAX_PUSH_PAYLOAD_BYTES}");
            return record(PushNext::Failed, None, Some(why));
        }
        let report = self.sender.send(platform, &device.token, &message).await;
        let at = self.clock.now();
        let jitter = rand::thread_rng().gen_range(-1.0..=1.0);
        let next = decide(
            &self.policy,
            job.attempt,
            &report.outcome,
            message.expires_at,
            at,
            jitter,
        );
        let error = match report.outcome {
            SendOutcome::Delivered => None,
            SendOutcome::DeadToken(why)
            | SendOutcome::Refused(why)
            | SendOutcome::Transient { reason: why, .. } => Some(why),
        };
        record(next, report.status, error)
    }

    /// Saves outcomes, each only if its claim still holds the push; returns how many were
    /// stale (see [`PushJobRepository::record`]).
    pub async fn record(&self, records: Vec<PushRecord>) -> Result<u64, StorageError> {
        self.repo.record(records).await
    }

    /// The pushes of one of the user's cards, oldest first. Needs [`crate::Permission::UsersRead`]
    /// on `env`; fails with [`crate::DomainError::NotFound`] when the user has no such card.
    pub async fn of_card(
        &self,
        who: &crate::Principal,
        env: &EnvironmentId,
        user_id: &EndUserId,
        card_id: &CardId,
    ) -> Result<Vec<PushStatus>, crate::DomainError> {
        who.authorize(env, crate::Permission::UsersRead)?;
        self.repo
            .of_card(env, user_id, card_id)
            .await?
            .ok_or(crate::DomainError::NotFound(crate::Resource::Card))
    }
}

/// The message to send, with the platform and device to send it through, or why there is
/// nothing to send any more.
fn ready(job: &PushJob) -> Result<(PushMessage, &PushPlatform, &Device), String> {
    let device = job
        .device
        .as_ref()
        .filter(|d| d.user_id == job.user_id)
        .ok_or("the device was unregistered or moved to another user")?;
    let card = job.card.as_ref().ok_or("the card no longer exists")?;
    if card.status != CardStatus::Active {
        return Err(format!(
            "the card is {}; only active cards are pushed",
            card.status.as_str()
        ));
    }
    let platform = job.platform.as_ref().filter(|p| p.enabled).ok_or_else(|| {
        format!(
            "no enabled {} platform for app {:?}",
            device.platform, device.app_id
        )
    })?;
    let message = PushMessage::of_card(card, &device.platform).ok_or_else(|| {
        format!(
            "the card has no notification for {}",
            card_platform(&device.platform).unwrap_or("this platform")
        )
    })?;
    Ok((message, platform, device))
}

/// The rules after one call: a dead token is removed, a refusal is final, a passing failure
/// is retried on the schedule unless the card expires first.
pub(crate) fn decide(
    policy: &RetryPolicy,
    attempt: u32,
    outcome: &SendOutcome,
    expires_at: Option<Timestamp>,
    at: Timestamp,
    jitter: f64,
) -> PushNext {
    match outcome {
        SendOutcome::Delivered => PushNext::Sent,
        SendOutcome::DeadToken(_) => PushNext::DeadToken,
        SendOutcome::Refused(_) => PushNext::Failed,
        SendOutcome::Transient {
            retry_after_seconds,
            ..
        } => match policy.delay_after(attempt, *retry_after_seconds, jitter) {
            Some(delay) if expires_at.is_none_or(|e| at + delay < e) => {
                PushNext::RetryAt(at + delay)
            }
            _ => PushNext::Failed,
        },
    }
}

#[cfg(test)]
mod tests;
