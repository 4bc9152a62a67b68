//! From the configuration as written to [`Settings`]: each value read in the type it was
//! written as, range-checked, defaulted when unset, and refused with the name of where it came
//! from (its variable, or its key in the file).

use anyhow::{anyhow, bail, Context};
use secrecy::{ExposeSecret, SecretString};

use super::ranges::*;
use super::raw::{Keys, Layered, Switch};
use super::sources::{Sources, Whole};
use super::{LogFormat, Parsed, Settings};

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

impl TryFrom<Layered> for Settings {
    type Error = anyhow::Error;

    /// Every setting in its turn: the first bad one is the one refused.
    fn try_from(layered: Layered) -> anyhow::Result<Self> {
        let Layered {
            raw,
            from_environment,
        } = layered;
        let names = &from_environment;
        let log_format = log_format(names, raw.log_format)?;
        let previous_secret_keys = previous_secret_keys(raw.previous_secret_keys);
        Ok(Settings {
            listen: raw.listen.unwrap_or_else(|| "127.0.0.1:8080".into()),
            database_url: raw.database_url.unwrap_or_else(default_database_url),
            database_pool_size: DATABASE_POOL_SIZE.read(names, raw.database_pool_size)?,
            log_format,
            log_filter: log_filter(names, raw.log_filter)?,
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
            webhook_allow_cidrs: webhook_allow_cidrs(raw.webhook_allow_cidrs)?,
            webhook_retry_schedule: retry_schedule(
                "WORKBENCH_WEBHOOK_RETRY_SCHEDULE",
                raw.webhook_retry_schedule,
                domain::webhook::DEFAULT_RETRY_SCHEDULE,
            )?,
            webhook_concurrency: WEBHOOK_CONCURRENCY.read(names, raw.webhook_concurrency)?,
            webhook_lease_seconds: WEBHOOK_LEASE_SECONDS.read(names, raw.webhook_lease_seconds)?,
            push_retry_schedule: retry_schedule(
                "WORKBENCH_PUSH_RETRY_SCHEDULE",
                raw.push_retry_schedule,
                domain::push::DEFAULT_PUSH_RETRY_SCHEDULE,
            )?,
            push_urls: push_urls([
                raw.fcm_url,
                raw.google_token_url,
                raw.apns_url,
                raw.apns_sandbox_url,
            ]),
            sqlite_synchronous: sqlite_synchronous(names, raw.sqlite_synchronous)?,
            min_free_disk: min_free_disk(names, raw.min_free_disk)?,
            database_waits: adapters_diesel::Waits {
                request: DATABASE_REQUEST_TIMEOUT.read(names, raw.database_request_timeout)?,
                tcp: DATABASE_TCP_TIMEOUT.read(names, raw.database_tcp_timeout)?,
                pool: DATABASE_POOL_TIMEOUT.read(names, raw.database_pool_timeout)?,
                statement: DATABASE_STATEMENT_TIMEOUT
                    .read(names, raw.database_statement_timeout)?,
            },
            database_wait: DATABASE_WAIT.read(names, raw.database_wait)?,
            request_body_timeout: REQUEST_BODY_TIMEOUT.read(names, raw.request_body_timeout)?,
            rate_limits: rate_limits(
                names,
                [
                    raw.rate_limit_key,
                    raw.rate_limit_token,
                    raw.rate_limit_user,
                ],
            )?,
            migrate: migrate(names, raw.migrate)?,
            trusted_proxies: trusted_proxies(names, raw.trusted_proxies)?,
            retention_default: retention(names, "retention", raw.retention.clone(), None)?,
            retention: retention_policy(
                names,
                raw.retention,
                [
                    raw.retention_cards,
                    raw.retention_invocations,
                    raw.retention_events,
                    raw.retention_deliveries,
                ],
            )?,
            unknown_variables: Vec::new(),
        })
    }
}

/// The embedded SQLite database, in the working directory.
fn default_database_url() -> SecretString {
    SecretString::from("sqlite://./workbench.db")
}

/// `text` (the default) or `json`.
fn log_format(names: &Sources, value: Option<String>) -> anyhow::Result<LogFormat> {
    Ok(match value.as_deref() {
        None | Some("text") => LogFormat::Text,
        Some("json") => LogFormat::Json,
        Some(other) => bail!(
            "{} must be `text` or `json`, got `{other}`",
            names.name("log_format")
        ),
    })
}

/// A filter `tracing` reads (`info`, the default, or `warn,workbench=debug`).
fn log_filter(names: &Sources, value: Option<String>) -> anyhow::Result<String> {
    let filter = value.unwrap_or_else(|| "info".into());
    if let Err(e) = tracing_subscriber::EnvFilter::try_new(&filter) {
        bail!(
            "{} is not a log filter (`info`, `warn,workbench=debug`): {e}",
            names.name("log_filter")
        );
    }
    Ok(filter)
}

