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

async fn keys_are_checked_before_the_body_is_read(server: Server) {
    let doc = call(&server, "GET", "/openapi.json", None, None).await.body;
    let operations = operations_with_bodies(&doc);
    assert!(operations.len() > 20, "{operations:?}");
    let other = server.other_env("elsewhere");
    let elsewhere = server.key(&["--env", &other, "--role", "workbench", "--role", "events"]);
    // A key of this environment that may do none of these writes.
    let reader = server.key(&["--scope", "workbench_folders:read"]);
    let mut wrong = Vec::new();
    for (method, template) in &operations {
        let path = concrete(template, &server.env);
        for (key, want) in [(&elsewhere, 401), (&reader, 403)] {
            let method = reqwest::Method::from_bytes(method.as_bytes()).expect("method");
            let reply = server
                .client
                .request(method.clone(), server.url(&path))
                .bearer_auth(key)
                .header(CONTENT_TYPE, "application/json")
                .body("{\"not json")
                .send()
                .await
                .expect("sent");
            let status = reply.status().as_u16();
            if status != want {
                wrong.push(format!("{method} {template}: {status}, want {want}"));
            }
        }
    }
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
    let other = server.other_env("elsewhere");
    let elsewhere = server.key(&["--env", &other, "--role", "workbench", "--role", "events"]);
    // A key of this environment that none of these operations accepts.
    let settings_only = server.key(&["--scope", "environment_settings:write"]);
    let bad = "limit=oops&after=%%%&permanent=maybe&testUser=maybe&uncategorized=maybe&status=none";
    let mut wrong = Vec::new();
    for (method, template) in &operations {
        let path = format!("{}?{bad}", concrete(template, &server.env));
        for (key, want) in [(&elsewhere, 401), (&settings_only, 403)] {
            let method = reqwest::Method::from_bytes(method.as_bytes()).expect("method");
            let reply = server
                .client
                .request(method.clone(), server.url(&path))
                .bearer_auth(key)
                .send()
                .await
                .expect("sent");
            let status = reply.status().as_u16();
            if status != want {
                wrong.push(format!("{method} {template}: {status}, want {want}"));
            }
        }
    }
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
