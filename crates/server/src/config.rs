//! Configuration: defaults, then an optional TOML file (`--config`), then `WORKBENCH_*`
//! environment variables, each overriding the one before. One serde struct ([`Raw`]) reads
//! both layers, merged by `figment`; [`Settings`] is made from it once, at start, by
//! `TryFrom`, which range-checks each value in the type it was read as and names where a bad
//! one came from. Secrets (the database URL, the secret keys) are held as `secrecy` types and
//! never printed.

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use anyhow::{anyhow, bail, Context};
use figment::providers::{Format, Toml};
use figment::value::{Dict, Map, Value};
use figment::{Figment, Metadata, Profile, Provider};
use secrecy::{ExposeSecret, SecretString};
use serde::Deserialize;

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

/// The low-disk guard's default (contract §18).
pub const DEFAULT_MIN_FREE_DISK: u64 = 128 << 20;

/// A size in bytes: a whole number with an optional unit `B`, `KiB`, `MiB`, `GiB`, `TiB` (or
/// `KB`, `MB`, `GB`, `TB`, `K`, `M`, `G`, `T`, all in powers of 1,024).
pub fn parse_size(text: &str) -> Option<u64> {
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

/// The configuration as written, in the file or in the environment: every key optional, each
/// value in the widest type it may be written as, so that a bad one reaches the range check
/// of [`Settings::try_from`] and is refused there with its name, rather than narrowed first.
/// The file's keys are these fields' names; a variable is `WORKBENCH_` and the key in
/// capitals (see [`variable`]).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct Raw {
    listen: Option<String>,
    database_url: Option<SecretString>,
    database_pool_size: Option<Whole>,
    log_format: Option<String>,
    log_filter: Option<String>,
    workers: Option<Whole>,
    shutdown_timeout_seconds: Option<Whole>,
    shutdown_drain_seconds: Option<Whole>,
    data_dir: Option<PathBuf>,
    public_url: Option<String>,
    sqlite_synchronous: Option<String>,
    /// A size: a string with a unit (`"128MiB"`) or a number of bytes.
    min_free_disk: Option<Whole>,
    engine_lease_seconds: Option<Whole>,
    database_request_timeout: Option<String>,
    database_tcp_timeout: Option<String>,
    database_pool_timeout: Option<String>,
    database_statement_timeout: Option<String>,
    database_wait: Option<String>,
    request_body_timeout: Option<String>,
    rate_limit_key: Option<String>,
    migrate: Option<Switch>,
    trusted_proxies: Option<String>,
    rate_limit_token: Option<String>,
    rate_limit_user: Option<String>,
    secret_key: Option<SecretString>,
    previous_secret_keys: Option<Keys>,
    metrics_token: Option<SecretString>,
    webhook_allow_cidrs: Option<String>,
    webhook_retry_schedule: Option<String>,
    webhook_concurrency: Option<Whole>,
    webhook_lease_seconds: Option<Whole>,
    push_retry_schedule: Option<String>,
    fcm_url: Option<String>,
    google_token_url: Option<String>,
    apns_url: Option<String>,
    apns_sandbox_url: Option<String>,
    retention: Option<String>,
    retention_cards: Option<String>,
    retention_invocations: Option<String>,
    retention_events: Option<String>,
    retention_deliveries: Option<String>,
}

/// A switch as written: a TOML boolean, or text (`true`, `false`, `1`, `0`, `yes`, `no`).
#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum Switch {
    Bool(bool),
    Text(String),
}

/// Keys being rotated out: a TOML array, or a comma-separated variable.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum Keys {
    List(Vec<SecretString>),
    Text(SecretString),
}

/// Every setting's variable, as [`Raw`] knows them (serde names a struct's fields in the error
/// for an unknown one).
fn known_variables() -> Vec<String> {
    let probe: Dict = [("-".to_owned(), Value::from("-"))].into_iter().collect();
    let Err(error) = Figment::from(Environment(probe)).extract::<Raw>() else {
        return Vec::new();
    };
    error
        .into_iter()
        .find_map(|e| match e.kind {
            figment::error::Kind::UnknownField(_, expected) => Some(expected),
            _ => None,
        })
        .unwrap_or_default()
        .iter()
        .map(|key| variable(key))
        .collect()
}

