//! `workbench`: the service (`serve`, the default) and its admin commands.

mod app;
mod bootstrap;
mod clock;
mod config;
mod files;
mod probe;
mod storage;
mod telemetry;
mod workers;

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use adapters_diesel::db::DatabaseUrl;
use adapters_diesel::{Database, DatabaseError, DieselTenancyRepository};
use anyhow::{anyhow, Context};
use api_actix::{Metrics, ServerOptions};
use clap::{Args, Parser, Subcommand};
use domain::{AuthService, DomainError, EnvironmentGrant, Role, Scope, SystemClock};
use serde_json::json;

use crate::config::Settings;
use secrecy::ExposeSecret;

#[derive(Parser)]
#[command(
    name = "workbench",
    version,
    about = "Folders, Action Flows, webhooks and push notification platforms"
)]
struct Cli {
    /// A TOML configuration file; WORKBENCH_* environment variables override it.
    #[arg(long, global = true, value_name = "FILE")]
    config: Option<PathBuf>,
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Subcommand)]
enum Command {
    /// Run the HTTP service (the default).
    Serve(ServeArgs),
    /// Apply pending database migrations and print `{"applied": [...], "current": "..."}`.
    Migrate {
        #[command(subcommand)]
        command: Option<MigrateCommand>,
    },
    /// Check the configuration and print it as the process would use it, secrets masked.
    Config {
        #[command(subcommand)]
        command: ConfigCommand,
    },
    /// Manage environments.
    Env {
        #[command(subcommand)]
        command: EnvCommand,
    },
    /// Manage API keys.
    Key {
        #[command(subcommand)]
        command: KeyCommand,
    },
    /// Prune history past its retention now (contract §14): one pass, and print the rows
    /// removed per kind as JSON. A pass that another process holds the lease of waits for
    /// nothing: it prints `{"pruned": null}`.
    Prune {
        /// Count what would be removed, removing nothing.
        #[arg(long)]
        dry_run: bool,
    },
    /// Ask the running service for a probe path; exit 0 on 200 (a container health check).
    ///
    /// The address is WORKBENCH_LISTEN's, on loopback when it is 0.0.0.0 or [::]. Prints
    /// {"url", "status"}; exits 1 on any other answer, or none within 3 s. The image has no
    /// shell or curl, so a container runtime's health check runs this.
    Probe {
        /// The path to ask for: /readyz (ready for traffic) or /healthz (the process runs).
        #[arg(default_value = "/readyz")]
        path: String,
    },
}

#[derive(Args, Default)]
struct ServeArgs {
    /// Never apply migrations: with pending ones, exit 2 naming them (as
    /// WORKBENCH_MIGRATE=false does). Run `workbench migrate` first.
    #[arg(long)]
    no_migrate: bool,
}

#[derive(Subcommand)]
enum ConfigCommand {
    /// Validate the settings (exit 2 naming a bad one) and print them by TOML key.
    Check,
}

#[derive(Subcommand)]
enum MigrateCommand {
    /// Print the applied and pending migrations, changing nothing.
    Status,
}

#[derive(Subcommand)]
enum EnvCommand {
    /// Create an environment (and the `default` organisation when there is none).
    Create {
        #[arg(long)]
        name: String,
    },
    /// List the environments of the `default` organisation, oldest first.
    List,
}

#[derive(Subcommand)]
enum KeyCommand {
    /// Create an API key and print its secret (shown once).
    Create(KeyArgs),
    /// List the keys (never a secret), revoked ones included, by client id.
    List {
        /// Only the keys that may use this environment.
        #[arg(long = "env", value_name = "ENV_ID")]
        env: Option<String>,
    },
    /// Revoke a key and its access tokens.
    Revoke {
        /// The key's client id (`key_...`).
        client_id: String,
    },
}

