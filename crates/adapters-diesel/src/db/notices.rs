//! Whose cards a write transaction changed (contract §12), kept on the thread that runs it and
//! told to the process's feed once it commits; forgotten when it rolls back.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};

use domain::feed::FeedNotices;

thread_local! {
    /// The users whose card events the transaction on this thread wrote, by environment.
    static PENDING: RefCell<BTreeMap<String, Vec<String>>> = const { RefCell::new(BTreeMap::new()) };
}

/// Notes that cards of `users` in `env` changed in the transaction under way.
pub(crate) fn note(env: &str, users: &[&str]) {
    PENDING.with(|pending| {
        let mut pending = pending.borrow_mut();
        let all = pending.entry(env.to_owned()).or_default();
        all.extend(users.iter().map(|u| (*u).to_owned()));
    });
}

/// Forgets what this thread noted: a transaction begins, or rolled back.
pub(crate) fn discard() {
    PENDING.with(|pending| pending.borrow_mut().clear());
}

/// What this thread's committed transaction noted, taken.
pub(crate) fn take() -> BTreeMap<String, Vec<String>> {
    PENDING.with(|pending| std::mem::take(&mut *pending.borrow_mut()))
}

/// The process's feed notices, shared by every clone of a database; none until told.
#[derive(Clone, Default)]
pub(crate) struct FeedSink(Arc<RwLock<Option<Arc<dyn FeedNotices>>>>);

impl FeedSink {
    pub(crate) fn set(&self, notices: Arc<dyn FeedNotices>) {
        if let Ok(mut sink) = self.0.write() {
            *sink = Some(notices);
        }
    }

    /// Tells what a committed transaction noted.
    pub(crate) fn tell(&self, noted: BTreeMap<String, Vec<String>>) {
        if noted.is_empty() {
            return;
        }
        let Some(sink) = self.0.read().ok().and_then(|s| s.clone()) else {
            return;
        };
        for (env, users) in &noted {
            let users: Vec<&str> = users.iter().map(String::as_str).collect();
            sink.cards_changed(env, &users);
        }
    }
}
