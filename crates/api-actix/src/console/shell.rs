//! The console's answer shell, which needs no session: the HTML document, the headers every
//! page is sent with, redirects after a change, and message pages (refusals, errors). The
//! session's refusals render through it, so it imports nothing of the console.

use actix_web::http::{header, StatusCode};
use actix_web::HttpResponse;
use maud::{html, Markup, DOCTYPE};

/// Where the console lives; its session cookie is sent to nothing else.
pub(crate) const ROOT: &str = "/console";

/// What the console's pages may load: only this origin's own assets, no inline script, calls
/// back to this origin only (the script reads progress again and uploads files), and no frame
/// of another site around them.
const POLICY: &str = "default-src 'none'; style-src 'self'; script-src 'self'; img-src 'self'; \
                      connect-src 'self'; form-action 'self'; frame-ancestors 'none'; \
                      base-uri 'none'";

/// An HTML answer with the console's headers: never cached (a page may show a new key's
/// secret), never framed, nothing loaded from elsewhere.
pub(crate) fn respond(status: StatusCode, body: Markup) -> HttpResponse {
    HttpResponse::build(status)
        .content_type("text/html; charset=utf-8")
        .insert_header((header::CACHE_CONTROL, "no-store"))
        .insert_header((header::CONTENT_SECURITY_POLICY, POLICY))
        .insert_header((header::X_FRAME_OPTIONS, "DENY"))
        .insert_header((header::REFERRER_POLICY, "same-origin"))
        .body(body.into_string())
}

/// A `303 See Other` to `to` (after a change, so that reloading does not send it again).
pub(crate) fn see_other(to: &str) -> HttpResponse {
    HttpResponse::SeeOther()
        .insert_header((header::LOCATION, to.to_owned()))
        .insert_header((header::CACHE_CONTROL, "no-store"))
        .finish()
}

pub(crate) fn document(title: &str, body: Markup) -> Markup {
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { (title) " · Workbench" }
                link rel="stylesheet" href={ (ROOT) "/assets/console.css" };
                script src={ (ROOT) "/assets/console.js" } defer {}
            }
            body { (body) }
        }
    }
}

/// A page without a session: sign-in, and the console's refusals.
pub(crate) fn bare(title: &str, content: Markup) -> Markup {
    document(
        title,
        html! {
            header.top { span.brand { "Workbench" } }
            main #main { (content) }
        },
    )
}

/// A message page (a refusal, an error), with a way back in.
pub(crate) fn message(status: StatusCode, title: &str, text: &str) -> HttpResponse {
    respond(
        status,
        bare(
            title,
            html! {
                h1 { (title) }
                p role="alert" { (text) }
                p { a href={ (ROOT) "/" } { "Back to the console" } }
            },
        ),
    )
}
