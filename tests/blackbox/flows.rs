//! Action Flows over HTTP: create, file, draft, approve, publish, read versions, archive,
//! list; every get-config, publish, list and metadata row of spec section 7.

use serde_json::{json, Value};

use crate::support::{blackbox, call, Reply, Server};

fn config(card_name: &str) -> Value {
    json!({
        "type": "card",
        "version": "1",
        "initialSteps": ["s1"],
        "variables": {"firstName": {"type": "string", "source": "event", "default": "there"}},
        "steps": {"s1": {"id": "s1", "type": "create-card", "next": [], "properties": {"cardTemplateId": "t1", "output": {"type": "default"}}}},
        "cardTemplates": {"t1": {
            "metadata": {"cardName": card_name, "delivery": {"priority": 5}},
            "defaultView": {"content": [{"key": "h", "type": "headline", "attributes": {"text": "Hi %{firstName}"}}], "actions": []},
            "futureField": {"kept": true}
        }}
    })
}

fn flows(s: &Server) -> String {
    format!("/v1/{}/action-flow", s.env)
}

fn flow(s: &Server, id: &str, rest: &str) -> String {
    format!("/v1/{}/action-flow/{id}{rest}", s.env)
}

async fn create(s: &Server, body: Value) -> Value {
    let reply = call(s, "POST", &flows(s), Some(&s.admin_secret), Some(body)).await;
    assert_eq!(reply.status, 201, "{}", reply.text);
    reply.body["data"].clone()
}

fn id(v: &Value) -> String {
    v["id"].as_str().expect("id").to_owned()
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
    reply.body["data"]["id"]
        .as_str()
        .expect("folder id")
        .to_owned()
}

async fn names(s: &Server, query: &str) -> Vec<String> {
    let reply = call(
        s,
        "GET",
        &format!("{}{query}", flows(s)),
        Some(&s.admin_secret),
        None,
    )
    .await;
    assert_eq!(reply.status, 200, "{query}: {}", reply.text);
    reply.body["data"]
        .as_array()
        .expect("data")
        .iter()
        .map(|f| f["name"].as_str().expect("name").to_owned())
        .collect()
}

