//! The process's hub of open feed streams (contract §12). Storage tells it whose cards changed
//! ([`FeedNotices`]: after each commit of card events in this process, and through the
//! database's notifications from the others); it wakes the streams watching those users, each
//! of which then reads what changed. A change costs one read per stream of its user, and no
//! stream reads while nothing of its user changes.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};

use domain::feed::FeedNotices;
use tokio::sync::Notify;

/// One open stream's wake-up: notified when its user's cards change, when changes may have
/// been missed, and when the process stops.
#[derive(Default)]
pub struct Watcher {
    wake: Notify,
}

impl Watcher {
    /// Waits for the next wake-up (one that came since the last wait counts).
    pub async fn changed(&self) {
        self.wake.notified().await;
    }
}

/// Streams by environment, then user.
type Watchers = HashMap<String, HashMap<String, Vec<Weak<Watcher>>>>;

/// The open streams of the process, by the user they watch.
#[derive(Default)]
pub struct FeedHub {
    watchers: Mutex<Watchers>,
    open: AtomicUsize,
    closing: AtomicBool,
}

/// A stream's place in the hub; it leaves when this is dropped.
pub struct Watch {
    hub: Arc<FeedHub>,
    environment: String,
    user: String,
    watcher: Arc<Watcher>,
}

impl Watch {
    /// The stream's wake-up.
    pub fn watcher(&self) -> &Watcher {
        &self.watcher
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        self.hub.open.fetch_sub(1, Ordering::Relaxed);
        let Ok(mut all) = self.hub.watchers.lock() else {
            return;
        };
        if let Some(users) = all.get_mut(&self.environment) {
            if let Some(list) = users.get_mut(&self.user) {
                list.retain(|w| w.strong_count() > 0 && !std::ptr::eq(w.as_ptr(), &*self.watcher));
                if list.is_empty() {
                    users.remove(&self.user);
                }
            }
            if users.is_empty() {
                all.remove(&self.environment);
            }
        }
    }
}

impl FeedHub {
    /// A stream of `user` in `environment` joins.
    pub fn watch(self: &Arc<Self>, environment: &str, user: &str) -> Watch {
        let watcher = Arc::new(Watcher::default());
        if let Ok(mut all) = self.watchers.lock() {
            all.entry(environment.to_owned())
                .or_default()
                .entry(user.to_owned())
                .or_default()
                .push(Arc::downgrade(&watcher));
        }
        self.open.fetch_add(1, Ordering::Relaxed);
        Watch {
            hub: Arc::clone(self),
            environment: environment.to_owned(),
            user: user.to_owned(),
            watcher,
        }
    }

    /// How many streams are open.
    pub fn open_streams(&self) -> usize {
        self.open.load(Ordering::Relaxed)
    }

    /// Whether the process is stopping: every stream ends.
    pub fn is_closing(&self) -> bool {
        self.closing.load(Ordering::Relaxed)
    }

    /// The process stops (SIGTERM): every stream ends cleanly, so that the server's graceful
    /// shutdown does not wait on them.
    pub fn close_all(&self) {
        self.closing.store(true, Ordering::Relaxed);
        self.wake_all();
    }

    fn wake_all(&self) {
        let Ok(all) = self.watchers.lock() else {
            return;
        };
        for watcher in all.values().flat_map(HashMap::values).flatten() {
            if let Some(watcher) = watcher.upgrade() {
                watcher.wake.notify_one();
            }
        }
    }
}

impl FeedNotices for FeedHub {
    fn cards_changed(&self, environment_id: &str, users: &[&str]) {
        let Ok(all) = self.watchers.lock() else {
            return;
        };
        let Some(watched) = all.get(environment_id) else {
            return;
        };
        for user in users {
            for watcher in watched.get(*user).into_iter().flatten() {
                if let Some(watcher) = watcher.upgrade() {
                    watcher.wake.notify_one();
                }
            }
        }
    }

    fn catch_up(&self) {
        self.wake_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    async fn woken(watch: &Watch) -> bool {
        tokio::time::timeout(Duration::from_millis(50), watch.watcher().changed())
            .await
            .is_ok()
    }

    #[tokio::test]
    async fn a_change_wakes_the_streams_of_its_user_only_and_leaving_forgets_them() {
        let hub = Arc::new(FeedHub::default());
        let (a, b) = (hub.watch("env_1", "u1"), hub.watch("env_1", "u1"));
        let other = hub.watch("env_1", "u2");
        let elsewhere = hub.watch("env_2", "u1");
        assert_eq!(hub.open_streams(), 4);
        hub.cards_changed("env_1", &["u1", "u3"]);
        assert!(woken(&a).await && woken(&b).await);
        assert!(!woken(&other).await && !woken(&elsewhere).await);
        // A change while a stream was busy is not lost: it wakes the next wait.
        hub.cards_changed("env_1", &["u2"]);
        assert!(woken(&other).await);
        drop((a, b, other, elsewhere));
        assert_eq!(hub.open_streams(), 0);
        assert!(hub.watchers.lock().expect("lock").is_empty());
        // Catching up and closing wake everyone.
        let c = hub.watch("env_1", "u9");
        hub.catch_up();
        assert!(woken(&c).await);
        hub.close_all();
        assert!(woken(&c).await && hub.is_closing());
    }
}
