//! The error shape for requests actix itself rejects, request ids, operations endpoints,
//! the OpenAPI document, and shutdown.

use serde_json::{json, Value};

use crate::receiver::Receiver;
use crate::support::{blackbox, call, Reply, Server};
use crate::trigger::{fire, published_flow, users};

async fn framework_errors_are_problem_documents(server: Server) {
    let folders = server.url(&format!("/v1/{}/workbench-folder", server.env));
    let send = |request: reqwest::RequestBuilder| async move {
        Reply::from(request.send().await.expect("sent")).await
    };
    let bearer = server.admin_secret.clone();

    send(server.client.get(server.url("/no/such/path")))
        .await
        .problem(404, "not_found");
    let wrong_method = send(server.client.patch(folders.clone()).bearer_auth(&bearer)).await;
    wrong_method.problem(405, "method_not_allowed");
    let malformed = send(
        server
            .client
            .post(folders.clone())
            .bearer_auth(&bearer)
            .header("content-type", "application/json")
            .body("{\"name\": "),
    )
    .await;
    malformed.problem(400, "malformed_json");
    let empty = send(
        server
            .client
            .post(folders.clone())
            .bearer_auth(&bearer)
            .header("content-type", "application/json"),
    )
    .await;
    empty.problem(400, "malformed_json");
    let not_object = send(
        server
            .client
            .post(folders.clone())
            .bearer_auth(&bearer)
            .json(&json!(["x"])),
    )
    .await;
    not_object.problem(400, "validation_failed");
    let text = send(
        server
            .client
            .post(folders.clone())
            .bearer_auth(&bearer)
            .header("content-type", "text/plain")
            .body("{}"),
    )
    .await;
    text.problem(415, "unsupported_media_type");
    let none = send(
        server
            .client
            .post(folders.clone())
            .bearer_auth(&bearer)
            .body("{\"name\":\"x\"}"),
    )
    .await;
    none.problem(415, "unsupported_media_type");
    let huge = format!("{{\"name\": \"{}\"}}", "a".repeat(2 * 1024 * 1024));
    let too_large = send(
        server
            .client
            .post(folders)
            .bearer_auth(&bearer)
            .header("content-type", "application/json")
            .body(huge),
    )
    .await;
    too_large.problem(413, "payload_too_large");
}