/// The setting `variable` was most likely meant to be: the known variable fewest edits away,
/// if it is close (at most a third of its length).
pub fn closest_setting(variable: &str) -> Option<String> {
    known_variables()
        .into_iter()
        .map(|known| (strsim::levenshtein(variable, &known), known))
        .filter(|(edits, _)| *edits > 0 && *edits <= (variable.len() / 3).max(1))
        .min()
        .map(|(_, known)| known)
}

/// The settings table of docs/configuration.md, compiled in: `serve --help` shows it.
const CONFIGURATION_DOC: &str = include_str!("../../../docs/configuration.md");

/// Every setting as `serve --help` lists it: variable, default and meaning, one block each,
/// from the table of docs/configuration.md.
pub fn settings_help() -> String {
    let mut help = String::from(
        "Settings (environment variables; a TOML file given with --config sets the same keys; \
         docs/configuration.md has them all):\n",
    );
    for line in CONFIGURATION_DOC.lines() {
        let cells: Vec<&str> = line
            .split(" | ")
            .map(|c| c.trim_matches(['|', ' ']))
            .collect();
        let [variable, _key, default, meaning] = cells.as_slice() else {
            continue;
        };
        if !variable.starts_with("`WORKBENCH_") {
            continue;
        }
        let plain = |text: &str| text.replace('`', "");
        help.push_str(&format!(
            "\n  {}  [default: {}]\n      {}\n",
            plain(variable),
            plain(default),
            plain(meaning)
        ));
    }
    help
}

/// The variables Kubernetes sets in every pod for a Service named `workbench` (and Docker
/// links for a container of that name): not settings, and not worth a warning.
fn set_by_orchestrator(variable: &str) -> bool {
    variable.starts_with("WORKBENCH_SERVICE_")
        || variable == "WORKBENCH_PORT"
        || variable.starts_with("WORKBENCH_PORT_")
        || variable == "WORKBENCH_NAME"
        || variable.starts_with("WORKBENCH_ENV_")
}

/// The `WORKBENCH_*` variables, as a layer over the file: each value the text it was set to
/// (figment's own environment provider guesses types, so `8` would be a number and ` 8` would
/// lose its space before the range check saw it).
struct Environment(Dict);

impl Provider for Environment {
    fn metadata(&self) -> Metadata {
        Metadata::named("WORKBENCH_* environment variables")
    }

    fn data(&self) -> Result<Map<Profile, Dict>, figment::Error> {
        Ok(Profile::Default.collect(self.0.clone()))
    }
}

