//! Contract §11 over HTTP: a flow's invocations and tasks listed newest first, a page at a time
//! (`limit`, `cursor`), filtered, each item in the shape its own endpoint answers; the key
//! checked before the query; nothing of another environment. And every route that creates a
//! resource answers 201 (202 for a cancel, as the spec says) with its `Location`.

use std::time::Duration;

use serde_json::{json, Value};

use crate::support::{blackbox, call, Reply, Server};
use crate::trigger::{finished, fire, invocation_id, published_flow, users};

/// Every page of `path` (which has a query already) of `limit` items: the items, and how many
/// pages it took. Each page but the last has `limit` items and a `next`.
async fn every_page(s: &Server, key: &str, path: &str, limit: usize) -> (Vec<Value>, usize) {
    let mut items = Vec::new();
    let mut cursor: Option<String> = None;
    for pages in 1..=50 {
        let mut url = format!("{path}&limit={limit}");
        if let Some(c) = &cursor {
            url.push_str(&format!("&cursor={c}"));
        }
        let reply = call(s, "GET", &url, Some(key), None).await;
        assert_eq!(reply.status, 200, "{url}: {}", reply.text);
        let page = reply.body["data"].as_array().expect("data").clone();
        assert!(page.len() <= limit, "{}", reply.text);
        items.extend(page.iter().cloned());
        match reply.body["next"].as_str() {
            Some(next) => {
                assert_eq!(page.len(), limit, "a page before the last is full");
                cursor = Some(next.to_owned());
            }
            None => {
                assert!(reply.body["next"].is_null(), "{}", reply.text);
                return (items, pages);
            }
        }
    }
    panic!("the pages of {path} never end");
}

fn field(items: &[Value], name: &str) -> Vec<String> {
    items
        .iter()
        .map(|i| i[name].as_str().unwrap_or_default().to_owned())
        .collect()
}

/// The field paths of a 400 answer.
async fn refused(s: &Server, path: &str) -> Vec<String> {
    call(s, "GET", path, Some(&s.admin_secret), None)
        .await
        .problem(400, "validation_failed")
}

/// The same path's answers to keys that may not read it: none (401), a key of another
/// environment (401), keys without `action_flows:read` (403); and those that may (200).
async fn only_readers_may_list(s: &Server, path: &str) {
    call(s, "GET", path, None, None)
        .await
        .problem(401, "unauthorized");
    let other = s.other_env("elsewhere");
    let elsewhere = s.key(&["--env", &other, "--role", "events"]);
    call(s, "GET", path, Some(&elsewhere), None)
        .await
        .problem(401, "unauthorized");
    for unfit in [
        s.key(&["--role", "workbench"]),
        s.key(&["--scope", "action_flows:trigger"]),
    ] {
        // The key is checked before the query is read.
        call(s, "GET", &format!("{path}&limit=oops"), Some(&unfit), None)
            .await
            .problem(403, "forbidden");
    }
    for reader in [
        s.key(&["--scope", "action_flows:read"]),
        s.key(&["--role", "events"]),
    ] {
        let reply = call(s, "GET", path, Some(&reader), None).await;
        assert_eq!(reply.status, 200, "{}", reply.text);
    }
}

/// A flow of another environment: listed through this environment, it is not found.
async fn flow_elsewhere(s: &Server) -> String {
    let other = s.other_env("other");
    let key = s.key(&["--env", &other, "--role", "events"]);
    let created = call(
        s,
        "POST",
        &format!("/v1/{other}/action-flow"),
        Some(&key),
        Some(json!({"name": "Theirs"})),
    )
    .await;
    assert_eq!(created.status, 201, "{}", created.text);
    created.body["data"]["id"].as_str().expect("id").to_owned()
}

