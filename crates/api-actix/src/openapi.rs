//! The OpenAPI 3.1 document, generated from the handlers' annotations, and the interactive
//! reference at `/docs` (Swagger UI, served from assets compiled into the binary).

use utoipa::openapi::path::{HttpMethod, OperationBuilder};
use utoipa::openapi::security::{Http, HttpAuthScheme, SecurityScheme};
use utoipa::openapi::{ContentBuilder, ResponseBuilder};
use utoipa::{Modify, OpenApi};
use utoipa_swagger_ui::SwaggerUi;

use crate::routes::{
    audience, bulk, credentials, environments, flows, folders, oauth, ops, push, stats, tasks,
    trigger, webhooks,
};

#[derive(OpenApi)]
#[openapi(
    info(
        title = "Workbench API",
        description = "Folders, Action Flows, webhooks and push notification platforms. \
Every error is an RFC 9457 problem document (`application/problem+json`) with a stable `code`; \
every response carries `X-Request-Id`.",
    ),
    paths(
        folders::list, folders::create, folders::get, folders::rename, folders::delete,
        flows::list, flows::create, flows::get, flows::update, flows::get_config, flows::publish,
        flows::save_draft, flows::discard_draft, flows::approve_draft, flows::publish_draft,
        flows::archive, flows::unarchive, flows::get_settings, flows::put_settings,
        audience::put_user, audience::get_user, audience::delete_user, audience::list_users,
        audience::put_users, audience::create_segment, audience::list_segments, audience::get_segment,
        audience::update_segment, audience::delete_segment, audience::list_streams,
        audience::create_stream, audience::delete_stream,
        tasks::cancel, tasks::cancel_status, bulk::create_live, bulk::create_test, bulk::status, bulk::upload,
        trigger::start, trigger::test, trigger::invocation, trigger::feed, trigger::act, trigger::events,
        webhooks::subscribe, webhooks::list, webhooks::get, webhooks::update, webhooks::disable, webhooks::enable,
        webhooks::rotate_secret, webhooks::test, webhooks::deliveries, webhooks::resend, webhooks::recover,
        push::list, push::create, push::update, push::delete, push::set_enabled, push::register_device, push::unregister_device, push::list_devices, push::card_pushes,
        environments::list, credentials::create, credentials::list, credentials::revoke, oauth::token,
        ops::healthz, ops::readyz, ops::metrics,
        stats::flow, stats::folder,
    ),
    components(schemas(crate::problem::Problem, crate::problem::FieldProblem)),
    modifiers(&Extras),
    tags(
        (name = "folders", description = "Folders that organise Action Flows"),
        (name = "action-flows", description = "Action Flows, their versioned configurations, drafts and approvals"),
        (name = "audience", description = "End users, segments and streams that flows target"),
        (name = "triggers", description = "Starting and testing Action Flows, and their invocations"),
        (name = "cards", description = "The end-user card API: feed, actions, events"),
        (name = "webhooks", description = "Webhook subscriptions and their signed, retried deliveries"),
        (name = "push", description = "Push notification platforms and their credentials, end users' devices, and the pushes sent to them"),
        (name = "credentials", description = "API keys, access tokens and environments"),
        (name = "operations", description = "Health, metrics and this document"),
    )
)]
pub struct ApiDoc;

/// Security schemes, and the two documentation endpoints that have no handler of ours.
struct Extras;

impl Modify for Extras {
    fn modify(&self, doc: &mut utoipa::openapi::OpenApi) {
        let components = doc.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(
                Http::builder()
                    .scheme(HttpAuthScheme::Bearer)
                    .description(Some("An API key secret, or a token from POST /oauth/token"))
                    .build(),
            ),
        );
        components.add_security_scheme(
            "basic",
            SecurityScheme::Http(Http::new(HttpAuthScheme::Basic)),
        );

