//! Triggers, the engine, and the card life cycle over HTTP, end to end.

use std::time::Duration;

use serde_json::{json, Value};

use crate::support::{blackbox, call, Reply, Server};

fn config() -> Value {
    json!({
        "type": "card", "initialSteps": ["s1"],
        "variables": {"firstName": {"type": "string", "source": "event", "default": "there"},
                      "due": {"type": "date", "source": "event"}},
        "steps": {"s1": {"id": "s1", "type": "create-card", "properties": {"cardTemplateId": "t1"}}},
        "cardTemplates": {"t1": {
            "metadata": {"cardName": "Welcome card", "delivery": {"priority": 4}},
            "defaultView": {"content": [{"key": "h", "type": "headline", "attributes": {"text": "Hello %{firstName}"}}],
                            "actions": [{"key": "ok", "type": "submitButton", "attributes": {"text": "OK"}}]}
        }}
    })
}

/// A flow named `name` with `config` published as its version 1.
pub(crate) async fn flow_publishing(s: &Server, name: &str, config: Value) -> String {
    let admin = Some(s.admin_secret.as_str());
    let created = call(
        s,
        "POST",
        &format!("/v1/{}/action-flow", s.env),
        admin,
        Some(json!({"name": name})),
    )
    .await;
    let id = created.body["data"]["id"].as_str().expect("id").to_owned();
    let published = call(
        s,
        "POST",
        &format!("/v1/{}/action-flow/{id}/config/publish", s.env),
        admin,
        Some(config),
    )
    .await;
    assert_eq!(published.status, 200, "{}", published.text);
    id
}

/// A flow with a published configuration (and, if asked, a newer draft).
pub(crate) async fn published_flow(s: &Server, with_draft: bool) -> String {
    let admin = Some(s.admin_secret.as_str());
    let id = flow_publishing(s, "Welcome", config()).await;
    if with_draft {
        let mut draft = config();
        draft["cardTemplates"]["t1"]["metadata"]["cardName"] = json!("Draft card");
        call(
            s,
            "PUT",
            &format!("/v1/{}/action-flow/{id}/config/draft", s.env),
            admin,
            Some(draft),
        )
        .await;
    }
    id
}

pub(crate) async fn users(s: &Server, users: Value) {
    let reply = call(
        s,
        "POST",
        &format!("/v1/{}/users:batch", s.env),
        Some(&s.admin_secret),
        Some(json!({"users": users})),
    )
    .await;
    assert_eq!(reply.status, 200, "{}", reply.text);
}

pub(crate) async fn fire(s: &Server, flow: &str, mode: &str, body: Value) -> Reply {
    call(
        s,
        "POST",
        &format!("/v1/{}/action-flow/{flow}/{mode}", s.env),
        Some(&s.admin_secret),
        Some(body),
    )
    .await
}

/// Waits for an invocation to finish; returns its record.
pub(crate) async fn finished(s: &Server, flow: &str, invocation: &str) -> Value {
    finished_within(s, flow, invocation, Duration::from_secs(10)).await
}

