//! Folders over HTTP: every row of spec section 7 for folders, the rules of 2.1 and 3, and
//! the limits of section 8.

use serde_json::{json, Value};

use crate::support::{blackbox, call, Server};

const READ: &str = "workbench_folders:read";
const CREATE: &str = "workbench_folders:create";
const UPDATE: &str = "workbench_folders:update";
const DELETE: &str = "workbench_folders:delete";

fn folders(server: &Server) -> String {
    format!("/v1/{}/workbench-folder", server.env)
}

fn folder(server: &Server, id: &str) -> String {
    format!("/v1/{}/workbench-folder/{id}", server.env)
}

async fn create(server: &Server, name: &str, parent: Option<&str>) -> Value {
    let reply = call(
        server,
        "POST",
        &folders(server),
        Some(&server.admin_secret),
        Some(json!({"name": name, "parentId": parent})),
    )
    .await;
    assert_eq!(reply.status, 201, "{}", reply.text);
    reply.body["data"].clone()
}

fn id(folder: &Value) -> String {
    folder["id"].as_str().expect("id").to_owned()
}

async fn full_life_cycle_of_a_folder_tree(server: Server) {
    let admin = Some(server.admin_secret.as_str());
    let reply = call(
        &server,
        "POST",
        &folders(&server),
        admin,
        Some(json!({"name": "Onboarding"})),
    )
    .await;
    assert_eq!(reply.status, 201, "{}", reply.text);
    let root = reply.body["data"].clone();
    assert_eq!(
        reply.header("location"),
        Some(folder(&server, &id(&root)).as_str())
    );
    assert!(
        id(&root).starts_with("fld_") && id(&root).len() == 30,
        "{root}"
    );
    assert_eq!(root["name"], "Onboarding");
    assert_eq!(root["environmentId"], server.env.as_str());
    assert_eq!(root["organisationId"], server.org.as_str());
    assert_eq!(root["parentId"], Value::Null);
    let created = root["created"].as_str().expect("created");
    assert!(
        chrono::DateTime::parse_from_rfc3339(created).is_ok()
            && created.ends_with('Z')
            && created.len() == 24,
        "{created}"
    );
    assert_eq!(root["updated"], root["created"]);

    let child = create(&server, "Week 1", Some(&id(&root))).await;
    assert_eq!(child["parentId"], id(&root).as_str());
    let empty_parent = call(
        &server,
        "POST",
        &folders(&server),
        admin,
        Some(json!({"name": "Archive", "parentId": ""})),
    )
    .await;
    assert_eq!(empty_parent.status, 201);
    assert_eq!(
        empty_parent.body["data"]["parentId"],
        Value::Null,
        "an empty parentId means root"
    );

    let got = call(&server, "GET", &folder(&server, &id(&child)), admin, None).await;
    assert_eq!(got.status, 200);
    assert_eq!(got.body["data"], child, "get has the list entry's shape");

    let renamed = call(
        &server,
        "PUT",
        &folder(&server, &id(&child)),
        admin,
        Some(json!({"name": "Week one"})),
    )
    .await;
    assert_eq!(renamed.status, 200, "{}", renamed.text);
    assert_eq!(renamed.body["data"]["name"], "Week one");
    assert_eq!(renamed.body["data"]["parentId"], id(&root).as_str());
    assert!(renamed.body["data"]["updated"].as_str() >= child["updated"].as_str());

    let deleted = call(
        &server,
        "DELETE",
        &folder(&server, &id(&child)),
        admin,
        None,
    )
    .await;
    assert_eq!(deleted.status, 204);
    assert!(deleted.text.is_empty());
    let gone = call(&server, "GET", &folder(&server, &id(&child)), admin, None).await;
    gone.problem(404, "not_found");
}

async fn list_returns_roots_and_children_sorted_by_name(server: Server) {
    let b = create(&server, "beta", None).await;
    create(&server, "Alpha", None).await;
    create(&server, "gamma", Some(&id(&b))).await;
    create(&server, "alpha 2", Some(&id(&b))).await;
    let reply = call(
        &server,
        "GET",
        &folders(&server),
        Some(&server.admin_secret),
        None,
    )
    .await;
    assert_eq!(reply.status, 200);
    let names: Vec<&str> = reply.body["data"]
        .as_array()
        .expect("array")
        .iter()
        .map(|f| f["name"].as_str().expect("name"))
        .collect();
    assert_eq!(names, ["Alpha", "alpha 2", "beta", "gamma"]);
}

