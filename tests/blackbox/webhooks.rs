//! Webhooks end to end: subscriptions over HTTP, deliveries to a receiver on loopback.

use std::collections::HashSet;
use std::time::Duration;

use serde_json::{json, Value};

use crate::receiver::{Received, Receiver};
use crate::support::{blackbox, call, Reply, Server};
use crate::trigger::{feed, finished, finished_within, fire, invocation_id, published_flow, users};

const WAIT: Duration = Duration::from_secs(15);

async fn subscribe(s: &Server, body: Value) -> Reply {
    call(
        s,
        "POST",
        &format!("/v1/{}/webhook", s.env),
        Some(&s.admin_secret),
        Some(body),
    )
    .await
}

async fn subscribed(s: &Server, body: Value) -> (String, String) {
    let reply = subscribe(s, body).await;
    assert_eq!(reply.status, 201, "{}", reply.text);
    let data = &reply.body["data"];
    (
        data["id"].as_str().expect("id").to_owned(),
        data["secret"].as_str().expect("secret").to_owned(),
    )
}

async fn webhook(s: &Server, method: &str, id: &str, rest: &str, body: Option<Value>) -> Reply {
    call(
        s,
        method,
        &format!("/v1/{}/webhook/{id}{rest}", s.env),
        Some(&s.admin_secret),
        body,
    )
    .await
}

/// One card for u1 of a fresh published flow; returns (flow, card id).
async fn one_card(s: &Server) -> (String, String) {
    let flow = published_flow(s, false).await;
    users(s, json!([{"id": "u1"}])).await;
    let reply = fire(
        s,
        &flow,
        "start",
        json!({"flows": [{"target": {"type": "user", "targetUserIds": ["u1"]}}]}),
    )
    .await;
    finished(s, &flow, &invocation_id(&reply)).await;
    let card = feed(s, "u1").await.remove(0);
    (flow, card["id"].as_str().expect("id").to_owned())
}

fn of_event<'a>(got: &'a [Received], name: &str) -> Vec<&'a Received> {
    got.iter()
        .filter(|r| r.json()["data"]["analyticsEvent"] == name)
        .collect()
}

