//! The HTTP adapter: routes, authentication extraction, request/response DTOs, problem+json
//! errors, OpenAPI. Handlers translate HTTP to domain calls and back; rules live in `domain`.

#![deny(missing_docs)]

mod auth;
mod body;
pub mod client;
mod console;
mod cors;
mod edge;
mod hub;
mod limits;
mod metrics;
pub mod openapi;
mod problem;
mod routes;
mod schemas;
pub mod wire;

use std::net::TcpListener;
use std::sync::Arc;
use std::time::Duration;

use actix_service::{IntoServiceFactory, ServiceFactoryExt};
use actix_web::dev::Server;
use actix_web::http::StatusCode;
use actix_web::middleware::from_fn;
use actix_web::{web, App, HttpResponse, ResponseError};
use domain::audience::AudienceService;
use domain::card::CardService;
use domain::trigger::TriggerService;
use domain::{AuthService, FlowService, FolderService, HealthProbe};

pub use hub::FeedHub;
pub use limits::{Rate, RateLimitOptions, RateLimits};
pub use metrics::Metrics;
pub use problem::{ApiError, Problem};

/// Largest request body accepted by the JSON endpoints.
pub const MAX_BODY_BYTES: usize = 1024 * 1024;

/// Everything the handlers need, shared by every worker.
pub struct AppState {
    /// Keys, tokens and who a bearer is (contract §2).
    pub auth: Arc<AuthService>,
    /// The folder tree.
    pub folders: Arc<FolderService>,
    /// Action Flows, their versions, drafts and approvals.
    pub flows: Arc<FlowService>,
    /// End users, segments and streams.
    pub audience: Arc<AudienceService>,
    /// `/start` and `/test`.
    pub triggers: Arc<TriggerService>,
    /// Flow instances of flows that wait or branch (contract §21).
    pub instances: Arc<domain::trigger::views::InstanceService>,
    /// End users' cards and their actions.
    pub cards: Arc<CardService>,
    /// Webhook subscriptions and their attempt log.
    pub webhooks: Arc<domain::webhook::WebhookService>,
    /// Cancel tasks.
    pub cancels: Arc<domain::cancel::CancelService>,
    /// Bulk starts from CSV.
    pub bulk: Arc<domain::bulk::BulkService>,
    /// A flow's CSV and cancel tasks in one list.
    pub tasks: Arc<domain::tasks::TaskService>,
    /// Push notification platforms and their credentials.
    pub push: Arc<domain::push::PushPlatformService>,
    /// End users' devices.
    pub devices: Arc<domain::push::DeviceService>,
    /// Pushes sent on request.
    pub pushes: Arc<domain::push::PushService>,
    /// Daily totals (contract §14) and a version's step counts.
    pub stats: Arc<domain::stats::StatsService>,
    /// The console's editor: configurations saved from their text, and the text read back.
    pub editor: Arc<domain::flow::texts::EditorService>,
    /// SDK keys, and end users signed in with their tokens (contract §15).
    pub sdk: Arc<domain::sdk::SdkKeyService>,
    /// Stream tickets: how a browser's `EventSource` opens a user's feed stream.
    pub tickets: Arc<domain::sdk::StreamTicketService>,
    /// Card counts and the changes feed streams send (contract §12).
    pub feed: Arc<domain::feed::FeedService>,
    /// The open feed streams of the process, woken by whose cards changed.
    pub hub: Arc<FeedHub>,
    /// The database's answer to `/readyz`.
    pub health: Arc<dyn HealthProbe>,
    /// The background loops of the process (stalled ones make `/readyz` answer 503).
    pub loops: Arc<domain::health::Loops>,
    /// The database's storage: the low-disk guard and writes refused for lack of space.
    pub storage: Arc<domain::health::Storage>,
    /// Set when the process starts to stop (contract §17): `/readyz` answers 503 from then on,
    /// so that load balancers stop sending requests before the listener closes.
    pub shutting_down: Arc<std::sync::atomic::AtomicBool>,
    /// The Prometheus series of `/metrics`.
    pub metrics: Metrics,
    /// The rate limits of this process (contract §16).
    pub limits: RateLimits,
    /// `WORKBENCH_TRUSTED_PROXIES`: whose `Forwarded` / `X-Forwarded-For` names the client.
    pub trusted_proxies: client::TrustedProxies,
    /// `WORKBENCH_METRICS_TOKEN`: lets clients other than loopback read `/metrics`.
    pub metrics_token: Option<String>,
    /// The service's public base URL, without a trailing slash (`invocationUrl` and the like).
    pub public_url: String,
}