async fn every_operation_without_a_token_is_401(server: Server) {
    let f = create(&server, "x", None).await;
    let cases = [
        ("GET", folders(&server), None),
        ("POST", folders(&server), Some(json!({"name": "y"}))),
        ("GET", folder(&server, &id(&f)), None),
        ("PUT", folder(&server, &id(&f)), Some(json!({"name": "y"}))),
        ("DELETE", folder(&server, &id(&f)), None),
    ];
    for (method, path, body) in cases {
        let reply = call(&server, method, &path, None, body).await;
        reply.problem(401, "unauthorized");
        assert_eq!(
            reply.header("www-authenticate"),
            Some("Bearer realm=\"workbench\""),
            "{method} {path}"
        );
    }
}

async fn malformed_unknown_and_revoked_credentials_are_401(server: Server) {
    let path = folders(&server);
    let revoked = server.key(&["--scope", READ, "--scope", "credentials:write"]);
    let ids = server
        .admin(&["key", "create", "--env", &server.env, "--scope", READ])
        .expect("key");
    let victim = ids["clientSecret"].as_str().expect("secret").to_owned();
    let victim_id = ids["clientId"].as_str().expect("id").to_owned();
    assert_eq!(
        call(&server, "GET", &path, Some(&victim), None)
            .await
            .status,
        200
    );
    let revoke = call(
        &server,
        "DELETE",
        &format!("/v1/{}/credentials/{victim_id}", server.env),
        Some(&revoked),
        None,
    )
    .await;
    assert_eq!(revoke.status, 204, "{}", revoke.text);
    call(&server, "GET", &path, Some(&victim), None)
        .await
        .problem(401, "unauthorized");

    for bearer in ["wbs_unknown", "wbt_unknown", "garbage"] {
        call(&server, "GET", &path, Some(bearer), None)
            .await
            .problem(401, "unauthorized");
    }
    for header in [
        "Basic abc",
        "Bearer",
        "Bearer ",
        &format!("Token {}", server.admin_secret),
    ] {
        let reply = crate::support::Reply::from(
            server
                .client
                .get(server.url(&path))
                .header("authorization", header)
                .send()
                .await
                .expect("sent"),
        )
        .await;
        reply.problem(401, "unauthorized");
    }
}

async fn another_or_unknown_environment_is_401_for_every_operation(server: Server) {
    let other = server.other_env("staging");
    let only_other = server.key(&[
        "--env", &other, "--scope", READ, "--scope", CREATE, "--scope", UPDATE, "--scope", DELETE,
    ]);
    let f = create(&server, "x", None).await;
    for bearer in [only_other.as_str(), server.admin_secret.as_str()] {
        let env = if bearer == only_other {
            server.env.clone()
        } else {
            "env_00000000000000000000000000".into()
        };
        let cases = [
            ("GET", format!("/v1/{env}/workbench-folder"), None),
            (
                "POST",
                format!("/v1/{env}/workbench-folder"),
                Some(json!({"name": "y"})),
            ),
            (
                "GET",
                format!("/v1/{env}/workbench-folder/{}", id(&f)),
                None,
            ),
            (
                "PUT",
                format!("/v1/{env}/workbench-folder/{}", id(&f)),
                Some(json!({"name": "y"})),
            ),
            (
                "DELETE",
                format!("/v1/{env}/workbench-folder/{}", id(&f)),
                None,
            ),
        ];
        for (method, path, body) in cases {
            call(&server, method, &path, Some(bearer), body)
                .await
                .problem(401, "unauthorized");
        }
    }
}

async fn each_operation_needs_its_own_scope(server: Server) {
    let f = create(&server, "x", None).await;
    let all_but = |missing: &str| -> String {
        let mut args = Vec::new();
        for scope in [READ, CREATE, UPDATE, DELETE] {
            if scope != missing {
                args.extend(["--scope", scope]);
            }
        }
        server.key(&args)
    };
    let cases = [
        (READ, "GET", folders(&server), None),
        (READ, "GET", folder(&server, &id(&f)), None),
        (
            CREATE,
            "POST",
            folders(&server),
            Some(json!({"name": "created"})),
        ),
        (
            UPDATE,
            "PUT",
            folder(&server, &id(&f)),
            Some(json!({"name": "renamed"})),
        ),
        (DELETE, "DELETE", folder(&server, &id(&f)), None),
    ];
    for (scope, method, path, body) in cases {
        let key = all_but(scope);
        let reply = call(&server, method, &path, Some(&key), body.clone()).await;
        reply.problem(403, "forbidden");
        assert!(
            reply.body["detail"]
                .as_str()
                .expect("detail")
                .contains(scope),
            "{}",
            reply.text
        );
        // And the scope alone is enough.
        let only = server.key(&["--scope", scope]);
        let allowed = call(&server, method, &path, Some(&only), body).await;
        assert!(allowed.status < 300, "{scope} {method}: {}", allowed.text);
    }
}

