//! Retention and statistics (contract §14): daily totals per flow and per folder at start,
//! read over ranges of days.

use serde_json::{json, Value};

use crate::receiver::Receiver;
use crate::support::{blackbox, call, workbench, Server};
use crate::trigger::{feed, finished, flow_publishing, invocation_id};

const WAIT: std::time::Duration = std::time::Duration::from_secs(20);

fn config() -> Value {
    json!({
        "type": "card", "initialSteps": ["s1"],
        "steps": {"s1": {"id": "s1", "type": "create-card", "properties": {"cardTemplateId": "t1"}}},
        "cardTemplates": {"t1": {
            "metadata": {"cardName": "Stats card"},
            "defaultView": {"content": [{"key": "h", "type": "headline", "attributes": {"text": "Hello"}}],
                            "actions": [{"key": "ok", "type": "submitButton", "attributes": {"text": "OK"}}]}
        }}
    })
}

async fn folder(s: &Server, name: &str) -> String {
    let reply = call(
        s,
        "POST",
        &format!("/v1/{}/workbench-folder", s.env),
        Some(&s.admin_secret),
        Some(json!({"name": name})),
    )
    .await;
    assert_eq!(reply.status, 201, "{}", reply.text);
    reply.body["data"]["id"].as_str().expect("id").to_owned()
}

async fn move_flow(s: &Server, flow: &str, folder: &str) {
    let reply = call(
        s,
        "PUT",
        &format!("/v1/{}/action-flow/{flow}", s.env),
        Some(&s.admin_secret),
        Some(json!({"actionFlow": {"folderId": folder}})),
    )
    .await;
    assert_eq!(reply.status, 200, "{}", reply.text);
}

/// Starts the flow for one user and waits for it to finish.
async fn start(s: &Server, flow: &str, user: &str) {
    let reply = call(
        s,
        "POST",
        &format!("/v1/{}/action-flow/{flow}/start", s.env),
        Some(&s.admin_secret),
        Some(json!({"flows": [{"target": {"type": "user", "targetUserIds": [user]}, "payload": {}}]})),
    )
    .await;
    let id = invocation_id(&reply);
    finished(s, flow, &id).await;
}

async fn stats(s: &Server, path: &str) -> Value {
    let reply = call(s, "GET", path, Some(&s.admin_secret), None).await;
    assert_eq!(reply.status, 200, "{path}: {}", reply.text);
    reply.body["data"].clone()
}

async fn stats_count_what_flows_did_and_folders_follow_the_folder_at_start(s: Server) {
    let (a, b) = (folder(&s, "A").await, folder(&s, "B").await);
    let flow = flow_publishing(&s, "Counted", config()).await;
    move_flow(&s, &flow, &a).await;
    start(&s, &flow, "u1").await;
    let card = feed(&s, "u1").await.remove(0);
    let card_id = card["id"].as_str().expect("id");
    let submitted = call(
        &s,
        "POST",
        &format!("/v1/{}/users/u1/cards/{card_id}/actions", s.env),
        Some(&s.admin_secret),
        Some(json!({"action": "submit"})),
    )
    .await;
    assert!(submitted.status < 300, "{}", submitted.text);
    move_flow(&s, &flow, &b).await;
    start(&s, &flow, "u2").await;

    let today = chrono::Utc::now().date_naive();
    let of_flow = stats(&s, &format!("/v1/{}/action-flow/{flow}/stats", s.env)).await;
    assert_eq!(of_flow["mode"], "live");
    assert_eq!(of_flow["to"], today.format("%Y-%m-%d").to_string());
    let from = today - chrono::Duration::days(29);
    assert_eq!(of_flow["from"], from.format("%Y-%m-%d").to_string());
    let days = of_flow["days"].as_array().expect("days");
    assert_eq!(days.len(), 1, "{of_flow}");
    let day = &days[0];
    assert_eq!(day["version"], 1);
    assert_eq!(
        day["invocations"],
        json!({"started": 2, "completed": 2, "failed": 0, "cancelled": 0})
    );
    assert_eq!(day["cards"]["created"], 2);
    assert_eq!(day["cards"]["card-published"], 2);
    assert_eq!(day["cards"]["card-completed"], 1);
    assert_eq!(day["cards"]["card-expired"], 0);
    assert_eq!(day["webhooks"], json!({"succeeded": 0, "failed": 0}));
    assert_eq!(day["completionRate"], 0.5);

    // Each folder has what started while the flow was in it.
    let in_a = stats(&s, &format!("/v1/{}/workbench-folder/{a}/stats", s.env)).await;
    let day = &in_a["days"][0];
    assert!(day.get("version").is_none(), "{in_a}");
    assert_eq!(day["invocations"]["started"], 1);
    assert_eq!(day["cards"]["card-completed"], 1);
    assert_eq!(day["completionRate"], 1.0);
    let in_b = stats(&s, &format!("/v1/{}/workbench-folder/{b}/stats", s.env)).await;
    assert_eq!(in_b["days"][0]["invocations"]["started"], 1);
    assert_eq!(in_b["days"][0]["cards"]["card-completed"], 0);

    // Test mode, another version, and days before all of it have nothing.
    for query in ["?mode=test", "?version=2", "?from=2020-01-01&to=2020-12-31"] {
        let none = stats(
            &s,
            &format!("/v1/{}/action-flow/{flow}/stats{query}", s.env),
        )
        .await;
        assert_eq!(none["days"], json!([]), "{query}");
    }
}

