//! Operations endpoints: liveness, readiness, metrics. `/openapi.json` and `/docs` are served
//! by the `openapi` module.

use actix_web::http::StatusCode;
use actix_web::{web, HttpResponse};
use serde::Serialize;
use utoipa::ToSchema;

use crate::problem::{ApiError, Problem};
use crate::AppState;

#[derive(Serialize, ToSchema)]
pub struct Status {
    /// `ok` (live) or `ready`.
    pub status: &'static str,
}

/// Liveness: the process answers.
#[utoipa::path(get, path = "/healthz", tag = "operations", operation_id = "healthz",
    responses((status = 200, description = "The process is up", body = Status)))]
pub async fn healthz() -> HttpResponse {
    HttpResponse::Ok().json(Status { status: "ok" })
}

/// Readiness: the database answers, migrations are applied, and no background loop is stalled.
#[utoipa::path(get, path = "/readyz", tag = "operations", operation_id = "readyz",
    responses(
        (status = 200, description = "Ready to serve", body = Status),
        (status = 503, description = "Database unreachable, migrations pending, a background loop stalled (named in `detail`), or storage full (`code` and `reason` `storage_full`)", body = Problem, content_type = "application/problem+json"),
    ))]
pub async fn readyz(state: web::Data<AppState>) -> Result<HttpResponse, ApiError> {
    if state.storage.full() {
        tracing::warn!("not ready: storage full");
        return Err(ApiError::storage_full().with_reason("storage_full"));
    }
    let stalled = state.loops.stalled(std::time::Instant::now());
    if !stalled.is_empty() {
        tracing::warn!(?stalled, "not ready: background loops stalled");
        return Err(ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "not_ready",
            "Not ready",
            format!(
                "background loops stalled (work and no progress for 30 s): {}",
                stalled.join(", ")
            ),
        ));
    }
    match state.health.ready().await {
        Ok(()) => Ok(HttpResponse::Ok().json(Status { status: "ready" })),
        Err(cause) => {
            tracing::warn!(%cause, "not ready");
            Err(ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "not_ready",
                "Not ready",
                "the database is unreachable or not migrated",
            ))
        }
    }
}

/// Prometheus metrics in the text exposition format.
#[utoipa::path(get, path = "/metrics", tag = "operations", operation_id = "metrics",
    responses((status = 200, description = "Prometheus text format", body = String, content_type = "text/plain; version=0.0.4")))]
pub async fn metrics(state: web::Data<AppState>) -> Result<HttpResponse, ApiError> {
    state.metrics.storage(&state.storage);
    let text = state.metrics.render().map_err(|e| {
        tracing::error!(error = %e, "cannot render metrics");
        ApiError::internal()
    })?;
    Ok(HttpResponse::Ok()
        .content_type("text/plain; version=0.0.4; charset=utf-8")
        .body(text))
}

pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.service(web::resource("/healthz").route(web::get().to(healthz)))
        .service(web::resource("/readyz").route(web::get().to(readyz)))
        .service(web::resource("/metrics").route(web::get().to(metrics)));
}
