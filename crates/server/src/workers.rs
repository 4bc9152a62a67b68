//! Background work of `serve`: the engine that executes recorded invocations, the
//! scheduler that moves cards on time, webhook delivery and push sending. All keep their state in
//! the database, so stopping the process at any point (even `kill -9`) loses nothing: an
//! invocation's lease runs out and the next worker resumes it from its last saved batch.
//!
//! Every loop runs under a [`Supervisor`] (contract §10): a loop that dies (a panic that
//! escaped its unit) is started again after a back-off, counted in
//! `workbench_worker_restarts_total{worker}`, and each step it starts and ends is reported to
//! [`Loops`], which `/readyz` reads for stalled loops.

use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use api_actix::Metrics;
use domain::card::CardService;
use domain::health::Loops;
use domain::push::{PushRecord, PushService};
use domain::trigger::Engine;
use domain::unit::Unexpected;
use domain::webhook::{AttemptRecord, DeliveryService};
use domain::StorageError;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

mod pauses;
mod pushes;
use pauses::{pause, pause_until_freed, Idle};
pub use pushes::spawn_pushes;

/// A loop's pause after a step that found nothing to do, at least.
const IDLE: Duration = Duration::from_millis(50);
/// A loop's longest pause while each step finds nothing to do. Work queued in this process
/// ends it once its least pause ([`IDLE`], the delivery loop's [`DELIVERY_IDLE`]) has passed;
/// work queued by other processes, and work that comes due with time (a retry, a lease run
/// out), waits for it (docs/operations.md, Background work).
const IDLE_MOST: Duration = Duration::from_millis(250);
/// Pause after a storage error, so a database outage is not hammered.
const BACKOFF: Duration = Duration::from_secs(1);
const SCHEDULER_PERIOD: Duration = Duration::from_millis(500);
const SCHEDULER_BATCH: u32 = 500;
/// The first pause before a dead loop is started again; doubled after each death, up to
/// [`RESTART_MAX`], and back to this after a loop has run for [`RESTART_RESET`].
const RESTART_FIRST: Duration = Duration::from_secs(1);
const RESTART_MAX: Duration = Duration::from_secs(30);
const RESTART_RESET: Duration = Duration::from_secs(60);

/// Starts loops, starts them again when they die, and reports their steps. On shutdown
/// ([`Supervisor::stop`]) the loops stop taking work, finish what they hold, and end.
#[derive(Clone)]
pub struct Supervisor {
    loops: Arc<Loops>,
    metrics: Metrics,
    stopping: CancellationToken,
    tracker: TaskTracker,
}

impl Supervisor {
    pub fn new(loops: Arc<Loops>, metrics: Metrics) -> Self {
        Self {
            loops,
            metrics,
            stopping: CancellationToken::new(),
            tracker: TaskTracker::new(),
        }
    }

    /// Cancelled when the loops are to stop: a loop checks it between steps, and its pauses
    /// end early.
    pub fn stopping(&self) -> CancellationToken {
        self.stopping.clone()
    }

    /// Stops the loops (contract §17): each finishes the step it is in (an engine step saves
    /// its batch and releases its claim; webhook and push calls in flight finish and their
    /// outcomes are saved), takes no more work, and ends. Waits up to `within`; true when
    /// every loop ended in time.
    pub async fn stop(&self, within: Duration) -> bool {
        self.stopping.cancel();
        self.tracker.close();
        tokio::time::timeout(within, self.tracker.wait())
            .await
            .is_ok()
    }

    /// Runs the loop `make` builds, under `name`; when it ends before the supervisor stops
    /// (it panicked: a loop never returns by itself), it is counted, logged and built again
    /// after a back-off. [`Supervisor::stop`] waits for it.
    pub fn supervise<F, Fut>(&self, name: &'static str, make: F)
    where
        F: Fn() -> Fut + Send + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        let task = self.restarting(name, make);
        self.tracker.spawn(task);
    }

