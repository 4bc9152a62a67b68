//! Credentials over HTTP: bearer secrets, the token exchange, the Credentials API, the
//! environments list, the bootstrap file and the admin commands.

use base64::Engine;
use serde_json::json;

use crate::support::{blackbox, call, Reply, Server};

async fn token(server: &Server, basic: Option<(&str, &str)>, form: &str) -> Reply {
    let mut request = server
        .client
        .post(server.url("/oauth/token"))
        .header("content-type", "application/x-www-form-urlencoded")
        .body(form.to_owned());
    if let Some((id, secret)) = basic {
        let encoded = base64::engine::general_purpose::STANDARD.encode(format!("{id}:{secret}"));
        request = request.header("authorization", format!("Basic {encoded}"));
    }
    Reply::from(request.send().await.expect("sent")).await
}

async fn client_credentials_exchange_issues_a_usable_one_hour_token(server: Server) {
    let reply = token(
        &server,
        Some((&server.admin_client_id, &server.admin_secret)),
        "grant_type=client_credentials",
    )
    .await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    assert_eq!(reply.body["token_type"], "Bearer");
    assert_eq!(reply.body["expires_in"], 3600);
    assert_eq!(reply.header("cache-control"), Some("no-store"));
    let access = reply.body["access_token"]
        .as_str()
        .expect("token")
        .to_owned();
    assert_ne!(access, server.admin_secret);
    let listed = call(
        &server,
        "GET",
        &format!("/v1/{}/workbench-folder", server.env),
        Some(&access),
        None,
    )
    .await;
    assert_eq!(listed.status, 200, "the token works as a bearer");

    let form_post = token(
        &server,
        None,
        &format!(
            "grant_type=client_credentials&client_id={}&client_secret={}",
            server.admin_client_id, server.admin_secret
        ),
    )
    .await;
    assert_eq!(form_post.status, 200, "client_secret_post is accepted too");
}

async fn token_exchange_errors_follow_oauth_and_problem_shapes(server: Server) {
    let wrong = token(
        &server,
        Some((&server.admin_client_id, "wbs_wrong")),
        "grant_type=client_credentials",
    )
    .await;
    wrong.problem(401, "unauthorized");
    assert_eq!(wrong.body["error"], "invalid_client");
    assert_eq!(
        wrong.header("www-authenticate"),
        Some("Basic realm=\"workbench\"")
    );
    let unknown = token(
        &server,
        Some(("key_nope", &server.admin_secret)),
        "grant_type=client_credentials",
    )
    .await;
    assert_eq!(unknown.body["error"], "invalid_client");
    let anonymous = token(&server, None, "grant_type=client_credentials").await;
    assert_eq!(anonymous.status, 401);
    let grant = token(
        &server,
        Some((&server.admin_client_id, &server.admin_secret)),
        "grant_type=password",
    )
    .await;
    grant.problem(400, "unsupported_grant_type");
    assert_eq!(grant.body["error"], "unsupported_grant_type");
    let missing = token(
        &server,
        Some((&server.admin_client_id, &server.admin_secret)),
        "",
    )
    .await;
    missing.problem(400, "invalid_request");
    let json_body = call(
        &server,
        "POST",
        "/oauth/token",
        None,
        Some(json!({"grant_type": "client_credentials"})),
    )
    .await;
    json_body.problem(415, "unsupported_media_type");
}

