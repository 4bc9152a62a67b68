//! The OpenAPI document's promises, held against the server: its examples of flow
//! configurations and trigger bodies succeed on a fresh server (docs/flows.md shows the same
//! ones), and its two documentation paths refuse other methods with 405.

use serde_json::{json, Value};

use crate::support::{blackbox, call, Server};

/// Contract §11: every configuration example of the document publishes, and every trigger
/// example starts the flow it was written for and makes its cards.
async fn the_documents_flow_and_trigger_examples_succeed(server: Server) {
    let doc = call(&server, "GET", "/openapi.json", None, None).await;
    assert_eq!(doc.status, 200);
    let schemas = &doc.body["components"]["schemas"];
    let configs = schemas["FlowConfig"]["examples"]
        .as_array()
        .expect("configuration examples")
        .clone();
    assert_eq!(
        configs.len(),
        3,
        "one step, variables and a notification, two steps"
    );
    let admin = Some(server.admin_secret.as_str());
    let mut flows = Vec::new();
    for (i, config) in configs.iter().enumerate() {
        let created = call(
            &server,
            "POST",
            &format!("/v1/{}/action-flow", server.env),
            admin,
            Some(json!({"name": format!("Example {i}")})),
        )
        .await;
        assert_eq!(created.status, 201, "{}", created.text);
        let id = created.body["data"]["id"].as_str().expect("id").to_owned();
        let published = call(
            &server,
            "POST",
            &format!("/v1/{}/action-flow/{id}/config/publish", server.env),
            admin,
            Some(config.clone()),
        )
        .await;
        assert_eq!(published.status, 200, "example {i}: {}", published.text);
        flows.push((id, config.clone()));
    }

    let triggers = schemas["TriggerRequestBody"]["examples"]
        .as_array()
        .expect("trigger examples")
        .clone();
    assert!(!triggers.is_empty());
    for (i, body) in triggers.iter().enumerate() {
        // Each trigger example is written for the configuration whose variables it sends.
        let sends: Vec<&String> = body["flows"][0]["payload"]["variables"]
            .as_object()
            .map(|v| v.keys().collect())
            .unwrap_or_default();
        let (flow, _) = flows
            .iter()
            .find(|(_, config)| {
                sends
                    .iter()
                    .all(|name| mentions(config, &format!("%{{{name}}}")))
            })
            .expect("a flow for the example");
        let started = call(
            &server,
            "POST",
            &format!("/v1/{}/action-flow/{flow}/start", server.env),
            admin,
            Some(body.clone()),
        )
        .await;
        assert_eq!(started.status, 200, "trigger {i}: {}", started.text);
        let users = body["flows"][0]["target"]["targetUserIds"]
            .as_array()
            .expect("user ids");
        for user in users {
            let user = user.as_str().expect("user id");
            let feed = call(
                &server,
                "GET",
                &format!("/v1/{}/users/{user}/cards", server.env),
                admin,
                None,
            )
            .await;
            assert_eq!(feed.status, 200, "{}", feed.text);
            assert!(
                feed.body["data"].as_array().is_some_and(|c| !c.is_empty()),
                "trigger {i} made no card for {user}: {}",
                feed.text
            );
        }
    }
}

fn mentions(value: &Value, text: &str) -> bool {
    match value {
        Value::String(s) => s.contains(text),
        Value::Array(items) => items.iter().any(|v| mentions(v, text)),
        Value::Object(map) => map.values().any(|v| mentions(v, text)),
        _ => false,
    }
}

/// Contract §11: the document and the reference answer GET only; any other method is a 405
/// problem with `Allow`, not a 404.
async fn the_documentation_paths_refuse_other_methods_with_405(server: Server) {
    for path in ["/openapi.json", "/docs/", "/docs/index.css"] {
        for method in ["POST", "PUT", "PATCH", "DELETE", "TRACE"] {
            let reply = call(&server, method, path, None, None).await;
            reply.problem(405, "method_not_allowed");
            assert_eq!(reply.header("allow"), Some("GET"), "{method} {path}");
        }
        let get = call(&server, "GET", path, None, None).await;
        assert_eq!(get.status, 200, "GET {path}");
    }
}

blackbox!(
    the_documents_flow_and_trigger_examples_succeed,
    the_documentation_paths_refuse_other_methods_with_405,
);
