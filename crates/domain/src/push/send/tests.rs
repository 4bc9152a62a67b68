use std::collections::BTreeMap;

use chrono::TimeZone;
use serde_json::{json, Map, Value};

use super::*;
use crate::card::card_event;
use crate::push::MockPushJobRepository;
use crate::push::MockPushSender;

fn at(minute: u32) -> Timestamp {
    chrono::Utc
        .with_ymd_and_hms(2026, 11, 22, 10, minute, 0)
        .single()
        .expect("time")
}

fn card(status: CardStatus) -> CardInstance {
    let notification = |text: &str| json!({"notification": {"attributes": {"body": text}}});
    CardInstance {
        environment_id: "env_1".into(),
        template_id: "welcome".into(),
        template_name: "Welcome".into(),
        stream_ids: vec!["str_all".into(), "str_news".into()],
        platforms: vec!["iOS".into(), "Android".into()],
        content: serde_json::Map::from_iter([
            ("iOS".to_owned(), notification("Hello from iOS")),
            ("Android".to_owned(), notification("Hello from Android")),
        ])
        .into(),
        context: json!({"notificationDetail": {"deepLink": "app://x"}}).into(),
        ..crate::card::test_card("crd_1", status, at(0))
    }
}

fn device(platform: &str) -> Device {
    Device {
        environment_id: "env_1".into(),
        user_id: "u1".into(),
        token: "tok".into(),
        app_id: "app".into(),
        platform: platform.into(),
        created: at(0),
        updated: at(0),
    }
}

fn platform(kind: &str, enabled: bool) -> PushPlatform {
    PushPlatform {
        id: "npl_1".into(),
        environment_id: "env_1".into(),
        app_id: "app".into(),
        platform: kind.into(),
        arn: crate::push::arn("env_1", kind, "app"),
        enabled,
        credential: "secret".into(),
        principal: None,
        properties: Map::new(),
        facts: BTreeMap::new(),
        created: at(0),
        updated: at(0),
    }
}

fn job(kind: &str) -> PushJob {
    PushJob {
        id: "psh_1".into(),
        environment_id: "env_1".into(),
        user_id: "u1".into(),
        token: "tok".into(),
        attempt: 1,
        device: Some(device(kind)),
        card: Some(card(CardStatus::Active)),
        platform: Some(platform(kind, true)),
        lease_until: at(30),
    }
}

fn service(sender: MockPushSender) -> PushService {
    let mut clock = crate::time::MockClock::new();
    clock.expect_now().returning(|| at(0));
    PushService::new(
        Arc::new(MockPushJobRepository::new()),
        Arc::new(sender),
        Arc::new(clock),
        RetryPolicy::parse("5s,30s").expect("policy"),
    )
}

#[test]
fn only_first_activations_of_cards_with_a_notification_want_pushes() {
    let active = Arc::new(card(CardStatus::Active));
    assert!(wants(&card_event(active.clone(), None, None, at(0))));
    assert!(wants(&card_event(
        active.clone(),
        Some(CardStatus::Embargoed),
        None,
        at(0)
    )));
    // Unsnoozing is not a new card.
    assert!(!wants(&card_event(
        active.clone(),
        Some(CardStatus::Snoozed),
        None,
        at(0)
    )));
    assert_eq!(
        targeted_platforms(&card_event(active.clone(), None, None, at(0))),
        ["iOS", "Android"]
    );
    let embargoed = card(CardStatus::Embargoed);
    assert!(!wants(&card_event(embargoed.into(), None, None, at(0))));
    let silent = CardInstance {
        content: serde_json::Map::from_iter([("iOS".to_owned(), json!({"defaultView": {}}))])
            .into(),
        ..card(CardStatus::Active)
    };
    assert!(!wants(&card_event(silent.into(), None, None, at(0))));
}

#[test]
fn devices_are_reached_by_the_platforms_their_cards_target() {
    let both = ["iOS".to_owned(), "Android".to_owned()];
    let web = ["Web".to_owned()];
    for (targets, device, reached) in [
        (&both[..], "APNS", true),
        (&both[..], "APNS_SANDBOX", true),
        (&both[..], "FCM", true),
        (&both[..], "GCM", true),
        (&both[..1], "GCM", false),
        (&both[1..], "APNS", false),
        (&web[..], "FCM", false),
        (&both[..], "WNS", false),
    ] {
        assert_eq!(reaches(targets, device), reached, "{targets:?} {device}");
    }
}

