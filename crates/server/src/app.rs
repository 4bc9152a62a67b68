//! The application wired: every repository, service and background loop of `serve`, built from
//! the settings and an open database, so that `serve` only prepares, starts and stops, and a
//! test can build the whole application in the process. [`App::build`] is the composition
//! root: one function per area, in the order their checks, logs and writes come.

use std::sync::Arc;

use adapters_diesel::{Database, SecretBox, Work};
use api_actix::{AppState, Metrics};
use domain::bulk::BulkService;
use domain::cancel::CancelService;
use domain::card::CardService;
use domain::push::PushService;
use domain::retention::{Pruner, RetentionPolicy};
use domain::trigger::waits::Waits;
use domain::trigger::Engine;
use domain::webhook::DeliveryService;
use domain::Clock;

use crate::config::Settings;
use crate::workers::{self, Supervisor};

mod areas;
mod state;

use areas::{upload_key, Areas, Feed, Pushes, Runs, Stores, Tasks, Webhooks, PUSH_TIMEOUT_SECONDS};
pub use state::auth_service;
use state::http_state;

/// What the process runs: the HTTP state, and the services of the background loops.
pub struct App {
    /// What every request handler reaches.
    pub state: AppState,
    loops: Loops,
}

/// The services the background loops drive, and how many of each run.
struct Loops {
    db: Database,
    engine: Arc<Engine>,
    waits: Arc<Waits>,
    cancels: Arc<CancelService>,
    bulk: Arc<BulkService>,
    deliveries: Arc<DeliveryService>,
    pushes: Arc<PushService>,
    webhook_concurrency: u32,
    webhook_lease: chrono::Duration,
    pruner: Arc<Pruner>,
}

/// What the application is built on, prepared by `serve` before: the open database, the
/// shared clock, the metrics registry, the key sealing secrets at rest, and the base URL that
/// answers name.
pub struct Parts {
    /// The open, migrated database.
    pub db: Database,
    /// The clock of every shared decision (the database's, in `serve`).
    pub clock: Arc<dyn Clock>,
    /// The process's metrics registry.
    pub metrics: Metrics,
    /// The key sealing secrets at rest.
    pub secrets: Arc<SecretBox>,
    /// The service's public base URL, without a trailing slash.
    pub public_url: String,
}

impl App {
    /// Wires every repository and service. Seals custom header values an older version stored
    /// in plain text (the one write it makes).
    pub async fn build(settings: &Settings, parts: Parts) -> anyhow::Result<App> {
        let Parts {
            db,
            clock,
            metrics,
            secrets,
            public_url,
        } = parts;
        let engine_lease = lease(settings.engine_lease_seconds);
        let stores = Stores::new(&db, &clock);
        let cards = Arc::new(CardService::new(stores.cards.clone(), clock.clone()));
        let feed = Feed::new(&db, &stores, &clock, settings);
        let runs = Runs::new(&db, &stores, &clock, engine_lease);
        let upload_key = upload_key(&secrets);
        let webhooks = Webhooks::new(&db, settings, &secrets, &clock).await?;
        let pushes = Pushes::new(&db, settings, secrets, &clock)?;
        let tasks = Tasks::new(&db, settings, &stores, &clock, engine_lease, upload_key);
        let areas = Areas {
            stores,
            cards,
            feed,
            runs,
            webhooks,
            pushes,
            tasks,
        };
        let state = http_state(settings, &db, &clock, metrics, public_url, &areas);
        let pruner = Arc::new(pruner(&db, clock, settings.retention));
        Ok(App {
            state,
            loops: Loops {
                db,
                engine: areas.runs.engine,
                waits: areas.runs.waits,
                cancels: areas.tasks.cancels,
                bulk: areas.tasks.bulk,
                deliveries: areas.webhooks.deliveries,
                pushes: areas.pushes.sending,
                webhook_concurrency: settings.webhook_concurrency,
                webhook_lease: lease(settings.webhook_lease_seconds),
                pruner,
            },
        })
    }

    /// A supervisor for this application's loops, reporting to its readiness and metrics.
    pub fn supervisor(&self) -> Supervisor {
        Supervisor::new(self.state.loops.clone(), self.state.metrics.clone())
    }

    /// Starts every background loop under `supervisor`, and gives the HTTP state back.
    pub fn start_loops(self, supervisor: &Supervisor) -> AppState {
        let App { state, loops } = self;
        // Each loop is woken by the work this process's commits queue for it.
        let queued = |work| loops.db.queued(work);
        let engine = || queued(Work::Invocations);
        workers::spawn(supervisor, loops.engine, engine, state.cards.clone(), 2);
        workers::spawn_waits(supervisor, loops.waits, queued(Work::Instances));
        workers::spawn_cancels(supervisor, loops.cancels, queued(Work::Cancels));
        workers::spawn_bulk(supervisor, loops.bulk, queued(Work::CsvTasks));
        workers::spawn_deliveries(
            supervisor,
            loops.deliveries,
            queued(Work::Deliveries),
            loops.webhook_concurrency,
            loops.webhook_lease,
        );
        // The lease outlasts a call's timeout and the saving of its outcome.
        let pushes = queued(Work::Pushes);
        workers::spawn_pushes(
            supervisor,
            loops.pushes,
            pushes,
            lease(4 * PUSH_TIMEOUT_SECONDS),
        );
        workers::spawn_checkpointer(supervisor, loops.db);
        workers::spawn_pruner(supervisor, loops.pruner);
        state
    }
}

/// The pruner of `db` by `policy`, deciding on `clock`, holding the lease under a name of its
/// own (the process's).
pub fn pruner(db: &Database, clock: Arc<dyn Clock>, policy: RetentionPolicy) -> Pruner {
    Pruner::new(
        Arc::new(adapters_diesel::DieselPruneRepository::new(db.clone())),
        clock,
        policy,
        format!(
            "{}-{}",
            std::process::id(),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos())
        ),
    )
}