/// Every route of the API. actix tries resources in this order, matching each path pattern
/// with parameters as a regular expression, so the hot paths come first: triggers and the
/// end-user card API (measured: with `/start` registered after the other resources, matching
/// took a large share of the server's CPU under a `/start` load). No two patterns match the
/// same path, so the order changes nothing else.
pub fn configure(cfg: &mut web::ServiceConfig) {
    routes::trigger::configure(cfg);
    routes::feed::configure(cfg);
    routes::ops::configure(cfg);
    routes::oauth::configure(cfg);
    routes::environments::configure(cfg);
    routes::credentials::configure(cfg);
    routes::folders::configure(cfg);
    routes::flows::configure(cfg);
    routes::publish::configure(cfg);
    routes::configs::configure(cfg);
    routes::settings::configure(cfg);
    routes::audience::configure(cfg);
    routes::webhooks::configure(cfg);
    routes::tasks::configure(cfg);
    routes::bulk::configure(cfg);
    routes::push::configure(cfg);
    routes::stats::configure(cfg);
    routes::sdk_keys::configure(cfg);
    openapi::configure(cfg);
    console::configure(cfg);
}

async fn no_route() -> HttpResponse {
    ApiError::from_status(StatusCode::NOT_FOUND).error_response()
}

/// Server tuning that is not business configuration.
#[derive(Debug, Clone)]
pub struct ServerOptions {
    /// HTTP worker threads.
    pub workers: usize,
    /// How long in-flight requests may run after SIGTERM before they are dropped.
    pub shutdown_timeout: Duration,
    /// How long a request's body may take to arrive (`WORKBENCH_REQUEST_BODY_TIMEOUT`): past
    /// it, 408 and the connection closes (contract §16).
    pub body_timeout: Duration,
}

/// How long idle keep-alive connections stay open (contract §16): longer than the idle
/// timeouts of common load balancers (60 s), so that they, not the service, close first.
const KEEP_ALIVE: Duration = Duration::from_secs(75);

/// [`ServerOptions::body_timeout`], for the edge middleware.
#[derive(Debug, Clone, Copy)]
pub(crate) struct BodyTimeout(pub(crate) Duration);

/// What answers while the process starts (contract §17): `/healthz` 200 from the first moment,
/// `/readyz` 503 (`reason` `starting`), anything else 503 with `Retry-After`, so that a
/// liveness probe does not kill a process waiting for its migrations. Stop it
/// (`handle().stop(true)`) before [`build_server`] takes the listener over; connections made
/// meanwhile wait in the listener's backlog.
pub fn build_starting_server(listener: TcpListener) -> std::io::Result<Server> {
    async fn starting() -> HttpResponse {
        ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "not_ready",
            "Not ready",
            "the service is starting (migrating the database)",
        )
        .with_reason("starting")
        .error_response()
    }
    Ok(actix_web::HttpServer::new(|| {
        App::new()
            .route("/healthz", web::get().to(routes::ops::healthz))
            .default_service(web::to(starting))
    })
    .workers(1)
    .disable_signals()
    .listen(listener)?
    .run())
}

/// Builds the HTTP server on an already bound listener. It does not watch signals: the
/// caller stops it through its handle (`stop(true)`: the listener closes, in-flight requests
/// finish within [`ServerOptions::shutdown_timeout`], idle keep-alive connections close).
///
/// It is actix-web's `HttpServer` with the same settings (keep-alive 75 s, request headers within
/// 5 s, backlog 1,024), assembled from its parts so that each connection is wrapped in
/// [`wire::Guarded`]: a request refused before routing (a malformed request line or header) is
/// answered with a problem document and an `X-Request-Id` too (contract §10).
pub fn build_server(
    listener: TcpListener,
    state: AppState,
    options: &ServerOptions,
) -> std::io::Result<Server> {
    let state = web::Data::new(state);
    let body_timeout = web::Data::new(BodyTimeout(options.body_timeout));
    let addr = listener.local_addr()?;
    let builder = actix_server::Server::build()
        .workers(options.workers.max(1))
        .backlog(1024)
        .shutdown_timeout(options.shutdown_timeout.as_secs())
        .disable_signals();
    let shutdown = builder.graceful_shutdown_signal();
    let server = builder
        .listen("workbench", listener, move || {
            let state = state.clone();
            let app = App::new()
                .app_data(state)
                .app_data(body_timeout.clone())
                .app_data(web::PayloadConfig::new(MAX_BODY_BYTES))
                .wrap(from_fn(cors::cors))
                .wrap(from_fn(edge::edge))
                .configure(configure)
                .default_service(web::to(no_route));
            let shutdown = shutdown.clone();
            let http = actix_http::HttpService::build()
                .graceful_shutdown_signal(move || {
                    let shutdown = shutdown.clone();
                    async move { shutdown.notified().await }
                })
                .keep_alive(actix_http::KeepAlive::Timeout(KEEP_ALIVE))
                .client_request_timeout(Duration::from_secs(5))
                .client_disconnect_timeout(Duration::from_secs(1))
                .h1_allow_half_closed(true)
                .local_addr(addr)
                .finish(actix_service::map_config(
                    app.into_factory()
                        .map_err(|e: actix_web::Error| e.error_response()),
                    |_| actix_web::dev::AppConfig::default(),
                ));
            actix_service::fn_service(|io: actix_web::rt::net::TcpStream| async move {
                let peer = io.peer_addr().ok();
                Ok::<_, actix_http::error::DispatchError>((
                    wire::Guarded::new(io),
                    actix_http::Protocol::Http1,
                    peer,
                ))
            })
            .and_then(http)
        })?
        .run();
    Ok(server)
}
