//! Bulk start from CSV over HTTP: tasks, the upload URL, processing, errors, restarts.

use std::time::Duration;

use adapters_diesel::testing::raw_texts;
use serde_json::{json, Value};

use crate::support::{blackbox, call, Reply, Server};
use crate::trigger::{feed, published_flow, users};

async fn new_task(s: &Server, flow: &str, test: bool) -> Value {
    let suffix = if test { "/test" } else { "" };
    let reply = call(
        s,
        "POST",
        &format!("/v1/{}/action-flow/{flow}/csv-task{suffix}", s.env),
        Some(&s.admin_secret),
        None,
    )
    .await;
    assert_eq!(reply.status, 201, "{}", reply.text);
    let data = reply.body["data"].clone();
    assert_eq!(data["task"]["status"], "pending");
    assert!(data["task"]["id"].is_i64());
    assert_eq!(reply.header("location"), data["statusUrl"].as_str());
    data
}

async fn upload(
    s: &Server,
    url: &str,
    method: &str,
    content_type: Option<&str>,
    body: Vec<u8>,
) -> Reply {
    let method = reqwest::Method::from_bytes(method.as_bytes()).expect("method");
    let mut request = s.client.request(method, url).body(body);
    if let Some(ct) = content_type {
        request = request.header("content-type", ct);
    }
    Reply::from(request.send().await.expect("upload")).await
}