async fn revoking_a_key_revokes_its_tokens(server: Server) {
    let auth = server.key(&["--role", "auth", "--role", "events"]);
    let created = call(
        &server,
        "POST",
        &format!("/v1/{}/credentials", server.env),
        Some(&auth),
        Some(json!({"role": "events"})),
    )
    .await;
    assert_eq!(created.status, 201, "{}", created.text);
    let id = created.body["data"]["clientId"]
        .as_str()
        .expect("id")
        .to_owned();
    let secret = created.body["data"]["clientSecret"]
        .as_str()
        .expect("secret")
        .to_owned();
    assert!(id.starts_with("key_") && secret.starts_with("wbs_"));
    let issued = token(
        &server,
        Some((&id, &secret)),
        "grant_type=client_credentials",
    )
    .await;
    let access = issued.body["access_token"]
        .as_str()
        .expect("token")
        .to_owned();
    assert_eq!(
        call(&server, "GET", "/v1/environments", Some(&access), None)
            .await
            .status,
        200
    );

    let revoked = call(
        &server,
        "DELETE",
        &format!("/v1/{}/credentials/{id}", server.env),
        Some(&auth),
        None,
    )
    .await;
    assert_eq!(revoked.status, 204);
    call(&server, "GET", "/v1/environments", Some(&access), None)
        .await
        .problem(401, "unauthorized");
    call(&server, "GET", "/v1/environments", Some(&secret), None)
        .await
        .problem(401, "unauthorized");
    token(
        &server,
        Some((&id, &secret)),
        "grant_type=client_credentials",
    )
    .await
    .problem(401, "unauthorized");
}

async fn credentials_api_needs_the_auth_role_or_scope_and_validates_roles(server: Server) {
    let path = format!("/v1/{}/credentials", server.env);
    let events = server.key(&["--role", "events"]);
    call(
        &server,
        "POST",
        &path,
        Some(&events),
        Some(json!({"role": "events"})),
    )
    .await
    .problem(403, "forbidden");
    let scoped = server.key(&["--scope", "credentials:write"]);
    for role in [json!("auth"), json!("admin"), json!(1)] {
        let reply = call(
            &server,
            "POST",
            &path,
            Some(&scoped),
            Some(json!({"role": role})),
        )
        .await;
        assert_eq!(reply.problem(400, "validation_failed"), ["role"], "{role}");
    }
    // Least privilege: `credentials:write` alone does not make a key that reads webhook
    // secrets; a key holding what `workbench` grants does.
    let denied = call(
        &server,
        "POST",
        &path,
        Some(&scoped),
        Some(json!({"role": "workbench"})),
    )
    .await;
    denied.problem(403, "forbidden");
    assert!(
        denied.text.contains("holds itself") && denied.text.contains("webhooks:read"),
        "{}",
        denied.text
    );
    let holder = server.key(&[
        "--scope",
        "credentials:write",
        "--scope",
        "webhooks:read",
        "--scope",
        "webhooks:write",
        "--scope",
        "notification_platforms:read",
        "--scope",
        "notification_platforms:write",
        "--scope",
        "sdk_keys:read",
        "--scope",
        "sdk_keys:write",
        "--scope",
        "users:read",
        "--scope",
        "users:write",
    ]);
    call(
        &server,
        "POST",
        &path,
        Some(&holder),
        Some(json!({"role": "events"})),
    )
    .await
    .problem(403, "forbidden");
    let made = call(
        &server,
        "POST",
        &path,
        Some(&holder),
        Some(json!({"role": "workbench"})),
    )
    .await;
    assert_eq!(made.status, 201, "{}", made.text);
    assert_eq!(
        made.body["data"].as_object().map(|o| o.len()),
        Some(2),
        "clientId and clientSecret only"
    );
    let workbench = made.body["data"]["clientSecret"]
        .as_str()
        .expect("secret")
        .to_owned();
    // The new key can use its environment, and only with its role's reach.
    let envs = call(&server, "GET", "/v1/environments", Some(&workbench), None).await;
    assert_eq!(envs.body["data"].as_array().map(Vec::len), Some(1));
    call(
        &server,
        "GET",
        &format!("/v1/{}/workbench-folder", server.env),
        Some(&workbench),
        None,
    )
    .await
    .problem(403, "forbidden");
    let unknown = call(
        &server,
        "DELETE",
        &format!("{path}/key_00000000000000000000000000"),
        Some(&scoped),
        None,
    )
    .await;
    unknown.problem(404, "not_found");
}