async fn a_flows_invocations_list_newest_first_page_by_page(s: Server) {
    let flow = published_flow(&s, true).await;
    users(&s, json!([{"id": "u1"}, {"id": "t1", "testUser": true}])).await;
    let user = |id: &str| json!({"target": {"type": "user", "targetUserIds": ["u1"]}, "flowInvocationId": id});
    // Ids that sort against the order fired, so that a list by id alone would come out
    // reversed; those recorded at one instant (the pair) are listed by id, descending.
    let mut fired = Vec::new();
    let id_of = |n: u8| char::from(b'z' - n);
    for n in 1..=5 {
        let id = format!("{}-live", id_of(n));
        invocation_id(&fire(&s, &flow, "start", json!({"flows": [user(&id)]})).await);
        fired.push(id);
    }
    for n in 6..=7 {
        let id = format!("{}-test", id_of(n));
        invocation_id(&fire(&s, &flow, "test", json!({"flows": [user(&id)]})).await);
        fired.push(id);
    }
    // Two recorded by one request.
    let pair = fire(
        &s,
        &flow,
        "start",
        json!({"flows": [user("b-pair"), user("c-pair")]}),
    )
    .await;
    assert_eq!(pair.status, 200, "{}", pair.text);
    fired.extend(["b-pair".to_owned(), "c-pair".to_owned()]);
    for id in &fired {
        finished(&s, &flow, id).await;
    }
    // A flow beside it, whose invocations are not listed.
    let beside = published_flow(&s, false).await;
    invocation_id(&fire(&s, &beside, "start", json!({"flows": [user("a-beside")]})).await);

    let base = format!("/v1/{}/action-flow/{flow}/invocations?", s.env);
    let newest_first = [
        "c-pair", "b-pair", "s-test", "t-test", "u-live", "v-live", "w-live", "x-live", "y-live",
    ];
    let (items, pages) = every_page(&s, &s.admin_secret, &base, 4).await;
    assert_eq!(field(&items, "flowInvocationId"), newest_first);
    assert_eq!(pages, 3, "4 + 4 + 1");
    // Each in the shape of the invocation's own endpoint.
    for item in &items {
        let id = item["flowInvocationId"].as_str().expect("id");
        let one = call(
            &s,
            "GET",
            &format!("/v1/{}/action-flow/{flow}/invocations/{id}", s.env),
            Some(&s.admin_secret),
            None,
        )
        .await;
        assert_eq!(one.body["data"], *item);
    }
    let all = call(&s, "GET", &base, Some(&s.admin_secret), None).await;
    assert_eq!(all.body["data"].as_array().map(Vec::len), Some(9));
    assert!(all.body["next"].is_null());

    // Filters, alone and together, page like the whole list.
    let (tests, _) = every_page(&s, &s.admin_secret, &format!("{base}mode=test"), 1).await;
    assert_eq!(field(&tests, "flowInvocationId"), ["s-test", "t-test"]);
    assert!(tests.iter().all(|i| i["mode"] == "test"));
    let (live, pages) = every_page(
        &s,
        &s.admin_secret,
        &format!("{base}mode=LIVE&status=completed"),
        2,
    )
    .await;
    assert_eq!(
        field(&live, "flowInvocationId"),
        ["c-pair", "b-pair", "u-live", "v-live", "w-live", "x-live", "y-live"]
    );
    assert_eq!(pages, 4);
    for status in ["pending", "running", "failed", "cancelled"] {
        let none = call(
            &s,
            "GET",
            &format!("{base}status={status}"),
            Some(&s.admin_secret),
            None,
        )
        .await;
        assert_eq!(none.body["data"], json!([]), "{status}: {}", none.text);
    }

    // Every bad parameter at once; a cursor no page handed out.
    let fields = refused(&s, &format!("{base}status=done&mode=staging&limit=0")).await;
    assert_eq!(fields, ["status", "mode", "limit"]);
    assert_eq!(refused(&s, &format!("{base}limit=501")).await, ["limit"]);
    assert_eq!(refused(&s, &format!("{base}limit=ten")).await, ["limit"]);
    assert_eq!(
        refused(&s, &format!("{base}cursor=%25%25%25")).await,
        ["cursor"]
    );
    // Base64url, but of no invocation's key (`y-live`).
    assert_eq!(
        refused(&s, &format!("{base}cursor=eS1saXZl")).await,
        ["cursor"]
    );

    // No such flow here: another environment's, or none.
    let theirs = flow_elsewhere(&s).await;
    for missing in [theirs.as_str(), "flw_nope"] {
        call(
            &s,
            "GET",
            &format!("/v1/{}/action-flow/{missing}/invocations", s.env),
            Some(&s.admin_secret),
            None,
        )
        .await
        .problem(404, "not_found");
    }
    only_readers_may_list(&s, &format!("{base}mode=live")).await;
}