        let document = |summary: &str, id: &str, content_type: &str, description: &str| {
            let operation = OperationBuilder::new()
                .summary(Some(summary))
                .operation_id(Some(id))
                .tag("operations")
                .response(
                    "200",
                    ResponseBuilder::new()
                        .description(description)
                        .content(content_type, ContentBuilder::new().build())
                        .build(),
                )
                .build();
            (HttpMethod::Get, operation)
        };
        let (method, operation) = document(
            "This OpenAPI 3.1 document",
            "openapi",
            "application/json",
            "The OpenAPI document",
        );
        doc.paths
            .add_path_operation("/openapi.json", vec![method], operation);
        let (method, operation) = document(
            "Interactive API reference (Swagger UI)",
            "docs",
            "text/html",
            "An HTML page",
        );
        doc.paths
            .add_path_operation("/docs/", vec![method], operation);

        // Contract §18: any write may find the disk full, and the low-disk guard refuses new
        // work; both answer 503 `storage_full` with `Retry-After`.
        // A problem document answer.
        let problem = |description: &str| {
            ResponseBuilder::new().description(description).content(
                "application/problem+json",
                ContentBuilder::new()
                    .schema(Some(utoipa::openapi::Ref::from_schema_name("Problem")))
                    .build(),
            )
        };
        let storage_full = problem(
            "Storage full (`storage_full`, with `Retry-After`): the disk has no room for the \
             write, or free space is below `WORKBENCH_MIN_FREE_DISK`",
        )
        .build();
        // Contract §16: every call with an API key counts against the key's rate limit.
        let integer = |description: &str| {
            utoipa::openapi::HeaderBuilder::new()
                .schema(
                    utoipa::openapi::ObjectBuilder::new()
                        .schema_type(utoipa::openapi::schema::Type::Integer),
                )
                .description(Some(description))
                .build()
        };
        let rate_limited = problem(
            "Too many requests (`rate_limited`): the API key sent more than \
             `WORKBENCH_RATE_LIMIT_KEY` allows; `Retry-After` says when to try again. Every \
             answer to a key whose calls are limited carries the `RateLimit-*` headers",
        )
        .header("Retry-After", integer("Seconds until a request may go"))
        .header(
            "RateLimit-Limit",
            integer("Requests the key may send at once"),
        )
        .header("RateLimit-Remaining", integer("Requests left now: 0"))
        .header("RateLimit-Reset", integer("Seconds until a request may go"))
        .build();
        doc.components
            .get_or_insert_with(Default::default)
            .responses
            .insert("RateLimited".to_owned(), rate_limited.into());
        let rate_limited = utoipa::openapi::Ref::new("#/components/responses/RateLimited");
        for item in doc.paths.paths.values_mut() {
            for operation in [&mut item.post, &mut item.put, &mut item.patch]
                .into_iter()
                .flatten()
            {
                operation
                    .responses
                    .responses
                    .entry("503".to_owned())
                    .or_insert_with(|| storage_full.clone().into());
            }
            for operation in [
                &mut item.get,
                &mut item.post,
                &mut item.put,
                &mut item.patch,
                &mut item.delete,
            ]
            .into_iter()
            .flatten()
            {
                let with_key = operation.security.iter().flatten().any(|requirement| {
                    serde_json::to_value(requirement).is_ok_and(|v| v.get("bearer").is_some())
                });
                if with_key {
                    operation
                        .responses
                        .responses
                        .entry("429".to_owned())
                        .or_insert_with(|| rate_limited.clone().into());
                }
            }
        }
    }
}

/// Serves `/openapi.json` and the UI under `/docs/`; `/docs` redirects there.
pub fn configure(cfg: &mut actix_web::web::ServiceConfig) {
    cfg.service(
        actix_web::web::resource("/docs").route(actix_web::web::get().to(|| async {
            actix_web::HttpResponse::PermanentRedirect()
                .insert_header((actix_web::http::header::LOCATION, "/docs/"))
                .finish()
        })),
    )
    .service(SwaggerUi::new("/docs/{_:.*}").url("/openapi.json", ApiDoc::openapi()));
}
