//! Card instances, their life cycle (docs/api.md, End-user card API), and the analytics events
//! every transition writes: `embargoed` → `active`; `active` → `snoozed` → `active`; `active` →
//! `completed` | `dismissed` | `cancelled` | `expired`. Closed states are final.

use crate::id::{CardId, EndUserId, EnvironmentId, EventId};
use std::sync::Arc;

use async_trait::async_trait;
use serde_json::{json, Value};

use crate::time::format_timestamp as ts;
use crate::{StorageError, Timestamp};

pub mod content;
pub use content::{trigger_context, CardContent, CardContext};

/// Where a card is in its life cycle. `Embargoed`, `Active` and `Snoozed` are open; the others
/// are closed, and final. Only active cards are in a user's feed. [`CardStatus::ALL`] lists
/// them in life-cycle order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CardStatus {
    /// Created with a future embargo: not in the feed until the embargo ends.
    Embargoed,
    /// In the user's feed.
    Active,
    /// Put aside by the user until a time; back to active then.
    Snoozed,
    /// Submitted by the user (`submit`).
    Completed,
    /// Dismissed by the user (`dismiss`).
    Dismissed,
    /// Cancelled by a cancel task.
    Cancelled,
    /// Its expiry time came while it was open.
    Expired,
}

crate::spelling::spelled!(CardStatus {
    Embargoed => "embargoed",
    Active => "active",
    Snoozed => "snoozed",
    Completed => "completed",
    Dismissed => "dismissed",
    Cancelled => "cancelled",
    Expired => "expired",
});

/// Where a flow instance (one run of a flow for one end user, whose cards share it) stands:
/// a cancel moves an active one to `Cancelled`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InstanceStatus {
    /// Running: its cards may be open.
    Active,
    /// Cancelled by a cancel task: none of its cards is open.
    Cancelled,
}

crate::spelling::spelled!(InstanceStatus {
    Active => "active",
    Cancelled => "cancelled",
});

impl CardStatus {
    /// The statuses a cancel moves to `cancelled` (the open ones).
    pub fn cancellable() -> Vec<&'static str> {
        Self::ALL
            .into_iter()
            .filter(|s| s.can_become(CardStatus::Cancelled))
            .map(CardStatus::as_str)
            .collect()
    }

    /// Whether the status is final: completed, dismissed, cancelled or expired.
    pub fn is_closed(self) -> bool {
        matches!(
            self,
            CardStatus::Completed
                | CardStatus::Dismissed
                | CardStatus::Cancelled
                | CardStatus::Expired
        )
    }

    /// Whether the life cycle allows `self` → `next`.
    pub fn can_become(self, next: CardStatus) -> bool {
        use CardStatus::*;
        matches!(
            (self, next),
            (Embargoed, Active)
                | (Embargoed, Cancelled)
                | (Embargoed, Expired)
                | (Active, Snoozed)
                | (Snoozed, Active)
                | (Active, Completed)
                | (Active, Dismissed)
                | (Active, Cancelled)
                | (Active, Expired)
                | (Snoozed, Cancelled)
                | (Snoozed, Expired)
        )
    }

    /// The analytics event a transition into this status writes.
    pub fn event_name(self, previous: Option<CardStatus>) -> &'static str {
        match (previous, self) {
            (Some(CardStatus::Snoozed), CardStatus::Active) => "card-unsnoozed",
            (_, CardStatus::Active) => "card-published",
            (_, CardStatus::Embargoed) => "card-embargoed",
            (_, CardStatus::Snoozed) => "card-snoozed",
            (_, CardStatus::Completed) => "card-completed",
            (_, CardStatus::Dismissed) => "card-dismissed",
            (_, CardStatus::Cancelled) => "card-cancelled",
            (_, CardStatus::Expired) => "card-expired",
        }
    }
}

