//! The loops that keep the storage in shape: SQLite's WAL checkpointer and the pruner of
//! history past its retention.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::pacing::{IsFull, Pacing};
use super::pauses::pause;
use super::supervisor::{reported, Supervisor};
use super::BACKOFF;

/// How often the SQLite checkpointer copies the WAL into the database file.
const CHECKPOINT_PERIOD: Duration = Duration::from_millis(100);

/// SQLite's checkpointer: copies committed pages from the WAL into the database file, so the
/// writers' commits do not (PostgreSQL checkpoints by itself; this is not started for it).
pub fn spawn_checkpointer(supervisor: &Supervisor, db: adapters_diesel::Database) {
    if db.backend() != adapters_diesel::Backend::Sqlite {
        return;
    }
    let stopping = supervisor.stopping();
    supervisor.supervise("checkpointer", move || {
        let (db, stopping) = (db.clone(), stopping.clone());
        async move {
            let mut pacing = Pacing::new("checkpointer");
            // A last checkpoint once the loops are to stop.
            let mut last = false;
            while !last {
                last = stopping.is_cancelled();
                match db.checkpoint().await {
                    Ok(_) => {
                        pacing.ok();
                        pause(&stopping, CHECKPOINT_PERIOD).await;
                    }
                    Err(e) if e.is_full() => pause(&stopping, pacing.failed(&e)).await,
                    Err(e) => {
                        tracing::warn!(error = %e, "WAL checkpoint failed");
                        pause(&stopping, BACKOFF).await;
                    }
                }
            }
        }
    });
}

/// How often the pruner looks for history past its retention.
const PRUNE_PERIOD: Duration = Duration::from_secs(30);
/// Transactions of one step of the pruner (a pass with more goes on in the next step): a step
/// stays far within the stall limit of `/readyz`.
const PRUNE_STEP_BATCHES: u32 = 20;

/// The share of the time the pruner's steps may take over a long backlog: their transactions
/// hold the writer, and new work always has the rest.
const PRUNE_SHARE: f64 = 0.5;
/// The pruner's time its steps may take at once beyond [`PRUNE_SHARE`], so that a pass of a
/// steady load (a few seconds every [`PRUNE_PERIOD`]) runs through without a pause.
const PRUNE_BURST: Duration = Duration::from_secs(15);

/// The pruner's budget of the writer's time: it earns [`PRUNE_SHARE`] of every second, up to
/// [`PRUNE_BURST`], and each step spends the time it took. Over any span of `t` seconds the
/// steps take at most `PRUNE_BURST + PRUNE_SHARE × t`, and the one step under way.
struct Budget {
    /// Seconds left to spend; below 0 after a step that overspent.
    left: f64,
    /// When it was last counted.
    at: Instant,
}

impl Budget {
    fn new(now: Instant) -> Self {
        Budget {
            left: PRUNE_BURST.as_secs_f64(),
            at: now,
        }
    }

    /// After a step from `began` to `ended`: the pause that earns back what it overspent (none
    /// while the budget holds).
    fn spend(&mut self, began: Instant, ended: Instant) -> Duration {
        let idle = began.saturating_duration_since(self.at).as_secs_f64();
        let took = ended.saturating_duration_since(began).as_secs_f64();
        let before = (self.left + idle * PRUNE_SHARE).min(PRUNE_BURST.as_secs_f64());
        self.left = before - took * (1.0 - PRUNE_SHARE);
        self.at = ended;
        if self.left >= 0.0 {
            return Duration::ZERO;
        }
        Duration::try_from_secs_f64(-self.left / PRUNE_SHARE).unwrap_or(PRUNE_PERIOD)
    }
}

/// The pruner (contract §14): a pass every [`PRUNE_PERIOD`] on the process holding the
/// pruning lease, in steps of [`PRUNE_STEP_BATCHES`] transactions, paused when they overspend
/// their [`Budget`]; the rows removed counted in `workbench_pruned_rows_total{kind}`. A pass
/// that fails is logged and tried again at the next period.
pub fn spawn_pruner(supervisor: &Supervisor, pruner: Arc<domain::retention::Pruner>) {
    let metrics = supervisor.metrics.clone();
    for kind in domain::retention::PruneKind::ALL {
        metrics.pruned(kind.as_str(), 0);
    }
    let (loops, stopping) = (supervisor.loops.clone(), supervisor.stopping());
    supervisor.supervise("pruner", move || {
        let (pruner, metrics, loops, stopping) = (
            pruner.clone(),
            metrics.clone(),
            loops.clone(),
            stopping.clone(),
        );
        async move {
            let mut pacing = Pacing::new("pruner");
            let mut budget = Budget::new(Instant::now());
            while !stopping.is_cancelled() {
                let step = pruner.step(false, Some(PRUNE_STEP_BATCHES));
                let began = Instant::now();
                let stepped = reported(&loops, "pruner", step).await;
                let took = began.elapsed();
                metrics.pruning(took);
                let owed = budget.spend(began, began + took);
                match stepped {
                    Ok(stepped) => {
                        pacing.ok();
                        let mut done = true;
                        if let Some((counts, finished)) = stepped {
                            done = finished;
                            for (kind, n) in &counts.0 {
                                metrics.pruned(kind.as_str(), *n);
                            }
                            if counts.total() > 0 {
                                tracing::info!(
                                    rows = counts.total(),
                                    "pruned history past its retention"
                                );
                            }
                        }
                        let rest = if done { owed.max(PRUNE_PERIOD) } else { owed };
                        if !rest.is_zero() {
                            pause(&stopping, rest).await;
                        }
                    }
                    Err(e) => {
                        let rest = pacing.failed(&e).max(PRUNE_PERIOD).max(owed);
                        pause(&stopping, rest).await;
                    }
                }
            }
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Steps of `took` one after the other, each followed by the pause its budget asks for:
    /// from the start they take at most the burst, the share of the span and the step under
    /// way; over a long backlog, the share.
    fn steps_take_their_share(took: Duration) {
        let start = Instant::now();
        let (mut budget, mut now, mut busy) = (Budget::new(start), start, Duration::ZERO);
        while busy < PRUNE_BURST * 40 {
            let began = now;
            now += took;
            busy += took;
            let span = now.duration_since(start).as_secs_f64();
            let most = (PRUNE_BURST + took).as_secs_f64() + PRUNE_SHARE * span + 1e-6;
            assert!(
                busy.as_secs_f64() <= most,
                "{took:?}: {busy:?} over {span} s"
            );
            now += budget.spend(began, now);
        }
        let share = busy.as_secs_f64() / now.duration_since(start).as_secs_f64();
        assert!(share <= PRUNE_SHARE + 0.03, "{took:?}: a share of {share}");
    }

    #[test]
    fn a_backlog_of_pruning_takes_half_of_the_writer_at_most() {
        for ms in [5, 250, 4_000, 60_000] {
            steps_take_their_share(Duration::from_millis(ms));
        }
    }

    /// Ten steps of 2 s from `from`, one after the other: none is paused.
    fn runs_through(budget: &mut Budget, from: Instant) {
        let step = Duration::from_secs(2);
        for n in 0..10 {
            let began = from + step * n;
            assert_eq!(
                budget.spend(began, began + step),
                Duration::ZERO,
                "step {n}"
            );
        }
    }

    #[test]
    fn a_pass_within_the_burst_runs_through() {
        let start = Instant::now();
        let mut budget = Budget::new(start);
        runs_through(&mut budget, start);
        // After a period's rest, a pass as long again runs through as well.
        runs_through(&mut budget, start + Duration::from_secs(20) + PRUNE_PERIOD);
    }
}
