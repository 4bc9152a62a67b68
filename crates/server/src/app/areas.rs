//! The areas of the application, each wired from the shared repositories: the feed, what runs
//! flows, webhooks, push notifications, and triggers with the tasks they become.

use std::sync::Arc;
use std::time::Duration;

use adapters_diesel::{
    Backend, Database, DieselCardRepository, DieselEndUserRepository, DieselFlowRepository,
    DieselFolderRepository, DieselInstanceRepository, DieselInvocationRepository,
    DieselSegmentRepository, DieselStreamRepository, SecretBox,
};
use anyhow::Context;
use api_actix::FeedHub;
use domain::bulk::BulkService;
use domain::cancel::CancelService;
use domain::card::CardService;
use domain::feed::FeedService;
use domain::flow::RecentFlows;
use domain::push::{PushPlatformService, PushService};
use domain::tasks::TaskService;
use domain::trigger::views::InstanceService;
use domain::trigger::waits::Waits;
use domain::trigger::{Engine, TriggerService};
use domain::webhook::{DeliveryService, WebhookService};
use domain::Clock;

use crate::config::Settings;

/// The recorder's writing threads for CSV rows on PostgreSQL (docs/scaling.md, CSV tasks on
/// PostgreSQL).
const CSV_WRITERS: usize = 2;

/// A call to FCM, Google's token endpoint or APNs gives up after this.
pub const PUSH_TIMEOUT_SECONDS: u64 = 15;

/// Every area's services, wired: what the HTTP state and the loops are made of.
pub(super) struct Areas {
    pub(super) stores: Stores,
    pub(super) cards: Arc<CardService>,
    pub(super) feed: Feed,
    pub(super) runs: Runs,
    pub(super) webhooks: Webhooks,
    pub(super) pushes: Pushes,
    pub(super) tasks: Tasks,
}

/// The repositories several areas share.
pub(super) struct Stores {
    pub(super) folders: Arc<DieselFolderRepository>,
    pub(super) flows: Arc<RecentFlows>,
    pub(super) users: Arc<DieselEndUserRepository>,
    pub(super) segments: Arc<DieselSegmentRepository>,
    pub(super) streams: Arc<DieselStreamRepository>,
    pub(super) invocations: Arc<DieselInvocationRepository>,
    pub(super) cards: Arc<DieselCardRepository>,
    pub(super) instances: Arc<DieselInstanceRepository>,
}

impl Stores {
    pub(super) fn new(db: &Database, clock: &Arc<dyn Clock>) -> Self {
        Stores {
            folders: Arc::new(DieselFolderRepository::new(db.clone())),
            // Flows read in the last second are answered again (every write of this process
            // forgets them): the trigger's hot path reads its flow on every call.
            flows: Arc::new(RecentFlows::new(
                Arc::new(DieselFlowRepository::new(db.clone())),
                clock.clone(),
            )),
            users: Arc::new(DieselEndUserRepository::new(db.clone())),
            segments: Arc::new(DieselSegmentRepository::new(db.clone())),
            streams: Arc::new(DieselStreamRepository::new(db.clone())),
            invocations: Arc::new(DieselInvocationRepository::new(db.clone())),
            cards: Arc::new(DieselCardRepository::new(db.clone())),
            instances: Arc::new(DieselInstanceRepository::new(db.clone())),
        }
    }
}

/// The users' card feed, and the hub that wakes its streams.
pub(super) struct Feed {
    pub(super) hub: Arc<FeedHub>,
    pub(super) service: Arc<FeedService>,
}

impl Feed {
    pub(super) fn new(
        db: &Database,
        stores: &Stores,
        clock: &Arc<dyn Clock>,
        settings: &Settings,
    ) -> Self {
        // Contract §12: every commit of card events wakes the streams of their users.
        let hub = Arc::new(FeedHub::default());
        db.tell_feed(hub.clone());
        // A stream reads again twice the database's deadline back: an event stamped before a
        // slow commit is not missed (contract §20 bounds how slow).
        let reread = i64::try_from(settings.database_waits.request.as_secs())
            .unwrap_or(i64::MAX)
            .saturating_mul(2);
        let service = Arc::new(
            FeedService::new(
                Arc::new(adapters_diesel::DieselFeedRepository::new(db.clone())),
                stores.cards.clone(),
                clock.clone(),
            )
            .with_reread(reread),
        );
        Feed { hub, service }
    }
}

