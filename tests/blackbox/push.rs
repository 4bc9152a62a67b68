//! Push notification platforms over HTTP: the four kinds, validation, the life cycle, and
//! credentials that never leave (responses, logs, the database in plaintext).

use adapters_diesel::testing::raw_texts;
use std::time::Duration;

use adapters_push::fake::FakeProviders;
use adapters_push::testing::{p8_key, push_certificate, service_account, CertificateSpec};
use serde_json::{json, Value};

use crate::support::{blackbox, call, Reply, Server};
use crate::trigger::{feed, finished, fire, flow_publishing, invocation_id, users};

async fn platforms(s: &Server, method: &str, body: Option<Value>) -> Reply {
    call(
        s,
        method,
        &format!("/v1/{}/notification-platforms", s.env),
        Some(&s.admin_secret),
        body,
    )
    .await
}

async fn enabled(s: &Server, id: &str, on: bool) -> Reply {
    call(
        s,
        "PUT",
        &format!("/v1/{}/notification-platform-enabled", s.env),
        Some(&s.admin_secret),
        Some(json!({"id": id, "enabled": on})),
    )
    .await
}

async fn the_four_kinds_are_accepted_or_refused_as_the_contract_says(s: Server) {
    let sa = service_account("demo-project");
    let created = platforms(&s, "POST", Some(json!({"appId": "com.example.android", "platform": "GCM", "platformCredential": sa, "platformPrincipal": "", "platformProperties": {"channelId": "news"}}))).await;
    assert_eq!(created.status, 201, "{}", created.text);
    assert_eq!(
        created.body["data"]["arn"],
        format!("arn:workbench:push:{}:app/GCM/com.example.android", s.env)
    );
    platforms(&s, "POST", Some(json!({"appId": "com.example.android", "platform": "GCM", "platformCredential": sa, "platformPrincipal": ""})))
        .await
        .problem(409, "platform_exists");
    let legacy = platforms(&s, "POST", Some(json!({"appId": "legacy", "platform": "GCM", "platformCredential": "AAAAxyz123:APA91bH-legacy-server-key"}))).await;
    legacy.problem(400, "legacy_fcm_key_unsupported");
    assert!(legacy.body["detail"]
        .as_str()
        .expect("detail")
        .contains("HTTP v1"));

    let cert = push_certificate(CertificateSpec::default());
    let ios = platforms(&s, "POST", Some(json!({"appId": "com.example.app", "platform": "APNS_SANDBOX", "platformCredential": cert.private_key, "platformPrincipal": cert.certificate}))).await;
    assert_eq!(ios.status, 201, "{}", ios.text);
    let p8 = p8_key();
    let token = platforms(&s, "POST", Some(json!({"appId": "com.example.app", "platform": "APNS", "platformCredential": p8, "platformPrincipal": "KEY1234567", "platformProperties": {"teamId": "TEAM123456", "bundleId": "com.example.app"}}))).await;
    assert_eq!(token.status, 201, "{}", token.text);

    let list = platforms(&s, "GET", None).await;
    assert_eq!(list.status, 200, "{}", list.text);
    let items = list.body["data"].as_array().expect("items");
    assert_eq!(items.len(), 3);
    for item in items {
        assert_eq!(item["type"], "push-notification-platform");
        assert!(item["id"].as_str().expect("id").starts_with("npl_"));
        let a = &item["attributes"];
        assert_eq!(a["enabled"], true);
        assert_eq!(a["attributes"]["Enabled"], "true");
        assert!(a["created"].is_string() && a["arn"].is_string() && a["appId"].is_string());
    }
    let by = |platform: &str| {
        items
            .iter()
            .find(|i| i["attributes"]["platform"] == platform)
            .expect(platform)
            .clone()
    };
    assert_eq!(
        by("APNS_SANDBOX")["attributes"]["attributes"]["AppleCertificateExpirationDate"],
        "2099-01-01T00:00:00Z"
    );
    assert_eq!(
        by("APNS_SANDBOX")["attributes"]["attributes"]["BundleId"],
        "com.example.app"
    );
    assert_eq!(
        by("GCM")["attributes"]["attributes"]["ProjectId"],
        "demo-project"
    );
    assert_eq!(
        by("APNS")["attributes"]["attributes"]["KeyId"],
        "KEY1234567"
    );
    assert!(by("APNS")["attributes"]["attributes"]
        .get("AppleCertificateExpirationDate")
        .is_none());
    // Credentials never come back, are never logged, and are not stored in plaintext.
    for secret in ["PRIVATE KEY", "private_key"] {
        assert!(!list.text.contains(secret), "{secret} in the list");
        assert!(!s.logs().contains(secret), "{secret} in the logs");
    }
    for stored in raw_texts(
        s.database_url(),
        "SELECT credential || ' ' || COALESCE(principal, '') AS v FROM push_platforms",
    ) {
        assert!(stored.starts_with("v1."), "sealed: {stored:.40}");
        assert!(
            !stored.contains("PRIVATE KEY")
                && !stored.contains("service_account")
                && !stored.contains("CERTIFICATE")
        );
    }
}