async fn every_response_carries_a_request_id_and_echoes_the_clients(server: Server) {
    let minted = call(&server, "GET", "/healthz", None, None).await;
    let id = minted.header("x-request-id").expect("minted id");
    assert_eq!(id.len(), 26);
    // Not a probe: probes are logged at DEBUG only (contract §17).
    let echoed = Reply::from(
        server
            .client
            .get(server.url("/openapi.json"))
            .header("x-request-id", "trace-abc.123")
            .send()
            .await
            .expect("sent"),
    )
    .await;
    assert_eq!(echoed.header("x-request-id"), Some("trace-abc.123"));
    let refused = Reply::from(
        server
            .client
            .get(server.url("/healthz"))
            .header("x-request-id", "has space")
            .send()
            .await
            .expect("sent"),
    )
    .await;
    assert_ne!(refused.header("x-request-id"), Some("has space"));
    let error = call(&server, "GET", "/nowhere", None, None).await;
    assert!(error.header("x-request-id").is_some());
    for _ in 0..100 {
        if server.logs().contains("trace-abc.123") {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert!(
        server.logs().contains("trace-abc.123"),
        "logs carry the request id"
    );
}

async fn health_readiness_and_metrics(server: Server) {
    let live = call(&server, "GET", "/healthz", None, None).await;
    assert_eq!(
        (live.status, live.body.clone()),
        (200, json!({"status": "ok"}))
    );
    let ready = call(&server, "GET", "/readyz", None, None).await;
    assert_eq!(
        (ready.status, ready.body.clone()),
        (200, json!({"status": "ready"}))
    );
    call(
        &server,
        "GET",
        &format!("/v1/{}/workbench-folder", server.env),
        Some(&server.admin_secret),
        None,
    )
    .await;
    call(
        &server,
        "GET",
        &format!("/v1/{}/workbench-folder", server.env),
        None,
        None,
    )
    .await;
    let metrics = call(&server, "GET", "/metrics", None, None).await;
    assert_eq!(metrics.status, 200);
    assert!(metrics
        .header("content-type")
        .expect("type")
        .starts_with("text/plain"));
    let route = "route=\"/v1/{environmentId}/workbench-folder\"";
    for status in ["200", "401"] {
        let line = format!(
            "workbench_http_requests_total{{method=\"GET\",{route},status=\"{status}\"}} 1"
        );
        assert!(
            metrics.text.contains(&line),
            "missing {line}\n{}",
            metrics.text
        );
    }
    assert!(metrics
        .text
        .contains("workbench_http_request_duration_seconds_bucket{method=\"GET\""));
}

async fn openapi_lists_every_endpoint_with_its_errors(server: Server) {
    let doc = call(&server, "GET", "/openapi.json", None, None).await;
    assert_eq!(doc.status, 200);
    assert_eq!(doc.body["openapi"], "3.1.0");
    let expected: &[(&str, &str, &[&str])] = &[
        (
            "/v1/{environmentId}/workbench-folder",
            "get",
            &["200", "401", "403"],
        ),
        (
            "/v1/{environmentId}/workbench-folder",
            "post",
            &["201", "400", "401", "403", "409", "413", "415", "503"],
        ),
        (
            "/v1/{environmentId}/workbench-folder/{folderId}",
            "get",
            &["200", "401", "403", "404"],
        ),
        (
            "/v1/{environmentId}/workbench-folder/{folderId}",
            "put",
            &["200", "400", "401", "403", "404", "409", "503"],
        ),
        (
            "/v1/{environmentId}/workbench-folder/{folderId}",
            "delete",
            &["204", "401", "403", "404", "409"],
        ),
        (
            "/v1/{environmentId}/action-flow",
            "get",
            &["200", "400", "401", "403"],
        ),
        (
            "/v1/{environmentId}/action-flow",
            "post",
            &["201", "400", "401", "403", "415", "503"],
        ),
        (
            "/v1/{environmentId}/action-flow/{flowConfigId}",
            "get",
            &["200", "401", "403", "404"],
        ),
        (
            "/v1/{environmentId}/action-flow/{flowConfigId}",
            "put",
            &["200", "400", "401", "403", "404", "503"],
        ),
        (
            "/v1/{environmentId}/action-flow/{flowConfigId}/config/{flowConfigVersion}",
            "get",
            &["200", "400", "401", "403", "404"],
        ),
        (
            "/v1/{environmentId}/action-flow/{flowConfigId}/config/publish",
            "post",
            &["200", "400", "401", "403", "404", "409", "503"],
        ),
        (
            "/v1/{environmentId}/action-flow/{flowConfigId}/config/draft",
            "put",
            &["200", "400", "401", "403", "404", "409", "503"],
        ),
        (
            "/v1/{environmentId}/action-flow/{flowConfigId}/config/draft",
            "delete",
            &["204", "401", "403", "404"],
        ),
        (
            "/v1/{environmentId}/action-flow/{flowConfigId}/config/draft/approve",
            "post",
            &["200", "401", "403", "404", "503"],
        ),
        (
            "/v1/{environmentId}/action-flow/{flowConfigId}/config/draft/publish",
            "post",
            &["200", "401", "403", "404", "409", "503"],
        ),
        (
            "/v1/{environmentId}/action-flow/{flowConfigId}/archive",
            "post",
            &["200", "401", "403", "404", "503"],
        ),
        (
            "/v1/{environmentId}/action-flow/{flowConfigId}/unarchive",
            "post",
            &["200", "401", "403", "404", "503"],
        ),
        (
            "/v1/{environmentId}/settings",
            "get",
            &["200", "401", "403"],
        ),
        (
            "/v1/{environmentId}/settings",
            "put",
            &["200", "400", "401", "403", "503"],
        ),
        (
            "/v1/{environmentId}/users",
            "get",
            &["200", "400", "401", "403"],
        ),
        (
            "/v1/{environmentId}/users:batch",
            "post",
            &["200", "400", "401", "403", "413", "503"],
        ),
        (
            "/v1/{environmentId}/users/{endUserId}",
            "put",
            &["200", "400", "401", "403", "415", "503"],
        ),
        (
            "/v1/{environmentId}/users/{endUserId}",
            "get",
            &["200", "401", "403", "404"],
        ),
        (
            "/v1/{environmentId}/users/{endUserId}",
            "delete",
            &["204", "401", "403", "404"],
        ),
        (
            "/v1/{environmentId}/segments",
            "get",
            &["200", "401", "403"],
        ),
        (
            "/v1/{environmentId}/segments",
            "post",
            &["201", "400", "401", "403", "503"],
        ),
        (
            "/v1/{environmentId}/segments/{segmentId}",
            "get",
            &["200", "401", "403", "404"],
        ),
        (
            "/v1/{environmentId}/segments/{segmentId}",
            "put",
            &["200", "400", "401", "403", "404", "503"],
        ),
        (
            "/v1/{environmentId}/segments/{segmentId}",
            "delete",
            &["204", "401", "403", "404"],
        ),
        ("/v1/{environmentId}/streams", "get", &["200", "401", "403"]),
        (
            "/v1/{environmentId}/streams",
            "post",
            &["201", "400", "401", "403", "409", "503"],
        ),
        (
            "/v1/{environmentId}/streams/{streamId}",
            "delete",
            &["204", "401", "403", "404", "409"],
        ),
        (
            "/v1/{environmentId}/action-flow/{flowConfigId}/start",
            "post",
            &[
                "200", "400", "401", "403", "404", "409", "422", "429", "503",
            ],
        ),
        (
            "/v1/{environmentId}/action-flow/{flowConfigId}/test",
            "post",
            &[
                "200", "400", "401", "403", "404", "409", "422", "429", "503",
            ],
        ),
        (
            "/v1/{environmentId}/action-flow/{flowConfigId}/invocations/{flowInvocationId}",
            "get",
            &["200", "401", "403", "404"],
        ),
        (
            "/v1/{environmentId}/action-flow/{flowConfigId}/invocations/{flowInvocationId}/users/{endUserId}",
            "get",
            &["200", "401", "403", "404"],
        ),
        (
            "/v1/{environmentId}/users/{endUserId}/cards",
            "get",
            &["200", "401", "403"],
        ),
        (
            "/v1/{environmentId}/users/{endUserId}/cards/{cardInstanceId}/actions",
            "post",
            &["200", "400", "401", "403", "404", "409", "503"],
        ),
        (
            "/v1/{environmentId}/users/{endUserId}/cards/{cardInstanceId}/events",
            "get",
            &["200", "401", "403", "404"],
        ),
        ("/v1/{environmentId}/webhook", "get", &["200", "401", "403"]),
        (
            "/v1/{environmentId}/webhook",
            "post",
            &["201", "400", "401", "403", "409", "415", "503"],
        ),
        (
            "/v1/{environmentId}/webhook/{webhookId}",
            "get",
            &["200", "401", "403", "404"],
        ),
        (
            "/v1/{environmentId}/webhook/{webhookId}",
            "delete",
            &["200", "204", "400", "401", "403", "404", "409"],
        ),
        (
            "/v1/{environmentId}/webhook/{webhookId}/enable",
            "post",
            &["200", "401", "403", "404", "503"],
        ),
        (
            "/v1/{environmentId}/webhook/{webhookId}/rotate-secret",
            "post",
            &["200", "401", "403", "404", "503"],
        ),
        (
            "/v1/{environmentId}/webhook/{webhookId}/test",
            "post",
            &["200", "401", "403", "404", "503"],
        ),
        (
            "/v1/{environmentId}/webhook/{webhookId}/deliveries",
            "get",
            &["200", "400", "401", "403", "404"],
        ),
        (
            "/v1/{environmentId}/webhook/{webhookId}/deliveries/{eventId}/resend",
            "post",
            &["202", "401", "403", "404", "409", "503"],
        ),
        (
            "/v1/{environmentId}/webhook/{webhookId}/recover",
            "post",
            &["202", "400", "401", "403", "404", "409", "415", "503"],
        ),
        (
            "/v1/{environmentId}/action-flow/{flowConfigId}/task/cancel",
            "post",
            &["202", "400", "401", "403", "404", "415", "503"],
        ),
        (
            "/v1/{environmentId}/action-flow/{flowConfigId}/task/{taskId}/status",
            "get",
            &["200", "400", "401", "403", "404"],
        ),
        (
            "/v1/{environmentId}/action-flow/{flowConfigId}/tasks",
            "get",
            &["200", "400", "401", "403", "404"],
        ),
        (
            "/v1/{environmentId}/action-flow/{flowConfigId}/invocations",
            "get",
            &["200", "400", "401", "403", "404"],
        ),
        (
            "/v1/{environmentId}/action-flow/{flowConfigId}/csv-task",
            "post",
            &["201", "401", "403", "404", "503"],
        ),
        (
            "/v1/{environmentId}/action-flow/{flowConfigId}/csv-task/test",
            "post",
            &["201", "401", "403", "404", "503"],
        ),
        (
            "/v1/{environmentId}/action-flow/{flowConfigId}/csv-task/{taskId}/status",
            "get",
            &["200", "400", "401", "403", "404"],
        ),
        (
            "/v1/{environmentId}/action-flow/{flowConfigId}/stats",
            "get",
            &["200", "400", "401", "403", "404"],
        ),
        (
            "/v1/{environmentId}/workbench-folder/{folderId}/stats",
            "get",
            &["200", "400", "401", "403", "404"],
        ),
        (
            "/uploads/csv/{token}",
            "put",
            &["200", "400", "403", "409", "413", "415", "503"],
        ),
        (
            "/v1/{environmentId}/notification-platforms",
            "get",
            &["200", "401", "403"],
        ),
        (
            "/v1/{environmentId}/notification-platforms",
            "post",
            &["201", "400", "401", "403", "409", "415", "503"],
        ),
        (
            "/v1/{environmentId}/notification-platforms",
            "put",
            &["200", "400", "401", "403", "404", "415", "503"],
        ),
        (
            "/v1/{environmentId}/notification-platforms",
            "delete",
            &["204", "400", "401", "403", "404", "409", "415"],
        ),
        (
            "/v1/{environmentId}/notification-platform-enabled",
            "put",
            &["200", "400", "401", "403", "404", "415", "503"],
        ),
        (
            "/v1/{environmentId}/users/{endUserId}/devices/{deviceToken}",
            "put",
            &["200", "400", "401", "403", "415", "503"],
        ),
        (
            "/v1/{environmentId}/users/{endUserId}/devices/{deviceToken}",
            "delete",
            &["204", "401", "403", "404"],
        ),
        (
            "/v1/{environmentId}/users/{endUserId}/devices",
            "get",
            &["200", "401", "403"],
        ),
        (
            "/v1/{environmentId}/users/{endUserId}/cards/{cardInstanceId}/pushes",
            "get",
            &["200", "401", "403", "404"],
        ),
        ("/v1/environments", "get", &["200", "401"]),
        (
            "/v1/{environmentId}/credentials",
            "post",
            &["201", "400", "401", "403", "503"],
        ),
        (
            "/v1/{environmentId}/credentials/{clientId}",
            "delete",
            &["204", "401", "403", "404"],
        ),
        ("/oauth/token", "post", &["200", "400", "401", "415", "503"]),
        (
            "/v1/{environmentId}/users/{endUserId}/cards/count",
            "get",
            &["200", "400", "401", "403", "429"],
        ),
        (
            "/v1/{environmentId}/users/{endUserId}/cards/stream",
            "get",
            &["200", "400", "401", "403", "429"],
        ),
        (
            "/v1/{environmentId}/users/{endUserId}/cards/stream-tickets",
            "post",
            &["201", "401", "403", "429", "503"],
        ),
        (
            "/v1/{environmentId}/sdk-keys",
            "post",
            &[
                "201", "400", "401", "403", "409", "413", "415", "429", "503",
            ],
        ),
        (
            "/v1/{environmentId}/sdk-keys",
            "get",
            &["200", "401", "403"],
        ),
        (
            "/v1/{environmentId}/sdk-keys/{sdkKeyId}",
            "get",
            &["200", "401", "403", "404"],
        ),
        (
            "/v1/{environmentId}/sdk-keys/{sdkKeyId}",
            "patch",
            &["200", "400", "401", "403", "404", "409", "503"],
        ),
        (
            "/v1/{environmentId}/sdk-keys/{sdkKeyId}",
            "delete",
            &["204", "401", "403", "404"],
        ),
        ("/healthz", "get", &["200"]),
        ("/readyz", "get", &["200", "503"]),
        ("/metrics", "get", &["200"]),
        ("/openapi.json", "get", &["200"]),
        ("/docs/", "get", &["200"]),
    ];
    for (path, method, statuses) in expected {
        let operation = &doc.body["paths"][path][method];
        assert!(operation.is_object(), "{method} {path} is missing");
        for status in *statuses {
            let mut response = &operation["responses"][status];
            assert!(response.is_object(), "{method} {path} lacks {status}");
            // A shared answer is declared once under components and referenced.
            if let Some(name) = response["$ref"]
                .as_str()
                .and_then(|r| r.strip_prefix("#/components/responses/"))
            {
                response = &doc.body["components"]["responses"][name];
            }
            if status.starts_with('4') || status.starts_with('5') {
                assert!(
                    response["content"]["application/problem+json"].is_object(),
                    "{method} {path} {status} is not a problem"
                );
            }
        }
    }
    let paths = doc.body["paths"].as_object().expect("paths").len();
    assert_eq!(paths, 63, "a new endpoint must be added to this test");
    let schemes = &doc.body["components"]["securitySchemes"];
    assert_eq!(schemes["bearer"]["scheme"], "bearer");
    // End users' own tokens (contract §15): a second scheme, on their routes only.
    assert_eq!(schemes["userToken"]["scheme"], "bearer");
    assert_eq!(schemes["userToken"]["bearerFormat"], "JWT");
    let with_user_token: Vec<String> = doc.body["paths"]
        .as_object()
        .expect("paths")
        .iter()
        .flat_map(|(path, item)| {
            item.as_object()
                .into_iter()
                .flatten()
                .filter(|(_, operation)| {
                    operation["security"]
                        .as_array()
                        .is_some_and(|s| s.iter().any(|r| r.get("userToken").is_some()))
                })
                .map(move |(method, _)| format!("{method} {path}"))
        })
        .collect();
    assert_eq!(
        with_user_token,
        [
            "get /v1/{environmentId}/users/{endUserId}/cards",
            "get /v1/{environmentId}/users/{endUserId}/cards/count",
            "get /v1/{environmentId}/users/{endUserId}/cards/stream",
            "post /v1/{environmentId}/users/{endUserId}/cards/stream-tickets",
            "post /v1/{environmentId}/users/{endUserId}/cards/{cardInstanceId}/actions",
            "get /v1/{environmentId}/users/{endUserId}/devices",
            "delete /v1/{environmentId}/users/{endUserId}/devices/{deviceToken}",
            "put /v1/{environmentId}/users/{endUserId}/devices/{deviceToken}",
        ]
    );

    let mut snapshot = doc.body.clone();
    if let Some(info) = snapshot.get_mut("info").and_then(Value::as_object_mut) {
        info.remove("version"); // the crate version is not part of the contract
    }
    insta::assert_json_snapshot!("openapi", snapshot);

    let docs = Reply::from(
        server
            .client
            .get(server.url("/docs/"))
            .send()
            .await
            .expect("sent"),
    )
    .await;
    assert_eq!(docs.status, 200);
    assert!(docs.text.to_lowercase().contains("<html"), "{}", docs.text);
    // The reference loads the document the service serves.
    let initializer = call(&server, "GET", "/docs/swagger-initializer.js", None, None).await;
    assert_eq!(initializer.status, 200);
    assert!(
        initializer.text.contains("\"/openapi.json\""),
        "{}",
        initializer.text
    );
    let redirect = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .expect("client");
    let bare = redirect
        .get(server.url("/docs"))
        .send()
        .await
        .expect("sent");
    assert_eq!(bare.status().as_u16(), 308);
}

async fn sigterm_stops_the_server_cleanly(mut server: Server) {
    assert_eq!(
        call(&server, "GET", "/healthz", None, None).await.status,
        200
    );
    let status = std::process::Command::new("kill")
        .args(["-TERM", &server.pid().to_string()])
        .status()
        .expect("kill");
    assert!(status.success());
    let exit = server
        .wait_exit(std::time::Duration::from_secs(20))
        .expect("exited");
    assert!(exit.success(), "{exit:?}");
    assert!(server.logs().contains("\"stopped\""), "{}", server.logs());
}

/// The process asks for no transparent huge pages (issue 23): with them, each page its
/// allocator touched took 2 MiB, and an idle process held 40 MiB of them.
async fn the_process_runs_without_transparent_huge_pages(server: Server) {
    let status = std::fs::read_to_string(format!("/proc/{}/status", server.pid())).expect("status");
    let thp = status
        .lines()
        .find_map(|l| l.strip_prefix("THP_enabled:"))
        .map(str::trim);
    assert_eq!(thp, Some("0"), "{status}");
}

/// Contract §10: a malformed request line or header gets a problem document with an
/// `X-Request-Id`, logged at WARN (not ERROR), and the service goes on.
async fn malformed_requests_are_problem_documents_logged_at_warn(server: Server) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let address = server.base.trim_start_matches("http://").to_owned();
    for raw in [
        &b"GET /healthz HTTP/1.1\r\nHost: a\r\nBad Header\r\n\r\n"[..],
        &b"GE T /healthz HTTP/1.1\r\nHost: a\r\n\r\n"[..],
        &b"GET /healthz HTTP/1.1\r\nHost: a\r\nX: \x01\x02\r\n\r\n"[..],
        &b"GET /healthz HTTP/9.9\r\n\r\n"[..],
    ] {
        let mut socket = tokio::net::TcpStream::connect(&address)
            .await
            .expect("connect");
        socket.write_all(raw).await.expect("write");
        let mut answer = Vec::new();
        tokio::time::timeout(
            std::time::Duration::from_secs(10),
            socket.read_to_end(&mut answer),
        )
        .await
        .expect("answered")
        .expect("read");
        let answer = String::from_utf8(answer).expect("utf-8");
        let (head, body) = answer.split_once("\r\n\r\n").expect("a head");
        assert!(head.starts_with("HTTP/1.1 400 "), "{answer}");
        assert!(
            head.contains("content-type: application/problem+json"),
            "{answer}"
        );
        let id = head
            .lines()
            .find_map(|l| l.strip_prefix("x-request-id: "))
            .expect("x-request-id")
            .to_owned();
        let problem: Value = serde_json::from_str(body).expect("json");
        assert_eq!(problem["code"], "malformed_request", "{answer}");
        assert_eq!(problem["status"], 400);
        // The log is read from the process's stderr as it comes.
        let mut logs = server.logs();
        for _ in 0..50 {
            if logs.contains(&id) {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            logs = server.logs();
        }
        let line = logs
            .lines()
            .find(|l| l.contains(&id))
            .unwrap_or_else(|| panic!("{id} not logged: {logs}"));
        assert!(line.contains("\"WARN\""), "{line}");
        assert!(line.contains("request refused before routing"), "{line}");
    }
    let logs = server.logs();
    assert!(
        !logs
            .lines()
            .any(|l| l.contains("\"ERROR\"") && l.contains("parse error")),
        "{logs}"
    );
    assert_eq!(
        call(&server, "GET", "/healthz", None, None).await.status,
        200
    );
    let metrics = call(&server, "GET", "/metrics", None, None).await;
    let text = &metrics.text;
    for worker in ["engine", "scheduler", "bulk", "cancel", "webhook", "push"] {
        assert!(
            text.contains(&format!(
                "workbench_worker_restarts_total{{worker=\"{worker}\"}} 0"
            )),
            "{text}"
        );
    }
    for kind in ["invocation", "csv", "cancel", "webhook", "push"] {
        assert!(
            text.contains(&format!(
                "workbench_stale_outcomes_total{{kind=\"{kind}\"}} 0"
            )),
            "{text}"
        );
    }
    assert_eq!(
        call(&server, "GET", "/readyz", None, None).await.status,
        200
    );
}

/// Contract §16: every answer says `nosniff`; the API's answers (which may carry a secret: a
/// new key here) are not stored by caches; invented methods do not grow `/metrics`.
async fn answers_are_not_sniffed_or_cached_and_metrics_stay_bounded(server: Server) {
    let created = call(
        &server,
        "POST",
        &format!("/v1/{}/credentials", server.env),
        Some(&server.admin_secret),
        Some(json!({"role": "events"})),
    )
    .await;
    assert_eq!(created.status, 201, "{}", created.text);
    assert_eq!(created.header("cache-control"), Some("no-store"));
    assert_eq!(created.header("x-content-type-options"), Some("nosniff"));
    let problem = call(&server, "GET", "/nowhere", None, None).await;
    assert_eq!(problem.status, 404);
    assert_eq!(problem.header("x-content-type-options"), Some("nosniff"));
    let health = call(&server, "GET", "/healthz", None, None).await;
    assert_eq!(health.header("x-content-type-options"), Some("nosniff"));
    assert_eq!(health.header("cache-control"), None);
    for n in 0..20 {
        let reply = call(&server, &format!("INVENTED{n}"), "/x", None, None).await;
        assert!(reply.status >= 400, "{}", reply.status);
    }
    let metrics = call(&server, "GET", "/metrics", None, None).await.text;
    assert!(!metrics.contains("INVENTED"), "{metrics}");
    assert!(metrics.contains("method=\"other\""), "{metrics}");
}

/// Contract §16: 300 clients that announce a body and send it a byte a second are each
/// answered 408 and disconnected when the body timeout passes; a normal request made
/// meanwhile is answered at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_bodies_are_cut_at_the_body_timeout() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let server = Server::start_with(
        adapters_diesel::testing::TestDatabase::sqlite(),
        &[("WORKBENCH_REQUEST_BODY_TIMEOUT", Some("2s"))],
    )
    .await;
    let address = server.base.trim_start_matches("http://").to_owned();
    let started = std::time::Instant::now();
    let mut clients = Vec::new();
    for _ in 0..300 {
        let address = address.clone();
        clients.push(tokio::spawn(async move {
            let mut socket = tokio::net::TcpStream::connect(&address)
                .await
                .expect("connect");
            socket
                .write_all(
                    b"POST /oauth/token HTTP/1.1\r\nhost: x\r\ncontent-type: application/x-www-form-urlencoded\r\ncontent-length: 100000\r\n\r\ng",
                )
                .await
                .expect("headers");
            let mut answer = Vec::new();
            let mut buf = [0u8; 4096];
            loop {
                tokio::select! {
                    read = socket.read(&mut buf) => match read {
                        Ok(0) | Err(_) => break,
                        Ok(n) => answer.extend_from_slice(&buf[..n]),
                    },
                    _ = tokio::time::sleep(std::time::Duration::from_secs(1)) => {
                        // A byte a second, while the connection lasts.
                        if socket.write_all(b"r").await.is_err() {
                            break;
                        }
                    }
                }
                if started.elapsed() > std::time::Duration::from_secs(20) {
                    break;
                }
            }
            (String::from_utf8_lossy(&answer).into_owned(), started.elapsed())
        }));
    }
    tokio::time::sleep(std::time::Duration::from_millis(1_000)).await;
    let asked = std::time::Instant::now();
    let health = call(&server, "GET", "/healthz", None, None).await;
    let took = asked.elapsed();
    assert_eq!(health.status, 200);
    assert!(took < std::time::Duration::from_millis(100), "{took:?}");
    for client in clients {
        let (answer, closed) = client.await.expect("join");
        assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
        assert!(answer.contains("request_timeout"), "{answer}");
        assert!(
            closed < std::time::Duration::from_secs(5),
            "closed after {closed:?}"
        );
    }
}