/// One card in one user's feed.
#[derive(Debug, Clone, PartialEq)]
pub struct CardInstance {
    /// `crd_…`.
    pub id: CardId,
    /// The environment of the card and its user.
    pub environment_id: String,
    /// The end user whose feed the card is in.
    pub user_id: String,
    /// The flow instance (`fin_…`) that made the card: one per user an invocation targeted,
    /// shared by the cards of its steps.
    pub flow_instance_id: String,
    /// The invocation (`flowInvocationId`) that made the card.
    pub invocation_id: String,
    /// The Action Flow (`flw_…`).
    pub flow_id: String,
    /// The flow's configuration version that made the card.
    pub flow_version: u32,
    /// The `create-card` step that made the card.
    pub step_id: String,
    /// The card template's key in the configuration's `cardTemplates`.
    pub template_id: String,
    /// The template's `metadata.cardName`.
    pub template_name: String,
    /// Where the card is in its life cycle.
    pub status: CardStatus,
    /// 1 (bottom of the feed) to 10 (top).
    pub priority: u8,
    /// The streams the card is in: `All cards` and those the trigger named.
    pub stream_ids: Vec<String>,
    /// The platforms the card is for, as `Web`, `iOS`, `Android`.
    pub platforms: Vec<String>,
    /// Rendered views and notification, per platform name. Shared: every card of one step of
    /// one invocation has the same.
    pub content: CardContent,
    /// The trigger's context: variables, metadata, notificationDetail, test flag. Shared like
    /// `content`.
    pub context: CardContext,
    /// When an embargoed card becomes active; None for a card made active at once.
    pub embargo_until: Option<Timestamp>,
    /// When an open card expires; None: never.
    pub expires_at: Option<Timestamp>,
    /// When a snoozed card becomes active again (set by a snooze).
    pub snoozed_until: Option<Timestamp>,
    /// When the card first became active; None while it has never been.
    pub published_at: Option<Timestamp>,
    /// When the card was made.
    pub created: Timestamp,
    /// When its status last changed.
    pub updated: Timestamp,
}

/// An analytics event: a card entering a status. Append-only; webhook deliveries and pushes
/// are made from these.
///
/// An event is its change — the status, the previous status, the submitted values — and the
/// card as the change left it. Its payload ([`AnalyticsEvent::data`]) repeats the card's
/// immutable parts (template, streams, platforms, the trigger's context), so it is built when
/// read or delivered, not stored with every event.
#[derive(Debug, Clone, PartialEq)]
pub struct AnalyticsEvent {
    /// `evt_…`; also the `webhook-id` of its deliveries.
    pub id: EventId,
    /// The event's name: `card-published`, `card-embargoed`, `card-snoozed`,
    /// `card-unsnoozed`, `card-completed`, `card-dismissed`, `card-cancelled` or
    /// `card-expired` (see [`CardStatus::event_name`]).
    pub name: String,
    /// The card as this event left it: its status and publication time are the event's.
    pub card: Arc<CardInstance>,
    /// The status the card left; None for a card's first event.
    pub previous: Option<CardStatus>,
    /// The values submitted with `card-completed`.
    pub values: Option<Value>,
    /// When it happened.
    pub created: Timestamp,
}

impl AnalyticsEvent {
    /// The card's environment.
    pub fn environment_id(&self) -> &str {
        &self.card.environment_id
    }

    /// The card's end user.
    pub fn user_id(&self) -> &str {
        &self.card.user_id
    }

    /// The card's id.
    pub fn card_instance_id(&self) -> &str {
        &self.card.id
    }

    /// The card's Action Flow.
    pub fn flow_id(&self) -> &str {
        &self.card.flow_id
    }

    /// Whether the card's template notifies (`cardTemplateSettings.sendNotifications`).
    pub fn sends_notifications(&self) -> bool {
        self.card.content.notifies()
    }

