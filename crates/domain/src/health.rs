//! Readiness: whatever the service depends on answers.

use async_trait::async_trait;

use crate::StorageError;

/// Whether the database answers and is migrated, for `GET /readyz` (docs/operations.md,
/// Endpoints for operators).
#[cfg_attr(feature = "mock", mockall::automock)]
#[async_trait]
pub trait HealthProbe: Send + Sync {
    /// Ok when the database is reachable and every migration is applied; otherwise an error
    /// (`Unavailable` for pending migrations), and `/readyz` answers 503 `not_ready`.
    async fn ready(&self) -> Result<(), StorageError>;
}

/// A loop that has had work but no progress for this long is stalled (docs/operations.md,
/// Endpoints for operators).
pub const STALL_AFTER: std::time::Duration = std::time::Duration::from_secs(30);

/// What each background loop of the process is doing, for `/readyz` and `/metrics`: a loop
/// reports each step it starts and ends ([`Loops::started`], [`Loops::ended`]) and each time it
/// is restarted after dying. A loop is stalled when it is inside a step begun more than
/// [`STALL_AFTER`] ago, or when its steps have failed for that long: it had work and made no
/// progress. A loop with nothing to do ends its steps well and is never stalled.
///
/// ```
/// use std::time::{Duration, Instant};
/// use workbench_domain::health::Loops;
///
/// let loops = Loops::default();
/// let t0 = Instant::now();
/// let step = loops.started("engine", t0);
/// loops.ended("engine", step, true, t0 + Duration::from_millis(5));
/// assert!(loops.stalled(t0 + Duration::from_secs(60)).is_empty());
/// loops.started("engine", t0 + Duration::from_secs(60));
/// assert_eq!(loops.stalled(t0 + Duration::from_secs(91)), vec!["engine"]);
/// ```
#[derive(Debug, Default)]
pub struct Loops {
    loops: std::sync::Mutex<std::collections::BTreeMap<&'static str, LoopState>>,
}

#[derive(Debug, Clone)]
struct LoopState {
    /// When each step now running began, by its token (several engine loops share a name).
    running: std::collections::BTreeMap<u64, std::time::Instant>,
    /// The first failure since the last good step.
    failing_since: Option<std::time::Instant>,
    restarts: u64,
}

