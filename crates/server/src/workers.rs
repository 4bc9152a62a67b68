//! Background work of `serve`: the engine that executes recorded invocations, the
//! scheduler that moves cards on time, webhook delivery and push sending. All keep their state in the database, so stopping the
//! process at any point (even `kill -9`) loses nothing: an invocation's lease runs out and
//! the next worker resumes it from its last saved batch.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use domain::card::CardService;
use domain::push::{PushRecord, PushService};
use domain::trigger::engine::Engine;
use domain::webhook::{AttemptRecord, DeliveryService};

/// Pause when there is nothing to do.
const IDLE: Duration = Duration::from_millis(50);
/// Pause after a storage error, so a database outage is not hammered.
const BACKOFF: Duration = Duration::from_secs(1);
const SCHEDULER_PERIOD: Duration = Duration::from_millis(500);
const SCHEDULER_BATCH: u32 = 500;

/// Runs `step` forever: again at once after work, after [`IDLE`] when there was none, after
/// [`BACKOFF`] when it failed.
fn run_loop<F, Fut, E>(name: &'static str, step: F)
where
    F: Fn() -> Fut + Send + 'static,
    Fut: std::future::Future<Output = Result<bool, E>> + Send,
    E: std::fmt::Display + Send,
{
    tokio::spawn(async move {
        loop {
            match step().await {
                Ok(true) => {}
                Ok(false) => tokio::time::sleep(IDLE).await,
                Err(e) => {
                    tracing::error!(worker = name, error = %e, "background step failed");
                    tokio::time::sleep(BACKOFF).await;
                }
            }
        }
    });
}

pub fn spawn(engine: Arc<Engine>, cards: Arc<CardService>, engines: usize) {
    for _ in 0..engines {
        let engine = engine.clone();
        run_loop("engine", move || {
            let engine = engine.clone();
            async move { engine.step().await }
        });
    }
    tokio::spawn(async move {
        loop {
            match cards.tick(SCHEDULER_BATCH).await {
                Ok(moved) if moved as u32 >= SCHEDULER_BATCH => continue,
                Ok(_) => tokio::time::sleep(SCHEDULER_PERIOD).await,
                Err(e) => {
                    tracing::error!(error = %e, "card scheduler failed");
                    tokio::time::sleep(BACKOFF).await;
                }
            }
        }
    });
}

/// How often the SQLite checkpointer copies the WAL into the database file.
const CHECKPOINT_PERIOD: Duration = Duration::from_millis(100);

/// SQLite's checkpointer: copies committed pages from the WAL into the database file, so the
/// writers' commits do not (PostgreSQL checkpoints by itself; this is not started for it).
pub fn spawn_checkpointer(db: adapters_diesel::Database) {
    if db.backend() != adapters_diesel::Backend::Sqlite {
        return;
    }
    tokio::spawn(async move {
        loop {
            if let Err(e) = db.checkpoint().await {
                tracing::warn!(error = %e, "WAL checkpoint failed");
            }
            tokio::time::sleep(CHECKPOINT_PERIOD).await;
        }
    });
}

/// The cancel worker: one task at a time, batch by batch.
pub fn spawn_cancels(cancels: Arc<domain::cancel::CancelService>) {
    run_loop("cancel", move || {
        let cancels = cancels.clone();
        async move { cancels.step().await }
    });
}

/// The CSV worker: hands uploaded rows to the engine, a step at a time.
pub fn spawn_bulk(bulk: Arc<domain::bulk::BulkService>) {
    run_loop("bulk", move || {
        let bulk = bulk.clone();
        async move { bulk.step().await }
    });
}

/// Calls in flight from this process, in all.
const MAX_IN_FLIGHT: usize = 1_024;
/// Outcomes saved per transaction, at most.
const RECORD_BATCH: usize = 1_000;
const DELIVERY_IDLE: Duration = Duration::from_millis(10);

/// Webhook delivery: one loop claims due deliveries (per subscription at most `per_endpoint`
/// in flight, so a slow endpoint cannot take the slots of healthy ones), each call runs in its
/// own task, and one loop saves outcomes in batches. `lease` must outlast a call (15 s) and the
/// saving of its outcome; a lease that runs out (the process died) makes the delivery due again.
pub fn spawn_deliveries(service: Arc<DeliveryService>, per_endpoint: u32, lease: chrono::Duration) {
    let in_flight: Arc<Mutex<HashMap<String, u32>>> = Arc::default();
    let recorder = service.clone();
    let counts = in_flight.clone();
    let done = spawn_saver(
        "webhook",
        move |batch: Vec<AttemptRecord>| {
            let recorder = recorder.clone();
            async move { recorder.record(batch).await }
        },
        move |batch: &[AttemptRecord]| {
            let mut counts = lock(&counts);
            for r in batch {
                if let Some(n) = counts.get_mut(&r.subscription_id) {
                    *n = n.saturating_sub(1);
                    if *n == 0 {
                        counts.remove(&r.subscription_id);
                    }
                }
            }
        },
    );
    let per_claim = (per_endpoint / 2).max(1);
    tokio::spawn(async move {
        loop {
            let (exclude, total) = {
                let counts = lock(&in_flight);
                let exclude: Vec<String> = counts
                    .iter()
                    .filter(|(_, n)| **n + per_claim > per_endpoint)
                    .map(|(id, _)| id.clone())
                    .collect();
                (exclude, counts.values().map(|n| *n as usize).sum::<usize>())
            };
            let room = MAX_IN_FLIGHT.saturating_sub(total);
            if room == 0 {
                tokio::time::sleep(DELIVERY_IDLE).await;
                continue;
            }
            match service.claim(per_claim, exclude, room as u32, lease).await {
                Ok(jobs) if jobs.is_empty() => tokio::time::sleep(DELIVERY_IDLE).await,
                Ok(jobs) => {
                    let mut counts = lock(&in_flight);
                    for job in jobs {
                        *counts.entry(job.subscription.id.clone()).or_default() += 1;
                        let (service, done) = (service.clone(), done.clone());
                        tokio::spawn(async move {
                            let record = service.attempt(job).await;
                            let _ = done.send(record);
                        });
                    }
                }
                Err(e) => {
                    tracing::error!(error = %e, "cannot claim webhook deliveries");
                    tokio::time::sleep(BACKOFF).await;
                }
            }
        }
    });
}

/// Saves outcomes sent to the returned channel, in batches of at most [`RECORD_BATCH`], and
/// calls `saved` with each batch once it is stored. A failed save is tried again: until saved,
/// the leases keep these jobs from being attempted again by this process, and if it dies they
/// are attempted again (at least once).
fn spawn_saver<R, F, Fut, E>(
    name: &'static str,
    save: F,
    saved: impl Fn(&[R]) + Send + 'static,
) -> tokio::sync::mpsc::UnboundedSender<R>
where
    R: Clone + Send + 'static,
    F: Fn(Vec<R>) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = Result<(), E>> + Send,
    E: std::fmt::Display + Send,
{
    let (done, mut outcomes) = tokio::sync::mpsc::unbounded_channel::<R>();
    tokio::spawn(async move {
        while let Some(first) = outcomes.recv().await {
            let mut batch = vec![first];
            while batch.len() < RECORD_BATCH {
                match outcomes.try_recv() {
                    Ok(r) => batch.push(r),
                    Err(_) => break,
                }
            }
            while let Err(e) = save(batch.clone()).await {
                tracing::error!(worker = name, error = %e, outcomes = batch.len(), "cannot save outcomes");
                tokio::time::sleep(BACKOFF).await;
            }
            saved(&batch);
        }
    });
    done
}

/// Pushes in flight from this process, in all.
const MAX_PUSHES_IN_FLIGHT: usize = 256;

/// Push sending: one loop claims due pushes while fewer than [`MAX_PUSHES_IN_FLIGHT`] are in
/// flight, each call runs in its own task, and outcomes are saved in batches. A lease that runs
/// out (the process died) makes the push due again.
pub fn spawn_pushes(service: Arc<PushService>, lease: chrono::Duration) {
    let in_flight = Arc::new(AtomicUsize::new(0));
    let recorder = service.clone();
    let counter = in_flight.clone();
    let done = spawn_saver(
        "push",
        move |batch: Vec<PushRecord>| {
            let recorder = recorder.clone();
            async move { recorder.record(batch).await }
        },
        move |batch: &[PushRecord]| {
            counter.fetch_sub(batch.len(), Ordering::Relaxed);
        },
    );
    tokio::spawn(async move {
        loop {
            let room = MAX_PUSHES_IN_FLIGHT.saturating_sub(in_flight.load(Ordering::Relaxed));
            if room == 0 {
                tokio::time::sleep(DELIVERY_IDLE).await;
                continue;
            }
            match service.claim(room as u32, lease).await {
                Ok(jobs) if jobs.is_empty() => tokio::time::sleep(IDLE).await,
                Ok(jobs) => {
                    in_flight.fetch_add(jobs.len(), Ordering::Relaxed);
                    for job in jobs {
                        let (service, done) = (service.clone(), done.clone());
                        tokio::spawn(async move {
                            let _ = done.send(service.attempt(job).await);
                        });
                    }
                }
                Err(e) => {
                    tracing::error!(error = %e, "cannot claim pushes");
                    tokio::time::sleep(BACKOFF).await;
                }
            }
        }
    });
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}
