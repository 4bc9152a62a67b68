//! Background work of `serve`: the engine that executes recorded invocations, the
//! scheduler that moves cards on time, webhook delivery and push sending. All keep their state in
//! the database, so stopping the process at any point (even `kill -9`) loses nothing: an
//! invocation's lease runs out and the next worker resumes it from its last saved batch.
//!
//! Every loop runs under a [`Supervisor`] (contract §10): a loop that dies (a panic that
//! escaped its unit) is started again after a back-off, counted in
//! `workbench_worker_restarts_total{worker}`, and each step it starts and ends is reported to
//! [`Loops`](domain::health::Loops), which `/readyz` reads for stalled loops.

use std::time::Duration;

use api_actix::Metrics;

mod deliveries;
mod flows;
mod pacing;
mod pauses;
mod pushes;
mod saver;
mod supervisor;
mod upkeep;

pub use deliveries::spawn_deliveries;
pub use flows::{spawn, spawn_bulk, spawn_cancels, spawn_waits};
pub use pushes::spawn_pushes;
pub use supervisor::Supervisor;
pub use upkeep::{spawn_checkpointer, spawn_pruner};

/// A loop's pause after a step that found nothing to do, at least.
const IDLE: Duration = Duration::from_millis(50);
/// A loop's longest pause while each step finds nothing to do. Work queued in this process
/// ends it once its least pause ([`IDLE`], the delivery loop's [`DELIVERY_IDLE`]) has passed;
/// work queued by other processes, and work that comes due with time (a retry, a lease run
/// out), waits for it (docs/operations.md, Background work).
const IDLE_MOST: Duration = Duration::from_millis(250);
/// Pause after a storage error, so a database outage is not hammered.
const BACKOFF: Duration = Duration::from_secs(1);
/// The delivery loop's pause after a claim that found nothing, at least; its longest is
/// [`IDLE_MOST`].
const DELIVERY_IDLE: Duration = Duration::from_millis(10);

/// `stale` outcomes of `kind` were not recorded: their lease had run out and another holder
/// took the work (contract §19). Logged and counted.
fn stale_outcomes(metrics: &Metrics, kind: &'static str, stale: u64) {
    if stale > 0 {
        tracing::warn!(
            kind,
            stale,
            "outcomes not recorded: their claims had passed to another holder"
        );
        metrics.stale_outcomes(kind, stale);
    }
}

#[cfg(test)]
mod tests;
