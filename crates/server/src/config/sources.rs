//! Where a setting came from: the environment variable it is read from, which keys the
//! environment set, and a number as either source writes it.

use std::collections::BTreeSet;

use serde::Deserialize;

/// A whole number as written: a TOML integer, or text (every environment variable is text).
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub(super) enum Whole {
    /// A TOML integer.
    Number(i64),
    /// Text.
    Text(String),
}

/// A setting's environment variable: `WORKBENCH_` and its key in capitals, but for two
/// spelled otherwise.
pub(super) fn variable(key: &str) -> String {
    match key {
        "log_filter" => "WORKBENCH_LOG".into(),
        "previous_secret_keys" => "WORKBENCH_SECRET_KEY_PREVIOUS".into(),
        key => format!("WORKBENCH_{}", key.to_ascii_uppercase()),
    }
}

/// The key of a `WORKBENCH_*` variable ([`variable`] reversed), or `None` for other variables
/// (and for the two keys spelled otherwise, which have no variable of their own name).
pub(super) fn key_of(variable: &str) -> Option<String> {
    let rest = variable.strip_prefix("WORKBENCH_")?;
    match rest {
        "LOG" => Some("log_filter".into()),
        "SECRET_KEY_PREVIOUS" => Some("previous_secret_keys".into()),
        "LOG_FILTER" | "PREVIOUS_SECRET_KEYS" => None,
        rest => Some(rest.to_ascii_lowercase()),
    }
}

/// The keys the environment set (the others came from the file, or are defaults): how a bad
/// value is named.
pub(super) struct Sources(pub(super) BTreeSet<String>);

impl Sources {
    /// How a bad value is named: its variable, and its key when it came from the file.
    pub(super) fn name(&self, key: &str) -> String {
        if self.0.contains(key) {
            variable(key)
        } else {
            format!("{} (`{key}` in the configuration file)", variable(key))
        }
    }

    pub(super) fn set_by_environment(&self, key: &str) -> bool {
        self.0.contains(key)
    }
}