async fn legacy_keys_are_refused_on_folders(server: Server) {
    let legacy = server.key(&["--role", "events", "--role", "workbench", "--role", "auth"]);
    let reply = call(&server, "GET", &folders(&server), Some(&legacy), None).await;
    reply.problem(403, "forbidden");
    let create = call(
        &server,
        "POST",
        &folders(&server),
        Some(&legacy),
        Some(json!({"name": "y"})),
    )
    .await;
    create.problem(403, "forbidden");
}

async fn create_validates_name_and_parent_reporting_every_problem(server: Server) {
    let admin = Some(server.admin_secret.as_str());
    let other = server.other_env("staging");
    let foreign = call(
        &server,
        "POST",
        &format!("/v1/{other}/workbench-folder"),
        admin,
        Some(json!({"name": "theirs"})),
    )
    .await;
    assert_eq!(foreign.status, 201);
    let foreign_id = foreign.body["data"]["id"].as_str().expect("id").to_owned();

    let bad_names: Vec<Value> = vec![
        json!(""),
        json!("a".repeat(256)),
        json!("slash/name"),
        json!("dots.are.out"),
        json!("emoji 🎉"),
        json!(" leading"),
        json!(12),
        Value::Null,
    ];
    for name in bad_names {
        let reply = call(
            &server,
            "POST",
            &folders(&server),
            admin,
            Some(json!({"name": name})),
        )
        .await;
        assert_eq!(reply.problem(400, "validation_failed"), ["name"], "{name}");
    }
    let missing = call(&server, "POST", &folders(&server), admin, Some(json!({}))).await;
    assert_eq!(missing.problem(400, "validation_failed"), ["name"]);

    for parent in [
        json!("fld_00000000000000000000000000"),
        json!(foreign_id),
        json!(7),
    ] {
        let reply = call(
            &server,
            "POST",
            &folders(&server),
            admin,
            Some(json!({"name": "ok", "parentId": parent})),
        )
        .await;
        assert_eq!(
            reply.problem(400, "validation_failed"),
            ["parentId"],
            "{parent}"
        );
    }
    let both = call(
        &server,
        "POST",
        &folders(&server),
        admin,
        Some(json!({"name": "bad/", "parentId": "fld_nope"})),
    )
    .await;
    assert_eq!(both.problem(400, "validation_failed"), ["name", "parentId"]);

    for good in [
        "a".repeat(255),
        "Ünïcödé 名前 ٣".into(),
        "with-hyphen_and space".into(),
    ] {
        let reply = call(
            &server,
            "POST",
            &folders(&server),
            admin,
            Some(json!({"name": good})),
        )
        .await;
        assert_eq!(reply.status, 201, "{good}: {}", reply.text);
    }
    let list = call(&server, "GET", &folders(&server), admin, None).await;
    assert_eq!(
        list.body["data"].as_array().map(Vec::len),
        Some(3),
        "nothing invalid was stored"
    );
}

async fn folders_nest_at_most_three_levels(server: Server) {
    let l1 = create(&server, "one", None).await;
    let l2 = create(&server, "two", Some(&id(&l1))).await;
    let l3 = create(&server, "three", Some(&id(&l2))).await;
    let reply = call(
        &server,
        "POST",
        &folders(&server),
        Some(&server.admin_secret),
        Some(json!({"name": "four", "parentId": id(&l3)})),
    )
    .await;
    assert_eq!(reply.problem(400, "validation_failed"), ["parentId"]);
}

async fn rename_validates_the_name_and_refuses_moves(server: Server) {
    let admin = Some(server.admin_secret.as_str());
    let a = create(&server, "a", None).await;
    let b = create(&server, "b", None).await;
    for name in [
        json!(""),
        json!("x".repeat(256)),
        json!("no!"),
        json!(false),
    ] {
        let reply = call(
            &server,
            "PUT",
            &folder(&server, &id(&a)),
            admin,
            Some(json!({"name": name})),
        )
        .await;
        assert_eq!(reply.problem(400, "validation_failed"), ["name"], "{name}");
    }
    let moved = call(
        &server,
        "PUT",
        &folder(&server, &id(&a)),
        admin,
        Some(json!({"name": "a", "parentId": id(&b)})),
    )
    .await;
    assert_eq!(moved.problem(400, "validation_failed"), ["parentId"]);
    let same_parent = call(
        &server,
        "PUT",
        &folder(&server, &id(&a)),
        admin,
        Some(json!({"name": "a2", "parentId": null})),
    )
    .await;
    assert_eq!(
        same_parent.status, 200,
        "naming the current parent is not a move"
    );
}

