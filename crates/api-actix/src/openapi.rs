//! The OpenAPI 3.1 document, generated from the handlers' annotations, and the interactive
//! reference at `/docs` (Swagger UI, served from assets compiled into the binary).

use domain::{Permission, Scope};
use utoipa::openapi::path::{HttpMethod, OperationBuilder};
use utoipa::openapi::schema::{ObjectBuilder, Type};
use utoipa::openapi::security::{Http, HttpAuthScheme, SecurityScheme};
use utoipa::openapi::{ContentBuilder, Ref, RefOr, Required, ResponseBuilder};
use utoipa::{Modify, OpenApi, ToResponse};

use crate::problem::{problem, NotFound};
use utoipa_swagger_ui::SwaggerUi;

use crate::routes::{
    audience, bulk, configs, credentials, environments, feed, flows, folders, instances, oauth,
    ops, publish, push, sdk_keys, settings, stats, tasks, trigger, webhooks,
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
        flows::list, flows::create, flows::get, flows::update, configs::get_config,
            publish::publish,
        configs::save_draft, configs::discard_draft, configs::approve_draft, publish::publish_draft,
        flows::archive, flows::unarchive, settings::get_settings, settings::put_settings,
        audience::put_user, audience::get_user, audience::delete_user, audience::list_users,
        audience::put_users, audience::create_segment, audience::list_segments,
            audience::get_segment,
        audience::update_segment, audience::delete_segment, audience::list_streams,
        audience::create_stream, audience::delete_stream,
        tasks::cancel, tasks::cancel_status, tasks::list, bulk::create_live, bulk::create_test,
            bulk::status, bulk::upload,
        trigger::start, trigger::test, trigger::invocation, instances::instance,
        trigger::invocations, trigger::feed, feed::count, feed::stream, feed::stream_ticket,
            trigger::act, trigger::events,
        webhooks::subscribe, webhooks::list, webhooks::get, webhooks::update, webhooks::disable,
            webhooks::enable,
        webhooks::rotate_secret, webhooks::test, webhooks::deliveries, webhooks::resend,
            webhooks::recover,
        push::list, push::create, push::update, push::delete, push::set_enabled,
            push::register_device, push::unregister_device, push::list_devices, push::card_pushes,
        environments::list, credentials::create, credentials::list, credentials::revoke,
            oauth::token,
        ops::healthz, ops::readyz, ops::metrics,
        stats::flow, stats::folder,
        sdk_keys::create, sdk_keys::list, sdk_keys::get, sdk_keys::update, sdk_keys::delete,
    ),
    components(
        schemas(crate::problem::Problem, crate::problem::FieldProblem),
        responses(NotFound),
    ),
    modifiers(&Extras),
    tags(
        (name = "folders", description = "Folders that organise Action Flows"),
        (name = "action-flows",
            description = "Action Flows, their versioned configurations, drafts and approvals"),
        (name = "audience", description = "End users, segments and streams that flows target"),
        (name = "triggers",
            description = "Starting and testing Action Flows, and their invocations"),
        (name = "cards", description = "The end-user card API: feed, actions, events"),
        (name = "webhooks",
            description = "Webhook subscriptions and their signed, retried deliveries"),
        (name = "push",
            description = "Push notification platforms and their credentials, end users' devices, \
                and the pushes sent to them"),
        (name = "credentials", description = "API keys, access tokens and environments"),
        (name = "sdk-keys",
            description = "SDK keys: the public keys that verify end users' own tokens on their \
                feed, card actions and devices"),
        (name = "operations", description = "Health, metrics and this document"),
    )
)]
/// The OpenAPI document of the API (`/openapi.json`).
pub struct ApiDoc;

/// Security schemes, and the two documentation endpoints that have no handler of ours.
struct Extras;

impl Modify for Extras {
    fn modify(&self, doc: &mut utoipa::openapi::OpenApi) {
        security_schemes(doc);
        documentation_paths(doc);
        upload_with_post(doc);
        optional_cancel_body(doc);
        shared_responses(doc);
        open_free_form_objects(doc);
    }
}

/// The credentials an operation may name: an API key (or its access token), an end user's own
/// token, and the token exchange's basic authentication.
fn security_schemes(doc: &mut utoipa::openapi::OpenApi) {
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
        "userToken",
        SecurityScheme::Http(
            Http::builder()
                .scheme(HttpAuthScheme::Bearer)
                .bearer_format("JWT")
                .description(Some(
                    "An end user's own token (contract §15): a JWT your backend signs \
                     (RS256 or ES256) for the user, whose header's `kid` names an SDK key \
                     of the environment and whose `sub` is the path's `endUserId`. It \
                     reaches that user's feed, card actions and devices, and nothing else.",
                ))
                .build(),
        ),
    );
    components.add_security_scheme(
        "basic",
        SecurityScheme::Http(Http::new(HttpAuthScheme::Basic)),
    );
}