async fn the_whole_story_of_a_flow(s: Server) {
    let admin = Some(s.admin_secret.as_str());
    let reviewer = s.key(&[
        "--scope",
        "action_flows:read",
        "--scope",
        "action_flows:write",
    ]);
    let folder_id = folder(&s, "Onboarding").await;

    // Created with a config: version 1 is a draft; filed in a folder.
    let created = create(&s, json!({"name": "Welcome", "description": "First card", "folderId": folder_id, "config": config("Welcome")})).await;
    let fid = id(&created);
    assert!(fid.starts_with("flw_"));
    assert_eq!(created["status"], "draft");
    assert_eq!(created["folderId"], folder_id.as_str());
    assert_eq!(created["description"], "First card");
    assert_eq!(created["variables"]["firstName"]["type"], "string");
    assert_eq!(
        created["invocationUrl"],
        format!("{}/v1/{}/action-flow/{fid}/start", s.base, s.env)
    );
    assert_eq!(
        (
            created["latestVersion"].clone(),
            created["draftVersion"].clone()
        ),
        (json!(1), json!(1))
    );
    let v1 = call(&s, "GET", &flow(&s, &fid, "/config/1"), admin, None).await;
    assert_eq!(
        (
            v1.body["data"]["status"].clone(),
            v1.body["data"]["version"].clone()
        ),
        (json!("DRAFT"), json!(1))
    );
    assert_eq!(
        v1.body["data"]["config"]["cardTemplates"]["t1"]["futureField"]["kept"], true,
        "unknown fields are kept"
    );

    // Approvals on: only an approved draft can be published, approved by someone else.
    let on = call(
        &s,
        "PUT",
        &format!("/v1/{}/settings", s.env),
        admin,
        Some(json!({"approvalsEnabled": true})),
    )
    .await;
    assert_eq!(on.body["data"]["approvalsEnabled"], true);
    call(
        &s,
        "POST",
        &flow(&s, &fid, "/config/draft/publish"),
        admin,
        None,
    )
    .await
    .problem(403, "approvals_enabled");
    call(
        &s,
        "POST",
        &flow(&s, &fid, "/config/draft/approve"),
        admin,
        None,
    )
    .await
    .problem(403, "forbidden");
    let approved = call(
        &s,
        "POST",
        &flow(&s, &fid, "/config/draft/approve"),
        Some(&reviewer),
        None,
    )
    .await;
    assert_eq!(approved.status, 200, "{}", approved.text);
    assert_eq!(
        approved.body["data"]["approvedBy"]
            .as_str()
            .map(|k| k.starts_with("key_")),
        Some(true)
    );
    let published = call(
        &s,
        "POST",
        &flow(&s, &fid, "/config/draft/publish"),
        admin,
        None,
    )
    .await;
    assert_eq!(published.status, 200, "{}", published.text);
    assert_eq!(
        (
            published.body["data"]["status"].clone(),
            published.body["data"]["version"].clone()
        ),
        (json!("PUBLISHED"), json!(1))
    );
    call(
        &s,
        "POST",
        &flow(&s, &fid, "/config/publish"),
        admin,
        Some(config("Direct")),
    )
    .await
    .problem(403, "approvals_enabled");

    // Approvals off: publish with a body makes version 2; version 1 stays readable.
    call(
        &s,
        "PUT",
        &format!("/v1/{}/settings", s.env),
        admin,
        Some(json!({"approvalsEnabled": false})),
    )
    .await;
    let v2 = call(
        &s,
        "POST",
        &flow(&s, &fid, "/config/publish"),
        admin,
        Some(config("Welcome v2")),
    )
    .await;
    assert_eq!(
        (
            v2.status,
            v2.body["data"]["version"].clone(),
            v2.body["data"]["status"].clone()
        ),
        (200, json!(2), json!("PUBLISHED")),
        "{}",
        v2.text
    );
    for (which, version, card) in [
        ("1", 1, "Welcome"),
        ("2", 2, "Welcome v2"),
        ("latest", 2, "Welcome v2"),
    ] {
        let got = call(
            &s,
            "GET",
            &flow(&s, &fid, &format!("/config/{which}")),
            admin,
            None,
        )
        .await;
        assert_eq!(got.status, 200);
        assert_eq!(got.body["data"]["version"], version, "{which}");
        assert_eq!(got.body["data"]["status"], "PUBLISHED", "{which}");
        assert_eq!(
            got.body["data"]["config"]["cardTemplates"]["t1"]["metadata"]["cardName"], card,
            "{which}"
        );
    }

    // A draft: latest is the draft; a publish with a body is refused while it exists.
    let draft = call(
        &s,
        "PUT",
        &flow(&s, &fid, "/config/draft"),
        admin,
        Some(json!({"config": config("Draft 3")})),
    )
    .await;
    assert_eq!(
        (
            draft.status,
            draft.body["data"]["version"].clone(),
            draft.body["data"]["status"].clone()
        ),
        (200, json!(3), json!("DRAFT")),
        "{}",
        draft.text
    );
    let latest = call(&s, "GET", &flow(&s, &fid, "/config/latest"), admin, None).await;
    assert_eq!(latest.body["data"]["version"], 3);
    call(
        &s,
        "POST",
        &flow(&s, &fid, "/config/publish"),
        admin,
        Some(config("x")),
    )
    .await
    .problem(409, "draft_exists");
    assert_eq!(
        call(&s, "DELETE", &flow(&s, &fid, "/config/draft"), admin, None)
            .await
            .status,
        204
    );
    call(&s, "DELETE", &flow(&s, &fid, "/config/draft"), admin, None)
        .await
        .problem(404, "not_found");
    call(&s, "GET", &flow(&s, &fid, "/config/3"), admin, None)
        .await
        .problem(404, "not_found");
    let v4 = call(
        &s,
        "POST",
        &flow(&s, &fid, "/config/publish"),
        admin,
        Some(config("Four")),
    )
    .await;
    assert_eq!(
        v4.body["data"]["version"], 4,
        "a discarded draft's number is not reused"
    );

    // Archive: versions show ARCHIVED, publishing is refused, filters follow.
    let archived = call(&s, "POST", &flow(&s, &fid, "/archive"), admin, None).await;
    assert_eq!(archived.body["data"]["status"], "archived");
    assert_eq!(
        call(&s, "GET", &flow(&s, &fid, "/config/latest"), admin, None)
            .await
            .body["data"]["status"],
        "ARCHIVED"
    );
    call(
        &s,
        "POST",
        &flow(&s, &fid, "/config/publish"),
        admin,
        Some(config("x")),
    )
    .await
    .problem(409, "flow_archived");
    assert_eq!(names(&s, "?status=ARCHIVED").await, ["Welcome"]);
    assert!(names(&s, "?status=PUBLISHED").await.is_empty());
    let back = call(&s, "POST", &flow(&s, &fid, "/unarchive"), admin, None).await;
    assert_eq!(back.body["data"]["status"], "active");
    assert_eq!(names(&s, "?status=PUBLISHED").await, ["Welcome"]);

    // Deleting its folder leaves it Uncategorized.
    assert_eq!(
        names(&s, &format!("?folderId={folder_id}")).await,
        ["Welcome"]
    );
    assert_eq!(
        call(
            &s,
            "DELETE",
            &format!("/v1/{}/workbench-folder/{folder_id}", s.env),
            admin,
            None
        )
        .await
        .status,
        204
    );
    let after = call(&s, "GET", &flow(&s, &fid, ""), admin, None).await;
    assert_eq!(after.body["data"]["folderId"], Value::Null);
    assert_eq!(names(&s, "?uncategorized=true").await, ["Welcome"]);
}