/// The two layers read, and which keys the environment set.
struct Layered {
    raw: Raw,
    from_environment: Sources,
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

impl<T> Parsed<T> {
    /// `text` read by `parse`; an error names `variable`.
    fn read<E: std::fmt::Display>(
        variable: &str,
        text: String,
        parse: impl FnOnce(&str) -> Result<T, E>,
    ) -> anyhow::Result<Self> {
        let value = parse(&text).map_err(|e| anyhow!("{variable}: {e}"))?;
        Ok(Parsed { text, value })
    }
}

impl Settings {
    /// Reads the file (when given) and then the `WORKBENCH_*` variables among `vars` (e.g.
    /// `std::env::vars()`); an empty variable counts as unset. Unknown keys in the file are
    /// refused (typos). Unknown `WORKBENCH_*` variables are set aside in
    /// [`Settings::unknown_variables`], to be logged: the process cannot refuse them, because
    /// an orchestrator sets some (Kubernetes gives every pod `WORKBENCH_SERVICE_HOST`,
    /// `WORKBENCH_PORT` and the like when a Service is named `workbench`); those are not
    /// listed at all.
    pub fn load(
        file: Option<&Path>,
        vars: impl IntoIterator<Item = (String, String)>,
    ) -> anyhow::Result<Self> {
        let mut layers = Figment::new();
        if let Some(path) = file {
            let text = std::fs::read_to_string(path).with_context(|| {
                format!("cannot read the configuration file {}", path.display())
            })?;
            let toml = Toml::string(&text);
            Figment::from(&toml)
                .extract::<Raw>()
                .with_context(|| format!("invalid configuration file {}", path.display()))?;
            layers = layers.merge(toml);
        }
        let mut set = Dict::new();
        let mut from_environment = BTreeSet::new();
        let mut unknown_variables = Vec::new();
        for (name, value) in vars {
            if set_by_orchestrator(&name) {
                continue;
            }
            let Some(key) = key_of(&name) else {
                if name.starts_with("WORKBENCH_") {
                    unknown_variables.push(name);
                }
                continue;
            };
            if value.is_empty() {
                continue;
            }
            // A key Raw does not know is not a setting: every value here is text, which each
            // field takes, so extracting it alone fails only for an unknown key.
            let alone: Dict = [(key.clone(), Value::from(value.clone()))]
                .into_iter()
                .collect();
            if Figment::from(Environment(alone)).extract::<Raw>().is_err() {
                unknown_variables.push(name);
                continue;
            }
            set.insert(key.clone(), Value::from(value));
            from_environment.insert(key);
        }
        unknown_variables.sort();
        let environment = Environment(set);
        let raw = layers
            .merge(environment)
            .extract::<Raw>()
            .context("invalid configuration")?;
        let mut settings = Settings::try_from(Layered {
            raw,
            from_environment: Sources(from_environment),
        })?;
        settings.unknown_variables = unknown_variables;
        settings.validate()?;
        Ok(settings)
    }

    fn validate(&self) -> anyhow::Result<()> {
        self.listen.parse::<SocketAddr>().with_context(|| {
            format!("WORKBENCH_LISTEN must be host:port, got `{}`", self.listen)
        })?;
        let urls = &self.push_urls;
        for (name, url) in [
            ("WORKBENCH_PUBLIC_URL", self.public_url.as_deref()),
            ("WORKBENCH_FCM_URL", Some(urls.fcm.as_str())),
            (
                "WORKBENCH_GOOGLE_TOKEN_URL",
                Some(urls.google_token.as_str()),
            ),
            ("WORKBENCH_APNS_URL", Some(urls.apns.as_str())),
            (
                "WORKBENCH_APNS_SANDBOX_URL",
                Some(urls.apns_sandbox.as_str()),
            ),
        ] {
            let Some(url) = url else { continue };
            let rest = url
                .strip_prefix("https://")
                .or_else(|| url.strip_prefix("http://"));
            if rest.is_none_or(|host| host.is_empty() || host.contains(char::is_whitespace)) {
                bail!("{name} must be an absolute http(s) URL, got `{url}`");
            }
        }
        if let Some(key) = &self.secret_key {
            adapters_diesel::SecretBox::new(key.expose_secret(), &self.previous_keys())
                .map_err(|e| anyhow!("WORKBENCH_SECRET_KEY (or _PREVIOUS): {e}"))?;
        }
        if let Some(token) = &self.metrics_token {
            if token.expose_secret().chars().count() < 16 {
                bail!("WORKBENCH_METRICS_TOKEN must be at least 16 characters");
            }
        }
        Ok(())
    }

    /// The keys being rotated out, exposed for the secret box that opens with them.
    pub fn previous_keys(&self) -> Vec<String> {
        self.previous_secret_keys
            .iter()
            .map(|k| k.expose_secret().to_owned())
            .collect()
    }
}

/// This process's environment as [`Settings::load`] takes it. A variable whose value is not
/// UTF-8 is read with its bad bytes replaced, so that a `WORKBENCH_*` one is refused visibly.
pub fn variables() -> Vec<(String, String)> {
    std::env::vars_os()
        .filter_map(|(name, value)| {
            let name = name.into_string().ok()?;
            Some((name, value.to_string_lossy().into_owned()))
        })
        .collect()
}

impl TryFrom<Layered> for Settings {
    type Error = anyhow::Error;