impl Loops {
    fn with<T>(
        &self,
        f: impl FnOnce(&mut std::collections::BTreeMap<&'static str, LoopState>) -> T,
    ) -> T {
        let mut loops = self
            .loops
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        f(&mut loops)
    }

    fn state<'a>(
        loops: &'a mut std::collections::BTreeMap<&'static str, LoopState>,
        name: &'static str,
    ) -> &'a mut LoopState {
        loops.entry(name).or_insert(LoopState {
            running: std::collections::BTreeMap::new(),
            failing_since: None,
            restarts: 0,
        })
    }

    /// A loop named `name` exists (so that it is listed with no restarts).
    pub fn register(&self, name: &'static str) {
        self.with(|l| {
            Self::state(l, name);
        });
    }

    /// `name` begins a step; the token ends it ([`Loops::ended`]).
    pub fn started(&self, name: &'static str, now: std::time::Instant) -> u64 {
        static TOKENS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let token = TOKENS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.with(|l| {
            Self::state(l, name).running.insert(token, now);
        });
        token
    }

    /// The step `token` of `name` ends, well (work done, or nothing to do) or not.
    pub fn ended(&self, name: &'static str, token: u64, ok: bool, now: std::time::Instant) {
        self.with(|l| {
            let s = Self::state(l, name);
            s.running.remove(&token);
            if ok {
                s.failing_since = None;
            } else {
                s.failing_since.get_or_insert(now);
            }
        });
    }

    /// `name` died and was started again: its steps ended, not well.
    pub fn restarted(&self, name: &'static str, now: std::time::Instant) {
        self.with(|l| {
            let s = Self::state(l, name);
            s.restarts += 1;
            s.running.clear();
            s.failing_since.get_or_insert(now);
        });
    }

    /// The loops stalled at `now`, by name.
    pub fn stalled(&self, now: std::time::Instant) -> Vec<&'static str> {
        self.with(|l| {
            l.iter()
                .filter(|(_, s)| {
                    let since = |t: Option<std::time::Instant>| {
                        t.is_some_and(|t| now.saturating_duration_since(t) >= STALL_AFTER)
                    };
                    since(s.running.values().min().copied()) || since(s.failing_since)
                })
                .map(|(name, _)| *name)
                .collect()
        })
    }

    /// Each loop's restarts since the process started.
    pub fn restarts(&self) -> Vec<(&'static str, u64)> {
        self.with(|l| l.iter().map(|(name, s)| (*name, s.restarts)).collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};

    #[test]
    fn a_loop_that_keeps_failing_is_stalled_after_30_seconds_and_recovers_with_a_good_step() {
        let loops = Loops::default();
        let t0 = Instant::now();
        loops.register("bulk");
        assert!(
            loops.stalled(t0 + Duration::from_secs(600)).is_empty(),
            "idle is not stalled"
        );
        let step = loops.started("bulk", t0);
        loops.ended("bulk", step, false, t0 + Duration::from_secs(1));
        assert!(loops.stalled(t0 + Duration::from_secs(30)).is_empty());
        assert_eq!(loops.stalled(t0 + Duration::from_secs(31)), vec!["bulk"]);
        let step = loops.started("bulk", t0 + Duration::from_secs(32));
        loops.ended("bulk", step, true, t0 + Duration::from_secs(33));
        assert!(loops.stalled(t0 + Duration::from_secs(34)).is_empty());
    }

    #[test]
    fn a_restart_counts_and_a_loop_that_dies_again_and_again_is_stalled() {
        let loops = Loops::default();
        let t0 = Instant::now();
        loops.register("engine");
        loops.started("engine", t0);
        loops.restarted("engine", t0 + Duration::from_secs(1));
        loops.restarted("engine", t0 + Duration::from_secs(20));
        assert_eq!(loops.restarts(), vec![("engine", 2)]);
        assert_eq!(loops.stalled(t0 + Duration::from_secs(31)), vec!["engine"]);
    }

    #[test]
    fn two_busy_instances_of_a_loop_are_judged_by_their_oldest_running_step() {
        let loops = Loops::default();
        let t0 = Instant::now();
        // Two engine loops take turns, one always inside a short step: never stalled.
        let mut a = loops.started("engine", t0);
        for second in 1..120 {
            let at = t0 + Duration::from_secs(second);
            let b = loops.started("engine", at);
            loops.ended("engine", a, true, at);
            a = b;
            assert!(loops.stalled(at).is_empty(), "at {second} s");
        }
        // One of them hangs inside a step: stalled 30 s after that step began.
        let hung = t0 + Duration::from_secs(200);
        loops.started("engine", hung);
        let other = loops.started("engine", hung + Duration::from_secs(10));
        loops.ended("engine", other, true, hung + Duration::from_secs(11));
        loops.ended("engine", a, true, hung);
        assert!(loops.stalled(hung + Duration::from_secs(29)).is_empty());
        assert_eq!(
            loops.stalled(hung + Duration::from_secs(30)),
            vec!["engine"]
        );
    }
}

