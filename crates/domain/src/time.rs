//! Time: the clock port and the timestamp type every record uses.

use chrono::{DateTime, SubsecRound, Utc};

/// A UTC instant with millisecond precision (the API's timestamp format,
/// `2026-11-22T10:00:00.000Z`, carries milliseconds; storing more would not round-trip).
pub type Timestamp = DateTime<Utc>;

/// The API's timestamp format (contract §1): RFC 3339, UTC, milliseconds
/// (`2026-11-22T10:00:00.000Z`). Used by the HTTP layer and inside event payloads.
pub fn format_timestamp(t: &Timestamp) -> String {
    t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

#[cfg_attr(feature = "mock", mockall::automock)]
pub trait Clock: Send + Sync {
    /// The current instant, truncated to milliseconds.
    fn now(&self) -> Timestamp;
}

/// The real clock.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Timestamp {
        Utc::now().trunc_subsecs(3)
    }
}
