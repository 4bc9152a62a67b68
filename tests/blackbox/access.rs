//! Contract §16: access to the path's environment, then the permission, are checked before the
//! body: a key of another environment gets 401 and a key without the permission 403, whatever
//! the body says. Every operation of `/openapi.json` that takes a body and names an
//! environment is sent a malformed JSON body by each kind of key.

use reqwest::header::CONTENT_TYPE;
use serde_json::Value;

use crate::support::{blackbox, call, Server};

/// Every (method, path template) of the document with a request body, under `/v1/{environmentId}`.
fn operations_with_bodies(doc: &Value) -> Vec<(String, String)> {
    let mut found = Vec::new();
    let Some(paths) = doc["paths"].as_object() else {
        return found;
    };
    for (path, item) in paths {
        if !path.starts_with("/v1/{environmentId}") {
            continue;
        }
        for (method, operation) in item.as_object().into_iter().flatten() {
            if operation.get("requestBody").is_some() {
                found.push((method.to_uppercase(), path.clone()));
            }
        }
    }
    found
}

/// Every (method, path template) of the document with a query parameter, under
/// `/v1/{environmentId}`.
fn operations_with_queries(doc: &Value) -> Vec<(String, String)> {
    let mut found = Vec::new();
    for (path, item) in doc["paths"].as_object().into_iter().flatten() {
        if !path.starts_with("/v1/{environmentId}") {
            continue;
        }
        for (method, operation) in item.as_object().into_iter().flatten() {
            let queried = operation["parameters"]
                .as_array()
                .is_some_and(|ps| ps.iter().any(|p| p["in"] == "query"));
            if queried {
                found.push((method.to_uppercase(), path.clone()));
            }
        }
    }
    found
}

/// The path with the environment given and every other parameter a made-up id.
fn concrete(template: &str, env: &str) -> String {
    let mut out = String::new();
    let mut rest = template;
    while let Some(open) = rest.find('{') {
        out.push_str(&rest[..open]);
        let close = rest[open..].find('}').map_or(rest.len(), |c| open + c);
        let name = &rest[open + 1..close];
        out.push_str(if name == "environmentId" { env } else { "x_1" });
        rest = rest.get(close + 1..).unwrap_or("");
    }
    out.push_str(rest);
    out
}

/// What a broken request answers to a key of another environment (401 wanted) and to
/// `unfit`, a key of this environment without the permission (403 wanted): each operation
/// that answered otherwise. `broken` makes the request from (method, concrete path).
async fn refusals(
    server: &Server,
    operations: &[(String, String)],
    unfit: &str,
    broken: impl Fn(reqwest::Method, &str) -> reqwest::RequestBuilder,
) -> Vec<String> {
    let other = server.other_env("elsewhere");
    let elsewhere = server.key(&["--env", &other, "--role", "workbench", "--role", "events"]);
    let mut wrong = Vec::new();
    for (method, template) in operations {
        let path = concrete(template, &server.env);
        let method = reqwest::Method::from_bytes(method.as_bytes()).expect("method");
        for (key, want) in [(elsewhere.as_str(), 401), (unfit, 403)] {
            let reply = broken(method.clone(), &path).bearer_auth(key).send().await;
            let status = reply.expect("sent").status().as_u16();
            if status != want {
                wrong.push(format!("{method} {template}: {status}, want {want}"));
            }
        }
    }
    wrong
}

async fn keys_are_checked_before_the_body_is_read(server: Server) {
    let doc = call(&server, "GET", "/openapi.json", None, None).await.body;
    let operations = operations_with_bodies(&doc);
    assert!(operations.len() > 20, "{operations:?}");
    // A key of this environment that may do none of these writes.
    let reader = server.key(&["--scope", "workbench_folders:read"]);
    let wrong = refusals(&server, &operations, &reader, |method, path| {
        server
            .client
            .request(method, server.url(path))
            .header(CONTENT_TYPE, "application/json")
            .body("{\"not json")
    })
    .await;
    assert!(
        wrong.is_empty(),
        "checked after the body:\n{}",
        wrong.join("\n")
    );
}

/// The same for the query string: a key of another environment gets 401 and a key without
/// the permission 403 whatever the query says.
async fn keys_are_checked_before_the_query_is_read(server: Server) {
    let doc = call(&server, "GET", "/openapi.json", None, None).await.body;
    let operations = operations_with_queries(&doc);
    assert!(operations.len() >= 5, "{operations:?}");
    // A key of this environment that none of these operations accepts.
    let settings_only = server.key(&["--scope", "environment_settings:write"]);
    let bad = "limit=oops&after=%%%&permanent=maybe&testUser=maybe&uncategorized=maybe&status=none";
    let wrong = refusals(&server, &operations, &settings_only, |method, path| {
        server
            .client
            .request(method, server.url(&format!("{path}?{bad}")))
    })
    .await;
    assert!(
        wrong.is_empty(),
        "checked after the query:\n{}",
        wrong.join("\n")
    );
}

blackbox!(
    keys_are_checked_before_the_body_is_read,
    keys_are_checked_before_the_query_is_read,
);