async fn stats_refuse_bad_ranges_and_unknown_resources(s: Server) {
    let flow = flow_publishing(&s, "Ranged", config()).await;
    let a = folder(&s, "A").await;
    for (query, field) in [
        ("?from=2026-11-30&to=2026-11-01", "from"),
        ("?from=2025-01-01&to=2026-01-03", "from"),
        ("?to=2026-02-30", "to"),
        ("?mode=real", "mode"),
        ("?version=0", "version"),
    ] {
        let path = format!("/v1/{}/action-flow/{flow}/stats{query}", s.env);
        let reply = call(&s, "GET", &path, Some(&s.admin_secret), None).await;
        assert_eq!(reply.problem(400, "validation_failed"), [field], "{query}");
    }
    let path = format!("/v1/{}/workbench-folder/{a}/stats?from=tomorrow", s.env);
    let reply = call(&s, "GET", &path, Some(&s.admin_secret), None).await;
    assert_eq!(reply.problem(400, "validation_failed"), ["from"]);
    let ok = format!(
        "/v1/{}/action-flow/{flow}/stats?from=2025-01-01&to=2026-01-01",
        s.env
    );
    assert_eq!(
        call(&s, "GET", &ok, Some(&s.admin_secret), None)
            .await
            .status,
        200
    );
    for path in [
        format!("/v1/{}/action-flow/flw_nothing/stats", s.env),
        format!("/v1/{}/workbench-folder/fld_nothing/stats", s.env),
    ] {
        let reply = call(&s, "GET", &path, Some(&s.admin_secret), None).await;
        assert_eq!(reply.status, 404, "{path}: {}", reply.text);
    }
    let path = format!("/v1/{}/action-flow/{flow}/stats", s.env);
    assert_eq!(call(&s, "GET", &path, None, None).await.status, 401);
}