    fn try_from(layered: Layered) -> anyhow::Result<Self> {
        let Layered {
            raw,
            from_environment,
        } = layered;
        let names = &from_environment;
        let log_format = match raw.log_format.as_deref() {
            None | Some("text") => LogFormat::Text,
            Some("json") => LogFormat::Json,
            Some(other) => bail!(
                "{} must be `text` or `json`, got `{other}`",
                names.name("log_format")
            ),
        };
        let trimmed = |u: String| u.trim_end_matches('/').to_owned();
        let defaults = adapters_push::ProviderUrls::default();
        let previous_secret_keys = match raw.previous_secret_keys {
            None => Vec::new(),
            Some(Keys::List(keys)) => keys,
            Some(Keys::Text(text)) => text
                .expose_secret()
                .split(',')
                .map(str::trim)
                .filter(|k| !k.is_empty())
                .map(SecretString::from)
                .collect(),
        };
        Ok(Settings {
            listen: raw.listen.unwrap_or_else(|| "127.0.0.1:8080".into()),
            database_url: raw
                .database_url
                .unwrap_or_else(|| SecretString::from("sqlite://./workbench.db")),
            database_pool_size: DATABASE_POOL_SIZE.read(names, raw.database_pool_size)?,
            log_format,
            log_filter: {
                let filter = raw.log_filter.unwrap_or_else(|| "info".into());
                if let Err(e) = tracing_subscriber::EnvFilter::try_new(&filter) {
                    bail!(
                        "{} is not a log filter (`info`, `warn,workbench=debug`): {e}",
                        names.name("log_filter")
                    );
                }
                filter
            },
            workers: WORKERS.read(names, raw.workers)?,
            shutdown_timeout_seconds: SHUTDOWN_TIMEOUT_SECONDS
                .read(names, raw.shutdown_timeout_seconds)?,
            shutdown_drain_seconds: SHUTDOWN_DRAIN_SECONDS
                .read(names, raw.shutdown_drain_seconds)?,
            data_dir: raw.data_dir,
            public_url: raw.public_url.map(trimmed),
            engine_lease_seconds: ENGINE_LEASE_SECONDS.read(names, raw.engine_lease_seconds)?,
            secret_key: raw.secret_key,
            metrics_token: raw.metrics_token,
            previous_secret_keys,
            webhook_allow_cidrs: Parsed::read(
                "WORKBENCH_WEBHOOK_ALLOW_CIDRS",
                raw.webhook_allow_cidrs.unwrap_or_default(),
                adapters_webhook::AddressPolicy::parse,
            )?,
            webhook_retry_schedule: Parsed::read(
                "WORKBENCH_WEBHOOK_RETRY_SCHEDULE",
                raw.webhook_retry_schedule
                    .unwrap_or_else(|| domain::webhook::DEFAULT_RETRY_SCHEDULE.into()),
                domain::retry::RetryPolicy::parse,
            )?,
            webhook_concurrency: WEBHOOK_CONCURRENCY.read(names, raw.webhook_concurrency)?,
            webhook_lease_seconds: WEBHOOK_LEASE_SECONDS.read(names, raw.webhook_lease_seconds)?,
            push_retry_schedule: Parsed::read(
                "WORKBENCH_PUSH_RETRY_SCHEDULE",
                raw.push_retry_schedule
                    .unwrap_or_else(|| domain::push::DEFAULT_PUSH_RETRY_SCHEDULE.into()),
                domain::retry::RetryPolicy::parse,
            )?,
            push_urls: adapters_push::ProviderUrls {
                fcm: raw.fcm_url.map(trimmed).unwrap_or(defaults.fcm),
                google_token: raw
                    .google_token_url
                    .map(trimmed)
                    .unwrap_or(defaults.google_token),
                apns: raw.apns_url.map(trimmed).unwrap_or(defaults.apns),
                apns_sandbox: raw
                    .apns_sandbox_url
                    .map(trimmed)
                    .unwrap_or(defaults.apns_sandbox),
            },
            sqlite_synchronous: match raw.sqlite_synchronous {
                None => adapters_diesel::Synchronous::Full,
                Some(text) => adapters_diesel::Synchronous::parse(&text).with_context(|| {
                    format!(
                        "{} must be `full` or `normal`, got `{text}`",
                        names.name("sqlite_synchronous")
                    )
                })?,
            },
            min_free_disk: match raw.min_free_disk {
                None => DEFAULT_MIN_FREE_DISK,
                Some(value) => {
                    let text = match value {
                        Whole::Number(n) => n.to_string(),
                        Whole::Text(text) => text,
                    };
                    parse_size(&text).with_context(|| {
                        format!(
                            "{} must be a size such as `128MiB` or `0` (off), got `{text}`",
                            names.name("min_free_disk")
                        )
                    })?
                }
            },
            database_waits: adapters_diesel::Waits {
                request: DATABASE_REQUEST_TIMEOUT.read(names, raw.database_request_timeout)?,
                tcp: DATABASE_TCP_TIMEOUT.read(names, raw.database_tcp_timeout)?,
                pool: DATABASE_POOL_TIMEOUT.read(names, raw.database_pool_timeout)?,
                statement: DATABASE_STATEMENT_TIMEOUT
                    .read(names, raw.database_statement_timeout)?,
            },
            database_wait: DATABASE_WAIT.read(names, raw.database_wait)?,
            request_body_timeout: REQUEST_BODY_TIMEOUT.read(names, raw.request_body_timeout)?,
            rate_limits: {
                let defaults = api_actix::RateLimitOptions::default();
                api_actix::RateLimitOptions {
                    key: rate(names, "rate_limit_key", raw.rate_limit_key, defaults.key)?,
                    token: rate(
                        names,
                        "rate_limit_token",
                        raw.rate_limit_token,
                        defaults.token,
                    )?,
                    user: rate(names, "rate_limit_user", raw.rate_limit_user, defaults.user)?,
                }
            },
            migrate: match raw.migrate {
                None => true,
                Some(Switch::Bool(on)) => on,
                Some(Switch::Text(text)) => match text.trim().to_ascii_lowercase().as_str() {
                    "true" | "1" | "yes" | "on" => true,
                    "false" | "0" | "no" | "off" => false,
                    _ => bail!(
                        "{} must be `true` or `false`, got `{text}`",
                        names.name("migrate")
                    ),
                },
            },
            trusted_proxies: api_actix::client::TrustedProxies::parse(
                raw.trusted_proxies.as_deref().unwrap_or_default(),
            )
            .map_err(|why| anyhow!("{}: {why}", names.name("trusted_proxies")))?,
            retention_default: retention(names, "retention", raw.retention.clone(), None)?,
            retention: {
                let all = retention(names, "retention", raw.retention, None)?;
                domain::retention::RetentionPolicy {
                    cards: retention(names, "retention_cards", raw.retention_cards, Some(all))?,
                    invocations: retention(
                        names,
                        "retention_invocations",
                        raw.retention_invocations,
                        Some(all),
                    )?,
                    events: retention(names, "retention_events", raw.retention_events, Some(all))?,
                    deliveries: retention(
                        names,
                        "retention_deliveries",
                        raw.retention_deliveries,
                        Some(all),
                    )?,
                }
            },
            unknown_variables: Vec::new(),
        })
    }
}

/// A retention (`30d`, `off`), else `default` (`WORKBENCH_RETENTION`'s value for a kind),
/// else 365 days.
fn retention(
    names: &Sources,
    key: &str,
    value: Option<String>,
    default: Option<domain::retention::Retention>,
) -> anyhow::Result<domain::retention::Retention> {
    match value {
        None => Ok(default.unwrap_or(domain::retention::DEFAULT)),
        Some(text) => domain::retention::Retention::parse(&text)
            .map_err(|why| anyhow!("{} {why}", names.name(key))),
    }
}

mod ranges;
mod sources;
use ranges::*;
use sources::{key_of, variable, Sources, Whole};

mod effective;

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