async fn list_filters_apply_together_and_pages_chain(s: Server) {
    let admin = Some(s.admin_secret.as_str());
    let folder_id = folder(&s, "F").await;
    let mut ids = Vec::new();
    for (name, in_folder) in [
        ("Welcome Über", true),
        ("welcome back", false),
        ("Receipt", true),
        ("WELCOME old", false),
    ] {
        let body = if in_folder {
            json!({"name": name, "folderId": folder_id})
        } else {
            json!({"name": name})
        };
        ids.push(id(&create(&s, body).await));
    }
    call(
        &s,
        "POST",
        &flow(&s, &ids[1], "/config/publish"),
        admin,
        Some(config("c")),
    )
    .await;
    call(
        &s,
        "POST",
        &flow(&s, &ids[2], "/config/publish"),
        admin,
        Some(config("c")),
    )
    .await;
    call(&s, "POST", &flow(&s, &ids[3], "/archive"), admin, None).await;

    assert_eq!(
        names(&s, "").await,
        ["WELCOME old", "Receipt", "welcome back", "Welcome Über"],
        "newest first"
    );
    assert_eq!(
        names(&s, "?name=welcome").await,
        ["WELCOME old", "welcome back", "Welcome Über"]
    );
    assert_eq!(
        names(&s, "?name=%C3%BCBER").await,
        ["Welcome Über"],
        "case-insensitive beyond ASCII"
    );
    assert_eq!(
        names(&s, "?status=PUBLISHED").await,
        ["Receipt", "welcome back"]
    );
    assert_eq!(names(&s, "?status=DRAFT").await, ["Welcome Über"]);
    assert_eq!(
        names(&s, "?status=published&name=WELCOME").await,
        ["welcome back"]
    );
    assert_eq!(
        names(&s, &format!("?folderId={folder_id}")).await,
        ["Receipt", "Welcome Über"]
    );
    assert_eq!(
        names(&s, "?uncategorized=true&status=ARCHIVED").await,
        ["WELCOME old"]
    );

    let first = call(&s, "GET", &format!("{}?limit=3", flows(&s)), admin, None).await;
    assert_eq!(first.body["data"].as_array().map(Vec::len), Some(3));
    let cursor = first.body["next"]
        .as_str()
        .expect("a next cursor")
        .to_owned();
    let second = call(
        &s,
        "GET",
        &format!("{}?limit=3&cursor={cursor}", flows(&s)),
        admin,
        None,
    )
    .await;
    assert_eq!(second.body["data"].as_array().map(Vec::len), Some(1));
    assert_eq!(second.body["next"], Value::Null);

    let bad = call(
        &s,
        "GET",
        &format!(
            "{}?status=LIVE&limit=0&cursor=%%%&uncategorized=maybe",
            flows(&s)
        ),
        admin,
        None,
    )
    .await;
    let mut fields = bad.problem(400, "validation_failed");
    fields.sort();
    assert_eq!(fields, ["cursor", "limit", "status", "uncategorized"]);
    let both = call(
        &s,
        "GET",
        &format!("{}?folderId={folder_id}&uncategorized=true", flows(&s)),
        admin,
        None,
    )
    .await;
    assert_eq!(both.problem(400, "validation_failed"), ["folderId"]);
    call(&s, "GET", &format!("{}?limit=501", flows(&s)), admin, None)
        .await
        .problem(400, "validation_failed");
}

