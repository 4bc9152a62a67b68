//! The admin commands of `workbench`: migrations, environments, API keys, pruning and the
//! probe a container health check runs. Each prints its outcome as one JSON line.

use std::sync::Arc;
use std::time::Duration;

use adapters_diesel::db::DatabaseUrl;
use adapters_diesel::DatabaseError;
use anyhow::{anyhow, Context};
use domain::{DomainError, EnvironmentGrant, SystemClock};
use secrecy::ExposeSecret;
use serde_json::json;

use crate::app::{self, auth_service};
use crate::cli::KeyArgs;
use crate::config::Settings;
use crate::probe;
use crate::startup::{open_database, StartRefused};

/// `workbench probe`: prints `{"url", "status"}` and exits 0 on 200, 1 on any other answer
/// or none.
pub fn run_probe(settings: &Settings, path: &str) -> std::process::ExitCode {
    let answer = probe::target(&settings.listen).and_then(|address| {
        let status = probe::status(address, path)?;
        Ok((format!("http://{address}{path}"), status))
    });
    match answer {
        Ok((url, status)) => {
            println!("{}", json!({"url": url, "status": status}));
            if status == 200 {
                std::process::ExitCode::SUCCESS
            } else {
                std::process::ExitCode::FAILURE
            }
        }
        Err(e) => {
            eprintln!("workbench: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

/// `workbench migrate`: applies pending migrations (under PostgreSQL's migration lock, so a
/// serving process starting meanwhile waits), refusing a newer schema (exit 2).
pub async fn migrate(settings: Settings) -> anyhow::Result<()> {
    let url = DatabaseUrl::parse(settings.database_url.expose_secret())?
        .with_synchronous(settings.sqlite_synchronous)
        .with_waits(settings.database_waits);
    // As `serve`: an unreachable database is tried again for WORKBENCH_DATABASE_WAIT.
    let give_up = std::time::Instant::now() + settings.database_wait;
    let outcome = loop {
        let url = url.clone();
        let outcome = tokio::task::spawn_blocking(move || adapters_diesel::apply_migrations(&url))
            .await
            .context("migration task failed")?;
        match outcome {
            Err(DatabaseError::Connect(why)) if std::time::Instant::now() < give_up => {
                tracing::warn!(error = %why,
                    "the database is unreachable; trying again (WORKBENCH_DATABASE_WAIT)");
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
            outcome => break outcome,
        }
    };
    let (applied, status) = match outcome {
        Ok(done) => done,
        Err(e @ DatabaseError::NewerSchema { .. }) => {
            return Err(StartRefused(e.to_string()).into())
        }
        Err(e) => return Err(anyhow::Error::new(e)),
    };
    println!(
        "{}",
        json!({"applied": applied, "current": status.current()})
    );
    Ok(())
}

/// `workbench migrate status`: the applied and pending migrations; changes nothing.
pub async fn migrate_status(settings: Settings) -> anyhow::Result<()> {
    let url = DatabaseUrl::parse(settings.database_url.expose_secret())?;
    let status = tokio::task::spawn_blocking(move || adapters_diesel::schema_status(&url))
        .await
        .context("migration status task failed")??;
    println!(
        "{}",
        json!({
            "applied": status.applied,
            "pending": status.pending,
            "newer": status.newer,
            "current": status.current(),
            "latest": status.latest,
        })
    );
    Ok(())
}

/// Domain errors of the admin commands, as one readable line.
pub fn admin_error(err: DomainError) -> anyhow::Error {
    match err {
        DomainError::Validation(errors) => anyhow!(
            "{}",
            errors
                .iter()
                .map(|e| format!("{}: {}", e.field, e.message))
                .collect::<Vec<_>>()
                .join("; ")
        ),
        other => anyhow!(other),
    }
}

/// `workbench prune [--dry-run]`: one pass, on the database's clock.
pub async fn prune(settings: Settings, dry_run: bool) -> anyhow::Result<()> {
    let db = open_database(&settings).await?;
    let clock = Arc::new(adapters_diesel::DatabaseClock::default());
    adapters_diesel::clock::measure(&db, &clock)
        .await
        .context("cannot read the database's clock")?;
    let pruner = app::pruner(&db, clock, settings.retention);
    let counts = pruner.pass(dry_run).await.map_err(admin_error)?;
    let counts = counts.map(|c| {
        c.0.iter()
            .map(|(kind, n)| (kind.as_str().to_owned(), json!(n)))
            .collect::<serde_json::Map<String, serde_json::Value>>()
    });
    println!(
        "{}",
        json!({"dryRun": dry_run, "retention": retention_json(&settings), "pruned": counts})
    );
    Ok(())
}

/// The retention of each kind, as configured.
fn retention_json(settings: &Settings) -> serde_json::Value {
    let r = settings.retention;
    json!({
        "cards": r.cards.to_string(),
        "invocations": r.invocations.to_string(),
        "events": r.events.to_string(),
        "deliveries": r.deliveries.to_string(),
    })
}

pub async fn create_env(settings: Settings, name: &str) -> anyhow::Result<()> {
    let db = open_database(&settings).await?;
    let env = auth_service(&db, Arc::new(SystemClock))
        .create_environment(name)
        .await
        .map_err(admin_error)?;
    println!(
        "{}",
        json!({"organisationId": env.organisation_id, "environmentId": env.id, "name": env.name})
    );
    Ok(())
}

pub async fn create_key(settings: Settings, args: KeyArgs) -> anyhow::Result<()> {
    let db = open_database(&settings).await?;
    let grant = if args.all_envs {
        EnvironmentGrant::All
    } else {
        EnvironmentGrant::Only(args.envs)
    };
    let issued = auth_service(&db, Arc::new(SystemClock))
        .create_key(args.name, args.roles, args.scopes, grant)
        .await
        .map_err(admin_error)?;
    println!(
        "{}",
        json!({
            "clientId": issued.key.id,
            "clientSecret": issued.client_secret,
            "environmentIds": issued.environment_ids,
            "roles": issued.key.access.role_names(),
            "scopes": issued.key.access.scope_names(),
        })
    );
    Ok(())
}

pub async fn list_envs(settings: Settings) -> anyhow::Result<()> {
    let db = open_database(&settings).await?;
    let auth = auth_service(&db, Arc::new(SystemClock));
    let org = auth.default_organisation().await.map_err(admin_error)?;
    let envs = auth
        .list_environments_of(&org.id)
        .await
        .map_err(admin_error)?;
    let envs: Vec<_> = envs
        .into_iter()
        .map(|e| {
            json!({"organisationId": e.organisation_id, "environmentId": e.id, "name": e.name,
            "created": e.created})
        })
        .collect();
    println!("{}", json!({ "data": envs }));
    Ok(())
}

/// `key list`: every key, page after page (a few thousand at most in practice).
pub async fn list_keys(settings: Settings, env: Option<String>) -> anyhow::Result<()> {
    let db = open_database(&settings).await?;
    let auth = auth_service(&db, Arc::new(SystemClock));
    let mut keys = Vec::new();
    let mut after = None;
    loop {
        let page = domain::PageRequest::new(Some(500), after).map_err(admin_error)?;
        let page = auth
            .list_keys(env.as_deref(), page)
            .await
            .map_err(admin_error)?;
        for s in page.items {
            let (all, ids) = s.key.environments.listed();
            keys.push(json!({
                "clientId": s.key.id,
                "organisationId": s.key.organisation_id,
                "name": s.key.name,
                "roles": s.key.access.role_names(),
                "scopes": s.key.access.scope_names(),
                "allEnvironments": all,
                "environmentIds": ids,
                "created": s.key.created,
                "lastUsed": s.last_used,
                "revoked": s.key.revoked,
            }));
        }
        match page.next_after {
            Some(next) => after = Some(next),
            None => break,
        }
    }
    println!("{}", json!({ "data": keys }));
    Ok(())
}

pub async fn revoke_key(settings: Settings, client_id: &str) -> anyhow::Result<()> {
    let db = open_database(&settings).await?;
    auth_service(&db, Arc::new(SystemClock))
        .revoke_key(client_id)
        .await
        .map_err(admin_error)?;
    println!("{}", json!({"clientId": client_id, "revoked": true}));
    Ok(())
}
