//! How long history is kept (contract §14): closed cards, final invocations, analytics events,
//! and webhook deliveries and push jobs in a final state, each for its own retention, or for
//! ever. What is removed is decided here, as cut-off times; the pruning itself is storage's.

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};

use async_trait::async_trait;
use chrono::Duration;

use crate::time::Clock;
use crate::{DomainError, StorageError, Timestamp};

/// The shortest retention: a minute.
pub const MIN_SECONDS: u64 = 60;
/// The longest retention: 100 years of 365 days.
pub const MAX_SECONDS: u64 = 100 * 365 * 86_400;
/// The default for all history: 365 days.
pub const DEFAULT: Retention = Retention::Kept {
    seconds: 365 * 86_400,
};

/// How long one kind of history is kept once it is final.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Retention {
    /// Kept for ever (`off`).
    Forever,
    /// Kept this many seconds, from [`MIN_SECONDS`] to [`MAX_SECONDS`].
    Kept {
        /// How long, in seconds.
        seconds: u64,
    },
}

impl Retention {
    /// `90m`, `12h`, `30d`, `2w`, `1y` (a year is 365 days), or `off`: a whole number and one
    /// unit, from a minute to 100 years. The error says what is accepted.
    pub fn parse(text: &str) -> Result<Self, String> {
        let text = text.trim();
        if text.eq_ignore_ascii_case("off") {
            return Ok(Retention::Forever);
        }
        let wrong = || {
            format!(
                "must be a duration from 1m to 100y such as `90m`, `12h` or `30d` (units m, h, d, \
                    w, y), or `off`; got `{text}`"
            )
        };
        let split = text.find(|c: char| !c.is_ascii_digit()).ok_or_else(wrong)?;
        let (number, unit) = text.split_at(split);
        // At most 10 digits: any more is out of range whatever the unit, and the product
        // below cannot overflow.
        if number.is_empty() || number.len() > 10 {
            return Err(wrong());
        }
        let number: u64 = number.parse().map_err(|_| wrong())?;
        let unit: u64 = match unit {
            "m" => 60,
            "h" => 3_600,
            "d" => 86_400,
            "w" => 7 * 86_400,
            "y" => 365 * 86_400,
            _ => return Err(wrong()),
        };
        let seconds = number.checked_mul(unit).ok_or_else(wrong)?;
        if !(MIN_SECONDS..=MAX_SECONDS).contains(&seconds) {
            return Err(wrong());
        }
        Ok(Retention::Kept { seconds })
    }

    /// The time before which what became final is removed at `now`; None when kept for ever
    /// (or when the cut-off would be before the earliest time there is).
    pub fn cutoff(self, now: Timestamp) -> Option<Timestamp> {
        match self {
            Retention::Forever => None,
            Retention::Kept { seconds } => {
                let seconds = i64::try_from(seconds).ok()?;
                now.checked_sub_signed(Duration::try_seconds(seconds)?)
            }
        }
    }
}

impl std::fmt::Display for Retention {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match *self {
            Retention::Forever => f.write_str("off"),
            Retention::Kept { seconds } if seconds % 86_400 == 0 => {
                write!(f, "{}d", seconds / 86_400)
            }
            Retention::Kept { seconds } if seconds % 3_600 == 0 => {
                write!(f, "{}h", seconds / 3_600)
            }
            Retention::Kept { seconds } => write!(f, "{}m", seconds / 60),
        }
    }
}

/// The retention of each kind of history (`WORKBENCH_RETENTION` and its per-kind overrides).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetentionPolicy {
    /// Closed card instances, after they closed (`WORKBENCH_RETENTION_CARDS`).
    pub cards: Retention,
    /// Final invocations, after they ended, with their CSV tasks and rows
    /// (`WORKBENCH_RETENTION_INVOCATIONS`).
    pub invocations: Retention,
    /// Analytics events, after they happened (`WORKBENCH_RETENTION_EVENTS`).
    pub events: Retention,
    /// Webhook deliveries and attempts, and push jobs, after they became final
    /// (`WORKBENCH_RETENTION_DELIVERIES`).
    pub deliveries: Retention,
}