/// Contract §21's steps are checked by every rule at publish, each problem at its path, and
/// nothing is stored; a configuration that passes them publishes, and saves as a draft.
async fn steps_that_wait_are_checked_at_publish(s: Server) {
    let fid = id(&create(&s, json!({"name": "Waits"})).await);
    let mut bad = config("Hello");
    bad["steps"]["s1"]["next"] = json!(["pause"]);
    bad["steps"]["pause"] = json!({"id": "pause", "type": "wait",
        "properties": {"duration": "P400D"}, "next": []});
    bad["steps"]["listen"] = json!({"id": "listen", "type": "wait-for-card",
        "properties": {"cardStep": "s1", "timeout": "PT1H"}, "next": ["pause"]});
    bad["initialSteps"] = json!(["s1", "listen"]);
    let publish = flow(&s, &fid, "/config/publish");
    let admin = Some(s.admin_secret.as_str());
    let fields = call(&s, "POST", &publish, admin, Some(bad.clone()))
        .await
        .problem(400, "invalid_config");
    for wanted in [
        "config.steps.pause.properties.duration",
        "config.steps.listen.next",
        "config.steps.listen.properties.cardStep",
    ] {
        assert!(fields.iter().any(|f| f == wanted), "{wanted}: {fields:?}");
    }
    call(&s, "GET", &flow(&s, &fid, "/config/latest"), admin, None)
        .await
        .problem(404, "not_found");
    let mut good = config("Hello");
    good["steps"]["s1"]["next"] = json!(["pause"]);
    good["steps"]["pause"] = json!({"id": "pause", "type": "wait",
        "properties": {"duration": "P1D"}, "next": []});
    let published = call(&s, "POST", &publish, admin, Some(good.clone())).await;
    assert!(published.status < 300, "{}", published.text);
    let draft = call(
        &s,
        "PUT",
        &flow(&s, &fid, "/config/draft"),
        admin,
        Some(good),
    )
    .await;
    assert!(draft.status < 300, "{}", draft.text);
}

