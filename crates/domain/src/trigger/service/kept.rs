//! A memo of what never changes once read, bounded so that it cannot grow without end.

use std::collections::HashMap;

/// What never changes once read (published configurations, default streams), kept in memory:
/// at most 10,000 entries, all forgotten when that is reached.
pub(super) struct Kept<K, V>(std::sync::Mutex<HashMap<K, V>>);

impl<K: std::hash::Hash + Eq, V: Clone> Kept<K, V> {
    /// An empty memo.
    pub(super) fn new() -> Self {
        Self(std::sync::Mutex::new(HashMap::new()))
    }

    /// The value kept for `key`, if any.
    pub(super) fn get<Q>(&self, key: &Q) -> Option<V>
    where
        K: std::borrow::Borrow<Q>,
        Q: std::hash::Hash + Eq + ?Sized,
    {
        self.0.lock().ok()?.get(key).cloned()
    }

    /// Keeps `value` for `key`, forgetting everything first when the memo is full.
    pub(super) fn keep(&self, key: K, value: V) {
        if let Ok(mut kept) = self.0.lock() {
            if kept.len() >= 10_000 {
                kept.clear();
            }
            kept.insert(key, value);
        }
    }
}