async fn a_submitted_card_arrives_as_a_signed_card_completed_webhook(s: Server) {
    let receiver = Receiver::start().await;
    let (id, secret) = subscribed(
        &s,
        json!({"types": ["card-published", "card-completed"], "url": receiver.url, "headers": {"X-Token": "t0k"}}),
    )
    .await;
    assert!(secret.starts_with("whsec_"));
    let (flow, card) = one_card(&s).await;
    let before_submit = chrono::Utc::now();
    let submitted = call(
        &s,
        "POST",
        &format!("/v1/{}/users/u1/cards/{card}/actions", s.env),
        Some(&s.admin_secret),
        Some(json!({"action": "submit", "values": {"rating": 5}})),
    )
    .await;
    assert_eq!(submitted.status, 200, "{}", submitted.text);
    let got = receiver
        .wait_for(WAIT, "card-completed", |got| {
            !of_event(got, "card-completed").is_empty()
        })
        .await;
    assert_eq!(of_event(&got, "card-published").len(), 1);
    assert!(of_event(&got, "card-completed")[0].received_at >= before_submit);
    let call = of_event(&got, "card-completed")[0];
    call.verify(&secret)
        .expect("verified by the standardwebhooks crate");
    assert!(call.verify(&crate_other_secret()).is_err());
    assert_eq!(
        (call.method.as_str(), call.path.as_str()),
        ("POST", "/hook")
    );
    assert_eq!(call.header("x-token"), "t0k");
    assert_eq!(call.header("content-type"), "application/json");
    let body = call.json();
    assert_eq!(body["environmentId"], s.env.as_str());
    assert_eq!(body["webhookId"], id.as_str());
    assert_eq!(body["isBatched"], false);
    assert!(body["requestId"].is_string());
    let data = &body["data"];
    assert_eq!(
        call.header("webhook-id"),
        data["id"].as_str().expect("event id")
    );
    assert_eq!(data["endUserId"], "u1");
    assert_eq!(data["properties"]["values"], json!({"rating": 5}));
    assert_eq!(data["cardContext"]["cardInstanceId"], card.as_str());
    assert_eq!(data["cardContext"]["previousStatus"], "active");
    assert_eq!(data["cardContext"]["cardInstanceStatus"], "completed");
    assert_eq!(data["cardContext"]["cardTemplateId"], "t1");
    assert_eq!(data["platformContext"]["flowConfigId"], flow.as_str());
    // The attempt log: outcomes are saved in batches after the calls return, so the second
    // may land a moment after the receiver has it.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let log = loop {
        let log = webhook(&s, "GET", &id, "/deliveries", None).await;
        assert_eq!(log.status, 200, "{}", log.text);
        let logged = log.body["data"].as_array().map_or(0, Vec::len);
        if logged >= 2 || std::time::Instant::now() > deadline {
            break log;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let attempts = log.body["data"].as_array().expect("attempts");
    assert_eq!(attempts.len(), 2, "{}", log.text);
    assert!(attempts
        .iter()
        .all(|a| a["statusCode"] == 200 && a["attempt"] == 1 && a["responseBody"] == "ok"));
}

fn crate_other_secret() -> String {
    "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw".into()
}

async fn failures_are_retried_with_the_same_id_and_410_disables(s: Server) {
    let receiver = Receiver::start().await;
    receiver.answer(|n| if n < 2 { 500 } else { 200 });
    let (id, secret) = subscribed(
        &s,
        json!({"types": ["card-published"], "url": receiver.url, "method": "PUT"}),
    )
    .await;
    one_card(&s).await;
    let got = receiver
        .wait_for(WAIT, "three attempts", |got| got.len() >= 3)
        .await;
    let ids: HashSet<&str> = got.iter().map(|r| r.header("webhook-id")).collect();
    assert_eq!(
        ids.len(),
        1,
        "one event, the same webhook-id on every attempt"
    );
    assert!(got
        .iter()
        .all(|r| r.method == "PUT" && r.verify(&secret).is_ok()));
    // The third outcome is saved after the receiver answered: wait for it in the log.
    let mut log = webhook(&s, "GET", &id, "/deliveries", None).await;
    let deadline = std::time::Instant::now() + WAIT;
    while log.body["data"].as_array().map_or(0, Vec::len) < 3
        && std::time::Instant::now() < deadline
    {
        tokio::time::sleep(Duration::from_millis(50)).await;
        log = webhook(&s, "GET", &id, "/deliveries", None).await;
    }
    let statuses: Vec<(Value, Value)> = log.body["data"]
        .as_array()
        .expect("attempts")
        .iter()
        .map(|a| (a["attempt"].clone(), a["statusCode"].clone()))
        .collect();
    assert_eq!(
        statuses,
        [
            (json!(3), json!(200)),
            (json!(2), json!(500)),
            (json!(1), json!(500))
        ]
    );
    assert!(log.body["data"][1]["nextAttempt"].is_string());
    let sub = webhook(&s, "GET", &id, "", None).await;
    assert_eq!(sub.body["data"]["failingSince"], Value::Null, "recovered");

    // Out of retries: failed, until recovered.
    receiver.answer(|n| if n < 7 { 500 } else { 200 });
    users(&s, json!([{"id": "u3"}])).await;
    let flow = published_flow(&s, false).await;
    let reply = fire(
        &s,
        &flow,
        "start",
        json!({"flows": [{"target": {"type": "user", "targetUserIds": ["u3"]}}]}),
    )
    .await;
    finished(&s, &flow, &invocation_id(&reply)).await;
    receiver
        .wait_for(WAIT, "four failed attempts", |got| got.len() >= 7)
        .await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(receiver.received().len(), 7, "1 + 3 retries, then failed");
    let sub = webhook(&s, "GET", &id, "", None).await;
    assert!(sub.body["data"]["failingSince"].is_string(), "{}", sub.text);
    let recovered = webhook(
        &s,
        "POST",
        &id,
        "/recover",
        Some(json!({"since": "2020-01-01T00:00:00Z"})),
    )
    .await;
    assert_eq!(recovered.status, 202, "{}", recovered.text);
    assert_eq!(recovered.body["data"]["queued"], 1);
    let got = receiver
        .wait_for(WAIT, "the recovered delivery", |got| got.len() >= 8)
        .await;
    assert_eq!(got[7].header("webhook-id"), got[3].header("webhook-id"));

    receiver.answer(|_| 410);
    users(&s, json!([{"id": "u2"}])).await;
    let reply = fire(
        &s,
        &flow,
        "start",
        json!({"flows": [{"target": {"type": "user", "targetUserIds": ["u2"]}}]}),
    )
    .await;
    finished(&s, &flow, &invocation_id(&reply)).await;
    receiver
        .wait_for(WAIT, "the 410", |got| got.len() >= 9)
        .await;
    let started = std::time::Instant::now();
    loop {
        let sub = webhook(&s, "GET", &id, "", None).await;
        if sub.body["data"]["status"] == "disabled" {
            assert_eq!(sub.body["data"]["disabledReason"], "gone");
            break;
        }
        assert!(started.elapsed() < WAIT, "not disabled: {}", sub.text);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(receiver.received().len(), 9, "no retry after 410");
}

async fn filters_test_calls_rotation_disable_and_delete(s: Server) {
    let receiver = Receiver::start().await;
    let (other, _) = subscribed(&s, json!({"types": ["card-published"], "url": receiver.url, "actionFlowConfigId": "flw_elsewhere"})).await;
    let (template, _) = subscribed(
        &s,
        json!({"types": ["card-published"], "url": receiver.url, "cardTemplateId": "t1"}),
    )
    .await;
    let (id, secret) = subscribed(
        &s,
        json!({"types": ["card-published"], "url": receiver.url}),
    )
    .await;

    // Test call: answered with the outcome, signed, logged.
    let test = webhook(&s, "POST", &id, "/test", None).await;
    assert_eq!(test.status, 200, "{}", test.text);
    assert_eq!(test.body["data"]["statusCode"], 200);
    assert_eq!(test.body["data"]["trigger"], "test");
    let got = receiver.received();
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].json()["data"]["analyticsEvent"], "webhook-test");
    got[0].verify(&secret).expect("signed");

    // Rotation: both secrets sign for a day.
    let rotated = webhook(&s, "POST", &id, "/rotate-secret", None).await;
    assert_eq!(rotated.status, 200, "{}", rotated.text);
    let new_secret = rotated.body["data"]["secret"]
        .as_str()
        .expect("secret")
        .to_owned();
    assert_ne!(new_secret, secret);
    let (flow, _) = one_card(&s).await;
    let got = receiver
        .wait_for(WAIT, "two deliveries", |got| got.len() >= 3)
        .await;
    let to = |r: &Received| {
        r.json()["webhookId"]
            .as_str()
            .expect("webhookId")
            .to_owned()
    };
    let hooks: Vec<String> = got[1..].iter().map(to).collect();
    assert!(
        hooks.contains(&id) && hooks.contains(&template),
        "{hooks:?}"
    );
    assert!(!hooks.contains(&other), "the flow filter");
    let mine = got[1..].iter().find(|r| to(r) == id).expect("mine");
    assert_eq!(mine.header("webhook-signature").split(' ').count(), 2);
    mine.verify(&secret).expect("old secret");
    mine.verify(&new_secret).expect("new secret");
    assert!(got[1..]
        .iter()
        .all(|r| r.json()["data"]["platformContext"]["flowConfigId"] == flow.as_str()));

    // The list has no secrets; details do.
    let list = call(
        &s,
        "GET",
        &format!("/v1/{}/webhook", s.env),
        Some(&s.admin_secret),
        None,
    )
    .await;
    assert_eq!(list.body["data"].as_array().map(Vec::len), Some(3));
    assert!(list.body["data"]
        .as_array()
        .expect("list")
        .iter()
        .all(|d| d.get("secret").is_none()));
    assert_eq!(
        webhook(&s, "GET", &id, "", None).await.body["data"]["secret"],
        new_secret.as_str()
    );

    // Disable: nothing more is sent. Permanent delete only once disabled.
    webhook(&s, "DELETE", &id, "?permanent=true", None)
        .await
        .problem(409, "webhook_enabled");
    let disabled = webhook(&s, "DELETE", &id, "", None).await;
    assert_eq!(disabled.status, 200, "{}", disabled.text);
    assert_eq!(disabled.body["data"]["status"], "disabled");
    webhook(&s, "DELETE", &template, "", None).await;
    users(&s, json!([{"id": "u2"}])).await;
    let reply = fire(
        &s,
        &flow,
        "start",
        json!({"flows": [{"target": {"type": "user", "targetUserIds": ["u2"]}}]}),
    )
    .await;
    finished(&s, &flow, &invocation_id(&reply)).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        receiver.received().len(),
        3,
        "disabled subscriptions get nothing"
    );
    webhook(
        &s,
        "POST",
        &id,
        "/recover",
        Some(json!({"since": "2020-01-01T00:00:00Z"})),
    )
    .await
    .problem(409, "webhook_disabled");
    let enabled = webhook(&s, "POST", &id, "/enable", None).await;
    assert_eq!(enabled.body["data"]["status"], "active");
    let recovered = webhook(
        &s,
        "POST",
        &id,
        "/recover",
        Some(json!({"since": "2020-01-01T00:00:00Z"})),
    )
    .await;
    assert_eq!(recovered.status, 202, "{}", recovered.text);
    assert_eq!(
        recovered.body["data"]["queued"], 0,
        "events while disabled were never queued"
    );
    let event = mine.json()["data"]["id"].as_str().expect("id").to_owned();
    let resent = webhook(
        &s,
        "POST",
        &id,
        &format!("/deliveries/{event}/resend"),
        None,
    )
    .await;
    assert_eq!(resent.status, 202, "{}", resent.text);
    let got = receiver
        .wait_for(WAIT, "the resent delivery", |got| got.len() >= 4)
        .await;
    assert_eq!(got[3].header("webhook-id"), event, "the same event again");
    webhook(&s, "POST", &id, "/deliveries/evt_missing/resend", None)
        .await
        .problem(404, "not_found");

    webhook(&s, "DELETE", &id, "", None).await;
    assert_eq!(
        webhook(&s, "DELETE", &id, "?permanent=true", None)
            .await
            .status,
        204
    );
    webhook(&s, "GET", &id, "", None)
        .await
        .problem(404, "not_found");
    webhook(&s, "DELETE", &id, "?permanent=maybe", None)
        .await
        .problem(400, "validation_failed");
}

