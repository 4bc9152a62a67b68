//! `workbench serve`: the checks made before the database is touched, the database opened
//! while `/healthz` already answers, the application built and its loops started, the
//! listener handed over, and the stop in its order (contract §17).

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use actix_web::dev::ServerHandle;
use actix_web::rt::task::JoinHandle;
use adapters_diesel::db::DatabaseUrl;
use adapters_diesel::{Database, DatabaseClock, SecretBox};
use anyhow::{anyhow, Context};
use api_actix::{FeedHub, Metrics, ServerOptions};
use secrecy::ExposeSecret;

use crate::admin::admin_error;
use crate::app::{App, Parts};
use crate::config::Settings;
use crate::startup::{data_dir, open_database, secret_box, sqlite_dir, StartRefused};
use crate::workers::Supervisor;
use crate::{bootstrap, clock, files, storage};

/// Serves until a stop signal (or until the HTTP server ends by itself), then stops.
pub async fn serve(settings: Settings) -> anyhow::Result<()> {
    let checked = check_before_database(&settings)?;
    let listener = TcpListener::bind(&settings.listen)
        .with_context(|| format!("cannot listen on {}", settings.listen))?;
    let address = listener.local_addr()?;
    // `/healthz` answers from the first moment, `/readyz` 503, while migrations run.
    let starting = Starting::spawn(&listener)?;
    let db = match open_database(&settings).await {
        Ok(db) => db,
        Err(e) => {
            starting.stop().await;
            return Err(e);
        }
    };
    tracing::info!(backend = ?db.backend(), "database ready");
    guard_disk(&db, checked.sqlite_dir, settings.min_free_disk)?;
    let (metrics, clock) = metrics_and_clock(&db).await?;
    let public_url = settings
        .public_url
        .clone()
        .unwrap_or_else(|| format!("http://{address}"));
    let parts = Parts {
        db: db.clone(),
        clock: clock.clone(),
        metrics: metrics.clone(),
        secrets: checked.secrets,
        public_url,
    };
    let app = App::build(&settings, parts).await?;
    write_bootstrap(&app, &checked.data_dir).await?;
    let supervisor = app.supervisor();
    let state = app.start_loops(&supervisor);
    let shutting_down = state.shutting_down.clone();
    // Contract §12: other processes' changes of cards reach this one's streams (PostgreSQL).
    let hub = state.hub.clone();
    let feed = FeedListener::start(&settings, hub.clone())?;
    let options = ServerOptions {
        workers: settings.workers,
        shutdown_timeout: Duration::from_secs(settings.shutdown_timeout_seconds),
        body_timeout: settings.request_body_timeout,
    };
    // The starting server hands the listener over only now: `/healthz` answered all along.
    starting.stop().await;
    let server = api_actix::build_server(listener, state, &options)?;
    let handle = server.handle();
    let mut serving = actix_web::rt::spawn(server);
    tracing::info!(%address, "listening on http://{address}");
    if let Some(ended) = until_stop_signal(&mut serving, &supervisor, &options).await {
        return ended;
    }
    let running = Running {
        drain: Duration::from_secs(settings.shutdown_drain_seconds),
        shutdown_timeout: options.shutdown_timeout,
        shutting_down,
        hub,
        handle,
        serving,
        supervisor,
        feed,
    };
    running.stop().await
}

/// What needs no database, checked before it is touched, and kept for later.
struct Checked {
    /// The folder of the SQLite file, whose disk the guard watches; None on PostgreSQL.
    sqlite_dir: Option<PathBuf>,
    /// Where the bootstrap credentials are written.
    data_dir: PathBuf,
    /// The key sealing secrets at rest.
    secrets: Arc<SecretBox>,
}

/// A disk without room refuses the start (exit 2). Contract §17: what needs no database is
/// checked before it is touched: the data folder (the bootstrap credentials are written there
/// once the key is stored) and the key that seals secrets at rest.
fn check_before_database(settings: &Settings) -> anyhow::Result<Checked> {
    let sqlite_dir = sqlite_dir(settings)?;
    if let Some(dir) = &sqlite_dir {
        if let Some(problem) = storage::start_problem(dir, settings.min_free_disk) {
            return Err(StartRefused(problem).into());
        }
    }
    let data_dir = data_dir(settings)?;
    files::check_writable(&data_dir).map_err(|e| StartRefused(format!("{e:#}")))?;
    let secrets = Arc::new(secret_box(settings)?);
    Ok(Checked {
        sqlite_dir,
        data_dir,
        secrets,
    })
}

/// The server that answers while the database opens: `/healthz` 200, `/readyz` 503.
struct Starting {
    handle: ServerHandle,
    task: JoinHandle<std::io::Result<()>>,
}

impl Starting {
    /// Starts it on a copy of `listener`.
    fn spawn(listener: &TcpListener) -> anyhow::Result<Self> {
        let starting = api_actix::build_starting_server(listener.try_clone()?)?;
        let handle = starting.handle();
        let task = actix_web::rt::spawn(starting);
        Ok(Starting { handle, task })
    }

    /// Stops it, and waits until it has let go of the listener.
    async fn stop(self) {
        self.handle.stop(true).await;
        let _ = self.task.await;
    }
}

