//! The end-user feed in real time (contract §12): how many cards a user has open, and each
//! change of one of their cards as an event a stream sends, resumable after the last event a
//! client saw.
//!
//! Storage tells which users' cards changed ([`FeedNotices`], after the commit that wrote the
//! events, from this process or through the database from another). A stream holds a
//! [`FeedCursor`] and, when its user is named, reads what changed since with
//! [`FeedService::changes`]: one read per change of a watched user, never a poll per stream.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use async_trait::async_trait;
use chrono::Duration;

use crate::card::{CardInstance, CardRepository, CardStatus};
use crate::id::{CardId, EndUserId, EnvironmentId, EventId};
use crate::{Clock, DomainError, Permission, Principal, StorageError, Timestamp};

/// How far back `Last-Event-ID` resumes.
pub const RESUME_HOURS: i64 = 24;
/// How far before the newest event read a stream reads again: a transaction that stamped its
/// events earlier may commit after a later one (its deadline bounds how much earlier), and a
/// stream must not miss it. Events already sent are skipped by id.
pub const REREAD_SECONDS: i64 = 10;
/// The most events one read returns; a stream with more to send reads again at once.
pub const READ_LIMIT: u32 = 500;

/// A change of one of a user's cards: one of its analytics events, as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventHead {
    /// `evt_…`: the stream's `id:`, what `Last-Event-ID` names.
    pub id: EventId,
    /// `card-published`, `card-snoozed`, `card-completed`, ...: the stream's `event:`.
    pub name: String,
    /// The card it changed.
    pub card_id: CardId,
    /// When it happened (the database's clock).
    pub created: Timestamp,
}

/// One event of a stream: the change, the card as the feed shows it when the event is sent
/// (`None` once it is not in the feed: closed, snoozed or embargoed), and the user's open-card
/// total then.
#[derive(Debug, Clone, PartialEq)]
pub struct FeedEvent {
    /// The change.
    pub head: EventHead,
    /// The card as the feed shows it, or `None` when it is not in the feed.
    pub card: Option<CardInstance>,
    /// The user's open (active) cards, in the stream's `streamId` when it names one.
    pub count: u64,
}

/// Reads of the feed's changes (a port). Every call is scoped to its environment and user.
#[cfg_attr(feature = "mock", mockall::automock)]
#[async_trait]
pub trait FeedRepository: Send + Sync {
    /// How many active cards the user has, in `stream_id` when given: the length of the feed.
    async fn count_active(
        &self,
        environment_id: &str,
        user_id: &str,
        stream_id: Option<String>,
    ) -> Result<u64, StorageError>;
    /// The events of the user's cards created at or after `since` and, when `after` is given,
    /// after it in the order of (`created`, id); in that order, at most `limit`.
    async fn events_since(
        &self,
        environment_id: &str,
        user_id: &str,
        since: Timestamp,
        after: Option<(Timestamp, EventId)>,
        limit: u32,
    ) -> Result<Vec<EventHead>, StorageError>;
    /// The event `event_id` if it is one of the user's cards' events, else `None`.
    async fn event(
        &self,
        environment_id: &str,
        user_id: &str,
        event_id: &str,
    ) -> Result<Option<EventHead>, StorageError>;
}

/// Told which users' cards changed, once the change is committed (a port the storage adapter
/// calls, and the process's stream hub implements).
pub trait FeedNotices: Send + Sync {
    /// Cards of `users` in `environment_id` have new events.
    fn cards_changed(&self, environment_id: &str, users: &[&str]);
    /// Changes may have been missed (the database's notifications were lost for a while):
    /// every stream reads what changed since it last looked.
    fn catch_up(&self);
}

/// Where a stream stands: its user and stream filter, the time it has read up to, and the
/// events it sent lately (so that reading again a few seconds back sends none twice).
#[derive(Debug, Clone)]
pub struct FeedCursor {
    environment_id: EnvironmentId,
    user_id: EndUserId,
    stream_id: Option<String>,
    /// The newest event time read: the next read starts [`REREAD_SECONDS`] before it.
    watermark: Timestamp,
    /// Where a read that stopped at [`READ_LIMIT`] goes on from.
    resume: Option<(Timestamp, EventId)>,
    /// Events read within the re-read window, by id, with their time: never sent twice.
    seen: HashMap<EventId, Timestamp>,
}

