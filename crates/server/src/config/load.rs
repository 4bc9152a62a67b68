//! The layers read: defaults, then the file (`--config`), then the `WORKBENCH_*` variables,
//! each overriding the one before; the variables that are not settings set aside; and the
//! checks that look at several settings at once.

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::path::Path;

use anyhow::{anyhow, bail, Context};
use figment::providers::{Format, Toml};
use figment::value::{Dict, Value};
use figment::Figment;
use secrecy::ExposeSecret;

use super::raw::{Environment, Layered, Raw};
use super::sources::{key_of, Sources};
use super::Settings;

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

    /// The checks of each setting's form that its type alone does not make.
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

/// The variables Kubernetes sets in every pod for a Service named `workbench` (and Docker
/// links for a container of that name): not settings, and not worth a warning.
fn set_by_orchestrator(variable: &str) -> bool {
    variable.starts_with("WORKBENCH_SERVICE_")
        || variable == "WORKBENCH_PORT"
        || variable.starts_with("WORKBENCH_PORT_")
        || variable == "WORKBENCH_NAME"
        || variable.starts_with("WORKBENCH_ENV_")
}
