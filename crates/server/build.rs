//! The commit this binary is built from, for `workbench_build_info{commit}` (contract §17):
//! `WORKBENCH_BUILD_COMMIT` when set at build time (a package built outside a git checkout),
//! else `git rev-parse --short HEAD`, else `unknown`. Rebuilt when either changes.

use std::path::{Path, PathBuf};
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-env-changed=WORKBENCH_BUILD_COMMIT");
    let given = std::env::var("WORKBENCH_BUILD_COMMIT").ok();
    let commit = match given.as_deref().map(str::trim) {
        Some(given) if !given.is_empty() => {
            if plain(given) {
                given.to_owned()
            } else {
                println!(
                    "cargo:warning=WORKBENCH_BUILD_COMMIT is not a plain commit name (at most 64 \
                        letters, digits, '.', '-' or '_'); using unknown"
                );
                "unknown".to_owned()
            }
        }
        _ => {
            watch_head();
            git(&["rev-parse", "--short", "HEAD"])
                .filter(|c| plain(c))
                .unwrap_or_else(|| "unknown".to_owned())
        }
    };
    println!("cargo:rustc-env=WORKBENCH_COMMIT={commit}");
}

/// A label value that stays short and plain, whoever set it.
fn plain(commit: &str) -> bool {
    commit.len() <= 64
        && commit
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_'))
}

/// `git args` in this package's folder, its output trimmed, when it succeeds.
fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git")
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_owned())
        .filter(|s| !s.is_empty())
}

/// Builds again when HEAD moves: HEAD itself (a checkout), the branch it names (a commit) and
/// the packed refs. Outside a git checkout, nothing to watch.
fn watch_head() {
    let mut paths = vec![git(&["rev-parse", "--git-path", "HEAD"])];
    if let Some(branch) = git(&["symbolic-ref", "-q", "HEAD"]) {
        paths.push(git(&["rev-parse", "--git-path", &branch]));
    }
    paths.push(git(&["rev-parse", "--git-path", "packed-refs"]));
    for path in paths.into_iter().flatten() {
        let path = absolute(Path::new(&path));
        if path.exists() {
            println!("cargo:rerun-if-changed={}", path.display());
        }
    }
}

fn absolute(path: &Path) -> PathBuf {
    if path.is_absolute() {
        path.to_owned()
    } else {
        Path::new(env!("CARGO_MANIFEST_DIR")).join(path)
    }
}
