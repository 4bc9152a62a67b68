//! The database's disk (contract §18, SQLite): free space sampled off the request path for
//! the low-disk guard, `/readyz` and `/metrics`, and the start-up check that refuses to start
//! on a full disk or below the guard.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use domain::health::Storage;

/// How often free space is sampled (the contract asks for at least once a second).
const SAMPLE_PERIOD: Duration = Duration::from_millis(500);

/// Free bytes for an unprivileged process on the filesystem holding `dir`.
pub fn free_bytes(dir: &Path) -> std::io::Result<u64> {
    let stat = rustix::fs::statvfs(dir)?;
    Ok(stat.f_bavail.saturating_mul(stat.f_frsize))
}

/// Why the service must not start on `dir`: a full disk, or less free space than the guard.
/// The message names the directory, its free bytes and the setting. With the guard off
/// (`min_free` 0) a report of 0 bytes free is checked with a write, since some file systems
/// (FUSE, network mounts) report 0 and still take writes: only a refused write stops it.
pub fn start_problem(dir: &Path, min_free: u64) -> Option<String> {
    let free = free_bytes(dir).ok()?;
    let shown = dir.canonicalize().unwrap_or_else(|_| dir.to_path_buf());
    // With the guard off the number is not trusted, a write is: only a disk that refuses one
    // is full.
    if free == 0 && (min_free > 0 || !takes_a_write(dir)) {
        return Some(format!(
            "the data directory {} is on a full disk (0 bytes free); free some space \
                (WORKBENCH_MIN_FREE_DISK is {min_free} bytes)",
            shown.display()
        ));
    }
    (free < min_free).then(|| {
        format!(
            "the data directory {} has {free} bytes free, below WORKBENCH_MIN_FREE_DISK \
                ({min_free} bytes); free some space or lower the setting (0 turns it off)",
            shown.display()
        )
    })
}

/// Whether `dir` takes a small durable write: a file of one page, synced, then removed.
fn takes_a_write(dir: &Path) -> bool {
    use std::io::Write;
    let probe = dir.join(".workbench-space-probe");
    let written = std::fs::File::create(&probe)
        .and_then(|mut file| file.write_all(&[0u8; 4096]).and_then(|()| file.sync_all()));
    let _ = std::fs::remove_file(&probe);
    written.is_ok()
}

/// Samples the free space of `dir` into `storage` for as long as the process runs, logging
/// once when the guard trips and once when it clears.
pub fn spawn_sampler(dir: PathBuf, storage: Arc<Storage>) {
    tokio::spawn(async move {
        let mut tripped = false;
        loop {
            let sampled = {
                let dir = dir.clone();
                tokio::task::spawn_blocking(move || free_bytes(&dir)).await
            };
            match sampled {
                Ok(Ok(free)) => storage.sampled(free),
                Ok(Err(e)) => tracing::debug!(error = %e, "cannot read the free disk space"),
                Err(e) => tracing::debug!(error = %e, "free disk space sampler failed"),
            }
            match (tripped, storage.guard_tripped()) {
                (false, true) => tracing::warn!(
                    free_bytes = storage.free_bytes().unwrap_or(0),
                    dir = %dir.display(),
                    "free disk space is below WORKBENCH_MIN_FREE_DISK: new work is refused until \
                        space returns"
                ),
                (true, false) => tracing::info!(
                    free_bytes = storage.free_bytes().unwrap_or(0),
                    "free disk space is above WORKBENCH_MIN_FREE_DISK again: new work is accepted"
                ),
                _ => {}
            }
            tripped = storage.guard_tripped();
            tokio::time::sleep(SAMPLE_PERIOD).await;
        }
    });
}

/// Makes the creation of the files in `dir` durable: its directory entries are fsynced.
pub fn sync_dir(dir: &Path) -> std::io::Result<()> {
    std::fs::File::open(dir)?.sync_all()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_start_below_the_guard_names_the_directory_its_free_bytes_and_the_setting() {
        let dir = tempfile::tempdir().expect("dir");
        let free = free_bytes(dir.path()).expect("statvfs");
        assert!(free > 0);
        assert_eq!(start_problem(dir.path(), 0), None, "the guard off");
        assert!(
            takes_a_write(dir.path()),
            "a folder with room takes a write"
        );
        assert!(
            !dir.path().join(".workbench-space-probe").exists(),
            "the probe is removed"
        );
        assert!(!takes_a_write(&dir.path().join("missing")));
        assert_eq!(start_problem(dir.path(), 1), None);
        let problem = start_problem(dir.path(), u64::MAX).expect("below");
        assert!(problem.contains("WORKBENCH_MIN_FREE_DISK"), "{problem}");
        assert!(problem.contains("bytes free"), "{problem}");
        let shown = dir.path().canonicalize().expect("path");
        assert!(problem.contains(&shown.display().to_string()), "{problem}");
    }
}