/// The keys being rotated out: the file's list, or the variable's comma-separated keys.
fn previous_secret_keys(value: Option<Keys>) -> Vec<SecretString> {
    match value {
        None => Vec::new(),
        Some(Keys::List(keys)) => keys,
        Some(Keys::Text(text)) => text
            .expose_secret()
            .split(',')
            .map(str::trim)
            .filter(|k| !k.is_empty())
            .map(SecretString::from)
            .collect(),
    }
}

/// The CIDRs webhooks may call although private or loopback; none unless set.
fn webhook_allow_cidrs(
    value: Option<String>,
) -> anyhow::Result<Parsed<adapters_webhook::AddressPolicy>> {
    Parsed::read(
        "WORKBENCH_WEBHOOK_ALLOW_CIDRS",
        value.unwrap_or_default(),
        adapters_webhook::AddressPolicy::parse,
    )
}

/// The CIDRs of the proxies whose forwarding headers name the client; none unless set.
fn trusted_proxies(
    names: &Sources,
    value: Option<String>,
) -> anyhow::Result<api_actix::client::TrustedProxies> {
    api_actix::client::TrustedProxies::parse(value.as_deref().unwrap_or_default())
        .map_err(|why| anyhow!("{}: {why}", names.name("trusted_proxies")))
}

/// A base URL without its trailing slashes.
fn trimmed(url: String) -> String {
    url.trim_end_matches('/').to_owned()
}

/// A retry schedule (`5s,5m,30m`), else `default`; an error names `variable`.
fn retry_schedule(
    variable: &str,
    value: Option<String>,
    default: &str,
) -> anyhow::Result<Parsed<domain::retry::RetryPolicy>> {
    Parsed::read(
        variable,
        value.unwrap_or_else(|| default.into()),
        domain::retry::RetryPolicy::parse,
    )
}

/// The providers' base URLs (FCM, Google's token endpoint, APNs, APNs' sandbox, in that
/// order), each production's unless set.
fn push_urls(
    [fcm, google_token, apns, apns_sandbox]: [Option<String>; 4],
) -> adapters_push::ProviderUrls {
    let defaults = adapters_push::ProviderUrls::default();
    adapters_push::ProviderUrls {
        fcm: fcm.map(trimmed).unwrap_or(defaults.fcm),
        google_token: google_token.map(trimmed).unwrap_or(defaults.google_token),
        apns: apns.map(trimmed).unwrap_or(defaults.apns),
        apns_sandbox: apns_sandbox.map(trimmed).unwrap_or(defaults.apns_sandbox),
    }
}

/// `full` (the default) or `normal`.
fn sqlite_synchronous(
    names: &Sources,
    value: Option<String>,
) -> anyhow::Result<adapters_diesel::Synchronous> {
    match value {
        None => Ok(adapters_diesel::Synchronous::Full),
        Some(text) => adapters_diesel::Synchronous::parse(&text).with_context(|| {
            format!(
                "{} must be `full` or `normal`, got `{text}`",
                names.name("sqlite_synchronous")
            )
        }),
    }
}

/// A size (see [`parse_size`]), else [`DEFAULT_MIN_FREE_DISK`].
fn min_free_disk(names: &Sources, value: Option<Whole>) -> anyhow::Result<u64> {
    let Some(value) = value else {
        return Ok(DEFAULT_MIN_FREE_DISK);
    };
    let text = match value {
        Whole::Number(n) => n.to_string(),
        Whole::Text(text) => text,
    };
    parse_size(&text).with_context(|| {
        format!(
            "{} must be a size such as `128MiB` or `0` (off), got `{text}`",
            names.name("min_free_disk")
        )
    })
}

/// The rate limits per key, per token request and per user, in that order, each else its
/// default.
fn rate_limits(
    names: &Sources,
    [key, token, user]: [Option<String>; 3],
) -> anyhow::Result<api_actix::RateLimitOptions> {
    let defaults = api_actix::RateLimitOptions::default();
    Ok(api_actix::RateLimitOptions {
        key: rate(names, "rate_limit_key", key, defaults.key)?,
        token: rate(names, "rate_limit_token", token, defaults.token)?,
        user: rate(names, "rate_limit_user", user, defaults.user)?,
    })
}

/// A switch: a TOML boolean, or `true`/`false` (`1`, `yes`, `on`; `0`, `no`, `off`); true
/// unless set.
fn migrate(names: &Sources, value: Option<Switch>) -> anyhow::Result<bool> {
    Ok(match value {
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
    })
}

/// The retention of each kind (cards, invocations, events, deliveries, in that order), else
/// `all` (`WORKBENCH_RETENTION`'s).
fn retention_policy(
    names: &Sources,
    all: Option<String>,
    [cards, invocations, events, deliveries]: [Option<String>; 4],
) -> anyhow::Result<domain::retention::RetentionPolicy> {
    let all = retention(names, "retention", all, None)?;
    Ok(domain::retention::RetentionPolicy {
        cards: retention(names, "retention_cards", cards, Some(all))?,
        invocations: retention(names, "retention_invocations", invocations, Some(all))?,
        events: retention(names, "retention_events", events, Some(all))?,
        deliveries: retention(names, "retention_deliveries", deliveries, Some(all))?,
    })
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
