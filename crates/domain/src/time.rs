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

/// An ISO 8601 duration: `P[nY][nM][nW][nD][T[nH][nM][nS]]` with whole numbers (seconds may
/// have a fraction, kept to milliseconds). Years are 365 days and months 30 (a card expiry, not
/// a calendar). None for anything else, and for a total past chrono's range: the arithmetic is
/// checked, so no text can make it panic. Callers bound the result ([`crate::time::MAX_DURATION`]).
///
/// ```
/// use workbench_domain::trigger::request::parse_duration;
/// assert_eq!(parse_duration("PT1M30S"), Some(chrono::Duration::seconds(90)));
/// assert_eq!(parse_duration("P290000000000000Y"), None);
/// assert_eq!(parse_duration("1D"), None);
/// ```
pub fn parse_duration(text: &str) -> Option<Duration> {
    let rest = text.strip_prefix('P')?;
    if rest.is_empty() {
        return None;
    }
    let (date, time) = match rest.split_once('T') {
        Some((_, "")) => return None,
        Some((d, t)) => (d, Some(t)),
        None => (rest, None),
    };
    let mut total_ms: i64 = 0;
    let mut parse_part = |part: &str, units: &[(char, i64)]| -> Option<()> {
        let mut number = String::new();
        let mut last_unit = 0;
        for c in part.chars() {
            if c.is_ascii_digit() || c == '.' {
                number.push(c);
                continue;
            }
            let position = units.iter().position(|(u, _)| *u == c)?;
            if number.is_empty() || position < last_unit {
                return None;
            }
            last_unit = position + 1;
            let ms_per_unit = units[position].1.checked_mul(1_000)?;
            let (whole, fraction) = match number.split_once('.') {
                None => (number.as_str(), ""),
                Some(_) if c != 'S' => return None,
                Some((whole, fraction)) => (whole, fraction),
            };
            if whole.is_empty() || !fraction.bytes().all(|b| b.is_ascii_digit()) {
                return None;
            }
            let whole: i64 = whole.parse().ok()?;
            // Milliseconds of the fraction, rounded half up (`0.0005` is 1 ms).
            let mut digits = fraction.bytes().map(|b| i64::from(b - b'0'));
            let mut millis = 0;
            for _ in 0..3 {
                millis = millis * 10 + digits.next().unwrap_or(0);
            }
            if digits.next().is_some_and(|d| d >= 5) {
                millis += 1;
            }
            let value = whole.checked_mul(ms_per_unit)?.checked_add(millis)?;
            total_ms = total_ms.checked_add(value)?;
            number.clear();
        }
        number.is_empty().then_some(())
    };
    parse_part(
        date,
        &[
            ('Y', 365 * 86_400),
            ('M', 30 * 86_400),
            ('W', 7 * 86_400),
            ('D', 86_400),
        ],
    )?;
    if let Some(time) = time {
        parse_part(time, &[('H', 3_600), ('M', 60), ('S', 1)])?;
    }
    Duration::try_milliseconds(total_ms)
}

/// A signed ISO 8601 duration: [`parse_duration`]'s text with an optional leading `-` (before
/// the instant it moves) or `+`. None for anything else; never panics (chrono's durations are
/// symmetric, so negating one cannot overflow).
///
/// ```
/// use workbench_domain::trigger::request::parse_signed_duration;
/// assert_eq!(parse_signed_duration("-P1D"), Some(chrono::Duration::days(-1)));
/// assert_eq!(parse_signed_duration("+PT1H"), Some(chrono::Duration::hours(1)));
/// assert_eq!(parse_signed_duration("--P1D"), None);
/// ```
pub fn parse_signed_duration(text: &str) -> Option<Duration> {
    match text.strip_prefix('-') {
        Some(rest) => Duration::zero().checked_sub(&parse_duration(rest)?),
        None => parse_duration(text.strip_prefix('+').unwrap_or(text)),
    }
}
