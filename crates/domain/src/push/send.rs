//! Sending pushes (contract §8). When a card whose template has a `notification` becomes
//! active for the first time (`card-published`), the storage adapter writes one job per device
//! of the card's user whose app has an enabled platform, in the same transaction as the event
//! ([`wants`] and [`reaches`] decide which). Workers claim due jobs, [`PushService::attempt`]
//! builds the message ([`PushMessage::of_card`]) and sends it through the [`PushSender`] port,
//! and decides what follows: done, a retry on the [`RetryPolicy`], a failure, or the removal of
//! a token the provider reports dead.

use std::sync::Arc;

use async_trait::async_trait;
use chrono::Duration;
use rand::Rng;
use serde_json::{json, Map, Value};

use super::{provider_of, Device, Provider, PushPlatform};
use crate::card::{AnalyticsEvent, CardInstance, CardStatus};
use crate::retry::RetryPolicy;
use crate::{Clock, StorageError, Timestamp};

/// The push payload limit (spec 8): the payload every provider gets, before its envelope.
pub const MAX_PUSH_PAYLOAD_BYTES: usize = 2_048;
/// 5 s, 30 s, 2 min, 10 min, 1 h, 4 h: a push is worth little a day late.
pub const DEFAULT_PUSH_RETRY_SCHEDULE: &str = "5s,30s,2m,10m,1h,4h";
/// The key of the object that marks a push as the service's, for the SDKs.
pub const PAYLOAD_KEY: &str = "workbench";

/// Whether `event` calls for pushes: a card became active for the first time and its
/// template has a notification.
pub fn wants(event: &AnalyticsEvent) -> bool {
    event.name == "card-published" && event.sends_notifications()
}

/// The platforms (`Web`, `iOS`, `Android`) the card of a card event targets.
pub fn targeted_platforms(event: &AnalyticsEvent) -> &[String] {
    &event.card.platforms
}

/// The card platform (`iOS`, `Android`) whose content a device of `device_platform` shows.
pub fn card_platform(device_platform: &str) -> Option<&'static str> {
    match provider_of(device_platform)? {
        Provider::Fcm => Some("Android"),
        Provider::Apns { .. } => Some("iOS"),
    }
}

/// Whether a card aimed at `target_platforms` (`Web`, `iOS`, `Android`) reaches a device
/// registered for `device_platform` (`GCM`, `FCM`, `APNS`, `APNS_SANDBOX`).
pub fn reaches(target_platforms: &[String], device_platform: &str) -> bool {
    card_platform(device_platform).is_some_and(|p| target_platforms.iter().any(|t| t == p))
}

/// Whether a platform record (`GCM`, `FCM`, `APNS`, `APNS_SANDBOX`) serves a device registered
/// for `device_platform`: the same provider and, for APNs, the same environment. `GCM` and
/// `FCM` are one provider (contract §8), so either serves a device registered with the other.
pub fn serves(platform: &str, device_platform: &str) -> bool {
    provider_of(platform).is_some() && provider_of(platform) == provider_of(device_platform)
}

/// The platform that serves `device` among an app's platforms: an enabled one first.
pub fn platform_for<'a>(
    platforms: &'a [PushPlatform],
    device: &Device,
) -> Option<&'a PushPlatform> {
    let serving = |p: &&PushPlatform| {
        p.environment_id == device.environment_id
            && p.app_id == device.app_id
            && serves(&p.platform, &device.platform)
    };
    platforms
        .iter()
        .filter(serving)
        .find(|p| p.enabled)
        .or_else(|| platforms.iter().find(serving))
}

/// What a push says, whatever the provider: the adapter puts it in the provider's format.
#[derive(Debug, Clone, PartialEq)]
pub struct PushMessage {
    pub title: Option<String>,
    pub body: String,
    /// The object the SDKs recognise under [`PAYLOAD_KEY`]: `cardInstanceId`, `streamId` and
    /// `detail` (the trigger's `notificationDetail`).
    pub data: Value,
    /// Repeats of one card replace each other on the device.
    pub collapse_id: String,
    /// The provider stops trying when the card expires.
    pub expires_at: Option<Timestamp>,
}

