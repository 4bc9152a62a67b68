use std::collections::BTreeMap;

use chrono::Utc;
use domain::push::{PushMessage, PushPlatform, PushSender, SendOutcome};
use serde_json::{json, Map, Value};

use super::*;
use crate::fake::FakeProviders;
use crate::testing::{p8_key, push_certificate, service_account, CertificateSpec};

fn sender(fake: &FakeProviders) -> HttpPushSender {
    HttpPushSender::new(
        ProviderUrls {
            fcm: fake.url.clone(),
            google_token: fake.token_url(),
            apns: fake.url.clone(),
            apns_sandbox: format!("{}/", fake.url),
        },
        Duration::from_secs(5),
    )
    .expect("client")
}

fn platform(
    kind: &str,
    credential: &str,
    principal: Option<&str>,
    properties: Value,
) -> PushPlatform {
    PushPlatform {
        id: "npl_1".into(),
        environment_id: "env_1".into(),
        app_id: "app".into(),
        platform: kind.into(),
        arn: domain::push::arn("env_1", kind, "app"),
        enabled: true,
        credential: credential.into(),
        principal: principal.map(Into::into),
        properties: properties.as_object().cloned().unwrap_or_else(Map::new),
        facts: BTreeMap::from([("BundleId".to_owned(), "com.example.app".to_owned())]),
        created: Utc::now(),
        updated: Utc::now(),
    }
}

fn message() -> PushMessage {
    PushMessage::new(
        &json!({"attributes": {"title": "Hi", "body": "Your order shipped"}}),
        "crd_1",
        "str_all",
        &json!({"deepLink": "app://orders/1"}),
        Some(Utc::now() + chrono::Duration::hours(1)),
    )
    .expect("message")
}

#[tokio::test]
async fn fcm_authenticates_with_the_service_account_and_reuses_its_token() {
    let fake = FakeProviders::start().await;
    let account = service_account("demo-project");
    fake.accept_service_account(&account);
    let s = sender(&fake);
    let android = platform(
        "FCM",
        &account,
        None,
        json!({"channelId": "news", "restrictedPackageName": "com.example.app"}),
    );
    for token in ["device-1", "device-2"] {
        let report = s.send(&android, token, &message()).await;
        assert_eq!(report.outcome, SendOutcome::Delivered, "{report:?}");
        assert_eq!(report.status, Some(200));
    }
    let received = fake.received();
    let kinds: Vec<&str> = received.iter().map(|r| r.kind).collect();
    assert_eq!(
        kinds,
        ["token", "fcm", "fcm"],
        "one OAuth token serves both"
    );
    let sent = received[1].json();
    let m = &sent["message"];
    assert_eq!(m["token"], "device-1");
    assert_eq!(
        m["notification"],
        json!({"title": "Hi", "body": "Your order shipped"})
    );
    assert_eq!(m["android"]["restricted_package_name"], "com.example.app");
    assert_eq!(m["android"]["notification"]["channel_id"], "news");
    assert_eq!(m["android"]["collapse_key"], "crd_1");
    assert!(m["android"]["ttl"].as_str().expect("ttl").ends_with('s'));
    let data: Value =
        serde_json::from_str(m["data"]["workbench"].as_str().expect("a string")).expect("json");
    assert_eq!(data["cardInstanceId"], "crd_1");
    assert_eq!(data["detail"]["deepLink"], "app://orders/1");
    assert_eq!(received[1].path, "/v1/projects/demo-project/messages:send");
    // Double-encoded service-account JSON works as well.
    let encoded = platform(
        "GCM",
        &serde_json::to_string(&account).expect("s"),
        None,
        json!({}),
    );
    assert_eq!(
        s.send(&encoded, "device-3", &message()).await.outcome,
        SendOutcome::Delivered
    );
}