impl Default for RetentionPolicy {
    fn default() -> Self {
        RetentionPolicy::all(DEFAULT)
    }
}

impl RetentionPolicy {
    /// Every kind kept for `retention`.
    pub fn all(retention: Retention) -> Self {
        RetentionPolicy {
            cards: retention,
            invocations: retention,
            events: retention,
            deliveries: retention,
        }
    }

    /// The cut-off times at `now` (the database's clock).
    pub fn cutoffs(&self, now: Timestamp) -> Cutoffs {
        Cutoffs {
            now,
            cards: self.cards.cutoff(now),
            invocations: self.invocations.cutoff(now),
            events: self.events.cutoff(now),
            deliveries: self.deliveries.cutoff(now),
        }
    }
}

/// What one pass of pruning removes: each kind's rows that became final before its time; a
/// kind kept for ever has none. `now` removes what is useless at once (expired access tokens,
/// the rows of finished CSV tasks).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cutoffs {
    /// The time of the pass, by the database's clock.
    pub now: Timestamp,
    /// Cards closed before this go.
    pub cards: Option<Timestamp>,
    /// Invocations that ended before this go.
    pub invocations: Option<Timestamp>,
    /// Events that happened before this go.
    pub events: Option<Timestamp>,
    /// Deliveries and push jobs final before this go.
    pub deliveries: Option<Timestamp>,
}

/// The kinds of rows a pass of pruning removes, each counted on its own
/// (`workbench_pruned_rows_total{kind}`, `workbench prune`'s JSON).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum PruneKind {
    /// Closed card instances.
    Cards,
    /// Analytics events.
    Events,
    /// Webhook deliveries in a final state.
    Deliveries,
    /// Webhook attempts, the log of deliveries and recoveries.
    Attempts,
    /// Push jobs in a final state.
    PushJobs,
    /// Final invocations, once none of their cards can still be cancelled (a cancel of their
    /// flow reaches its cards through them).
    Invocations,
    /// The rows of finished CSV tasks.
    BulkRows,
    /// Finished CSV tasks (once their rows are gone).
    BulkTasks,
    /// Expired access tokens.
    AccessTokens,
}

crate::spelling::spelled!(PruneKind {
    Cards => "cards",
    Events => "events",
    Deliveries => "deliveries",
    Attempts => "attempts",
    PushJobs => "push_jobs",
    Invocations => "invocations",
    BulkRows => "bulk_rows",
    BulkTasks => "bulk_tasks",
    AccessTokens => "access_tokens",
});

impl PruneKind {
    /// The time before which rows of this kind that became final are removed; None when the
    /// kind is kept for ever. Deliveries' attempts and push jobs follow the deliveries'
    /// retention; CSV tasks follow their invocations'; expired tokens and the rows of
    /// finished CSV tasks are useless at once.
    pub fn cutoff(self, cutoffs: &Cutoffs) -> Option<Timestamp> {
        match self {
            PruneKind::Cards => cutoffs.cards,
            PruneKind::Events => cutoffs.events,
            PruneKind::Deliveries | PruneKind::Attempts | PruneKind::PushJobs => cutoffs.deliveries,
            PruneKind::Invocations | PruneKind::BulkTasks => cutoffs.invocations,
            PruneKind::BulkRows | PruneKind::AccessTokens => Some(cutoffs.now),
        }
    }
}

/// Rows removed (or, in a dry run, that would be), per kind; every kind present.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PruneCounts(pub BTreeMap<PruneKind, u64>);

impl Default for PruneCounts {
    fn default() -> Self {
        PruneCounts(PruneKind::ALL.iter().map(|k| (*k, 0)).collect())
    }
}

impl PruneCounts {
    /// Adds `n` to `kind`.
    pub fn add(&mut self, kind: PruneKind, n: u64) {
        let count = self.0.entry(kind).or_insert(0);
        *count = count.saturating_add(n);
    }

    /// The count of `kind`.
    pub fn get(&self, kind: PruneKind) -> u64 {
        self.0.get(&kind).copied().unwrap_or(0)
    }

    /// All rows, every kind together.
    pub fn total(&self) -> u64 {
        self.0.values().fold(0u64, |a, n| a.saturating_add(*n))
    }
}

