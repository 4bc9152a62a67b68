use std::sync::Mutex;

use chrono::Duration;

use super::*;
use crate::card::{test_card, MockCardRepository};
use crate::testing::{caller, t0};
use crate::time::MockClock;
use crate::{KeyAccess, Role};

const ENV: &str = "env_1";

/// A store of one user's events and cards, as the port would read them.
#[derive(Default)]
struct Store {
    events: Mutex<Vec<EventHead>>,
    active: Mutex<u64>,
}

#[async_trait]
impl FeedRepository for Store {
    async fn count_active(&self, _: &str, _: &str, _: Option<String>) -> Result<u64, StorageError> {
        Ok(*self.active.lock().expect("lock"))
    }

    async fn events_since(
        &self,
        _: &str,
        _: &str,
        since: Timestamp,
        after: Option<(Timestamp, EventId)>,
        limit: u32,
    ) -> Result<Vec<EventHead>, StorageError> {
        let mut events: Vec<EventHead> = self
            .events
            .lock()
            .expect("lock")
            .iter()
            .filter(|e| e.created >= since)
            .filter(|e| {
                after
                    .as_ref()
                    .is_none_or(|a| (e.created, e.id.clone()) > *a)
            })
            .cloned()
            .collect();
        events.sort_by(|a, b| (a.created, &a.id).cmp(&(b.created, &b.id)));
        events.truncate(limit as usize);
        Ok(events)
    }

    async fn event(&self, _: &str, _: &str, id: &str) -> Result<Option<EventHead>, StorageError> {
        Ok(self
            .events
            .lock()
            .expect("lock")
            .iter()
            .find(|e| e.id == id)
            .cloned())
    }
}

impl Store {
    fn add(&self, id: &str, card: &str, at: Timestamp) {
        self.events.lock().expect("lock").push(EventHead {
            id: id.into(),
            name: "card-published".into(),
            card_id: card.into(),
            created: at,
        });
    }
}

fn service(store: Arc<Store>, now: Timestamp) -> FeedService {
    let mut cards = MockCardRepository::new();
    cards.expect_get().returning(|_, _, id| {
        let status = if id == "crd_closed" {
            CardStatus::Completed
        } else {
            CardStatus::Active
        };
        let mut card = test_card(id, status, t0());
        card.stream_ids = vec!["str_all".into()];
        Ok(Some(card))
    });
    let mut clock = MockClock::new();
    clock.expect_now().returning(move || now);
    FeedService::new(store, Arc::new(cards), Arc::new(clock))
}

fn reader() -> Principal {
    caller(ENV, KeyAccess::Roles(vec![Role::Events]))
}

fn ids(changes: &Changes) -> Vec<String> {
    changes
        .events
        .iter()
        .map(|e| e.head.id.to_string())
        .collect()
}

#[tokio::test]
async fn a_live_stream_sends_what_changes_after_it_opens_once_each() {
    let store = Arc::new(Store::default());
    let at = |s: i64| t0() + Duration::seconds(s);
    store.add("evt_before", "crd_1", at(-1));
    let feed = service(store.clone(), t0());
    let mut cursor = feed
        .open(&reader(), &ENV.into(), &"u1".into(), None, None)
        .await
        .expect("open");
    assert!(feed
        .changes(&mut cursor)
        .await
        .expect("read")
        .events
        .is_empty());
    store.add("evt_1", "crd_1", at(1));
    *store.active.lock().expect("lock") = 1;
    let first = feed.changes(&mut cursor).await.expect("read");
    assert_eq!(ids(&first), ["evt_1"]);
    assert_eq!(first.events[0].count, 1);
    assert!(first.events[0].card.is_some());
    // A late commit stamped before the newest event, within the re-read window, still comes;
    // nothing is sent twice.
    store.add("evt_2", "crd_closed", at(5));
    store.add("evt_late", "crd_1", at(2));
    let second = feed.changes(&mut cursor).await.expect("read");
    assert_eq!(ids(&second), ["evt_late", "evt_2"]);
    assert!(second.events[1].card.is_none(), "a closed card is null");
    assert!(feed
        .changes(&mut cursor)
        .await
        .expect("read")
        .events
        .is_empty());
}

#[tokio::test]
async fn last_event_id_resumes_after_it_and_not_beyond_a_day() {
    let store = Arc::new(Store::default());
    let at = |s: i64| t0() + Duration::seconds(s);
    for i in 0..5 {
        store.add(&format!("evt_{i}"), "crd_1", at(i));
    }
    let feed = service(store.clone(), at(100));
    let mut cursor = feed
        .open(
            &reader(),
            &ENV.into(),
            &"u1".into(),
            None,
            Some("evt_2".into()),
        )
        .await
        .expect("open");
    assert_eq!(
        ids(&feed.changes(&mut cursor).await.expect("read")),
        ["evt_3", "evt_4"]
    );
    // An unknown id resumes nothing.
    let mut cursor = feed
        .open(
            &reader(),
            &ENV.into(),
            &"u1".into(),
            None,
            Some("evt_nope".into()),
        )
        .await
        .expect("open");
    assert!(feed
        .changes(&mut cursor)
        .await
        .expect("read")
        .events
        .is_empty());
    // An event older than a day resumes from a day back.
    let old = Arc::new(Store::default());
    old.add("evt_old", "crd_1", at(0));
    old.add("evt_recent", "crd_1", at(RESUME_HOURS * 3600 - 60));
    old.add("evt_ancient", "crd_1", at(-3600));
    let feed = service(old, at(RESUME_HOURS * 3600 + 60));
    let mut cursor = feed
        .open(
            &reader(),
            &ENV.into(),
            &"u1".into(),
            None,
            Some("evt_ancient".into()),
        )
        .await
        .expect("open");
    assert_eq!(
        ids(&feed.changes(&mut cursor).await.expect("read")),
        ["evt_recent"]
    );
}