async fn publish_reports_every_config_problem_with_its_path(s: Server) {
    let fid = id(&create(&s, json!({"name": "F"})).await);
    let mut bad = config("");
    bad["steps"]["s1"]["properties"]["cardTemplateId"] = json!("missing");
    bad["steps"]["s1"]["next"] = json!(["ghost"]);
    bad["cardTemplates"]["t1"]["metadata"]["delivery"]["priority"] = json!(11);
    let reply = call(
        &s,
        "POST",
        &flow(&s, &fid, "/config/publish"),
        Some(&s.admin_secret),
        Some(bad),
    )
    .await;
    let fields = reply.problem(400, "invalid_config");
    assert_eq!(
        fields,
        [
            "config.cardTemplates.t1.metadata.cardName",
            "config.cardTemplates.t1.metadata.delivery.priority",
            "config.steps.s1.next[0]",
            "config.steps.s1.properties.cardTemplateId",
        ]
    );
    let nothing = call(
        &s,
        "GET",
        &flow(&s, &fid, "/config/latest"),
        Some(&s.admin_secret),
        None,
    )
    .await;
    nothing.problem(404, "not_found");
    let draft = call(
        &s,
        "PUT",
        &flow(&s, &fid, "/config/draft"),
        Some(&s.admin_secret),
        Some(json!({"type": "card"})),
    )
    .await;
    draft.problem(400, "invalid_config");
    let create_bad = call(
        &s,
        "POST",
        &flows(&s),
        Some(&s.admin_secret),
        Some(json!({"name": "", "config": {"type": "sms"}})),
    )
    .await;
    let fields = create_bad.problem(400, "invalid_config");
    assert_eq!(fields[0], "name");
    let no_name = call(
        &s,
        "POST",
        &flows(&s),
        Some(&s.admin_secret),
        Some(json!({"description": 3})),
    )
    .await;
    assert_eq!(
        no_name.problem(400, "validation_failed"),
        ["name", "description"]
    );
}

async fn config_reads_answer_404_and_400_precisely(s: Server) {
    let admin = Some(s.admin_secret.as_str());
    let fid = id(&create(&s, json!({"name": "F", "config": config("c")})).await);
    call(&s, "GET", &flow(&s, &fid, "/config/2"), admin, None)
        .await
        .problem(404, "not_found");
    call(
        &s,
        "GET",
        &flow(&s, "flw_00000000000000000000000000", "/config/1"),
        admin,
        None,
    )
    .await
    .problem(404, "not_found");
    for bad in ["abc", "0", "-1", "1.5"] {
        let reply = call(
            &s,
            "GET",
            &flow(&s, &fid, &format!("/config/{bad}")),
            admin,
            None,
        )
        .await;
        assert_eq!(
            reply.problem(400, "validation_failed"),
            ["flowConfigVersion"],
            "{bad}"
        );
    }
    // Another environment's flow is not found here.
    let other = s.other_env("staging");
    let theirs = call(
        &s,
        "POST",
        &format!("/v1/{other}/action-flow"),
        admin,
        Some(json!({"name": "theirs"})),
    )
    .await;
    let theirs = id(&theirs.body["data"]);
    call(&s, "GET", &flow(&s, &theirs, "/config/latest"), admin, None)
        .await
        .problem(404, "not_found");
    call(&s, "GET", &flow(&s, &theirs, ""), admin, None)
        .await
        .problem(404, "not_found");
    call(
        &s,
        "POST",
        &flow(&s, &theirs, "/config/publish"),
        admin,
        Some(config("x")),
    )
    .await
    .problem(404, "not_found");
}