/// The value of `series` (its name and labels, as rendered) in a Prometheus exposition.
fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|line| line.strip_prefix(series)?.strip_prefix(' '))
        .map(|value| value.parse().expect("a number"))
}

/// `/metrics` until `done` holds of it (checked every 200 ms, for up to 30 s).
async fn metrics_until(server: &Server, what: &str, done: impl Fn(&str) -> bool) -> String {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let metrics = call(server, "GET", "/metrics", None, None).await;
        assert_eq!(metrics.status, 200, "{}", metrics.text);
        if done(&metrics.text) {
            return metrics.text;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{what} not seen:\n{}",
            metrics.text
        );
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
}

/// Contract §17: background work an operator cannot see otherwise shows in `/metrics`. Three
/// deliveries to a receiver that answers 503 are pending while they are retried, and leave the
/// backlog once out of retries (four attempts each with the tests' schedule); every attempt is
/// counted as an HTTP error and timed. The build, the connection pool and the process are there
/// from the first scrape.
async fn metrics_show_a_failing_webhook_backlog_its_attempts_the_build_and_the_process(
    server: Server,
) {
    let first = call(&server, "GET", "/metrics", None, None).await.text;
    let build = first
        .lines()
        .find(|l| l.starts_with("workbench_build_info{"))
        .unwrap_or_else(|| panic!("no build info:\n{first}"));
    let version = format!("version=\"{}\"", env!("CARGO_PKG_VERSION"));
    assert!(
        build.contains(&version) && build.ends_with("} 1"),
        "{build}"
    );
    let commit = build
        .split("commit=\"")
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .expect("a commit label");
    assert!(
        !commit.is_empty() && commit.chars().all(|c| c.is_ascii_alphanumeric()),
        "{build}"
    );
    for series in [
        "process_resident_memory_bytes",
        "process_open_fds",
        "process_start_time_seconds",
    ] {
        assert!(
            sample(&first, series).is_some_and(|v| v > 0.0),
            "{series}\n{first}"
        );
    }
    assert!(sample(&first, "workbench_db_pool_connections{state=\"idle\"}").is_some());
    assert!(sample(&first, "workbench_db_pool_wait_seconds_count").is_some_and(|n| n > 0.0));
    for queue in ["invocations", "webhook_deliveries", "push_jobs"] {
        assert_eq!(
            sample(&first, &format!("workbench_{queue}_pending")),
            Some(0.0),
            "{queue}\n{first}"
        );
        assert_eq!(
            sample(&first, &format!("workbench_{queue}_oldest_age_seconds")),
            Some(0.0),
            "{queue}\n{first}"
        );
    }
    assert_eq!(
        sample(&first, "workbench_metrics_read_errors_total"),
        Some(0.0)
    );
    let failed = "workbench_webhook_attempts_total{outcome=\"http_error\"}";
    assert_eq!(sample(&first, failed), Some(0.0), "listed from the start");

    let receiver = Receiver::start().await;
    receiver.answer(|_| 503);
    let subscribed = call(
        &server,
        "POST",
        &format!("/v1/{}/webhook", server.env),
        Some(&server.admin_secret),
        Some(json!({"types": ["card-published"], "url": receiver.url})),
    )
    .await;
    assert_eq!(subscribed.status, 201, "{}", subscribed.text);
    users(&server, json!([{"id": "u1"}, {"id": "u2"}, {"id": "u3"}])).await;
    let flow = published_flow(&server, false).await;
    let fired = fire(
        &server,
        &flow,
        "start",
        json!({"flows": [{"target": {"type": "user", "targetUserIds": ["u1", "u2", "u3"]}}]}),
    )
    .await;
    assert!(fired.status < 300, "{}", fired.text);
    // Retried: pending, and each failure counted.
    let retried = metrics_until(&server, "three pending deliveries, failing", |text| {
        sample(text, "workbench_webhook_deliveries_pending") == Some(3.0)
            && sample(text, failed).is_some_and(|n| n >= 3.0)
    })
    .await;
    assert!(
        sample(&retried, "workbench_webhook_deliveries_oldest_age_seconds").is_some(),
        "{retried}"
    );
    // Out of retries: failed for good, out of the backlog; four attempts each.
    let done = metrics_until(&server, "the deliveries failed for good", |text| {
        sample(text, "workbench_webhook_deliveries_pending") == Some(0.0)
            && sample(text, failed) == Some(12.0)
    })
    .await;
    assert_eq!(receiver.len(), 12);
    assert_eq!(
        sample(
            &done,
            "workbench_webhook_attempts_total{outcome=\"success\"}"
        ),
        Some(0.0)
    );
    assert_eq!(
        sample(&done, "workbench_webhook_delivery_duration_seconds_count"),
        Some(12.0),
        "{done}"
    );
    assert_eq!(sample(&done, "workbench_invocations_pending"), Some(0.0));
}