async fn credentials_are_validated_field_by_field(s: Server) {
    let expired = push_certificate(CertificateSpec {
        expires_year: 2021,
        ..Default::default()
    });
    let fields = platforms(&s, "POST", Some(json!({"appId": "a", "platform": "APNS_SANDBOX", "platformCredential": expired.private_key, "platformPrincipal": expired.certificate})))
        .await
        .problem(400, "validation_failed");
    assert_eq!(fields, ["platformPrincipal"]);
    let dev = push_certificate(CertificateSpec {
        production: false,
        ..Default::default()
    });
    let other = push_certificate(CertificateSpec::default());
    let fields = platforms(&s, "POST", Some(json!({"appId": "a", "platform": "APNS", "platformCredential": other.private_key, "platformPrincipal": dev.certificate})))
        .await
        .problem(400, "validation_failed");
    assert_eq!(
        fields,
        ["platformPrincipal", "platformCredential"],
        "production flag and key mismatch"
    );
    let fields = platforms(&s, "POST", Some(json!({"appId": "a", "platform": "APNS", "platformCredential": "nope", "platformPrincipal": "short", "platformProperties": {"teamId": "x"}})))
        .await
        .problem(400, "validation_failed");
    assert_eq!(
        fields,
        [
            "platformPrincipal",
            "platformProperties.teamId",
            "platformProperties.bundleId",
            "platformCredential"
        ]
    );
    let fields = platforms(&s, "POST", Some(json!({"appId": "bad app!", "platform": "WNS", "platformProperties": {"colour": "red"}})))
        .await
        .problem(400, "validation_failed");
    assert_eq!(
        fields,
        [
            "platformCredential",
            "appId",
            "platform",
            "platformProperties.colour"
        ]
    );
    let fields = platforms(&s, "POST", Some(json!({"appId": "a", "platform": "FCM", "platformCredential": "{\"type\": \"service_account\"}"})))
        .await
        .problem(400, "validation_failed");
    assert!(
        fields.iter().all(|f| f == "platformCredential") && fields.len() >= 3,
        "{fields:?}"
    );
}