/// Deliveries done for good are counted by their event's flow: each success, and each
/// delivery that failed its last attempt (the test server's schedule is three retries a
/// second apart), several in one batch of outcomes.
async fn stats_count_webhook_deliveries_that_succeeded_and_failed(s: Server) {
    let ok = Receiver::start().await;
    let failing = Receiver::start().await;
    failing.answer(|_| 500);
    for url in [&ok.url, &failing.url] {
        let reply = call(
            &s,
            "POST",
            &format!("/v1/{}/webhook", s.env),
            Some(&s.admin_secret),
            Some(json!({"types": ["card-published"], "url": url})),
        )
        .await;
        assert_eq!(reply.status, 201, "{}", reply.text);
    }
    let flow = flow_publishing(&s, "Delivered", config()).await;
    let reply = call(
        &s,
        "POST",
        &format!("/v1/{}/action-flow/{flow}/start", s.env),
        Some(&s.admin_secret),
        Some(json!({"flows": [{"target": {"type": "user", "targetUserIds": ["u1", "u2", "u3"]}}]})),
    )
    .await;
    let id = invocation_id(&reply);
    finished(&s, &flow, &id).await;
    ok.wait_for(WAIT, "three deliveries", |got| got.len() >= 3)
        .await;
    failing
        .wait_for(WAIT, "four attempts of each", |got| got.len() >= 12)
        .await;
    let path = format!("/v1/{}/action-flow/{flow}/stats", s.env);
    let started = std::time::Instant::now();
    loop {
        let of_flow = stats(&s, &path).await;
        let webhooks = of_flow["days"][0]["webhooks"].clone();
        if webhooks == json!({"succeeded": 3, "failed": 3}) {
            break;
        }
        assert!(started.elapsed() < WAIT, "{of_flow}");
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}

/// `workbench prune` with a retention of a minute, on the server's database; its JSON. A
/// pass the server's own pruner holds the lease of at that moment is tried again.
fn prune(s: &Server, args: &[&str]) -> Value {
    for _ in 0..20 {
        let mut all = vec!["prune"];
        all.extend(args);
        let out = workbench(
            s.database_url(),
            s.data_dir(),
            &all,
            &[("WORKBENCH_RETENTION", Some("1m"))],
        );
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let printed: Value = serde_json::from_slice(&out.stdout).expect("JSON");
        if !printed["pruned"].is_null() {
            return printed;
        }
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    panic!("the pruning lease was never free");
}

async fn stats_stay_the_same_when_prune_removes_what_they_count(s: Server) {
    let flow = flow_publishing(&s, "Pruned", config()).await;
    start(&s, &flow, "u1").await;
    start(&s, &flow, "u2").await;
    let card = feed(&s, "u1").await.remove(0);
    let card_id = card["id"].as_str().expect("id");
    let submitted = call(
        &s,
        "POST",
        &format!("/v1/{}/users/u1/cards/{card_id}/actions", s.env),
        Some(&s.admin_secret),
        Some(json!({"action": "submit"})),
    )
    .await;
    assert!(submitted.status < 300, "{}", submitted.text);
    let of_flow = format!("/v1/{}/action-flow/{flow}/stats", s.env);
    let before = stats(&s, &of_flow).await;
    assert_eq!(before["days"][0]["invocations"]["completed"], 2, "{before}");

    // Nothing is a minute old yet.
    let none = prune(&s, &["--dry-run"]);
    assert_eq!(none["pruned"]["cards"], 0, "{none}");
    tokio::time::sleep(std::time::Duration::from_secs(62)).await;

    // A dry run counts what would go, and removes nothing: a second finds the same.
    let dry = prune(&s, &["--dry-run"]);
    assert_eq!(dry["dryRun"], true);
    assert_eq!(dry["retention"]["cards"], "1m");
    // u1's invocation goes; u2's stays while its card is open, so that a cancel of the flow
    // still finds that card through it (docs/operations.md, Retention and pruning).
    assert_eq!(dry["pruned"]["invocations"], 1, "{dry}");
    assert_eq!(dry["pruned"]["cards"], 1, "{dry}");
    assert!(
        dry["pruned"]["events"].as_u64().expect("events") >= 3,
        "{dry}"
    );
    assert_eq!(prune(&s, &["--dry-run"])["pruned"], dry["pruned"]);
    // The open card stays in the feed, the invocations are still there.
    assert_eq!(feed(&s, "u2").await.len(), 1);

    let done = prune(&s, &[]);
    assert_eq!(done["dryRun"], false);
    assert_eq!(done["pruned"], dry["pruned"], "{done}");
    let after = stats(&s, &of_flow).await;
    assert_eq!(after, before);
    assert_eq!(feed(&s, "u2").await.len(), 1);
    let nothing = prune(&s, &["--dry-run"]);
    assert_eq!(nothing["pruned"]["cards"], 0, "{nothing}");
    assert_eq!(nothing["pruned"]["invocations"], 0, "{nothing}");
    // Once u2's card is closed, its invocation goes (the card itself a minute later).
    let open = feed(&s, "u2").await.remove(0);
    let dismissed = call(
        &s,
        "POST",
        &format!(
            "/v1/{}/users/u2/cards/{}/actions",
            s.env,
            open["id"].as_str().expect("id")
        ),
        Some(&s.admin_secret),
        Some(json!({"action": "dismiss"})),
    )
    .await;
    assert!(dismissed.status < 300, "{}", dismissed.text);
    let last = prune(&s, &[]);
    assert_eq!(last["pruned"]["invocations"], 1, "{last}");
    assert_eq!(last["pruned"]["cards"], 0, "{last}");
}

blackbox!(
    stats_count_what_flows_did_and_folders_follow_the_folder_at_start,
    stats_stay_the_same_when_prune_removes_what_they_count,
    stats_refuse_bad_ranges_and_unknown_resources,
    stats_count_webhook_deliveries_that_succeeded_and_failed,
);