async fn environments_list_shows_only_granted_environments(server: Server) {
    let staging = server.other_env("staging");
    let all = call(
        &server,
        "GET",
        "/v1/environments",
        Some(&server.admin_secret),
        None,
    )
    .await;
    let ids: Vec<&str> = all.body["data"]
        .as_array()
        .expect("data")
        .iter()
        .map(|e| e["id"].as_str().expect("id"))
        .collect();
    assert_eq!(
        ids,
        [server.env.as_str(), staging.as_str()],
        "the bootstrap key holds every environment"
    );
    assert_eq!(all.body["data"][0]["name"], "development");
    assert_eq!(all.body["data"][0]["organisationId"], server.org.as_str());
    let only = server.key(&["--env", &staging, "--role", "events"]);
    let some = call(&server, "GET", "/v1/environments", Some(&only), None).await;
    assert_eq!(some.body["data"].as_array().map(Vec::len), Some(1));
    assert_eq!(some.body["data"][0]["id"], staging.as_str());
    call(&server, "GET", "/v1/environments", None, None)
        .await
        .problem(401, "unauthorized");
}

async fn bootstrap_file_is_private_and_written_once(server: Server) {
    use std::os::unix::fs::PermissionsExt;
    let path = server.data_dir().join("bootstrap-credentials.json");
    let mode = std::fs::metadata(&path).expect("file").permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    let boot: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).expect("read")).expect("json");
    assert_eq!(
        boot["scopes"].as_array().map(Vec::len),
        Some(domain::Scope::ALL.len()),
        "every scope, environment_settings:write and credentials:read among them"
    );
    // The log names the file, never the secret.
    let logs = server.logs();
    assert!(logs.contains("bootstrap-credentials.json"), "{logs}");
    assert!(!logs.contains(&server.admin_secret));
}

async fn secrets_never_reach_the_logs(server: Server) {
    let issued = token(
        &server,
        Some((&server.admin_client_id, &server.admin_secret)),
        "grant_type=client_credentials",
    )
    .await;
    let access = issued.body["access_token"]
        .as_str()
        .expect("token")
        .to_owned();
    call(&server, "GET", "/v1/environments", Some(&access), None).await;
    call(
        &server,
        "GET",
        "/v1/environments",
        Some("wbs_not_a_real_secret_value"),
        None,
    )
    .await;
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    let logs = server.logs();
    assert!(
        logs.contains("request completed"),
        "requests are logged: {logs}"
    );
    for secret in [
        server.admin_secret.as_str(),
        access.as_str(),
        "wbs_not_a_real_secret_value",
    ] {
        assert!(!logs.contains(secret), "a secret was logged");
    }
    assert!(
        !logs.contains(server.database_url()),
        "the database URL (it may hold a password) is never logged"
    );
}

async fn admin_commands_create_environments_and_keys(server: Server) {
    let env = server
        .admin(&["env", "create", "--name", "qa"])
        .expect("env");
    assert_eq!(env["organisationId"], server.org.as_str());
    let env_id = env["environmentId"].as_str().expect("id");
    assert!(env_id.starts_with("env_"));
    assert!(
        server.admin(&["env", "create", "--name", "qa"]).is_err(),
        "names are unique"
    );

    let key = server
        .admin(&[
            "key",
            "create",
            "--env",
            env_id,
            "--env",
            &server.env,
            "--role",
            "events",
            "--role",
            "workbench",
            "--name",
            "ci",
        ])
        .expect("key");
    let mut ids: Vec<&str> = key["environmentIds"]
        .as_array()
        .expect("ids")
        .iter()
        .map(|v| v.as_str().expect("id"))
        .collect();
    ids.sort_unstable();
    let mut expected = vec![env_id, server.env.as_str()];
    expected.sort_unstable();
    assert_eq!(ids, expected);
    assert_eq!(key["roles"], json!(["events", "workbench"]));
    assert_eq!(key["scopes"], json!([]));

    let all = server
        .admin(&["key", "create", "--all-envs", "--scope", "users:read"])
        .expect("all-envs key");
    assert_eq!(all["environmentIds"].as_array().map(Vec::len), Some(2));

    for bad in [
        vec![
            "key",
            "create",
            "--env",
            env_id,
            "--role",
            "events",
            "--scope",
            "users:read",
        ],
        vec!["key", "create", "--env", env_id],
        vec!["key", "create", "--env", "env_unknown", "--role", "events"],
        vec![
            "key",
            "create",
            "--env",
            env_id,
            "--scope",
            "folders:everything",
        ],
        vec!["key", "create", "--env", env_id, "--role", "root"],
    ] {
        assert!(server.admin(&bad).is_err(), "{bad:?}");
    }
}