/// What one transaction of pruning did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PruneBatch {
    /// Rows removed (or found, in a dry run), per kind: a kind's rows may take rows of
    /// another kind that only they used with them.
    pub removed: Vec<(PruneKind, u64)>,
    /// Where the next batch of the kind starts; None when the kind is done for this pass.
    pub next: Option<String>,
}

/// The rows of each kind at most one transaction removes.
pub const BATCH_ROWS: u32 = 1_000;

/// Storage's side of pruning (a port): which rows are old is decided here, as cut-offs; which
/// rows a cut-off reaches, and what only they use, is storage's. A row of an open, embargoed
/// or snoozed card, a pending delivery or push job, or a pending or running invocation is
/// never removed, nor an event a pending delivery is still to be built from.
#[cfg_attr(feature = "mock", mockall::automock)]
#[async_trait]
pub trait PruneRepository: Send + Sync {
    /// Takes (or keeps) the pruning lease for `holder` until `until` when nobody else holds
    /// it at `now`; false when another holder does.
    async fn lease(
        &self,
        holder: &str,
        now: Timestamp,
        until: Timestamp,
    ) -> Result<bool, StorageError>;

    /// In one transaction, removes at most `limit` rows of `kind` final before `cutoff`,
    /// starting after `after` (the `next` of the batch before; None at first), with what only
    /// they use; `dry_run` removes nothing and counts what would go.
    async fn prune(
        &self,
        kind: PruneKind,
        cutoff: Timestamp,
        after: Option<String>,
        limit: u32,
        dry_run: bool,
    ) -> Result<PruneBatch, StorageError>;

    /// Gives the space freed back (SQLite's incremental vacuum); nothing where the database
    /// does it by itself.
    async fn compact(&self) -> Result<(), StorageError>;
}

/// A future that is pending once: the task lets others run between two transactions.
struct YieldNow(bool);

impl Future for YieldNow {
    type Output = ();
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if self.0 {
            return Poll::Ready(());
        }
        self.0 = true;
        cx.waker().wake_by_ref();
        Poll::Pending
    }
}

/// How long the pruning lease lasts, renewed at every transaction of a pass.
pub const LEASE_SECONDS: i64 = 300;

/// Prunes history by its retention (contract §14): one pass goes through every kind, a
/// transaction of at most [`BATCH_ROWS`] rows at a time, yielding between them.
pub struct Pruner {
    repo: Arc<dyn PruneRepository>,
    clock: Arc<dyn Clock>,
    policy: RetentionPolicy,
    holder: String,
    /// Where the last step stopped when it ran out of batches: the kind, and the `next` of its
    /// last batch. The next step goes on from there, not from the front, where rows kept (open
    /// cards, invocations kept for them) would be read again by every step of the pass.
    resume: Mutex<Option<(PruneKind, Option<String>)>>,
}

impl Pruner {
    /// A pruner over `repo` with `policy`, deciding on `clock` (the database's), holding the
    /// lease as `holder` (unique to the process).
    pub fn new(
        repo: Arc<dyn PruneRepository>,
        clock: Arc<dyn Clock>,
        policy: RetentionPolicy,
        holder: String,
    ) -> Self {
        Pruner {
            repo,
            clock,
            policy,
            holder,
            resume: Mutex::default(),
        }
    }

    /// The policy pruned by.
    pub fn policy(&self) -> RetentionPolicy {
        self.policy
    }

    fn lease_until(now: Timestamp) -> Timestamp {
        now.checked_add_signed(Duration::seconds(LEASE_SECONDS))
            .unwrap_or(now)
    }

    /// One whole pass, if this process holds (or takes) the lease: the rows removed, per
    /// kind; None when another process prunes. A dry run needs no lease and removes nothing.
    pub async fn pass(&self, dry_run: bool) -> Result<Option<PruneCounts>, DomainError> {
        Ok(self.step(dry_run, None).await?.map(|(counts, _)| counts))
    }

