//! The loops that keep the storage in shape: SQLite's WAL checkpointer and the pruner of
//! history past its retention.

use std::sync::Arc;
use std::time::Duration;

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
/// Transactions of one step of the pruner (a pass with more goes on at once, in the next
/// step): a step stays far within the stall limit of `/readyz`.
const PRUNE_STEP_BATCHES: u32 = 20;

/// The pruner (contract §14): a pass every [`PRUNE_PERIOD`] on the process holding the
/// pruning lease; the rows removed counted in `workbench_pruned_rows_total{kind}`. A pass that
/// fails is logged and tried again at the next period.
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
            while !stopping.is_cancelled() {
                let step = pruner.step(false, Some(PRUNE_STEP_BATCHES));
                let began = std::time::Instant::now();
                let stepped = reported(&loops, "pruner", step).await;
                metrics.pruning(began.elapsed());
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
                        if done {
                            pause(&stopping, PRUNE_PERIOD).await;
                        }
                    }
                    Err(e) => pause(&stopping, pacing.failed(&e).max(PRUNE_PERIOD)).await,
                }
            }
        }
    });
}
