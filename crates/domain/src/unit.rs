//! One unit of background work fails alone (docs/operations.md, When one unit of work fails):
//! an invocation's batch, a CSV or cancel task's step, a webhook delivery, a push. A panic or
//! an unexpected error in one unit is caught here, the unit is tried again up to [`ATTEMPTS`]
//! times in all, and then it is given up as a [`Failure`] with an `errorId` that is in the log
//! and in what the unit's owner sees. The loop that ran the unit goes on with the others.
//!
//! What is expected is not a failure of the unit: a database that cannot be reached
//! ([`StorageError::Unavailable`]) or a record changed meanwhile is the loop's to wait out.

use std::future::Future;
use std::panic::AssertUnwindSafe;

use futures_util::FutureExt;

use crate::id::{new_id, IdKind};
use crate::{DomainError, StorageError};

/// Attempts of one unit, in all, before it is marked failed.
pub const ATTEMPTS: u32 = 3;

/// How long a claim of leased work (an invocation, a CSV or cancel task) lasts by default, in
/// seconds, before another worker may take it over: each holder renews it with its progress.
/// Named once here; the server's `WORKBENCH_ENGINE_LEASE_SECONDS` defaults to it too.
pub const LEASE_SECONDS: u32 = 30;

/// A worker's claims of leased tasks (CSV and cancel tasks): how long each claim lasts, and
/// the writes refused because a claim had passed to another holder (docs/architecture.md,
/// Time, leases and fencing).
#[derive(Debug)]
pub(crate) struct Claims {
    /// How long a claimed task stays with its worker before another may take it over.
    pub(crate) lease: chrono::Duration,
    stale: crate::health::Stale,
}

impl Default for Claims {
    /// Claims of [`LEASE_SECONDS`].
    fn default() -> Self {
        Claims {
            lease: chrono::Duration::seconds(i64::from(LEASE_SECONDS)),
            stale: crate::health::Stale::default(),
        }
    }
}

impl Claims {
    /// Counts a write refused because the lease had passed to another holder; answers `held`.
    pub(crate) fn held(&self, held: bool) -> bool {
        if !held {
            self.stale.add(1);
        }
        held
    }

    /// The refused writes counted since the last take.
    pub(crate) fn take_stale(&self) -> u64 {
        self.stale.take()
    }
}

/// A unit given up after [`ATTEMPTS`]: `error_id` is logged with `cause`, and shown with
/// [`Failure::message`] where the unit's owner looks (an invocation's or task's errors, a
/// delivery's last error).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    /// `err_...`: in the ERROR line of the log and in [`Failure::message`].
    pub error_id: String,
    /// The last attempt's error, or `panic: ` and the panic's text. Logged, never shown to the
    /// unit's owner.
    pub cause: String,
}

impl Failure {
    /// A failure logged now at ERROR, with a new `errorId`.
    pub fn new(unit: &'static str, id: &str, cause: String) -> Self {
        let error_id = new_id(IdKind::Error);
        tracing::error!(
            unit,
            id,
            error_id = %error_id,
            cause = %cause,
            attempts = ATTEMPTS,
            "a unit of background work failed; it is marked failed and the others go on"
        );
        Failure { error_id, cause }
    }

    /// What the unit's owner sees: no internals, the id to find them in the log.
    pub fn message(&self) -> String {
        format!(
            "internal error: this was given up after {ATTEMPTS} attempts (errorId {})",
            self.error_id
        )
    }
}

/// Whether an error is one the unit cannot recover from by waiting (a bug, a corrupted row),
/// as opposed to one the loop waits out.
pub trait Unexpected {
    /// True for an error waiting will not cure: the attempt is made again, and after
    /// [`ATTEMPTS`] the unit is failed. False for one the loop waits out: for [`StorageError`]
    /// an unreachable database, a full disk or a record changed meanwhile (`Unavailable`,
    /// `Full`, `StaleRevision`); a [`DomainError`] is expected only when it is such a storage
    /// error.
    fn is_unexpected(&self) -> bool;
}

impl Unexpected for StorageError {
    fn is_unexpected(&self) -> bool {
        matches!(
            self,
            StorageError::Internal(_)
                | StorageError::UniqueViolation(_)
                | StorageError::ForeignKeyViolation(_)
        )
    }
}

impl Unexpected for DomainError {
    fn is_unexpected(&self) -> bool {
        match self {
            DomainError::Storage(e) => e.is_unexpected(),
            _ => true,
        }
    }
}

/// The text of a caught panic's payload.
pub fn panic_text(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic without a message".to_owned())
}

/// `work` with a panic caught: `Err` holds the panic's text.
pub async fn catch<T>(work: impl Future<Output = T>) -> Result<T, String> {
    AssertUnwindSafe(work)
        .catch_unwind()
        .await
        .map_err(|p| panic_text(&*p))
}

/// Runs the unit `unit` `id` (`run` makes one attempt) up to [`ATTEMPTS`] times while it
/// panics or fails unexpectedly. `Ok` holds the outcome of the last attempt (a success, or an
/// expected error for the caller to wait out); `Err` the failure after the last attempt, logged.
pub async fn attempts<T, E, F, Fut>(
    unit: &'static str,
    id: &str,
    mut run: F,
) -> Result<Result<T, E>, Failure>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, E>>,
    E: Unexpected + std::fmt::Display,
{
    let mut cause = String::new();
    for attempt in 1..=ATTEMPTS {
        cause = match catch(run()).await {
            Ok(Err(e)) if e.is_unexpected() => e.to_string(),
            Ok(outcome) => return Ok(outcome),
            Err(panic) => format!("panic: {panic}"),
        };
        tracing::warn!(unit, id, attempt, cause = %cause,
            "a unit of background work failed; trying it again");
    }
    Err(Failure::new(unit, id, cause))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU32, Ordering};

    #[tokio::test]
    async fn a_panicking_unit_is_tried_three_times_then_failed_with_an_error_id() {
        let tries = AtomicU32::new(0);
        let outcome = attempts("test", "u1", || async {
            tries.fetch_add(1, Ordering::Relaxed);
            if tries.load(Ordering::Relaxed) < 10 {
                panic!("boom");
            }
            Ok::<(), StorageError>(())
        })
        .await;
        let failure = outcome.expect_err("failed");
        assert_eq!(tries.load(Ordering::Relaxed), ATTEMPTS);
        assert!(failure.error_id.starts_with("err_"), "{failure:?}");
        assert_eq!(failure.cause, "panic: boom");
        assert!(failure.message().contains(&failure.error_id));
        assert!(!failure.message().contains("boom"));
    }

    #[tokio::test]
    async fn a_unit_that_recovers_on_its_second_attempt_succeeds() {
        let tries = AtomicU32::new(0);
        let outcome = attempts("test", "u1", || async {
            if tries.fetch_add(1, Ordering::Relaxed) == 0 {
                return Err(StorageError::Internal("corrupt".into()));
            }
            Ok(7)
        })
        .await;
        assert_eq!(outcome, Ok(Ok(7)));
        assert_eq!(tries.load(Ordering::Relaxed), 2);
    }

    #[tokio::test]
    async fn an_unavailable_database_is_the_loops_to_wait_out_not_a_failure() {
        let tries = AtomicU32::new(0);
        let outcome = attempts("test", "u1", || async {
            tries.fetch_add(1, Ordering::Relaxed);
            Err::<(), _>(StorageError::Unavailable("down".into()))
        })
        .await;
        assert!(matches!(outcome, Ok(Err(StorageError::Unavailable(_)))));
        assert_eq!(tries.load(Ordering::Relaxed), 1);
    }
}