impl FeedCursor {
    /// The user the stream is for.
    pub fn user_id(&self) -> &EndUserId {
        &self.user_id
    }

    /// The environment the stream is in.
    pub fn environment_id(&self) -> &EnvironmentId {
        &self.environment_id
    }

    fn see(&mut self, head: &EventHead) -> bool {
        self.watermark = self.watermark.max(head.created);
        self.seen.insert(head.id.clone(), head.created).is_none()
    }
}

/// Changes read for a stream: the events to send, oldest first, and whether more are waiting
/// (read again at once).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Changes {
    /// The events to send.
    pub events: Vec<FeedEvent>,
    /// True when the read stopped at [`READ_LIMIT`].
    pub more: bool,
}

/// Card counts and the changes a user's stream sends (contract §12).
pub struct FeedService {
    feed: Arc<dyn FeedRepository>,
    cards: Arc<dyn CardRepository>,
    clock: Arc<dyn Clock>,
    /// How far back from the newest event read a stream reads again.
    reread: Duration,
}

impl FeedService {
    /// A service reading `feed` and `cards`, with the time from `clock`.
    pub fn new(
        feed: Arc<dyn FeedRepository>,
        cards: Arc<dyn CardRepository>,
        clock: Arc<dyn Clock>,
    ) -> Self {
        Self {
            feed,
            cards,
            clock,
            reread: Duration::seconds(REREAD_SECONDS),
        }
    }

    /// Reads `seconds` back from the newest event read instead of [`REREAD_SECONDS`]: at least
    /// as long as a write transaction may take from stamping its events to committing (the
    /// database's deadline), so that none is missed. Never less than [`REREAD_SECONDS`].
    pub fn with_reread(mut self, seconds: i64) -> Self {
        self.reread = Duration::seconds(seconds.clamp(REREAD_SECONDS, 86_400));
        self
    }

    /// The user's open cards, as the feed would list them: needs what reading the feed needs
    /// (`cards:write`, or the user's own token).
    pub async fn count(
        &self,
        who: &Principal,
        env: &EnvironmentId,
        user: &EndUserId,
        stream_id: Option<String>,
    ) -> Result<u64, DomainError> {
        who.authorize_user(env, Permission::CardsWrite, user)?;
        Ok(self.feed.count_active(env, user, stream_id).await?)
    }

    /// Opens a stream of the user's changes (what reading the feed needs). Without
    /// `last_event_id` it sends what changes from now on. With it, it first sends every event
    /// after that one, up to [`RESUME_HOURS`] back; an id that is none of the user's events
    /// resumes nothing before now.
    pub async fn open(
        &self,
        who: &Principal,
        env: &EnvironmentId,
        user: &EndUserId,
        stream_id: Option<String>,
        last_event_id: Option<String>,
    ) -> Result<FeedCursor, DomainError> {
        who.authorize_user(env, Permission::CardsWrite, user)?;
        let now = self.clock.now();
        let mut cursor = FeedCursor {
            environment_id: env.clone(),
            user_id: user.clone(),
            stream_id,
            watermark: now,
            resume: None,
            seen: HashMap::new(),
        };
        let last = match last_event_id {
            Some(id) => self.feed.event(env, user, &id).await?,
            None => None,
        };
        match last {
            Some(head) => {
                let horizon = earlier(now, Duration::hours(RESUME_HOURS));
                if head.created < horizon {
                    cursor.watermark = horizon.checked_add_signed(self.reread).unwrap_or(horizon);
                } else {
                    // The window before it, up to it, counts as sent.
                    cursor.watermark = head.created;
                    self.mark_seen(&mut cursor, Some((head.created, head.id)))
                        .await?;
                }
            }
            // Live from now: what was written before is the feed's, not the stream's.
            None => self.mark_seen(&mut cursor, None).await?,
        }
        Ok(cursor)
    }