#[derive(Args)]
struct KeyArgs {
    /// An environment the key may use (repeatable).
    #[arg(
        long = "env",
        value_name = "ENV_ID",
        required_unless_present = "all_envs"
    )]
    envs: Vec<String>,
    /// Grant every environment of the organisation, present and future.
    #[arg(long, conflicts_with = "envs")]
    all_envs: bool,
    /// A legacy role: events, workbench or auth (repeatable).
    #[arg(long = "role", value_parser = parse_role)]
    roles: Vec<Role>,
    /// A fine-grained scope, e.g. workbench_folders:read (repeatable).
    #[arg(long = "scope", value_parser = parse_scope)]
    scopes: Vec<Scope>,
    /// A name to recognise the key by.
    #[arg(long)]
    name: Option<String>,
}

fn parse_role(s: &str) -> Result<Role, String> {
    s.parse()
}

fn parse_scope(s: &str) -> Result<Scope, String> {
    s.parse::<Scope>().map_err(|e| {
        let known: Vec<&str> = Scope::ALL.iter().map(|s| s.as_str()).collect();
        format!("{e} (known: {})", known.join(", "))
    })
}

/// mimalloc rather than glibc's allocator: the engine and the CSV hand-over allocate many small
/// short-lived values (JSON, ids, rows), and glibc's `malloc`/`free` took a large share of the
/// server's CPU in profiles.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Transparent huge pages off for this process. mimalloc's heap is one reserved region, and
/// with huge pages each page the process touches in it takes 2 MiB: an idle process held many
/// times the memory of its values, against the idle-RSS goal (docs/benchmarks.md). Without,
/// `/start` and the feed read are level (A/B measured). The `no_thp` build of mimalloc stops it
/// asking for them; this stops a kernel whose setting is `always` from giving them anyway.
fn without_huge_pages() -> std::io::Result<()> {
    #[cfg(target_os = "linux")]
    rustix::thread::disable_transparent_huge_pages(true)?;
    Ok(())
}

/// Reads the configuration, starts the log writer, runs the command on actix's runtime, and
/// prints the command's error last. The log writer outlives the runtime, so that what the
/// runtime's threads log while they end is written too.
fn main() -> std::process::ExitCode {
    let huge_pages = without_huge_pages();
    let cli = cli();
    let settings = match Settings::load(cli.config.as_deref(), config::variables()) {
        Ok(settings) => settings,
        Err(e) => {
            eprintln!("workbench: {e:#}");
            return std::process::ExitCode::from(2);
        }
    };
    let log_writer = telemetry::init(settings.log_format, &settings.log_filter);
    let runtime = actix_web::rt::System::new();
    let ended = runtime.block_on(run(cli, settings, huge_pages));
    drop(runtime);
    // The log lines still waiting are written before the last word.
    drop(log_writer);
    match ended {
        Ended::Exit(code) => code,
        Ended::Done(Ok(())) => std::process::ExitCode::SUCCESS,
        Ended::Done(Err(e)) => {
            eprintln!("workbench: {e:#}");
            if e.downcast_ref::<StartRefused>().is_some() {
                std::process::ExitCode::from(2)
            } else {
                std::process::ExitCode::FAILURE
            }
        }
    }
}

/// How a command ended: with its outcome, or with an exit code of its own (`probe`).
enum Ended {
    Done(anyhow::Result<()>),
    Exit(std::process::ExitCode),
}

