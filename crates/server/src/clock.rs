//! Keeps the process's [`DatabaseClock`] on the database's time (contract §19): its offset
//! is measured before the service decides anything, then every minute; beyond a second it is
//! logged at WARN, and every measurement is reported (`workbench_clock_offset_seconds`).

use std::sync::Arc;
use std::time::Duration;

use adapters_diesel::{clock::measure, Database, DatabaseClock};

/// How often the offset is measured again.
const PERIOD: Duration = Duration::from_secs(60);
/// An offset beyond this is logged at WARN.
const WARN_OFFSET_MS: i64 = 1_000;
/// Tries of the first measurement, this far apart, before serving.
const FIRST_TRIES: u32 = 20;
const FIRST_PAUSE: Duration = Duration::from_millis(250);

/// Measures the offset now (before anything is decided), then every minute, for as long as
/// the process runs; `reported` gets each offset (for `/metrics`).
pub async fn track(
    db: Database,
    clock: Arc<DatabaseClock>,
    reported: impl Fn(i64) + Send + Sync + 'static,
) {
    // Before serving: a few tries, so that a database slow to answer its first query does not
    // leave the process on its host's clock for a minute.
    for _ in 0..FIRST_TRIES {
        if apply(&db, &clock, &reported).await {
            break;
        }
        tokio::time::sleep(FIRST_PAUSE).await;
    }
    tokio::spawn(async move {
        loop {
            tokio::time::sleep(PERIOD).await;
            apply(&db, &clock, &reported).await;
        }
    });
}

/// Measures and sets the offset; false when the database could not be read.
async fn apply(db: &Database, clock: &DatabaseClock, reported: &impl Fn(i64)) -> bool {
    match measure(db, clock).await {
        Ok(offset) => {
            clock.set_offset_ms(offset);
            reported(offset);
            if offset.abs() > WARN_OFFSET_MS {
                tracing::warn!(
                    offset_seconds = offset as f64 / 1000.0,
                    "this host's clock is off the database's by more than a second; the service \
                     uses the database's time, but check the host's time synchronisation"
                );
            }
            true
        }
        Err(e) => {
            tracing::warn!(error = %e, "cannot read the database's clock; keeping the last offset");
            false
        }
    }
}
