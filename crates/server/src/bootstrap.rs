//! The first `serve` on an empty database hands its operator one credential, in a file only
//! the service's user can read.

use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::Context;
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
    let tmp = dir.join(format!(".{FILE_NAME}.tmp"));
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create(true).truncate(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    let mut file = options
        .open(&tmp)
        .with_context(|| format!("cannot write {}", tmp.display()))?;
    #[cfg(unix)]
    std::fs::set_permissions(&tmp, std::os::unix::fs::PermissionsExt::from_mode(0o600))?;
    file.write_all(serde_json::to_string_pretty(&body)?.as_bytes())?;
    file.write_all(b"\n")?;
    file.sync_all()?;
    std::fs::rename(&tmp, &path).with_context(|| format!("cannot write {}", path.display()))?;
    Ok(path)
}
