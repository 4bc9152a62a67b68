//! Card instances, their life cycle (docs/api.md, End-user card API), and the analytics events
//! every transition writes: `embargoed` → `active`; `active` → `snoozed` → `active`; `active` →
//! `completed` | `dismissed` | `cancelled` | `expired`. Closed states are final.

use crate::id::{CardId, EventId};
use std::sync::Arc;

use async_trait::async_trait;
use serde_json::{json, Value};

use crate::time::format_timestamp as ts;
use crate::{StorageError, Timestamp};

pub mod content;
pub use content::{trigger_context, CardContent, CardContext};
mod service;
pub use service::{CardAction, CardService};

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