#[test]
fn gcm_and_fcm_serve_each_other_but_apns_environments_do_not_mix() {
    for (platform, device, served) in [
        ("FCM", "FCM", true),
        ("FCM", "GCM", true),
        ("GCM", "FCM", true),
        ("APNS", "APNS", true),
        ("APNS", "APNS_SANDBOX", false),
        ("APNS_SANDBOX", "APNS", false),
        ("FCM", "APNS", false),
        ("WNS", "WNS", false),
    ] {
        assert_eq!(serves(platform, device), served, "{platform} {device}");
    }
    let disabled_gcm = PushPlatform {
        id: "npl_gcm".into(),
        ..platform("GCM", false)
    };
    let enabled_fcm = platform("FCM", true);
    let other_app = PushPlatform {
        app_id: "other".into(),
        ..platform("FCM", true)
    };
    let all = [other_app, disabled_gcm.clone(), enabled_fcm.clone()];
    assert_eq!(platform_for(&all, &device("GCM")), Some(&enabled_fcm));
    assert_eq!(
        platform_for(&all[..2], &device("GCM")),
        Some(&disabled_gcm),
        "a disabled one when there is no other, so the job says why it is skipped"
    );
    assert_eq!(platform_for(&all, &device("APNS")), None);
}

#[test]
fn a_message_carries_the_platforms_text_and_what_the_sdks_need() {
    let c = card(CardStatus::Active);
    let ios = PushMessage::of_card(&c, "APNS").expect("iOS message");
    assert_eq!(ios.body, "Hello from iOS");
    assert_eq!(ios.title, None);
    assert_eq!(ios.collapse_id, "crd_1");
    assert_eq!(
        ios.data,
        json!({"cardInstanceId": "crd_1", "streamId": "str_all", "detail": {"deepLink": "app://x"}})
    );
    assert_eq!(
        PushMessage::of_card(&c, "FCM").expect("Android").body,
        "Hello from Android"
    );
    assert_eq!(
        ios.payload(),
        json!({"body": "Hello from iOS", "workbench": ios.data})
    );
    assert_eq!(ios.payload_bytes(), ios.payload().to_string().len());
    // No body, no push.
    assert_eq!(
        PushMessage::new(
            &json!({"attributes": {"body": "  "}}),
            "c",
            "s",
            &Value::Null,
            None
        ),
        None
    );
    let titled = PushMessage::new(
        &json!({"attributes": {"title": "Hi", "body": "There"}}),
        "c",
        "s",
        &json!("not an object"),
        None,
    )
    .expect("message");
    assert_eq!(titled.title.as_deref(), Some("Hi"));
    assert_eq!(titled.data["detail"], json!({}));
}

#[test]
fn what_follows_a_call() {
    let policy = RetryPolicy::parse("5s,30s").expect("policy");
    let transient = SendOutcome::Transient {
        reason: "503".into(),
        retry_after_seconds: None,
    };
    let cases: Vec<(&str, u32, SendOutcome, Option<Timestamp>, PushNext)> = vec![
        ("delivered", 1, SendOutcome::Delivered, None, PushNext::Sent),
        (
            "dead",
            1,
            SendOutcome::DeadToken("Unregistered".into()),
            None,
            PushNext::DeadToken,
        ),
        (
            "refused",
            1,
            SendOutcome::Refused("BadTopic".into()),
            None,
            PushNext::Failed,
        ),
        (
            "first retry",
            1,
            transient.clone(),
            None,
            PushNext::RetryAt(at(0) + Duration::seconds(5)),
        ),
        (
            "second retry",
            2,
            transient.clone(),
            None,
            PushNext::RetryAt(at(0) + Duration::seconds(30)),
        ),
        (
            "out of retries",
            3,
            transient.clone(),
            None,
            PushNext::Failed,
        ),
        (
            "the card expires first",
            1,
            transient.clone(),
            Some(at(0) + Duration::seconds(3)),
            PushNext::Failed,
        ),
        (
            "retry-after within twice the step",
            1,
            SendOutcome::Transient {
                reason: "429".into(),
                retry_after_seconds: Some(8),
            },
            None,
            PushNext::RetryAt(at(0) + Duration::seconds(8)),
        ),
    ];
    for (name, attempt, outcome, expires, expected) in cases {
        assert_eq!(
            decide(&policy, attempt, &outcome, expires, at(0), 0.0),
            expected,
            "{name}"
        );
    }
}

