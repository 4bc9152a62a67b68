//! The ranges of numeric and duration settings, checked as each is read, and the syntax of
//! the rate limits and of sizes.

use std::ops::RangeInclusive;
use std::time::Duration;

use anyhow::{anyhow, bail};

use super::sources::{variable, Sources, Whole};

/// An integer setting: its key, its default and the range it must be in
/// (docs/configuration.md). The range keeps every use safe: a lease of at most an hour, in
/// seconds, cannot overflow `chrono::Duration::seconds` nor the time it is added to.
pub(super) struct Integer {
    key: &'static str,
    default: u64,
    range: RangeInclusive<u64>,
}

impl Integer {
    const fn new(key: &'static str, default: u64, range: RangeInclusive<u64>) -> Self {
        Integer {
            key,
            default,
            range,
        }
    }
}

pub(super) const DATABASE_POOL_SIZE: Integer = Integer::new("database_pool_size", 8, 1..=256);
pub(super) const WORKERS: Integer = Integer::new("workers", 2, 1..=256);
pub(super) const SHUTDOWN_TIMEOUT_SECONDS: Integer =
    Integer::new("shutdown_timeout_seconds", 30, 0..=3600);
pub(super) const SHUTDOWN_DRAIN_SECONDS: Integer =
    Integer::new("shutdown_drain_seconds", 5, 0..=300);
pub(super) const ENGINE_LEASE_SECONDS: Integer = Integer::new(
    "engine_lease_seconds",
    domain::unit::LEASE_SECONDS as u64,
    1..=3600,
);
pub(super) const WEBHOOK_CONCURRENCY: Integer = Integer::new("webhook_concurrency", 64, 1..=1024);
pub(super) const WEBHOOK_LEASE_SECONDS: Integer =
    Integer::new("webhook_lease_seconds", 60, 1..=3600);

/// A wait: `5s`, `500ms`, `2m` (a whole number with `ms`, `s`, `m` or `h`), within a range.
pub(super) struct Wait {
    key: &'static str,
    default: Duration,
    range: RangeInclusive<Duration>,
}

/// `n` seconds, as the waits' defaults and ranges are written.
const fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

/// `n` milliseconds, as the waits' defaults and ranges are written.
const fn millis(n: u64) -> Duration {
    Duration::from_millis(n)
}

pub(super) const DATABASE_REQUEST_TIMEOUT: Wait =
    Wait::new("database_request_timeout", secs(5), millis(100)..=secs(300));
pub(super) const DATABASE_TCP_TIMEOUT: Wait =
    Wait::new("database_tcp_timeout", secs(10), secs(2)..=secs(600));
pub(super) const DATABASE_POOL_TIMEOUT: Wait =
    Wait::new("database_pool_timeout", secs(5), millis(100)..=secs(300));
pub(super) const DATABASE_STATEMENT_TIMEOUT: Wait = Wait::new(
    "database_statement_timeout",
    secs(30),
    secs(1)..=secs(86_400),
);
pub(super) const DATABASE_WAIT: Wait =
    Wait::new("database_wait", Duration::ZERO, Duration::ZERO..=secs(3600));
pub(super) const REQUEST_BODY_TIMEOUT: Wait =
    Wait::new("request_body_timeout", secs(30), secs(1)..=secs(3600));

impl Wait {
    const fn new(key: &'static str, default: Duration, range: RangeInclusive<Duration>) -> Self {
        Wait {
            key,
            default,
            range,
        }
    }

    /// The value read, else the default; within the range.
    pub(super) fn read(
        &self,
        names: &Sources,
        value: Option<String>,
    ) -> anyhow::Result<std::time::Duration> {
        let Some(text) = value else {
            return Ok(self.default);
        };
        let from = if names.set_by_environment(self.key) {
            variable(self.key)
        } else {
            self.key.to_owned()
        };
        let (lo, hi) = (self.range.start(), self.range.end());
        domain::retry::parse_delay(text.trim())
            .ok()
            .and_then(|d| d.to_std().ok())
            .filter(|d| self.range.contains(d))
            .ok_or_else(|| {
                anyhow!(
                    "{from} must be a duration from {} to {} such as `5s` or `500ms`, got `{text}`",
                    humane(*lo),
                    humane(*hi)
                )
            })
    }
}

/// A rate limit (`200/s`, `10/min`, `off`), else its default.
pub(super) fn rate(
    names: &Sources,
    key: &str,
    value: Option<String>,
    default: Option<api_actix::Rate>,
) -> anyhow::Result<Option<api_actix::Rate>> {
    match value {
        None => Ok(default),
        Some(text) => {
            api_actix::Rate::parse(&text).map_err(|why| anyhow!("{} {why}", names.name(key)))
        }
    }
}

/// `100ms`, `5s`: how a wait is written.
pub(super) fn humane(d: std::time::Duration) -> String {
    if d.subsec_millis() == 0 {
        format!("{}s", d.as_secs())
    } else {
        format!("{}ms", d.as_millis())
    }
}

impl Integer {
    /// The value read (a variable's text as `u64`, the file's integer as `i64`), else the
    /// default: range-checked in the type it was read as, and only then converted to `T`,
    /// never with `as`, so 4294967304 is refused rather than wrapped to 8. A file's value must
    /// be a TOML integer, not text.
    pub(super) fn read<T: TryFrom<u64>>(
        &self,
        names: &Sources,
        value: Option<Whole>,
    ) -> anyhow::Result<T> {
        let (lo, hi) = (self.range.start(), self.range.end());
        let name = names.name(self.key);
        let value = match value {
            None => self.default,
            Some(Whole::Text(v)) if names.set_by_environment(self.key) => match v.parse::<u64>() {
                Ok(n) if self.range.contains(&n) => n,
                Ok(n) => bail!("{name} must be between {lo} and {hi}, got {n}"),
                Err(_) => bail!("{name} must be a whole number between {lo} and {hi}, got `{v}`"),
            },
            Some(Whole::Text(v)) => {
                bail!("{name} must be a whole number between {lo} and {hi}, got `{v:?}`")
            }
            Some(Whole::Number(n)) => match u64::try_from(n) {
                Ok(n) if self.range.contains(&n) => n,
                _ => bail!("{name} must be between {lo} and {hi}, got {n}"),
            },
        };
        T::try_from(value).map_err(|_| {
            anyhow!("{name} = {value} does not fit this platform (allowed: {lo} to {hi})")
        })
    }
}

/// The low-disk guard's default (contract §18).
pub(super) const DEFAULT_MIN_FREE_DISK: u64 = 128 << 20;

/// A size in bytes: a whole number with an optional unit `B`, `KiB`, `MiB`, `GiB`, `TiB` (or
/// `KB`, `MB`, `GB`, `TB`, `K`, `M`, `G`, `T`, all in powers of 1,024).
pub(super) fn parse_size(text: &str) -> Option<u64> {
    let text = text.trim();
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let number: u64 = number.parse().ok()?;
    let shift = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 0,
        "k" | "kb" | "kib" => 10,
        "m" | "mb" | "mib" => 20,
        "g" | "gb" | "gib" => 30,
        "t" | "tb" | "tib" => 40,
        _ => return None,
    };
    number.checked_mul(1u64 << shift)
}