async fn subscriptions_are_validated_limited_and_need_the_workbench_role(s: Server) {
    let fields = subscribe(&s, json!({"types": ["card-eaten"], "url": "ftp://x", "headers": {"Webhook-Id": "x"}, "extra": 1}))
        .await
        .problem(400, "validation_failed");
    assert_eq!(
        fields,
        ["types[0]", "url", "headers.Webhook-Id"],
        "unknown fields are ignored"
    );
    subscribe(
        &s,
        json!({"types": ["card-published"], "url": "http://127.0.0.1:9/x", "cardTemplateId": 5}),
    )
    .await
    .problem(400, "validation_failed");
    let events = s.key(&["--role", "events"]);
    let r = call(
        &s,
        "GET",
        &format!("/v1/{}/webhook", s.env),
        Some(&events),
        None,
    )
    .await;
    r.problem(403, "forbidden");
    let workbench = s.key(&["--role", "workbench"]);
    let r = call(
        &s,
        "GET",
        &format!("/v1/{}/webhook", s.env),
        Some(&workbench),
        None,
    )
    .await;
    assert_eq!(r.status, 200);
    call(
        &s,
        "GET",
        &format!("/v1/{}/webhook", s.other_env("Other")),
        Some(&workbench),
        None,
    )
    .await
    .problem(401, "unauthorized");
    webhook(&s, "GET", "whk_missing", "", None)
        .await
        .problem(404, "not_found");
    for n in 0..100 {
        let r = subscribe(
            &s,
            json!({"types": ["card-published"], "url": format!("http://127.0.0.1:9/{n}")}),
        )
        .await;
        assert_eq!(r.status, 201, "{}", r.text);
    }
    subscribe(
        &s,
        json!({"types": ["card-published"], "url": "http://127.0.0.1:9/x"}),
    )
    .await
    .problem(409, "webhook_limit_reached");
}

