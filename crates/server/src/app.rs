//! The application wired: every repository, service and background loop of `serve`, built from
//! the settings and an open database, so that `serve` only prepares, starts and stops, and a
//! test can build the whole application in the process.

use std::sync::Arc;
use std::time::Duration;

use adapters_diesel::{
    Database, DieselCardRepository, DieselEndUserRepository, DieselFlowRepository,
    DieselFolderRepository, DieselHealthProbe, DieselInvocationRepository, DieselSegmentRepository,
    DieselSettingsRepository, DieselStreamRepository, SecretBox, Work,
};
use anyhow::Context;
use api_actix::{AppState, Metrics};
use domain::audience::AudienceService;
use domain::bulk::BulkService;
use domain::cancel::CancelService;
use domain::card::CardService;
use domain::push::PushService;
use domain::retention::{Pruner, RetentionPolicy};
use domain::trigger::{Engine, TriggerService};
use domain::webhook::DeliveryService;
use domain::{Clock, FlowService, FolderService};
use secrecy::ExposeSecret;

use crate::config::Settings;
use crate::workers::{self, Supervisor};

/// The recorder's writing threads for CSV rows on PostgreSQL (docs/scaling.md, CSV tasks on
/// PostgreSQL).
const CSV_WRITERS: usize = 2;