async fn run(cli: Cli, settings: Settings, huge_pages: std::io::Result<()>) -> Ended {
    if let Err(e) = huge_pages {
        tracing::warn!(error = %e, "transparent huge pages stay as the kernel sets them");
    }
    for variable in &settings.unknown_variables {
        match config::closest_setting(variable) {
            Some(meant) => tracing::warn!(
                %variable,
                did_you_mean = %meant,
                "not a setting, ignored: did you mean {meant}? (docs/configuration.md lists the \
                    WORKBENCH_* variables)"
            ),
            None => tracing::warn!(
                %variable,
                "not a setting, ignored (docs/configuration.md lists the WORKBENCH_* variables)"
            ),
        }
    }
    let result = match cli.command.unwrap_or(Command::Serve(ServeArgs::default())) {
        Command::Serve(args) => {
            let mut settings = settings;
            if args.no_migrate {
                settings.migrate = false;
            }
            serve(settings).await
        }
        Command::Config {
            command: ConfigCommand::Check,
        } => {
            println!("{}", settings.effective());
            Ok(())
        }
        Command::Migrate { command: None } => migrate(settings).await,
        Command::Migrate {
            command: Some(MigrateCommand::Status),
        } => migrate_status(settings).await,
        Command::Env {
            command: EnvCommand::Create { name },
        } => create_env(settings, &name).await,
        Command::Env {
            command: EnvCommand::List,
        } => list_envs(settings).await,
        Command::Key {
            command: KeyCommand::Create(args),
        } => create_key(settings, args).await,
        Command::Key {
            command: KeyCommand::List { env },
        } => list_keys(settings, env).await,
        Command::Key {
            command: KeyCommand::Revoke { client_id },
        } => revoke_key(settings, &client_id).await,
        Command::Prune { dry_run } => prune(settings, dry_run).await,
        Command::Probe { path } => return Ended::Exit(run_probe(&settings, &path)),
    };
    Ended::Done(result)
}

/// The command line, with every setting listed under `serve --help` (contract §17): its
/// variable, default and meaning, read from docs/configuration.md, so the two cannot differ.
fn cli() -> Cli {
    use clap::{CommandFactory, FromArgMatches};
    let command = Cli::command().mut_subcommand("serve", |serve| {
        serve.after_long_help(config::settings_help())
    });
    let matches = command.get_matches();
    Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit())
}

/// `workbench probe`: prints `{"url", "status"}` and exits 0 on 200, 1 on any other answer
/// or none.
fn run_probe(settings: &Settings, path: &str) -> std::process::ExitCode {
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

/// A start-up the operator must act on before trying again (a full disk): exit code 2.
#[derive(Debug)]
struct StartRefused(String);

impl std::fmt::Display for StartRefused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for StartRefused {}

/// The directory of the SQLite database file, whose disk the guard watches; None on
/// PostgreSQL.
fn sqlite_dir(settings: &Settings) -> anyhow::Result<Option<PathBuf>> {
    let url = DatabaseUrl::parse(settings.database_url.expose_secret())?;
    Ok(url.sqlite_file().map(|file| match file.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent.to_path_buf(),
        _ => PathBuf::from("."),
    }))
}