    /// The event's payload: what `GET .../cards/{id}/events` answers and what a webhook
    /// delivers as `data` (docs/api.md, End-user card API and Webhooks). Keys: `id`,
    /// `analyticsEvent`, `endUserId`, `timestamp`, `cardContext`, `properties` (`values`),
    /// `platformContext` and `metadata`.
    pub fn data(&self) -> Value {
        let card = &self.card;
        let context = card.context.value();
        let detail = |key: &str| context.get(key).cloned().unwrap_or_else(|| json!({}));
        json!({
            "id": self.id,
            "analyticsEvent": self.name,
            "endUserId": card.user_id,
            "timestamp": ts(&self.created),
            "cardContext": {
                "cardInstanceStatus": card.status.as_str(),
                "cardTemplateId": card.template_id,
                "cardTemplateName": card.template_name,
                "cardTemplateVersion": card.flow_version,
                "cardTemplateSettings": {"sendNotifications": self.sends_notifications()},
                "publishedAt": card.published_at.as_ref().map(ts),
                "cardInstanceId": card.id,
                "previousStatus": self.previous.map(CardStatus::as_str),
            },
            "properties": {"values": self.values.clone().unwrap_or_else(|| json!({}))},
            "platformContext": {
                "lifecycleId": card.flow_instance_id,
                "targetStreamIds": card.stream_ids,
                "targetPlatforms": card.platforms,
                "flowInstanceId": card.flow_instance_id,
                "flowInvocationId": card.invocation_id,
                "flowConfigId": card.flow_id,
                "triggerEventSource": if context.get("test").and_then(Value::as_bool) == Some(true)
                    { "test" } else { "api" },
                "eventDetail": detail("variables"),
                "eventNotificationDetail": detail("notificationDetail"),
            },
            "metadata": detail("metadata"),
        })
    }
}

/// The event of a card entering its current status.
///
/// `card` is the card as it now is; `previous` the status it left (None for a new card);
/// `values` the submitted values of a `card-completed`. The event gets a new id.
pub fn card_event(
    card: Arc<CardInstance>,
    previous: Option<CardStatus>,
    values: Option<Value>,
    at: Timestamp,
) -> AnalyticsEvent {
    AnalyticsEvent {
        id: crate::id::new_id(crate::id::IdKind::Event).into(),
        name: card.status.event_name(previous).to_owned(),
        card,
        previous,
        values,
        created: at,
    }
}

/// A cancel of `card` (docs/api.md, Cancel): an open card becomes `cancelled`, and this is its
/// event; a closed card stays as it is (`None`).
pub fn cancel_card(card: CardInstance, now: Timestamp) -> Option<AnalyticsEvent> {
    if !card.status.can_become(CardStatus::Cancelled) {
        return None;
    }
    let previous = card.status;
    let cancelled = CardInstance {
        status: CardStatus::Cancelled,
        updated: now,
        ..card
    };
    Some(card_event(Arc::new(cancelled), Some(previous), None, now))
}

/// A status change of one card, saved only if the card still has `from` (compare-and-swap).
#[derive(Debug, Clone, PartialEq)]
pub struct Transition {
    /// The status the card must still have for the change to apply.
    pub from: CardStatus,
    /// Its event, which holds the changed card.
    pub event: AnalyticsEvent,
}

