//! Operations endpoints: liveness, readiness, metrics. `/openapi.json` and `/docs` are served
//! by the `openapi` module.

use std::net::SocketAddr;

use actix_web::http::header::{self, HeaderValue};
use actix_web::http::StatusCode;
use actix_web::{web, HttpRequest, HttpResponse};
use serde::Serialize;
use subtle::ConstantTimeEq;
use utoipa::ToSchema;

use crate::metrics::Scraped;
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
        (status = 503,
            description = "Database unreachable, migrations pending, a background loop stalled \
                (named in `detail`), or storage full (`code` and `reason` `storage_full`), or the \
                    process is shutting down (`reason` `shutting_down`)", body = Problem,
                        content_type = "application/problem+json"),
    ))]
pub async fn readyz(state: web::Data<AppState>) -> Result<HttpResponse, ApiError> {
    if state
        .shutting_down
        .load(std::sync::atomic::Ordering::Relaxed)
    {
        return Err(ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "not_ready",
            "Not ready",
            "the process is shutting down",
        )
        .with_reason("shutting_down"));
    }
    if state.storage.full() {
        tracing::warn!("not ready: storage full");
        return Err(ApiError::storage_full().with_reason("storage_full"));
    }
    // The database first: the loops' failures for want of it are judged from when it was
    // last seen coming back (health::Loops::database).
    let database = state.health.ready().await;
    state
        .loops
        .database(database.is_ok(), std::time::Instant::now());
    if let Err(cause) = database {
        tracing::warn!(%cause, "not ready");
        return Err(ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "not_ready",
            "Not ready",
            "the database is unreachable or not migrated",
        ));
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
    Ok(HttpResponse::Ok().json(Status { status: "ready" }))
}

/// Prometheus metrics in the text exposition format.
///
/// For loopback clients, or for any client presenting `WORKBENCH_METRICS_TOKEN` as a bearer
/// token when that is set.
#[utoipa::path(get, path = "/metrics", tag = "operations", operation_id = "metrics",
    responses(
        (status = 200, description = "Prometheus text format", body = String,
            content_type = "text/plain; version=0.0.4"),
        (status = 401,
            description = "Not a loopback client, and the bearer token is missing or not the \
                metrics token", body = Problem, content_type = "application/problem+json"),
        (status = 403, description = "Not a loopback client, and no metrics token is set",
            body = Problem, content_type = "application/problem+json"),
    ))]
pub async fn metrics(
    request: HttpRequest,
    state: web::Data<AppState>,
) -> Result<HttpResponse, ApiError> {
    metrics_access(
        request.peer_addr(),
        request.headers().get(header::AUTHORIZATION),
        state.metrics_token.as_deref(),
    )?;
    state.metrics.storage(&state.storage);
    let scraped = Scraped {
        backlog: state.metrics.backlog(state.health.as_ref()).await,
        pool: Some(state.health.pool()),
        feed_streams: Some(state.hub.open_streams()),
    };
    let text = state.metrics.render_with(&scraped).map_err(|e| {
        tracing::error!(error = %e, "cannot render metrics");
        ApiError::internal()
    })?;
    Ok(HttpResponse::Ok()
        .content_type("text/plain; version=0.0.4; charset=utf-8")
        .body(text))
}

/// Whether a client may read `/metrics`: one on loopback (the host itself, or a proxy on it)
/// may; another must present the metrics token, when one is set. The token is compared in
/// constant time.
pub fn metrics_access(
    peer: Option<SocketAddr>,
    authorization: Option<&HeaderValue>,
    token: Option<&str>,
) -> Result<(), ApiError> {
    if peer.is_some_and(|p| p.ip().to_canonical().is_loopback()) {
        return Ok(());
    }
    let Some(token) = token else {
        return Err(ApiError::new(
            StatusCode::FORBIDDEN,
            "forbidden",
            "Forbidden",
            "/metrics answers loopback clients only; set WORKBENCH_METRICS_TOKEN to let others in \
                with it",
        ));
    };
    let presented = authorization
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .unwrap_or("");
    if bool::from(presented.as_bytes().ct_eq(token.as_bytes())) {
        Ok(())
    } else {
        Err(ApiError::unauthorized(
            "/metrics needs the metrics token as a bearer token",
        ))
    }
}

pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.service(web::resource("/healthz").route(web::get().to(healthz)))
        .service(web::resource("/readyz").route(web::get().to(readyz)))
        .service(web::resource("/metrics").route(web::get().to(metrics)));
}

#[cfg(test)]
mod tests {
    use super::*;
    use actix_web::ResponseError;

    fn peer(ip: &str) -> Option<SocketAddr> {
        Some(SocketAddr::new(ip.parse().expect("ip"), 40_000))
    }

    #[test]
    fn metrics_answer_loopback_or_the_token_only() {
        let bearer = |t: &str| HeaderValue::from_str(&format!("Bearer {t}")).expect("header");
        for ip in ["127.0.0.1", "::1", "::ffff:127.0.0.1"] {
            assert!(metrics_access(peer(ip), None, None).is_ok(), "{ip}");
        }
        let outside = peer("10.1.2.3");
        let refused = metrics_access(outside, None, None).expect_err("refused");
        assert_eq!(refused.status_code(), StatusCode::FORBIDDEN);
        assert!(metrics_access(outside, Some(&bearer("s3cret")), Some("s3cret")).is_ok());
        for wrong in [
            None,
            Some(bearer("s3cre")),
            Some(bearer("s3cret!")),
            Some(bearer("")),
        ] {
            let refused =
                metrics_access(outside, wrong.as_ref(), Some("s3cret")).expect_err("refused");
            assert_eq!(refused.status_code(), StatusCode::UNAUTHORIZED);
        }
        assert!(
            metrics_access(None, None, Some("s3cret")).is_err(),
            "no peer: not loopback"
        );
    }
}
