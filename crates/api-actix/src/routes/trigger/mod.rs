//! Triggering flows (spec 4.2 test/start, 4.3), invocation progress (contract §4), and the
//! end-user card API the SDKs would call (contract §4).

mod cards;
mod invocations;
mod start;

use actix_web::web;

pub use cards::*;
pub use invocations::*;
pub use start::*;

/// Largest trigger body: 1,000 elements are allowed, each with up to 10,000 user ids.
pub const MAX_TRIGGER_BODY_BYTES: usize = 32 * 1024 * 1024;

pub fn configure(cfg: &mut web::ServiceConfig) {
    const FLOW: &str = "/v1/{environmentId}/action-flow/{flowConfigId}";
    cfg.service(
        web::resource(format!("{FLOW}/start"))
            .app_data(web::PayloadConfig::new(MAX_TRIGGER_BODY_BYTES))
            .route(web::post().to(start)),
    )
    .service(
        web::resource(format!("{FLOW}/test"))
            .app_data(web::PayloadConfig::new(MAX_TRIGGER_BODY_BYTES))
            .route(web::post().to(test)),
    )
    .service(web::resource(format!("{FLOW}/invocations")).route(web::get().to(invocations)))
    .service(
        web::resource(format!("{FLOW}/invocations/{{flowInvocationId}}"))
            .route(web::get().to(invocation)),
    )
    .service(
        web::resource(format!(
            "{FLOW}/invocations/{{flowInvocationId}}/users/{{endUserId}}"
        ))
        .route(web::get().to(super::instances::instance)),
    )
    .service(
        web::resource("/v1/{environmentId}/users/{endUserId}/cards").route(web::get().to(feed)),
    )
    .service(
        web::resource("/v1/{environmentId}/users/{endUserId}/cards/{cardInstanceId}/actions")
            .route(web::post().to(act)),
    )
    .service(
        web::resource("/v1/{environmentId}/users/{endUserId}/cards/{cardInstanceId}/events")
            .route(web::get().to(events)),
    );
}