impl PushMessage {
    /// A message from a rendered `notification` (spec 2.5: `attributes.body`, and a `title`
    /// when the template has one). None when there is no body to show.
    pub fn new(
        notification: &Value,
        card_instance_id: &str,
        stream_id: &str,
        detail: &Value,
        expires_at: Option<Timestamp>,
    ) -> Option<PushMessage> {
        let text = |key: &str| {
            notification
                .pointer(&format!("/attributes/{key}"))
                .and_then(Value::as_str)
                .filter(|s| !s.trim().is_empty())
                .map(str::to_owned)
        };
        let body = text("body")?;
        let detail = match detail {
            Value::Object(_) => detail.clone(),
            _ => Value::Object(Map::new()),
        };
        Some(PushMessage {
            title: text("title"),
            body,
            data: json!({
                "cardInstanceId": card_instance_id,
                "streamId": stream_id,
                "detail": detail,
            }),
            collapse_id: card_instance_id.to_owned(),
            expires_at,
        })
    }

    /// The message of `card` for a device of `device_platform`: the notification as rendered
    /// for that platform. The stream is the card's first, `All cards`, which every card is in.
    pub fn of_card(card: &CardInstance, device_platform: &str) -> Option<PushMessage> {
        let platform = card_platform(device_platform)?;
        let view = card.content.view(platform, &card.platforms)?;
        PushMessage::new(
            view.get("notification")?,
            &card.id,
            card.stream_ids
                .first()
                .map(String::as_str)
                .unwrap_or_default(),
            card.context
                .value()
                .get("notificationDetail")
                .unwrap_or(&Value::Null),
            card.expires_at,
        )
    }

    /// The payload the limit applies to: title, body and the service's object, as JSON.
    pub fn payload(&self) -> Value {
        let mut payload = Map::new();
        if let Some(title) = &self.title {
            payload.insert("title".into(), Value::String(title.clone()));
        }
        payload.insert("body".into(), Value::String(self.body.clone()));
        payload.insert(PAYLOAD_KEY.into(), self.data.clone());
        Value::Object(payload)
    }

    pub fn payload_bytes(&self) -> usize {
        self.payload().to_string().len()
    }
}

/// What the provider said of one push.
#[derive(Debug, Clone, PartialEq)]
pub enum SendOutcome {
    Delivered,
    /// The token will never work again (FCM `UNREGISTERED`, APNs 410 or `BadDeviceToken`).
    DeadToken(String),
    /// A passing failure: no answer, 429, 5xx, a provider token to renew.
    Transient {
        reason: String,
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
    pub outcome: SendOutcome,
}

/// The outbound side: FCM HTTP v1 and APNs, authenticated with the platform's credentials.
#[cfg_attr(feature = "mock", mockall::automock)]
#[async_trait]
pub trait PushSender: Send + Sync {
    async fn send(&self, platform: &PushPlatform, token: &str, message: &PushMessage)
        -> SendReport;
}

/// A leased push: one card to one device.
#[derive(Debug, Clone, PartialEq)]
pub struct PushJob {
    pub id: String,
    pub environment_id: String,
    pub user_id: String,
    pub token: String,
    /// The number of this attempt, from 1.
    pub attempt: u32,
    /// The device as registered now; None when it was unregistered or moved to another user.
    pub device: Option<Device>,
    /// None when the card no longer exists.
    pub card: Option<CardInstance>,
    /// The platform of the device's app and platform, None when there is none.
    pub platform: Option<PushPlatform>,
    /// The end of the claim's lease, which is also its fencing token (contract §19): the
    /// outcome is recorded only while the push is still leased until exactly this.
    pub lease_until: Timestamp,
}

/// What becomes of a push after an attempt.
#[derive(Debug, Clone, PartialEq)]
pub enum PushNext {
    Sent,
    RetryAt(Timestamp),
    Failed,
    /// The provider reported the token dead: the device is removed.
    DeadToken,
    /// Nothing to send any more (the card closed, the device or platform went away).
    Skipped,
}

impl PushNext {
    /// The job's stored status.
    pub fn status(&self) -> &'static str {
        match self {
            PushNext::Sent => "sent",
            PushNext::RetryAt(_) => "pending",
            PushNext::Failed => "failed",
            PushNext::DeadToken => "dead_token",
            PushNext::Skipped => "skipped",
        }
    }
}