    /// Marks as seen the events of the re-read window before the cursor's watermark, up to
    /// `upto` when given, else up to the watermark itself.
    async fn mark_seen(
        &self,
        cursor: &mut FeedCursor,
        upto: Option<(Timestamp, EventId)>,
    ) -> Result<(), DomainError> {
        let from = earlier(cursor.watermark, self.reread);
        let mut after = None;
        loop {
            let page = self
                .feed
                .events_since(
                    &cursor.environment_id,
                    &cursor.user_id,
                    from,
                    after.clone(),
                    READ_LIMIT,
                )
                .await?;
            let full = page.len() >= READ_LIMIT as usize;
            for head in page {
                let key = (head.created, head.id.clone());
                // Up to the resumed event; live, up to the moment the stream opened: what comes
                // after is the stream's to send.
                let past = match &upto {
                    Some(upto) => &key > upto,
                    None => head.created > cursor.watermark,
                };
                if past {
                    return Ok(());
                }
                cursor.seen.insert(head.id.clone(), head.created);
                after = Some(key);
            }
            if !full {
                return Ok(());
            }
        }
    }

    /// The changes since the cursor last read, oldest first, each with the card and count as
    /// they are now; advances the cursor. An event of a card outside the stream's `streamId`
    /// is skipped. Reads at most [`READ_LIMIT`] events: when [`Changes::more`], call again.
    pub async fn changes(&self, cursor: &mut FeedCursor) -> Result<Changes, DomainError> {
        let reread = self.reread;
        let (from, after) = match &cursor.resume {
            Some((at, id)) => (*at, Some((*at, id.clone()))),
            None => (earlier(cursor.watermark, reread), None),
        };
        let heads = self
            .feed
            .events_since(
                &cursor.environment_id,
                &cursor.user_id,
                from,
                after,
                READ_LIMIT,
            )
            .await?;
        let more = heads.len() >= READ_LIMIT as usize;
        let resume = more
            .then(|| heads.last().map(|h| (h.created, h.id.clone())))
            .flatten();
        // Nothing of the cursor changes until every read succeeded: a failed read is read
        // again whole, and sends nothing twice nor loses anything.
        let fresh: Vec<EventHead> = heads
            .into_iter()
            .filter(|h| !cursor.seen.contains_key(&h.id))
            .collect();
        let mut events = Vec::with_capacity(fresh.len());
        if !fresh.is_empty() {
            let mut cards: BTreeMap<CardId, Option<CardInstance>> = BTreeMap::new();
            for head in &fresh {
                if !cards.contains_key(&head.card_id) {
                    let card = self
                        .cards
                        .get(&cursor.environment_id, &cursor.user_id, &head.card_id)
                        .await?;
                    cards.insert(head.card_id.clone(), card);
                }
            }
            let count = self
                .feed
                .count_active(
                    &cursor.environment_id,
                    &cursor.user_id,
                    cursor.stream_id.clone(),
                )
                .await?;
            for head in fresh {
                cursor.see(&head);
                let card = cards.get(&head.card_id).cloned().flatten();
                let in_stream = match (&cursor.stream_id, &card) {
                    (Some(stream), Some(card)) => card.stream_ids.iter().any(|s| s == stream),
                    // A card no longer stored (pruned) belongs to no stream that can be told.
                    (Some(_), None) => false,
                    (None, _) => true,
                };
                if in_stream {
                    let card = card.filter(|c| c.status == CardStatus::Active);
                    events.push(FeedEvent { head, card, count });
                }
            }
        }
        cursor.resume = resume;
        // What the re-read window no longer covers is forgotten.
        let keep_from = earlier(earlier(cursor.watermark, reread), reread);
        cursor.seen.retain(|_, at| *at >= keep_from);
        Ok(Changes { events, more })
    }
}

/// `at` less `by`, or `at` itself where that would leave the calendar's range: event times come
/// from storage, and no arithmetic on them may panic.
fn earlier(at: Timestamp, by: Duration) -> Timestamp {
    at.checked_sub_signed(by).unwrap_or(at)
}

#[cfg(test)]
mod tests;