/// A configured number of seconds as a lease (bounded by its setting's range; held within
/// chrono's range all the same).
pub fn lease(seconds: u64) -> chrono::Duration {
    i64::try_from(seconds)
        .ok()
        .and_then(chrono::Duration::try_seconds)
        .unwrap_or(chrono::Duration::MAX)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use adapters_diesel::testing::TestDatabase;
    use adapters_diesel::DatabaseClock;

    /// The whole application, built in the process on a fresh database of each backend: it
    /// serves, its loops run, and a flow triggered through the API puts a card in the feed.
    async fn builds_serves_and_runs_its_loops(db: TestDatabase, sqlite: bool) {
        let settings = Settings::load(
            None,
            [
                ("WORKBENCH_DATABASE_URL".to_owned(), db.url().to_owned()),
                ("WORKBENCH_RATE_LIMIT_KEY".to_owned(), "off".to_owned()),
            ],
        )
        .expect("settings");
        let url = adapters_diesel::db::DatabaseUrl::parse(db.url()).expect("url");
        let database = tokio::task::spawn_blocking(move || Database::open_with(url, 4, true))
            .await
            .expect("task")
            .expect("database");
        let app = App::build(
            &settings,
            Parts {
                db: database,
                clock: Arc::new(DatabaseClock::default()),
                metrics: Metrics::new().expect("metrics"),
                secrets: Arc::new(SecretBox::new(&SecretBox::generate_key(), &[]).expect("key")),
                public_url: "http://127.0.0.1".to_owned(),
            },
        )
        .await
        .expect("built");
        let boot = app
            .state
            .auth
            .bootstrap()
            .await
            .expect("bootstrap")
            .expect("an empty database is bootstrapped");
        let env = boot.environment.id.clone();
        let bearer = boot.key.client_secret.clone();
        let supervisor = app.supervisor();
        let state = app.start_loops(&supervisor);
        let state_loops = state.loops.clone();
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let address = listener.local_addr().expect("address");
        let options = api_actix::ServerOptions {
            workers: 1,
            shutdown_timeout: Duration::from_secs(1),
            body_timeout: Duration::from_secs(5),
        };
        let server = api_actix::build_server(listener, state, &options).expect("server");
        let handle = server.handle();
        let serving = actix_web::rt::spawn(server);

        let client = reqwest::Client::new();
        let base = format!("http://{address}/v1/{env}");
        let call = |method: reqwest::Method, path: &str, body: serde_json::Value| {
            client
                .request(method, format!("{base}{path}"))
                .bearer_auth(&bearer)
                .json(&body)
                .send()
        };
        let flow = call(
            reqwest::Method::POST,
            "/action-flow",
            serde_json::json!({"name": "Welcome"}),
        )
        .await
        .expect("sent");
        assert_eq!(flow.status(), 201);
        let flow: serde_json::Value = flow.json().await.expect("json");
        let id = flow["data"]["id"].as_str().expect("id").to_owned();
        let config = serde_json::json!({
            "type": "card", "initialSteps": ["s1"],
            "steps": {"s1": {"id": "s1", "type": "create-card",
                "properties": {"cardTemplateId": "t1"}}},
            "cardTemplates": {"t1": {
                "metadata": {"cardName": "Welcome card"},
                "defaultView": {"content": [{"key": "h", "type": "headline",
                    "attributes": {"text": "Hello"}}]}
            }}
        });
        let published = call(
            reqwest::Method::POST,
            &format!("/action-flow/{id}/config/publish"),
            config,
        )
        .await
        .expect("sent");
        assert_eq!(published.status(), 200, "{:?}", published.text().await);
        // Every loop of `serve` is started and registered for readiness.
        let mut expected = vec![
            "bulk",
            "cancel",
            "engine",
            "pruner",
            "push",
            "push-saver",
            "scheduler",
            "waits",
            "webhook",
            "webhook-saver",
        ];
        if sqlite {
            // SQLite's WAL is copied into the database by a loop of its own.
            expected.push("checkpointer");
        }
        expected.sort_unstable();
        let mut names = state_loops.names();
        names.sort_unstable();
        assert_eq!(names, expected);
        // More users than a request runs inline: the engine's loop, started by
        // `start_loops`, turns the trigger into cards.
        let users: Vec<String> = (1..=12).map(|i| format!("u{i}")).collect();
        let started = call(
            reqwest::Method::POST,
            &format!("/action-flow/{id}/start"),
            serde_json::json!({"flows": [{"target": {"type": "user", "targetUserIds": users}}]}),
        )
        .await
        .expect("sent");
        assert!(started.status().is_success(), "{:?}", started.text().await);
        let mut cards = 0;
        for _ in 0..200 {
            let feed: serde_json::Value = call(
                reqwest::Method::GET,
                "/users/u12/cards",
                serde_json::Value::Null,
            )
            .await
            .expect("sent")
            .json()
            .await
            .expect("json");
            cards = feed["data"].as_array().map_or(0, Vec::len);
            if cards > 0 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert_eq!(cards, 1);

        handle.stop(true).await;
        assert!(supervisor.stop(Duration::from_secs(5)).await);
        serving.await.expect("joined").expect("served");
    }

    #[actix_web::test]
    async fn builds_serves_and_runs_its_loops_on_sqlite() {
        builds_serves_and_runs_its_loops(TestDatabase::sqlite(), true).await;
    }

    #[actix_web::test]
    async fn builds_serves_and_runs_its_loops_on_postgres() {
        if let Some(db) = TestDatabase::postgres() {
            builds_serves_and_runs_its_loops(db, false).await;
        }
    }
}
