//! The first `serve` on an empty database hands its operator one credential, in a file only
//! the service's user can read.

use std::path::{Path, PathBuf};

use domain::tenancy::Bootstrap;
use serde_json::json;

pub const FILE_NAME: &str = "bootstrap-credentials.json";

/// Writes the credentials to `dir/bootstrap-credentials.json`, mode 0600, atomically.
pub fn write(dir: &Path, boot: &Bootstrap) -> anyhow::Result<PathBuf> {
    let path = dir.join(FILE_NAME);
    let body = json!({
        "organisationId": boot.organisation.id,
        "environmentId": boot.environment.id,
        "environmentName": boot.environment.name,
        "clientId": boot.key.key.id,
        "clientSecret": boot.key.client_secret,
        "scopes": boot.key.key.access.scope_names(),
        "allEnvironments": true,
    });
    let mut text = serde_json::to_string_pretty(&body)?;
    text.push('\n');
    crate::files::write_private(&path, text.as_bytes(), true)?;
    Ok(path)
}