#[tokio::test]
async fn a_long_backlog_is_read_in_pages_without_repeats() {
    let store = Arc::new(Store::default());
    let at = |s: i64| t0() + Duration::seconds(s);
    store.add("evt_start", "crd_1", at(0));
    // More events than one read takes, all at one instant.
    for i in 0..(READ_LIMIT + 20) {
        store.add(&format!("evt_{i:04}"), "crd_1", at(1));
    }
    let feed = service(store.clone(), at(60));
    let mut cursor = feed
        .open(
            &reader(),
            &ENV.into(),
            &"u1".into(),
            None,
            Some("evt_start".into()),
        )
        .await
        .expect("open");
    let mut sent = Vec::new();
    loop {
        let changes = feed.changes(&mut cursor).await.expect("read");
        sent.extend(ids(&changes));
        if !changes.more {
            break;
        }
    }
    assert_eq!(sent.len(), READ_LIMIT as usize + 20);
    let mut unique = sent.clone();
    unique.dedup();
    assert_eq!(unique, sent);
}

#[tokio::test]
async fn a_stream_filter_keeps_its_stream_and_keys_need_the_feed_permission() {
    let store = Arc::new(Store::default());
    let feed = service(store.clone(), t0());
    let mut cursor = feed
        .open(
            &reader(),
            &ENV.into(),
            &"u1".into(),
            Some("str_other".into()),
            None,
        )
        .await
        .expect("open");
    store.add("evt_1", "crd_1", t0() + Duration::seconds(1));
    assert!(feed
        .changes(&mut cursor)
        .await
        .expect("read")
        .events
        .is_empty());
    let webhooks = caller(ENV, KeyAccess::Roles(vec![Role::Workbench]));
    assert!(matches!(
        feed.open(&webhooks, &ENV.into(), &"u1".into(), None, None)
            .await,
        Err(DomainError::Forbidden(_))
    ));
    let someone = Principal::end_user("sdk_1", ENV, "u2");
    assert!(matches!(
        feed.count(&someone, &ENV.into(), &"u1".into(), None).await,
        Err(DomainError::Unauthenticated)
    ));
    let me = Principal::end_user("sdk_1", ENV, "u1");
    assert_eq!(
        feed.count(&me, &ENV.into(), &"u1".into(), None)
            .await
            .expect("count"),
        0
    );
}

#[tokio::test]
async fn a_failed_read_loses_nothing_and_sends_nothing_twice() {
    let store = Arc::new(Store::default());
    let mut cards = MockCardRepository::new();
    let calls = Arc::new(Mutex::new(0));
    let counted = Arc::clone(&calls);
    cards.expect_get().returning(move |_, _, id| {
        let mut calls = counted.lock().expect("lock");
        *calls += 1;
        if *calls == 1 {
            return Err(StorageError::Unavailable(
                "the database did not answer".into(),
            ));
        }
        Ok(Some(test_card(id, CardStatus::Active, t0())))
    });
    let mut clock = MockClock::new();
    clock.expect_now().returning(t0);
    let feed = FeedService::new(store.clone(), Arc::new(cards), Arc::new(clock));
    let mut cursor = feed
        .open(&reader(), &ENV.into(), &"u1".into(), None, None)
        .await
        .expect("open");
    store.add("evt_1", "crd_1", t0() + Duration::seconds(1));
    assert!(
        feed.changes(&mut cursor).await.is_err(),
        "the card read failed"
    );
    assert_eq!(
        ids(&feed.changes(&mut cursor).await.expect("read")),
        ["evt_1"]
    );
    assert!(feed
        .changes(&mut cursor)
        .await
        .expect("read")
        .events
        .is_empty());
}

#[tokio::test]
async fn a_live_stream_sends_what_is_stamped_after_it_opened() {
    let store = Arc::new(Store::default());
    // Stamped a moment after the stream's "now", and already stored when it looks back.
    store.add("evt_just_after", "crd_1", t0() + Duration::milliseconds(1));
    store.add("evt_before", "crd_1", t0() - Duration::milliseconds(1));
    let feed = service(store.clone(), t0());
    let mut cursor = feed
        .open(&reader(), &ENV.into(), &"u1".into(), None, None)
        .await
        .expect("open");
    assert_eq!(
        ids(&feed.changes(&mut cursor).await.expect("read")),
        ["evt_just_after"]
    );
}

#[test]
fn times_at_the_calendars_edge_do_not_overflow() {
    let first = Timestamp::MIN_UTC;
    assert_eq!(earlier(first, Duration::seconds(REREAD_SECONDS)), first);
    assert_eq!(
        earlier(t0(), Duration::seconds(1)),
        t0() - Duration::seconds(1)
    );
}