/// Storage of cards and their analytics events (a port). The reads of the end-user card API
/// are scoped to an environment, and [`feed`](Self::feed) and [`get`](Self::get) to a user too:
/// a card of another environment or user is not found. [`due`](Self::due) and
/// [`transition`](Self::transition) serve the scheduler and the card actions, across
/// environments (a card id is unique).
#[cfg_attr(feature = "mock", mockall::automock)]
#[async_trait]
pub trait CardRepository: Send + Sync {
    /// The user's active cards, priority 10 first, newest first within a priority; only those
    /// in `stream_id` when given. Embargoed, snoozed and closed cards are left out.
    async fn feed(
        &self,
        environment_id: &str,
        user_id: &str,
        stream_id: Option<String>,
    ) -> Result<Vec<CardInstance>, StorageError>;
    /// The card with this id, if it is the user's in the environment; None otherwise.
    async fn get(
        &self,
        environment_id: &str,
        user_id: &str,
        card_id: &str,
    ) -> Result<Option<CardInstance>, StorageError>;
    /// Cards whose embargo, snooze or expiry time has come, at most `limit`.
    ///
    /// Of every environment: embargoed cards whose embargo ends by `now`, snoozed cards whose
    /// snooze ends by `now`, and open cards whose expiry is by `now`; each card once.
    async fn due(&self, now: Timestamp, limit: u32) -> Result<Vec<CardInstance>, StorageError>;
    /// Applies each transition whose card still has its `from` status, with its event, in one
    /// transaction. Returns how many applied (a card changed meanwhile is skipped).
    ///
    /// A transition saves the card's new status, `snoozed_until`, `published_at` and
    /// `updated` (compare-and-swap on the status) and appends its event; in the same
    /// transaction the events' webhook deliveries and pushes are queued (docs/architecture.md,
    /// The engine), so no event is stored without them. A skipped transition writes nothing.
    async fn transition(&self, transitions: Vec<Transition>) -> Result<usize, StorageError>;
    /// Every analytics event of a card, oldest first.
    ///
    /// Only the events of a card of the environment; each event carries the card as the event
    /// left it. Empty for an unknown card.
    async fn events_of(
        &self,
        environment_id: &str,
        card_id: &str,
    ) -> Result<Vec<AnalyticsEvent>, StorageError>;
}

/// What an end user does with a card.
#[derive(Debug, Clone, PartialEq)]
pub enum CardAction {
    /// Completes the card; the values reach `properties.values` of `card-completed`.
    Submit(Value),
    /// Dismisses the card.
    Dismiss,
    /// Snoozes the card until this time, which must be in the future.
    Snooze(Timestamp),
}

/// The end-user card API and the scheduler that moves cards on time.
///
/// The API methods first check that the caller may use the environment
/// ([`DomainError::Unauthenticated`](crate::DomainError::Unauthenticated) otherwise) and holds
/// the permission (`cards:write`, or `users:read` for a card's events;
/// [`DomainError::Forbidden`](crate::DomainError::Forbidden)).
///
/// ```
/// use std::sync::Arc;
///
/// use workbench_domain::card::{CardAction, CardInstance, CardService, CardStatus};
/// use workbench_domain::mocks::{MockCardRepository, MockClock};
/// use workbench_domain::{DomainError, Principal};
///
/// # let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
/// # rt.block_on(async {
/// let now = workbench_domain::chrono::Utc::now();
/// let mut clock = MockClock::new();
/// clock.expect_now().return_const(now);
/// # let card = CardInstance {
/// #     id: "crd_1".into(),
/// #     environment_id: "env_1".into(),
/// #     user_id: "u1".into(),
/// #     flow_instance_id: "fin_1".into(),
/// #     invocation_id: "inv_1".into(),
/// #     flow_id: "flw_1".into(),
/// #     flow_version: 1,
/// #     step_id: "s1".into(),
/// #     template_id: "t1".into(),
/// #     template_name: "Welcome".into(),
/// #     status: CardStatus::Active,
/// #     priority: 5,
/// #     stream_ids: vec!["str_all".into()],
/// #     platforms: vec!["Web".into()],
/// #     content: Default::default(),
/// #     context: Default::default(),
/// #     embargo_until: None,
/// #     expires_at: None,
/// #     snoozed_until: None,
/// #     published_at: Some(now),
/// #     created: now,
/// #     updated: now,
/// # };
/// // `card` is an active card of user `u1`.
/// let mut cards = MockCardRepository::new();
/// cards.expect_get().returning(move |_, _, _| Ok(Some(card.clone())));
/// cards
///     .expect_transition()
///     .withf(|t| t.len() == 1 && t[0].from == CardStatus::Active)
///     .times(1)
///     .returning(|t| {
///         assert_eq!(t[0].event.name, "card-dismissed");
///         Ok(1)
///     });
/// let service = CardService::new(Arc::new(cards), Arc::new(clock));
/// let sdk = Principal::trusted("sdk", "org_1", &["env_1"]);
///
/// let dismissed = service.act(&sdk, &"env_1".into(), &"u1".into(), &"crd_1".into(),
///     CardAction::Dismiss).await?;
/// assert_eq!(dismissed.status, CardStatus::Dismissed);
///
/// // A snooze must end in the future.
/// let snooze = service.act(&sdk, &"env_1".into(), &"u1".into(), &"crd_1".into(),
///     CardAction::Snooze(now)).await;
/// let Err(DomainError::Validation(problems)) = snooze else { panic!("{snooze:?}") };
/// assert_eq!(problems[0].field, "snoozeUntil");
/// # Ok::<(), DomainError>(())
/// # }).unwrap();
/// ```
pub struct CardService {
    cards: std::sync::Arc<dyn CardRepository>,
    clock: std::sync::Arc<dyn crate::Clock>,
}

