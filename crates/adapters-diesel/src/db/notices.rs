//! What a write transaction changed that the process is told of once it commits, kept on the
//! thread that runs it and forgotten when it rolls back: whose cards changed (contract §12),
//! for the feed, and whether webhook deliveries were queued, for the delivery loop.

use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};

use domain::feed::FeedNotices;
use tokio::sync::Notify;

thread_local! {
    /// The users whose card events the transaction on this thread wrote, by environment.
    static PENDING: RefCell<BTreeMap<String, Vec<String>>> = const { RefCell::new(BTreeMap::new()) };
    /// Whether the transaction on this thread queued webhook deliveries.
    static QUEUED: Cell<bool> = const { Cell::new(false) };
}

/// Notes that cards of `users` in `env` changed in the transaction under way.
pub(crate) fn note(env: &str, users: &[&str]) {
    PENDING.with(|pending| {
        let mut pending = pending.borrow_mut();
        let all = pending.entry(env.to_owned()).or_default();
        all.extend(users.iter().map(|u| (*u).to_owned()));
    });
}

/// Notes that the transaction under way queued webhook deliveries.
pub(crate) fn deliveries_queued() {
    QUEUED.with(|queued| queued.set(true));
}

/// Forgets what this thread noted: a transaction begins, or rolled back.
pub(crate) fn discard() {
    PENDING.with(|pending| pending.borrow_mut().clear());
    QUEUED.with(|queued| queued.set(false));
}

/// What this thread's committed transaction noted, taken.
pub(crate) fn take() -> Noted {
    Noted {
        cards: PENDING.with(|pending| std::mem::take(&mut *pending.borrow_mut())),
        deliveries: QUEUED.with(|queued| queued.replace(false)),
    }
}

/// What a committed transaction noted.
pub(crate) struct Noted {
    /// Whose cards changed, by environment.
    cards: BTreeMap<String, Vec<String>>,
    /// Whether it queued webhook deliveries.
    deliveries: bool,
}

/// Who is told what committed transactions noted, shared by every clone of a database: the
/// process's feed notices (none until told), and the delivery loop's wake-up.
#[derive(Clone, Default)]
pub(crate) struct Told {
    feed: Arc<RwLock<Option<Arc<dyn FeedNotices>>>>,
    deliveries: Arc<Notify>,
}

impl Told {
    pub(crate) fn set(&self, notices: Arc<dyn FeedNotices>) {
        if let Ok(mut sink) = self.feed.write() {
            *sink = Some(notices);
        }
    }

    /// Notified once each time committed transactions queued webhook deliveries (a permit is
    /// kept while nobody waits).
    pub(crate) fn deliveries(&self) -> Arc<Notify> {
        self.deliveries.clone()
    }

    /// Tells what a committed transaction noted.
    pub(crate) fn tell(&self, noted: Noted) {
        if noted.deliveries {
            self.deliveries.notify_one();
        }
        if noted.cards.is_empty() {
            return;
        }
        let Some(sink) = self.feed.read().ok().and_then(|s| s.clone()) else {
            return;
        };
        for (env, users) in &noted.cards {
            let users: Vec<&str> = users.iter().map(String::as_str).collect();
            sink.cards_changed(env, &users);
        }
    }
}
