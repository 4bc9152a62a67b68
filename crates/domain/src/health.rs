//! Readiness: whatever the service depends on answers.

use async_trait::async_trait;

use crate::{StorageError, Timestamp};

/// Whether the database answers and is migrated, for `GET /readyz`, and what it holds and
/// how its connections are used, for `GET /metrics` (docs/operations.md, Endpoints for
/// operators, Metrics).
#[cfg_attr(feature = "mock", mockall::automock)]
#[async_trait]
pub trait HealthProbe: Send + Sync {
    /// Ok when the database is reachable and every migration is applied; otherwise an error
    /// (`Unavailable` for pending migrations), and `/readyz` answers 503 `not_ready`.
    async fn ready(&self) -> Result<(), StorageError>;

    /// The work waiting in each of the database's queues, read now, by the database's clock:
    /// one cheap query per queue, within a call's deadline. Read when `/metrics` is scraped,
    /// so nothing reads it while nobody looks.
    async fn backlog(&self) -> Result<Backlog, StorageError>;

    /// The connection pool as it is now, and the waits for its connections so far. Reads
    /// nothing from the database.
    fn pool(&self) -> Pool;
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
    /// Whether the database was last seen down by readiness, and when it was last seen
    /// answering again after that ([`Loops::database`]).
    database: std::sync::Mutex<(bool, Option<std::time::Instant>)>,
}

