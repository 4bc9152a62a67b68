//! Background work of `serve`: the engine that executes recorded invocations, and the
//! scheduler that moves cards on time. Both keep their state in the database, so stopping the
//! process at any point (even `kill -9`) loses nothing: an invocation's lease runs out and
//! the next worker resumes it from its last saved batch.

use std::sync::Arc;
use std::time::Duration;

use domain::card::CardService;
use domain::trigger::engine::Engine;

/// Pause when there is nothing to do.
const IDLE: Duration = Duration::from_millis(50);
/// Pause after a storage error, so a database outage is not hammered.
const BACKOFF: Duration = Duration::from_secs(1);
const SCHEDULER_PERIOD: Duration = Duration::from_millis(500);
const SCHEDULER_BATCH: u32 = 500;

pub fn spawn(engine: Arc<Engine>, cards: Arc<CardService>, engines: usize) {
    for n in 0..engines {
        let engine = engine.clone();
        tokio::spawn(async move {
            loop {
                match engine.step().await {
                    Ok(true) => {}
                    Ok(false) => tokio::time::sleep(IDLE).await,
                    Err(e) => {
                        tracing::error!(worker = n, error = %e, "engine step failed");
                        tokio::time::sleep(BACKOFF).await;
                    }
                }
            }
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
