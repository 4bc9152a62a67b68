//! Time: the clock port and the timestamp type every record uses.

use chrono::{DateTime, Duration, SubsecRound, Utc};

/// A UTC instant with millisecond precision (the API's timestamp format,
/// `2026-11-22T10:00:00.000Z`, carries milliseconds; storing more would not round-trip).
pub type Timestamp = DateTime<Utc>;

/// The API's timestamp format: RFC 3339, UTC, milliseconds (`2026-11-22T10:00:00.000Z`).
/// Used by the HTTP layer and inside event payloads.
pub fn format_timestamp(t: &Timestamp) -> String {
    t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

/// The earliest instant the service accepts or computes: 1970-01-01T00:00:00.000Z
/// (docs/api.md, Bounded values).
pub const EARLIEST: Timestamp = DateTime::UNIX_EPOCH;

/// Milliseconds from the epoch to 9999-12-31T23:59:59.999Z, the latest instant (docs/api.md,
/// Bounded values): every timestamp written keeps a 4-digit year.
const LATEST_MS: i64 = 253_402_300_799_999;

/// The latest instant the service accepts or computes: 9999-12-31T23:59:59.999Z.
pub fn latest() -> Timestamp {
    DateTime::from_timestamp_millis(LATEST_MS).unwrap_or(DateTime::<Utc>::MAX_UTC)
}

/// The longest duration the service accepts: 100 years of 365¼ days, `P36525D` (docs/api.md,
/// Bounded values).
pub const MAX_DURATION: Duration = Duration::days(36_525);

/// What a field's message says of the accepted range.
pub const RANGE_TEXT: &str = "between 1970-01-01T00:00:00.000Z and 9999-12-31T23:59:59.999Z";

/// Whether `t` lies in the range every stored or computed instant must (see [`latest`]).
pub fn in_range(t: &Timestamp) -> bool {
    *t >= EARLIEST && *t <= latest()
}

/// An RFC 3339 timestamp from outside, bounded (docs/api.md, Bounded values) and truncated to
/// milliseconds. The error is the field's message.
///
/// ```
/// use workbench_domain::time::parse_timestamp;
/// assert!(parse_timestamp("2026-11-22T10:00:00.000Z").is_ok());
/// assert!(parse_timestamp("9999-12-31T23:59:59-01:00").is_err()); // year 10000 in UTC
/// assert!(parse_timestamp("1969-12-31T23:59:59Z").is_err());
/// assert!(parse_timestamp("tomorrow").is_err());
/// ```
pub fn parse_timestamp(text: &str) -> Result<Timestamp, String> {
    let t = DateTime::parse_from_rfc3339(text)
        .map_err(|_| "must be an RFC 3339 timestamp".to_owned())?
        .to_utc()
        .trunc_subsecs(3);
    if in_range(&t) {
        Ok(t)
    } else {
        Err(format!("must be {RANGE_TEXT}"))
    }
}

/// `t + d`, or None when that overflows or leaves the range of [`in_range`]. Never panics.
pub fn checked_after(t: Timestamp, d: Duration) -> Option<Timestamp> {
    t.checked_add_signed(d).filter(in_range)
}

/// `t + d`, held within the range of [`in_range`]: for arithmetic on values that were bounded
/// when accepted but were stored before the bounds existed. Never panics.
pub fn saturating_after(t: Timestamp, d: Duration) -> Timestamp {
    match t.checked_add_signed(d) {
        Some(t) => t.clamp(EARLIEST, latest()),
        None if d < Duration::zero() => EARLIEST,
        None => latest(),
    }
}

/// The source of the current time for services and repositories. The server's adapter
/// answers the database's time, so that every replica decides leases, due times and deadlines
/// alike (docs/operations.md, Clocks; docs/architecture.md, Time, leases and fencing).
#[cfg_attr(feature = "mock", mockall::automock)]
pub trait Clock: Send + Sync {
    /// The current instant, truncated to milliseconds.
    fn now(&self) -> Timestamp;
}

/// The host's clock, truncated to milliseconds. The admin commands, which decide nothing
/// shared, use it as it is; the server's database clock measures its offset from it.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Timestamp {
        Utc::now().trunc_subsecs(3)
    }
}