/// `/openapi.json` and `/docs/`, which are served by no handler of ours.
fn documentation_paths(doc: &mut utoipa::openapi::OpenApi) {
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
}

/// The upload takes POST as well as PUT (browsers' forms and some HTTP clients send POST): the
/// same operation under an id of its own.
fn upload_with_post(doc: &mut utoipa::openapi::OpenApi) {
    if let Some(item) = doc.paths.paths.get_mut("/uploads/csv/{token}") {
        if let Some(mut post) = item.put.clone() {
            post.operation_id = Some("uploadCsvWithPost".to_owned());
            item.post = Some(post);
        }
    }
}

/// The cancel body is optional: utoipa renders `Option<T>` as `oneOf [null, T]`, which calls a
/// JSON `null` body valid; the server reads no body, not a `null` one.
fn optional_cancel_body(doc: &mut utoipa::openapi::OpenApi) {
    if let Some(body) = doc
        .paths
        .paths
        .get_mut("/v1/{environmentId}/action-flow/{flowConfigId}/task/cancel")
        .and_then(|item| item.post.as_mut())
        .and_then(|operation| operation.request_body.as_mut())
    {
        for content in body.content.values_mut() {
            content.schema = Some(Ref::from_schema_name("CancelRequest").into());
        }
        body.required = Some(Required::False);
    }
}

/// States `additionalProperties: true` on every object schema that names no property: JSON
/// Schema means that already, but client generators read such an object as an empty one
/// (TypeScript's `Record<string, never>`), which takes no metadata, values or payload.
fn open_free_form_objects(doc: &mut utoipa::openapi::OpenApi) {
    fn walk(value: &mut serde_json::Value) {
        match value {
            serde_json::Value::Object(map) => {
                let object = match map.get("type") {
                    Some(serde_json::Value::String(t)) => t == "object",
                    Some(serde_json::Value::Array(types)) => types.iter().any(|t| t == "object"),
                    _ => false,
                };
                let shaped = [
                    "properties",
                    "additionalProperties",
                    "patternProperties",
                    "oneOf",
                    "anyOf",
                    "allOf",
                    "$ref",
                ]
                .iter()
                .any(|k| map.contains_key(*k));
                if object && !shaped {
                    map.insert("additionalProperties".into(), serde_json::Value::Bool(true));
                }
                // Examples and values are data, not schemas.
                map.iter_mut()
                    .filter(|(k, _)| {
                        !matches!(
                            k.as_str(),
                            "example" | "examples" | "default" | "enum" | "const"
                        )
                    })
                    .for_each(|(_, v)| walk(v));
            }
            serde_json::Value::Array(items) => items.iter_mut().for_each(walk),
            _ => {}
        }
    }
    let Some(components) = doc.components.as_mut() else {
        return;
    };
    let Ok(mut schemas) = serde_json::to_value(&components.schemas) else {
        return;
    };
    walk(&mut schemas);
    if let Ok(schemas) = serde_json::from_value(schemas) {
        components.schemas = schemas;
    }
}

fn reference(name: &str) -> Ref {
    Ref::new(format!("#/components/responses/{name}"))
}

/// The answers many operations share, declared once under `components/responses` and
/// referenced by rule: 401 and 429 for every operation with an API key, 403 naming the scope
/// of its security requirement (and the legacy roles that grant it too), 400, 413 and 415
/// for every JSON body, 400 for every query, 503 `storage_full` for every write. An
/// operation's own annotation of a status wins.
fn shared_responses(doc: &mut utoipa::openapi::OpenApi) {
    let components = doc.components.get_or_insert_with(Default::default);
    for (name, schema) in crate::schemas::schemas() {
        if let Ok(schema) = serde_json::from_value(schema) {
            components.schemas.insert(name.to_owned(), schema);
        }
    }
    let (name, not_found) = NotFound::response();
    components.responses.insert(name.to_owned(), not_found);
    for (name, response) in shared() {
        components
            .responses
            .insert(name.to_owned(), response.build().into());
    }

    for item in doc.paths.paths.values_mut() {
        let writes = [&item.post, &item.put, &item.patch].map(Option::is_some);
        let operations = [
            &mut item.post,
            &mut item.put,
            &mut item.patch,
            &mut item.get,
            &mut item.delete,
        ];
        for (i, operation) in operations.into_iter().enumerate() {
            let Some(operation) = operation else { continue };
            let write = i < 3 && writes[i];
            add_shared(operation, write);
        }
    }
}