impl CardService {
    /// A service over `cards`; `clock` decides what is due and stamps every change.
    pub fn new(
        cards: std::sync::Arc<dyn CardRepository>,
        clock: std::sync::Arc<dyn crate::Clock>,
    ) -> Self {
        Self { cards, clock }
    }

    /// The user's active cards: priority 10 first, newest first within a priority.
    ///
    /// Only those in `stream_id` when given. Needs `cards:write` (the SDK's credential), or the
    /// user's own token ([`crate::Principal::authorize_user`]). An unknown user has an empty
    /// feed.
    pub async fn feed(
        &self,
        who: &crate::Principal,
        env: &EnvironmentId,
        user_id: &EndUserId,
        stream_id: Option<String>,
    ) -> Result<Vec<CardInstance>, crate::DomainError> {
        who.authorize_user(env, crate::Permission::CardsWrite, user_id)?;
        Ok(self.cards.feed(env, user_id, stream_id).await?)
    }

    /// An end user's action on one of their cards; the answer is the card as changed.
    ///
    /// Needs `cards:write`, or the user's own token. Errors:
    /// [`DomainError::NotFound`](crate::DomainError::NotFound)
    /// when the user has no such card; a conflict of kind
    /// [`ConflictKind::CardClosed`](crate::ConflictKind::CardClosed) on a closed card;
    /// [`DomainError::Validation`](crate::DomainError::Validation) at `snoozeUntil` for a
    /// snooze that does not end in the future; a conflict of kind
    /// [`ConflictKind::CardNotActive`](crate::ConflictKind::CardNotActive) on an embargoed or
    /// snoozed card; and of kind
    /// [`ConflictKind::ConcurrentChange`](crate::ConflictKind::ConcurrentChange) when the card
    /// changed between its read and the write. The change and its event are written together
    /// (see [`CardRepository::transition`]).
    pub async fn act(
        &self,
        who: &crate::Principal,
        env: &EnvironmentId,
        user_id: &EndUserId,
        card_id: &CardId,
        action: CardAction,
    ) -> Result<CardInstance, crate::DomainError> {
        use crate::{ConflictKind, DomainError, Resource};
        who.authorize_user(env, crate::Permission::CardsWrite, user_id)?;
        let now = self.clock.now();
        let card = self
            .cards
            .get(env, user_id, card_id)
            .await?
            .ok_or(DomainError::NotFound(Resource::Card))?;
        if card.status.is_closed() {
            return Err(DomainError::conflict(
                ConflictKind::CardClosed,
                format!(
                    "the card is {}; closed cards take no actions",
                    card.status.as_str()
                ),
            ));
        }
        let (next, values, snoozed_until) = match action {
            CardAction::Submit(values) => (CardStatus::Completed, Some(values), None),
            CardAction::Dismiss => (CardStatus::Dismissed, None, None),
            CardAction::Snooze(until) if until <= now => {
                return Err(DomainError::invalid("snoozeUntil", "must be in the future"));
            }
            CardAction::Snooze(until) => (CardStatus::Snoozed, None, Some(until)),
        };
        if !card.status.can_become(next) {
            return Err(DomainError::conflict(
                ConflictKind::CardNotActive,
                format!(
                    "the card is {}; only active cards can be {}",
                    card.status.as_str(),
                    next.as_str()
                ),
            ));
        }
        let from = card.status;
        let changed = CardInstance {
            status: next,
            snoozed_until,
            updated: now,
            ..card
        };
        let changed = Arc::new(changed);
        let event = card_event(changed.clone(), Some(from), values, now);
        if self
            .cards
            .transition(vec![Transition { from, event }])
            .await?
            == 1
        {
            Ok(Arc::unwrap_or_clone(changed))
        } else {
            Err(DomainError::conflict(
                ConflictKind::ConcurrentChange,
                "the card changed meanwhile; read it again",
            ))
        }
    }

