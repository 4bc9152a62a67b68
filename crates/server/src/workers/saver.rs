//! The savers of outcomes: the calls of a claim loop send their outcomes to a saver, which
//! stores them in batches and frees the room they held.

use std::future::Future;
use std::sync::Arc;

use domain::health::Loops;
use domain::push::{PushRecord, PushService};
use domain::unit::Unexpected;
use domain::webhook::{AttemptRecord, DeliveryService};
use domain::StorageError;
use tokio::sync::Notify;

use super::pacing::Pacing;
use super::stale_outcomes;
use super::supervisor::{reported, Supervisor};

/// Outcomes saved per transaction, at most.
const RECORD_BATCH: usize = 1_000;

/// A service that stores a batch of its outcomes, and says how many of them it did not store
/// because their claims had passed to another holder.
pub(super) trait Recorder<R>: Send + Sync + 'static {
    /// Stores `batch`; the number of stale outcomes.
    fn record(&self, batch: Vec<R>) -> impl Future<Output = Result<u64, StorageError>> + Send;
}

impl Recorder<AttemptRecord> for DeliveryService {
    fn record(
        &self,
        batch: Vec<AttemptRecord>,
    ) -> impl Future<Output = Result<u64, StorageError>> + Send {
        DeliveryService::record(self, batch)
    }
}

impl Recorder<PushRecord> for PushService {
    fn record(
        &self,
        batch: Vec<PushRecord>,
    ) -> impl Future<Output = Result<u64, StorageError>> + Send {
        PushService::record(self, batch)
    }
}

/// Saves outcomes sent to the returned channel by `recorder`, in batches of at most
/// [`RECORD_BATCH`], counting those it finds stale as `kind` (see [`stale_outcomes`]), and
/// calls `saved` with each batch once it is stored, then notifies the returned [`Notify`]: there
/// is room for more claims. A save that fails for an unreachable database is tried
/// again: until saved, the leases keep these jobs from being attempted again by this process,
/// and if it dies they are attempted again (at least once). A save that fails unexpectedly (a
/// row the database refuses) is tried one outcome at a time, so that one bad outcome is dropped
/// alone after [`domain::unit::ATTEMPTS`], logged with an `errorId`: its job is attempted again
/// when its lease runs out.
pub(super) fn spawn_saver<R, S>(
    supervisor: &Supervisor,
    name: &'static str,
    kind: &'static str,
    recorder: Arc<S>,
    saved: impl Fn(&[R]) + Send + Sync + 'static,
) -> (tokio::sync::mpsc::UnboundedSender<R>, Arc<Notify>)
where
    R: Clone + Send + Sync + 'static,
    S: Recorder<R>,
{
    let metrics = supervisor.metrics.clone();
    metrics.stale_outcomes(kind, 0);
    let save = move |batch: Vec<R>| {
        let (recorder, metrics) = (recorder.clone(), metrics.clone());
        async move {
            stale_outcomes(&metrics, kind, recorder.record(batch).await?);
            Ok(())
        }
    };
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
