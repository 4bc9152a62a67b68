//! The loops that run flows: the engine's, the scheduler that moves cards on time, the
//! waiting flow instances', the cancel worker's and the CSV worker's.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use domain::card::CardService;
use domain::trigger::Engine;
use tokio::sync::Notify;

use super::pacing::{IsFull, Pacing};
use super::pauses::pause;
use super::stale_outcomes;
use super::supervisor::{reported, Supervisor};

const SCHEDULER_PERIOD: Duration = Duration::from_millis(500);
const SCHEDULER_BATCH: u32 = 500;

/// The engine's `engines` loops, each woken by a wake-up of its own (from `queued`) when
/// invocations are queued in this process, and the scheduler.
pub fn spawn(
    supervisor: &Supervisor,
    engine: Arc<Engine>,
    queued: impl Fn() -> Arc<Notify>,
    cards: Arc<CardService>,
    engines: usize,
) {
    for _ in 0..engines {
        let engine = engine.clone();
        run_counting_stale(supervisor, "engine", "invocation", queued(), move || {
            let engine = engine.clone();
            async move { (engine.step().await, engine.take_stale()) }
        });
    }
    spawn_scheduler(supervisor, cards);
}

/// The scheduler: moves the cards whose time has come, a batch at a time, again at once
/// while a batch is full.
fn spawn_scheduler(supervisor: &Supervisor, cards: Arc<CardService>) {
    let (loops, stopping) = (supervisor.loops.clone(), supervisor.stopping());
    supervisor.supervise("scheduler", move || {
        let (cards, loops, stopping) = (cards.clone(), loops.clone(), stopping.clone());
        async move {
            let mut pacing = Pacing::new("scheduler");
            while !stopping.is_cancelled() {
                let outcome = reported(&loops, "scheduler", cards.tick(SCHEDULER_BATCH)).await;
                if outcome.is_ok() {
                    pacing.ok();
                }
                match outcome {
                    Ok(moved) if moved >= SCHEDULER_BATCH as usize => continue,
                    Ok(_) => pause(&stopping, SCHEDULER_PERIOD).await,
                    Err(e) => pause(&stopping, pacing.failed(&e)).await,
                }
            }
        }
    });
}

/// The loop of waiting flow instances (contract §21): claims the due ones and runs them on;
/// woken at once when a card one of them listens to closes in this process, and otherwise
/// looking again within [`super::IDLE_MOST`], so a deadline is met within a second.
pub fn spawn_waits(
    supervisor: &Supervisor,
    waits: Arc<domain::trigger::waits::Waits>,
    queued: Arc<Notify>,
) {
    run_counting_stale(supervisor, "waits", "instance", queued, move || {
        let waits = waits.clone();
        async move {
            match waits.step().await {
                Ok(step) => (Ok(step.claimed > 0), step.stale),
                Err(e) => (Err(e), 0),
            }
        }
    });
}

/// The cancel worker: one task at a time, batch by batch; woken by tasks `queued` in this
/// process.
pub fn spawn_cancels(
    supervisor: &Supervisor,
    cancels: Arc<domain::cancel::CancelService>,
    queued: Arc<Notify>,
) {
    run_counting_stale(supervisor, "cancel", "cancel", queued, move || {
        let cancels = cancels.clone();
        async move { (cancels.step().await, cancels.take_stale()) }
    });
}

/// The CSV worker: hands uploaded rows to the engine, a step at a time; woken by uploads
/// finished (`queued`) in this process. A task waiting for a slot of its environment waits
/// for a poll, as work from another process does.
pub fn spawn_bulk(
    supervisor: &Supervisor,
    bulk: Arc<domain::bulk::BulkService>,
    queued: Arc<Notify>,
) {
    run_counting_stale(supervisor, "bulk", "csv", queued, move || {
        let bulk = bulk.clone();
        async move { (bulk.step().await, bulk.take_stale()) }
    });
}

/// A loop of `name` (see [`Supervisor::run_loop`]) whose `step` gives its outcome and how many
/// outcomes of `kind` it found stale (their claim had passed to another holder): counted
/// after each step.
fn run_counting_stale<F, Fut, E>(
    supervisor: &Supervisor,
    name: &'static str,
    kind: &'static str,
    queued: Arc<Notify>,
    step: F,
) where
    F: Fn() -> Fut + Send + Sync + 'static,
    Fut: Future<Output = (Result<bool, E>, u64)> + Send,
    E: std::fmt::Display + IsFull + Send,
{
    let metrics = supervisor.metrics.clone();
    metrics.stale_outcomes(kind, 0);
    supervisor.run_loop(name, queued, move || {
        let (work, metrics) = (step(), metrics.clone());
        async move {
            let (outcome, stale) = work.await;
            stale_outcomes(&metrics, kind, stale);
            outcome
        }
    });
}