/// The shared answers, by the name they are referenced by.
fn shared() -> [(&'static str, ResponseBuilder); 7] {
    let integer = |description: &str| {
        utoipa::openapi::HeaderBuilder::new()
            .schema(ObjectBuilder::new().schema_type(Type::Integer))
            .description(Some(description))
            .build()
    };
    [
        (
            "BadRequest",
            problem(
                "Invalid request (`validation_failed`, with every field problem in `errors`; \
                 `malformed_json` for a body that is not JSON; `invalid_path` for a path with a \
                 control character or a percent-escape that does not decode to UTF-8)",
            ),
        ),
        (
            "Unauthorized",
            problem(
                "No valid credential, or an environment the key may not use (`unauthorized`); \
                 `WWW-Authenticate: Bearer`",
            ),
        ),
        (
            "Forbidden",
            problem("The key lacks the permission (`forbidden`); `detail` names the scope"),
        ),
        (
            "PayloadTooLarge",
            problem("The body is over 1 MiB (`payload_too_large`)"),
        ),
        (
            "UnsupportedMediaType",
            problem(
                "The body is not `application/json` or `application/*+json`, or has no \
                 `Content-Type` (`unsupported_media_type`)",
            ),
        ),
        // Contract §18: any write may find the disk full, and the low-disk guard refuses new
        // work; both answer 503 `storage_full` with `Retry-After`.
        (
            "StorageFull",
            problem(
                "Storage full (`storage_full`, with `Retry-After`): the disk has no room for the \
                 write, or free space is below `WORKBENCH_MIN_FREE_DISK`",
            ),
        ),
        // Contract §16: every call with an API key counts against the key's rate limit.
        (
            "RateLimited",
            problem(
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
            .header("RateLimit-Reset", integer("Seconds until a request may go")),
        ),
    ]
}

/// Adds to `operation` the shared answers its credentials, body, parameters and method call
/// for (`write`: a POST, PUT or PATCH), unless it states them itself.
fn add_shared(operation: &mut utoipa::openapi::path::Operation, write: bool) {
    let bearer = operation.security.iter().flatten().find_map(|requirement| {
        let value = serde_json::to_value(requirement).ok()?;
        let scopes = value.get("bearer")?.as_array()?.clone();
        Some(scopes)
    });
    let user_token = operation.security.iter().flatten().any(|requirement| {
        serde_json::to_value(requirement).is_ok_and(|value| value.get("userToken").is_some())
    });
    let json_body = operation
        .request_body
        .as_ref()
        .is_some_and(|body| body.content.keys().any(|media| media == "application/json"));
    let query = operation.parameters.iter().flatten().any(|parameter| {
        matches!(
            parameter.parameter_in,
            utoipa::openapi::path::ParameterIn::Query
        )
    });
    let path = path_parameters(operation);
    let mut add = |status: &str, response: Ref| {
        operation
            .responses
            .responses
            .entry(status.to_owned())
            .or_insert_with(|| response.into());
    };
    if json_body || query || path {
        add("400", reference("BadRequest"));
    }
    if let Some(scopes) = bearer {
        let mut unauthorized = reference("Unauthorized");
        if user_token {
            unauthorized.description = TOKEN_REFUSED.to_owned();
        }
        add("401", unauthorized);
        let scope = scopes
            .first()
            .and_then(|s| s.as_str())
            .and_then(|s| s.parse::<Scope>().ok());
        if let Some(scope) = scope {
            let mut forbidden = reference("Forbidden");
            forbidden.description = lacks_scope(scope, user_token);
            add("403", forbidden);
        }
        add("429", reference("RateLimited"));
    } else if user_token {
        // A route of end users' own tokens only (stream tickets).
        let mut unauthorized = reference("Unauthorized");
        unauthorized.description = TOKEN_REFUSED.to_owned();
        add("401", unauthorized);
        let mut forbidden = reference("Forbidden");
        forbidden.description = "The user token is another end user's, or the credential is an \
                                 API key, which never belongs in a browser (`forbidden`)"
            .to_owned();
        add("403", forbidden);
        add("429", reference("RateLimited"));
    }
    if json_body {
        add("413", reference("PayloadTooLarge"));
        add("415", reference("UnsupportedMediaType"));
    }
    if write {
        add("503", reference("StorageFull"));
    }
}

/// The 403 of an operation that needs `scope`: the scope, the legacy roles that grant it too,
/// and (where a user token reaches it) another end user's token.
fn lacks_scope(scope: Scope, user_token: bool) -> String {
    let roles: Vec<String> = Permission::granted_by(scope)
        .legacy_roles()
        .iter()
        .map(|role| format!("`{role}`"))
        .collect();
    let needs = if roles.is_empty() {
        format!("The key lacks the scope `{scope}` (`forbidden`)")
    } else {
        format!(
            "The key lacks the scope `{scope}` and the legacy role {} (`forbidden`)",
            roles.join(" or ")
        )
    };
    if user_token {
        format!("{needs}, or the user token is another end user's")
    } else {
        needs
    }
}

/// The 401 of a route a user token reaches.
const TOKEN_REFUSED: &str = "No valid credential, or an environment the key may not use \
    (`unauthorized`); a refused user token names its reason: `token_malformed`, \
    `token_unknown_key`, `token_signature`, `token_expired`, `token_lifetime` or \
    `token_issuer`, with `WWW-Authenticate: Bearer error=\"invalid_token\"`";

/// The pattern of every path parameter that states none: the edge refuses a path with a
/// control character (`invalid_path`, `edge::path_problem`).
pub const PATH_PARAMETER_PATTERN: &str = "^[^\\u0000-\\u001f\\u007f-\\u009f]+$";

/// Gives each path parameter of `operation` a non-empty string schema without control
/// characters (unless its annotation states a pattern), and adds `invalid_path` to the
/// description of an answer 400 of the operation's own. Whether it has path parameters.
fn path_parameters(operation: &mut utoipa::openapi::path::Operation) -> bool {
    use utoipa::openapi::path::ParameterIn;
    let mut any = false;
    for parameter in operation.parameters.iter_mut().flatten() {
        if !matches!(parameter.parameter_in, ParameterIn::Path) {
            continue;
        }
        any = true;
        let Ok(mut value) = serde_json::to_value(&*parameter) else {
            continue;
        };
        let Some(schema) = value.get_mut("schema").and_then(|s| s.as_object_mut()) else {
            continue;
        };
        if schema.get("type").and_then(|t| t.as_str()) == Some("string")
            && !schema.contains_key("pattern")
        {
            schema.insert("minLength".to_owned(), 1.into());
            schema.insert("pattern".to_owned(), PATH_PARAMETER_PATTERN.into());
        }
        if let Ok(changed) = serde_json::from_value(value) {
            *parameter = changed;
        }
    }
    if any {
        if let Some(RefOr::T(own)) = operation.responses.responses.get_mut("400") {
            if !own.description.contains("invalid_path") {
                own.description.push_str(
                    "; `invalid_path` for a path with a control character or a percent-escape \
                     that does not decode to UTF-8",
                );
            }
        }
    }
    any
}

/// The document as served: built and serialised on the first request, then shared by every
/// worker. (Held as a tree per worker, it cost each of them megabytes from the start, and
/// each request serialised it again.) `None` if it could not be serialised, which a tree of
/// strings and maps does not do.
fn document() -> Option<actix_web::web::Bytes> {
    static DOCUMENT: std::sync::OnceLock<Option<actix_web::web::Bytes>> =
        std::sync::OnceLock::new();
    DOCUMENT
        .get_or_init(|| match ApiDoc::openapi().to_json() {
            Ok(json) => Some(json.into()),
            Err(e) => {
                tracing::error!(error = %e, "the OpenAPI document could not be serialised");
                None
            }
        })
        .clone()
}

/// Serves `/openapi.json` and the UI under `/docs/`; `/docs` redirects there. Any other method
/// on those paths is answered 405 with `Allow: GET` (the UI's own routes take GET only, and
/// without this the request would fall through to the 404 of no route).
pub fn configure(cfg: &mut actix_web::web::ServiceConfig) {
    use actix_web::{guard, http::header, web, HttpResponse};
    cfg.service(web::resource("/docs").route(web::get().to(|| async {
        HttpResponse::PermanentRedirect()
            .insert_header((header::LOCATION, "/docs/"))
            .finish()
    })))
    .service(
        web::resource("/openapi.json")
            .guard(guard::Get())
            .to(|| async {
                match document() {
                    Some(json) => Ok(HttpResponse::Ok()
                        .insert_header(header::ContentType::json())
                        .body(json)),
                    None => Err(crate::problem::ApiError::internal()),
                }
            }),
    )
    .service(
        SwaggerUi::new("/docs/{_:.*}").config(utoipa_swagger_ui::Config::from("/openapi.json")),
    )
    .service(
        web::resource(["/openapi.json", "/docs/{_:.*}"]).to(|| async {
            // The edge turns this into a `method_not_allowed` problem, keeping `Allow`.
            HttpResponse::MethodNotAllowed()
                .insert_header((header::ALLOW, "GET"))
                .finish()
        }),
    );
}
