//! Card instances, their life cycle (contract §4), and the analytics events every transition
//! writes: `embargoed` → `active`; `active` → `snoozed` → `active`; `active` → `completed` |
//! `dismissed` | `cancelled` | `expired`. Closed states are final.

use std::sync::Arc;

use async_trait::async_trait;
use serde_json::{json, Map, Value};

use crate::time::format_timestamp as ts;
use crate::{StorageError, Timestamp};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CardStatus {
    Embargoed,
    Active,
    Snoozed,
    Completed,
    Dismissed,
    Cancelled,
    Expired,
}

impl CardStatus {
    pub const fn as_str(self) -> &'static str {
        match self {
            CardStatus::Embargoed => "embargoed",
            CardStatus::Active => "active",
            CardStatus::Snoozed => "snoozed",
            CardStatus::Completed => "completed",
            CardStatus::Dismissed => "dismissed",
            CardStatus::Cancelled => "cancelled",
            CardStatus::Expired => "expired",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        [
            CardStatus::Embargoed,
            CardStatus::Active,
            CardStatus::Snoozed,
            CardStatus::Completed,
            CardStatus::Dismissed,
            CardStatus::Cancelled,
            CardStatus::Expired,
        ]
        .into_iter()
        .find(|c| c.as_str() == s)
    }

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
    pub id: String,
    pub environment_id: String,
    pub user_id: String,
    pub flow_instance_id: String,
    pub invocation_id: String,
    pub flow_id: String,
    pub flow_version: u32,
    pub step_id: String,
    pub template_id: String,
    pub template_name: String,
    pub status: CardStatus,
    /// 1 (bottom of the feed) to 10 (top).
    pub priority: u8,
    pub stream_ids: Vec<String>,
    pub platforms: Vec<String>,
    /// Rendered views and notification, per platform name. Shared: every card of one step of
    /// one invocation has the same.
    pub content: Arc<Map<String, Value>>,
    /// The trigger's context: variables, metadata, notificationDetail, test flag. Shared like
    /// `content`.
    pub context: Arc<Value>,
    pub embargo_until: Option<Timestamp>,
    pub expires_at: Option<Timestamp>,
    pub snoozed_until: Option<Timestamp>,
    pub published_at: Option<Timestamp>,
    pub created: Timestamp,
    pub updated: Timestamp,
}

/// An analytics event (spec 2.9 `data`). Append-only; the webhooks issue delivers from here.
#[derive(Debug, Clone, PartialEq)]
pub struct AnalyticsEvent {
    pub id: String,
    pub environment_id: String,
    pub name: String,
    pub user_id: String,
    pub card_instance_id: Option<String>,
    pub flow_id: Option<String>,
    pub invocation_id: Option<String>,
    pub data: Value,
    pub created: Timestamp,
}

/// The event of a card entering its current status (spec 2.9 shape).
pub fn card_event(
    card: &CardInstance,
    previous: Option<CardStatus>,
    values: Option<&Value>,
    at: Timestamp,
) -> AnalyticsEvent {
    let id = crate::id::new_id(crate::id::IdKind::Event);
    let name = card.status.event_name(previous);
    let context = &card.context;
    let data = json!({
        "id": id,
        "analyticsEvent": name,
        "endUserId": card.user_id,
        "timestamp": ts(&at),
        "cardContext": {
            "cardInstanceStatus": card.status.as_str(),
            "cardTemplateId": card.template_id,
            "cardTemplateName": card.template_name,
            "cardTemplateVersion": card.flow_version,
            "cardTemplateSettings": {"sendNotifications": card.content.values().any(|c| c.get("notification").is_some())},
            "publishedAt": card.published_at.as_ref().map(ts),
            "cardInstanceId": card.id,
            "previousStatus": previous.map(CardStatus::as_str),
        },
        "properties": {"values": values.cloned().unwrap_or_else(|| json!({}))},
        "platformContext": {
            "lifecycleId": card.flow_instance_id,
            "targetStreamIds": card.stream_ids,
            "targetPlatforms": card.platforms,
            "flowInstanceId": card.flow_instance_id,
            "flowInvocationId": card.invocation_id,
            "flowConfigId": card.flow_id,
            "triggerEventSource": if context.get("test").and_then(Value::as_bool) == Some(true) { "test" } else { "api" },
            "eventDetail": context.get("variables").cloned().unwrap_or_else(|| json!({})),
            "eventNotificationDetail": context.get("notificationDetail").cloned().unwrap_or_else(|| json!({})),
        },
        "metadata": context.get("metadata").cloned().unwrap_or_else(|| json!({})),
    });
    AnalyticsEvent {
        id,
        environment_id: card.environment_id.clone(),
        name: name.to_owned(),
        user_id: card.user_id.clone(),
        card_instance_id: Some(card.id.clone()),
        flow_id: Some(card.flow_id.clone()),
        invocation_id: Some(card.invocation_id.clone()),
        data,
        created: at,
    }
}