/// On SQLite: the database's folder made durable, and the low-disk guard set and started.
fn guard_disk(db: &Database, sqlite_dir: Option<PathBuf>, min_free: u64) -> anyhow::Result<()> {
    let storage = db.storage();
    if let Some(dir) = sqlite_dir {
        // The database file (and its WAL) may have just been created: their directory
        // entries are made durable before anything is acknowledged (contract §18).
        storage::sync_dir(&dir).with_context(|| format!("cannot sync {}", dir.display()))?;
        storage.set_guard(min_free);
        if let Ok(free) = storage::free_bytes(&dir) {
            storage.sampled(free);
        }
        storage::spawn_sampler(dir, storage.clone());
    }
    Ok(())
}

/// The metrics registry, and the clock of every shared decision: the database's time
/// (contract §19), measured before anything is decided, then every minute.
async fn metrics_and_clock(db: &Database) -> anyhow::Result<(Metrics, Arc<DatabaseClock>)> {
    let metrics = Metrics::new().context("cannot register metrics")?;
    metrics.build_info(env!("CARGO_PKG_VERSION"), env!("WORKBENCH_COMMIT"));
    let clock = Arc::new(DatabaseClock::default());
    clock::track(db.clone(), clock.clone(), {
        let metrics = metrics.clone();
        move |offset_ms| metrics.clock_offset(offset_ms)
    })
    .await;
    Ok((metrics, clock))
}

/// An empty database is given its first organisation, environment and key; the key's
/// secret is written to a file in `data_dir`, and the log says where.
async fn write_bootstrap(app: &App, data_dir: &Path) -> anyhow::Result<()> {
    if let Some(boot) = app.state.auth.bootstrap().await.map_err(admin_error)? {
        let path = bootstrap::write(data_dir, &boot)?;
        tracing::info!(
            path = %path.display(),
            environment_id = %boot.environment.id,
            client_id = %boot.key.key.id,
            "empty database: created the default organisation, the development environment and a \
             key with every scope; its secret is in the file"
        );
    }
    Ok(())
}

/// The thread that brings other processes' card changes to this one's streams (PostgreSQL;
/// none on SQLite), and the flag that stops it.
struct FeedListener {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl FeedListener {
    fn start(settings: &Settings, hub: Arc<FeedHub>) -> anyhow::Result<Self> {
        let stop = Arc::new(AtomicBool::new(false));
        let thread = adapters_diesel::listen_for_feed(
            DatabaseUrl::parse(settings.database_url.expose_secret())?
                .with_waits(settings.database_waits),
            hub,
            stop.clone(),
        );
        Ok(FeedListener { stop, thread })
    }

    /// The listener looks at the flag every 20 ms; one blocked on a hung database is left to
    /// end with the process (the stop stays within its bounds, contract §17).
    async fn stop(self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread {
            let joined = tokio::task::spawn_blocking(move || thread.join());
            if tokio::time::timeout(Duration::from_secs(1), joined)
                .await
                .is_err()
            {
                tracing::warn!("the feed listener did not stop within a second; leaving it");
            }
        }
    }
}

/// Waits for a stop signal: None then. Should the server end by itself first, its outcome
/// is the process's, and the loops stop with it: that outcome then.
async fn until_stop_signal(
    serving: &mut JoinHandle<std::io::Result<()>>,
    supervisor: &Supervisor,
    options: &ServerOptions,
) -> Option<anyhow::Result<()>> {
    tokio::select! {
        signalled = stop_signal() => signalled.err().map(Err),
        ended = serving => {
            supervisor.stop(options.shutdown_timeout).await;
            Some(match ended {
                Ok(result) => result.context("the HTTP server stopped"),
                Err(e) => Err(anyhow!("the HTTP server task ended abnormally: {e}")),
            })
        }
    }
}

/// The running service, as the stop needs it.
struct Running {
    drain: Duration,
    shutdown_timeout: Duration,
    shutting_down: Arc<AtomicBool>,
    hub: Arc<FeedHub>,
    handle: ServerHandle,
    serving: JoinHandle<std::io::Result<()>>,
    supervisor: Supervisor,
    feed: FeedListener,
}

impl Running {
    /// Contract §17: not ready at once, so that load balancers stop sending; then, after the
    /// drain, the listener closes and in-flight requests finish; then the loops finish what
    /// they hold and release it, so another process takes the work over at once.
    async fn stop(self) -> anyhow::Result<()> {
        self.shutting_down.store(true, Ordering::Relaxed);
        // Feed streams end now, cleanly: their clients reconnect to a process that stays.
        self.hub.close_all();
        tracing::info!(
            drain_seconds = self.drain.as_secs(),
            "stopping: /readyz answers 503; the listener closes after the drain"
        );
        tokio::select! {
            () = tokio::time::sleep(self.drain) => {}
            // A second signal cuts the drain short.
            _ = stop_signal() => {}
        }
        // The listener closes and the loops stop taking work together, each within the
        // shutdown timeout: the whole stop takes at most the drain plus that timeout.
        tracing::info!("closing the listener and stopping the background loops");
        let ((), stopped) = tokio::join!(
            self.handle.stop(true),
            self.supervisor.stop(self.shutdown_timeout)
        );
        if !stopped {
            tracing::warn!(
                timeout_seconds = self.shutdown_timeout.as_secs(),
                "background loops still busy after the shutdown timeout; what they hold is taken \
                    over when its lease runs out"
            );
        }
        match self.serving.await {
            Ok(result) => result?,
            Err(e) => tracing::warn!(error = %e, "the HTTP server task ended abnormally"),
        }
        self.feed.stop().await;
        tracing::info!("stopped");
        Ok(())
    }
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
