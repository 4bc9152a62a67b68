//! The ranges of numeric and duration settings, checked as each is read, and the syntax of
//! the rate limits.

use std::ops::RangeInclusive;

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

pub(super) const DATABASE_POOL_SIZE: Integer = Integer {
    key: "database_pool_size",
    default: 8,
    range: 1..=256,
};
pub(super) const WORKERS: Integer = Integer {
    key: "workers",
    default: 2,
    range: 1..=256,
};
pub(super) const SHUTDOWN_TIMEOUT_SECONDS: Integer = Integer {
    key: "shutdown_timeout_seconds",
    default: 30,
    range: 0..=3600,
};
pub(super) const SHUTDOWN_DRAIN_SECONDS: Integer = Integer {
    key: "shutdown_drain_seconds",
    default: 5,
    range: 0..=300,
};
pub(super) const ENGINE_LEASE_SECONDS: Integer = Integer {
    key: "engine_lease_seconds",
    default: domain::unit::LEASE_SECONDS as u64,
    range: 1..=3600,
};
pub(super) const WEBHOOK_CONCURRENCY: Integer = Integer {
    key: "webhook_concurrency",
    default: 64,
    range: 1..=1024,
};
pub(super) const WEBHOOK_LEASE_SECONDS: Integer = Integer {
    key: "webhook_lease_seconds",
    default: 60,
    range: 1..=3600,
};

/// A wait: `5s`, `500ms`, `2m` (a whole number with `ms`, `s`, `m` or `h`), within a range.
pub(super) struct Wait {
    key: &'static str,
    default: std::time::Duration,
    range: RangeInclusive<std::time::Duration>,
}

pub(super) const DATABASE_REQUEST_TIMEOUT: Wait = Wait {
    key: "database_request_timeout",
    default: std::time::Duration::from_secs(5),
    range: std::time::Duration::from_millis(100)..=std::time::Duration::from_secs(300),
};
pub(super) const DATABASE_TCP_TIMEOUT: Wait = Wait {
    key: "database_tcp_timeout",
    default: std::time::Duration::from_secs(10),
    range: std::time::Duration::from_secs(2)..=std::time::Duration::from_secs(600),
};

pub(super) const DATABASE_POOL_TIMEOUT: Wait = Wait {
    key: "database_pool_timeout",
    default: std::time::Duration::from_secs(5),
    range: std::time::Duration::from_millis(100)..=std::time::Duration::from_secs(300),
};
pub(super) const DATABASE_STATEMENT_TIMEOUT: Wait = Wait {
    key: "database_statement_timeout",
    default: std::time::Duration::from_secs(30),
    range: std::time::Duration::from_secs(1)..=std::time::Duration::from_secs(86_400),
};
pub(super) const DATABASE_WAIT: Wait = Wait {
    key: "database_wait",
    default: std::time::Duration::ZERO,
    range: std::time::Duration::ZERO..=std::time::Duration::from_secs(3600),
};

pub(super) const REQUEST_BODY_TIMEOUT: Wait = Wait {
    key: "request_body_timeout",
    default: std::time::Duration::from_secs(30),
    range: std::time::Duration::from_secs(1)..=std::time::Duration::from_secs(3600),
};

impl Wait {
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
