//! Cancel tasks over HTTP: statuses, narrowing, cards kept or cancelled, and the race with a
//! running fan-out.

use std::time::Duration;

use adapters_diesel::testing::raw_texts;
use serde_json::{json, Value};

use crate::support::{blackbox, call, Reply, Server};
use crate::trigger::{feed, finished, finished_within, fire, invocation_id, published_flow, users};

async fn cancel(s: &Server, flow: &str, body: Option<Value>) -> Reply {
    call(
        s,
        "POST",
        &format!("/v1/{}/action-flow/{flow}/task/cancel", s.env),
        Some(&s.admin_secret),
        body,
    )
    .await
}

/// Starts a cancel and polls it until it is no longer processing.
pub(crate) async fn cancelled(s: &Server, flow: &str, body: Option<Value>) -> Value {
    let reply = cancel(s, flow, body).await;
    assert_eq!(reply.status, 202, "{}", reply.text);
    let data = &reply.body["data"];
    let link = &data["links"][0];
    assert_eq!(
        (link["rel"].as_str(), link["type"].as_str()),
        (Some("cancel-status"), Some("GET"))
    );
    assert!(link["title"].is_string());
    let task = data["taskId"].as_str().expect("taskId");
    assert_eq!(task.len(), 36, "uuid form: {task}");
    let href = link["href"].as_str().expect("href");
    assert_eq!(
        href,
        s.url(&format!(
            "/v1/{}/action-flow/{flow}/task/{task}/status",
            s.env
        ))
    );
    let started = std::time::Instant::now();
    loop {
        let status = Reply::from(
            s.client
                .get(href)
                .bearer_auth(&s.admin_secret)
                .send()
                .await
                .expect("status"),
        )
        .await;
        assert_eq!(status.status, 200, "{}", status.text);
        assert!(status.body.get("data").is_none(), "not wrapped");
        if status.body["status"] != "processing" {
            return status.body;
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "{}",
            status.text
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn three_cards(s: &Server) -> (String, String) {
    let flow = published_flow(s, false).await;
    users(s, json!([{"id": "u1", "tags": ["t"]}, {"id": "u2", "tags": ["t"]}, {"id": "u3", "tags": ["t"]}])).await;
    let reply = fire(
        s,
        &flow,
        "start",
        json!({"flows": [{"target": {"type": "tag", "tag": "t"}}]}),
    )
    .await;
    let id = invocation_id(&reply);
    finished(s, &flow, &id).await;
    (flow, id)
}

async fn a_cancel_with_nothing_to_match_fails_as_the_spec_says(s: Server) {
    let flow = published_flow(&s, false).await;
    let status = cancelled(&s, &flow, None).await;
    assert_eq!(status["status"], "failed");
    assert_eq!(
        (
            status["progress"].clone(),
            status["actual"].clone(),
            status["expected"].clone()
        ),
        (json!(0), json!(0), json!(0))
    );
    assert!(status["errors"][0]
        .as_str()
        .expect("error")
        .contains("no matching flow instances"));
    assert!(status.get("cards").is_none(), "{status}");
    assert!(status["created"].is_string());
}

async fn a_cancel_stops_instances_and_cancels_their_cards(s: Server) {
    let (flow, _) = three_cards(&s).await;
    // Narrowed to one user.
    let status = cancelled(&s, &flow, Some(json!({"endUserId": "u1"}))).await;
    assert_eq!(status["status"], "completed", "{status}");
    assert_eq!(
        (
            status["progress"].clone(),
            status["actual"].clone(),
            status["expected"].clone()
        ),
        (json!(100), json!(1), json!(1))
    );
    assert_eq!(status["cards"], json!({"actual": 1, "expected": 1}));
    assert!(feed(&s, "u1").await.is_empty());
    assert_eq!(feed(&s, "u2").await.len(), 1);
    // The rest, keeping the cards.
    let status = cancelled(&s, &flow, Some(json!({"cancelCards": false}))).await;
    assert_eq!(
        (status["actual"].clone(), status["cards"]["actual"].clone()),
        (json!(2), json!(0)),
        "{status}"
    );
    assert_eq!(feed(&s, "u2").await.len(), 1, "cards stay");
    // Nothing left to cancel.
    assert_eq!(cancelled(&s, &flow, None).await["status"], "failed");
}

async fn cancelled_cards_emit_card_cancelled(s: Server) {
    let (flow, invocation) = three_cards(&s).await;
    let card = feed(&s, "u2").await.remove(0);
    let status = cancelled(
        &s,
        &flow,
        Some(json!({"flowInvocationId": invocation, "flowConfigVersion": 1})),
    )
    .await;
    assert_eq!(
        (status["actual"].clone(), status["cards"]["actual"].clone()),
        (json!(3), json!(3)),
        "{status}"
    );
    let card_id = card["id"].as_str().expect("id");
    let events = call(
        &s,
        "GET",
        &format!("/v1/{}/users/u2/cards/{card_id}/events", s.env),
        Some(&s.admin_secret),
        None,
    )
    .await;
    let last = &events.body["data"][1];
    assert_eq!(last["analyticsEvent"], "card-cancelled", "{}", events.text);
    assert_eq!(last["cardContext"]["previousStatus"], "active");
    assert_eq!(last["cardContext"]["cardInstanceStatus"], "cancelled");
    // An action on a cancelled card is refused.
    call(
        &s,
        "POST",
        &format!("/v1/{}/users/u2/cards/{card_id}/actions", s.env),
        Some(&s.admin_secret),
        Some(json!({"action": "dismiss"})),
    )
    .await
    .problem(409, "card_closed");
    // Another version matches nothing.
    assert_eq!(
        cancelled(&s, &flow, Some(json!({"flowConfigVersion": 7}))).await["status"],
        "failed"
    );
}

async fn cancel_requests_are_validated(s: Server) {
    let flow = published_flow(&s, false).await;
    let fields = cancel(
        &s,
        &flow,
        Some(json!({"endUserId": 1, "flowConfigVersion": "x", "cancelCards": "no"})),
    )
    .await
    .problem(400, "validation_failed");
    assert_eq!(fields, ["endUserId", "flowConfigVersion", "cancelCards"]);
    cancel(&s, "flw_missing", None)
        .await
        .problem(404, "not_found");
    let path = |task: &str| format!("/v1/{}/action-flow/{flow}/task/{task}/status", s.env);
    call(&s, "GET", &path("not-a-uuid"), Some(&s.admin_secret), None)
        .await
        .problem(400, "validation_failed");
    call(
        &s,
        "GET",
        &path("8a5f2c1e-3b4d-4e6f-8a9b-0c1d2e3f4a5b"),
        Some(&s.admin_secret),
        None,
    )
    .await
    .problem(404, "not_found");
    let workbench = s.key(&["--role", "workbench"]);
    let r = call(
        &s,
        "POST",
        &format!("/v1/{}/action-flow/{flow}/task/cancel", s.env),
        Some(&workbench),
        None,
    )
    .await;
    r.problem(403, "forbidden");
    call(
        &s,
        "POST",
        &format!(
            "/v1/{}/action-flow/{flow}/task/cancel",
            s.other_env("Other")
        ),
        Some(&workbench),
        None,
    )
    .await
    .problem(401, "unauthorized");
}

/// A cancel accepted during a 100,000-user fan-out leaves no open card of it.
async fn a_cancel_during_a_fan_out_leaves_no_open_card(s: Server) {
    let flow = published_flow(&s, false).await;
    for batch in 0..10 {
        let list: Vec<Value> = (0..10_000)
            .map(|i| json!({"id": format!("u{}", batch * 10_000 + i), "tags": ["all"]}))
            .collect();
        users(&s, Value::Array(list)).await;
    }
    let reply = fire(
        &s,
        &flow,
        "start",
        json!({"flows": [{"target": {"type": "tag", "tag": "all"}}]}),
    )
    .await;
    let invocation = invocation_id(&reply);
    let path = format!("/v1/{}/action-flow/{flow}/invocations/{invocation}", s.env);
    loop {
        let r = call(&s, "GET", &path, Some(&s.admin_secret), None).await;
        if r.body["data"]["cardsCreated"].as_u64().unwrap_or(0) >= 3_000 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let status = cancelled(&s, &flow, None).await;
    assert_eq!(status["status"], "completed", "{status}");
    let done = finished_within(&s, &flow, &invocation, Duration::from_secs(120)).await;
    let open = |s: &Server| {
        raw_texts(s.database_url(), "SELECT CAST(COUNT(*) AS TEXT) AS v FROM card_instances WHERE status IN ('active', 'embargoed', 'snoozed')")
    };
    assert_eq!(open(&s), ["0"], "task {status}; invocation {done}");
    eprintln!("cancel during fan-out: invocation {} with {} cards created before the cancel; task {status}", done["status"], done["cardsCreated"]);
}

blackbox!(
    a_cancel_with_nothing_to_match_fails_as_the_spec_says,
    a_cancel_stops_instances_and_cancels_their_cards,
    cancelled_cards_emit_card_cancelled,
    cancel_requests_are_validated,
    a_cancel_during_a_fan_out_leaves_no_open_card,
);