#[tokio::test]
async fn fcm_outcomes() {
    let fake = FakeProviders::start().await;
    let account = service_account("p");
    fake.accept_service_account(&account);
    let s = sender(&fake);
    let android = platform("FCM", &account, None, json!({}));
    fake.mark_dead("gone");
    let dead = s.send(&android, "gone", &message()).await;
    assert!(
        matches!(dead.outcome, SendOutcome::DeadToken(ref why) if why.contains("UNREGISTERED")),
        "{dead:?}"
    );
    fake.fail("busy", 1);
    let busy = s.send(&android, "busy", &message()).await;
    assert_eq!(
        busy.outcome,
        SendOutcome::Transient {
            reason: "FCM 503 UNAVAILABLE: The service is currently unavailable.".into(),
            retry_after_seconds: Some(1)
        }
    );
    assert_eq!(
        s.send(&android, "busy", &message()).await.outcome,
        SendOutcome::Delivered
    );
    // An account Google does not know: refused, with Google's reason, and nothing sent.
    let stranger = platform("FCM", &service_account("p"), None, json!({}));
    let refused = s.send(&stranger, "device", &message()).await;
    assert!(
        matches!(refused.outcome, SendOutcome::Refused(ref why) if why.contains("Google refused")),
        "{refused:?}"
    );
    let unreachable = HttpPushSender::new(
        ProviderUrls {
            google_token: "http://127.0.0.1:9/token".into(),
            ..ProviderUrls::default()
        },
        Duration::from_secs(2),
    )
    .expect("client");
    assert!(matches!(
        unreachable
            .send(&android, "device", &message())
            .await
            .outcome,
        SendOutcome::Transient { .. }
    ));
}

#[tokio::test]
async fn apns_with_a_provider_token_over_http2() {
    let fake = FakeProviders::start().await;
    let key = p8_key();
    fake.accept_apns_key("KEY1234567", "TEAM123456", &key);
    let s = sender(&fake);
    let ios = platform(
        "APNS_SANDBOX",
        &key,
        Some("KEY1234567"),
        json!({"teamId": "TEAM123456", "bundleId": "com.example.app"}),
    );
    for token in ["aa11", "bb22"] {
        let report = s.send(&ios, token, &message()).await;
        assert_eq!(report.outcome, SendOutcome::Delivered, "{report:?}");
    }
    let received = fake.received();
    assert_eq!(received.len(), 2);
    let first = &received[0];
    assert!(first.http2, "APNs is HTTP/2");
    assert_eq!(first.path, "/3/device/aa11");
    assert_eq!(first.header("apns-topic"), "com.example.app");
    assert_eq!(first.header("apns-push-type"), "alert");
    assert_eq!(first.header("apns-collapse-id"), "crd_1");
    assert!(
        first
            .header("apns-expiration")
            .parse::<i64>()
            .expect("unix time")
            > Utc::now().timestamp()
    );
    assert_eq!(
        first.json(),
        json!({"aps": {"alert": {"title": "Hi", "body": "Your order shipped"}},
               "workbench": {"cardInstanceId": "crd_1", "streamId": "str_all",
                   "detail": {"deepLink": "app://orders/1"}}})
    );
    assert_eq!(
        first.header("authorization"),
        received[1].header("authorization"),
        "the provider token is reused, not signed per push"
    );
    fake.mark_dead("cc33");
    let dead = s.send(&ios, "cc33", &message()).await;
    assert_eq!(
        (
            dead.status,
            matches!(dead.outcome, SendOutcome::DeadToken(_))
        ),
        (Some(410), true)
    );
    // A key APNs does not know is a refusal, not something to retry.
    let other = platform(
        "APNS",
        &p8_key(),
        Some("KEY7654321"),
        json!({"teamId": "TEAM123456", "bundleId": "com.example.app"}),
    );
    let refused = s.send(&other, "aa11", &message()).await;
    assert!(
        matches!(refused.outcome,
            SendOutcome::Refused(ref why) if why.contains("InvalidProviderToken")),
        "{refused:?}"
    );
}