#[derive(Debug, Clone)]
struct LoopState {
    /// When each step now running began, by its token (several engine loops share a name).
    running: std::collections::BTreeMap<u64, std::time::Instant>,
    /// The first failure since the last good step.
    failing_since: Option<std::time::Instant>,
    /// The first failure for want of the database since the last good step.
    unavailable_since: Option<std::time::Instant>,
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
            unavailable_since: None,
            restarts: 0,
        })
    }

    /// The names of the loops that exist, in order.
    pub fn names(&self) -> Vec<&'static str> {
        self.with(|l| l.keys().copied().collect())
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
                s.unavailable_since = None;
            } else {
                s.failing_since.get_or_insert(now);
            }
        });
    }

    /// The step `token` of `name` failed because the database did not answer in time (a hang,
    /// a partition, a restart, or a query of its own too slow). While the database is down
    /// that is not the loop's failure: `/readyz` judges the database itself, and a loop that
    /// backs off for a while must not keep readiness down once the database answers again.
    /// Such failures count from when readiness last saw the database come back
    /// ([`Loops::database`]): a loop that still fails so 30 s later is stalled.
    pub fn ended_unavailable(&self, name: &'static str, token: u64, now: std::time::Instant) {
        self.with(|l| {
            let s = Self::state(l, name);
            s.running.remove(&token);
            s.unavailable_since.get_or_insert(now);
        });
    }

    /// Readiness asked the database at `now`, and it answered or not.
    pub fn database(&self, answers: bool, now: std::time::Instant) {
        let mut seen = self
            .database
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        match (answers, seen.0) {
            (false, _) => seen.0 = true,
            (true, true) => *seen = (false, Some(now)),
            (true, false) => {}
        }
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
        let back = self
            .database
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .1;
        self.with(|l| {
            l.iter()
                .filter(|(_, s)| {
                    let since = |t: Option<std::time::Instant>| {
                        t.is_some_and(|t| now.saturating_duration_since(t) >= STALL_AFTER)
                    };
                    let unavailable = s.unavailable_since.map(|t| back.map_or(t, |b| t.max(b)));
                    since(s.running.values().min().copied())
                        || since(s.failing_since)
                        || since(unavailable)
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
    fn failures_for_want_of_the_database_count_from_when_it_came_back() {
        let loops = Loops::default();
        let t0 = Instant::now();
        let at = |s: u64| t0 + Duration::from_secs(s);
        // A long outage that readiness sees: every step fails for want of the database.
        loops.database(false, at(1));
        for second in 0..90 {
            let step = loops.started("pruner", at(second));
            loops.ended_unavailable("pruner", step, at(second));
        }
        loops.database(false, at(89));
        // It answers again: the loop, backing off, is not stalled.
        loops.database(true, at(90));
        assert!(loops.stalled(at(91)).is_empty());
        assert!(loops.stalled(at(119)).is_empty());
        // Still failing so 30 s after the database came back: its own queries are too slow.
        assert_eq!(loops.stalled(at(120)), vec!["pruner"]);
        let step = loops.started("pruner", at(121));
        loops.ended("pruner", step, true, at(121));
        assert!(loops.stalled(at(122)).is_empty());
        // A failure of its own counts from when it began, whatever the database does.
        let step = loops.started("pruner", at(130));
        loops.ended("pruner", step, false, at(130));
        loops.database(false, at(131));
        loops.database(true, at(132));
        assert_eq!(loops.stalled(at(161)), vec!["pruner"]);
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

/// Work waiting in one of the database's queues (docs/operations.md, Metrics).
///
/// ```
/// use std::time::Duration;
/// use workbench_domain::chrono::{TimeZone, Utc};
/// use workbench_domain::health::Queue;
///
/// let now = Utc.with_ymd_and_hms(2026, 11, 22, 10, 0, 0).unwrap();
/// let late = Queue::at(3, Some(now - Duration::from_millis(2_500)), now);
/// assert_eq!(late.oldest_age, Duration::from_millis(2_500));
/// // Every item is due later (waiting for a retry, or in hand): none has waited.
/// let waiting = Queue::at(3, Some(now + Duration::from_secs(5)), now);
/// assert_eq!(waiting, Queue { pending: 3, oldest_age: Duration::ZERO });
/// assert_eq!(Queue::at(0, None, now), Queue::default());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Queue {
    /// Items not yet done: due, waiting for a retry, or in a worker's hands.
    pub pending: u64,
    /// How long the item that has waited longest has been due; zero when none is due.
    pub oldest_age: std::time::Duration,
}

impl Queue {
    /// `pending` items, of which the one due earliest was due at `oldest` (None when there
    /// are none), at `now`. An item due after `now` has not waited.
    pub fn at(pending: u64, oldest: Option<Timestamp>, now: Timestamp) -> Self {
        let oldest_age = oldest
            .and_then(|due| (now - due).to_std().ok())
            .unwrap_or_default();
        Self {
            pending,
            oldest_age,
        }
    }
}

/// The work waiting in the database ([`HealthProbe::backlog`]): a queue that grows, or whose
/// oldest item keeps ageing, is work the service is not keeping up with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Backlog {
    /// Invocations recorded and not yet run to the end (`pending` or `running`); their age
    /// counts from when they were recorded.
    pub invocations: Queue,
    /// Webhook deliveries not yet delivered, failed or cancelled; their age counts from when
    /// each became due (queued, or its retry's time came).
    pub webhook_deliveries: Queue,
    /// Pushes not yet sent or failed; their age counts as a delivery's.
    pub push_jobs: Queue,
}

/// The storage's connection pool as it is now ([`HealthProbe::pool`]).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Pool {
    /// Connections open and not in use.
    pub idle: u32,
    /// Connections in use.
    pub active: u32,
    /// How long calls waited for a connection, since the process started.
    pub waits: Histogram,
}

/// Durations counted into buckets, as a Prometheus histogram holds them.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Histogram {
    /// Each bucket's upper bound in seconds, ascending, with the observations at or under it
    /// (cumulative counts).
    pub buckets: Vec<(f64, u64)>,
    /// Observations in all.
    pub count: u64,
    /// Their sum, in seconds.
    pub sum: f64,
}

/// A histogram of durations in atomic counters: observed by whoever measures (the storage
/// adapter, each wait for a connection), taken as a [`Histogram`] by whoever reports it, with
/// no lock between them.
///
/// ```
/// use std::time::Duration;
/// use workbench_domain::health::Durations;
///
/// let waits = Durations::new(&[0.001, 0.1, 1.0]);
/// waits.observe(Duration::from_micros(200));
/// waits.observe(Duration::from_millis(50));
/// waits.observe(Duration::from_secs(3));
/// let taken = waits.snapshot();
/// assert_eq!(taken.buckets, vec![(0.001, 1), (0.1, 2), (1.0, 2)]);
/// assert_eq!(taken.count, 3);
/// assert!((taken.sum - 3.0502).abs() < 1e-9);
/// ```
#[derive(Debug)]
pub struct Durations {
    bounds: &'static [f64],
    /// Observations per bucket, not cumulative; the last counts those above every bound.
    counts: Vec<std::sync::atomic::AtomicU64>,
    /// The sum of the observations, in nanoseconds.
    sum_nanos: std::sync::atomic::AtomicU64,
}

impl Durations {
    const ORDER: std::sync::atomic::Ordering = std::sync::atomic::Ordering::Relaxed;

    /// Buckets with these upper bounds, in seconds, ascending.
    pub fn new(bounds: &'static [f64]) -> Self {
        Self {
            bounds,
            counts: (0..=bounds.len())
                .map(|_| std::sync::atomic::AtomicU64::new(0))
                .collect(),
            sum_nanos: std::sync::atomic::AtomicU64::new(0),
        }
    }

    /// One more observation.
    pub fn observe(&self, duration: std::time::Duration) {
        let seconds = duration.as_secs_f64();
        let bucket = self
            .bounds
            .iter()
            .position(|bound| seconds <= *bound)
            .unwrap_or(self.bounds.len());
        self.counts[bucket].fetch_add(1, Self::ORDER);
        let nanos = u64::try_from(duration.as_nanos()).unwrap_or(u64::MAX);
        self.sum_nanos.fetch_add(nanos, Self::ORDER);
    }

    /// The observations so far. Taken while others observe, the counts may be a moment
    /// apart from each other and from the sum, as any scrape of a live histogram is.
    pub fn snapshot(&self) -> Histogram {
        let mut cumulative = 0;
        let buckets = self
            .bounds
            .iter()
            .zip(&self.counts)
            .map(|(bound, count)| {
                cumulative += count.load(Self::ORDER);
                (*bound, cumulative)
            })
            .collect();
        let above = self.counts[self.bounds.len()].load(Self::ORDER);
        Histogram {
            buckets,
            count: cumulative + above,
            sum: self.sum_nanos.load(Self::ORDER) as f64 / 1e9,
        }
    }
}

#[cfg(test)]
mod metrics_tests {
    use super::*;
    use chrono::{TimeZone, Utc};
    use std::time::Duration;

    #[test]
    fn an_empty_queue_and_one_due_later_have_waited_nothing() {
        let now = Utc
            .with_ymd_and_hms(2026, 11, 22, 10, 0, 0)
            .single()
            .expect("time");
        assert_eq!(Queue::at(0, None, now), Queue::default());
        let later = Queue::at(7, Some(now + chrono::Duration::hours(2)), now);
        assert_eq!((later.pending, later.oldest_age), (7, Duration::ZERO));
        let due = Queue::at(1, Some(now - chrono::Duration::milliseconds(1_250)), now);
        assert_eq!(due.oldest_age, Duration::from_millis(1_250));
    }

    #[test]
    fn durations_past_every_bound_count_in_all_but_no_bucket() {
        let waits = Durations::new(&[0.01, 1.0]);
        waits.observe(Duration::from_secs(30));
        waits.observe(Duration::ZERO);
        waits.observe(Duration::from_millis(10));
        let taken = waits.snapshot();
        assert_eq!(taken.buckets, vec![(0.01, 2), (1.0, 2)]);
        assert_eq!(taken.count, 3);
        assert!((taken.sum - 30.01).abs() < 1e-9, "{}", taken.sum);
    }
}
