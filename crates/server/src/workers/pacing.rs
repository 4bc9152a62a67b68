//! How a loop paces itself after a failed step: a storage error backs off, a full disk backs
//! off longer and is logged once, not at every retry (contract §18).

use std::time::{Duration, Instant};

use domain::StorageError;

use super::BACKOFF;

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
pub(super) struct Pacing {
    name: &'static str,
    full_since: Option<Instant>,
    summary_at: Instant,
    failures: u64,
    pause: Duration,
}

impl Pacing {
    pub(super) fn new(name: &'static str) -> Self {
        Self {
            name,
            full_since: None,
            summary_at: Instant::now(),
            failures: 0,
            pause: FULL_PAUSE_FIRST,
        }
    }

    /// A step succeeded.
    pub(super) fn ok(&mut self) {
        if let Some(since) = self.full_since.take() {
            tracing::info!(worker = self.name, lasted = ?since.elapsed(),
                "storage has room again; the loop goes on");
            self.pause = FULL_PAUSE_FIRST;
        }
    }

    /// A step failed with `error`: how long to wait before the next.
    pub(super) fn failed(&mut self, error: &(impl std::fmt::Display + IsFull)) -> Duration {
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
