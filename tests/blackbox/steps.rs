//! Flows that wait and branch (contract §21), end to end: the journeys docs/flows.md shows,
//! a card closed before its wait starts, and a cancel during a wait.

use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::cancel::cancelled;
use crate::support::{blackbox, call, Server};
use crate::trigger::{feed, fire, flow_publishing, invocation_id, users};
use adapters_diesel::testing::raw_texts;

/// A card template whose headline is `text`, with a submit button.
pub(crate) fn template(text: &str) -> Value {
    json!({"metadata": {"cardName": text},
           "defaultView": {"content": [{"key": "h", "type": "headline", "attributes": {"text": text}}],
                           "actions": [{"key": "ok", "type": "submitButton", "attributes": {"text": "OK"}}]}})
}

pub(crate) fn card_step(template: &str, next: &[&str]) -> Value {
    json!({"type": "create-card", "properties": {"cardTemplateId": template}, "next": next})
}

/// A configuration of `steps` (each given its id) from `initial`, with a template per name.
pub(crate) fn program(
    initial: &[&str],
    steps: Value,
    templates: &[&str],
    variables: Value,
) -> Value {
    let mut steps = steps;
    if let Some(all) = steps.as_object_mut() {
        for (id, step) in all.iter_mut() {
            step["id"] = json!(id);
        }
    }
    let templates: serde_json::Map<String, Value> = templates
        .iter()
        .map(|t| ((*t).to_owned(), template(t)))
        .collect();
    json!({"type": "card", "initialSteps": initial, "variables": variables,
           "steps": steps, "cardTemplates": templates})
}

/// The headlines of the user's open cards, sorted.
pub(crate) async fn headlines(s: &Server, user: &str) -> Vec<String> {
    let mut out: Vec<String> = feed(s, user)
        .await
        .iter()
        .filter_map(|c| {
            c["content"]["Web"]["defaultView"]["content"][0]["attributes"]["text"]
                .as_str()
                .map(str::to_owned)
        })
        .collect();
    out.sort();
    out
}

