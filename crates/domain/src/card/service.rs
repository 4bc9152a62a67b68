//! What end users do with their cards, and the scheduler that moves cards on time
//! ([`CardService`]).

use std::sync::Arc;

use serde_json::Value;

use super::{card_event, AnalyticsEvent, CardInstance, CardRepository, CardStatus, Transition};
use crate::id::{CardId, EndUserId, EnvironmentId};
use crate::{StorageError, Timestamp};

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