async fn update_enable_disable_and_delete(s: Server) {
    let sa = service_account("first");
    let created = platforms(
        &s,
        "POST",
        Some(json!({"appId": "app", "platform": "FCM", "platformCredential": sa})),
    )
    .await;
    let id = created.body["data"]["id"].as_str().expect("id").to_owned();
    let updated = platforms(&s, "PUT", Some(json!({"appId": "app", "platform": "FCM", "platformCredential": service_account("second")}))).await;
    assert_eq!(updated.status, 200, "{}", updated.text);
    assert_eq!(updated.body["data"]["id"], id.as_str());
    let list = platforms(&s, "GET", None).await;
    assert_eq!(
        list.body["data"][0]["attributes"]["attributes"]["ProjectId"],
        "second"
    );
    platforms(
        &s,
        "PUT",
        Some(json!({"appId": "other", "platform": "FCM", "platformCredential": sa})),
    )
    .await
    .problem(404, "not_found");
    platforms(
        &s,
        "PUT",
        Some(json!({"appId": "app", "platform": "FCM", "platformCredential": "legacy-key"})),
    )
    .await
    .problem(400, "legacy_fcm_key_unsupported");

    platforms(
        &s,
        "DELETE",
        Some(json!({"appId": "app", "platform": "FCM"})),
    )
    .await
    .problem(409, "platform_enabled");
    let off = enabled(&s, &id, false).await;
    assert_eq!(off.status, 200, "{}", off.text);
    assert_eq!(off.body["data"]["attributes"]["enabled"], false);
    assert_eq!(
        off.body["data"]["attributes"]["attributes"]["Enabled"],
        "false"
    );
    enabled(&s, "npl_missing", true)
        .await
        .problem(404, "not_found");
    let fields = call(
        &s,
        "PUT",
        &format!("/v1/{}/notification-platform-enabled", s.env),
        Some(&s.admin_secret),
        Some(json!({"enabled": "yes"})),
    )
    .await
    .problem(400, "validation_failed");
    assert_eq!(fields, ["id", "enabled"]);
    platforms(
        &s,
        "DELETE",
        Some(json!({"appId": "app", "platform": "APNS"})),
    )
    .await
    .problem(404, "not_found");
    platforms(&s, "DELETE", Some(json!({"appId": "app"})))
        .await
        .problem(400, "validation_failed");
    assert_eq!(
        platforms(
            &s,
            "DELETE",
            Some(json!({"appId": "app", "platform": "FCM"}))
        )
        .await
        .status,
        204
    );
    assert_eq!(platforms(&s, "GET", None).await.body["data"], json!([]));

    let events = s.key(&["--role", "events"]);
    call(
        &s,
        "GET",
        &format!("/v1/{}/notification-platforms", s.env),
        Some(&events),
        None,
    )
    .await
    .problem(403, "forbidden");
    let workbench = s.key(&["--role", "workbench"]);
    call(
        &s,
        "GET",
        &format!("/v1/{}/notification-platforms", s.other_env("Other")),
        Some(&workbench),
        None,
    )
    .await
    .problem(401, "unauthorized");
}

async fn devices_register_move_and_unregister(s: Server) {
    let path = |user: &str, token: &str| format!("/v1/{}/users/{user}/devices/{token}", s.env);
    let put = call(
        &s,
        "PUT",
        &path("u1", "tok-1"),
        Some(&s.admin_secret),
        Some(json!({"appId": "com.example.app", "platform": "APNS"})),
    )
    .await;
    assert_eq!(put.status, 200, "{}", put.text);
    assert_eq!(put.body["data"]["endUserId"], "u1");
    assert_eq!(put.body["data"]["deviceToken"], "tok-1");
    // The same token registered by another user moves to it.
    let moved = call(
        &s,
        "PUT",
        &path("u2", "tok-1"),
        Some(&s.admin_secret),
        Some(json!({"appId": "com.example.app", "platform": "APNS"})),
    )
    .await;
    assert_eq!(moved.body["data"]["endUserId"], "u2");
    assert_eq!(moved.body["data"]["created"], put.body["data"]["created"]);
    call(
        &s,
        "DELETE",
        &path("u1", "tok-1"),
        Some(&s.admin_secret),
        None,
    )
    .await
    .problem(404, "not_found");
    assert_eq!(
        call(
            &s,
            "DELETE",
            &path("u2", "tok-1"),
            Some(&s.admin_secret),
            None
        )
        .await
        .status,
        204
    );
    let fields = call(
        &s,
        "PUT",
        &path("u1", "tok-2"),
        Some(&s.admin_secret),
        Some(json!({"platform": "WNS"})),
    )
    .await
    .problem(400, "validation_failed");
    assert_eq!(fields, ["appId", "platform"]);
    let folders_only = s.key(&["--scope", "workbench_folders:read"]);
    call(
        &s,
        "PUT",
        &path("u1", "tok-2"),
        Some(&folders_only),
        Some(json!({"appId": "a", "platform": "FCM"})),
    )
    .await
    .problem(403, "forbidden");
}

