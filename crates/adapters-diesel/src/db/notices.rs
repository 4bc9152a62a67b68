//! What a write transaction changed that the process is told of once it commits, kept on the
//! thread that runs it and forgotten when it rolls back: whose cards changed (contract §12),
//! for the feed, and which kinds of background work it queued, for the loops that claim them.

use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};

use domain::feed::FeedNotices;
use tokio::sync::Notify;

thread_local! {
    /// The users whose card events the transaction on this thread wrote, by environment.
    static PENDING: RefCell<BTreeMap<String,
        Vec<String>>> = const { RefCell::new(BTreeMap::new()) };
    /// The kinds of [`Work`] the transaction on this thread queued, one bit each.
    static QUEUED: Cell<u8> = const { Cell::new(0) };
}

/// A kind of background work that a write transaction can make due, and a loop of the
/// process claims.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Work {
    /// Invocations for the engine: recorded and not run to their end in the request.
    Invocations,
    /// Webhook deliveries: events written, a delivery sent again, a backlog recovered.
    Deliveries,
    /// Push sends: events of cards with a push.
    Pushes,
    /// Cancel tasks accepted.
    Cancels,
    /// CSV tasks whose upload finished.
    CsvTasks,
    /// Flow instances made due at once: a card they listen to closed.
    Instances,
}

impl Work {
    const COUNT: usize = Work::Instances as usize + 1;

    fn bit(self) -> u8 {
        1 << (self as u8)
    }
}

/// Notes that cards of `users` in `env` changed in the transaction under way.
pub(crate) fn note(env: &str, users: &[&str]) {
    PENDING.with(|pending| {
        let mut pending = pending.borrow_mut();
        let all = pending.entry(env.to_owned()).or_default();
        all.extend(users.iter().map(|u| (*u).to_owned()));
    });
}

/// Notes that the transaction under way queued `work`.
pub(crate) fn queued(work: Work) {
    QUEUED.with(|queued| queued.set(queued.get() | work.bit()));
}

/// Forgets what this thread noted: a transaction begins, or rolled back.
pub(crate) fn discard() {
    PENDING.with(|pending| pending.borrow_mut().clear());
    QUEUED.with(|queued| queued.set(0));
}

/// What this thread's committed transaction noted, taken.
pub(crate) fn take() -> Noted {
    Noted {
        cards: PENDING.with(|pending| std::mem::take(&mut *pending.borrow_mut())),
        queued: QUEUED.with(|queued| queued.replace(0)),
    }
}

/// What a committed transaction noted.
pub(crate) struct Noted {
    /// Whose cards changed, by environment.
    cards: BTreeMap<String, Vec<String>>,
    /// The kinds of work it queued, one bit each.
    queued: u8,
}

/// Who is told what committed transactions noted, shared by every clone of a database: the
/// process's feed notices (none until told), and the loops' wake-ups: each loop that asked for
/// a kind of work has one of its own.
#[derive(Clone, Default)]
pub(crate) struct Told(Arc<Listeners>);

#[derive(Default)]
struct Listeners {
    feed: RwLock<Option<Arc<dyn FeedNotices>>>,
    work: [RwLock<Vec<Arc<Notify>>>; Work::COUNT],
}

impl Told {
    pub(crate) fn set(&self, notices: Arc<dyn FeedNotices>) {
        if let Ok(mut sink) = self.0.feed.write() {
            *sink = Some(notices);
        }
    }

    /// A wake-up of its own for a loop: notified once each time committed transactions
    /// queued `work` (a permit is kept while the loop does not wait), as is every other one
    /// asked for the same work.
    pub(crate) fn queued(&self, work: Work) -> Arc<Notify> {
        let wake = Arc::new(Notify::new());
        if let Ok(mut wakes) = self.0.work[work as usize].write() {
            wakes.push(wake.clone());
        }
        wake
    }

    /// Tells what a committed transaction noted.
    pub(crate) fn tell(&self, noted: Noted) {
        if noted.queued != 0 {
            for (i, wakes) in self.0.work.iter().enumerate() {
                if noted.queued & (1 << i) == 0 {
                    continue;
                }
                if let Ok(wakes) = wakes.read() {
                    for wake in wakes.iter() {
                        wake.notify_one();
                    }
                }
            }
        }
        if noted.cards.is_empty() {
            return;
        }
        let Some(sink) = self.0.feed.read().ok().and_then(|s| s.clone()) else {
            return;
        };
        for (env, users) in &noted.cards {
            let users: Vec<&str> = users.iter().map(String::as_str).collect();
            sink.cards_changed(env, &users);
        }
    }
}
