//! Webhook delivery: the claim loop, with its per-subscription limit of calls in flight, each
//! call in a task of its own, and the saver of their outcomes.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use api_actix::Metrics;
use domain::health::Loops;
use domain::webhook::{AttemptRecord, DeliveryJob, DeliveryService};
use tokio::sync::mpsc::UnboundedSender;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use super::pacing::Pacing;
use super::pauses::{pause, pause_until_freed, until_saved, Idle};
use super::saver::spawn_saver;
use super::supervisor::{reported, Supervisor};
use super::{DELIVERY_IDLE, IDLE_MOST};

/// At most this many deliveries claimed by this process and not yet saved (in a call, or
/// waiting for the saver), in all.
const MAX_UNSAVED: usize = 1_024;

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
    let slots = Slots::new(per_endpoint);
    let (done, freed) = spawn_delivery_saver(supervisor, service.clone(), slots.clone());
    let claims = Claims {
        service,
        done,
        freed,
        slots,
        loops: supervisor.loops.clone(),
        stopping: supervisor.stopping(),
        attempts: supervisor.metrics.clone(),
        queued,
        lease,
    };
    supervisor.supervise("webhook", move || claims.clone().run());
}

/// The saver of the delivery loop's outcomes. A batch saved frees the room its deliveries
/// held, and the slots of the calls that disabled their subscription.
fn spawn_delivery_saver(
    supervisor: &Supervisor,
    recorder: Arc<DeliveryService>,
    slots: Slots,
) -> (UnboundedSender<AttemptRecord>, Arc<Notify>) {
    spawn_saver(
        supervisor,
        "webhook-saver",
        "webhook",
        recorder,
        move |batch: &[AttemptRecord]| {
            for r in batch.iter().filter(|r| r.disables_subscription()) {
                // The saver wakes the claim loop after this.
                slots.call_ended(&r.subscription_id);
            }
            slots.unsaved.fetch_sub(batch.len(), Ordering::AcqRel);
        },
    )
}

/// What the claim loop, its calls and the saver share: the calls in flight per subscription,
/// and the deliveries claimed but not yet saved, in all.
#[derive(Clone)]
struct Slots {
    in_flight: Arc<Mutex<HashMap<String, u32>>>,
    unsaved: Arc<AtomicUsize>,
    /// Deliveries claimed per subscription at a time: half its limit, so that a subscription
    /// is claimed for again before all its calls have ended.
    per_claim: u32,
    per_endpoint: u32,
}

impl Slots {
    fn new(per_endpoint: u32) -> Self {
        Slots {
            in_flight: Arc::default(),
            unsaved: Arc::new(AtomicUsize::new(0)),
            per_claim: (per_endpoint / 2).max(1),
            per_endpoint,
        }
    }

    /// The subscriptions a claim leaves out: one more claim would pass their limit.
    fn at_their_limit(&self) -> Vec<String> {
        lock(&self.in_flight)
            .iter()
            .filter(|(_, n)| **n + self.per_claim > self.per_endpoint)
            .map(|(id, _)| id.clone())
            .collect()
    }

    /// How many more deliveries may be claimed before [`MAX_UNSAVED`] are unsaved.
    fn room(&self) -> usize {
        MAX_UNSAVED.saturating_sub(self.unsaved.load(Ordering::Acquire))
    }

    /// See [`call_ended`].
    fn call_ended(&self, subscription: &str) -> bool {
        call_ended(
            &self.in_flight,
            subscription,
            self.per_claim,
            self.per_endpoint,
        )
    }
}

/// The claim loop, and what each of its calls needs.
#[derive(Clone)]
struct Claims {
    service: Arc<DeliveryService>,
    done: UnboundedSender<AttemptRecord>,
    freed: Arc<Notify>,
    slots: Slots,
    loops: Arc<Loops>,
    stopping: CancellationToken,
    attempts: Metrics,
    queued: Arc<Notify>,
    lease: chrono::Duration,
}

impl Claims {
    /// Claims while there is room, starts a call for each delivery claimed, and pauses while
    /// nothing is due; ends when the loops are to stop, once every claimed outcome is saved.
    async fn run(self) {
        let mut pacing = Pacing::new("webhook");
        let mut idle = Idle::new(DELIVERY_IDLE, IDLE_MOST);
        loop {
            if self.stopping.is_cancelled() {
                // Claims no more; the calls in flight finish and their outcomes are saved
                // (or given up, their deliveries due again when their leases end) before
                // this loop ends.
                until_saved(&self.slots.unsaved, DELIVERY_IDLE).await;
                return;
            }
            let exclude = self.slots.at_their_limit();
            let room = self.slots.room();
            if room == 0 {
                pause_until_freed(&self.stopping, &self.freed, DELIVERY_IDLE).await;
                continue;
            }
            let claimed = self.service.claim(
                self.slots.per_claim,
                exclude,
                u32::try_from(room).unwrap_or(u32::MAX),
                self.lease,
            );
            let claimed = reported(&self.loops, "webhook", claimed).await;
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
                    if self.slots.unsaved.load(Ordering::Acquire) > 0 {
                        idle.worked();
                    }
                    idle.pause(&self.stopping, &self.queued, Some(&self.freed))
                        .await;
                }
                Ok(jobs) => {
                    idle.worked();
                    self.start_calls(jobs);
                }
                Err(e) => pause(&self.stopping, pacing.failed(&e)).await,
            }
        }
    }

    /// Counts `jobs` in flight and starts a call for each.
    fn start_calls(&self, jobs: Vec<DeliveryJob>) {
        self.slots.unsaved.fetch_add(jobs.len(), Ordering::AcqRel);
        let mut counts = lock(&self.slots.in_flight);
        for job in jobs {
            let subscription: String = job.subscription.id.clone().into();
            *counts.entry(subscription.clone()).or_default() += 1;
            self.start_call(job, subscription);
        }
    }

    /// One call in a task of its own: its outcome goes to the saver, and its slot is freed
    /// (waking the claim loop when that brings its subscription back within its threshold),
    /// unless it disables the subscription.
    fn start_call(&self, job: DeliveryJob, subscription: String) {
        let (service, done, attempts, slots, freed) = (
            self.service.clone(),
            self.done.clone(),
            self.attempts.clone(),
            self.slots.clone(),
            self.freed.clone(),
        );
        // `attempt` never fails and catches a panic of its own (contract §10), so every
        // claimed job sends an outcome.
        tokio::spawn(async move {
            let started = Instant::now();
            let record = service.attempt(job).await;
            attempts.webhook_attempt(record.outcome.kind(), started.elapsed());
            let held = record.disables_subscription();
            let _ = done.send(record);
            if !held && slots.call_ended(&subscription) {
                freed.notify_one();
            }
        });
    }
}

/// Frees the slot of a call to `subscription` that has ended, and returns whether the
/// subscription has just come back within its claiming threshold (room for a claim of
/// `per_claim`), so that the claim loop should look again now rather than after its pause.
pub(super) fn call_ended(
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

/// The lock of `m`, even when a thread panicked holding it: the counts stay usable.
pub(super) fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}