#[tokio::test]
async fn nothing_is_sent_when_there_is_nothing_to_send() {
    let cases: Vec<(&str, PushJob, &str)> = vec![
        (
            "unregistered",
            PushJob {
                device: None,
                ..job("APNS")
            },
            "unregistered",
        ),
        (
            "moved to another user",
            PushJob {
                device: Some(Device {
                    user_id: "u2".into(),
                    ..device("APNS")
                }),
                ..job("APNS")
            },
            "moved",
        ),
        (
            "card gone",
            PushJob {
                card: None,
                ..job("APNS")
            },
            "no longer exists",
        ),
        (
            "card cancelled",
            PushJob {
                card: Some(card(CardStatus::Cancelled)),
                ..job("APNS")
            },
            "cancelled",
        ),
        (
            "platform disabled",
            PushJob {
                platform: Some(platform("APNS", false)),
                ..job("APNS")
            },
            "no enabled APNS platform",
        ),
        (
            "platform deleted",
            PushJob {
                platform: None,
                ..job("FCM")
            },
            "no enabled FCM platform",
        ),
        (
            "no notification for the platform",
            PushJob {
                card: Some(CardInstance {
                    content: serde_json::Map::new().into(),
                    ..card(CardStatus::Active)
                }),
                ..job("FCM")
            },
            "no notification for Android",
        ),
    ];
    for (name, job, needle) in cases {
        let mut sender = MockPushSender::new();
        sender.expect_send().never();
        let record = service(sender).attempt(job).await;
        assert_eq!(record.next, PushNext::Skipped, "{name}");
        assert!(
            record.error.as_deref().unwrap_or_default().contains(needle),
            "{name}: {:?}",
            record.error
        );
    }
}

#[tokio::test]
async fn a_push_goes_through_the_devices_platform_and_reports_the_outcome() {
    let mut sender = MockPushSender::new();
    sender
        .expect_send()
        .withf(|p, token, m| {
            p.platform == "FCM" && token == "tok" && m.body == "Hello from Android"
        })
        .times(1)
        .returning(|_, _, _| SendReport {
            status: Some(404),
            outcome: SendOutcome::DeadToken("UNREGISTERED".into()),
        });
    let record = service(sender).attempt(job("FCM")).await;
    assert_eq!(record.next, PushNext::DeadToken);
    assert_eq!(record.status_code, Some(404));
    assert_eq!(record.error.as_deref(), Some("UNREGISTERED"));
    assert_eq!(
        (record.token.as_str(), record.user_id.as_str()),
        ("tok", "u1")
    );
}

#[tokio::test]
async fn a_push_whose_send_panics_is_tried_three_times_then_fails_alone_with_an_error_id() {
    let mut sender = MockPushSender::new();
    sender
        .expect_send()
        .times(crate::unit::ATTEMPTS as usize)
        .returning(|_, _, _| panic!("injected: the sender panics"));
    let record = service(sender).attempt(job("FCM")).await;
    assert_eq!(record.next, PushNext::Failed);
    assert_eq!(record.lease, job("FCM").lease_until, "fenced by its claim");
    let error = record.error.expect("error");
    assert!(error.contains("errorId err_"), "{error}");
    assert!(!error.contains("injected"), "{error}");
    assert_eq!(record.job_id, "psh_1");
}

#[tokio::test]
async fn an_oversized_payload_fails_without_a_call() {
    let mut sender = MockPushSender::new();
    sender.expect_send().never();
    let mut big = card(CardStatus::Active);
    big.context = json!({"notificationDetail": {"x": "y".repeat(MAX_PUSH_PAYLOAD_BYTES)}}).into();
    let record = service(sender)
        .attempt(PushJob {
            card: Some(big),
            ..job("APNS")
        })
        .await;
    assert_eq!(record.next, PushNext::Failed);
    assert!(record.error.expect("why").contains("limit is 2048"));
}