    /// [`Pruner::pass`], stopping after `batches` transactions when given (a background
    /// loop's step stays short): the rows removed, and whether the pass went to its end. A step
    /// after one that stopped goes on where it stopped.
    pub async fn step(
        &self,
        dry_run: bool,
        batches: Option<u32>,
    ) -> Result<Option<(PruneCounts, bool)>, DomainError> {
        let now = self.clock.now();
        if !dry_run && !self.hold_lease(now).await? {
            return Ok(None);
        }
        let cutoffs = self.policy.cutoffs(now);
        let mut counts = PruneCounts::default();
        let mut left = batches;
        let mut resume = self.take_resume(dry_run);
        let mut end = KindEnd::Done;
        for kind in PruneKind::ALL {
            let mut after = None;
            if let Some((at, next)) = &resume {
                // The kinds before were done by the steps before.
                if *at != kind {
                    continue;
                }
                after = next.clone();
                resume = None;
            }
            let Some(cutoff) = kind.cutoff(&cutoffs) else {
                continue;
            };
            let batches = Batches {
                kind,
                cutoff,
                dry_run,
            };
            end = self
                .prune_kind(&batches, after, &mut left, &mut counts)
                .await?;
            if !matches!(end, KindEnd::Done) {
                break;
            }
        }
        let done = matches!(end, KindEnd::Done);
        if !dry_run {
            let stopped = match end {
                KindEnd::OutOfBatches(kind, after) => Some((kind, after)),
                KindEnd::Done | KindEnd::LostLease => None,
            };
            self.finish(&counts, done, stopped).await?;
        }
        Ok(Some((counts, done)))
    }

    /// Takes or keeps the lease at `now`; false when another process holds it.
    async fn hold_lease(&self, now: Timestamp) -> Result<bool, StorageError> {
        self.repo
            .lease(&self.holder, now, Self::lease_until(now))
            .await
    }

    /// Where the step before stopped, taken; a dry run is one whole pass, apart from the steps
    /// of the pruning itself, so it starts at the front.
    fn take_resume(&self, dry_run: bool) -> Option<(PruneKind, Option<String>)> {
        match dry_run {
            true => None,
            false => self
                .resume
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .take(),
        }
    }

    /// The batches of one kind, starting after `after`, until the kind is done, `left` runs
    /// out or the lease is lost; what they removed is added to `counts`.
    async fn prune_kind(
        &self,
        batches: &Batches,
        mut after: Option<String>,
        left: &mut Option<u32>,
        counts: &mut PruneCounts,
    ) -> Result<KindEnd, DomainError> {
        let Batches {
            kind,
            cutoff,
            dry_run,
        } = *batches;
        loop {
            if *left == Some(0) {
                return Ok(KindEnd::OutOfBatches(kind, after));
            }
            *left = left.map(|n| n.saturating_sub(1));
            let batch = self
                .repo
                .prune(kind, cutoff, after, BATCH_ROWS, dry_run)
                .await?;
            for (k, n) in batch.removed {
                counts.add(k, n);
            }
            YieldNow(false).await;
            match batch.next {
                Some(next) => after = Some(next),
                None => return Ok(KindEnd::Done),
            }
            // Still ours? (A pass longer than the lease: another process may have taken it;
            // both pruning the same rows is harmless, but one is enough.)
            if !dry_run && !self.hold_lease(self.clock.now()).await? {
                return Ok(KindEnd::LostLease);
            }
        }
    }

    /// After a step that was not a dry run: remembers where it `stopped`, gives the space
    /// freed back, and lets the lease go when the pass is `done`.
    async fn finish(
        &self,
        counts: &PruneCounts,
        done: bool,
        stopped: Option<(PruneKind, Option<String>)>,
    ) -> Result<(), DomainError> {
        *self.resume.lock().unwrap_or_else(PoisonError::into_inner) = stopped;
        if counts.total() > 0 {
            self.repo.compact().await?;
        }
        if done {
            // Let go (a lease that ran out a second ago): the next pass may be any process's.
            let now = self.clock.now();
            let past = now.checked_sub_signed(Duration::seconds(1)).unwrap_or(now);
            self.repo.lease(&self.holder, now, past).await?;
        }
        Ok(())
    }
}

/// What the batches of one kind remove in a step.
#[derive(Clone, Copy)]
struct Batches {
    kind: PruneKind,
    cutoff: Timestamp,
    dry_run: bool,
}

