//! The middleware every request passes through: request id, tracing span, metrics, panic
//! capture, and the guarantee that every error response is a problem document.

use std::panic::AssertUnwindSafe;
use std::time::Instant;

use actix_web::body::{BoxBody, MessageBody};
use actix_web::dev::{ServiceRequest, ServiceResponse};
use actix_web::http::header::{self, HeaderName, HeaderValue};
use actix_web::middleware::Next;
use actix_web::{web, ResponseError};
use futures_util::FutureExt;
use tracing::Instrument;

use crate::problem::{ApiError, PROBLEM_CONTENT_TYPE};
use crate::AppState;

pub const REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");

/// A client-sent request id is echoed when it is 1–128 visible ASCII characters without
/// spaces; otherwise (or when absent) a new one is minted.
fn request_id(req: &ServiceRequest) -> String {
    req.headers()
        .get(&REQUEST_ID)
        .and_then(|v| v.to_str().ok())
        .filter(|v| !v.is_empty() && v.len() <= 128 && v.bytes().all(|b| b.is_ascii_graphic()))
        .map(str::to_owned)
        .unwrap_or_else(|| ulid::Ulid::new().to_string().to_ascii_lowercase())
}

pub async fn edge(
    req: ServiceRequest,
    next: Next<impl MessageBody + 'static>,
) -> Result<ServiceResponse<BoxBody>, actix_web::Error> {
    let started = Instant::now();
    let id = request_id(&req);
    let method = req.method().to_string();
    // The route pattern, not the path: bounded label values for metrics and logs.
    let route = req
        .resource_map()
        .match_pattern(req.path())
        .unwrap_or_else(|| "unmatched".to_owned());
    let state = req.app_data::<web::Data<AppState>>().cloned();
    let span = tracing::info_span!("request", request_id = %id, method = %method, route = %route);

    // The request cannot be kept aside (actix needs sole ownership of it while routing), so
    // a failure that leaves no response is answered by returning the problem as an error that
    // carries the request id: actix renders it through `ApiError::error_response`.
    let outcome = AssertUnwindSafe(next.call(req))
        .catch_unwind()
        .instrument(span.clone())
        .await;
    let failure = match outcome {
        Ok(Ok(response)) => Ok(response.map_into_boxed_body()),
        Ok(Err(err)) => {
            tracing::error!(parent: &span, error = %err, "request failed without a response");
            Err(ApiError::from_status(err.as_response_error().status_code()))
        }
        Err(panic) => {
            let message = panic
                .downcast_ref::<&str>()
                .map(|s| (*s).to_owned())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "unknown panic".to_owned());
            tracing::error!(parent: &span, panic = %message, "handler panicked");
            Err(ApiError::internal())
        }
    };
    let mut response = match failure {
        Ok(response) => response,
        Err(problem) => {
            let status = problem.status_code();
            if let Some(state) = &state {
                state
                    .metrics
                    .observe(&method, &route, status.as_u16(), started.elapsed());
            }
            return Err(problem.with_request_id(id).into());
        }
    };

    let status = response.status();
    if status.is_client_error() || status.is_server_error() {
        let is_problem = response
            .headers()
            .get(header::CONTENT_TYPE)
            .is_some_and(|v| v.as_bytes().starts_with(PROBLEM_CONTENT_TYPE.as_bytes()));
        if !is_problem {
            if let Some(err) = response.response().error() {
                tracing::debug!(parent: &span, error = %err, "framework error replaced by a problem");
            }
            let (request, original) = response.into_parts();
            let mut replacement = ApiError::from_status(status).error_response();
            for name in [header::ALLOW, header::RETRY_AFTER] {
                if let Some(value) = original.headers().get(&name) {
                    replacement.headers_mut().insert(name, value.clone());
                }
            }
            response = ServiceResponse::new(request, replacement);
        }
    }
    if let Ok(value) = HeaderValue::from_str(&id) {
        response.headers_mut().insert(REQUEST_ID, value);
    }

    let elapsed = started.elapsed();
    if let Some(state) = state {
        state
            .metrics
            .observe(&method, &route, status.as_u16(), elapsed);
    }
    let latency_ms = elapsed.as_secs_f64() * 1000.0;
    if status.is_server_error() {
        tracing::error!(parent: &span, status = status.as_u16(), latency_ms, "request failed");
    } else {
        tracing::info!(parent: &span, status = status.as_u16(), latency_ms, "request completed");
    }
    Ok(response)
}

#[cfg(test)]
mod tests {
    use actix_web::middleware::from_fn;
    use actix_web::{test, App, HttpResponse};

    use super::*;

    async fn boom() -> HttpResponse {
        panic!("handler bug")
    }

    #[actix_web::test]
    async fn a_panicking_handler_answers_a_500_problem_with_a_request_id() {
        let app = test::init_service(
            App::new()
                .wrap(from_fn(edge))
                .route("/boom", web::get().to(boom))
                .route(
                    "/ok",
                    web::get().to(|| async { HttpResponse::Ok().finish() }),
                ),
        )
        .await;
        let request = test::TestRequest::get()
            .uri("/boom")
            .insert_header(("x-request-id", "abc-1"))
            .to_request();
        let response = match test::try_call_service(&app, request).await {
            Ok(response) => response.into_parts().1,
            Err(err) => err.error_response(),
        };
        assert_eq!(response.status(), 500);
        assert_eq!(
            response
                .headers()
                .get("x-request-id")
                .and_then(|v| v.to_str().ok()),
            Some("abc-1")
        );
        assert_eq!(
            response
                .headers()
                .get(header::CONTENT_TYPE)
                .and_then(|v| v.to_str().ok()),
            Some(PROBLEM_CONTENT_TYPE)
        );
        let body = actix_web::body::to_bytes(response.into_body())
            .await
            .expect("body");
        let problem: serde_json::Value = serde_json::from_slice(&body).expect("json");
        assert_eq!(problem["code"], "internal_error");
        assert!(
            !problem.to_string().contains("handler bug"),
            "the panic message is not leaked"
        );

        // The worker survives: the next request is served.
        let next = test::call_service(&app, test::TestRequest::get().uri("/ok").to_request()).await;
        assert_eq!(next.status(), 200);
    }

    #[actix_web::test]
    async fn plain_text_framework_errors_become_problems() {
        let app = test::init_service(
            App::new()
                .wrap(from_fn(edge))
                .service(web::resource("/only-get").route(web::get().to(HttpResponse::Ok))),
        )
        .await;
        let response = test::call_service(
            &app,
            test::TestRequest::post().uri("/only-get").to_request(),
        )
        .await;
        assert_eq!(response.status(), 405);
        assert!(
            response.headers().get(header::ALLOW).is_some(),
            "Allow survives the conversion"
        );
        let body = test::read_body(response).await;
        let problem: serde_json::Value = serde_json::from_slice(&body).expect("json");
        assert_eq!(problem["code"], "method_not_allowed");
    }
}