/// Polls the status URL until the task is completed or failed.
async fn settled(s: &Server, status_url: &str, limit: Duration) -> Value {
    let started = std::time::Instant::now();
    loop {
        let r = Reply::from(
            s.client
                .get(status_url)
                .bearer_auth(&s.admin_secret)
                .send()
                .await
                .expect("status"),
        )
        .await;
        assert_eq!(r.status, 200, "{}", r.text);
        let task = r.body["data"]["task"].clone();
        assert_eq!(r.body["data"]["statusUrl"], status_url);
        if matches!(task["status"].as_str(), Some("completed" | "failed")) {
            return task;
        }
        assert!(started.elapsed() < limit, "not settled: {task}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn open_cards(s: &Server) -> u64 {
    raw_texts(
        s.database_url(),
        "SELECT CAST(COUNT(*) AS TEXT) AS v FROM card_instances WHERE status = 'active'",
    )[0]
    .parse()
    .expect("count")
}

async fn a_csv_of_1000_rows_creates_1000_cards_and_a_second_upload_is_refused(s: Server) {
    let flow = published_flow(&s, false).await;
    let list: Vec<Value> = (0..1_000).map(|i| json!({"id": format!("u{i}")})).collect();
    users(&s, Value::Array(list)).await;
    let task = new_task(&s, &flow, false).await;
    let mut csv = String::from("target.attributes.id,payload.variables.firstName\n");
    for i in 0..1_000 {
        csv.push_str(&format!("u{i},Name{i}\n"));
    }
    let url = task["uploadUrl"].as_str().expect("uploadUrl");
    assert!(url.starts_with(&s.base));
    let done = upload(&s, url, "PUT", Some("text/csv"), csv.clone().into_bytes()).await;
    assert_eq!(done.status, 200, "{}", done.text);
    assert_eq!(done.body["data"]["task"]["rowsTotal"], 1000);
    let status_url = task["statusUrl"].as_str().expect("statusUrl");
    let finished = settled(&s, status_url, Duration::from_secs(60)).await;
    assert_eq!(finished["status"], "completed", "{finished}");
    assert_eq!(
        (
            finished["rowsTotal"].clone(),
            finished["rowsProcessed"].clone(),
            finished["rowsFailed"].clone()
        ),
        (json!(1000), json!(1000), json!(0))
    );
    let started = std::time::Instant::now();
    while open_cards(&s) < 1_000 {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "{} cards",
            open_cards(&s)
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(open_cards(&s), 1_000);
    let card = &feed(&s, "u7").await[0];
    assert_eq!(
        card["content"]["Web"]["defaultView"]["content"][0]["attributes"]["text"],
        "Hello Name7"
    );
    for method in ["PUT", "POST"] {
        upload(&s, url, method, Some("text/csv"), csv.clone().into_bytes())
            .await
            .problem(409, "already_uploaded");
    }
}

/// Rows are prepared in chunks, each while the one before is recorded, and handed over in
/// steps of several chunks: errors in the first, a middle and the last chunk of two steps are
/// each listed once, in row order, and every other row gets its card.
async fn row_errors_across_chunks_and_steps_are_each_listed_once(s: Server) {
    let flow = published_flow(&s, false).await;
    let rows: u64 = 2_600;
    let bad = [1u64, 500, 501, 1_999, 2_000, 2_001, 2_600];
    let task = new_task(&s, &flow, false).await;
    let mut csv = String::from("target.attributes.id,payload.cardOptions.priority\n");
    for row in 1..=rows {
        let priority = if bad.contains(&row) { "urgent" } else { "3" };
        csv.push_str(&format!("r{row},{priority}\n"));
    }
    let url = task["uploadUrl"].as_str().expect("uploadUrl");
    let done = upload(&s, url, "PUT", Some("text/csv"), csv.into_bytes()).await;
    assert_eq!(done.status, 200, "{}", done.text);
    let status_url = task["statusUrl"].as_str().expect("statusUrl");
    let finished = settled(&s, status_url, Duration::from_secs(60)).await;
    assert_eq!(finished["status"], "completed", "{finished}");
    assert_eq!(
        (
            finished["rowsProcessed"].clone(),
            finished["rowsFailed"].clone()
        ),
        (json!(rows), json!(bad.len())),
        "{finished}"
    );
    let listed: Vec<u64> = finished["errors"]
        .as_array()
        .expect("errors")
        .iter()
        .map(|e| e["row"].as_u64().expect("row"))
        .collect();
    assert_eq!(listed, bad, "{finished}");
    assert_eq!(open_cards(&s), rows - bad.len() as u64);
    assert!(feed(&s, "r1").await.is_empty());
    assert_eq!(feed(&s, "r502").await.len(), 1);
}

async fn uploads_are_checked_and_row_errors_listed(s: Server) {
    let flow = published_flow(&s, false).await;
    users(&s, json!([{"id": "u1", "attributes": {"plan": "pro"}}, {"id": "u2", "attributes": {"plan": "pro"}}, {"id": "u3", "attributes": {"plan": "free"}}])).await;
    let task = new_task(&s, &flow, false).await;
    let url = task["uploadUrl"].as_str().expect("url");
    upload(&s, url, "PUT", None, b"target.attributes.id\nu1\n".to_vec())
        .await
        .problem(415, "unsupported_media_type");
    upload(&s, url, "PUT", Some("application/json"), b"{}".to_vec())
        .await
        .problem(415, "unsupported_media_type");
    let mut tampered = url.to_owned();
    let last = tampered.pop().expect("char");
    tampered.push(if last == 'A' { 'B' } else { 'A' });
    upload(
        &s,
        &tampered,
        "PUT",
        Some("text/csv"),
        b"target.attributes.id\nu1\n".to_vec(),
    )
    .await
    .problem(403, "upload_url_invalid");
    upload(
        &s,
        &format!("{}/uploads/csv/garbage", s.base),
        "PUT",
        Some("text/csv"),
        Vec::new(),
    )
    .await
    .problem(403, "upload_url_invalid");
    // Rows: by id; by id with a matching and a mismatching attribute; by attribute (two users);
    // a bad priority; an unknown user with attributes; a short row.
    let csv = "target.attributes.id,target.attributes.plan,payload.cardOptions.priority\n\
               u1,,3\n\
               u2,pro,\n\
               u3,pro,\n\
               ,pro,\n\
               u1,,urgent\n\
               u9,pro,\n\
               u1\n";
    let done = upload(
        &s,
        url,
        "POST",
        Some("text/csv; charset=utf-8"),
        csv.as_bytes().to_vec(),
    )
    .await;
    assert_eq!(done.status, 200, "{}", done.text);
    let finished = settled(
        &s,
        task["statusUrl"].as_str().expect("status"),
        Duration::from_secs(30),
    )
    .await;
    assert_eq!(finished["status"], "completed", "{finished}");
    assert_eq!(
        (
            finished["rowsTotal"].clone(),
            finished["rowsFailed"].clone()
        ),
        (json!(7), json!(4)),
        "{finished}"
    );
    let rows: Vec<u64> = finished["errors"]
        .as_array()
        .expect("errors")
        .iter()
        .map(|e| e["row"].as_u64().expect("row"))
        .collect();
    assert_eq!(rows, [3, 5, 6, 7], "{finished}");
    assert!(
        finished["errors"][1]["message"]
            .as_str()
            .expect("message")
            .contains("priority"),
        "{finished}"
    );

    // A header that is not ours fails the task.
    let task = new_task(&s, &flow, false).await;
    let bad = upload(
        &s,
        task["uploadUrl"].as_str().expect("url"),
        "PUT",
        Some("text/csv"),
        b"user,name\nu1,Ann\n".to_vec(),
    )
    .await;
    bad.problem(400, "invalid_csv");
    let failed = settled(
        &s,
        task["statusUrl"].as_str().expect("status"),
        Duration::from_secs(5),
    )
    .await;
    assert_eq!(failed["status"], "failed");
    assert!(
        failed["errors"][0]["message"]
            .as_str()
            .expect("message")
            .contains("column 1"),
        "{failed}"
    );

    // Over 32 MiB, counted as it arrives.
    let task = new_task(&s, &flow, false).await;
    let mut big = b"target.attributes.id\n".to_vec();
    big.resize(32 * 1024 * 1024 + 10, b'x');
    upload(
        &s,
        task["uploadUrl"].as_str().expect("url"),
        "PUT",
        Some("text/csv"),
        big,
    )
    .await
    .problem(413, "payload_too_large");
    let failed = settled(
        &s,
        task["statusUrl"].as_str().expect("status"),
        Duration::from_secs(5),
    )
    .await;
    assert_eq!(failed["status"], "failed");
}

async fn tasks_statuses_and_limits(s: Server) {
    let flow = published_flow(&s, false).await;
    let path = |rest: &str| format!("/v1/{}/action-flow/{flow}/csv-task{rest}", s.env);
    call(&s, "GET", &path("/x/status"), Some(&s.admin_secret), None)
        .await
        .problem(400, "validation_failed");
    call(
        &s,
        "GET",
        &path("/99999/status"),
        Some(&s.admin_secret),
        None,
    )
    .await
    .problem(404, "not_found");
    call(
        &s,
        "POST",
        &format!("/v1/{}/action-flow/flw_missing/csv-task", s.env),
        Some(&s.admin_secret),
        None,
    )
    .await
    .problem(404, "not_found");
    let draft_only = call(
        &s,
        "POST",
        &format!("/v1/{}/action-flow", s.env),
        Some(&s.admin_secret),
        Some(json!({"name": "Draft only"})),
    )
    .await;
    let draft_only = draft_only.body["data"]["id"]
        .as_str()
        .expect("id")
        .to_owned();
    call(
        &s,
        "POST",
        &format!("/v1/{}/action-flow/{draft_only}/csv-task", s.env),
        Some(&s.admin_secret),
        None,
    )
    .await
    .problem(404, "not_found");
    let workbench = s.key(&["--role", "workbench"]);
    call(&s, "POST", &path(""), Some(&workbench), None)
        .await
        .problem(403, "forbidden");
    call(&s, "POST", &path(""), None, None)
        .await
        .problem(401, "unauthorized");
    // A task of another flow is not found under this one.
    let other = published_flow(&s, false).await;
    let task = new_task(&s, &other, true).await;
    let id = task["task"]["id"].as_i64().expect("id");
    call(
        &s,
        "GET",
        &path(&format!("/{id}/status")),
        Some(&s.admin_secret),
        None,
    )
    .await
    .problem(404, "not_found");
    // Tasks waiting for their upload hold no bulk-task slot (contract §10): a sixth is created.
    for _ in 0..5 {
        new_task(&s, &flow, false).await;
    }
    let r = call(&s, "POST", &path(""), Some(&s.admin_secret), None).await;
    assert_eq!(r.status, 201, "{:?}", r.body);
    assert_eq!(r.body["data"]["task"]["queued"], false);
}

async fn a_test_task_reaches_test_users_only(s: Server) {
    let flow = published_flow(&s, true).await;
    users(&s, json!([{"id": "t1", "testUser": true}, {"id": "l1"}])).await;
    let task = new_task(&s, &flow, true).await;
    let done = upload(
        &s,
        task["uploadUrl"].as_str().expect("url"),
        "PUT",
        Some("text/csv"),
        b"target.attributes.id,flowInvocationId\nt1,my-id-1\nl1,my-id-2\n".to_vec(),
    )
    .await;
    assert_eq!(done.status, 200, "{}", done.text);
    let finished = settled(
        &s,
        task["statusUrl"].as_str().expect("status"),
        Duration::from_secs(30),
    )
    .await;
    assert_eq!(finished["rowsFailed"], 0, "{finished}");
    let invocation = call(
        &s,
        "GET",
        &format!("/v1/{}/action-flow/{flow}/invocations/my-id-1", s.env),
        Some(&s.admin_secret),
        None,
    )
    .await;
    assert_eq!(invocation.status, 200, "{}", invocation.text);
    assert_eq!(invocation.body["data"]["mode"], "test");
    let started = std::time::Instant::now();
    while feed(&s, "t1").await.is_empty() {
        assert!(started.elapsed() < Duration::from_secs(30));
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(
        feed(&s, "t1").await[0]["content"]["Web"]["defaultView"]["content"][0]["attributes"]
            ["text"],
        "Hello there"
    );
    assert!(feed(&s, "l1").await.is_empty(), "not a test user");
    // The same invocation id with another payload in a later file: a row error (409 rule).
    let task = new_task(&s, &flow, true).await;
    upload(
        &s,
        task["uploadUrl"].as_str().expect("url"),
        "PUT",
        Some("text/csv"),
        b"target.attributes.id,flowInvocationId,payload.variables.firstName\nt1,my-id-1,Other\n"
            .to_vec(),
    )
    .await;
    let finished = settled(
        &s,
        task["statusUrl"].as_str().expect("status"),
        Duration::from_secs(30),
    )
    .await;
    assert_eq!(finished["rowsFailed"], 1, "{finished}");
    assert!(
        finished["errors"][0]["message"]
            .as_str()
            .expect("m")
            .contains("another target or payload"),
        "{finished}"
    );
}

/// A restart mid-task resumes it: every row becomes a card once.
async fn a_restart_mid_task_resumes_it(mut s: Server) {
    let flow = published_flow(&s, false).await;
    let mut csv = String::from("target.attributes.id\n");
    for i in 0..5_000 {
        csv.push_str(&format!("r{i}\n"));
    }
    let task = new_task(&s, &flow, false).await;
    let done = upload(
        &s,
        task["uploadUrl"].as_str().expect("url"),
        "PUT",
        Some("text/csv"),
        csv.into_bytes(),
    )
    .await;
    assert_eq!(done.status, 200, "{}", done.text);
    let status_url = task["statusUrl"].as_str().expect("status").to_owned();
    loop {
        let r = Reply::from(
            s.client
                .get(&status_url)
                .bearer_auth(&s.admin_secret)
                .send()
                .await
                .expect("status"),
        )
        .await;
        if r.body["data"]["task"]["rowsProcessed"]
            .as_u64()
            .unwrap_or(0)
            > 0
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    s.kill_and_restart();
    let status_url = status_url.replace(
        &status_url[..status_url.find("/v1/").expect("path")],
        &s.base,
    );
    let finished = settled(&s, &status_url, Duration::from_secs(120)).await;
    assert_eq!(
        (
            finished["status"].clone(),
            finished["rowsProcessed"].clone(),
            finished["rowsFailed"].clone()
        ),
        (json!("completed"), json!(5000), json!(0)),
        "{finished}"
    );
    let started = std::time::Instant::now();
    while open_cards(&s) < 5_000 {
        assert!(
            started.elapsed() < Duration::from_secs(180),
            "{} cards",
            open_cards(&s)
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(open_cards(&s), 5_000, "once each");
}

/// A header of very many columns (found by an outside probe: 200,000 columns kept both cores
/// busy for half a minute after a 408) is refused while it arrives, naming the limit, and no
/// work goes on after the answer. A header over 1,000 short columns is refused by its count.
async fn a_header_of_many_columns_is_refused_at_once_and_nothing_runs_on(s: Server) {
    let flow = published_flow(&s, false).await;
    let mut header = String::from("target.attributes.id");
    for i in 0..200_000 {
        header.push_str(&format!(",target.attributes.c{i}"));
    }
    let body = format!("{header}\nu1{}\n", ",x".repeat(200_000)).into_bytes();
    let task = new_task(&s, &flow, false).await;
    let url = task["uploadUrl"].as_str().expect("url");
    let sent = std::time::Instant::now();
    let refused = upload(&s, url, "PUT", Some("text/csv"), body).await;
    let took = sent.elapsed();
    refused.problem(400, "invalid_csv");
    assert!(
        refused.text.contains("at most 1000 columns"),
        "{}",
        refused.text
    );
    assert!(took < Duration::from_secs(3), "answered in {took:?}");
    let settled_task = settled(
        &s,
        task["statusUrl"].as_str().expect("status"),
        Duration::from_secs(5),
    )
    .await;
    assert_eq!(settled_task["status"], "failed");
    // Nothing runs on: the process is as idle over the next 5 s as it was before.
    let ticks_per_second = 100; // USER_HZ on Linux
    let before = s.cpu_ticks();
    tokio::time::sleep(Duration::from_secs(5)).await;
    let used = s.cpu_ticks() - before;
    assert!(
        used * 100 < 5 * 5 * ticks_per_second,
        "{used} ticks of CPU in the 5 s after the answer (5% of a core is 25)"
    );

    let mut columns: Vec<String> = (0..1_001)
        .map(|i| format!("target.attributes.c{i}"))
        .collect();
    columns[0] = "target.attributes.id".into();
    let task = new_task(&s, &flow, false).await;
    let url = task["uploadUrl"].as_str().expect("url");
    let body = format!("{}\nu1{}\n", columns.join(","), ",x".repeat(1_000)).into_bytes();
    let refused = upload(&s, url, "PUT", Some("text/csv"), body).await;
    refused.problem(400, "invalid_csv");
    assert!(
        refused
            .text
            .contains("the header has 1001 columns; at most 1000"),
        "{}",
        refused.text
    );
}

blackbox!(
    a_header_of_many_columns_is_refused_at_once_and_nothing_runs_on,
    a_csv_of_1000_rows_creates_1000_cards_and_a_second_upload_is_refused,
    uploads_are_checked_and_row_errors_listed,
    row_errors_across_chunks_and_steps_are_each_listed_once,
    tasks_statuses_and_limits,
    a_test_task_reaches_test_users_only,
    a_restart_mid_task_resumes_it,
);
