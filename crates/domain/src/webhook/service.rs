//! The subscription use cases: subscribe, list, read, edit, enable, disable, rotate the
//! secret, delete, the attempt log, resend, recover and the test call (docs/api.md, Webhooks).

use std::sync::Arc;

use serde_json::Value;

use super::*;
use crate::id::{EnvironmentId, EventId, WebhookId};

/// The webhook API (role `workbench`): docs/api.md, Webhooks. Reading needs
/// [`Permission::WebhooksRead`] on the environment, everything else
/// [`Permission::WebhooksWrite`]; a caller without the environment gets
/// [`DomainError::Unauthenticated`], one without the permission [`DomainError::Forbidden`]. A
/// subscription of another environment is [`DomainError::NotFound`].
///
/// ```
/// use std::sync::Arc;
///
/// use workbench_domain::mocks::{MockClock, MockWebhookRepository, MockWebhookTransport};
/// use workbench_domain::serde_json::json;
/// use workbench_domain::webhook::{HttpMethod, WebhookService};
/// use workbench_domain::{ConflictKind, DomainError, Principal};
///
/// let mut transport = MockWebhookTransport::new();
/// transport.expect_check_url().returning(|_| Ok(()));
/// let mut repo = MockWebhookRepository::new();
/// // The first subscribe finds room; the second finds the environment at its limit.
/// let mut room = true;
/// repo.expect_create().times(2).returning(move |_, limit| {
///     assert_eq!(limit, 100);
///     Ok(std::mem::replace(&mut room, false))
/// });
/// let mut clock = MockClock::new();
/// clock.expect_now().returning(workbench_domain::chrono::Utc::now);
/// let webhooks = WebhookService::new(Arc::new(repo), Arc::new(transport), Arc::new(clock));
/// let who = Principal::trusted("example-service", "org_1", &["env_1"]);
///
/// let body = json!({"types": ["card-completed"], "url": "https://example.com/hooks"});
/// # let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
/// # rt.block_on(async {
/// let subscription = webhooks.subscribe(&who, &"env_1".into(), &body).await.unwrap();
/// assert!(subscription.enabled && subscription.id.starts_with("whk_"));
/// assert_eq!(subscription.method, HttpMethod::Post);
/// assert!(subscription.secret.starts_with("whsec_"));
///
/// let full = webhooks.subscribe(&who, &"env_1".into(), &body).await;
/// assert!(matches!(
///     full,
///     Err(DomainError::Conflict { kind: ConflictKind::SubscriptionLimit, .. })
/// ));
/// # });
/// ```
pub struct WebhookService {
    repo: Arc<dyn WebhookRepository>,
    transport: Arc<dyn WebhookTransport>,
    clock: Arc<dyn Clock>,
}