    /// [`Supervisor::supervise`] for a loop that serves others to their end (an outcome
    /// saver): [`Supervisor::stop`] does not wait for it, it ends with the process.
    pub fn supervise_serving<F, Fut>(&self, name: &'static str, make: F)
    where
        F: Fn() -> Fut + Send + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        tokio::spawn(self.restarting(name, make));
    }

    fn restarting<F, Fut>(&self, name: &'static str, make: F) -> impl Future<Output = ()> + Send
    where
        F: Fn() -> Fut + Send + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        self.loops.register(name);
        self.metrics.worker_restarted(name, 0);
        let this = self.clone();
        async move {
            let mut pause = RESTART_FIRST;
            loop {
                let began = Instant::now();
                let cause = match tokio::spawn(make()).await {
                    Ok(()) if this.stopping.is_cancelled() => {
                        return;
                    }
                    Ok(()) => "the loop returned".to_owned(),
                    // The runtime is shutting down.
                    Err(e) if e.is_cancelled() => return,
                    Err(e) => match e.try_into_panic() {
                        Ok(payload) => domain::unit::panic_text(&*payload),
                        Err(e) => e.to_string(),
                    },
                };
                if began.elapsed() >= RESTART_RESET {
                    pause = RESTART_FIRST;
                }
                if this.stopping.is_cancelled() {
                    tracing::error!(worker = name, %cause, "a background loop died while stopping");
                    return;
                }
                this.loops.restarted(name, Instant::now());
                this.metrics.worker_restarted(name, 1);
                tracing::error!(worker = name, %cause, restart_in = ?pause,
                    "a background loop died; starting it again");
                tokio::select! {
                    () = tokio::time::sleep(pause) => {}
                    () = this.stopping.cancelled() => return,
                }
                pause = (pause * 2).min(RESTART_MAX);
            }
        }
    }

    /// Runs `step` forever under `name`: again at once after work, after an [`Idle`] pause
    /// from [`IDLE`] up to [`IDLE_MOST`] when there was none (ended by `queued` once its least
    /// has passed), after [`BACKOFF`] when it failed.
    pub fn run_loop<F, Fut, E>(&self, name: &'static str, queued: Arc<Notify>, step: F)
    where
        F: Fn() -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<bool, E>> + Send,
        E: std::fmt::Display + IsFull + Send,
    {
        let step = Arc::new(step);
        let (loops, stopping) = (self.loops.clone(), self.stopping.clone());
        self.supervise(name, move || {
            let (step, loops, stopping, queued) = (
                step.clone(),
                loops.clone(),
                stopping.clone(),
                queued.clone(),
            );
            async move {
                let mut pacing = Pacing::new(name);
                let mut idle = Idle::new(IDLE, IDLE_MOST);
                while !stopping.is_cancelled() {
                    let outcome = reported(&loops, name, step()).await;
                    if outcome.is_ok() {
                        pacing.ok();
                    }
                    match outcome {
                        Ok(true) => idle.worked(),
                        Ok(false) => idle.pause(&stopping, &queued, None).await,
                        Err(e) => pause(&stopping, pacing.failed(&e)).await,
                    }
                }
            }
        });
    }
}

/// Whether an error is the disk's lack of room (contract §18), which a loop waits out quietly.
pub trait IsFull {
    fn is_full(&self) -> bool;
    /// The database did not answer (a hang, a partition, a restart): not the loop's fault.
    fn is_unavailable(&self) -> bool;
}

impl IsFull for StorageError {
    fn is_full(&self) -> bool {
        matches!(self, StorageError::Full(_))
    }

    fn is_unavailable(&self) -> bool {
        matches!(self, StorageError::Unavailable(_))
    }
}

impl IsFull for domain::DomainError {
    fn is_full(&self) -> bool {
        matches!(self, domain::DomainError::Storage(StorageError::Full(_)))
    }