#[tokio::test]
async fn apns_with_a_certificate_uses_it_as_the_tls_identity() {
    let fake = FakeProviders::start().await;
    let cert = push_certificate(CertificateSpec::default());
    let s = sender(&fake);
    let ios = platform(
        "APNS",
        &cert.private_key,
        Some(&cert.certificate),
        json!({}),
    );
    // The fake speaks clear-text HTTP/2, so no TLS identity reaches it and it answers as APNs
    // answers a request without credentials; what is checked here is that the certificate and
    // key make an identity and the topic is the certificate's bundle id.
    let report = s.send(&ios, "aa11", &message()).await;
    assert!(
        matches!(report.outcome,
            SendOutcome::Refused(ref why) if why.contains("MissingProviderToken")),
        "{report:?}"
    );
    let r = &fake.received()[0];
    assert_eq!(r.header("apns-topic"), "com.example.app");
    assert_eq!(r.header("authorization"), "");
    let broken = platform("APNS", "not a key", Some(&cert.certificate), json!({}));
    assert!(matches!(
        s.send(&broken, "aa11", &message()).await.outcome,
        SendOutcome::Refused(ref why) if why.contains("TLS identity")
    ));
}

#[test]
fn provider_answers_are_classified_by_their_documented_codes() {
    let fcm = |status: u16, body: Value| classify_fcm(status, Some(7), &body.to_string()).outcome;
    let code = |c: &str| json!({"error": {"status": "X", "details": [{"errorCode": c}]}});
    assert_eq!(fcm(200, json!({})), SendOutcome::Delivered);
    assert!(matches!(fcm(404, json!({})), SendOutcome::DeadToken(_)));
    assert!(matches!(
        fcm(403, code("SENDER_ID_MISMATCH")),
        SendOutcome::DeadToken(_)
    ));
    assert!(matches!(
        fcm(
            400,
            json!({"error": {"status": "INVALID_ARGUMENT",
                "message": "The registration token is not a valid FCM registration token"}})
        ),
        SendOutcome::DeadToken(_)
    ));
    assert!(matches!(
        fcm(
            400,
            json!({"error": {"status": "INVALID_ARGUMENT", "message": "bad ttl"}})
        ),
        SendOutcome::Refused(_)
    ));
    assert!(matches!(
        fcm(401, code("THIRD_PARTY_AUTH_ERROR")),
        SendOutcome::Refused(_)
    ));
    for (status, body) in [
        (401, json!({})),
        (429, code("QUOTA_EXCEEDED")),
        (500, json!({})),
        (503, json!({})),
    ] {
        assert!(
            matches!(
                fcm(status, body),
                SendOutcome::Transient {
                    retry_after_seconds: Some(7),
                    ..
                }
            ),
            "{status}"
        );
    }
    let apns = |status: u16, reason: &str| {
        classify_apns(status, None, &json!({"reason": reason}).to_string()).outcome
    };
    assert_eq!(apns(200, ""), SendOutcome::Delivered);
    for (status, reason) in [
        (410, "Unregistered"),
        (400, "BadDeviceToken"),
        (400, "DeviceTokenNotForTopic"),
    ] {
        assert!(
            matches!(apns(status, reason), SendOutcome::DeadToken(_)),
            "{reason}"
        );
    }
    for (status, reason) in [
        (403, "ExpiredProviderToken"),
        (429, "TooManyRequests"),
        (500, "InternalServerError"),
        (503, "ServiceUnavailable"),
    ] {
        assert!(
            matches!(apns(status, reason), SendOutcome::Transient { .. }),
            "{reason}"
        );
    }
    for (status, reason) in [
        (400, "BadTopic"),
        (403, "BadCertificate"),
        (403, "InvalidProviderToken"),
        (413, "PayloadTooLarge"),
    ] {
        assert!(
            matches!(apns(status, reason), SendOutcome::Refused(_)),
            "{reason}"
        );
    }
}