/// Providers on loopback: the fake FCM, Google OAuth and APNs, which know `sa` and `p8`.
async fn providers(s: &mut Server, sa: &str, p8: &str) -> FakeProviders {
    let fake = FakeProviders::start().await;
    fake.accept_service_account(sa);
    fake.accept_apns_key("KEY1234567", "TEAM123456", p8);
    point_at(s, &fake.url);
    fake
}

/// Restarts the server with every provider URL at `base` and quick push retries.
fn point_at(s: &mut Server, base: &str) {
    let token = format!("{base}/token");
    s.restart_with(&[
        ("WORKBENCH_FCM_URL", Some(base)),
        ("WORKBENCH_GOOGLE_TOKEN_URL", Some(&token)),
        ("WORKBENCH_APNS_URL", Some(base)),
        ("WORKBENCH_APNS_SANDBOX_URL", Some(base)),
        ("WORKBENCH_PUSH_RETRY_SCHEDULE", Some("1s,1s,1s")),
    ]);
}

/// An FCM app and an APNs (token) app, and a published flow whose card notifies.
async fn notifying_setup(s: &Server, sa: &str, p8: &str) -> String {
    let android = platforms(s, "POST", Some(json!({"appId": "com.example.android", "platform": "FCM", "platformCredential": sa, "platformProperties": {"channelId": "news", "restrictedPackageName": "com.example.android"}}))).await;
    assert_eq!(android.status, 201, "{}", android.text);
    let ios = platforms(s, "POST", Some(json!({"appId": "com.example.ios", "platform": "APNS", "platformCredential": p8, "platformPrincipal": "KEY1234567", "platformProperties": {"teamId": "TEAM123456", "bundleId": "com.example.ios"}}))).await;
    assert_eq!(ios.status, 201, "{}", ios.text);
    let config = json!({
        "type": "card", "initialSteps": ["s1"],
        "variables": {"firstName": {"type": "string", "source": "event", "default": "there"}},
        "steps": {"s1": {"id": "s1", "type": "create-card", "properties": {"cardTemplateId": "t1"}}},
        "cardTemplates": {"t1": {
            "metadata": {"cardName": "Welcome"},
            "defaultView": {"content": [{"key": "h", "type": "headline", "attributes": {"text": "Hello %{firstName}"}}]},
            "notification": {"attributes": {"body": "Hello %{firstName}"}}
        }}
    });
    flow_publishing(s, "Notify", config).await
}

async fn register(s: &Server, user: &str, token: &str, app: &str, platform: &str) {
    let reply = call(
        s,
        "PUT",
        &format!("/v1/{}/users/{user}/devices/{token}", s.env),
        Some(&s.admin_secret),
        Some(json!({"appId": app, "platform": platform})),
    )
    .await;
    assert_eq!(reply.status, 200, "{}", reply.text);
}

async fn get(s: &Server, path: &str) -> Value {
    let reply = call(
        s,
        "GET",
        &format!("/v1/{}{path}", s.env),
        Some(&s.admin_secret),
        None,
    )
    .await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    reply.body["data"].clone()
}

