//! End users, segments and streams over HTTP (contract §3).

use serde_json::{json, Value};

use crate::support::{blackbox, call, Server};

fn users(s: &Server) -> String {
    format!("/v1/{}/users", s.env)
}

async fn put(s: &Server, id: &str, body: Value) -> Value {
    let reply = call(
        s,
        "PUT",
        &format!("{}/{id}", users(s)),
        Some(&s.admin_secret),
        Some(body),
    )
    .await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    reply.body["data"].clone()
}

async fn ids(s: &Server, query: &str) -> (Vec<String>, Value) {
    let reply = call(
        s,
        "GET",
        &format!("{}{query}", users(s)),
        Some(&s.admin_secret),
        None,
    )
    .await;
    assert_eq!(reply.status, 200, "{query}: {}", reply.text);
    let ids = reply.body["data"]
        .as_array()
        .expect("data")
        .iter()
        .map(|u| u["id"].as_str().expect("id").to_owned())
        .collect();
    (ids, reply.body["next"].clone())
}

async fn a_user_is_created_replaced_read_and_deleted(s: Server) {
    let admin = Some(s.admin_secret.as_str());
    let created = put(&s, "user 1@example", json!({"testUser": true, "tags": ["vip", "beta", "vip"], "attributes": {"country": "NZ", "age": 42}})).await;
    assert_eq!(created["id"], "user 1@example");
    assert_eq!(created["testUser"], true);
    assert_eq!(
        created["tags"],
        json!(["beta", "vip"]),
        "tags are sorted and unique"
    );
    assert_eq!(created["attributes"], json!({"country": "NZ", "age": 42}));
    let replaced = put(&s, "user 1@example", json!({"tags": ["gold"]})).await;
    assert_eq!(replaced["testUser"], false, "PUT replaces the whole user");
    assert_eq!(replaced["tags"], json!(["gold"]));
    assert_eq!(replaced["attributes"], json!({}));
    assert_eq!(replaced["created"], created["created"], "created is kept");
    let path = format!("{}/user%201@example", users(&s));
    let got = call(&s, "GET", &path, admin, None).await;
    assert_eq!(got.body["data"], replaced);
    assert_eq!(call(&s, "DELETE", &path, admin, None).await.status, 204);
    call(&s, "GET", &path, admin, None)
        .await
        .problem(404, "not_found");
    call(&s, "DELETE", &path, admin, None)
        .await
        .problem(404, "not_found");
}

async fn user_bodies_report_every_problem(s: Server) {
    let reply = call(
        &s,
        "PUT",
        &format!("{}/u1", users(&s)),
        Some(&s.admin_secret),
        Some(json!({"testUser": "yes", "tags": ["ok", 7, ""], "attributes": {"nested": {"a": 1}, "list": [1]}})),
    )
    .await;
    let fields = reply.problem(400, "validation_failed");
    assert_eq!(fields, ["testUser", "tags[1]"], "type problems first");
    let reply = call(
        &s,
        "PUT",
        &format!("{}/u1", users(&s)),
        Some(&s.admin_secret),
        Some(json!({"tags": ["ok", ""], "attributes": {"nested": {"a": 1}}})),
    )
    .await;
    assert_eq!(
        reply.problem(400, "validation_failed"),
        ["tags[1]", "attributes.nested"]
    );
    let long_id = "x".repeat(256);
    let reply = call(
        &s,
        "PUT",
        &format!("{}/{long_id}", users(&s)),
        Some(&s.admin_secret),
        Some(json!({})),
    )
    .await;
    assert_eq!(reply.problem(400, "validation_failed"), ["id"]);
}

async fn a_batch_stores_all_or_nothing(s: Server) {
    let path = format!("/v1/{}/users:batch", s.env);
    let admin = Some(s.admin_secret.as_str());
    let good: Vec<Value> = (0..250)
        .map(|i| json!({"id": format!("b{i:03}"), "tags": ["batch"], "testUser": i % 2 == 0}))
        .collect();
    let reply = call(&s, "POST", &path, admin, Some(json!({"users": good}))).await;
    assert_eq!(
        (reply.status, reply.body["data"]["upserted"].clone()),
        (200, json!(250)),
        "{}",
        reply.text
    );
    let bad = json!({"users": [{"id": "c1"}, {"tags": ["x"]}, {"id": "c3", "attributes": {"x": [1]}}, "nope", {"id": "c1"}]});
    let reply = call(&s, "POST", &path, admin, Some(bad)).await;
    assert_eq!(
        reply.problem(400, "validation_failed"),
        ["users[1].id", "users[3]"]
    );
    let dup =
        json!({"users": [{"id": "c1"}, {"id": "c3", "attributes": {"x": [1]}}, {"id": "c1"}]});
    let reply = call(&s, "POST", &path, admin, Some(dup)).await;
    assert_eq!(
        reply.problem(400, "validation_failed"),
        ["users[1].attributes.x", "users[2].id"]
    );
    call(&s, "GET", &format!("{}/c1", users(&s)), admin, None)
        .await
        .problem(404, "not_found");
    let too_many: Vec<Value> = (0..10_001)
        .map(|i| json!({"id": format!("m{i}")}))
        .collect();
    let reply = call(&s, "POST", &path, admin, Some(json!({"users": too_many}))).await;
    assert_eq!(reply.problem(400, "validation_failed"), ["users"]);
    call(&s, "POST", &path, admin, Some(json!({"users": []})))
        .await
        .problem(400, "validation_failed");
}