    /// A card's analytics events, oldest first.
    ///
    /// Needs `users:read`; [`DomainError::NotFound`](crate::DomainError::NotFound) when the
    /// user has no such card.
    pub async fn events(
        &self,
        who: &crate::Principal,
        env: &EnvironmentId,
        user_id: &EndUserId,
        card_id: &CardId,
    ) -> Result<Vec<AnalyticsEvent>, crate::DomainError> {
        who.authorize(env, crate::Permission::UsersRead)?;
        if self.cards.get(env, user_id, card_id).await?.is_none() {
            return Err(crate::DomainError::NotFound(crate::Resource::Card));
        }
        Ok(self.cards.events_of(env, card_id).await?)
    }

    /// Moves due cards: embargo over → active, snooze over → active, expiry → expired.
    /// Returns how many moved; call until it returns less than `limit`.
    ///
    /// An expiry that has come wins over an embargo or snooze that ends. Each move writes its
    /// event (`card-published` for a card whose embargo ended, `card-unsnoozed`,
    /// `card-expired`); a card changed meanwhile is left alone.
    pub async fn tick(&self, limit: u32) -> Result<usize, StorageError> {
        let now = self.clock.now();
        let due = self.cards.due(now, limit).await?;
        let transitions: Vec<Transition> = due
            .into_iter()
            .filter_map(|card| {
                let next = if card.expires_at.is_some_and(|e| e <= now) {
                    CardStatus::Expired
                } else if match card.status {
                    // An embargo or a snooze is over.
                    CardStatus::Embargoed => card.embargo_until.is_none_or(|e| e <= now),
                    CardStatus::Snoozed => card.snoozed_until.is_none_or(|s| s <= now),
                    _ => false,
                } {
                    CardStatus::Active
                } else {
                    return None;
                };
                if !card.status.can_become(next) {
                    return None;
                }
                let from = card.status;
                let published_at = if next == CardStatus::Active {
                    card.published_at.or(Some(now))
                } else {
                    card.published_at
                };
                let changed = CardInstance {
                    status: next,
                    snoozed_until: None,
                    published_at,
                    updated: now,
                    ..card
                };
                let event = card_event(Arc::new(changed), Some(from), None, now);
                Some(Transition { from, event })
            })
            .collect();
        if transitions.is_empty() {
            return Ok(0);
        }
        self.cards.transition(transitions).await
    }
}

/// A card for tests: user `u1` of flow `flw_1`, template `t1`, everything else plain.
#[cfg(test)]
pub(crate) fn test_card(id: &str, status: CardStatus, at: Timestamp) -> CardInstance {
    CardInstance {
        id: id.into(),
        environment_id: "env_a".into(),
        user_id: "u1".into(),
        flow_instance_id: format!("fin_{id}"),
        invocation_id: "inv_1".into(),
        flow_id: "flw_1".into(),
        flow_version: 2,
        step_id: "s1".into(),
        template_id: "t1".into(),
        template_name: "T".into(),
        status,
        priority: 5,
        stream_ids: vec!["str_all".into()],
        platforms: vec!["Web".into()],
        content: CardContent::default(),
        context: CardContext::default(),
        embargo_until: None,
        expires_at: None,
        snoozed_until: None,
        published_at: Some(at),
        created: at,
        updated: at,
    }
}