/// How the batches of one kind ended.
enum KindEnd {
    /// None of the kind's rows are left to remove in this pass.
    Done,
    /// The step ran out of batches: the kind goes on after this `next`.
    OutOfBatches(PruneKind, Option<String>),
    /// Another process took the lease.
    LostLease,
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    use crate::time::MockClock;
    use std::sync::Mutex;

    fn noon() -> Timestamp {
        chrono::Utc
            .with_ymd_and_hms(2026, 11, 26, 12, 0, 0)
            .single()
            .expect("a time")
    }

    #[test]
    fn each_kind_follows_its_retention() {
        let now = noon();
        let policy = RetentionPolicy {
            cards: Retention::parse("1d").expect("accepted"),
            invocations: Retention::parse("2d").expect("accepted"),
            events: Retention::Forever,
            deliveries: Retention::parse("3d").expect("accepted"),
        };
        let c = policy.cutoffs(now);
        let days = |n| Some(now - Duration::days(n));
        assert_eq!(PruneKind::Cards.cutoff(&c), days(1));
        assert_eq!(PruneKind::Invocations.cutoff(&c), days(2));
        assert_eq!(PruneKind::BulkTasks.cutoff(&c), days(2));
        assert_eq!(PruneKind::Events.cutoff(&c), None);
        for k in [
            PruneKind::Deliveries,
            PruneKind::Attempts,
            PruneKind::PushJobs,
        ] {
            assert_eq!(k.cutoff(&c), days(3));
        }
        // Useless at once, whatever the retention.
        let forever = RetentionPolicy::all(Retention::Forever).cutoffs(now);
        assert_eq!(PruneKind::AccessTokens.cutoff(&forever), Some(now));
        assert_eq!(PruneKind::BulkRows.cutoff(&forever), Some(now));
        assert_eq!(PruneKind::Cards.cutoff(&forever), None);
        assert_eq!(PruneKind::parse("push_jobs"), Some(PruneKind::PushJobs));
        let counts = PruneCounts::default();
        assert_eq!(counts.0.len(), PruneKind::ALL.len());
        assert_eq!(counts.total(), 0);
    }

    fn clock() -> Arc<dyn Clock> {
        let mut clock = MockClock::new();
        clock.expect_now().returning(noon);
        Arc::new(clock)
    }

    /// What one `prune` call was asked: kind, cut-off, start, limit.
    type Asked = (PruneKind, Timestamp, Option<String>, u32);

    #[tokio::test]
    async fn a_pass_goes_batch_by_batch_through_every_kind_kept_for_a_time() {
        let mut repo = MockPruneRepository::new();
        repo.expect_lease().returning(|_, _, _| Ok(true));
        let seen: Arc<Mutex<Vec<Asked>>> = Arc::default();
        let log = seen.clone();
        repo.expect_prune()
            .returning(move |kind, cutoff, after, limit, dry_run| {
                assert!(!dry_run);
                log.lock()
                    .expect("lock")
                    .push((kind, cutoff, after.clone(), limit));
                // Cards take two batches.
                Ok(match (kind, after.as_deref()) {
                    (PruneKind::Cards, None) => PruneBatch {
                        removed: vec![(PruneKind::Cards, 1_000), (PruneKind::Attempts, 3)],
                        next: Some("crd_2".into()),
                    },
                    (PruneKind::Cards, Some(_)) => PruneBatch {
                        removed: vec![(PruneKind::Cards, 5)],
                        next: None,
                    },
                    (kind, _) => PruneBatch {
                        removed: vec![(kind, 1)],
                        next: None,
                    },
                })
            });
        repo.expect_compact().times(1).returning(|| Ok(()));
        let policy = RetentionPolicy {
            events: Retention::Forever,
            ..RetentionPolicy::all(Retention::parse("1h").expect("accepted"))
        };
        let pruner = Pruner::new(Arc::new(repo), clock(), policy, "p1".into());
        let counts = pruner.pass(false).await.expect("pass").expect("leased");
        assert_eq!(counts.get(PruneKind::Cards), 1_005);
        assert_eq!(counts.get(PruneKind::Attempts), 4);
        assert_eq!(counts.get(PruneKind::Events), 0);
        assert_eq!(counts.get(PruneKind::AccessTokens), 1);
        let seen = seen.lock().expect("lock");
        assert!(seen
            .iter()
            .all(|(k, _, _, limit)| *k != PruneKind::Events && *limit == BATCH_ROWS));
        assert_eq!(
            seen[0],
            (
                PruneKind::Cards,
                noon() - Duration::hours(1),
                None,
                BATCH_ROWS
            )
        );
        assert_eq!(seen[1].2.as_deref(), Some("crd_2"));
        let tokens = seen
            .iter()
            .find(|s| s.0 == PruneKind::AccessTokens)
            .expect("tokens");
        assert_eq!(tokens.1, noon());
    }