    fn is_unavailable(&self) -> bool {
        matches!(
            self,
            domain::DomainError::Storage(StorageError::Unavailable(_))
        )
    }
}

/// The pause after the first step that failed for lack of space; doubled while it lasts, up
/// to [`FULL_PAUSE_MAX`].
const FULL_PAUSE_FIRST: Duration = Duration::from_secs(1);
const FULL_PAUSE_MAX: Duration = Duration::from_secs(30);
/// While storage stays full, one summary line this often.
const FULL_SUMMARY: Duration = Duration::from_secs(60);

/// How a loop waits after a failed step. A storage error backs off [`BACKOFF`], logged each
/// time. A full disk backs off doubling from [`FULL_PAUSE_FIRST`] to [`FULL_PAUSE_MAX`], with
/// one WARN when it starts, one summary a minute while it lasts and one INFO when it ends,
/// never a line per retry (contract §18).
struct Pacing {
    name: &'static str,
    full_since: Option<Instant>,
    summary_at: Instant,
    failures: u64,
    pause: Duration,
}

impl Pacing {
    fn new(name: &'static str) -> Self {
        Self {
            name,
            full_since: None,
            summary_at: Instant::now(),
            failures: 0,
            pause: FULL_PAUSE_FIRST,
        }
    }

    /// A step succeeded.
    fn ok(&mut self) {
        if let Some(since) = self.full_since.take() {
            tracing::info!(worker = self.name, lasted = ?since.elapsed(),
                "storage has room again; the loop goes on");
            self.pause = FULL_PAUSE_FIRST;
        }
    }

