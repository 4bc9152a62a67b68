//! The HTTP state: what every request handler reaches, made of the areas' services and the
//! settings of the HTTP layer.

use std::sync::Arc;

use adapters_diesel::{
    Database, DieselHealthProbe, DieselSettingsRepository, DieselTenancyRepository,
};
use api_actix::{AppState, Metrics};
use domain::audience::AudienceService;
use domain::flow::texts::EditorService;
use domain::sdk::{SdkKeyService, StreamTicketService};
use domain::{AuthService, Clock, FlowService, FolderService};
use secrecy::ExposeSecret;

use crate::config::Settings;

use super::areas::{Areas, Stores};

/// What every request handler reaches: the areas' services, and the settings of the HTTP
/// layer.
pub(super) fn http_state(
    settings: &Settings,
    db: &Database,
    clock: &Arc<dyn Clock>,
    metrics: Metrics,
    public_url: String,
    areas: &Areas,
) -> AppState {
    let stores = &areas.stores;
    let (flows, editor) = flow_services(db, stores, clock);
    let (sdk, tickets) = sdk_services(db, stores, clock);
    AppState {
        auth: auth_service(db, clock.clone()),
        folders: Arc::new(FolderService::new(stores.folders.clone(), clock.clone())),
        stats: Arc::new(domain::stats::StatsService::new(
            Arc::new(adapters_diesel::DieselStatsRepository::new(db.clone())),
            stores.flows.clone(),
            stores.folders.clone(),
            stores.instances.clone(),
            clock.clone(),
        )),
        flows,
        editor,
        feed: areas.feed.service.clone(),
        hub: areas.feed.hub.clone(),
        instances: areas.runs.instances.clone(),
        tickets,
        sdk,
        audience: Arc::new(AudienceService::new(
            stores.users.clone(),
            stores.segments.clone(),
            stores.streams.clone(),
            clock.clone(),
        )),
        triggers: areas.tasks.triggers.clone(),
        cards: areas.cards.clone(),
        webhooks: areas.webhooks.service.clone(),
        cancels: areas.tasks.cancels.clone(),
        bulk: areas.tasks.bulk.clone(),
        tasks: areas.tasks.tasks.clone(),
        push: areas.pushes.platforms.clone(),
        devices: Arc::new(domain::push::DeviceService::new(
            Arc::new(adapters_diesel::DieselDeviceRepository::new(db.clone())),
            clock.clone(),
        )),
        pushes: areas.pushes.sending.clone(),
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
    }
}

/// The flows' service, and the editor's texts over it.
fn flow_services(
    db: &Database,
    stores: &Stores,
    clock: &Arc<dyn Clock>,
) -> (Arc<FlowService>, Arc<EditorService>) {
    let flows = Arc::new(FlowService::new(
        stores.flows.clone(),
        stores.folders.clone(),
        Arc::new(DieselSettingsRepository::new(db.clone())),
        clock.clone(),
    ));
    let editor = Arc::new(EditorService::new(
        flows.clone(),
        Arc::new(adapters_diesel::DieselEditorTextRepository::new(db.clone())),
    ));
    (flows, editor)
}

/// The SDK keys that verify end users' tokens, and the stream tickets issued on them.
fn sdk_services(
    db: &Database,
    stores: &Stores,
    clock: &Arc<dyn Clock>,
) -> (Arc<SdkKeyService>, Arc<StreamTicketService>) {
    let sdk = Arc::new(SdkKeyService::new(
        Arc::new(adapters_diesel::DieselSdkKeyRepository::new(db.clone())),
        stores.users.clone(),
        Arc::new(adapters_jwt::JwtVerifier::default()),
        clock.clone(),
    ));
    let tickets = Arc::new(StreamTicketService::new(
        sdk.clone(),
        Arc::new(adapters_diesel::DieselStreamTicketRepository::new(
            db.clone(),
        )),
        clock.clone(),
    ));
    (sdk, tickets)
}

/// The tenancy service of `db` (organisations, environments, API keys), deciding on `clock`.
pub fn auth_service(db: &Database, clock: Arc<dyn Clock>) -> Arc<AuthService> {
    Arc::new(AuthService::new(
        Arc::new(DieselTenancyRepository::new(db.clone())),
        clock,
    ))
}
