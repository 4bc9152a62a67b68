//! Webhook subscriptions (spec 4.4, contract §7). Role `workbench`, or the `webhooks:*` scopes.

mod deliveries;
mod requests;
mod subscriptions;

use actix_web::web;

pub use deliveries::*;
pub use subscriptions::*;

pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.service(
        web::resource("/v1/{environmentId}/webhook")
            .route(web::get().to(list))
            .route(web::post().to(subscribe)),
    )
    .service(
        web::resource("/v1/{environmentId}/webhook/{webhookId}")
            .route(web::get().to(get))
            .route(web::patch().to(update))
            .route(web::delete().to(disable)),
    )
    .service(
        web::resource("/v1/{environmentId}/webhook/{webhookId}/enable")
            .route(web::post().to(enable)),
    )
    .service(
        web::resource("/v1/{environmentId}/webhook/{webhookId}/rotate-secret")
            .route(web::post().to(rotate_secret)),
    )
    .service(
        web::resource("/v1/{environmentId}/webhook/{webhookId}/test").route(web::post().to(test)),
    )
    .service(
        web::resource("/v1/{environmentId}/webhook/{webhookId}/deliveries")
            .route(web::get().to(deliveries)),
    )
    .service(
        web::resource("/v1/{environmentId}/webhook/{webhookId}/deliveries/{eventId}/resend")
            .route(web::post().to(resend)),
    )
    .service(
        web::resource("/v1/{environmentId}/webhook/{webhookId}/recover")
            .route(web::post().to(recover)),
    );
}
