//! SQLite's writers' turns: one writer at a time, first come first served, and a count of the
//! writers waiting for a turn, so that a long save can hand its turn on at a boundary of its
//! own ([`Others`]).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use tokio::sync::{Mutex, MutexGuard};

/// The writers' turns of one SQLite database.
#[derive(Default)]
pub(super) struct Writers {
    turn: Mutex<()>,
    waiting: AtomicUsize,
}

impl Writers {
    /// Waits for this writer's turn; it is counted among the waiting until it has it (or the
    /// wait is given up).
    pub(super) async fn turn(&self) -> MutexGuard<'_, ()> {
        let _waiting = Waiting::new(&self.waiting);
        self.turn.lock().await
    }

    /// [`Writers::turn`], blocking the calling thread, which must not be a runtime's.
    pub(super) fn blocking_turn(&self) -> MutexGuard<'_, ()> {
        let _waiting = Waiting::new(&self.waiting);
        self.turn.blocking_lock()
    }
}

/// One writer counted among the waiting while it lives.
struct Waiting<'a>(&'a AtomicUsize);

impl<'a> Waiting<'a> {
    fn new(count: &'a AtomicUsize) -> Self {
        count.fetch_add(1, Ordering::SeqCst);
        Self(count)
    }
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// What a transaction that can end early is told of the writers behind it: whether one waits
/// for its turn. On PostgreSQL, whose writers do not take turns, none ever does.
#[derive(Clone, Default)]
pub(crate) struct Others(Option<Arc<Writers>>);

impl Others {
    pub(super) fn of(writers: Option<Arc<Writers>>) -> Self {
        Self(writers)
    }

    /// Whether a writer waits for the turn this transaction holds.
    pub(crate) fn waiting(&self) -> bool {
        self.0
            .as_ref()
            .is_some_and(|w| w.waiting.load(Ordering::SeqCst) > 0)
    }

    /// Whether writers take turns at all (SQLite): only then is a transaction worth ending
    /// early for them.
    pub(crate) fn take_turns(&self) -> bool {
        self.0.is_some()
    }
}