/// Every event of a 10,000-user fan-out arrives, although the server is killed mid-delivery.
async fn a_kill_mid_delivery_loses_no_event(mut s: Server) {
    let receiver = Receiver::start().await;
    subscribed(
        &s,
        json!({"types": ["card-published"], "url": receiver.url}),
    )
    .await;
    let users_json: Vec<Value> = (0..10_000)
        .map(|i| json!({"id": format!("u{i}"), "tags": ["all"]}))
        .collect();
    users(&s, Value::Array(users_json)).await;
    let flow = published_flow(&s, false).await;
    let reply = fire(
        &s,
        &flow,
        "start",
        json!({"flows": [{"target": {"type": "tag", "tag": "all"}}]}),
    )
    .await;
    let invocation = invocation_id(&reply);
    let started = std::time::Instant::now();
    while receiver.len() < 500 {
        assert!(started.elapsed() < Duration::from_secs(60), "no deliveries");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    s.kill_and_restart();
    finished_within(&s, &flow, &invocation, Duration::from_secs(120)).await;
    let got = receiver
        .wait_for(Duration::from_secs(120), "every event", |got| {
            got.iter()
                .map(|r| r.header("webhook-id").to_owned())
                .collect::<HashSet<_>>()
                .len()
                >= 10_000
        })
        .await;
    let unique = got
        .iter()
        .map(|r| r.header("webhook-id"))
        .collect::<HashSet<_>>()
        .len();
    eprintln!(
        "kill -9 mid-delivery: {} calls for {unique} events ({} duplicates)",
        got.len(),
        got.len() - unique
    );
    assert_eq!(unique, 10_000);
}

/// Contract §16: a key that may only read webhooks sees the signing secret (enough to forge a
/// delivery) and custom header values masked; one that may change them sees them whole.
async fn read_only_keys_see_webhook_secrets_masked(s: Server) {
    let (id, secret) = subscribed(
        &s,
        json!({"types": ["card-completed"], "url": "http://127.0.0.1:9/hook",
               "headers": {"Authorization": "Bearer receiver-token-1234"}}),
    )
    .await;
    let path = format!("/v1/{}/webhook/{id}", s.env);
    let reader = s.key(&["--scope", "webhooks:read"]);
    let shown = call(&s, "GET", &path, Some(&reader), None).await;
    assert_eq!(shown.status, 200, "{}", shown.text);
    let last4: String = secret.chars().skip(secret.chars().count() - 4).collect();
    assert_eq!(shown.body["data"]["secret"], format!("whsec_…{last4}"));
    assert_eq!(shown.body["data"]["headers"]["Authorization"], "…1234");
    let list = call(
        &s,
        "GET",
        &format!("/v1/{}/webhook", s.env),
        Some(&reader),
        None,
    )
    .await;
    assert_eq!(list.body["data"][0]["headers"]["Authorization"], "…1234");
    assert!(!list.text.contains("receiver-token"), "{}", list.text);
    let writer = s.key(&["--scope", "webhooks:read", "--scope", "webhooks:write"]);
    let whole = call(&s, "GET", &path, Some(&writer), None).await;
    assert_eq!(whole.body["data"]["secret"], secret.as_str());
    assert_eq!(
        whole.body["data"]["headers"]["Authorization"],
        "Bearer receiver-token-1234"
    );
}

/// Contract §11: a subscription is changed in place: what the body names changes, the rest
/// and the secret stay; the result is validated as a new subscription is, and a new URL passes
/// the SSRF check again.
async fn a_subscription_is_changed_in_place_keeping_its_secret(s: Server) {
    let (id, secret) = subscribed(
        &s,
        json!({"types": ["card-published"], "url": "http://127.0.0.1:9/a",
               "headers": {"X-Team": "growth"}, "description": "Growth team's CRM"}),
    )
    .await;
    let changed = webhook(
        &s,
        "PATCH",
        &id,
        "",
        Some(
            json!({"url": "http://127.0.0.1:9/b", "types": ["card-completed", "card-published"],
                    "actionFlowConfigId": "flw_1", "method": "put", "unknown": 1}),
        ),
    )
    .await;
    assert_eq!(changed.status, 200, "{}", changed.text);
    let data = &changed.body["data"];
    assert_eq!(data["url"], "http://127.0.0.1:9/b");
    assert_eq!(data["types"], json!(["card-completed", "card-published"]));
    assert_eq!(data["actionFlowConfigId"], "flw_1");
    assert_eq!(data["method"], "PUT");
    assert_eq!(data["headers"], json!({"X-Team": "growth"}), "kept");
    assert_eq!(data["description"], "Growth team's CRM", "kept");
    assert_eq!(data["secret"], secret.as_str(), "the secret is unchanged");
    assert_eq!(data["status"], "active");

    // Every problem at once, nothing changed.
    let refused = webhook(
        &s,
        "PATCH",
        &id,
        "",
        Some(json!({"types": [], "method": "GET"})),
    )
    .await;
    let mut fields = refused.problem(400, "validation_failed");
    fields.sort();
    assert_eq!(fields, ["method", "types"]);
    // A new URL is checked again; the refusal names the allow-list setting.
    let private = webhook(
        &s,
        "PATCH",
        &id,
        "",
        Some(json!({"url": "http://10.1.2.3/h"})),
    )
    .await;
    assert_eq!(private.problem(400, "validation_failed"), ["url"]);
    assert!(
        private.text.contains("WORKBENCH_WEBHOOK_ALLOW_CIDRS"),
        "{}",
        private.text
    );
    // `null` clears a filter.
    let cleared = webhook(
        &s,
        "PATCH",
        &id,
        "",
        Some(json!({"actionFlowConfigId": null})),
    )
    .await;
    assert_eq!(cleared.status, 200, "{}", cleared.text);
    let shown = webhook(&s, "GET", &id, "", None).await;
    assert_eq!(shown.body["data"]["actionFlowConfigId"], Value::Null);
    assert_eq!(shown.body["data"]["url"], "http://127.0.0.1:9/b");
    // A description is changed, refused past its limit, and cleared by null.
    let described = webhook(
        &s,
        "PATCH",
        &id,
        "",
        Some(json!({"description": "Completed cards to the CRM"})),
    )
    .await;
    assert_eq!(described.status, 200, "{}", described.text);
    assert_eq!(
        described.body["data"]["description"],
        "Completed cards to the CRM"
    );
    let long = webhook(
        &s,
        "PATCH",
        &id,
        "",
        Some(json!({"description": "a".repeat(1_001)})),
    )
    .await;
    assert_eq!(long.problem(400, "validation_failed"), ["description"]);
    webhook(&s, "PATCH", &id, "", Some(json!({"description": null}))).await;
    let listed = call(
        &s,
        "GET",
        &format!("/v1/{}/webhook", s.env),
        Some(&s.admin_secret),
        None,
    )
    .await;
    let entry = listed.body["data"]
        .as_array()
        .and_then(|all| all.iter().find(|w| w["id"] == id.as_str()))
        .cloned()
        .expect("listed");
    assert_eq!(entry["description"], Value::Null, "cleared");
    webhook(
        &s,
        "PATCH",
        "whk_unknown",
        "",
        Some(json!({"types": ["card-published"]})),
    )
    .await
    .problem(404, "not_found");
}

blackbox!(
    a_subscription_is_changed_in_place_keeping_its_secret,
    read_only_keys_see_webhook_secrets_masked,
    a_submitted_card_arrives_as_a_signed_card_completed_webhook,
    failures_are_retried_with_the_same_id_and_410_disables,
    filters_test_calls_rotation_disable_and_delete,
    subscriptions_are_validated_limited_and_need_the_workbench_role,
    a_kill_mid_delivery_loses_no_event,
);

/// Without an allow-list, every private, loopback, link-local, CGNAT and metadata address is
/// refused at subscribe time, as is a name resolving to one.
async fn ssrf(db: adapters_diesel::testing::TestDatabase) {
    let s = Server::start_with(db, &[("WORKBENCH_WEBHOOK_ALLOW_CIDRS", None)]).await;
    for url in [
        "http://127.0.0.1/x",
        "http://10.0.0.1/x",
        "http://172.16.0.1/x",
        "http://192.168.1.1/x",
        "http://169.254.169.254/latest/meta-data",
        "http://100.64.0.1/x",
        "http://[::1]/x",
        "http://[fc00::1]/x",
        "http://[fe80::1]/x",
        "http://[::ffff:127.0.0.1]/x",
        "http://0.0.0.0/x",
        "http://localhost:8080/x",
    ] {
        let fields = subscribe(&s, json!({"types": ["card-published"], "url": url}))
            .await
            .problem(400, "validation_failed");
        assert_eq!(fields, ["url"], "{url}");
    }
}

mod ssrf {
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn sqlite_private_addresses_are_refused() {
        super::ssrf(adapters_diesel::testing::TestDatabase::sqlite()).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn postgres_private_addresses_are_refused() {
        let Some(db) = adapters_diesel::testing::TestDatabase::postgres() else {
            return;
        };
        super::ssrf(db).await;
    }
}