async fn metadata_updates_name_description_and_folder(s: Server) {
    let admin = Some(s.admin_secret.as_str());
    let fid = id(&create(&s, json!({"name": "Old"})).await);
    let folder_id = folder(&s, "Here").await;
    let other = s.other_env("staging");
    let foreign = call(
        &s,
        "POST",
        &format!("/v1/{other}/workbench-folder"),
        admin,
        Some(json!({"name": "There"})),
    )
    .await;
    let foreign = foreign.body["data"]["id"].as_str().expect("id").to_owned();

    let renamed = call(&s, "PUT", &flow(&s, &fid, ""), admin, Some(json!({"actionFlow": {"name": "New", "description": "Now described", "folderId": folder_id}}))).await;
    assert_eq!(renamed.status, 200, "{}", renamed.text);
    assert_eq!(renamed.body["data"]["name"], "New");
    assert_eq!(renamed.body["data"]["description"], "Now described");
    assert_eq!(renamed.body["data"]["folderId"], folder_id.as_str());
    let unfiled = call(
        &s,
        "PUT",
        &flow(&s, &fid, ""),
        admin,
        Some(json!({"actionFlow": {"folderId": null}})),
    )
    .await;
    assert_eq!(unfiled.body["data"]["folderId"], Value::Null);
    assert_eq!(unfiled.body["data"]["name"], "New", "fields not sent stay");

    for (body, field) in [
        (
            json!({"actionFlow": {"folderId": foreign}}),
            "actionFlow.folderId",
        ),
        (
            json!({"actionFlow": {"folderId": "fld_00000000000000000000000000"}}),
            "actionFlow.folderId",
        ),
        (json!({"actionFlow": {"name": ""}}), "actionFlow.name"),
        (json!({"actionFlow": {"name": 5}}), "actionFlow.name"),
        (json!({"actionFlow": {}}), "actionFlow"),
        (json!({"name": "top level"}), "actionFlow"),
    ] {
        let reply = call(&s, "PUT", &flow(&s, &fid, ""), admin, Some(body.clone())).await;
        assert_eq!(reply.problem(400, "validation_failed"), [field], "{body}");
    }
    call(
        &s,
        "PUT",
        &flow(&s, "flw_00000000000000000000000000", ""),
        admin,
        Some(json!({"actionFlow": {"name": "x"}})),
    )
    .await
    .problem(404, "not_found");
}

async fn credentials_roles_and_scopes_on_flows(s: Server) {
    let fid = id(&create(&s, json!({"name": "F", "config": config("c")})).await);
    let paths = [
        ("GET", flows(&s), None),
        ("POST", flows(&s), Some(json!({"name": "x"}))),
        ("GET", flow(&s, &fid, "/config/latest"), None),
        (
            "PUT",
            flow(&s, &fid, ""),
            Some(json!({"actionFlow": {"name": "y"}})),
        ),
        ("POST", flow(&s, &fid, "/config/publish"), Some(config("c"))),
    ];
    let other = s.other_env("staging");
    let elsewhere = s.key(&["--env", &other, "--role", "events"]);
    let workbench = s.key(&["--role", "workbench"]);
    for (method, path, body) in &paths {
        call(&s, method, path, None, body.clone())
            .await
            .problem(401, "unauthorized");
        call(&s, method, path, Some(&elsewhere), body.clone())
            .await
            .problem(401, "unauthorized");
        call(&s, method, path, Some(&workbench), body.clone())
            .await
            .problem(403, "forbidden");
    }
    let events = s.key(&["--role", "events"]);
    assert_eq!(
        call(&s, "GET", &flows(&s), Some(&events), None)
            .await
            .status,
        200
    );
    let created = call(
        &s,
        "POST",
        &flows(&s),
        Some(&events),
        Some(json!({"name": "by events"})),
    )
    .await;
    assert_eq!(created.status, 201, "the legacy events role writes flows");
    let reader = s.key(&["--scope", "action_flows:read"]);
    assert_eq!(
        call(&s, "GET", &flow(&s, &fid, "/config/1"), Some(&reader), None)
            .await
            .status,
        200
    );
    call(
        &s,
        "POST",
        &flow(&s, &fid, "/config/draft/publish"),
        Some(&reader),
        None,
    )
    .await
    .problem(403, "forbidden");
    call(
        &s,
        "PUT",
        &format!("/v1/{}/settings", s.env),
        Some(&reader),
        Some(json!({"approvalsEnabled": true})),
    )
    .await
    .problem(403, "forbidden");
    // The keys whose drafts approvals check cannot switch them off (contract §16).
    let settings = format!("/v1/{}/settings", s.env);
    let off = Some(json!({"approvalsEnabled": false}));
    let drafter = s.key(&[
        "--scope",
        "action_flows:write",
        "--scope",
        "action_flows:read",
    ]);
    for key in [&events, &drafter] {
        call(&s, "PUT", &settings, Some(key), off.clone())
            .await
            .problem(403, "forbidden");
    }
    for allowed in [
        s.key(&["--scope", "environment_settings:write"]),
        s.key(&["--role", "auth"]),
    ] {
        let answer = call(&s, "PUT", &settings, Some(&allowed), off.clone()).await;
        assert_eq!(answer.status, 200, "{}", answer.text);
    }
    let bad = call(
        &s,
        "PUT",
        &format!("/v1/{}/settings", s.env),
        Some(&s.admin_secret),
        Some(json!({"approvalsEnabled": "yes"})),
    )
    .await;
    assert_eq!(bad.problem(400, "validation_failed"), ["approvalsEnabled"]);
}