    #[tokio::test]
    async fn a_step_stops_after_its_batches_and_says_so() {
        let mut repo = MockPruneRepository::new();
        repo.expect_lease().returning(|_, _, _| Ok(true));
        repo.expect_prune().times(3).returning(|kind, _, _, _, _| {
            Ok(PruneBatch {
                removed: vec![(kind, 1_000)],
                next: Some("more".into()),
            })
        });
        repo.expect_compact().times(1).returning(|| Ok(()));
        let pruner = Pruner::new(
            Arc::new(repo),
            clock(),
            RetentionPolicy::default(),
            "p5".into(),
        );
        let (counts, done) = pruner
            .step(false, Some(3))
            .await
            .expect("step")
            .expect("leased");
        assert!(!done);
        assert_eq!(counts.get(PruneKind::Cards), 3_000);
    }

    #[tokio::test]
    async fn a_step_goes_on_where_the_step_before_stopped() {
        let mut repo = MockPruneRepository::new();
        repo.expect_lease().returning(|_, _, _| Ok(true));
        let seen: Arc<Mutex<Vec<Asked>>> = Arc::default();
        let log = seen.clone();
        repo.expect_prune()
            .returning(move |kind, cutoff, after, limit, _| {
                log.lock()
                    .expect("lock")
                    .push((kind, cutoff, after.clone(), limit));
                // Cards: three batches of rows kept (open cards), nothing removed.
                Ok(match (kind, after.as_deref()) {
                    (PruneKind::Cards, None) => PruneBatch {
                        removed: vec![(kind, 0)],
                        next: Some("crd_1".into()),
                    },
                    (PruneKind::Cards, Some("crd_1")) => PruneBatch {
                        removed: vec![(kind, 0)],
                        next: Some("crd_2".into()),
                    },
                    (kind, _) => PruneBatch {
                        removed: vec![(kind, 1)],
                        next: None,
                    },
                })
            });
        repo.expect_compact().returning(|| Ok(()));
        let pruner = Pruner::new(
            Arc::new(repo),
            clock(),
            RetentionPolicy::default(),
            "p6".into(),
        );
        let (_, done) = pruner
            .step(false, Some(2))
            .await
            .expect("step")
            .expect("leased");
        assert!(!done);
        let (counts, done) = pruner
            .step(false, None)
            .await
            .expect("step")
            .expect("leased");
        assert!(done);
        assert_eq!(counts.get(PruneKind::Cards), 1);
        // The next pass starts at the front.
        pruner
            .step(false, Some(1))
            .await
            .expect("step")
            .expect("leased");
        let cards: Vec<Option<String>> = seen
            .lock()
            .expect("lock")
            .iter()
            .filter(|s| s.0 == PruneKind::Cards)
            .map(|s| s.2.clone())
            .collect();
        let at = |s: &str| Some(s.to_owned());
        assert_eq!(cards, [None, at("crd_1"), at("crd_2"), None]);
    }

    #[tokio::test]
    async fn another_holder_of_the_lease_prunes_alone() {
        let mut repo = MockPruneRepository::new();
        repo.expect_lease().returning(|_, _, _| Ok(false));
        repo.expect_prune().never();
        repo.expect_compact().never();
        let pruner = Pruner::new(
            Arc::new(repo),
            clock(),
            RetentionPolicy::default(),
            "p2".into(),
        );
        assert_eq!(pruner.pass(false).await.expect("pass"), None);
    }