/// Waits until `done` holds of the pushes of `user`'s only card; returns them.
async fn pushes_of(
    s: &Server,
    user: &str,
    done: impl Fn(&[Value]) -> bool,
) -> (String, Vec<Value>) {
    let started = std::time::Instant::now();
    loop {
        let cards = feed(s, user).await;
        if let Some(card) = cards.first() {
            let id = card["id"].as_str().expect("card id").to_owned();
            let pushes = get(s, &format!("/users/{user}/cards/{id}/pushes")).await;
            let pushes = pushes.as_array().expect("pushes").clone();
            if done(&pushes) {
                return (id, pushes);
            }
            assert!(
                started.elapsed() < Duration::from_secs(20),
                "pushes of {user}: {pushes:?}"
            );
        }
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "no card for {user}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn settled(pushes: &[Value]) -> bool {
    !pushes.is_empty() && pushes.iter().all(|p| p["status"] != "pending")
}

async fn a_triggered_card_with_a_notification_reaches_fcm_and_apns(mut s: Server) {
    let (sa, p8) = (service_account("demo-project"), p8_key());
    let fake = providers(&mut s, &sa, &p8).await;
    let flow = notifying_setup(&s, &sa, &p8).await;
    users(
        &s,
        json!([{"id": "u1", "tags": ["vip"]}, {"id": "u2", "tags": ["vip"]}]),
    )
    .await;
    register(&s, "u1", "android-u1", "com.example.android", "FCM").await;
    register(&s, "u1", "iphone-u1", "com.example.ios", "APNS").await;
    // No platform for this app: no push.
    register(&s, "u1", "tablet-u1", "com.example.other", "FCM").await;
    register(&s, "u2", "dead-u2", "com.example.android", "GCM").await;
    register(&s, "u2", "busy-u2", "com.example.ios", "APNS").await;
    fake.mark_dead("dead-u2");
    fake.fail("busy-u2", 1);
    let fired = fire(&s, &flow, "start", json!({"flows": [{"target": {"type": "tag", "tagName": "vip"},
        "payload": {"variables": {"firstName": "Ada"}, "notificationDetail": {"deepLink": "app://welcome"}}}]})).await;
    finished(&s, &flow, &invocation_id(&fired)).await;

    let (card, pushes) = pushes_of(&s, "u1", settled).await;
    let mut seen: Vec<(String, String)> = pushes
        .iter()
        .map(|p| {
            (
                p["deviceToken"].as_str().expect("token").to_owned(),
                p["status"].as_str().expect("status").to_owned(),
            )
        })
        .collect();
    seen.sort();
    assert_eq!(
        seen,
        [
            ("android-u1".to_owned(), "sent".to_owned()),
            ("iphone-u1".to_owned(), "sent".to_owned())
        ]
    );
    assert!(pushes.iter().all(|p| p["statusCode"] == 200
        && p["attempts"] == 1
        && p["cardInstanceId"] == card.as_str()));

    let delivered = fake.delivered();
    let fcm = delivered
        .iter()
        .find(|r| r.kind == "fcm" && r.json()["message"]["token"] == "android-u1")
        .expect("FCM push");
    assert_eq!(fcm.path, "/v1/projects/demo-project/messages:send");
    assert!(
        fcm.header("authorization")
            .starts_with("Bearer fake-access-"),
        "authenticated with Google's token"
    );
    let message = &fcm.json()["message"];
    assert_eq!(message["notification"]["body"], "Hello Ada");
    assert_eq!(message["android"]["notification"]["channel_id"], "news");
    assert_eq!(
        message["android"]["restricted_package_name"],
        "com.example.android"
    );
    let data: Value =
        serde_json::from_str(message["data"]["workbench"].as_str().expect("data")).expect("json");
    assert_eq!(data["cardInstanceId"], card.as_str());
    assert_eq!(data["detail"], json!({"deepLink": "app://welcome"}));
    assert!(data["streamId"]
        .as_str()
        .expect("stream")
        .starts_with("str_"));
    let apns = delivered
        .iter()
        .find(|r| r.path == "/3/device/iphone-u1")
        .expect("APNs push");
    assert!(apns.http2, "APNs over HTTP/2");
    assert_eq!(apns.header("apns-topic"), "com.example.ios");
    assert!(apns.header("authorization").starts_with("bearer "));
    let payload = apns.json();
    assert_eq!(payload["aps"]["alert"]["body"], "Hello Ada");
    assert_eq!(payload["workbench"]["cardInstanceId"], card.as_str());
    for push in [fcm, apns] {
        assert!(push.body.len() < 2_048, "{} bytes", push.body.len());
    }

    // u2: the dead token is removed, the busy one is retried and delivered.
    let (_, pushes) = pushes_of(&s, "u2", |p| settled(p) && p.len() == 2).await;
    let dead = pushes
        .iter()
        .find(|p| p["deviceToken"] == "dead-u2")
        .expect("dead");
    assert_eq!(
        (dead["status"].as_str(), dead["statusCode"].as_u64()),
        (Some("dead_token"), Some(404))
    );
    assert!(dead["error"]
        .as_str()
        .expect("why")
        .contains("UNREGISTERED"));
    let busy = pushes
        .iter()
        .find(|p| p["deviceToken"] == "busy-u2")
        .expect("busy");
    assert_eq!(
        (busy["status"].as_str(), busy["attempts"].as_u64()),
        (Some("sent"), Some(2))
    );
    let devices: Vec<Value> = get(&s, "/users/u2/devices")
        .await
        .as_array()
        .expect("devices")
        .clone();
    let tokens: Vec<&str> = devices
        .iter()
        .map(|d| d["deviceToken"].as_str().expect("token"))
        .collect();
    assert_eq!(tokens, ["busy-u2"]);
    assert_eq!(
        fake.received().iter().filter(|r| r.kind == "token").count(),
        1,
        "one OAuth token serves every FCM push"
    );

    // The whole push payload must fit in 2 KB: checked when the flow is triggered.
    let big = fire(&s, &flow, "start", json!({"flows": [{"target": {"type": "user", "targetUserIds": ["u1"]},
        "payload": {"variables": {"firstName": "x".repeat(1_200)}, "notificationDetail": {"d": "y".repeat(1_000)}}}]})).await;
    let fields = big.problem(400, "validation_failed");
    assert!(fields.iter().any(|f| f == "flows[0].payload"), "{fields:?}");
}

async fn pushes_survive_a_kill_9_and_reach_the_provider_later(mut s: Server) {
    let (sa, p8) = (service_account("demo-project"), p8_key());
    // First no provider answers: the push waits for a retry.
    point_at(&mut s, "http://127.0.0.1:9");
    let flow = notifying_setup(&s, &sa, &p8).await;
    users(&s, json!([{"id": "u1"}])).await;
    register(&s, "u1", "iphone-u1", "com.example.ios", "APNS_SANDBOX").await;
    let ios = platforms(&s, "POST", Some(json!({"appId": "com.example.ios", "platform": "APNS_SANDBOX", "platformCredential": p8, "platformPrincipal": "KEY1234567", "platformProperties": {"teamId": "TEAM123456", "bundleId": "com.example.ios"}}))).await;
    assert_eq!(ios.status, 201, "{}", ios.text);
    let fired = fire(
        &s,
        &flow,
        "start",
        json!({"flows": [{"target": {"type": "user", "targetUserIds": ["u1"]}}]}),
    )
    .await;
    finished(&s, &flow, &invocation_id(&fired)).await;
    let (_, pushes) = pushes_of(&s, "u1", |p| {
        p.first().is_some_and(|p| p["attempts"].as_u64() >= Some(1))
    })
    .await;
    assert_eq!(pushes[0]["status"], "pending", "{pushes:?}");
    assert!(
        pushes[0]["error"].as_str().expect("why").contains("APNs"),
        "{pushes:?}"
    );

    let fake = providers(&mut s, &sa, &p8).await;
    let (_, pushes) = pushes_of(&s, "u1", settled).await;
    assert_eq!(pushes[0]["status"], "sent", "{pushes:?}");
    let delivered = fake.delivered();
    assert_eq!(delivered.len(), 1);
    assert_eq!(delivered[0].path, "/3/device/iphone-u1");
}

async fn push_api_permissions_and_not_found(s: Server) {
    let folders_only = s.key(&["--scope", "workbench_folders:read"]);
    let reply = call(
        &s,
        "GET",
        &format!("/v1/{}/users/u1/devices", s.env),
        Some(&folders_only),
        None,
    )
    .await;
    reply.problem(403, "forbidden");
    let reply = call(
        &s,
        "GET",
        &format!("/v1/{}/users/u1/cards/crd_nope/pushes", s.env),
        Some(&s.admin_secret),
        None,
    )
    .await;
    reply.problem(404, "not_found");
    assert_eq!(get(&s, "/users/nobody/devices").await, json!([]));
}

blackbox!(
    a_triggered_card_with_a_notification_reaches_fcm_and_apns,
    pushes_survive_a_kill_9_and_reach_the_provider_later,
    push_api_permissions_and_not_found,
    devices_register_move_and_unregister,
    the_four_kinds_are_accepted_or_refused_as_the_contract_says,
    credentials_are_validated_field_by_field,
    update_enable_disable_and_delete,
);