/// Connects and migrates on the blocking pool (it may wait for PostgreSQL's migration lock).
/// On SQLite, a disk without room refuses the start (exit 2) with what to do, not with
/// SQLite's bare "disk I/O error".
async fn open_database(settings: &Settings) -> anyhow::Result<Database> {
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

/// `workbench migrate`: applies pending migrations (under PostgreSQL's migration lock, so a
/// serving process starting meanwhile waits), refusing a newer schema (exit 2).
async fn migrate(settings: Settings) -> anyhow::Result<()> {
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
async fn migrate_status(settings: Settings) -> anyhow::Result<()> {
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

fn auth_service(db: &Database, clock: Arc<dyn domain::Clock>) -> Arc<AuthService> {
    Arc::new(AuthService::new(
        Arc::new(DieselTenancyRepository::new(db.clone())),
        clock,
    ))
}

/// Domain errors of the admin commands, as one readable line.
fn admin_error(err: DomainError) -> anyhow::Error {
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
async fn prune(settings: Settings, dry_run: bool) -> anyhow::Result<()> {
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

async fn create_env(settings: Settings, name: &str) -> anyhow::Result<()> {
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

async fn create_key(settings: Settings, args: KeyArgs) -> anyhow::Result<()> {
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

async fn list_envs(settings: Settings) -> anyhow::Result<()> {
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
async fn list_keys(settings: Settings, env: Option<String>) -> anyhow::Result<()> {
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

async fn revoke_key(settings: Settings, client_id: &str) -> anyhow::Result<()> {
    let db = open_database(&settings).await?;
    auth_service(&db, Arc::new(SystemClock))
        .revoke_key(client_id)
        .await
        .map_err(admin_error)?;
    println!("{}", json!({"clientId": client_id, "revoked": true}));
    Ok(())
}

/// Where files "beside the database" go.
fn data_dir(settings: &Settings) -> anyhow::Result<PathBuf> {
    if let Some(dir) = &settings.data_dir {
        return Ok(dir.clone());
    }
    let url = DatabaseUrl::parse(settings.database_url.expose_secret())?;
    Ok(match url.sqlite_file().as_deref().and_then(Path::parent) {
        Some(parent) if !parent.as_os_str().is_empty() => parent.to_path_buf(),
        _ => PathBuf::from("."),
    })
}

/// The key sealing secrets at rest: `WORKBENCH_SECRET_KEY`, else (embedded SQLite only) a key
/// file beside the database, generated on first start with mode 0600.
fn secret_box(settings: &Settings) -> anyhow::Result<adapters_diesel::SecretBox> {
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

async fn serve(settings: Settings) -> anyhow::Result<()> {
    let sqlite_dir = sqlite_dir(&settings)?;
    if let Some(dir) = &sqlite_dir {
        if let Some(problem) = storage::start_problem(dir, settings.min_free_disk) {
            return Err(StartRefused(problem).into());
        }
    }
    // Contract §17: what needs no database is checked before it is touched: the data folder
    // (the bootstrap credentials are written there once the key is stored) and the key that
    // seals secrets at rest.
    let data_dir = data_dir(&settings)?;
    files::check_writable(&data_dir).map_err(|e| StartRefused(format!("{e:#}")))?;
    let secrets = Arc::new(secret_box(&settings)?);
    let listener = TcpListener::bind(&settings.listen)
        .with_context(|| format!("cannot listen on {}", settings.listen))?;
    let address = listener.local_addr()?;
    // `/healthz` answers from the first moment, `/readyz` 503, while migrations run.
    let starting = api_actix::build_starting_server(listener.try_clone()?)?;
    let starting_handle = starting.handle();
    let starting_task = actix_web::rt::spawn(starting);
    let db = match open_database(&settings).await {
        Ok(db) => db,
        Err(e) => {
            starting_handle.stop(true).await;
            let _ = starting_task.await;
            return Err(e);
        }
    };
    tracing::info!(backend = ?db.backend(), "database ready");
    let storage = db.storage();
    if let Some(dir) = sqlite_dir {
        // The database file (and its WAL) may have just been created: their directory
        // entries are made durable before anything is acknowledged (contract §18).
        storage::sync_dir(&dir).with_context(|| format!("cannot sync {}", dir.display()))?;
        storage.set_guard(settings.min_free_disk);
        if let Ok(free) = storage::free_bytes(&dir) {
            storage.sampled(free);
        }
        storage::spawn_sampler(dir, storage.clone());
    }
    // Every shared decision on the database's time (contract §19): measured before anything
    // is decided, then every minute.
    let metrics = Metrics::new().context("cannot register metrics")?;
    metrics.build_info(env!("CARGO_PKG_VERSION"), env!("WORKBENCH_COMMIT"));
    let clock = Arc::new(adapters_diesel::DatabaseClock::default());
    clock::track(db.clone(), clock.clone(), {
        let metrics = metrics.clone();
        move |offset_ms| metrics.clock_offset(offset_ms)
    })
    .await;
    let app = app::App::build(
        &settings,
        app::Parts {
            db: db.clone(),
            clock: clock.clone(),
            metrics: metrics.clone(),
            secrets,
            public_url: settings
                .public_url
                .clone()
                .unwrap_or_else(|| format!("http://{address}")),
        },
    )
    .await?;
    if let Some(boot) = app.state.auth.bootstrap().await.map_err(admin_error)? {
        let path = bootstrap::write(&data_dir, &boot)?;
        tracing::info!(
            path = %path.display(),
            environment_id = %boot.environment.id,
            client_id = %boot.key.key.id,
            "empty database: created the default organisation, the development environment and a \
             key with every scope; its secret is in the file"
        );
    }
    let supervisor = app.supervisor();
    let state = app.start_loops(&supervisor);
    let shutting_down = state.shutting_down.clone();
    // Contract §12: other processes' changes of cards reach this one's streams (PostgreSQL).
    let hub = state.hub.clone();
    let stop_listening = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let listener_thread = adapters_diesel::listen_for_feed(
        DatabaseUrl::parse(settings.database_url.expose_secret())?
            .with_waits(settings.database_waits),
        hub.clone(),
        stop_listening.clone(),
    );
    let options = ServerOptions {
        workers: settings.workers,
        shutdown_timeout: Duration::from_secs(settings.shutdown_timeout_seconds),
        body_timeout: settings.request_body_timeout,
    };
    // The starting server hands the listener over only now: `/healthz` answered all along.
    starting_handle.stop(true).await;
    let _ = starting_task.await;
    let server = api_actix::build_server(listener, state, &options)?;
    let handle = server.handle();
    let mut serving = actix_web::rt::spawn(server);
    tracing::info!(%address, "listening on http://{address}");
    // Until a stop signal; should the server end by itself first, its outcome is the
    // process's, and the loops stop with it.
    tokio::select! {
        signalled = stop_signal() => signalled?,
        ended = &mut serving => {
            supervisor.stop(options.shutdown_timeout).await;
            return match ended {
                Ok(result) => result.context("the HTTP server stopped"),
                Err(e) => Err(anyhow!("the HTTP server task ended abnormally: {e}")),
            };
        }
    }
    // Contract §17: not ready at once, so that load balancers stop sending; then, after the
    // drain, the listener closes and in-flight requests finish; then the loops finish what
    // they hold and release it, so another process takes the work over at once.
    shutting_down.store(true, std::sync::atomic::Ordering::Relaxed);
    // Feed streams end now, cleanly: their clients reconnect to a process that stays.
    hub.close_all();
    let drain = Duration::from_secs(settings.shutdown_drain_seconds);
    tracing::info!(
        drain_seconds = drain.as_secs(),
        "stopping: /readyz answers 503; the listener closes after the drain"
    );
    tokio::select! {
        () = tokio::time::sleep(drain) => {}
        // A second signal cuts the drain short.
        _ = stop_signal() => {}
    }
    // The listener closes and the loops stop taking work together, each within the shutdown
    // timeout: the whole stop takes at most the drain plus that timeout.
    tracing::info!("closing the listener and stopping the background loops");
    let ((), stopped) = tokio::join!(handle.stop(true), supervisor.stop(options.shutdown_timeout));
    if !stopped {
        tracing::warn!(
            timeout_seconds = options.shutdown_timeout.as_secs(),
            "background loops still busy after the shutdown timeout; what they hold is taken over \
                when its lease runs out"
        );
    }
    match serving.await {
        Ok(result) => result?,
        Err(e) => tracing::warn!(error = %e, "the HTTP server task ended abnormally"),
    }
    // The listener looks at the flag every 20 ms; one blocked on a hung database is left to
    // end with the process (the stop stays within its bounds, contract §17).
    stop_listening.store(true, std::sync::atomic::Ordering::Relaxed);
    if let Some(thread) = listener_thread {
        let joined = tokio::task::spawn_blocking(move || thread.join());
        if tokio::time::timeout(Duration::from_secs(1), joined)
            .await
            .is_err()
        {
            tracing::warn!("the feed listener did not stop within a second; leaving it");
        }
    }
    tracing::info!("stopped");
    Ok(())
}

/// SIGTERM or SIGINT.
async fn stop_signal() -> anyhow::Result<()> {
    let mut terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .context("cannot watch SIGTERM")?;
    tokio::select! {
        _ = terminate.recv() => {}
        interrupted = tokio::signal::ctrl_c() => interrupted.context("cannot watch SIGINT")?,
    }
    Ok(())
}
