//! `workbench config check`: the configuration as the process would use it, by TOML key, with
//! every secret masked (contract §17).

use secrecy::ExposeSecret;
use serde_json::{json, Value};

use super::{LogFormat, Settings};

/// A database URL with its password replaced by `****`.
fn masked_url(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    let Some((userinfo, host)) = rest.split_once('@') else {
        return url.to_owned();
    };
    match userinfo.split_once(':') {
        Some((user, _)) => format!("{scheme}://{user}:****@{host}"),
        None => url.to_owned(),
    }
}

/// A secret: whether it is set, never its value.
fn set(secret: Option<&secrecy::SecretString>) -> Value {
    match secret {
        Some(_) => json!("(set)"),
        None => Value::Null,
    }
}

impl Settings {
    /// Every setting by its TOML key, as this process would use it; secrets masked (a
    /// password in the database URL as `****`, a key or token as `(set)`, the secret key by
    /// its key id).
    pub fn effective(&self) -> Value {
        let secret_key = self.secret_key.as_ref().map(|key| {
            adapters_diesel::SecretBox::new(key.expose_secret(), &[])
                .map(|b| format!("(set, key id {})", b.key_id()))
                .unwrap_or_else(|_| "(set)".to_owned())
        });
        let rate = |r: Option<api_actix::Rate>| r.map_or("off".to_owned(), |r| r.to_string());
        let mut shown = json!({
            "listen": self.listen,
            "database_url": masked_url(self.database_url.expose_secret()),
            "database_pool_size": self.database_pool_size,
            "database_request_timeout": format!("{}ms", self.database_waits.request.as_millis()),
            "database_tcp_timeout": format!("{}ms", self.database_waits.tcp.as_millis()),
            "database_pool_timeout": format!("{}ms", self.database_waits.pool.as_millis()),
            "database_statement_timeout": format!("{}ms",
                self.database_waits.statement.as_millis()),
            "database_wait": format!("{}ms", self.database_wait.as_millis()),
            "log_format": match self.log_format { LogFormat::Text => "text",
                LogFormat::Json => "json" },
            "log_filter": self.log_filter,
            "workers": self.workers,
            "shutdown_timeout_seconds": self.shutdown_timeout_seconds,
            "shutdown_drain_seconds": self.shutdown_drain_seconds,
            "data_dir": self.data_dir.as_ref().map(|d| d.display().to_string()),
            "public_url": self.public_url,
            "sqlite_synchronous": match self.sqlite_synchronous {
                adapters_diesel::Synchronous::Full => "full",
                adapters_diesel::Synchronous::Normal => "normal",
            },
            "min_free_disk": self.min_free_disk,
            "engine_lease_seconds": self.engine_lease_seconds,
            "request_body_timeout": format!("{}ms", self.request_body_timeout.as_millis()),
            "secret_key": secret_key,
            "previous_secret_keys": self.previous_secret_keys.len(),
            "metrics_token": set(self.metrics_token.as_ref()),
            "webhook_allow_cidrs": self.webhook_allow_cidrs.text,
            "webhook_retry_schedule": self.webhook_retry_schedule.text,
            "webhook_concurrency": self.webhook_concurrency,
            "webhook_lease_seconds": self.webhook_lease_seconds,
            "push_retry_schedule": self.push_retry_schedule.text,
            "fcm_url": self.push_urls.fcm,
            "google_token_url": self.push_urls.google_token,
            "apns_url": self.push_urls.apns,
            "apns_sandbox_url": self.push_urls.apns_sandbox,
            "rate_limit_key": rate(self.rate_limits.key),
            "rate_limit_token": rate(self.rate_limits.token),
            "migrate": self.migrate,
            "trusted_proxies": self.trusted_proxies.to_string(),
            "retention": self.retention_default.to_string(),
            "retention_cards": self.retention.cards.to_string(),
            "retention_invocations": self.retention.invocations.to_string(),
            "retention_events": self.retention.events.to_string(),
            "retention_deliveries": self.retention.deliveries.to_string(),
            "unknown_variables": self.unknown_variables,
        });
        // Beside the others: one macro call more would pass the macro's recursion limit.
        shown["rate_limit_user"] = Value::from(rate(self.rate_limits.user));
        shown
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests_support::env;
    use super::*;

    #[test]
    fn the_effective_configuration_masks_every_secret() {
        let s = Settings::load(
            None,
            env(&[
                (
                    "WORKBENCH_DATABASE_URL",
                    "postgres://app:hunter2-password@db:5432/workbench",
                ),
                (
                    "WORKBENCH_SECRET_KEY",
                    "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=",
                ),
                ("WORKBENCH_METRICS_TOKEN", "a-metrics-token-of-some-length"),
                ("WORKBENCH_LISTN", "0.0.0.0:1"),
            ]),
        )
        .expect("load");
        let shown = s.effective();
        let text = shown.to_string();
        for secret in ["hunter2-password", "AAECAwQF", "a-metrics-token"] {
            assert!(!text.contains(secret), "{secret} in {text}");
        }
        assert_eq!(
            shown["database_url"],
            "postgres://app:****@db:5432/workbench"
        );
        assert!(shown["secret_key"]
            .as_str()
            .is_some_and(|k| k.starts_with("(set, key id ")));
        assert_eq!(shown["metrics_token"], "(set)");
        assert_eq!(shown["rate_limit_key"], "200/s");
        assert_eq!(shown["unknown_variables"], json!(["WORKBENCH_LISTN"]));
        // Every setting is shown: the keys are the configuration file's.
        for variable in super::super::help::known_variables() {
            let key = super::super::sources::key_of(&variable).expect("a key");
            assert!(shown.get(&key).is_some(), "{key} missing from {text}");
        }
    }
}