/// A CSV task of `flow`: its creation's `data`.
async fn csv_task(s: &Server, flow: &str, test: bool) -> Value {
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
    reply.body["data"].clone()
}

/// A cancel of `flow` matching `user`'s instances: its task id.
async fn cancel_task(s: &Server, flow: &str, user: &str) -> String {
    let reply = call(
        s,
        "POST",
        &format!("/v1/{}/action-flow/{flow}/task/cancel", s.env),
        Some(&s.admin_secret),
        Some(json!({"endUserId": user})),
    )
    .await;
    assert_eq!(reply.status, 202, "{}", reply.text);
    reply.body["data"]["taskId"]
        .as_str()
        .expect("task id")
        .to_owned()
}

/// GETs `url` until its status, read by `status`, is one of `done`.
async fn settled(s: &Server, url: &str, status: impl Fn(&Value) -> &Value, done: &[&str]) {
    let started = std::time::Instant::now();
    loop {
        let reply = Reply::from(
            s.client
                .get(url)
                .bearer_auth(&s.admin_secret)
                .send()
                .await
                .expect("status"),
        )
        .await;
        assert_eq!(reply.status, 200, "{}", reply.text);
        if done.iter().any(|d| status(&reply.body) == d) {
            return;
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "{}",
            reply.text
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// What a list item should be: what its status URL answers (unwrapped from `data` for a CSV
/// task), plus `kind` (and a cancel task's `taskId` and `statusUrl`).
async fn as_its_status_shows_it(s: &Server, item: &Value) -> Value {
    let url = item["statusUrl"].as_str().expect("statusUrl");
    let reply = Reply::from(
        s.client
            .get(url)
            .bearer_auth(&s.admin_secret)
            .send()
            .await
            .expect("status"),
    )
    .await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    let mut expected = match item["kind"].as_str() {
        Some("csv") => reply.body["data"].clone(),
        Some("cancel") => {
            let mut status = reply.body.clone();
            status["taskId"] = item["taskId"].clone();
            status["statusUrl"] = item["statusUrl"].clone();
            status
        }
        other => panic!("kind {other:?}: {item}"),
    };
    expected["kind"] = item["kind"].clone();
    expected
}

async fn a_flows_csv_and_cancel_tasks_list_together_newest_first(s: Server) {
    let flow = published_flow(&s, true).await;
    users(&s, json!([{"id": "u1"}])).await;
    invocation_id(
        &fire(
            &s,
            &flow,
            "start",
            json!({"flows": [{"target": {"type": "user", "targetUserIds": ["u1"]}}]}),
        )
        .await,
    );
    // Made one after the other, each in a millisecond of its own: csv 1, cancel 1, csv 2
    // (uploaded), cancel 2, csv 3 (test).
    let tick = || tokio::time::sleep(Duration::from_millis(10));
    let csv1 = csv_task(&s, &flow, false).await;
    tick().await;
    let cancel1 = cancel_task(&s, &flow, "u1").await;
    tick().await;
    let csv2 = csv_task(&s, &flow, false).await;
    let upload = s
        .client
        .put(csv2["uploadUrl"].as_str().expect("upload url"))
        .header("content-type", "text/csv")
        .body("target.attributes.id\nu1\n")
        .send()
        .await
        .expect("upload");
    assert_eq!(upload.status(), 200);
    tick().await;
    let cancel2 = cancel_task(&s, &flow, "nobody").await;
    tick().await;
    let csv3 = csv_task(&s, &flow, true).await;
    let status_url = |task: &Value| task["statusUrl"].as_str().expect("url").to_owned();
    settled(
        &s,
        &status_url(&csv2),
        |b| &b["data"]["task"]["status"],
        &["completed"],
    )
    .await;
    let cancel_url = |id: &str| {
        s.url(&format!(
            "/v1/{}/action-flow/{flow}/task/{id}/status",
            s.env
        ))
    };
    for id in [&cancel1, &cancel2] {
        settled(
            &s,
            &cancel_url(id),
            |b| &b["status"],
            &["completed", "failed"],
        )
        .await;
    }
    // A flow beside it, whose tasks are not listed.
    let beside = published_flow(&s, false).await;
    csv_task(&s, &beside, false).await;

    let base = format!("/v1/{}/action-flow/{flow}/tasks?", s.env);
    let (items, pages) = every_page(&s, &s.admin_secret, &base, 2).await;
    assert_eq!(pages, 3, "2 + 2 + 1: {items:?}");
    let named: Vec<String> = items
        .iter()
        .map(|i| match i["kind"].as_str() {
            Some("csv") => format!("csv {}", i["task"]["id"]),
            _ => format!("cancel {}", i["taskId"].as_str().unwrap_or_default()),
        })
        .collect();
    let csv = |task: &Value| format!("csv {}", task["task"]["id"]);
    let cancel = |id: &str| format!("cancel {id}");
    assert_eq!(
        named,
        [
            csv(&csv3),
            cancel(&cancel2),
            csv(&csv2),
            cancel(&cancel1),
            csv(&csv1)
        ]
    );
    for item in &items {
        assert_eq!(*item, as_its_status_shows_it(&s, item).await);
    }
    assert_eq!(items[0]["task"]["status"], "pending");
    assert_eq!(
        items[1]["status"], "failed",
        "nothing matched: {}",
        items[1]
    );
    assert_eq!(items[2]["task"]["status"], "completed");
    assert_eq!(items[3]["status"], "completed", "{}", items[3]);

    // One kind, a status, both; a cursor of one list carries on in another.
    let (csvs, _) = every_page(&s, &s.admin_secret, &format!("{base}kind=csv"), 1).await;
    assert_eq!(csvs.len(), 3);
    assert!(csvs.iter().all(|i| i["kind"] == "csv"));
    let (cancels, _) = every_page(&s, &s.admin_secret, &format!("{base}kind=cancel"), 1).await;
    assert_eq!(
        field(&cancels, "taskId"),
        [cancel2.clone(), cancel1.clone()]
    );
    let (pending, _) = every_page(&s, &s.admin_secret, &format!("{base}status=pending"), 5).await;
    assert_eq!(pending, [items[0].clone(), items[4].clone()]);
    let (failed, _) = every_page(&s, &s.admin_secret, &format!("{base}status=failed"), 5).await;
    assert_eq!(failed, [items[1].clone()]);
    let (done, _) = every_page(
        &s,
        &s.admin_secret,
        &format!("{base}kind=CANCEL&status=completed"),
        5,
    )
    .await;
    assert_eq!(done, [items[3].clone()]);
    let first = call(
        &s,
        "GET",
        &format!("{base}limit=2"),
        Some(&s.admin_secret),
        None,
    )
    .await;
    let next = first.body["next"].as_str().expect("next");
    let rest = call(
        &s,
        "GET",
        &format!("{base}kind=csv&cursor={next}"),
        Some(&s.admin_secret),
        None,
    )
    .await;
    assert_eq!(rest.body["data"], json!([items[2], items[4]]));

    // Every bad parameter at once; a cancel is never pending; cursors no page handed out.
    let fields = refused(&s, &format!("{base}kind=upload&status=done&limit=501")).await;
    assert_eq!(fields, ["kind", "status", "limit"]);
    assert_eq!(
        refused(&s, &format!("{base}kind=cancel&status=pending")).await,
        ["status"]
    );
    assert_eq!(refused(&s, &format!("{base}cursor=!!")).await, ["cursor"]);
    let invocations_cursor = call(
        &s,
        "GET",
        &format!("/v1/{}/action-flow/{flow}/invocations?limit=1", s.env),
        Some(&s.admin_secret),
        None,
    )
    .await;
    let theirs = invocations_cursor.body["next"].as_str().unwrap_or("bm9uZQ");
    assert_eq!(
        refused(&s, &format!("{base}cursor={theirs}")).await,
        ["cursor"]
    );

    let elsewhere = flow_elsewhere(&s).await;
    for missing in [elsewhere.as_str(), "flw_nope"] {
        call(
            &s,
            "GET",
            &format!("/v1/{}/action-flow/{missing}/tasks", s.env),
            Some(&s.admin_secret),
            None,
        )
        .await
        .problem(404, "not_found");
    }
    only_readers_may_list(&s, &format!("{base}kind=csv")).await;
}

/// Contract §11: created resources answer 201 with a `Location` header; a cancel answers 202
/// (spec 2.7) and names its status URL there too.
async fn created_resources_answer_with_their_location(s: Server) {
    let admin = Some(s.admin_secret.as_str());
    let created = |path: String, body: Option<Value>| {
        let s = &s;
        async move {
            let reply = call(s, "POST", &path, admin, body).await;
            assert_eq!(reply.status, 201, "{path}: {}", reply.text);
            let location = reply.header("location").expect("Location").to_owned();
            (reply.body, location)
        }
    };
    let env = &s.env;
    let (folder, at) = created(
        format!("/v1/{env}/workbench-folder"),
        Some(json!({"name": "Q4"})),
    )
    .await;
    assert_eq!(
        at,
        format!(
            "/v1/{env}/workbench-folder/{}",
            folder["data"]["id"].as_str().expect("id")
        )
    );
    let (flow, at) = created(
        format!("/v1/{env}/action-flow"),
        Some(json!({"name": "Welcome"})),
    )
    .await;
    assert_eq!(
        at,
        format!(
            "/v1/{env}/action-flow/{}",
            flow["data"]["id"].as_str().expect("id")
        )
    );
    let (segment, at) = created(
        format!("/v1/{env}/segments"),
        Some(json!({"name": "VIPs", "filter": {"match": "all", "conditions": [{"field": "attributes.country", "op": "eq", "value": "NZ"}]}})),
    )
    .await;
    assert_eq!(
        at,
        format!(
            "/v1/{env}/segments/{}",
            segment["data"]["id"].as_str().expect("id")
        )
    );
    let (stream, at) = created(
        format!("/v1/{env}/streams"),
        Some(json!({"name": "Promotions"})),
    )
    .await;
    assert_eq!(
        at,
        format!(
            "/v1/{env}/streams/{}",
            stream["data"]["id"].as_str().expect("id")
        )
    );
    let (key, at) = created(
        format!("/v1/{env}/credentials"),
        Some(json!({"role": "events"})),
    )
    .await;
    let client_id = key["data"]["clientId"].as_str().expect("client id");
    assert_eq!(at, format!("/v1/{env}/credentials/{client_id}"));
    let revoked = call(&s, "DELETE", &at, admin, None).await;
    assert_eq!(revoked.status, 204, "the key is at its Location");
    let sa = adapters_push::testing::service_account("demo-project");
    let (_, at) = created(
        format!("/v1/{env}/notification-platforms"),
        Some(json!({"appId": "com.example.android", "platform": "FCM", "platformCredential": sa})),
    )
    .await;
    assert_eq!(at, format!("/v1/{env}/notification-platforms"));
    let flow = published_flow(&s, false).await;
    let (task, at) = created(format!("/v1/{env}/action-flow/{flow}/csv-task"), None).await;
    assert_eq!(Some(at.as_str()), task["data"]["statusUrl"].as_str());
    let cancel = call(
        &s,
        "POST",
        &format!("/v1/{env}/action-flow/{flow}/task/cancel"),
        admin,
        None,
    )
    .await;
    assert_eq!(cancel.status, 202, "{}", cancel.text);
    assert_eq!(
        cancel.header("location"),
        cancel.body["data"]["links"][0]["href"].as_str()
    );
}

blackbox!(
    a_flows_invocations_list_newest_first_page_by_page,
    a_flows_csv_and_cancel_tasks_list_together_newest_first,
    created_resources_answer_with_their_location,
);
