//! Configuration: defaults, then an optional TOML file (`--config`), then `WORKBENCH_*`
//! environment variables, each overriding the one before. Validated once, at start.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context};
use serde::Deserialize;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    Text,
    Json,
}

/// The validated settings. `database_url` may hold a password: never log it.
#[derive(Clone)]
pub struct Settings {
    pub listen: String,
    pub database_url: String,
    pub database_pool_size: u32,
    pub log_format: LogFormat,
    pub log_filter: String,
    pub workers: usize,
    pub shutdown_timeout_seconds: u64,
    /// Where `bootstrap-credentials.json` is written: beside the SQLite file, else the
    /// working directory, unless set.
    pub data_dir: Option<PathBuf>,
    /// Base of the addresses the API hands out (`invocationUrl`), without a trailing slash;
    /// `http://` + the bound address when unset.
    pub public_url: Option<String>,
    /// Seconds a worker holds an invocation without progress before another may resume it.
    pub engine_lease_seconds: u64,
    /// `WORKBENCH_SECRET_KEY`: base64 of 32 bytes sealing secrets at rest. Never logged.
    pub secret_key: Option<String>,
    /// `WORKBENCH_SECRET_KEY_PREVIOUS`: comma-separated keys being rotated out (open only).
    pub previous_secret_keys: Vec<String>,
    /// CIDRs webhooks may call although private or loopback (`WORKBENCH_WEBHOOK_ALLOW_CIDRS`).
    pub webhook_allow_cidrs: String,
    /// `WORKBENCH_WEBHOOK_RETRY_SCHEDULE`, e.g. `5s,5m,30m,2h,5h,10h,10h`.
    pub webhook_retry_schedule: String,
    /// Calls in flight to one subscription from this process (`WORKBENCH_WEBHOOK_CONCURRENCY`).
    pub webhook_concurrency: u32,
    /// Seconds a claimed delivery stays leased (`WORKBENCH_WEBHOOK_LEASE_SECONDS`, default 60):
    /// keep it above the 15 s call timeout.
    pub webhook_lease_seconds: u64,
    /// `WORKBENCH_PUSH_RETRY_SCHEDULE`, e.g. `5s,30s,2m,10m,1h,4h`.
    pub push_retry_schedule: String,
    /// Provider base URLs (`WORKBENCH_FCM_URL`, `WORKBENCH_GOOGLE_TOKEN_URL`,
    /// `WORKBENCH_APNS_URL`, `WORKBENCH_APNS_SANDBOX_URL`): production unless set, so tests and
    /// staging can point them at fakes.
    pub push_urls: adapters_push::ProviderUrls,
}

/// The file's shape: every key optional.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileSettings {
    listen: Option<String>,
    database_url: Option<String>,
    database_pool_size: Option<u32>,
    log_format: Option<LogFormat>,
    log_filter: Option<String>,
    workers: Option<usize>,
    shutdown_timeout_seconds: Option<u64>,
    data_dir: Option<PathBuf>,
    public_url: Option<String>,
    engine_lease_seconds: Option<u64>,
    secret_key: Option<String>,
    previous_secret_keys: Option<Vec<String>>,
    webhook_allow_cidrs: Option<String>,
    webhook_retry_schedule: Option<String>,
    webhook_concurrency: Option<u32>,
    webhook_lease_seconds: Option<u64>,
    push_retry_schedule: Option<String>,
    fcm_url: Option<String>,
    google_token_url: Option<String>,
    apns_url: Option<String>,
    apns_sandbox_url: Option<String>,
}

