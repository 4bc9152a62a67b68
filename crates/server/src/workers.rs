//! Background work of `serve`: the engine that executes recorded invocations, the
//! scheduler that moves cards on time, and webhook delivery. Both keep their state in the database, so stopping the
//! process at any point (even `kill -9`) loses nothing: an invocation's lease runs out and
//! the next worker resumes it from its last saved batch.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use domain::card::CardService;
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
    let (done, mut outcomes) = tokio::sync::mpsc::unbounded_channel::<AttemptRecord>();
    let recorder = service.clone();
    let counts = in_flight.clone();
    tokio::spawn(async move {
        while let Some(first) = outcomes.recv().await {
            let mut batch = vec![first];
            while batch.len() < RECORD_BATCH {
                match outcomes.try_recv() {
                    Ok(r) => batch.push(r),
                    Err(_) => break,
                }
            }
            // Keep trying: until saved, the leases keep these deliveries from being sent again
            // by this process, and if it dies they are sent again (at least once).
            while let Err(e) = recorder.record(batch.clone()).await {
                tracing::error!(error = %e, outcomes = batch.len(), "cannot save webhook outcomes");
                tokio::time::sleep(BACKOFF).await;
            }
            let mut counts = lock(&counts);
            for r in &batch {
                if let Some(n) = counts.get_mut(&r.subscription_id) {
                    *n = n.saturating_sub(1);
                    if *n == 0 {
                        counts.remove(&r.subscription_id);
                    }
                }
            }
        }
    });
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

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}