async fn sibling_names_conflict_on_create_and_rename(server: Server) {
    let admin = Some(server.admin_secret.as_str());
    let parent = create(&server, "Parent", None).await;
    create(&server, "Taken", None).await;
    create(&server, "Taken", Some(&id(&parent))).await;
    let dup_root = call(
        &server,
        "POST",
        &folders(&server),
        admin,
        Some(json!({"name": "Taken"})),
    )
    .await;
    dup_root.problem(409, "folder_name_taken");
    let dup_child = call(
        &server,
        "POST",
        &folders(&server),
        admin,
        Some(json!({"name": "Taken", "parentId": id(&parent)})),
    )
    .await;
    dup_child.problem(409, "folder_name_taken");
    let other_case = call(
        &server,
        "POST",
        &folders(&server),
        admin,
        Some(json!({"name": "taken"})),
    )
    .await;
    assert_eq!(other_case.status, 201, "uniqueness is exact-match");
    let free = create(&server, "Free", None).await;
    let rename = call(
        &server,
        "PUT",
        &folder(&server, &id(&free)),
        admin,
        Some(json!({"name": "Taken"})),
    )
    .await;
    rename.problem(409, "folder_name_taken");
}

async fn unknown_or_foreign_folders_are_404(server: Server) {
    let admin = Some(server.admin_secret.as_str());
    let other = server.other_env("staging");
    let theirs = call(
        &server,
        "POST",
        &format!("/v1/{other}/workbench-folder"),
        admin,
        Some(json!({"name": "x"})),
    )
    .await;
    let theirs = theirs.body["data"]["id"].as_str().expect("id").to_owned();
    for target in ["fld_00000000000000000000000000", theirs.as_str()] {
        call(&server, "GET", &folder(&server, target), admin, None)
            .await
            .problem(404, "not_found");
        call(
            &server,
            "PUT",
            &folder(&server, target),
            admin,
            Some(json!({"name": "y"})),
        )
        .await
        .problem(404, "not_found");
        call(&server, "DELETE", &folder(&server, target), admin, None)
            .await
            .problem(404, "not_found");
    }
}

async fn a_folder_with_sub_folders_cannot_be_deleted(server: Server) {
    let admin = Some(server.admin_secret.as_str());
    let parent = create(&server, "Parent", None).await;
    let child = create(&server, "Child", Some(&id(&parent))).await;
    let reply = call(
        &server,
        "DELETE",
        &folder(&server, &id(&parent)),
        admin,
        None,
    )
    .await;
    reply.problem(409, "folder_has_children");
    assert!(reply.body["detail"]
        .as_str()
        .expect("detail")
        .contains("delete them first"));
    assert_eq!(
        call(
            &server,
            "DELETE",
            &folder(&server, &id(&child)),
            admin,
            None
        )
        .await
        .status,
        204
    );
    assert_eq!(
        call(
            &server,
            "DELETE",
            &folder(&server, &id(&parent)),
            admin,
            None
        )
        .await
        .status,
        204
    );
}

async fn concurrent_creates_of_one_name_make_one_folder(server: Server) {
    let mut replies = Vec::new();
    for _ in 0..8 {
        let client = server.client.clone();
        let url = server.url(&folders(&server));
        let secret = server.admin_secret.clone();
        replies.push(tokio::spawn(async move {
            client
                .post(url)
                .bearer_auth(secret)
                .json(&json!({"name": "Race"}))
                .send()
                .await
                .expect("sent")
                .status()
                .as_u16()
        }));
    }
    let mut statuses = Vec::new();
    for reply in replies {
        statuses.push(reply.await.expect("join"));
    }
    statuses.sort_unstable();
    assert_eq!(statuses, [201, 409, 409, 409, 409, 409, 409, 409]);
}

blackbox!(
    full_life_cycle_of_a_folder_tree,
    list_returns_roots_and_children_sorted_by_name,
    every_operation_without_a_token_is_401,
    malformed_unknown_and_revoked_credentials_are_401,
    another_or_unknown_environment_is_401_for_every_operation,
    each_operation_needs_its_own_scope,
    legacy_keys_are_refused_on_folders,
    create_validates_name_and_parent_reporting_every_problem,
    folders_nest_at_most_three_levels,
    rename_validates_the_name_and_refuses_moves,
    sibling_names_conflict_on_create_and_rename,
    unknown_or_foreign_folders_are_404,
    a_folder_with_sub_folders_cannot_be_deleted,
    concurrent_creates_of_one_name_make_one_folder,
);
