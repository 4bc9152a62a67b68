//! Push notification platforms over HTTP: the four kinds, validation, the life cycle, and
//! credentials that never leave (responses, logs, the database in plaintext).

use adapters_diesel::testing::raw_texts;
use adapters_push::testing::{p8_key, push_certificate, service_account, CertificateSpec};
use serde_json::{json, Value};

use crate::support::{blackbox, call, Reply, Server};

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

blackbox!(
    devices_register_move_and_unregister,
    the_four_kinds_are_accepted_or_refused_as_the_contract_says,
    credentials_are_validated_field_by_field,
    update_enable_disable_and_delete,
);