#[cfg(test)]
mod tests {
    use super::CardStatus::*;

    #[test]
    fn the_life_cycle_allows_exactly_the_contract_transitions() {
        let all = [
            Embargoed, Active, Snoozed, Completed, Dismissed, Cancelled, Expired,
        ];
        let allowed: Vec<_> = all
            .iter()
            .flat_map(|a| all.iter().map(move |b| (*a, *b)))
            .filter(|(a, b)| a.can_become(*b))
            .collect();
        assert_eq!(allowed.len(), 11);
        for closed in [Completed, Dismissed, Cancelled, Expired] {
            assert!(closed.is_closed());
            assert!(
                all.iter().all(|next| !closed.can_become(*next)),
                "{closed:?} is final"
            );
        }
        assert_eq!(Active.event_name(Some(Snoozed)), "card-unsnoozed");
        assert_eq!(Active.event_name(Some(Embargoed)), "card-published");
        assert_eq!(Active.event_name(None), "card-published");
        assert_eq!(Completed.event_name(Some(Active)), "card-completed");
    }

    #[test]
    fn an_event_payload_is_built_from_its_change_and_its_card() {
        use chrono::TimeZone;
        use serde_json::json;
        let at = chrono::Utc
            .with_ymd_and_hms(2026, 11, 22, 10, 0, 0)
            .single()
            .expect("time");
        let card = super::CardInstance {
            content: super::CardContent::of_views(&serde_json::Map::from_iter([(
                "iOS".to_owned(),
                json!({"notification": {"attributes": {"body": "hi"}}}),
            )])),
            context: json!({"test": true, "variables": {"name": "Ada"}, "metadata": {"m": 1}})
                .into(),
            ..super::test_card("crd_1", Completed, at)
        };
        let event = super::card_event(card.into(), Some(Active), Some(json!({"a": 1})), at);
        let data = event.data();
        assert_eq!(data["id"], event.id.as_str());
        assert_eq!(data["analyticsEvent"], "card-completed");
        assert_eq!(data["endUserId"], "u1");
        assert_eq!(data["timestamp"], "2026-11-22T10:00:00.000Z");
        assert_eq!(
            data["cardContext"],
            json!({
                "cardInstanceStatus": "completed",
                "cardTemplateId": "t1",
                "cardTemplateName": "T",
                "cardTemplateVersion": 2,
                "cardTemplateSettings": {"sendNotifications": true},
                "publishedAt": "2026-11-22T10:00:00.000Z",
                "cardInstanceId": "crd_1",
                "previousStatus": "active",
            })
        );
        assert_eq!(data["properties"], json!({"values": {"a": 1}}));
        assert_eq!(data["platformContext"]["flowInstanceId"], "fin_crd_1");
        assert_eq!(data["platformContext"]["triggerEventSource"], "test");
        assert_eq!(
            data["platformContext"]["eventDetail"],
            json!({"name": "Ada"})
        );
        assert_eq!(
            data["platformContext"]["eventNotificationDetail"],
            json!({})
        );
        assert_eq!(data["metadata"], json!({"m": 1}));
    }

    #[test]
    fn a_cancel_closes_open_cards_only() {
        use chrono::TimeZone;
        let at = chrono::Utc
            .with_ymd_and_hms(2026, 11, 22, 10, 0, 0)
            .single()
            .expect("time");
        assert_eq!(
            super::CardStatus::cancellable(),
            ["embargoed", "active", "snoozed"]
        );
        let event = super::cancel_card(super::test_card("crd_1", Snoozed, at), at).expect("open");
        assert_eq!(event.name, "card-cancelled");
        assert_eq!(
            (event.card.status, event.previous),
            (Cancelled, Some(Snoozed))
        );
        for closed in [Completed, Dismissed, Cancelled, Expired] {
            assert!(super::cancel_card(super::test_card("crd_1", closed, at), at).is_none());
        }
    }
}