blackbox!(
    metrics_show_a_failing_webhook_backlog_its_attempts_the_build_and_the_process,
    framework_errors_are_problem_documents,
    answers_are_not_sniffed_or_cached_and_metrics_stay_bounded,
    malformed_requests_are_problem_documents_logged_at_warn,
    every_response_carries_a_request_id_and_echoes_the_clients,
    health_readiness_and_metrics,
    openapi_lists_every_endpoint_with_its_errors,
    sigterm_stops_the_server_cleanly,
    the_process_runs_without_transparent_huge_pages,
);

/// Contract §17: behind a trusted proxy the request log names the client it forwarded for;
/// a client that is not a trusted proxy cannot name another; probes are logged at DEBUG only.
async fn request_logs_name_the_client_and_leave_probes_to_debug(
    db: adapters_diesel::testing::TestDatabase,
) {
    let server =
        Server::start_with(db, &[("WORKBENCH_TRUSTED_PROXIES", Some("127.0.0.0/8"))]).await;
    let folders = format!("/v1/{}/workbench-folder", server.env);
    let forwarded = server
        .client
        .get(server.url(&folders))
        .bearer_auth(&server.admin_secret)
        .header("x-forwarded-for", "203.0.113.9")
        .send()
        .await
        .expect("sent");
    assert_eq!(forwarded.status(), 200);
    for _ in 0..3 {
        call(&server, "GET", "/healthz", None, None).await;
        call(&server, "GET", "/readyz", None, None).await;
    }
    let logged = |needle: &str| -> Vec<Value> {
        server
            .logs()
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .filter(|l| l["message"] == "request completed" && l.to_string().contains(needle))
            .collect()
    };
    let mut lines = logged("/workbench-folder");
    for _ in 0..100 {
        if !lines.is_empty() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        lines = logged("/workbench-folder");
    }
    assert_eq!(lines.len(), 1, "{}", server.logs());
    assert_eq!(lines[0]["span"]["client"], "203.0.113.9", "{}", lines[0]);
    assert!(
        logged("/healthz").is_empty() && logged("/readyz").is_empty(),
        "{}",
        server.logs()
    );

    // Without trust, the connecting address is the client, whatever it claims.
    let untrusted = Server::start_with(adapters_diesel::testing::TestDatabase::sqlite(), &[]).await;
    untrusted
        .client
        .get(untrusted.url(&format!("/v1/{}/workbench-folder", untrusted.env)))
        .bearer_auth(&untrusted.admin_secret)
        .header("x-forwarded-for", "203.0.113.9")
        .send()
        .await
        .expect("sent");
    // The line is written as the answer leaves: wait for it to reach the log.
    let mut line = None;
    for _ in 0..100 {
        line = untrusted
            .logs()
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .find(|l| l["message"] == "request completed");
        if line.is_some() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    let line = line.expect("a request line");
    assert_eq!(line["span"]["client"], "127.0.0.1", "{line}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_request_logs_name_the_client_and_leave_probes_to_debug() {
    request_logs_name_the_client_and_leave_probes_to_debug(
        adapters_diesel::testing::TestDatabase::sqlite(),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_request_logs_name_the_client_and_leave_probes_to_debug() {
    let Some(db) = adapters_diesel::testing::TestDatabase::postgres() else {
        return;
    };
    request_logs_name_the_client_and_leave_probes_to_debug(db).await;
}