pub(crate) async fn finished_within(
    s: &Server,
    flow: &str,
    invocation: &str,
    limit: Duration,
) -> Value {
    let mut last = Value::Null;
    let started = std::time::Instant::now();
    while started.elapsed() < limit {
        let reply = call(
            s,
            "GET",
            &format!("/v1/{}/action-flow/{flow}/invocations/{invocation}", s.env),
            Some(&s.admin_secret),
            None,
        )
        .await;
        assert_eq!(reply.status, 200, "{}", reply.text);
        if matches!(
            reply.body["data"]["status"].as_str(),
            Some("completed" | "failed" | "cancelled")
        ) {
            return reply.body["data"].clone();
        }
        last = reply.body["data"].clone();
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("invocation {invocation} did not finish: {last}");
}

pub(crate) async fn feed(s: &Server, user: &str) -> Vec<Value> {
    let reply = call(
        s,
        "GET",
        &format!("/v1/{}/users/{user}/cards", s.env),
        Some(&s.admin_secret),
        None,
    )
    .await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    reply.body["data"].as_array().expect("cards").clone()
}

pub(crate) fn invocation_id(reply: &Reply) -> String {
    assert_eq!(reply.status, 200, "{}", reply.text);
    reply.body["data"]["triggeredFlows"][0]["flowInvocationId"]
        .as_str()
        .expect("id")
        .to_owned()
}

async fn a_tag_of_three_users_gets_rendered_cards_and_a_submit_completes_one(s: Server) {
    let flow = published_flow(&s, false).await;
    users(&s, json!([{"id": "u1", "tags": ["vip"]}, {"id": "u2", "tags": ["vip"]}, {"id": "u3", "tags": ["vip"]}, {"id": "u4"}])).await;
    let reply = fire(
        &s,
        &flow,
        "start",
        json!({"flows": [{"target": {"type": "tag", "tagName": "vip"},
        "payload": {"variables": {"firstName": "Ann"}, "metadata": {"campaign": "spring"}}}]}),
    )
    .await;
    let id = invocation_id(&reply);
    let done = finished(&s, &flow, &id).await;
    assert_eq!(
        (
            done["status"].clone(),
            done["usersTargeted"].clone(),
            done["cardsCreated"].clone()
        ),
        (json!("completed"), json!(3), json!(3)),
        "{done}"
    );
    assert_eq!(done["mode"], "live");
    for user in ["u1", "u2", "u3"] {
        let cards = feed(&s, user).await;
        assert_eq!(cards.len(), 1, "{user}");
        let card = &cards[0];
        assert_eq!(card["status"], "active");
        assert_eq!(card["priority"], 4, "the template's priority");
        assert_eq!(
            card["content"]["Web"]["defaultView"]["content"][0]["attributes"]["text"],
            "Hello Ann"
        );
        assert_eq!(card["platforms"], json!(["Web", "iOS", "Android"]));
        assert_eq!(
            card["streamIds"].as_array().map(Vec::len),
            Some(1),
            "All cards only"
        );
        assert!(card["id"].as_str().expect("id").starts_with("crd_"));
        assert!(card["flowInstanceId"]
            .as_str()
            .expect("fin")
            .starts_with("fin_"));
    }
    assert!(feed(&s, "u4").await.is_empty());

    let card = feed(&s, "u1").await.remove(0);
    let card_id = card["id"].as_str().expect("id");
    let events = call(
        &s,
        "GET",
        &format!("/v1/{}/users/u1/cards/{card_id}/events", s.env),
        Some(&s.admin_secret),
        None,
    )
    .await;
    let published = &events.body["data"][0];
    assert_eq!(published["analyticsEvent"], "card-published");
    assert_eq!(published["endUserId"], "u1");
    assert_eq!(published["cardContext"]["cardInstanceStatus"], "active");
    assert_eq!(published["cardContext"]["cardTemplateId"], "t1");
    assert_eq!(published["cardContext"]["cardTemplateName"], "Welcome card");
    assert_eq!(published["cardContext"]["cardTemplateVersion"], 1);
    assert_eq!(
        published["platformContext"]["flowInvocationId"],
        id.as_str()
    );
    assert_eq!(published["platformContext"]["flowConfigId"], flow.as_str());
    assert_eq!(
        published["platformContext"]["flowInstanceId"],
        card["flowInstanceId"]
    );
    assert_eq!(
        published["platformContext"]["eventDetail"]["firstName"],
        "Ann"
    );
    assert_eq!(published["metadata"]["campaign"], "spring");

    let path = format!("/v1/{}/users/u1/cards/{card_id}/actions", s.env);
    let submitted = call(
        &s,
        "POST",
        &path,
        Some(&s.admin_secret),
        Some(json!({"action": "submit", "values": {"rating": 5}})),
    )
    .await;
    assert_eq!(submitted.status, 200, "{}", submitted.text);
    assert_eq!(submitted.body["data"]["status"], "completed");
    let events = call(
        &s,
        "GET",
        &format!("/v1/{}/users/u1/cards/{card_id}/events", s.env),
        Some(&s.admin_secret),
        None,
    )
    .await;
    let completed = &events.body["data"][1];
    assert_eq!(completed["analyticsEvent"], "card-completed");
    assert_eq!(completed["properties"]["values"], json!({"rating": 5}));
    assert_eq!(completed["cardContext"]["previousStatus"], "active");
    assert_eq!(completed["cardContext"]["cardInstanceStatus"], "completed");
    assert!(
        feed(&s, "u1").await.is_empty(),
        "a completed card leaves the feed"
    );
    call(
        &s,
        "POST",
        &path,
        Some(&s.admin_secret),
        Some(json!({"action": "dismiss"})),
    )
    .await
    .problem(409, "card_closed");
}

async fn invocation_ids_are_idempotent_200_409_422(s: Server) {
    let flow = published_flow(&s, false).await;
    let other = published_flow(&s, false).await;
    let body = json!({"flows": [{"target": {"type": "user", "targetUserIds": ["u1"]}, "flowInvocationId": "inv-1",
                                 "payload": {"variables": {"firstName": "Bo"}}}]});
    let first = fire(&s, &flow, "start", body.clone()).await;
    assert_eq!(invocation_id(&first), "inv-1");
    let again = fire(&s, &flow, "start", body.clone()).await;
    assert_eq!(
        invocation_id(&again),
        "inv-1",
        "a replay answers 200 with the same id"
    );
    let done = finished(&s, &flow, "inv-1").await;
    assert_eq!(done["cardsCreated"], 1, "and does not run the flow again");
    assert_eq!(feed(&s, "u1").await.len(), 1);

    let mut changed = body.clone();
    changed["flows"][0]["payload"]["variables"]["firstName"] = json!("Cy");
    fire(&s, &flow, "start", changed)
        .await
        .problem(409, "invocation_conflict");
    let mut retargeted = body.clone();
    retargeted["flows"][0]["target"]["targetUserIds"] = json!(["u2"]);
    fire(&s, &flow, "start", retargeted)
        .await
        .problem(409, "invocation_conflict");
    fire(&s, &flow, "test", body.clone())
        .await
        .problem(422, "invocation_mismatch");
    fire(&s, &other, "start", body.clone())
        .await
        .problem(422, "invocation_mismatch");
    // Key order does not make a different request.
    let reordered = json!({"flows": [{"payload": {"variables": {"firstName": "Bo"}}, "flowInvocationId": "inv-1",
                                      "target": {"targetUserIds": ["u1"], "type": "user"}}]});
    assert_eq!(
        invocation_id(&fire(&s, &flow, "start", reordered).await),
        "inv-1"
    );
}

async fn a_hundred_simultaneous_requests_with_one_id_run_the_flow_once(s: Server) {
    let flow = published_flow(&s, false).await;
    let body = json!({"flows": [{"target": {"type": "user", "targetUserIds": ["racer"]}, "flowInvocationId": "inv-race"}]});
    let mut tasks = Vec::new();
    for _ in 0..100 {
        let client = s.client.clone();
        let url = s.url(&format!("/v1/{}/action-flow/{flow}/start", s.env));
        let (secret, body) = (s.admin_secret.clone(), body.clone());
        tasks.push(tokio::spawn(async move {
            Reply::from(
                client
                    .post(url)
                    .bearer_auth(secret)
                    .json(&body)
                    .send()
                    .await
                    .expect("sent"),
            )
            .await
        }));
    }
    for task in tasks {
        let reply = task.await.expect("join");
        assert_eq!(invocation_id(&reply), "inv-race");
    }
    let done = finished(&s, &flow, "inv-race").await;
    assert_eq!(done["cardsCreated"], 1);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(feed(&s, "racer").await.len(), 1, "exactly one card");
}

async fn every_problem_of_a_trigger_is_reported_with_its_path(s: Server) {
    let flow = published_flow(&s, false).await;
    let bad = json!({"flows": [
        {"target": {"type": "user", "targetUserIds": []}, "payload": {"cardOptions": {"priority": 11, "targetPlatforms": {"Windows": true}}}},
        {"target": {"type": "tag"}, "payload": {"cardOptions": {"expiresInterval": "soon"}}}
    ]});
    let reply = fire(&s, &flow, "start", bad).await;
    assert_eq!(
        reply.problem(400, "validation_failed"),
        [
            "flows[0].target.targetUserIds",
            "flows[0].payload.cardOptions.priority",
            "flows[0].payload.cardOptions.targetPlatforms.Windows",
            "flows[1].target.tagName",
            "flows[1].payload.cardOptions.expiresInterval"
        ]
    );
    let semantic = json!({"flows": [
        {"target": {"type": "segment", "targetSegmentId": "seg_nope"}, "payload": {"variables": {"due": "not a date"}, "cardOptions": {"targetStreamIds": ["str_nope"]}}}
    ], "options": {"strictVariables": true}});
    let mut fields = fire(&s, &flow, "start", semantic)
        .await
        .problem(400, "validation_failed");
    fields.sort();
    assert_eq!(
        fields,
        [
            "flows[0].payload.cardOptions.targetStreamIds[0]",
            "flows[0].payload.variables.due",
            "flows[0].target.targetSegmentId"
        ]
    );
    // Contract §10: the shape's problems and the flow's, of every element, in one answer.
    let both = json!({"flows": [
        {"target": {"type": "user", "targetUserIds": ["u1"]},
         "payload": {"variables": {"due": "not a date"},
                     "cardOptions": {"priority": 11, "expiresInterval": "P290000Y"}}},
        {"target": {"type": "segment", "targetSegmentId": "seg_nope"},
         "payload": {"cardOptions": {"embargo": "9999-12-31T23:59:59-01:00"}}}
    ]});
    for mode in ["start", "test"] {
        let mut fields = fire(&s, &flow, mode, both.clone())
            .await
            .problem(400, "validation_failed");
        fields.sort();
        assert_eq!(
            fields,
            [
                "flows[0].payload.cardOptions.expiresInterval",
                "flows[0].payload.cardOptions.priority",
                "flows[0].payload.variables.due",
                "flows[1].payload.cardOptions.embargo",
                "flows[1].target.targetSegmentId",
            ],
            "{mode}"
        );
    }
    let strict = json!({"flows": [{"target": {"type": "allTestUsers"}, "payload": {"variables": {"nickname": "x"}}}], "options": {"strictVariables": true}});
    assert_eq!(
        fire(&s, &flow, "start", strict)
            .await
            .problem(400, "validation_failed"),
        ["flows[0].payload.variables.nickname"]
    );
    let lenient = json!({"flows": [{"target": {"type": "allTestUsers"}, "payload": {"variables": {"nickname": "x"}}}]});
    assert_eq!(
        fire(&s, &flow, "start", lenient).await.status,
        200,
        "unknown variables are ignored without strictVariables"
    );
    let six_bulk: Vec<Value> = (0..6)
        .map(|i| json!({"target": {"type": "tag", "tagName": format!("t{i}")}}))
        .collect();
    let limited = fire(&s, &flow, "start", json!({"flows": six_bulk})).await;
    limited.problem(429, "rate_limited");
    assert!(limited.header("retry-after").is_some());
    fire(
        &s,
        "flw_00000000000000000000000000",
        "start",
        json!({"flows": [{"target": {"type": "allTestUsers"}}]}),
    )
    .await
    .problem(404, "not_found");
}

async fn live_needs_a_published_flow_and_test_uses_the_draft_for_test_users_only(s: Server) {
    let admin = Some(s.admin_secret.as_str());
    users(
        &s,
        json!([{"id": "tester", "testUser": true}, {"id": "customer"}]),
    )
    .await;
    let created = call(
        &s,
        "POST",
        &format!("/v1/{}/action-flow", s.env),
        admin,
        Some(json!({"name": "Draft only", "config": config()})),
    )
    .await;
    let draft_only = created.body["data"]["id"].as_str().expect("id").to_owned();
    let target =
        json!({"flows": [{"target": {"type": "user", "targetUserIds": ["tester", "customer"]}}]});
    fire(&s, &draft_only, "start", target.clone())
        .await
        .problem(404, "not_found");
    let id = invocation_id(&fire(&s, &draft_only, "test", target.clone()).await);
    let done = finished(&s, &draft_only, &id).await;
    assert_eq!(
        (done["usersTargeted"].clone(), done["mode"].clone()),
        (json!(1), json!("test")),
        "the customer is ignored silently"
    );
    assert_eq!(feed(&s, "tester").await.len(), 1);
    assert!(feed(&s, "customer").await.is_empty());

    let flow = published_flow(&s, true).await;
    let id = invocation_id(
        &fire(
            &s,
            &flow,
            "test",
            json!({"flows": [{"target": {"type": "allTestUsers"}}]}),
        )
        .await,
    );
    finished(&s, &flow, &id).await;
    let names: Vec<String> = feed(&s, "tester")
        .await
        .iter()
        .map(|c| c["cardTemplateName"].as_str().expect("name").to_owned())
        .collect();
    assert!(
        names.contains(&"Draft card".to_owned()),
        "test sends the draft: {names:?}"
    );
    let id = invocation_id(
        &fire(
            &s,
            &flow,
            "start",
            json!({"flows": [{"target": {"type": "user", "targetUserIds": ["customer"]}}]}),
        )
        .await,
    );
    finished(&s, &flow, &id).await;
    assert_eq!(
        feed(&s, "customer").await[0]["cardTemplateName"],
        "Welcome card",
        "start sends the published version"
    );

    call(
        &s,
        "POST",
        &format!("/v1/{}/action-flow/{flow}/archive", s.env),
        admin,
        None,
    )
    .await;
    fire(&s, &flow, "start", target)
        .await
        .problem(409, "flow_archived");
}

async fn segments_filters_and_options_shape_the_cards(s: Server) {
    let admin = Some(s.admin_secret.as_str());
    let flow = published_flow(&s, false).await;
    users(&s, json!([{"id": "nz1", "attributes": {"country": "NZ"}}, {"id": "au1", "attributes": {"country": "AU"}}, {"id": "nz2", "attributes": {"country": "NZ"}}])).await;
    let segment = call(&s, "POST", &format!("/v1/{}/segments", s.env), admin, Some(json!({"name": "NZ", "filter": {"conditions": [{"field": "attributes.country", "op": "eq", "value": "NZ"}]}}))).await;
    let segment = segment.body["data"]["id"].as_str().expect("id").to_owned();
    let stream = call(
        &s,
        "POST",
        &format!("/v1/{}/streams", s.env),
        admin,
        Some(json!({"name": "Promos"})),
    )
    .await;
    let stream = stream.body["data"]["id"].as_str().expect("id").to_owned();
    let id = invocation_id(&fire(&s, &flow, "start", json!({"flows": [{"target": {"type": "segment", "targetSegmentId": segment},
        "payload": {"cardOptions": {"priority": 9, "targetStreamIds": [stream], "targetPlatforms": {"Web": true}}}}]})).await);
    assert_eq!(finished(&s, &flow, &id).await["usersTargeted"], 2);
    let card = feed(&s, "nz2").await.remove(0);
    assert_eq!(card["priority"], 9);
    assert_eq!(card["platforms"], json!(["Web"]));
    assert_eq!(
        card["streamIds"].as_array().map(Vec::len),
        Some(2),
        "the chosen stream and All cards"
    );
    assert!(card["content"].get("iOS").is_none());
    let in_stream = call(
        &s,
        "GET",
        &format!("/v1/{}/users/nz2/cards?streamId={stream}", s.env),
        admin,
        None,
    )
    .await;
    assert_eq!(in_stream.body["data"].as_array().map(Vec::len), Some(1));
    assert!(feed(&s, "au1").await.is_empty());

    let id = invocation_id(&fire(&s, &flow, "start", json!({"flows": [{"target": {"type": "filters", "filter": {"conditions": [{"field": "attributes.country", "op": "eq", "value": "AU"}]}},
        "payload": {"cardOptions": {"priority": 2}}}]})).await);
    finished(&s, &flow, &id).await;
    assert_eq!(feed(&s, "au1").await.len(), 1);
    // nz2's feed now: priority 9 above; a newer priority-2 card would go below it.
    let id = invocation_id(&fire(&s, &flow, "start", json!({"flows": [{"target": {"type": "user", "targetUserIds": ["nz2"]}, "payload": {"cardOptions": {"priority": 2}}}]})).await);
    finished(&s, &flow, &id).await;
    let priorities: Vec<u64> = feed(&s, "nz2")
        .await
        .iter()
        .map(|c| c["priority"].as_u64().expect("p"))
        .collect();
    assert_eq!(priorities, [9, 2]);
}

async fn embargo_snooze_expiry_and_dismiss_follow_the_life_cycle(s: Server) {
    let admin = Some(s.admin_secret.as_str());
    let flow = published_flow(&s, false).await;
    let soon = (chrono::Utc::now() + chrono::Duration::seconds(2)).to_rfc3339();
    let id = invocation_id(&fire(&s, &flow, "start", json!({"flows": [
        {"target": {"type": "user", "targetUserIds": ["later"]}, "payload": {"cardOptions": {"embargo": soon}}},
        {"target": {"type": "user", "targetUserIds": ["brief"]}, "payload": {"cardOptions": {"expiresInterval": "PT1S"}}},
        {"target": {"type": "user", "targetUserIds": ["busy"]}}
    ]})).await);
    finished(&s, &flow, &id).await;
    assert!(
        feed(&s, "later").await.is_empty(),
        "embargoed cards are not in the feed yet"
    );
    assert_eq!(feed(&s, "brief").await.len(), 1);
    let busy = feed(&s, "busy").await.remove(0);
    let busy_id = busy["id"].as_str().expect("id").to_owned();
    let act = format!("/v1/{}/users/busy/cards/{busy_id}/actions", s.env);
    call(&s, "POST", &act, admin, Some(json!({"action": "snooze"})))
        .await
        .problem(400, "validation_failed");
    call(&s, "POST", &act, admin, Some(json!({"action": "fly"})))
        .await
        .problem(400, "validation_failed");
    let past = (chrono::Utc::now() - chrono::Duration::seconds(5)).to_rfc3339();
    call(
        &s,
        "POST",
        &act,
        admin,
        Some(json!({"action": "snooze", "snoozeUntil": past})),
    )
    .await
    .problem(400, "validation_failed");
    let until = (chrono::Utc::now() + chrono::Duration::seconds(2)).to_rfc3339();
    let snoozed = call(
        &s,
        "POST",
        &act,
        admin,
        Some(json!({"action": "snooze", "snoozeUntil": until})),
    )
    .await;
    assert_eq!(
        snoozed.body["data"]["status"], "snoozed",
        "{}",
        snoozed.text
    );
    assert!(feed(&s, "busy").await.is_empty());
    call(&s, "POST", &act, admin, Some(json!({"action": "submit"})))
        .await
        .problem(409, "card_not_active");

    tokio::time::sleep(Duration::from_millis(3500)).await;
    assert_eq!(feed(&s, "later").await.len(), 1, "the embargo is over");
    assert!(feed(&s, "brief").await.is_empty(), "the card expired");
    assert_eq!(feed(&s, "busy").await.len(), 1, "the snooze is over");
    let events = call(
        &s,
        "GET",
        &format!("/v1/{}/users/busy/cards/{busy_id}/events", s.env),
        admin,
        None,
    )
    .await;
    let names: Vec<&str> = events.body["data"]
        .as_array()
        .expect("events")
        .iter()
        .map(|e| e["analyticsEvent"].as_str().expect("name"))
        .collect();
    assert_eq!(names, ["card-published", "card-snoozed", "card-unsnoozed"]);
    let dismissed = call(&s, "POST", &act, admin, Some(json!({"action": "dismiss"}))).await;
    assert_eq!(dismissed.body["data"]["status"], "dismissed");
    let later = feed(&s, "later").await.remove(0);
    let events = call(
        &s,
        "GET",
        &format!(
            "/v1/{}/users/later/cards/{}/events",
            s.env,
            later["id"].as_str().expect("id")
        ),
        admin,
        None,
    )
    .await;
    let names: Vec<&str> = events.body["data"]
        .as_array()
        .expect("events")
        .iter()
        .map(|e| e["analyticsEvent"].as_str().expect("name"))
        .collect();
    assert_eq!(names, ["card-embargoed", "card-published"]);
    call(
        &s,
        "POST",
        &format!(
            "/v1/{}/users/busy/cards/crd_00000000000000000000000000/actions",
            s.env
        ),
        admin,
        Some(json!({"action": "dismiss"})),
    )
    .await
    .problem(404, "not_found");
}

async fn trigger_permissions(s: Server) {
    let flow = published_flow(&s, false).await;
    let body = json!({"flows": [{"target": {"type": "allTestUsers"}}]});
    let path = format!("/v1/{}/action-flow/{flow}/start", s.env);
    call(&s, "POST", &path, None, Some(body.clone()))
        .await
        .problem(401, "unauthorized");
    let workbench = s.key(&["--role", "workbench"]);
    call(&s, "POST", &path, Some(&workbench), Some(body.clone()))
        .await
        .problem(403, "forbidden");
    let reader = s.key(&["--scope", "action_flows:read"]);
    call(&s, "POST", &path, Some(&reader), Some(body.clone()))
        .await
        .problem(403, "forbidden");
    let events = s.key(&["--role", "events"]);
    assert_eq!(
        call(&s, "POST", &path, Some(&events), Some(body.clone()))
            .await
            .status,
        200
    );
    let trigger_scope = s.key(&["--scope", "action_flows:trigger"]);
    assert_eq!(
        call(&s, "POST", &path, Some(&trigger_scope), Some(body))
            .await
            .status,
        200
    );
    call(
        &s,
        "GET",
        &format!("/v1/{}/users/u1/cards", s.env),
        Some(&reader),
        None,
    )
    .await
    .problem(403, "forbidden");
    assert_eq!(
        call(
            &s,
            "GET",
            &format!("/v1/{}/users/u1/cards", s.env),
            Some(&events),
            None
        )
        .await
        .status,
        200
    );
}

async fn a_kill_9_mid_fan_out_resumes_without_losing_or_duplicating_a_card(mut s: Server) {
    let flow = published_flow(&s, false).await;
    for part in 0..2 {
        let batch: Vec<Value> = (0..10_000)
            .map(|i| json!({"id": format!("k{part}{i:05}"), "tags": ["crash"]}))
            .collect();
        users(&s, Value::Array(batch)).await;
    }
    let id = invocation_id(
        &fire(
            &s,
            &flow,
            "start",
            json!({"flows": [{"target": {"type": "tag", "tagName": "crash"}}]}),
        )
        .await,
    );
    // Kill the server once the first batch is saved, while the fan-out is running.
    let path = format!("/v1/{}/action-flow/{flow}/invocations/{id}", s.env);
    let mut seen = Value::Null;
    for _ in 0..2_000 {
        seen = call(&s, "GET", &path, Some(&s.admin_secret), None)
            .await
            .body["data"]
            .clone();
        if seen["usersTargeted"].as_u64().unwrap_or(0) > 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    s.kill_and_restart();
    let done = finished_within(&s, &flow, &id, Duration::from_secs(90)).await;
    assert_eq!(
        done["status"], "completed",
        "before the kill: {seen}; after: {done}"
    );
    assert_eq!(
        (done["usersTargeted"].clone(), done["cardsCreated"].clone()),
        (json!(20_000), json!(20_000))
    );
    for user in ["k000000", "k004999", "k009999", "k100000", "k109999"] {
        assert_eq!(feed(&s, user).await.len(), 1, "{user} has exactly one card");
    }
}

blackbox!(
    a_tag_of_three_users_gets_rendered_cards_and_a_submit_completes_one,
    invocation_ids_are_idempotent_200_409_422,
    a_hundred_simultaneous_requests_with_one_id_run_the_flow_once,
    every_problem_of_a_trigger_is_reported_with_its_path,
    live_needs_a_published_flow_and_test_uses_the_draft_for_test_users_only,
    segments_filters_and_options_shape_the_cards,
    embargo_snooze_expiry_and_dismiss_follow_the_life_cycle,
    trigger_permissions,
    a_kill_9_mid_fan_out_resumes_without_losing_or_duplicating_a_card,
);