impl WebhookService {
    /// A service over these ports; `clock` stamps subscriptions, queued resends and test
    /// calls.
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
    ///
    /// The new subscription is enabled, with a new `whk_…` id and a new secret
    /// ([`new_secret`]). Fails with [`DomainError::Validation`] for the request's problems
    /// ([`SubscriptionRequest::parse`]) or a URL the [`WebhookTransport`] refuses (field
    /// `url`, with its reason), and a [`DomainError::Conflict`] of kind
    /// [`ConflictKind::SubscriptionLimit`] when the environment has
    /// [`MAX_SUBSCRIPTIONS_PER_ENVIRONMENT`] already.
    pub async fn subscribe(
        &self,
        who: &Principal,
        env: &EnvironmentId,
        body: &Value,
    ) -> Result<Subscription, DomainError> {
        who.authorize(env, Permission::WebhooksWrite)?;
        let request = SubscriptionRequest::parse(body)?;
        if let Err(reason) = self.transport.check_url(&request.url).await {
            return Err(DomainError::invalid("url", reason));
        }
        let now = self.clock.now();
        let subscription = Subscription {
            id: new_id(IdKind::Webhook).into(),
            environment_id: env.as_str().to_owned(),
            url: request.url,
            method: request.method,
            headers: request.headers,
            types: request.types,
            card_template_id: request.card_template_id,
            flow_id: request.flow_id,
            description: request.description,
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

    /// Every subscription of `env`, by id. The records carry their secrets: a list shown to
    /// callers leaves them out (docs/api.md, Webhooks).
    pub async fn list(
        &self,
        who: &Principal,
        env: &EnvironmentId,
    ) -> Result<Vec<Subscription>, DomainError> {
        who.authorize(env, Permission::WebhooksRead)?;
        let list = self.repo.list(env).await?;
        Ok(list.into_iter().map(|s| shown_to(who, s)).collect())
    }

    /// The subscription `id` of `env`, secret included for a caller that may change webhooks
    /// ([`Permission::WebhooksWrite`]); for one that may only read them, masked
    /// ([`Subscription::masked`]). Fails with [`DomainError::NotFound`] when there is none.
    pub async fn get(
        &self,
        who: &Principal,
        env: &EnvironmentId,
        id: &WebhookId,
    ) -> Result<Subscription, DomainError> {
        who.authorize(env, Permission::WebhooksRead)?;
        Ok(shown_to(who, self.find(env, id).await?))
    }

    async fn find(&self, env: &str, id: &str) -> Result<Subscription, DomainError> {
        self.repo
            .get(env, id)
            .await?
            .ok_or(DomainError::NotFound(Resource::Webhook))
    }

    /// `DELETE /webhook/{id}`: stops deliveries; pending ones are cancelled. Idempotent.
    /// Disabled by the API, its `disabledReason` is `api`; one disabled already is answered
    /// unchanged. Fails with [`DomainError::NotFound`] when there is no such subscription.
    pub async fn disable(
        &self,
        who: &Principal,
        env: &EnvironmentId,
        id: &WebhookId,
    ) -> Result<Subscription, DomainError> {
        self.switch_enabled(who, env, id, false).await
    }

    /// Re-enables a disabled subscription; its failure history starts afresh. Deliveries
    /// cancelled meanwhile stay so (see [`recover`](Self::recover)); one enabled already is
    /// answered unchanged. Fails with [`DomainError::NotFound`] when there is no such
    /// subscription.
    pub async fn enable(
        &self,
        who: &Principal,
        env: &EnvironmentId,
        id: &WebhookId,
    ) -> Result<Subscription, DomainError> {
        self.switch_enabled(who, env, id, true).await
    }

    /// Enables or disables the subscription, stored only when it was not so already: enabled,
    /// its failure history starts afresh; disabled, by the API (`disabledReason` `api`).
    async fn switch_enabled(
        &self,
        who: &Principal,
        env: &EnvironmentId,
        id: &WebhookId,
        enabled: bool,
    ) -> Result<Subscription, DomainError> {
        who.authorize(env, Permission::WebhooksWrite)?;
        let mut sub = self.find(env, id).await?;
        if sub.enabled != enabled {
            sub.enabled = enabled;
            if enabled {
                sub.disabled_reason = None;
                sub.failing_since = None;
            } else {
                sub.disabled_reason = Some("api".into());
            }
            sub.updated = self.clock.now();
            self.repo.update(&sub).await?;
        }
        Ok(sub)
    }

    /// `DELETE /webhook/{id}?permanent=true`: only a disabled subscription (409 otherwise).
    /// Its deliveries and attempt log go with it. Fails with [`DomainError::NotFound`] when
    /// there is no such subscription, and a [`DomainError::Conflict`] of kind
    /// [`ConflictKind::SubscriptionEnabled`] while it is enabled.
    pub async fn delete(
        &self,
        who: &Principal,
        env: &EnvironmentId,
        id: &WebhookId,
    ) -> Result<(), DomainError> {
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

    /// `PATCH /webhook/{id}` (contract §11): changes what the body names of `url`, `types`,
    /// `method`, `headers`, `cardTemplateId`, `actionFlowConfigId` and `description` (`null`
    /// clears a filter or the description),
    /// keeping the rest, the secret and the state. The result is validated as a subscribe
    /// request would be ([`SubscriptionRequest::parse`]: the same rules, every problem at
    /// once), and a changed URL passes the SSRF check again. Fails with
    /// [`DomainError::NotFound`] when there is no such subscription.
    pub async fn update(
        &self,
        who: &Principal,
        env: &EnvironmentId,
        id: &WebhookId,
        patch: &Value,
    ) -> Result<Subscription, DomainError> {
        who.authorize(env, Permission::WebhooksWrite)?;
        let Some(changes) = patch.as_object() else {
            return Err(DomainError::invalid("", "the body must be a JSON object"));
        };
        let mut sub = self.find(env, id).await?;
        let mut merged = serde_json::json!({
            "types": sub.types,
            "url": sub.url,
            "method": sub.method.as_str(),
            "headers": sub.headers,
            "cardTemplateId": sub.card_template_id,
            "actionFlowConfigId": sub.flow_id,
            "description": sub.description,
        });
        if let Some(fields) = merged.as_object_mut() {
            for (name, value) in changes {
                // Unknown fields are ignored, as everywhere in the API.
                if fields.contains_key(name) {
                    fields.insert(name.clone(), value.clone());
                }
            }
        }
        let request = SubscriptionRequest::parse(&merged)?;
        if request.url != sub.url {
            if let Err(reason) = self.transport.check_url(&request.url).await {
                return Err(DomainError::invalid("url", reason));
            }
        }
        sub.url = request.url;
        sub.types = request.types;
        sub.method = request.method;
        sub.headers = request.headers;
        sub.card_template_id = request.card_template_id;
        sub.flow_id = request.flow_id;
        sub.description = request.description;
        sub.updated = self.clock.now();
        self.repo.edit(&sub).await?;
        Ok(shown_to(who, sub))
    }

    /// A new secret; the old one keeps signing beside it for 24 hours
    /// ([`SECRET_ROTATION_GRACE_HOURS`]). A secret rotated out earlier stops signing at once.
    /// Answers the subscription with both. Fails with [`DomainError::NotFound`] when there is
    /// no such subscription.
    pub async fn rotate_secret(
        &self,
        who: &Principal,
        env: &EnvironmentId,
        id: &WebhookId,
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

    /// One page of the subscription's attempt log, newest first. Fails with
    /// [`DomainError::NotFound`] when there is no such subscription.
    pub async fn attempts(
        &self,
        who: &Principal,
        env: &EnvironmentId,
        id: &WebhookId,
        page: PageRequest,
    ) -> Result<Page<Attempt>, DomainError> {
        who.authorize(env, Permission::WebhooksRead)?;
        self.find(env, id).await?;
        Ok(self.repo.attempts(env, id, page).await?)
    }

    /// Sends one event again (whatever happened to it before): its delivery is due now, for
    /// one attempt (the retry count goes on from where it stopped). Fails with
    /// [`DomainError::NotFound`] when there is no such subscription or the environment has no
    /// such event, and a [`DomainError::Conflict`] of kind
    /// [`ConflictKind::SubscriptionDisabled`] while the subscription is disabled.
    pub async fn resend(
        &self,
        who: &Principal,
        env: &EnvironmentId,
        id: &WebhookId,
        event_id: &EventId,
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

    /// Queues again every delivery that failed (or was cancelled) for events since `since`;
    /// answers how many. Fails with [`DomainError::NotFound`] when there is no such
    /// subscription, and a [`DomainError::Conflict`] of kind
    /// [`ConflictKind::SubscriptionDisabled`] while it is disabled.
    pub async fn recover(
        &self,
        who: &Principal,
        env: &EnvironmentId,
        id: &WebhookId,
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
    ///
    /// Sent even to a disabled subscription, never retried, and it changes nothing of the
    /// subscription's health. Fails with [`DomainError::NotFound`] when there is no such
    /// subscription; what the receiver answered (or that it did not) is in the attempt.
    pub async fn test(
        &self,
        who: &Principal,
        env: &EnvironmentId,
        id: &WebhookId,
    ) -> Result<Attempt, DomainError> {
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
            subscription_id: sub.id.clone().into(),
            environment_id: env.as_str().to_owned(),
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

/// The `data` of a test call: the shape of an analytics event's `data`, with empty contexts.
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

/// `subscription` as `who` may see it: whole for a caller that may change webhooks, else
/// masked.
fn shown_to(who: &Principal, subscription: Subscription) -> Subscription {
    if who.access.allows(Permission::WebhooksWrite) {
        subscription
    } else {
        subscription.masked()
    }
}
