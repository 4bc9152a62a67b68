//! The push loop: due push jobs claimed, sent with a bounded number in flight, and their
//! outcomes saved in batches.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use domain::push::{PushRecord, PushService};
use tokio::sync::Notify;

use super::pacing::Pacing;
use super::pauses::{pause, pause_until_freed, until_saved, Idle};
use super::saver::spawn_saver;
use super::supervisor::{reported, Supervisor};
use super::{DELIVERY_IDLE, IDLE, IDLE_MOST};

/// Pushes in flight from this process, in all.
const MAX_PUSHES_IN_FLIGHT: usize = 256;

/// Push sending: one loop claims due pushes while fewer than [`MAX_PUSHES_IN_FLIGHT`] are in
/// flight, each call runs in its own task, and outcomes are saved in batches. While none is
/// due it pauses longer each time, up to [`IDLE_MOST`], unless pushes are `queued` in this
/// process. A lease that runs out (the process died) makes the push due again.
pub fn spawn_pushes(
    supervisor: &Supervisor,
    service: Arc<PushService>,
    queued: Arc<Notify>,
    lease: chrono::Duration,
) {
    let in_flight = Arc::new(AtomicUsize::new(0));
    let counter = in_flight.clone();
    let (done, freed) = spawn_saver(
        supervisor,
        "push-saver",
        "push",
        service.clone(),
        move |batch: &[PushRecord]| {
            counter.fetch_sub(batch.len(), Ordering::Relaxed);
        },
    );
    let (loops, stopping) = (supervisor.loops.clone(), supervisor.stopping());
    supervisor.supervise("push", move || {
        let (service, done, freed, in_flight, loops, stopping, queued) = (
            service.clone(),
            done.clone(),
            freed.clone(),
            in_flight.clone(),
            loops.clone(),
            stopping.clone(),
            queued.clone(),
        );
        async move {
            let mut pacing = Pacing::new("push");
            let mut idle = Idle::new(IDLE, IDLE_MOST);
            loop {
                if stopping.is_cancelled() {
                    // The pushes in flight finish and their outcomes are saved first.
                    until_saved(&in_flight, DELIVERY_IDLE).await;
                    return;
                }
                let room = MAX_PUSHES_IN_FLIGHT.saturating_sub(in_flight.load(Ordering::Relaxed));
                if room == 0 {
                    pause_until_freed(&stopping, &freed, DELIVERY_IDLE).await;
                    continue;
                }
                let claimed = reported(
                    &loops,
                    "push",
                    service.claim(u32::try_from(room).unwrap_or(u32::MAX), lease),
                )
                .await;
                if claimed.is_ok() {
                    pacing.ok();
                }
                match claimed {
                    Ok(jobs) if jobs.is_empty() => idle.pause(&stopping, &queued, None).await,
                    Ok(jobs) => {
                        idle.worked();
                        in_flight.fetch_add(jobs.len(), Ordering::Relaxed);
                        for job in jobs {
                            let (service, done) = (service.clone(), done.clone());
                            tokio::spawn(async move {
                                let _ = done.send(service.attempt(job).await);
                            });
                        }
                    }
                    Err(e) => pause(&stopping, pacing.failed(&e)).await,
                }
            }
        }
    });
}