async fn users_are_listed_by_tag_test_flag_and_segment_in_pages(s: Server) {
    let admin = Some(s.admin_secret.as_str());
    let batch: Vec<Value> = (0..12)
        .map(|i| json!({"id": format!("u{i:02}"), "testUser": i % 2 == 0, "tags": if i % 3 == 0 { json!(["vip"]) } else { json!([]) },
                         "attributes": {"country": if i < 6 { "NZ" } else { "AU" }, "score": i}}))
        .collect();
    call(
        &s,
        "POST",
        &format!("/v1/{}/users:batch", s.env),
        admin,
        Some(json!({"users": batch})),
    )
    .await;
    assert_eq!(ids(&s, "?tag=vip").await.0, ["u00", "u03", "u06", "u09"]);
    assert_eq!(ids(&s, "?tag=vip&testUser=true").await.0, ["u00", "u06"]);
    let (first, next) = ids(&s, "?limit=5").await;
    assert_eq!(first, ["u00", "u01", "u02", "u03", "u04"]);
    let (second, _) = ids(
        &s,
        &format!("?limit=5&cursor={}", next.as_str().expect("cursor")),
    )
    .await;
    assert_eq!(second, ["u05", "u06", "u07", "u08", "u09"]);

    let segment = call(&s, "POST", &format!("/v1/{}/segments", s.env), admin, Some(json!({"name": "NZ high scorers", "filter": {"match": "all", "conditions": [
        {"field": "attributes.country", "op": "eq", "value": "NZ"}, {"field": "attributes.score", "op": "gt", "value": 2}]}}))).await;
    assert_eq!(segment.status, 201, "{}", segment.text);
    let seg = segment.body["data"]["id"].as_str().expect("id").to_owned();
    assert!(seg.starts_with("seg_"));
    assert_eq!(
        ids(&s, &format!("?segmentId={seg}")).await.0,
        ["u03", "u04", "u05"]
    );
    assert_eq!(
        ids(&s, &format!("?segmentId={seg}&testUser=true")).await.0,
        ["u04"]
    );
    let (page, next) = ids(&s, &format!("?segmentId={seg}&limit=2")).await;
    assert_eq!(page, ["u03", "u04"]);
    assert_eq!(
        ids(
            &s,
            &format!("?segmentId={seg}&cursor={}", next.as_str().expect("cursor"))
        )
        .await
        .0,
        ["u05"]
    );

    let unknown = call(
        &s,
        "GET",
        &format!("{}?segmentId=seg_nope", users(&s)),
        admin,
        None,
    )
    .await;
    assert_eq!(unknown.problem(400, "validation_failed"), ["segmentId"]);
    let bad = call(
        &s,
        "GET",
        &format!("{}?testUser=maybe&limit=0&cursor=%%", users(&s)),
        admin,
        None,
    )
    .await;
    let mut fields = bad.problem(400, "validation_failed");
    fields.sort();
    assert_eq!(fields, ["cursor", "limit", "testUser"]);
}