    #[tokio::test]
    async fn a_dry_run_takes_no_lease_and_gives_no_space_back() {
        let mut repo = MockPruneRepository::new();
        repo.expect_lease().never();
        repo.expect_compact().never();
        repo.expect_prune().returning(|kind, _, _, _, dry_run| {
            assert!(dry_run);
            Ok(PruneBatch {
                removed: vec![(kind, 2)],
                next: None,
            })
        });
        let pruner = Pruner::new(
            Arc::new(repo),
            clock(),
            RetentionPolicy::default(),
            "p3".into(),
        );
        let counts = pruner.pass(true).await.expect("pass").expect("counted");
        assert_eq!(counts.total(), 2 * PruneKind::ALL.len() as u64);
    }

    #[tokio::test]
    async fn a_failing_batch_fails_the_pass_visibly() {
        let mut repo = MockPruneRepository::new();
        repo.expect_lease().returning(|_, _, _| Ok(true));
        repo.expect_prune()
            .returning(|_, _, _, _, _| Err(StorageError::Unavailable("down".into())));
        let pruner = Pruner::new(
            Arc::new(repo),
            clock(),
            RetentionPolicy::default(),
            "p4".into(),
        );
        assert!(pruner.pass(false).await.is_err());
    }

    #[test]
    fn durations_and_off_are_read() {
        assert_eq!(Retention::parse("off"), Ok(Retention::Forever));
        assert_eq!(Retention::parse(" OFF "), Ok(Retention::Forever));
        assert_eq!(
            Retention::parse("90m"),
            Ok(Retention::Kept { seconds: 5_400 })
        );
        assert_eq!(
            Retention::parse("12h"),
            Ok(Retention::Kept { seconds: 43_200 })
        );
        assert_eq!(
            Retention::parse("30d"),
            Ok(Retention::Kept {
                seconds: 30 * 86_400
            })
        );
        assert_eq!(Retention::parse("1m"), Ok(Retention::Kept { seconds: 60 }));
        assert_eq!(
            Retention::parse("100y"),
            Ok(Retention::Kept {
                seconds: MAX_SECONDS
            })
        );
    }

    #[test]
    fn bad_and_out_of_range_durations_are_refused() {
        for bad in [
            "",
            "0m",
            "59s",
            "1s",
            "101y",
            "36501d",
            "d",
            "12",
            "1.5h",
            "-1d",
            "1 d",
            "1D",
            "99999999999999999999d",
            "1000000000y",
            "forever",
        ] {
            assert!(Retention::parse(bad).is_err(), "{bad:?} was accepted");
        }
        assert!(Retention::parse("0m")
            .expect_err("refused")
            .contains("1m to 100y"));
    }

    #[test]
    fn a_cutoff_is_the_retention_before_now() {
        let now = chrono::Utc
            .with_ymd_and_hms(2026, 11, 26, 12, 0, 0)
            .single()
            .expect("a time");
        assert_eq!(Retention::Forever.cutoff(now), None);
        assert_eq!(
            Retention::parse("12h").expect("accepted").cutoff(now),
            Some(
                chrono::Utc
                    .with_ymd_and_hms(2026, 11, 26, 0, 0, 0)
                    .single()
                    .expect("a time")
            )
        );
        // 100 years before the earliest time is no cut-off rather than an overflow.
        let early = chrono::DateTime::<chrono::Utc>::MIN_UTC;
        assert_eq!(
            Retention::parse("100y").expect("accepted").cutoff(early),
            None
        );
        let policy = RetentionPolicy {
            events: Retention::Forever,
            ..RetentionPolicy::all(Retention::parse("1m").expect("accepted"))
        };
        let cutoffs = policy.cutoffs(now);
        assert_eq!(cutoffs.events, None);
        assert_eq!(cutoffs.cards, Some(now - Duration::minutes(1)));
        assert_eq!(RetentionPolicy::default().cards, DEFAULT);
    }

    #[test]
    fn retentions_print_as_they_are_written() {
        for text in ["off", "365d", "12h", "90m"] {
            assert_eq!(Retention::parse(text).expect("accepted").to_string(), text);
        }
    }
}