/// A call to FCM, Google's token endpoint or APNs gives up after this.
pub const PUSH_TIMEOUT_SECONDS: u64 = 15;

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
    waits: Arc<domain::trigger::waits::Waits>,
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
        let folders = Arc::new(DieselFolderRepository::new(db.clone()));
        // Flows read in the last second are answered again (every write of this process
        // forgets them): the trigger's hot path reads its flow on every call.
        let flows = Arc::new(domain::flow::RecentFlows::new(
            Arc::new(DieselFlowRepository::new(db.clone())),
            clock.clone(),
        ));
        let users = Arc::new(DieselEndUserRepository::new(db.clone()));
        let segments = Arc::new(DieselSegmentRepository::new(db.clone()));
        let streams = Arc::new(DieselStreamRepository::new(db.clone()));
        let invocations = Arc::new(DieselInvocationRepository::new(db.clone()));
        let card_repo = Arc::new(DieselCardRepository::new(db.clone()));
        let cards = Arc::new(CardService::new(card_repo.clone(), clock.clone()));
        // Contract §12: every commit of card events wakes the streams of their users.
        let hub = Arc::new(api_actix::FeedHub::default());
        db.tell_feed(hub.clone());
        // A stream reads again twice the database's deadline back: an event stamped before a
        // slow commit is not missed (contract §20 bounds how slow).
        let reread = i64::try_from(settings.database_waits.request.as_secs())
            .unwrap_or(i64::MAX)
            .saturating_mul(2);
        let feed = Arc::new(
            domain::feed::FeedService::new(
                Arc::new(adapters_diesel::DieselFeedRepository::new(db.clone())),
                card_repo,
                clock.clone(),
            )
            .with_reread(reread),
        );
        // Contract §21: flow instances that wait, run on as they come due, and read.
        let instance_repo = Arc::new(adapters_diesel::DieselInstanceRepository::new(db.clone()));
        let waits = Arc::new(domain::trigger::waits::Waits::new(
            flows.clone(),
            invocations.clone(),
            instance_repo.clone(),
            streams.clone(),
            clock.clone(),
        ));
        let instances = Arc::new(domain::trigger::views::InstanceService::new(
            invocations.clone(),
            instance_repo.clone(),
        ));
        let engine = Arc::new(
            Engine::new(
                flows.clone(),
                invocations.clone(),
                users.clone(),
                segments.clone(),
                streams.clone(),
                clock.clone(),
            )
            .with_lease(engine_lease)
            // PostgreSQL writes transactions side by side, SQLite one at a time: there a
            // fan-out's batch is written while the one before it is being saved (measured; see
            // the git history of docs/benchmarks.md).
            .with_saves_in_flight(match db.backend() {
                adapters_diesel::Backend::Postgres => 2,
                adapters_diesel::Backend::Sqlite => 1,
            }),
        );
        let upload_key = secrets.derive_key("workbench upload urls v1").to_vec();
        tracing::info!(
            key_id = secrets.key_id(),
            "secrets at rest sealed with AES-256-GCM"
        );
        let transport = Arc::new(
            adapters_webhook::HttpTransport::new(adapters_webhook::TransportConfig {
                policy: settings.webhook_allow_cidrs.value.clone(),
                ..Default::default()
            })
            .context("cannot build the webhook HTTP client")?,
        );
        let webhook_repo = Arc::new(adapters_diesel::DieselWebhookRepository::new(
            db.clone(),
            secrets.clone(),
        ));
        // Custom header values stored in plain text by an older version are sealed now.
        let sealed = webhook_repo
            .seal_plain_headers()
            .await
            .context("cannot seal the custom header values of webhook subscriptions")?;
        if sealed > 0 {
            tracing::info!(
                subscriptions = sealed,
                "sealed the custom header values that were stored in plain text"
            );
        }
        let pushes = Arc::new(PushService::new(
            Arc::new(adapters_diesel::DieselPushJobRepository::new(
                db.clone(),
                secrets.clone(),
            )),
            Arc::new(
                adapters_push::HttpPushSender::new(
                    settings.push_urls.clone(),
                    Duration::from_secs(PUSH_TIMEOUT_SECONDS),
                )
                .context("cannot build the push HTTP clients")?,
            ),
            clock.clone(),
            settings.push_retry_schedule.value.clone(),
        ));
        let push = Arc::new(domain::push::PushPlatformService::new(
            Arc::new(adapters_diesel::DieselPushPlatformRepository::new(
                db.clone(),
                secrets,
            )),
            Arc::new(adapters_push::OfflineValidator),
            clock.clone(),
        ));
        let deliveries = Arc::new(DeliveryService::new(
            webhook_repo.clone(),
            transport.clone(),
            clock.clone(),
            settings.webhook_retry_schedule.value.clone(),
        ));
        let cancel_tasks = Arc::new(adapters_diesel::DieselCancelRepository::new(db.clone()));
        let cancels = Arc::new(
            CancelService::new(cancel_tasks.clone(), flows.clone(), clock.clone())
                .with_lease(engine_lease),
        );
        let triggers = Arc::new(TriggerService::new(
            flows.clone(),
            invocations,
            segments.clone(),
            streams.clone(),
            clock.clone(),
        ));
        // The recorders' writers (one for `/start`, `CSV_WRITERS` for CSV rows) take pool
        // connections besides the calls, which need one more.
        let least = 1 + CSV_WRITERS + 1;
        if db.backend() == adapters_diesel::Backend::Postgres
            && usize::try_from(settings.database_pool_size).is_ok_and(|size| size < least)
        {
            tracing::warn!(
                pool_size = settings.database_pool_size,
                least,
                "a pool this small on PostgreSQL leaves requests waiting for a connection \
                 while a CSV task is recorded (WORKBENCH_DATABASE_POOL_SIZE)"
            );
        }
        // On PostgreSQL a CSV task's rows are recorded by a recorder of their own, with two
        // writing threads: `/start` calls do not queue behind its transactions, and its rows
        // are written two transactions at a time (docs/scaling.md, CSV tasks on PostgreSQL).
        // On SQLite, which writes one transaction at a time, they share the `/start` recorder
        // and its group commit.
        let bulk_triggers = match db.backend() {
            adapters_diesel::Backend::Postgres => Arc::new(TriggerService::new(
                flows.clone(),
                Arc::new(DieselInvocationRepository::new(db.clone()).with_writers(CSV_WRITERS)),
                segments.clone(),
                streams.clone(),
                clock.clone(),
            )),
            adapters_diesel::Backend::Sqlite => triggers.clone(),
        };
        let bulk_tasks = Arc::new(adapters_diesel::DieselBulkRepository::new(db.clone()));
        let tasks = Arc::new(domain::tasks::TaskService::new(
            bulk_tasks.clone(),
            cancel_tasks,
            flows.clone(),
        ));
        let bulk = Arc::new(
            BulkService::new(
                bulk_tasks,
                flows.clone(),
                users.clone(),
                bulk_triggers,
                clock.clone(),
                upload_key,
            )
            .with_lease(engine_lease),
        );
        let sdk = Arc::new(domain::sdk::SdkKeyService::new(
            Arc::new(adapters_diesel::DieselSdkKeyRepository::new(db.clone())),
            users.clone(),
            Arc::new(adapters_jwt::JwtVerifier::default()),
            clock.clone(),
        ));
        let flow_service = Arc::new(FlowService::new(
            flows.clone(),
            folders.clone(),
            Arc::new(DieselSettingsRepository::new(db.clone())),
            clock.clone(),
        ));
        let state = AppState {
            auth: crate::auth_service(&db, clock.clone()),
            folders: Arc::new(FolderService::new(folders.clone(), clock.clone())),
            stats: Arc::new(domain::stats::StatsService::new(
                Arc::new(adapters_diesel::DieselStatsRepository::new(db.clone())),
                flows.clone(),
                folders.clone(),
                instance_repo.clone(),
                clock.clone(),
            )),
            flows: flow_service.clone(),
            editor: Arc::new(domain::flow::texts::EditorService::new(
                flow_service,
                Arc::new(adapters_diesel::DieselEditorTextRepository::new(db.clone())),
            )),
            feed,
            hub,
            instances,
            tickets: Arc::new(domain::sdk::StreamTicketService::new(
                sdk.clone(),
                Arc::new(adapters_diesel::DieselStreamTicketRepository::new(
                    db.clone(),
                )),
                clock.clone(),
            )),
            sdk,
            audience: Arc::new(AudienceService::new(
                users,
                segments,
                streams,
                clock.clone(),
            )),
            triggers,
            cards,
            webhooks: Arc::new(domain::webhook::WebhookService::new(
                webhook_repo,
                transport,
                clock.clone(),
            )),
            cancels: cancels.clone(),
            bulk: bulk.clone(),
            tasks,
            push,
            devices: Arc::new(domain::push::DeviceService::new(
                Arc::new(adapters_diesel::DieselDeviceRepository::new(db.clone())),
                clock.clone(),
            )),
            pushes: pushes.clone(),
            health: Arc::new(DieselHealthProbe::new(db.clone()).with_clock(clock.clone())),
            loops: Arc::new(domain::health::Loops::default()),
            storage: db.storage(),
            shutting_down: Arc::new(std::sync::atomic::AtomicBool::new(false)),
            metrics,
            limits: api_actix::RateLimits::new(settings.rate_limits),
            trusted_proxies: settings.trusted_proxies.clone(),
            metrics_token: settings
                .metrics_token
                .as_ref()
                .map(|t| t.expose_secret().to_owned()),
            public_url,
        };
        let pruner = Arc::new(pruner(&db, clock, settings.retention));
        Ok(App {
            state,
            loops: Loops {
                db,
                engine,
                waits,
                cancels,
                bulk,
                deliveries,
                pushes,
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