/// Polls the user's open cards until they are `want`, within `limit`.
async fn headlines_become(s: &Server, user: &str, want: &[&str], limit: Duration) -> Duration {
    let started = Instant::now();
    loop {
        let now = headlines(s, user).await;
        if now == want {
            return started.elapsed();
        }
        assert!(
            started.elapsed() < limit,
            "{user}: {now:?} after {:?}, not {want:?}",
            started.elapsed()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn start(s: &Server, flow: &str, user_ids: &[&str], variables: Value) -> String {
    let reply = fire(
        s,
        flow,
        "start",
        json!({"flows": [{"target": {"type": "user", "targetUserIds": user_ids},
                          "payload": {"variables": variables}}]}),
    )
    .await;
    invocation_id(&reply)
}

async fn act(s: &Server, user: &str, headline: &str, action: Value) {
    let card = feed(s, user)
        .await
        .into_iter()
        .find(|c| {
            c["content"]["Web"]["defaultView"]["content"][0]["attributes"]["text"] == headline
        })
        .unwrap_or_else(|| panic!("{user} has no card `{headline}`"));
    let id = card["id"].as_str().expect("id");
    let reply = call(
        s,
        "POST",
        &format!("/v1/{}/users/{user}/cards/{id}/actions", s.env),
        Some(&s.admin_secret),
        Some(action),
    )
    .await;
    assert!(reply.status < 300, "{}", reply.text);
}

/// The first journey of docs/flows.md, with a wait of 6 s: the reminder comes after the wait,
/// not before, and within a second of its deadline.
async fn a_reminder_comes_after_its_wait(s: Server) {
    users(&s, json!([{"id": "u1"}])).await;
    let config = program(
        &["welcome"],
        json!({"welcome": card_step("Welcome", &["pause"]),
               "pause": {"type": "wait", "properties": {"duration": "PT6S"}, "next": ["remind"]},
               "remind": card_step("Reminder", &[])}),
        &["Welcome", "Reminder"],
        json!({}),
    );
    let flow = flow_publishing(&s, "Reminder", config).await;
    let started = Instant::now();
    let id = start(&s, &flow, &["u1"], json!({})).await;
    // The welcome card alone, until the wait ends; the invocation runs while it waits.
    headlines_become(&s, "u1", &["Welcome"], Duration::from_secs(10)).await;
    let waiting = invocation(&s, &flow, &id).await;
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "read while it waits"
    );
    {
        assert_eq!(waiting["status"], "running", "{waiting}");
        assert_eq!(waiting["instances"]["active"], 1, "{waiting}");
        assert_eq!(waiting["steps"]["pause"]["waiting"], 1, "{waiting}");
        assert_eq!(
            waiting["steps"]["welcome"]["outcomes"]["created"], 1,
            "{waiting}"
        );
        let one = instance(&s, &flow, &id, "u1").await;
        assert_eq!(one["state"], "active", "{one}");
        assert_eq!(one["steps"][0]["stepId"], "welcome", "{one}");
        assert!(one["steps"][0]["cardInstanceId"].is_string(), "{one}");
        assert_eq!(one["steps"][1]["state"], "waiting", "{one}");
        assert!(one["steps"][1]["deadline"].is_string(), "{one}");
    }
    headlines_become(&s, "u1", &["Reminder", "Welcome"], Duration::from_secs(10)).await;
    let waited = started.elapsed();
    assert!(
        waited >= Duration::from_secs(6),
        "after the wait: {waited:?}"
    );
    assert!(
        waited < Duration::from_secs(10),
        "soon after its deadline: {waited:?}"
    );
    let done = invocation(&s, &flow, &id).await;
    assert_eq!(done["status"], "completed", "{done}");
    assert_eq!(done["cardsCreated"], 2, "{done}");
    assert_eq!(
        done["instances"],
        json!({"active": 0, "completed": 1, "cancelled": 0, "failed": 0})
    );
    assert_eq!(
        done["steps"]["pause"],
        json!({"reached": 1, "waiting": 0, "done": 1, "outcomes": {"elapsed": 1}})
    );
    let one = instance(&s, &flow, &id, "u1").await;
    assert_eq!(one["state"], "completed", "{one}");
    let steps: Vec<&str> = one["steps"]
        .as_array()
        .expect("steps")
        .iter()
        .filter_map(|s| s["stepId"].as_str())
        .collect();
    assert_eq!(steps, ["welcome", "pause", "remind"]);
    let absent = call(
        &s,
        "GET",
        &format!("/v1/{}/action-flow/{flow}/invocations/{id}/users/u2", s.env),
        Some(&s.admin_secret),
        None,
    )
    .await;
    absent.problem(404, "not_found");
}

async fn invocation(s: &Server, flow: &str, id: &str) -> Value {
    let reply = call(
        s,
        "GET",
        &format!("/v1/{}/action-flow/{flow}/invocations/{id}", s.env),
        Some(&s.admin_secret),
        None,
    )
    .await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    reply.body["data"].clone()
}

async fn instance(s: &Server, flow: &str, id: &str, user: &str) -> Value {
    let reply = call(
        s,
        "GET",
        &format!(
            "/v1/{}/action-flow/{flow}/invocations/{id}/users/{user}",
            s.env
        ),
        Some(&s.admin_secret),
        None,
    )
    .await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    reply.body["data"].clone()
}

/// The second journey: a rating card, its wait, and a branch on the submitted value.
async fn a_rating_branches_on_the_submitted_value(s: Server) {
    users(&s, json!([{"id": "happy"}, {"id": "sad"}, {"id": "idle"}])).await;
    let config = program(
        &["rate"],
        json!({"rate": card_step("Rate us", &["listen"]),
               "listen": {"type": "wait-for-card",
                          "properties": {"cardStep": "rate", "timeout": "PT5S",
                                         "on": {"submitted": ["route"], "timeout": ["nudge"]}}},
               "route": {"type": "branch", "properties": {
                   "conditions": [{"if": {"variable": "steps.listen.values.rating",
                                          "op": "greaterOrEqual", "value": 4},
                                   "next": ["thanks"]}],
                   "otherwise": ["sorry"]}},
               "thanks": card_step("Thanks", &[]),
               "sorry": card_step("What went wrong?", &[]),
               "nudge": card_step("Still there?", &[])}),
        &["Rate us", "Thanks", "What went wrong?", "Still there?"],
        json!({}),
    );
    let flow = flow_publishing(&s, "Rating", config).await;
    let id = start(&s, &flow, &["happy", "sad", "idle"], json!({})).await;
    for user in ["happy", "sad", "idle"] {
        headlines_become(&s, user, &["Rate us"], Duration::from_secs(10)).await;
    }
    act(
        &s,
        "happy",
        "Rate us",
        json!({"action": "submit", "values": {"rating": 5}}),
    )
    .await;
    act(
        &s,
        "sad",
        "Rate us",
        json!({"action": "submit", "values": {"rating": 2}}),
    )
    .await;
    let took = headlines_become(&s, "happy", &["Thanks"], Duration::from_secs(5)).await;
    assert!(
        took < Duration::from_secs(2),
        "a submit resumes at once: {took:?}"
    );
    headlines_become(&s, "sad", &["What went wrong?"], Duration::from_secs(5)).await;
    // The card stays in the feed when the wait times out.
    headlines_become(
        &s,
        "idle",
        &["Rate us", "Still there?"],
        Duration::from_secs(10),
    )
    .await;
    let done = invocation(&s, &flow, &id).await;
    assert_eq!(done["status"], "completed", "{done}");
    assert_eq!(
        done["steps"]["listen"]["outcomes"],
        json!({"submitted": 2, "timeout": 1}),
        "{done}"
    );
    assert_eq!(
        done["steps"]["route"]["outcomes"],
        json!({"matched": 1, "otherwise": 1}),
        "{done}"
    );
    // The day's totals (contract §14) count the steps too.
    let stats = call(
        &s,
        "GET",
        &format!("/v1/{}/action-flow/{flow}/stats", s.env),
        Some(&s.admin_secret),
        None,
    )
    .await;
    assert_eq!(stats.status, 200, "{}", stats.text);
    let day = &stats.body["data"]["days"][0];
    assert_eq!(
        day["steps"]["listen"],
        json!({"reached": 3, "outcomes": {"submitted": 2, "timeout": 1}}),
        "{day}"
    );
    assert_eq!(day["steps"]["rate"]["outcomes"]["created"], 3, "{day}");
    assert_eq!(day["steps"]["thanks"]["reached"], 1, "{day}");
}

/// A card dismissed while an earlier wait runs is heard by the `wait-for-card` step that starts
/// after it: nothing a user does is missed.
async fn a_card_closed_before_its_wait_starts_is_heard(s: Server) {
    users(&s, json!([{"id": "u1"}])).await;
    let config = program(
        &["ask"],
        json!({"ask": card_step("Ask", &["pause"]),
               "pause": {"type": "wait", "properties": {"duration": "PT5S"}, "next": ["listen"]},
               "listen": {"type": "wait-for-card",
                          "properties": {"cardStep": "ask", "timeout": "PT1H",
                                         "on": {"closed": ["after"]}}},
               "after": card_step("After", &[])}),
        &["Ask", "After"],
        json!({}),
    );
    let flow = flow_publishing(&s, "Early", config).await;
    let id = start(&s, &flow, &["u1"], json!({})).await;
    headlines_become(&s, "u1", &["Ask"], Duration::from_secs(10)).await;
    act(&s, "u1", "Ask", json!({"action": "dismiss"})).await;
    // The card closed while `pause` waited: `listen` had not started.
    let one = instance(&s, &flow, &id, "u1").await;
    let pause = &one["steps"][1];
    assert_eq!(
        (pause["stepId"].as_str(), pause["state"].as_str()),
        (Some("pause"), Some("waiting")),
        "{one}"
    );
    assert_eq!(one["steps"].as_array().map(Vec::len), Some(2), "{one}");
    headlines_become(&s, "u1", &["After"], Duration::from_secs(15)).await;
    let one = instance(&s, &flow, &id, "u1").await;
    assert_eq!(one["steps"][2]["outcome"], "dismissed", "{one}");
}

/// The third journey: a wait until a date variable minus a day; a trigger without the date is
/// refused like a missing required variable.
async fn a_wait_until_a_date_variable_less_a_day(s: Server) {
    users(&s, json!([{"id": "u1"}])).await;
    let config = program(
        &["pause"],
        json!({"pause": {"type": "wait",
                         "properties": {"untilVariable": "renewal", "offset": "-P1D"},
                         "next": ["remind"]},
               "remind": card_step("Renewal tomorrow", &[])}),
        &["Renewal tomorrow"],
        json!({"renewal": {"type": "date", "source": "event"}}),
    );
    let flow = flow_publishing(&s, "Renewal", config).await;
    let missing = fire(
        &s,
        &flow,
        "start",
        json!({"flows": [{"target": {"type": "user", "targetUserIds": ["u1"]}, "payload": {}}]}),
    )
    .await;
    let fields = missing.problem(400, "validation_failed");
    assert!(
        fields
            .iter()
            .any(|f| f == "flows[0].payload.variables.renewal"),
        "{fields:?}"
    );
    // A value that is no instant has no deadline either.
    let unreadable = fire(
        &s,
        &flow,
        "start",
        json!({"flows": [{"target": {"type": "user", "targetUserIds": ["u1"]},
                          "payload": {"variables": {"renewal": "next tuesday"}}}]}),
    )
    .await;
    let fields = unreadable.problem(400, "validation_failed");
    assert!(
        fields
            .iter()
            .any(|f| f == "flows[0].payload.variables.renewal"),
        "{fields:?}"
    );
    let renewal = chrono::Utc::now() + chrono::Duration::days(1) + chrono::Duration::seconds(2);
    let started = Instant::now();
    start(
        &s,
        &flow,
        &["u1"],
        json!({"renewal": renewal.to_rfc3339_opts(chrono::SecondsFormat::Millis, true)}),
    )
    .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(
        headlines(&s, "u1").await.is_empty(),
        "nothing before the date less a day"
    );
    headlines_become(&s, "u1", &["Renewal tomorrow"], Duration::from_secs(10)).await;
    assert!(
        started.elapsed() >= Duration::from_millis(1_500),
        "{:?}",
        started.elapsed()
    );
}

/// A cancel accepted during a wait: nothing of the instance runs after it.
async fn a_cancel_during_a_wait_stops_what_follows(s: Server) {
    users(&s, json!([{"id": "u1"}])).await;
    let config = program(
        &["first"],
        json!({"first": card_step("First", &["pause"]),
               "pause": {"type": "wait", "properties": {"duration": "PT5S"}, "next": ["second"]},
               "second": card_step("Second", &[])}),
        &["First", "Second"],
        json!({}),
    );
    let flow = flow_publishing(&s, "Cancelled", config).await;
    let id = start(&s, &flow, &["u1"], json!({})).await;
    headlines_become(&s, "u1", &["First"], Duration::from_secs(10)).await;
    let task = cancelled(&s, &flow, Some(json!({"cancelCards": false}))).await;
    assert_eq!(task["status"], "completed", "{task}");
    tokio::time::sleep(Duration::from_secs(6)).await;
    assert_eq!(
        headlines(&s, "u1").await,
        ["First"],
        "no card after the cancel"
    );
    let one = instance(&s, &flow, &id, "u1").await;
    assert_eq!(one["state"], "cancelled", "{one}");
    assert_eq!(one["steps"][1]["state"], "cancelled", "{one}");
    let done = invocation(&s, &flow, &id).await;
    assert_eq!(done["instances"]["cancelled"], 1, "{done}");
    assert_eq!(done["status"], "completed", "{done}");
}

/// A publish with `cancelActiveInstances` cancels the instances of older versions that wait,
/// and their cards; a start of the new version runs.
async fn a_publish_can_cancel_the_instances_of_older_versions(s: Server) {
    users(&s, json!([{"id": "u1"}, {"id": "u2"}])).await;
    let config = |second: &str| {
        program(
            &["first"],
            json!({"first": card_step("First", &["pause"]),
                   "pause": {"type": "wait", "properties": {"duration": "PT4S"}, "next": ["second"]},
                   "second": card_step(second, &[])}),
            &["First", second],
            json!({}),
        )
    };
    let flow = flow_publishing(&s, "Versions", config("Second")).await;
    let old = start(&s, &flow, &["u1"], json!({})).await;
    headlines_become(&s, "u1", &["First"], Duration::from_secs(10)).await;
    let publish = format!("/v1/{}/action-flow/{flow}/config/publish", s.env);
    let bad = call(
        &s,
        "POST",
        &publish,
        Some(&s.admin_secret),
        Some(json!({"config": config("Other"), "cancelActiveInstances": "yes"})),
    )
    .await;
    assert_eq!(
        bad.problem(400, "validation_failed"),
        ["cancelActiveInstances"]
    );
    let published = call(
        &s,
        "POST",
        &publish,
        Some(&s.admin_secret),
        Some(json!({"config": config("Other"), "cancelActiveInstances": true})),
    )
    .await;
    assert_eq!(published.status, 200, "{}", published.text);
    assert_eq!(published.body["data"]["version"], 2);
    let task = published.body["data"]["cancelTaskId"]
        .as_str()
        .expect("cancelTaskId")
        .to_owned();
    let status = format!("/v1/{}/action-flow/{flow}/task/{task}/status", s.env);
    let started = Instant::now();
    let done = loop {
        let reply = call(&s, "GET", &status, Some(&s.admin_secret), None).await;
        assert_eq!(reply.status, 200, "{}", reply.text);
        if reply.body["status"] != "processing" {
            break reply.body;
        }
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "{}",
            reply.text
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(done["status"], "completed", "{done}");
    assert_eq!(done["actual"], 1, "{done}");
    // Its card cancelled, its wait stopped: nothing after it.
    headlines_become(&s, "u1", &[], Duration::from_secs(5)).await;
    let fresh = start(&s, &flow, &["u2"], json!({})).await;
    headlines_become(&s, "u2", &["First"], Duration::from_secs(10)).await;
    headlines_become(&s, "u2", &["First", "Other"], Duration::from_secs(15)).await;
    // By now u1's old wait would have ended too.
    assert!(headlines(&s, "u1").await.is_empty());
    assert_eq!(instance(&s, &flow, &old, "u1").await["state"], "cancelled");
    assert_eq!(
        instance(&s, &flow, &fresh, "u2").await["state"],
        "completed"
    );
}

/// `kill -9` while 10,000 waits are due, then a restart: every user's second card exists once,
/// and the counts add up.
async fn a_kill_9_while_waits_are_due_loses_and_repeats_nothing(mut s: Server) {
    let list: Vec<Value> = (0..10_000)
        .map(|i| json!({"id": format!("w{i:05}"), "tags": ["waits"]}))
        .collect();
    users(&s, Value::Array(list)).await;
    let config = program(
        &["first"],
        json!({"first": card_step("First", &["pause"]),
               "pause": {"type": "wait", "properties": {"duration": "PT3S"}, "next": ["second"]},
               "second": card_step("Second", &[])}),
        &["First", "Second"],
        json!({}),
    );
    let flow = flow_publishing(&s, "Crash", config).await;
    let id = invocation_id(
        &fire(
            &s,
            &flow,
            "start",
            json!({"flows": [{"target": {"type": "tag", "tagName": "waits"}}]}),
        )
        .await,
    );
    // Kill the server once some second cards are made, while the others are due.
    let started = Instant::now();
    let mut seen = Value::Null;
    while started.elapsed() < Duration::from_secs(60) {
        seen = invocation(&s, &flow, &id).await;
        let cards = seen["cardsCreated"].as_u64().unwrap_or(0);
        if cards > 10_000 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let made = seen["cardsCreated"].as_u64().unwrap_or(0);
    assert!(
        made > 10_000 && made < 20_000,
        "killed while waits were due: {seen}"
    );
    s.kill_and_restart();
    let started = Instant::now();
    let done = loop {
        let now = invocation(&s, &flow, &id).await;
        if now["status"] == "completed" {
            break now;
        }
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "before the kill: {seen}; now: {now}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(
        done["cardsCreated"], 20_000,
        "before the kill: {seen}; after: {done}"
    );
    assert_eq!(done["instances"]["completed"], 10_000, "{done}");
    assert_eq!(done["steps"]["second"]["reached"], 10_000, "{done}");
    let stored = raw_texts(
        s.database_url(),
        "SELECT CAST(COUNT(*) AS TEXT) AS v FROM card_instances WHERE step_id = 'second'",
    );
    assert_eq!(stored, ["10000"], "one second card per user");
    for user in ["w00000", "w04999", "w09999"] {
        assert_eq!(
            headlines(&s, user).await,
            ["First", "Second"],
            "{user} has each card once"
        );
    }
}

blackbox!(
    a_reminder_comes_after_its_wait,
    a_rating_branches_on_the_submitted_value,
    a_card_closed_before_its_wait_starts_is_heard,
    a_wait_until_a_date_variable_less_a_day,
    a_cancel_during_a_wait_stops_what_follows,
    a_publish_can_cancel_the_instances_of_older_versions,
    a_kill_9_while_waits_are_due_loses_and_repeats_nothing,
);