    /// A step failed with `error`: how long to wait before the next.
    fn failed(&mut self, error: &(impl std::fmt::Display + IsFull)) -> Duration {
        if !error.is_full() {
            tracing::error!(worker = self.name, error = %error, "background step failed");
            return BACKOFF;
        }
        let now = Instant::now();
        self.failures += 1;
        match self.full_since {
            None => {
                self.full_since = Some(now);
                self.summary_at = now;
                self.failures = 1;
                self.pause = FULL_PAUSE_FIRST;
                tracing::warn!(worker = self.name, error = %error,
                    "storage full: the loop backs off until space returns");
            }
            Some(since) => {
                self.pause = (self.pause * 2).min(FULL_PAUSE_MAX);
                if now.duration_since(self.summary_at) >= FULL_SUMMARY {
                    tracing::warn!(worker = self.name, failures = self.failures,
                        lasted = ?since.elapsed(), "storage still full");
                    self.summary_at = now;
                    self.failures = 0;
                }
            }
        }
        self.pause
    }
}

/// `work`, one step of `name`, reported to `loops` as it starts and ends.
/// A step that failed because the database did not answer is not the loop's failure
/// ([`Loops::ended_unavailable`]): `/readyz` follows the database as soon as it answers.
async fn reported<T, E: IsFull>(
    loops: &Loops,
    name: &'static str,
    work: impl Future<Output = Result<T, E>>,
) -> Result<T, E> {
    let step = loops.started(name, Instant::now());
    let outcome = work.await;
    match &outcome {
        Err(e) if e.is_unavailable() => loops.ended_unavailable(name, step, Instant::now()),
        _ => loops.ended(name, step, outcome.is_ok(), Instant::now()),
    }
    outcome
}

/// The engine's `engines` loops, each woken by a wake-up of its own (from `queued`) when
/// invocations are queued in this process, and the scheduler.
pub fn spawn(
    supervisor: &Supervisor,
    engine: Arc<Engine>,
    queued: impl Fn() -> Arc<Notify>,
    cards: Arc<CardService>,
    engines: usize,
) {
    supervisor.metrics.stale_outcomes("invocation", 0);
    for _ in 0..engines {
        let (engine, metrics) = (engine.clone(), supervisor.metrics.clone());
        supervisor.run_loop("engine", queued(), move || {
            let (engine, metrics) = (engine.clone(), metrics.clone());
            async move {
                let outcome = engine.step().await;
                stale_outcomes(&metrics, "invocation", engine.take_stale());
                outcome
            }
        });
    }
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
/// looking again within [`IDLE_MOST`], so a deadline is met within a second.
pub fn spawn_waits(
    supervisor: &Supervisor,
    waits: Arc<domain::trigger::waits::Waits>,
    queued: Arc<Notify>,
) {
    let metrics = supervisor.metrics.clone();
    metrics.stale_outcomes("instance", 0);
    supervisor.run_loop("waits", queued, move || {
        let (waits, metrics) = (waits.clone(), metrics.clone());
        async move {
            let step = waits.step().await?;
            stale_outcomes(&metrics, "instance", step.stale);
            Ok::<_, domain::StorageError>(step.claimed > 0)
        }
    });
}

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

/// The cancel worker: one task at a time, batch by batch; woken by tasks `queued` in this
/// process.
pub fn spawn_cancels(
    supervisor: &Supervisor,
    cancels: Arc<domain::cancel::CancelService>,
    queued: Arc<Notify>,
) {
    let metrics = supervisor.metrics.clone();
    metrics.stale_outcomes("cancel", 0);
    supervisor.run_loop("cancel", queued, move || {
        let (cancels, metrics) = (cancels.clone(), metrics.clone());
        async move {
            let outcome = cancels.step().await;
            stale_outcomes(&metrics, "cancel", cancels.take_stale());
            outcome
        }
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
    let metrics = supervisor.metrics.clone();
    metrics.stale_outcomes("csv", 0);
    supervisor.run_loop("bulk", queued, move || {
        let (bulk, metrics) = (bulk.clone(), metrics.clone());
        async move {
            let outcome = bulk.step().await;
            stale_outcomes(&metrics, "csv", bulk.take_stale());
            outcome
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
                match reported(&loops, "pruner", step).await {
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

/// At most this many deliveries claimed by this process and not yet saved (in a call, or
/// waiting for the saver), in all.
const MAX_UNSAVED: usize = 1_024;
/// Outcomes saved per transaction, at most.
const RECORD_BATCH: usize = 1_000;
/// The delivery loop's pause after a claim that found nothing, at least; its longest is
/// [`IDLE_MOST`].
const DELIVERY_IDLE: Duration = Duration::from_millis(10);

/// Webhook delivery: one loop claims due deliveries (per subscription at most `per_endpoint`
/// calls in flight, so a slow endpoint cannot take the slots of healthy ones), each call runs in
/// its own task, and one loop saves outcomes in batches. A call's slot is free as soon as the
/// call ends: its delivery stays leased until its outcome is saved, so no claim takes it again
/// meanwhile, and the time a save waits for the disk is not spent holding an endpoint's slot.
/// The one exception is a call whose answer disables the subscription (410 Gone): its slot is
/// freed once that is saved, so that no more calls are claimed for the subscription meanwhile.
/// `lease` must outlast a call (15 s) and the saving of its outcome; a lease that runs out (the
/// process died) makes the delivery due again.
pub fn spawn_deliveries(
    supervisor: &Supervisor,
    service: Arc<DeliveryService>,
    queued: Arc<Notify>,
    per_endpoint: u32,
    lease: chrono::Duration,
) {
    // Calls in flight per subscription, and deliveries claimed but not yet saved in all.
    let in_flight: Arc<Mutex<HashMap<String, u32>>> = Arc::default();
    let unsaved = Arc::new(AtomicUsize::new(0));
    let per_claim = (per_endpoint / 2).max(1);
    let recorder = service.clone();
    let (saving, counts) = (unsaved.clone(), in_flight.clone());
    let metrics = supervisor.metrics.clone();
    metrics.stale_outcomes("webhook", 0);
    let (done, freed) = spawn_saver(
        supervisor,
        "webhook-saver",
        move |batch: Vec<AttemptRecord>| {
            let (recorder, metrics) = (recorder.clone(), metrics.clone());
            async move {
                let stale = recorder.record(batch).await?;
                stale_outcomes(&metrics, "webhook", stale);
                Ok(())
            }
        },
        move |batch: &[AttemptRecord]| {
            for r in batch.iter().filter(|r| r.disables_subscription()) {
                // The saver wakes the claim loop after this.
                call_ended(&counts, &r.subscription_id, per_claim, per_endpoint);
            }
            saving.fetch_sub(batch.len(), Ordering::AcqRel);
        },
    );
    let (loops, stopping) = (supervisor.loops.clone(), supervisor.stopping());
    let attempts = supervisor.metrics.clone();
    supervisor.supervise("webhook", move || {
        let (service, done, freed, in_flight, unsaved, loops, stopping, attempts, queued) = (
            service.clone(),
            done.clone(),
            freed.clone(),
            in_flight.clone(),
            unsaved.clone(),
            loops.clone(),
            stopping.clone(),
            attempts.clone(),
            queued.clone(),
        );
        async move {
            let mut pacing = Pacing::new("webhook");
            let mut idle = Idle::new(DELIVERY_IDLE, IDLE_MOST);
            loop {
                if stopping.is_cancelled() {
                    // Claims no more; the calls in flight finish and their outcomes are saved
                    // (or given up, their deliveries due again when their leases end) before
                    // this loop ends.
                    while unsaved.load(Ordering::Acquire) > 0 {
                        tokio::time::sleep(DELIVERY_IDLE).await;
                    }
                    return;
                }
                let exclude: Vec<String> = lock(&in_flight)
                    .iter()
                    .filter(|(_, n)| **n + per_claim > per_endpoint)
                    .map(|(id, _)| id.clone())
                    .collect();
                let room = MAX_UNSAVED.saturating_sub(unsaved.load(Ordering::Acquire));
                if room == 0 {
                    pause_until_freed(&stopping, &freed, DELIVERY_IDLE).await;
                    continue;
                }
                let claimed = service.claim(
                    per_claim,
                    exclude,
                    u32::try_from(room).unwrap_or(u32::MAX),
                    lease,
                );
                let claimed = reported(&loops, "webhook", claimed).await;
                if claimed.is_ok() {
                    pacing.ok();
                }
                match claimed {
                    // Nothing due, or every subscription with work at its limit: the next
                    // claim comes after a poll's pause, or as soon as a call brings its
                    // subscription back within its threshold or a batch of outcomes is saved
                    // (the drain of a backlog waited a poll for each round of calls).
                    Ok(jobs) if jobs.is_empty() => {
                        // Calls in flight or outcomes not yet saved: the loop is not idle, and
                        // pauses as it did before it backed off (a backlog drained more slowly
                        // on SQLite when it backed off between rounds of calls).
                        if unsaved.load(Ordering::Acquire) > 0 {
                            idle.worked();
                        }
                        idle.pause(&stopping, &queued, Some(&freed)).await;
                    }
                    Ok(jobs) => {
                        idle.worked();
                        unsaved.fetch_add(jobs.len(), Ordering::AcqRel);
                        let mut counts = lock(&in_flight);
                        for job in jobs {
                            let subscription: String = job.subscription.id.clone().into();
                            *counts.entry(subscription.clone()).or_default() += 1;
                            let (service, done, attempts, in_flight, freed) = (
                                service.clone(),
                                done.clone(),
                                attempts.clone(),
                                in_flight.clone(),
                                freed.clone(),
                            );
                            // `attempt` never fails and catches a panic of its own
                            // (contract §10), so every claimed job sends an outcome.
                            tokio::spawn(async move {
                                let started = Instant::now();
                                let record = service.attempt(job).await;
                                attempts.webhook_attempt(record.outcome.kind(), started.elapsed());
                                let held = record.disables_subscription();
                                let _ = done.send(record);
                                if !held
                                    && call_ended(
                                        &in_flight,
                                        &subscription,
                                        per_claim,
                                        per_endpoint,
                                    )
                                {
                                    freed.notify_one();
                                }
                            });
                        }
                    }
                    Err(e) => pause(&stopping, pacing.failed(&e)).await,
                }
            }
        }
    });
}

/// Frees the slot of a call to `subscription` that has ended, and returns whether the
/// subscription has just come back within its claiming threshold (room for a claim of
/// `per_claim`), so that the claim loop should look again now rather than after its pause.
fn call_ended(
    in_flight: &Mutex<HashMap<String, u32>>,
    subscription: &str,
    per_claim: u32,
    per_endpoint: u32,
) -> bool {
    let mut counts = lock(in_flight);
    let Some(n) = counts.get_mut(subscription) else {
        return false;
    };
    let was_excluded = *n + per_claim > per_endpoint;
    *n = n.saturating_sub(1);
    let now_claimable = *n + per_claim <= per_endpoint;
    if *n == 0 {
        counts.remove(subscription);
    }
    was_excluded && now_claimable
}

/// Saves outcomes sent to the returned channel, in batches of at most [`RECORD_BATCH`], and
/// calls `saved` with each batch once it is stored, then notifies the returned [`Notify`]: there
/// is room for more claims. A save that fails for an unreachable database is tried
/// again: until saved, the leases keep these jobs from being attempted again by this process,
/// and if it dies they are attempted again (at least once). A save that fails unexpectedly (a
/// row the database refuses) is tried one outcome at a time, so that one bad outcome is dropped
/// alone after [`domain::unit::ATTEMPTS`], logged with an `errorId`: its job is attempted again
/// when its lease runs out.
fn spawn_saver<R, F, Fut>(
    supervisor: &Supervisor,
    name: &'static str,
    save: F,
    saved: impl Fn(&[R]) + Send + Sync + 'static,
) -> (tokio::sync::mpsc::UnboundedSender<R>, Arc<Notify>)
where
    R: Clone + Send + Sync + 'static,
    F: Fn(Vec<R>) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<(), StorageError>> + Send,
{
    let (done, outcomes) = tokio::sync::mpsc::unbounded_channel::<R>();
    // Kept outside the loop, so that a loop started again goes on with the same channel.
    let outcomes = Arc::new(tokio::sync::Mutex::new(outcomes));
    let (save, saved) = (Arc::new(save), Arc::new(saved));
    let freed = Arc::new(Notify::new());
    let loops = supervisor.loops.clone();
    // It serves the claim loops to their end: they wait for their outcomes to be saved.
    let wake = freed.clone();
    supervisor.supervise_serving(name, move || {
        let (outcomes, save, saved, loops, wake) = (
            outcomes.clone(),
            save.clone(),
            saved.clone(),
            loops.clone(),
            wake.clone(),
        );
        async move {
            let mut outcomes = outcomes.lock().await;
            while let Some(first) = outcomes.recv().await {
                let mut batch = vec![first];
                while batch.len() < RECORD_BATCH {
                    match outcomes.try_recv() {
                        Ok(r) => batch.push(r),
                        Err(_) => break,
                    }
                }
                let stored = save_apart(&loops, name, &*save, batch).await;
                saved(&stored);
                wake.notify_one();
            }
        }
    });
    (done, freed)
}

/// Saves `batch` (see [`spawn_saver`]); returns what is no longer in flight: the outcomes
/// stored and those dropped.
async fn save_apart<R, F, Fut>(loops: &Loops, name: &'static str, save: &F, batch: Vec<R>) -> Vec<R>
where
    R: Clone,
    F: Fn(Vec<R>) -> Fut,
    Fut: Future<Output = Result<(), StorageError>>,
{
    let mut pacing = Pacing::new(name);
    loop {
        match reported(loops, name, save(batch.clone())).await {
            Ok(()) => {
                pacing.ok();
                return batch;
            }
            Err(e) if e.is_unexpected() => {
                tracing::warn!(worker = name, error = %e, outcomes = batch.len(),
                    "cannot save outcomes; saving them one by one");
                break;
            }
            Err(e) => tokio::time::sleep(pacing.failed(&e)).await,
        }
    }
    for one in &batch {
        let mut tries = 1;
        loop {
            match reported(loops, name, save(vec![one.clone()])).await {
                Ok(()) => break,
                Err(e) if e.is_unexpected() && tries >= domain::unit::ATTEMPTS => {
                    // Logged with its errorId; the job is attempted again when its lease ends.
                    domain::unit::Failure::new(name, "outcome", e.to_string());
                    break;
                }
                Err(e) if e.is_unexpected() => tries += 1,
                Err(e) => tokio::time::sleep(pacing.failed(&e)).await,
            }
        }
    }
    batch
}

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

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

#[cfg(test)]
mod tests;
