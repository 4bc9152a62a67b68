//! The configuration as written, in the file or in the environment: every key optional, read
//! by one serde struct from both layers, which `figment` merges.

use std::path::PathBuf;

use figment::value::{Dict, Map};
use figment::{Metadata, Profile, Provider};
use secrecy::SecretString;
use serde::Deserialize;

use super::sources::{Sources, Whole};

/// The configuration as written, in the file or in the environment: every key optional, each
/// value in the widest type it may be written as, so that a bad one reaches the range check
/// of `Settings::try_from` and is refused there with its name, rather than narrowed first.
/// The file's keys are these fields' names; a variable is `WORKBENCH_` and the key in
/// capitals (see [`variable`]).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct Raw {
    pub(super) listen: Option<String>,
    pub(super) database_url: Option<SecretString>,
    pub(super) database_pool_size: Option<Whole>,
    pub(super) log_format: Option<String>,
    pub(super) log_filter: Option<String>,
    pub(super) workers: Option<Whole>,
    pub(super) shutdown_timeout_seconds: Option<Whole>,
    pub(super) shutdown_drain_seconds: Option<Whole>,
    pub(super) data_dir: Option<PathBuf>,
    pub(super) public_url: Option<String>,
    pub(super) sqlite_synchronous: Option<String>,
    /// A size: a string with a unit (`"128MiB"`) or a number of bytes.
    pub(super) min_free_disk: Option<Whole>,
    pub(super) engine_lease_seconds: Option<Whole>,
    pub(super) database_request_timeout: Option<String>,
    pub(super) database_tcp_timeout: Option<String>,
    pub(super) database_pool_timeout: Option<String>,
    pub(super) database_statement_timeout: Option<String>,
    pub(super) database_wait: Option<String>,
    pub(super) request_body_timeout: Option<String>,
    pub(super) rate_limit_key: Option<String>,
    pub(super) migrate: Option<Switch>,
    pub(super) trusted_proxies: Option<String>,
    pub(super) rate_limit_token: Option<String>,
    pub(super) rate_limit_user: Option<String>,
    pub(super) secret_key: Option<SecretString>,
    pub(super) previous_secret_keys: Option<Keys>,
    pub(super) metrics_token: Option<SecretString>,
    pub(super) webhook_allow_cidrs: Option<String>,
    pub(super) webhook_retry_schedule: Option<String>,
    pub(super) webhook_concurrency: Option<Whole>,
    pub(super) webhook_lease_seconds: Option<Whole>,
    pub(super) push_retry_schedule: Option<String>,
    pub(super) fcm_url: Option<String>,
    pub(super) google_token_url: Option<String>,
    pub(super) apns_url: Option<String>,
    pub(super) apns_sandbox_url: Option<String>,
    pub(super) retention: Option<String>,
    pub(super) retention_cards: Option<String>,
    pub(super) retention_invocations: Option<String>,
    pub(super) retention_events: Option<String>,
    pub(super) retention_deliveries: Option<String>,
}

/// A switch as written: a TOML boolean, or text (`true`, `false`, `1`, `0`, `yes`, `no`).
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub(super) enum Switch {
    Bool(bool),
    Text(String),
}

/// Keys being rotated out: a TOML array, or a comma-separated variable.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub(super) enum Keys {
    List(Vec<SecretString>),
    Text(SecretString),
}

/// The `WORKBENCH_*` variables, as a layer over the file: each value the text it was set to
/// (figment's own environment provider guesses types, so `8` would be a number and ` 8` would
/// lose its space before the range check saw it).
pub(super) struct Environment(pub(super) Dict);

impl Provider for Environment {
    fn metadata(&self) -> Metadata {
        Metadata::named("WORKBENCH_* environment variables")
    }

    fn data(&self) -> Result<Map<Profile, Dict>, figment::Error> {
        Ok(Profile::Default.collect(self.0.clone()))
    }
}

/// The two layers read, and which keys the environment set.
pub(super) struct Layered {
    pub(super) raw: Raw,
    pub(super) from_environment: Sources,
}