async fn racing_publishes_never_share_a_version_number(s: Server) {
    let fid = id(&create(&s, json!({"name": "Race"})).await);
    let mut tasks = Vec::new();
    for i in 0..12 {
        let client = s.client.clone();
        let url = s.url(&flow(&s, &fid, "/config/publish"));
        let secret = s.admin_secret.clone();
        tasks.push(tokio::spawn(async move {
            Reply::from(
                client
                    .post(url)
                    .bearer_auth(secret)
                    .json(&config(&format!("c{i}")))
                    .send()
                    .await
                    .expect("sent"),
            )
            .await
        }));
    }
    let mut versions = Vec::new();
    for task in tasks {
        let reply = task.await.expect("join");
        match reply.status {
            200 => versions.push(reply.body["data"]["version"].as_u64().expect("version")),
            409 => assert_eq!(reply.body["code"], "concurrent_change"),
            other => panic!("{other}: {}", reply.text),
        }
    }
    let published = versions.len();
    versions.sort_unstable();
    versions.dedup();
    assert_eq!(versions.len(), published, "no duplicate version numbers");
    assert!(published >= 1);
    let latest = call(
        &s,
        "GET",
        &flow(&s, &fid, "/config/latest"),
        Some(&s.admin_secret),
        None,
    )
    .await;
    assert_eq!(
        latest.body["data"]["version"].as_u64(),
        versions.last().copied()
    );
}

/// Contract §16: a name that could mislead a reader is refused wherever a name is given: bidi
/// controls (which reorder what is shown) and names made only of invisible characters.
async fn misleading_names_are_refused_everywhere(s: Server) {
    let admin = Some(s.admin_secret.as_str());
    let filter =
        json!({"match": "all", "conditions": [{"field": "id", "op": "eq", "value": "u1"}]});
    for name in [
        "invoice\u{202e}fdp.exe",
        "\u{200b}\u{200b}",
        "x\u{2066}y",
        "\u{3164}",
    ] {
        for (path, body) in [
            (flows(&s), json!({"name": name})),
            (
                format!("/v1/{}/segments", s.env),
                json!({"name": name, "filter": filter}),
            ),
            (format!("/v1/{}/streams", s.env), json!({"name": name})),
        ] {
            let reply = call(&s, "POST", &path, admin, Some(body)).await;
            assert_eq!(
                reply.problem(400, "validation_failed"),
                ["name"],
                "{path} {name:?}"
            );
        }
    }
    let fine = call(
        &s,
        "POST",
        &flows(&s),
        admin,
        Some(json!({"name": "Café 🎉"})),
    )
    .await;
    assert_eq!(fine.status, 201, "{}", fine.text);
}

blackbox!(
    steps_that_wait_are_checked_at_publish,
    misleading_names_are_refused_everywhere,
    the_whole_story_of_a_flow,
    list_filters_apply_together_and_pages_chain,
    publish_reports_every_config_problem_with_its_path,
    config_reads_answer_404_and_400_precisely,
    metadata_updates_name_description_and_folder,
    credentials_roles_and_scopes_on_flows,
    racing_publishes_never_share_a_version_number,
);
