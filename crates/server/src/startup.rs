//! What `serve` and the admin commands prepare before the application: where the database's
//! files are, the key sealing secrets at rest, the database opened (tried again while
//! unreachable, migrated), and the refusal a start can end in (exit 2).

use std::path::{Path, PathBuf};
use std::time::Duration;

use adapters_diesel::db::DatabaseUrl;
use adapters_diesel::{Database, DatabaseError};
use anyhow::Context;
use secrecy::ExposeSecret;

use crate::config::Settings;
use crate::{files, storage};

/// A start-up the operator must act on before trying again (a full disk): exit code 2.
#[derive(Debug)]
pub struct StartRefused(pub String);

impl std::fmt::Display for StartRefused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for StartRefused {}

/// The directory of the SQLite database file, whose disk the guard watches; None on
/// PostgreSQL.
pub fn sqlite_dir(settings: &Settings) -> anyhow::Result<Option<PathBuf>> {
    let url = DatabaseUrl::parse(settings.database_url.expose_secret())?;
    Ok(url.sqlite_file().as_deref().map(folder_of))
}

/// Connects and migrates on the blocking pool (it may wait for PostgreSQL's migration lock).
/// On SQLite, a disk without room refuses the start (exit 2) with what to do, not with
/// SQLite's bare "disk I/O error".
pub async fn open_database(settings: &Settings) -> anyhow::Result<Database> {
    let url = DatabaseUrl::parse(settings.database_url.expose_secret())?
        .with_synchronous(settings.sqlite_synchronous)
        .with_waits(settings.database_waits);
    let size = settings.database_pool_size;
    let may_migrate = settings.migrate;
    // Contract §17: an unreachable database is tried again for WORKBENCH_DATABASE_WAIT (a
    // database starting beside the service), every second at most.
    let give_up = std::time::Instant::now() + settings.database_wait;
    let opened = loop {
        let url = url.clone();
        let opened =
            tokio::task::spawn_blocking(move || Database::open_with(url, size, may_migrate))
                .await
                .context("database start-up task failed")?;
        match opened {
            Err(DatabaseError::Connect(why)) if std::time::Instant::now() < give_up => {
                tracing::warn!(
                    error = %why,
                    waiting_seconds = give_up
                        .saturating_duration_since(std::time::Instant::now())
                        .as_secs(),
                    "the database is unreachable; trying again (WORKBENCH_DATABASE_WAIT)"
                );
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
            opened => break opened,
        }
    };
    match opened {
        Ok(db) => Ok(db),
        // Contract §17: a schema the binary cannot use is the operator's to resolve (exit 2).
        Err(e @ (DatabaseError::NewerSchema { .. } | DatabaseError::PendingMigrations(_))) => {
            Err(StartRefused(e.to_string()).into())
        }
        Err(e) => {
            if let Some(dir) = sqlite_dir(settings)? {
                let full = storage::free_bytes(&dir).is_ok_and(|free| free < 1 << 20);
                let says = e.to_string();
                if full || says.contains("disk I/O error") || says.contains("disk is full") {
                    if let Some(problem) =
                        storage::start_problem(&dir, settings.min_free_disk.max(1 << 20))
                    {
                        return Err(
                            StartRefused(format!("cannot open the database: {problem}")).into()
                        );
                    }
                }
            }
            Err(anyhow::Error::new(e).context("cannot open the database"))
        }
    }
}

/// Where files "beside the database" go.
pub fn data_dir(settings: &Settings) -> anyhow::Result<PathBuf> {
    if let Some(dir) = &settings.data_dir {
        return Ok(dir.clone());
    }
    let url = DatabaseUrl::parse(settings.database_url.expose_secret())?;
    Ok(url
        .sqlite_file()
        .as_deref()
        .map_or_else(|| PathBuf::from("."), folder_of))
}

/// The key sealing secrets at rest: `WORKBENCH_SECRET_KEY`, else (embedded SQLite only) a key
/// file beside the database, generated on first start with mode 0600.
pub fn secret_box(settings: &Settings) -> anyhow::Result<adapters_diesel::SecretBox> {
    let key = match &settings.secret_key {
        Some(key) => key.expose_secret().to_owned(),
        None => {
            let url = DatabaseUrl::parse(settings.database_url.expose_secret())?;
            if url.sqlite_file().is_none() {
                anyhow::bail!(
                    "WORKBENCH_SECRET_KEY is required with PostgreSQL (base64 of 32 random \
                     bytes, e.g. `openssl rand -base64 32`), and must be the same for every \
                     process sharing the database"
                );
            }
            files::load_or_create_key(&data_dir(settings)?.join("secret.key"))?
        }
    };
    adapters_diesel::SecretBox::new(&key, &settings.previous_keys())
        .map_err(|e| anyhow::anyhow!("the secret key: {e}"))
}

/// The folder of the SQLite file `file`: its parent, or the working directory.
fn folder_of(file: &Path) -> PathBuf {
    match file.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent.to_path_buf(),
        _ => PathBuf::from("."),
    }
}