/// What runs flows: the engine, and the flow instances that wait (contract §21).
pub(super) struct Runs {
    pub(super) engine: Arc<Engine>,
    pub(super) waits: Arc<Waits>,
    pub(super) instances: Arc<InstanceService>,
}

impl Runs {
    pub(super) fn new(
        db: &Database,
        stores: &Stores,
        clock: &Arc<dyn Clock>,
        engine_lease: chrono::Duration,
    ) -> Self {
        // Contract §21: flow instances that wait, run on as they come due, and read.
        let waits = Arc::new(Waits::new(
            stores.flows.clone(),
            stores.invocations.clone(),
            stores.instances.clone(),
            stores.streams.clone(),
            clock.clone(),
        ));
        let instances = Arc::new(InstanceService::new(
            stores.invocations.clone(),
            stores.instances.clone(),
        ));
        let engine = Arc::new(
            Engine::new(
                stores.flows.clone(),
                stores.invocations.clone(),
                stores.users.clone(),
                stores.segments.clone(),
                stores.streams.clone(),
                clock.clone(),
            )
            .with_lease(engine_lease)
            // PostgreSQL writes transactions side by side, SQLite one at a time: there a
            // fan-out's batch is written while the one before it is being saved (measured; see
            // the git history of docs/benchmarks.md).
            .with_saves_in_flight(match db.backend() {
                Backend::Postgres => 2,
                Backend::Sqlite => 1,
            }),
        );
        Runs {
            engine,
            waits,
            instances,
        }
    }
}

/// The key that signs upload URLs, derived from the key sealing secrets at rest (whose id
/// the log names).
pub(super) fn upload_key(secrets: &SecretBox) -> Vec<u8> {
    let upload_key = secrets.derive_key("workbench upload urls v1").to_vec();
    tracing::info!(
        key_id = secrets.key_id(),
        "secrets at rest sealed with AES-256-GCM"
    );
    upload_key
}

/// Webhooks: the subscriptions and their deliveries, over one HTTP transport.
pub(super) struct Webhooks {
    pub(super) service: Arc<WebhookService>,
    pub(super) deliveries: Arc<DeliveryService>,
}

impl Webhooks {
    /// Custom header values stored in plain text by an older version are sealed now.
    pub(super) async fn new(
        db: &Database,
        settings: &Settings,
        secrets: &Arc<SecretBox>,
        clock: &Arc<dyn Clock>,
    ) -> anyhow::Result<Self> {
        let transport = Arc::new(
            adapters_webhook::HttpTransport::new(adapters_webhook::TransportConfig {
                policy: settings.webhook_allow_cidrs.value.clone(),
                ..Default::default()
            })
            .context("cannot build the webhook HTTP client")?,
        );
        let repo = Arc::new(adapters_diesel::DieselWebhookRepository::new(
            db.clone(),
            secrets.clone(),
        ));
        let sealed = repo
            .seal_plain_headers()
            .await
            .context("cannot seal the custom header values of webhook subscriptions")?;
        if sealed > 0 {
            tracing::info!(
                subscriptions = sealed,
                "sealed the custom header values that were stored in plain text"
            );
        }
        let deliveries = Arc::new(DeliveryService::new(
            repo.clone(),
            transport.clone(),
            clock.clone(),
            settings.webhook_retry_schedule.value.clone(),
        ));
        let service = Arc::new(WebhookService::new(repo, transport, clock.clone()));
        Ok(Webhooks {
            service,
            deliveries,
        })
    }
}

/// Push notifications: sending them, and the platforms' credentials (checked offline).
pub(super) struct Pushes {
    pub(super) sending: Arc<PushService>,
    pub(super) platforms: Arc<PushPlatformService>,
}