async fn segments_are_validated_read_updated_and_deleted(s: Server) {
    let admin = Some(s.admin_secret.as_str());
    let base = format!("/v1/{}/segments", s.env);
    let invalid = call(&s, "POST", &base, admin, Some(json!({"name": "", "filter": {"match": "most", "conditions": [{"field": "email", "op": "eq", "value": "x"}]}}))).await;
    assert_eq!(
        invalid.problem(400, "validation_failed"),
        ["name", "filter.match", "filter.conditions[0].field"]
    );
    call(&s, "POST", &base, admin, Some(json!({"name": "no filter"})))
        .await
        .problem(400, "validation_failed");
    let filter = json!({"match": "any", "conditions": [{"field": "tags", "op": "in", "value": ["vip", "gold"]}]});
    let created = call(
        &s,
        "POST",
        &base,
        admin,
        Some(json!({"name": "Valued", "filter": filter})),
    )
    .await;
    let id = created.body["data"]["id"].as_str().expect("id").to_owned();
    assert_eq!(
        created.body["data"]["filter"], filter,
        "the filter is kept as sent"
    );
    let updated = call(
        &s,
        "PUT",
        &format!("{base}/{id}"),
        admin,
        Some(json!({"name": "Most valued", "filter": filter})),
    )
    .await;
    assert_eq!(updated.body["data"]["name"], "Most valued");
    let listed = call(&s, "GET", &base, admin, None).await;
    assert_eq!(listed.body["data"].as_array().map(Vec::len), Some(1));
    assert_eq!(
        call(&s, "GET", &format!("{base}/{id}"), admin, None)
            .await
            .body["data"]["name"],
        "Most valued"
    );
    assert_eq!(
        call(&s, "DELETE", &format!("{base}/{id}"), admin, None)
            .await
            .status,
        204
    );
    call(&s, "GET", &format!("{base}/{id}"), admin, None)
        .await
        .problem(404, "not_found");
    call(
        &s,
        "PUT",
        &format!("{base}/{id}"),
        admin,
        Some(json!({"name": "x", "filter": filter})),
    )
    .await
    .problem(404, "not_found");
}

async fn streams_always_include_all_cards(s: Server) {
    let admin = Some(s.admin_secret.as_str());
    let base = format!("/v1/{}/streams", s.env);
    let listed = call(&s, "GET", &base, admin, None).await;
    assert_eq!(listed.body["data"].as_array().map(Vec::len), Some(1));
    assert_eq!(listed.body["data"][0]["name"], "All cards");
    assert_eq!(listed.body["data"][0]["default"], true);
    let default_id = listed.body["data"][0]["id"]
        .as_str()
        .expect("id")
        .to_owned();
    let created = call(
        &s,
        "POST",
        &base,
        admin,
        Some(json!({"name": "Promotions"})),
    )
    .await;
    assert_eq!(created.status, 201);
    assert_eq!(created.body["data"]["default"], false);
    let promo = created.body["data"]["id"].as_str().expect("id").to_owned();
    call(
        &s,
        "POST",
        &base,
        admin,
        Some(json!({"name": "Promotions"})),
    )
    .await
    .problem(409, "stream_name_taken");
    call(&s, "POST", &base, admin, Some(json!({"name": "All cards"})))
        .await
        .problem(409, "stream_name_taken");
    call(&s, "POST", &base, admin, Some(json!({"name": ""})))
        .await
        .problem(400, "validation_failed");
    call(&s, "DELETE", &format!("{base}/{default_id}"), admin, None)
        .await
        .problem(409, "default_stream");
    assert_eq!(
        call(&s, "DELETE", &format!("{base}/{promo}"), admin, None)
            .await
            .status,
        204
    );
    call(&s, "DELETE", &format!("{base}/{promo}"), admin, None)
        .await
        .problem(404, "not_found");
    let after = call(&s, "GET", &base, admin, None).await;
    assert_eq!(
        after.body["data"][0]["id"],
        default_id.as_str(),
        "the same default stream, not a new one"
    );
}

async fn audience_permissions(s: Server) {
    let paths = [
        ("GET", users(&s), None),
        ("PUT", format!("{}/u1", users(&s)), Some(json!({}))),
        ("GET", format!("/v1/{}/segments", s.env), None),
        ("GET", format!("/v1/{}/streams", s.env), None),
    ];
    let folders_only = s.key(&["--scope", "workbench_folders:read"]);
    for (method, path, body) in &paths {
        call(&s, method, path, None, body.clone())
            .await
            .problem(401, "unauthorized");
        call(&s, method, path, Some(&folders_only), body.clone())
            .await
            .problem(403, "forbidden");
    }
    for role in ["events", "workbench"] {
        let key = s.key(&["--role", role]);
        for (method, path, body) in &paths {
            let reply = call(&s, method, path, Some(&key), body.clone()).await;
            assert_eq!(reply.status, 200, "{role} {method} {path}: {}", reply.text);
        }
    }
    let reader = s.key(&["--scope", "users:read"]);
    assert_eq!(
        call(&s, "GET", &users(&s), Some(&reader), None)
            .await
            .status,
        200
    );
    call(
        &s,
        "PUT",
        &format!("{}/u2", users(&s)),
        Some(&reader),
        Some(json!({})),
    )
    .await
    .problem(403, "forbidden");
}

blackbox!(
    a_user_is_created_replaced_read_and_deleted,
    user_bodies_report_every_problem,
    a_batch_stores_all_or_nothing,
    users_are_listed_by_tag_test_flag_and_segment_in_pages,
    segments_are_validated_read_updated_and_deleted,
    streams_always_include_all_cards,
    audience_permissions,
);
