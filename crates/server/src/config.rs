//! Configuration: defaults, then an optional TOML file (`--config`), then `WORKBENCH_*`
//! environment variables, each overriding the one before. One serde struct (`raw::Raw`) reads
//! both layers, merged by `figment`; [`Settings`] is made from it once, at start, by
//! `TryFrom`, which range-checks each value in the type it was read as and names where a bad
//! one came from. Secrets (the database URL, the secret keys) are held as `secrecy` types and
//! never printed.

use std::path::PathBuf;

use secrecy::{ExposeSecret, SecretString};

mod effective;
mod help;
mod load;
mod ranges;
mod raw;
mod sources;
mod values;

pub use help::{closest_setting, settings_help};
pub use load::variables;

/// How logs are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line.
    Json,
}

/// The validated settings. The secrets print as `[REDACTED]`.
#[derive(Clone)]
pub struct Settings {
    pub listen: String,
    /// May hold a password.
    pub database_url: SecretString,
    pub database_pool_size: u32,
    pub log_format: LogFormat,
    pub log_filter: String,
    pub workers: usize,
    pub shutdown_timeout_seconds: u64,
    /// `WORKBENCH_SHUTDOWN_DRAIN_SECONDS` (default 5): after SIGTERM, how long `/readyz`
    /// answers 503 before the listener closes, so that load balancers stop sending first.
    pub shutdown_drain_seconds: u64,
    /// Where `bootstrap-credentials.json` is written: beside the SQLite file, else the
    /// working directory, unless set.
    pub data_dir: Option<PathBuf>,
    /// Base of the addresses the API hands out (`invocationUrl`), without a trailing slash;
    /// `http://` + the bound address when unset.
    pub public_url: Option<String>,
    /// Seconds a worker holds an invocation without progress before another may resume it.
    pub engine_lease_seconds: u64,
    /// `WORKBENCH_SECRET_KEY`: base64 of 32 bytes sealing secrets at rest.
    pub secret_key: Option<SecretString>,
    /// `WORKBENCH_SECRET_KEY_PREVIOUS`: keys being rotated out (open only).
    pub previous_secret_keys: Vec<SecretString>,
    /// CIDRs webhooks may call although private or loopback (`WORKBENCH_WEBHOOK_ALLOW_CIDRS`).
    pub webhook_allow_cidrs: Parsed<adapters_webhook::AddressPolicy>,
    /// `WORKBENCH_WEBHOOK_RETRY_SCHEDULE`, e.g. `5s,5m,30m,2h,5h,10h,10h`.
    pub webhook_retry_schedule: Parsed<domain::retry::RetryPolicy>,
    /// Calls in flight to one subscription from this process (`WORKBENCH_WEBHOOK_CONCURRENCY`).
    pub webhook_concurrency: u32,
    /// Seconds a claimed delivery stays leased (`WORKBENCH_WEBHOOK_LEASE_SECONDS`, default 60):
    /// keep it above the 15 s call timeout.
    pub webhook_lease_seconds: u64,
    /// `WORKBENCH_PUSH_RETRY_SCHEDULE`, e.g. `5s,30s,2m,10m,1h,4h`.
    pub push_retry_schedule: Parsed<domain::retry::RetryPolicy>,
    /// Provider base URLs (`WORKBENCH_FCM_URL`, `WORKBENCH_GOOGLE_TOKEN_URL`,
    /// `WORKBENCH_APNS_URL`, `WORKBENCH_APNS_SANDBOX_URL`): production unless set, so tests and
    /// staging can point them at fakes.
    pub push_urls: adapters_push::ProviderUrls,
    /// `WORKBENCH_SQLITE_SYNCHRONOUS`: `full` (the default: a write acknowledged survives a
    /// power loss) or `normal` (faster; the writes since the last checkpoint may be lost).
    pub sqlite_synchronous: adapters_diesel::Synchronous,
    /// `WORKBENCH_MIN_FREE_DISK` in bytes (default 128 MiB, 0 turns the guard off): below it
    /// on the database's filesystem, new work is refused (SQLite).
    pub min_free_disk: u64,
    /// `WORKBENCH_DATABASE_REQUEST_TIMEOUT` (default 5 s) and `WORKBENCH_DATABASE_TCP_TIMEOUT`
    /// (default 10 s): the bounds of every wait on the database (contract §20).
    pub database_waits: adapters_diesel::Waits,
    /// `WORKBENCH_DATABASE_WAIT` (default 0 s): how long start-up retries a database it cannot
    /// reach before giving up (contract §17).
    pub database_wait: std::time::Duration,
    /// `WORKBENCH_METRICS_TOKEN`: a bearer token that lets clients other than loopback read
    /// `/metrics`; unset, only loopback clients may.
    pub metrics_token: Option<SecretString>,
    /// `WORKBENCH_*` variables that are not settings (typos, most likely), to be logged as a
    /// warning once logging is set up; the ones orchestrators set are left out.
    pub unknown_variables: Vec<String>,
    /// `WORKBENCH_REQUEST_BODY_TIMEOUT` (default 30 s): how long a request's body may take to
    /// arrive before the answer is 408 and the connection closes (contract §16).
    pub request_body_timeout: std::time::Duration,
    /// `WORKBENCH_RATE_LIMIT_KEY` (default `200/s`), `WORKBENCH_RATE_LIMIT_TOKEN` (default
    /// `10/min`) and `WORKBENCH_RATE_LIMIT_USER` (default `20/s`): the per-process rate limits
    /// of contract §16, each with a burst of twice its rate, or `off`.
    pub rate_limits: api_actix::RateLimitOptions,
    /// `WORKBENCH_MIGRATE` (default true): whether `serve` applies pending migrations; false
    /// refuses to start while any are pending (`serve --no-migrate` sets it too).
    pub migrate: bool,
    /// `WORKBENCH_TRUSTED_PROXIES`: CIDRs of the proxies whose `Forwarded` and
    /// `X-Forwarded-For` headers name the client (contract §17); none by default.
    pub trusted_proxies: api_actix::client::TrustedProxies,
    /// `WORKBENCH_RETENTION` (default `365d`) and its per-kind overrides
    /// (`WORKBENCH_RETENTION_CARDS`, `_INVOCATIONS`, `_EVENTS`, `_DELIVERIES`): how long
    /// history is kept once final (contract §14).
    pub retention: domain::retention::RetentionPolicy,
    /// `WORKBENCH_RETENTION` itself: the kinds not set on their own keep history this long.
    pub retention_default: domain::retention::Retention,
}

/// A setting read from text into its type once, as the configuration is read, and kept with
/// the text it was read from (which `config check` prints).
#[derive(Debug, Clone)]
pub struct Parsed<T> {
    /// The text as configured.
    pub text: String,
    /// What it means.
    pub value: T,
}

impl Settings {
    /// The keys being rotated out, exposed for the secret box that opens with them.
    pub fn previous_keys(&self) -> Vec<String> {
        self.previous_secret_keys
            .iter()
            .map(|k| k.expose_secret().to_owned())
            .collect()
    }
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod tests_support {
    pub fn env(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).into(), (*v).into()))
            .collect()
    }
}