impl Settings {
    pub fn load(file: Option<&Path>, env: impl Fn(&str) -> Option<String>) -> anyhow::Result<Self> {
        let from_file = match file {
            Some(path) => {
                let text = std::fs::read_to_string(path).with_context(|| {
                    format!("cannot read the configuration file {}", path.display())
                })?;
                toml::from_str::<FileSettings>(&text)
                    .with_context(|| format!("invalid configuration file {}", path.display()))?
            }
            None => FileSettings::default(),
        };
        let var = |name: &str| env(name).filter(|v| !v.is_empty());
        let number = |name: &str| -> anyhow::Result<Option<u64>> {
            var(name)
                .map(|v| {
                    v.parse::<u64>()
                        .with_context(|| format!("{name} must be a whole number, got `{v}`"))
                })
                .transpose()
        };
        let log_format = match var("WORKBENCH_LOG_FORMAT").as_deref() {
            Some("text") => Some(LogFormat::Text),
            Some("json") => Some(LogFormat::Json),
            Some(other) => bail!("WORKBENCH_LOG_FORMAT must be `text` or `json`, got `{other}`"),
            None => None,
        };
        let settings = Settings {
            listen: var("WORKBENCH_LISTEN")
                .or(from_file.listen)
                .unwrap_or_else(|| "127.0.0.1:8080".into()),
            database_url: var("WORKBENCH_DATABASE_URL")
                .or(from_file.database_url)
                .unwrap_or_else(|| "sqlite://./workbench.db".into()),
            database_pool_size: number("WORKBENCH_DATABASE_POOL_SIZE")?
                .map(|n| n as u32)
                .or(from_file.database_pool_size)
                .unwrap_or(8),
            log_format: log_format
                .or(from_file.log_format)
                .unwrap_or(LogFormat::Text),
            log_filter: var("WORKBENCH_LOG")
                .or(from_file.log_filter)
                .unwrap_or_else(|| "info".into()),
            workers: number("WORKBENCH_WORKERS")?
                .map(|n| n as usize)
                .or(from_file.workers)
                .unwrap_or(2),
            shutdown_timeout_seconds: number("WORKBENCH_SHUTDOWN_TIMEOUT_SECONDS")?
                .or(from_file.shutdown_timeout_seconds)
                .unwrap_or(30),
            data_dir: var("WORKBENCH_DATA_DIR")
                .map(PathBuf::from)
                .or(from_file.data_dir),
            engine_lease_seconds: number("WORKBENCH_ENGINE_LEASE_SECONDS")?
                .or(from_file.engine_lease_seconds)
                .unwrap_or(30),
            secret_key: var("WORKBENCH_SECRET_KEY").or(from_file.secret_key),
            previous_secret_keys: var("WORKBENCH_SECRET_KEY_PREVIOUS")
                .map(|v| {
                    v.split(',')
                        .map(|k| k.trim().to_owned())
                        .filter(|k| !k.is_empty())
                        .collect()
                })
                .or(from_file.previous_secret_keys)
                .unwrap_or_default(),
            webhook_allow_cidrs: var("WORKBENCH_WEBHOOK_ALLOW_CIDRS")
                .or(from_file.webhook_allow_cidrs)
                .unwrap_or_default(),
            webhook_retry_schedule: var("WORKBENCH_WEBHOOK_RETRY_SCHEDULE")
                .or(from_file.webhook_retry_schedule)
                .unwrap_or_else(|| domain::webhook::DEFAULT_RETRY_SCHEDULE.into()),
            webhook_concurrency: number("WORKBENCH_WEBHOOK_CONCURRENCY")?
                .map(|n| n as u32)
                .or(from_file.webhook_concurrency)
                .unwrap_or(64),
            webhook_lease_seconds: number("WORKBENCH_WEBHOOK_LEASE_SECONDS")?
                .or(from_file.webhook_lease_seconds)
                .unwrap_or(60),
            push_retry_schedule: var("WORKBENCH_PUSH_RETRY_SCHEDULE")
                .or(from_file.push_retry_schedule)
                .unwrap_or_else(|| domain::push::DEFAULT_PUSH_RETRY_SCHEDULE.into()),
            push_urls: {
                let defaults = adapters_push::ProviderUrls::default();
                let url = |name: &str, file: Option<String>, default: String| {
                    var(name)
                        .or(file)
                        .map(|u| u.trim_end_matches('/').to_owned())
                        .unwrap_or(default)
                };
                adapters_push::ProviderUrls {
                    fcm: url("WORKBENCH_FCM_URL", from_file.fcm_url, defaults.fcm),
                    google_token: url(
                        "WORKBENCH_GOOGLE_TOKEN_URL",
                        from_file.google_token_url,
                        defaults.google_token,
                    ),
                    apns: url("WORKBENCH_APNS_URL", from_file.apns_url, defaults.apns),
                    apns_sandbox: url(
                        "WORKBENCH_APNS_SANDBOX_URL",
                        from_file.apns_sandbox_url,
                        defaults.apns_sandbox,
                    ),
                }
            },
            public_url: var("WORKBENCH_PUBLIC_URL")
                .or(from_file.public_url)
                .map(|u| u.trim_end_matches('/').to_owned()),
        };
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
        domain::retry::RetryPolicy::parse(&self.push_retry_schedule)
            .map_err(|e| anyhow::anyhow!("WORKBENCH_PUSH_RETRY_SCHEDULE: {e}"))?;
        if !(1..=3600).contains(&self.engine_lease_seconds) {
            bail!("WORKBENCH_ENGINE_LEASE_SECONDS must be between 1 and 3600");
        }
        if !(1..=256).contains(&self.database_pool_size) {
            bail!("the database pool size must be between 1 and 256");
        }
        if let Some(key) = &self.secret_key {
            adapters_diesel::SecretBox::new(key, &self.previous_secret_keys)
                .map_err(|e| anyhow::anyhow!("WORKBENCH_SECRET_KEY (or _PREVIOUS): {e}"))?;
        }
        adapters_webhook::AddressPolicy::parse(&self.webhook_allow_cidrs)
            .map_err(|e| anyhow::anyhow!("WORKBENCH_WEBHOOK_ALLOW_CIDRS: {e}"))?;
        domain::webhook::RetryPolicy::parse(&self.webhook_retry_schedule)
            .map_err(|e| anyhow::anyhow!("WORKBENCH_WEBHOOK_RETRY_SCHEDULE: {e}"))?;
        if !(1..=3600).contains(&self.webhook_lease_seconds) {
            bail!("WORKBENCH_WEBHOOK_LEASE_SECONDS must be between 1 and 3600");
        }
        if !(1..=1024).contains(&self.webhook_concurrency) {
            bail!("WORKBENCH_WEBHOOK_CONCURRENCY must be between 1 and 1024");
        }
        if !(1..=256).contains(&self.workers) {
            bail!("the number of HTTP workers must be between 1 and 256");
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    fn env(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let map: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| ((*k).into(), (*v).into()))
            .collect();
        move |k| map.get(k).cloned()
    }

    #[test]
    fn defaults_serve_sqlite_on_loopback_8080() {
        let s = Settings::load(None, env(&[])).expect("defaults");
        assert_eq!(s.listen, "127.0.0.1:8080");
        assert_eq!(s.database_url, "sqlite://./workbench.db");
        assert_eq!(s.log_format, LogFormat::Text);
        assert_eq!(s.push_urls, adapters_push::ProviderUrls::default());
    }

    #[test]
    fn environment_overrides_the_file() {
        let dir = tempfile::tempdir().expect("dir");
        let file = dir.path().join("workbench.toml");
        std::fs::write(
            &file,
            "listen = \"127.0.0.1:9000\"\nlog_format = \"json\"\nworkers = 4\n",
        )
        .expect("write");
        let s = Settings::load(Some(&file), env(&[("WORKBENCH_LISTEN", "0.0.0.0:7000")]))
            .expect("load");
        assert_eq!(s.listen, "0.0.0.0:7000");
        assert_eq!(s.log_format, LogFormat::Json);
        assert_eq!(s.workers, 4);
        let s = Settings::load(
            None,
            env(&[("WORKBENCH_PUBLIC_URL", "https://api.example.com/")]),
        )
        .expect("load");
        assert_eq!(s.public_url.as_deref(), Some("https://api.example.com"));
        let s = Settings::load(None, env(&[("WORKBENCH_APNS_URL", "http://127.0.0.1:9/")]))
            .expect("load");
        assert_eq!(s.push_urls.apns, "http://127.0.0.1:9");
        assert_eq!(s.push_urls.fcm, "https://fcm.googleapis.com");
    }

    #[test]
    fn bad_values_are_refused_with_their_name() {
        for (name, value) in [
            ("WORKBENCH_LISTEN", "localhost"),
            ("WORKBENCH_LOG_FORMAT", "xml"),
            ("WORKBENCH_WORKERS", "0"),
            ("WORKBENCH_DATABASE_POOL_SIZE", "many"),
            ("WORKBENCH_PUBLIC_URL", "example.com"),
            ("WORKBENCH_PUBLIC_URL", "ftp://example.com"),
            ("WORKBENCH_SECRET_KEY", "c2hvcnQ="),
            ("WORKBENCH_SECRET_KEY", "not base64"),
            ("WORKBENCH_WEBHOOK_ALLOW_CIDRS", "127.0.0.1"),
            ("WORKBENCH_WEBHOOK_RETRY_SCHEDULE", "5 minutes"),
            ("WORKBENCH_WEBHOOK_CONCURRENCY", "0"),
            ("WORKBENCH_PUSH_RETRY_SCHEDULE", "soon"),
            ("WORKBENCH_FCM_URL", "fcm.example.com"),
            ("WORKBENCH_APNS_SANDBOX_URL", "h2://apns"),
        ] {
            let err = Settings::load(None, env(&[(name, value)]))
                .err()
                .expect("refused");
            let text = format!("{err:#}");
            assert!(
                text.contains(name) || text.contains("between"),
                "{name}: {text}"
            );
        }
        let dir = tempfile::tempdir().expect("dir");
        let file = dir.path().join("bad.toml");
        std::fs::write(&file, "lisen = \"x\"\n").expect("write");
        assert!(
            Settings::load(Some(&file), env(&[])).is_err(),
            "unknown keys are typos"
        );
    }
}