/// Contract §16: a key of environment A alone cannot revoke a key of every environment (it
/// used to, which locked that key out of environments A's key had no say in).
async fn a_key_revokes_only_keys_within_its_own_environments(server: Server) {
    let revoke = |id: &str| format!("/v1/{}/credentials/{id}", server.env);
    let client_id = |args: &[&str]| -> String {
        let mut all = vec!["key", "create"];
        all.extend(args);
        let key = server.admin(&all).expect("key create");
        key["clientId"].as_str().expect("client id").to_owned()
    };
    let env = server.env.clone();
    let everywhere = client_id(&["--all-envs", "--role", "events"]);
    let here = client_id(&["--env", &env, "--role", "events"]);
    let local_admin = server.key(&["--scope", "credentials:write"]);
    call(
        &server,
        "DELETE",
        &revoke(&everywhere),
        Some(&local_admin),
        None,
    )
    .await
    .problem(403, "forbidden");
    let gone = call(&server, "DELETE", &revoke(&here), Some(&local_admin), None).await;
    assert_eq!(gone.status, 204, "{}", gone.text);
    let global_admin = server.key(&["--all-envs", "--scope", "credentials:write"]);
    let gone = call(
        &server,
        "DELETE",
        &revoke(&everywhere),
        Some(&global_admin),
        None,
    )
    .await;
    assert_eq!(gone.status, 204, "{}", gone.text);
}

/// Contract §16: credentials go in one place. Both the Basic header and the form is 400
/// `invalid_request`, even when both are right.
async fn credentials_in_the_header_and_the_form_together_are_refused(server: Server) {
    let (id, secret) = (server.admin_client_id.clone(), server.admin_secret.clone());
    let form = format!("grant_type=client_credentials&client_id={id}&client_secret={secret}");
    let both = token(&server, Some((&id, &secret)), &form).await;
    both.problem(400, "invalid_request");
    assert_eq!(both.body["error"], "invalid_request");
    let basic = token(
        &server,
        Some((&id, &secret)),
        "grant_type=client_credentials",
    )
    .await;
    assert_eq!(basic.status, 200, "{}", basic.text);
    let posted = token(&server, None, &form).await;
    assert_eq!(posted.status, 200, "{}", posted.text);
}