/// An attempt and its consequences, saved by [`PushJobRepository::record`].
#[derive(Debug, Clone, PartialEq)]
pub struct PushRecord {
    pub job_id: String,
    pub environment_id: String,
    pub user_id: String,
    pub token: String,
    pub attempt: u32,
    pub next: PushNext,
    pub status_code: Option<u16>,
    pub error: Option<String>,
    pub at: Timestamp,
    /// The claim this outcome belongs to ([`PushJob::lease_until`]).
    pub lease: Timestamp,
}

/// A push as the API shows it.
#[derive(Debug, Clone, PartialEq)]
pub struct PushStatus {
    pub id: String,
    pub card_instance_id: String,
    pub token: String,
    pub app_id: String,
    pub platform: String,
    /// `pending`, `sent`, `failed`, `dead_token` or `skipped`.
    pub status: String,
    pub attempts: u32,
    pub status_code: Option<u16>,
    pub error: Option<String>,
    pub next_attempt_at: Option<Timestamp>,
    pub created: Timestamp,
    pub updated: Timestamp,
}

#[cfg_attr(feature = "mock", mockall::automock)]
#[async_trait]
pub trait PushJobRepository: Send + Sync {
    /// Leases due jobs until `lease_until`, with their device, card and platform as they are
    /// now (credentials opened).
    async fn claim(
        &self,
        now: Timestamp,
        lease_until: Timestamp,
        limit: u32,
    ) -> Result<Vec<PushJob>, StorageError>;
    /// Saves outcomes in one transaction; a [`PushNext::DeadToken`] also removes the device
    /// (if it still belongs to the job's user). An outcome is saved only while its push is
    /// still pending, at the attempt before it and leased until exactly its lease (the claim's
    /// fencing token, contract §19); otherwise nothing of it is. Returns how many were refused.
    async fn record(&self, records: Vec<PushRecord>) -> Result<u64, StorageError>;
    /// The pushes of a card of the user, oldest first; None when the user has no such card.
    async fn of_card(
        &self,
        environment_id: &str,
        user_id: &str,
        card_id: &str,
    ) -> Result<Option<Vec<PushStatus>>, StorageError>;
}

/// Claims, sends and records pushes. Concurrency is the caller's; every decision is here.
pub struct PushService {
    repo: Arc<dyn PushJobRepository>,
    sender: Arc<dyn PushSender>,
    clock: Arc<dyn Clock>,
    policy: RetryPolicy,
}

impl PushService {
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

    pub async fn claim(&self, limit: u32, lease: Duration) -> Result<Vec<PushJob>, StorageError> {
        let now = self.clock.now();
        self.repo.claim(now, now + lease, limit).await
    }

    /// Sends one push and decides what follows. Never fails: every problem is an outcome, and a
    /// panic is caught (contract §10): the send is tried again up to [`crate::unit::ATTEMPTS`]
    /// times in all, then the push is failed with an `errorId` in its error and in the log.
    pub async fn attempt(&self, job: PushJob) -> PushRecord {
        let mut cause = String::new();
        for attempt in 1..=crate::unit::ATTEMPTS {
            // Borrowed, not cloned: a job carries its card, device and platform.
            cause = match crate::unit::catch(self.attempt_once(&job)).await {
                Ok(record) => return record,
                Err(panic) => format!("panic: {panic}"),
            };
            tracing::warn!(unit = "push", id = %job.id, attempt, cause = %cause, "a push attempt failed; trying it again");
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

    /// The pushes of one of the user's cards, oldest first.
    pub async fn of_card(
        &self,
        who: &crate::Principal,
        env: &str,
        user_id: &str,
        card_id: &str,
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
#[path = "send_tests.rs"]
mod tests;