/// The state of the database's storage, shared by the storage adapter (which reports writes
/// refused for lack of space, and writes that succeed), the sampler of free space (SQLite), and
/// what reads it: `/readyz`, `/metrics` and the low-disk guard (docs/operations.md, Durability
/// and disk space).
///
/// ```
/// use workbench_domain::health::Storage;
///
/// let storage = Storage::default();
/// storage.set_guard(128 << 20);
/// storage.sampled(64 << 20);
/// assert!(storage.guard_tripped() && storage.full());
/// storage.sampled(1 << 30);
/// assert!(!storage.full());
/// storage.write_refused();
/// assert!(storage.full(), "until a write succeeds");
/// storage.write_succeeded();
/// assert!(!storage.full());
/// ```
#[derive(Debug)]
pub struct Storage {
    /// Free bytes of the database's filesystem at the last sample; `u64::MAX` when unknown.
    free: std::sync::atomic::AtomicU64,
    /// `WORKBENCH_MIN_FREE_DISK`; 0 when the guard is off.
    guard: std::sync::atomic::AtomicU64,
    /// The last write failed for lack of space, and none has succeeded since.
    refused: std::sync::atomic::AtomicBool,
    /// Writes refused for lack of space, in all.
    full_errors: std::sync::atomic::AtomicU64,
}

impl Default for Storage {
    fn default() -> Self {
        Self {
            free: std::sync::atomic::AtomicU64::new(u64::MAX),
            guard: std::sync::atomic::AtomicU64::new(0),
            refused: std::sync::atomic::AtomicBool::new(false),
            full_errors: std::sync::atomic::AtomicU64::new(0),
        }
    }
}

impl Storage {
    const ORDER: std::sync::atomic::Ordering = std::sync::atomic::Ordering::Relaxed;

    /// The low-disk guard: below `min_free` free bytes it is tripped; 0 turns it off.
    pub fn set_guard(&self, min_free: u64) {
        self.guard.store(min_free, Self::ORDER);
    }

    /// A sample of the free bytes.
    pub fn sampled(&self, free: u64) {
        self.free.store(free, Self::ORDER);
    }

    /// Free bytes at the last sample, if any was taken.
    pub fn free_bytes(&self) -> Option<u64> {
        Some(self.free.load(Self::ORDER)).filter(|f| *f != u64::MAX)
    }

    /// A write was refused for lack of space.
    pub fn write_refused(&self) {
        self.refused.store(true, Self::ORDER);
        self.full_errors.fetch_add(1, Self::ORDER);
    }

    /// A write succeeded: space was found again.
    pub fn write_succeeded(&self) {
        // Read first: a store on every commit would bounce the cache line between threads.
        if self.refused.load(Self::ORDER) {
            self.refused.store(false, Self::ORDER);
        }
    }

    /// Free space is below the guard.
    pub fn guard_tripped(&self) -> bool {
        let guard = self.guard.load(Self::ORDER);
        guard > 0 && self.free.load(Self::ORDER) < guard
    }

    /// The guard is tripped, or the last write failed for lack of space and none succeeded
    /// since: `/readyz` answers 503 `storage_full`.
    pub fn full(&self) -> bool {
        self.guard_tripped() || self.refused.load(Self::ORDER)
    }

    /// Writes refused for lack of space since the process started.
    pub fn full_errors(&self) -> u64 {
        self.full_errors.load(Self::ORDER)
    }
}

/// Writes of a leased unit of work that changed nothing because the lease had passed to
/// another holder (docs/operations.md, Clocks; docs/architecture.md, Time, leases and
/// fencing): counted where the service finds them, taken by whoever reports them
/// (`workbench_stale_outcomes_total`).
///
/// ```
/// use workbench_domain::health::Stale;
///
/// let stale = Stale::default();
/// stale.add(2);
/// stale.add(1);
/// assert_eq!(stale.take(), 3);
/// assert_eq!(stale.take(), 0, "taken once");
/// ```
#[derive(Debug, Default)]
pub struct Stale(std::sync::atomic::AtomicU64);

impl Stale {
    /// `n` more stale writes.
    pub fn add(&self, n: u64) {
        if n > 0 {
            self.0.fetch_add(n, std::sync::atomic::Ordering::Relaxed);
        }
    }

    /// The stale writes counted since the last take.
    pub fn take(&self) -> u64 {
        self.0.swap(0, std::sync::atomic::Ordering::Relaxed)
    }
}
