//! Files only the service's user can read: the bootstrap credentials and the secret key file.

use std::io::Write;
use std::path::Path;

use anyhow::Context;

/// Writes `bytes` to `path` with mode 0600, atomically: readers see the whole file or none.
/// With `replace` false an existing file is kept and `Ok(false)` returned (two processes
/// racing to create it agree on one content).
pub fn write_private(path: &Path, bytes: &[u8], replace: bool) -> anyhow::Result<bool> {
    let dir = match path.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent,
        _ => Path::new("."),
    };
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("file");
    let tmp = dir.join(format!(".{name}.{}.tmp", std::process::id()));
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create(true).truncate(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    let mut file = options
        .open(&tmp)
        .with_context(|| format!("cannot write {}", tmp.display()))?;
    #[cfg(unix)]
    std::fs::set_permissions(&tmp, std::os::unix::fs::PermissionsExt::from_mode(0o600))?;
    file.write_all(bytes)?;
    file.sync_all()?;
    let outcome = if replace {
        std::fs::rename(&tmp, path).map(|()| true)
    } else {
        // A hard link fails when the target exists: create-if-absent, atomically.
        let linked = match std::fs::hard_link(&tmp, path) {
            Ok(()) => Ok(true),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(false),
            Err(e) => Err(e),
        };
        let _ = std::fs::remove_file(&tmp);
        linked
    };
    let created = outcome.with_context(|| format!("cannot write {}", path.display()))?;
    // The new name is durable before the file is used or announced (contract §18).
    crate::storage::sync_dir(dir).with_context(|| format!("cannot sync {}", dir.display()))?;
    Ok(created)
}

/// The key in `path`, created (32 random bytes, base64) if the file does not exist.
/// Whether files can be created in `dir`: it exists, is a directory, and a file written there
/// (and removed) succeeds. Checked at start, before the database is touched, so that the
/// bootstrap credentials are never stored without their file.
pub fn check_writable(dir: &Path) -> anyhow::Result<()> {
    let meta = std::fs::metadata(dir).with_context(|| {
        format!(
            "the data directory {} does not exist (WORKBENCH_DATA_DIR)",
            dir.display()
        )
    })?;
    if !meta.is_dir() {
        anyhow::bail!(
            "the data directory {} is not a directory (WORKBENCH_DATA_DIR)",
            dir.display()
        );
    }
    let probe = dir.join(format!(".workbench-write-check-{}", std::process::id()));
    std::fs::write(&probe, b"").with_context(|| {
        format!(
            "cannot write in the data directory {} (WORKBENCH_DATA_DIR)",
            dir.display()
        )
    })?;
    let _ = std::fs::remove_file(&probe);
    Ok(())
}

pub fn load_or_create_key(path: &Path) -> anyhow::Result<String> {
    if !path.exists() {
        let key = adapters_diesel::SecretBox::generate_key();
        if write_private(path, format!("{key}\n").as_bytes(), false)? {
            tracing::info!(path = %path.display(),
                "generated the secret key file; back it up with the database");
        }
    }
    let key = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read the secret key file {}", path.display()))?;
    Ok(key.trim().to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_file_is_created_once_private_and_reused() {
        let dir = tempfile::tempdir().expect("dir");
        let path = dir.path().join("secret.key");
        let first = load_or_create_key(&path).expect("created");
        assert_eq!(load_or_create_key(&path).expect("reused"), first);
        assert!(adapters_diesel::SecretBox::new(&first, &[]).is_ok());
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(&path).expect("meta").permissions().mode();
            assert_eq!(mode & 0o777, 0o600);
        }
        assert!(!write_private(&path, b"other", false).expect("kept"));
        assert_eq!(load_or_create_key(&path).expect("kept"), first);
    }
}
