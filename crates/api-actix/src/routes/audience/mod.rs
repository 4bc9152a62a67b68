//! The audience (contract §3): end users, segments, streams. Legacy roles `events` or
//! `workbench`, or scopes `users:read` / `users:write`.

mod segments;
mod streams;
mod users;

use actix_web::web;

pub use segments::*;
pub use streams::*;
pub use users::*;

/// Largest `users:batch` body: 10,000 users with room for their attributes.
pub const MAX_BATCH_BODY_BYTES: usize = 32 * 1024 * 1024;

pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.service(web::resource("/v1/{environmentId}/users").route(web::get().to(list_users)))
        .service(
            web::resource("/v1/{environmentId}/users:batch")
                .app_data(web::PayloadConfig::new(MAX_BATCH_BODY_BYTES))
                .route(web::post().to(put_users)),
        )
        .service(
            web::resource("/v1/{environmentId}/users/{endUserId}")
                .route(web::put().to(put_user))
                .route(web::get().to(get_user))
                .route(web::delete().to(delete_user)),
        )
        .service(
            web::resource("/v1/{environmentId}/segments")
                .route(web::get().to(list_segments))
                .route(web::post().to(create_segment)),
        )
        .service(
            web::resource("/v1/{environmentId}/segments/{segmentId}")
                .route(web::get().to(get_segment))
                .route(web::put().to(update_segment))
                .route(web::delete().to(delete_segment)),
        )
        .service(
            web::resource("/v1/{environmentId}/streams")
                .route(web::get().to(list_streams))
                .route(web::post().to(create_stream)),
        )
        .service(
            web::resource("/v1/{environmentId}/streams/{streamId}")
                .route(web::delete().to(delete_stream)),
        );
}