impl Pushes {
    pub(super) fn new(
        db: &Database,
        settings: &Settings,
        secrets: Arc<SecretBox>,
        clock: &Arc<dyn Clock>,
    ) -> anyhow::Result<Self> {
        let sending = Arc::new(PushService::new(
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
        let platforms = Arc::new(PushPlatformService::new(
            Arc::new(adapters_diesel::DieselPushPlatformRepository::new(
                db.clone(),
                secrets,
            )),
            Arc::new(adapters_push::OfflineValidator),
            clock.clone(),
        ));
        Ok(Pushes { sending, platforms })
    }
}

/// Triggers and the tasks they become: cancel tasks and CSV tasks.
pub(super) struct Tasks {
    pub(super) triggers: Arc<TriggerService>,
    pub(super) cancels: Arc<CancelService>,
    pub(super) bulk: Arc<BulkService>,
    pub(super) tasks: Arc<TaskService>,
}

impl Tasks {
    pub(super) fn new(
        db: &Database,
        settings: &Settings,
        stores: &Stores,
        clock: &Arc<dyn Clock>,
        engine_lease: chrono::Duration,
        upload_key: Vec<u8>,
    ) -> Self {
        let cancel_tasks = Arc::new(adapters_diesel::DieselCancelRepository::new(db.clone()));
        let cancels = Arc::new(
            CancelService::new(cancel_tasks.clone(), stores.flows.clone(), clock.clone())
                .with_lease(engine_lease),
        );
        let triggers = Arc::new(TriggerService::new(
            stores.flows.clone(),
            stores.invocations.clone(),
            stores.segments.clone(),
            stores.streams.clone(),
            clock.clone(),
        ));
        warn_of_a_small_pool(db, settings);
        let bulk_tasks = Arc::new(adapters_diesel::DieselBulkRepository::new(db.clone()));
        let tasks = Arc::new(TaskService::new(
            bulk_tasks.clone(),
            cancel_tasks,
            stores.flows.clone(),
        ));
        let bulk = Arc::new(
            BulkService::new(
                bulk_tasks,
                stores.flows.clone(),
                stores.users.clone(),
                csv_triggers(db, stores, clock, &triggers),
                clock.clone(),
                upload_key,
            )
            .with_lease(engine_lease),
        );
        Tasks {
            triggers,
            cancels,
            bulk,
            tasks,
        }
    }
}

/// The recorders' writers (one for `/start`, `CSV_WRITERS` for CSV rows) take pool
/// connections besides the calls, which need one more: a smaller pool on PostgreSQL is
/// warned of.
fn warn_of_a_small_pool(db: &Database, settings: &Settings) {
    let least = 1 + CSV_WRITERS + 1;
    if db.backend() == Backend::Postgres
        && usize::try_from(settings.database_pool_size).is_ok_and(|size| size < least)
    {
        tracing::warn!(
            pool_size = settings.database_pool_size,
            least,
            "a pool this small on PostgreSQL leaves requests waiting for a connection \
             while a CSV task is recorded (WORKBENCH_DATABASE_POOL_SIZE)"
        );
    }
}

/// The triggers of CSV tasks. On PostgreSQL a CSV task's rows are recorded by a recorder of
/// their own, with two writing threads: `/start` calls do not queue behind its transactions,
/// and its rows are written two transactions at a time (docs/scaling.md, CSV tasks on
/// PostgreSQL). On SQLite, which writes one transaction at a time, they share the `/start`
/// recorder and its group commit.
fn csv_triggers(
    db: &Database,
    stores: &Stores,
    clock: &Arc<dyn Clock>,
    triggers: &Arc<TriggerService>,
) -> Arc<TriggerService> {
    match db.backend() {
        Backend::Postgres => Arc::new(TriggerService::new(
            stores.flows.clone(),
            Arc::new(DieselInvocationRepository::new(db.clone()).with_writers(CSV_WRITERS)),
            stores.segments.clone(),
            stores.streams.clone(),
            clock.clone(),
        )),
        Backend::Sqlite => triggers.clone(),
    }
}
