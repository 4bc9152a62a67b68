//! The supervisor of the background loops (contract §10): it starts each loop, starts it
//! again after a back-off when it dies, reports each step to [`Loops`] for `/readyz`, and
//! stops them all together on shutdown.

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use api_actix::Metrics;
use domain::health::Loops;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::pacing::{IsFull, Pacing};
use super::pauses::{pause, Idle};
use super::{IDLE, IDLE_MOST};

/// The first pause before a dead loop is started again; doubled after each death, up to
/// [`RESTART_MAX`], and back to this after a loop has run for [`RESTART_RESET`].
const RESTART_FIRST: Duration = Duration::from_secs(1);
const RESTART_MAX: Duration = Duration::from_secs(30);
const RESTART_RESET: Duration = Duration::from_secs(60);

/// Starts loops, starts them again when they die, and reports their steps. On shutdown
/// ([`Supervisor::stop`]) the loops stop taking work, finish what they hold, and end.
#[derive(Clone)]
pub struct Supervisor {
    pub(super) loops: Arc<Loops>,
    pub(super) metrics: Metrics,
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

/// `work`, one step of `name`, reported to `loops` as it starts and ends.
/// A step that failed because the database did not answer is not the loop's failure
/// ([`Loops::ended_unavailable`]): `/readyz` follows the database as soon as it answers.
pub(super) async fn reported<T, E: IsFull>(
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
