//! The browser SDK's example page (`sdks/web`), served at `/console/sdk-example/` for trying the
//! SDK against this service: it signs in with the end-user token its address's fragment names
//! (`#base=...&env=...&user=...&token=...`), never with a console session. The page, its script
//! and the SDK's built bundle are embedded.

use actix_web::http::header;
use actix_web::{web, HttpResponse};

use super::shell::see_other;

const PAGE: &str = include_str!("../../../../sdks/web/example/index.html");
const SCRIPT: &str = include_str!("../../../../sdks/web/example/example.js");
const SDK: &str = include_str!("../../../../sdks/web/dist/workbench.js");

/// Scripts from this origin only; the page's and the feed's own style elements; card images
/// from anywhere on the web; calls to this origin only.
const POLICY: &str = "default-src 'none'; script-src 'self'; style-src 'self' 'unsafe-inline'; \
                      img-src https: http:; connect-src 'self'; form-action 'none'; \
                      frame-ancestors 'none'; base-uri 'none'";

pub(super) fn configure(cfg: &mut web::ServiceConfig) {
    cfg.route(
        "/console/sdk-example",
        web::get().to(|| async { see_other("/console/sdk-example/") }),
    )
    .route(
        "/console/sdk-example/",
        web::get().to(|| async { serve("text/html; charset=utf-8", PAGE) }),
    )
    .route(
        "/console/sdk-example/example.js",
        web::get().to(|| async { serve("text/javascript; charset=utf-8", SCRIPT) }),
    )
    .route(
        "/console/sdk-example/workbench.js",
        web::get().to(|| async { serve("text/javascript; charset=utf-8", SDK) }),
    );
}

fn serve(kind: &'static str, body: &'static str) -> HttpResponse {
    HttpResponse::Ok()
        .content_type(kind)
        .insert_header((header::CACHE_CONTROL, "no-cache"))
        .insert_header((header::CONTENT_SECURITY_POLICY, POLICY))
        .insert_header((header::REFERRER_POLICY, "no-referrer"))
        .insert_header((header::X_FRAME_OPTIONS, "DENY"))
        .body(body)
}