/// A status change of one card, saved only if the card still has `from` (compare-and-swap).
#[derive(Debug, Clone, PartialEq)]
pub struct Transition {
    pub card: CardInstance,
    pub from: CardStatus,
    pub event: AnalyticsEvent,
}

#[cfg_attr(feature = "mock", mockall::automock)]
#[async_trait]
pub trait CardRepository: Send + Sync {
    /// The user's cards with this status, priority 10 first, newest first within a priority;
    /// only those in `stream_id` when given.
    async fn feed(
        &self,
        environment_id: &str,
        user_id: &str,
        stream_id: Option<String>,
    ) -> Result<Vec<CardInstance>, StorageError>;
    async fn get(
        &self,
        environment_id: &str,
        user_id: &str,
        card_id: &str,
    ) -> Result<Option<CardInstance>, StorageError>;
    /// Cards whose embargo, snooze or expiry time has come, at most `limit`.
    async fn due(&self, now: Timestamp, limit: u32) -> Result<Vec<CardInstance>, StorageError>;
    /// Applies each transition whose card still has its `from` status, with its event, in one
    /// transaction. Returns how many applied (a card changed meanwhile is skipped).
    async fn transition(&self, transitions: Vec<Transition>) -> Result<usize, StorageError>;
    /// Every analytics event of a card, oldest first.
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
    Dismiss,
    Snooze(Timestamp),
}

/// The end-user card API and the scheduler that moves cards on time.
pub struct CardService {
    cards: std::sync::Arc<dyn CardRepository>,
    clock: std::sync::Arc<dyn crate::Clock>,
}

impl CardService {
    pub fn new(
        cards: std::sync::Arc<dyn CardRepository>,
        clock: std::sync::Arc<dyn crate::Clock>,
    ) -> Self {
        Self { cards, clock }
    }

    /// The user's active cards: priority 10 first, newest first within a priority.
    pub async fn feed(
        &self,
        who: &crate::Principal,
        env: &str,
        user_id: &str,
        stream_id: Option<String>,
    ) -> Result<Vec<CardInstance>, crate::DomainError> {
        who.authorize(env, crate::Permission::CardsWrite)?;
        Ok(self.cards.feed(env, user_id, stream_id).await?)
    }

    pub async fn act(
        &self,
        who: &crate::Principal,
        env: &str,
        user_id: &str,
        card_id: &str,
        action: CardAction,
    ) -> Result<CardInstance, crate::DomainError> {
        use crate::{ConflictKind, DomainError, Resource};
        who.authorize(env, crate::Permission::CardsWrite)?;
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
        let event = card_event(&changed, Some(from), values.as_ref(), now);
        if self
            .cards
            .transition(vec![Transition {
                card: changed.clone(),
                from,
                event,
            }])
            .await?
            == 1
        {
            Ok(changed)
        } else {
            Err(DomainError::conflict(
                ConflictKind::ConcurrentChange,
                "the card changed meanwhile; read it again",
            ))
        }
    }

    /// A card's analytics events, oldest first.
    pub async fn events(
        &self,
        who: &crate::Principal,
        env: &str,
        user_id: &str,
        card_id: &str,
    ) -> Result<Vec<AnalyticsEvent>, crate::DomainError> {
        who.authorize(env, crate::Permission::UsersRead)?;
        if self.cards.get(env, user_id, card_id).await?.is_none() {
            return Err(crate::DomainError::NotFound(crate::Resource::Card));
        }
        Ok(self.cards.events_of(env, card_id).await?)
    }

    /// Moves due cards: embargo over → active, snooze over → active, expiry → expired.
    /// Returns how many moved; call until it returns less than `limit`.
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
                let event = card_event(&changed, Some(from), None, now);
                Some(Transition {
                    card: changed,
                    from,
                    event,
                })
            })
            .collect();
        if transitions.is_empty() {
            return Ok(0);
        }
        self.cards.transition(transitions).await
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
}