/// Contract §11: the keys that may use an environment are listed (never a secret or a hash),
/// with their last use, by a key that may read credentials; the admin commands list
/// environments and keys and revoke a key by its client id.
async fn keys_are_listed_and_revoked_by_the_api_and_the_admin_commands(server: Server) {
    let env = server.env.clone();
    let other = server.other_env("elsewhere");
    let reader = server.key(&["--scope", "credentials:read"]);
    let created = server
        .admin(&[
            "key", "create", "--env", &env, "--role", "events", "--name", "app",
        ])
        .expect("key");
    let app = created["clientId"].as_str().expect("id").to_owned();
    let app_secret = created["clientSecret"].as_str().expect("secret").to_owned();
    let _elsewhere = server.key(&["--env", &other, "--role", "events"]);
    // The app key authenticates once: its use is recorded.
    let used = call(
        &server,
        "GET",
        &format!("/v1/{env}/action-flow"),
        Some(&app_secret),
        None,
    )
    .await;
    assert_eq!(used.status, 200, "{}", used.text);

    // The use is written in the background: list until it shows (or the wait runs out).
    let credentials = format!("/v1/{env}/credentials");
    let mut listed = call(&server, "GET", &credentials, Some(&reader), None).await;
    for _ in 0..100 {
        let used = listed.body["data"].as_array().is_some_and(|keys| {
            keys.iter()
                .any(|k| k["clientId"] == app.as_str() && k["lastUsed"].is_string())
        });
        if used {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        listed = call(&server, "GET", &credentials, Some(&reader), None).await;
    }
    assert_eq!(listed.status, 200, "{}", listed.text);
    let keys = listed.body["data"].as_array().expect("data").clone();
    let ids: Vec<&str> = keys
        .iter()
        .map(|k| k["clientId"].as_str().expect("id"))
        .collect();
    // The bootstrap key (every environment), the reader and the app key; not the other
    // environment's key.
    assert_eq!(ids.len(), 3, "{}", listed.text);
    assert!(ids.contains(&app.as_str()) && ids.contains(&server.admin_client_id.as_str()));
    assert!(!listed.text.contains("wbs_") && !listed.text.contains(&app_secret));
    let app_row = keys
        .iter()
        .find(|k| k["clientId"] == app.as_str())
        .expect("app");
    assert_eq!(app_row["name"], "app");
    assert_eq!(app_row["roles"], json!(["events"]));
    assert_eq!(app_row["environmentIds"], json!([env]));
    assert_eq!(app_row["allEnvironments"], false);
    assert!(app_row["lastUsed"].is_string(), "{app_row}");
    assert!(app_row["revoked"].is_null());
    // Paging.
    let first = call(
        &server,
        "GET",
        &format!("/v1/{env}/credentials?limit=2"),
        Some(&reader),
        None,
    )
    .await;
    assert_eq!(first.body["data"].as_array().map(Vec::len), Some(2));
    let next = first.body["next"].as_str().expect("next");
    let rest = call(
        &server,
        "GET",
        &format!("/v1/{env}/credentials?limit=2&cursor={next}"),
        Some(&reader),
        None,
    )
    .await;
    assert_eq!(
        rest.body["data"].as_array().map(Vec::len),
        Some(1),
        "{}",
        rest.text
    );
    // A key that may not read credentials.
    assert_eq!(
        call(
            &server,
            "GET",
            &format!("/v1/{env}/credentials"),
            Some(&app_secret),
            None
        )
        .await
        .problem(403, "forbidden"),
        Vec::<String>::new()
    );

    let envs = server.admin(&["env", "list"]).expect("env list");
    let names: Vec<&str> = envs["data"]
        .as_array()
        .expect("data")
        .iter()
        .map(|e| e["name"].as_str().expect("name"))
        .collect();
    assert_eq!(names, ["development", "elsewhere"]);
    let in_env = server
        .admin(&["key", "list", "--env", &env])
        .expect("key list");
    assert_eq!(in_env["data"].as_array().map(Vec::len), Some(3), "{in_env}");
    let all = server.admin(&["key", "list"]).expect("key list");
    assert_eq!(all["data"].as_array().map(Vec::len), Some(4), "{all}");
    assert!(!all.to_string().contains("wbs_"));

    let revoked = server.admin(&["key", "revoke", &app]).expect("revoke");
    assert_eq!(revoked["revoked"], true);
    // The serving process reads a key again after a second (docs/operations.md).
    tokio::time::sleep(std::time::Duration::from_millis(1_100)).await;
    let after = call(
        &server,
        "GET",
        &format!("/v1/{env}/action-flow"),
        Some(&app_secret),
        None,
    )
    .await;
    assert_eq!(
        after.status, 401,
        "a revoked key stops working: {}",
        after.text
    );
    let listed = server
        .admin(&["key", "list", "--env", &env])
        .expect("key list");
    let row = listed["data"]
        .as_array()
        .expect("data")
        .iter()
        .find(|k| k["clientId"] == app.as_str())
        .cloned()
        .expect("still listed");
    assert!(row["revoked"].is_string(), "{row}");
    let unknown = server
        .admin(&["key", "revoke", "key_unknown"])
        .expect_err("unknown");
    assert!(
        unknown.contains("not found") || unknown.contains("no "),
        "{unknown}"
    );
}

blackbox!(
    keys_are_listed_and_revoked_by_the_api_and_the_admin_commands,
    credentials_in_the_header_and_the_form_together_are_refused,
    a_key_revokes_only_keys_within_its_own_environments,
    client_credentials_exchange_issues_a_usable_one_hour_token,
    token_exchange_errors_follow_oauth_and_problem_shapes,
    revoking_a_key_revokes_its_tokens,
    credentials_api_needs_the_auth_role_or_scope_and_validates_roles,
    environments_list_shows_only_granted_environments,
    bootstrap_file_is_private_and_written_once,
    secrets_never_reach_the_logs,
    admin_commands_create_environments_and_keys,
);
