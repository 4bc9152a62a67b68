use std::sync::Arc;

use chrono::Duration;
use serde_json::{json, Value};

use super::delivery::decide;
use super::*;
use crate::card::{CardInstance, CardStatus};
use crate::tenancy::{KeyAccess, Role};
use crate::testing::{caller, clock, subscription, t0};
use crate::Scope;

const ENV: &str = "env_1";

fn who(role: Role) -> Principal {
    caller(ENV, KeyAccess::Roles(vec![role]))
}

fn sub() -> Subscription {
    subscription(ENV)
}

fn event(name: &str, flow: &str, template: &str) -> AnalyticsEvent {
    let card = CardInstance {
        environment_id: ENV.into(),
        flow_id: flow.into(),
        template_id: template.into(),
        ..crate::card::test_card("crd_1", CardStatus::Active, t0())
    };
    AnalyticsEvent {
        id: "evt_1".into(),
        name: name.into(),
        card: card.into(),
        previous: None,
        values: None,
        created: t0(),
    }
}

fn error_fields(body: Value) -> Vec<String> {
    match SubscriptionRequest::parse(&body) {
        Ok(_) => Vec::new(),
        Err(DomainError::Validation(errors)) => errors.into_iter().map(|e| e.field).collect(),
        Err(other) => panic!("unexpected {other:?}"),
    }
}

#[test]
fn table_of_subscribe_requests() {
    let ok = json!({"types": ["card-completed"], "url": "https://example.com/h"});
    let with = |extra: Value| {
        let mut body = ok.clone();
        for (k, v) in extra.as_object().expect("object") {
            body[k] = v.clone();
        }
        body
    };
    let cases: Vec<(&str, Value, &[&str])> = vec![
        ("minimal", ok.clone(), &[]),
        ("not an object", json!([]), &[""]),
        ("nothing", json!({}), &["types", "url"]),
        ("empty types", with(json!({"types": []})), &["types"]),
        (
            "unknown type",
            with(json!({"types": ["card-published", "card-eaten"]})),
            &["types[1]"],
        ),
        (
            "type not a string",
            with(json!({"types": [1]})),
            &["types[0]"],
        ),
        (
            "test event not subscribable",
            with(json!({"types": ["webhook-test"]})),
            &["types[0]"],
        ),
        (
            "ftp url",
            with(json!({"url": "ftp://example.com"})),
            &["url"],
        ),
        ("no host", with(json!({"url": "https:///x"})), &["url"]),
        (
            "credentials in url",
            with(json!({"url": "https://a:b@example.com/"})),
            &["url"],
        ),
        (
            "space in url",
            with(json!({"url": "https://exa mple.com/"})),
            &["url"],
        ),
        (
            "too long url",
            with(json!({"url": format!("https://e.com/{}", "a".repeat(2100))})),
            &["url"],
        ),
        ("put", with(json!({"method": "PUT"})), &[]),
        ("lowercase put", with(json!({"method": "put"})), &[]),
        ("get", with(json!({"method": "GET"})), &["method"]),
        (
            "headers",
            with(json!({"headers": {"X-Token": "abc", "X-Other": "d"}})),
            &[],
        ),
        (
            "headers not an object",
            with(json!({"headers": "x"})),
            &["headers"],
        ),
        (
            "bad header name",
            with(json!({"headers": {"X Bad": "v"}})),
            &["headers.X Bad"],
        ),
        (
            "reserved header",
            with(json!({"headers": {"Webhook-Signature": "v"}})),
            &["headers.Webhook-Signature"],
        ),
        (
            "header with newline",
            with(json!({"headers": {"X-A": "a\r\nB: c"}})),
            &["headers.X-A"],
        ),
        (
            "header not a string",
            with(json!({"headers": {"X-A": 1}})),
            &["headers.X-A"],
        ),
        (
            "filters",
            with(json!({"cardTemplateId": "welcome", "actionFlowConfigId": "flw_1"})),
            &[],
        ),
        (
            "filter not a string",
            with(json!({"cardTemplateId": 3})),
            &["cardTemplateId"],
        ),
        (
            "unknown fields are ignored",
            with(json!({"secret": "mine"})),
            &[],
        ),
        (
            "description with line breaks",
            with(json!({"description": "To the CRM\r\n\tcompleted only"})),
            &[],
        ),
        (
            "longest description",
            with(json!({"description": "é".repeat(MAX_DESCRIPTION_CHARS)})),
            &[],
        ),
        (
            "description too long",
            with(json!({"description": "a".repeat(MAX_DESCRIPTION_CHARS + 1)})),
            &["description"],
        ),
        (
            "description with a control character",
            with(json!({"description": "bell\u{7}"})),
            &["description"],
        ),
        (
            "description not a string",
            with(json!({"description": ["a"]})),
            &["description"],
        ),
    ];
    for (name, body, expected) in cases {
        assert_eq!(error_fields(body), expected, "{name}");
    }
    let many: serde_json::Map<String, Value> = (0..=MAX_HEADERS)
        .map(|i| (format!("X-{i}"), json!("v")))
        .collect();
    assert_eq!(error_fields(with(json!({"headers": many}))), ["headers"]);
}

#[test]
fn parsed_request_keeps_order_of_types_without_duplicates() {
    let r = SubscriptionRequest::parse(&json!({
        "types": ["card-completed", "card-published", "card-completed"],
        "url": "http://example.com",
        "method": "put",
    }))
    .expect("valid");
    assert_eq!(r.types, ["card-completed", "card-published"]);
    assert_eq!(r.method, HttpMethod::Put);
}

#[test]
fn matching_honours_types_flow_and_template_filters() {
    let mut s = sub();
    assert!(s.matches(&event("card-completed", "flw_1", "welcome")));
    assert!(!s.matches(&event("card-published", "flw_1", "welcome")));
    s.flow_id = Some("flw_1".into());
    assert!(s.matches(&event("card-completed", "flw_1", "welcome")));
    assert!(!s.matches(&event("card-completed", "flw_2", "welcome")));
    s.card_template_id = Some("welcome".into());
    assert!(s.matches(&event("card-completed", "flw_1", "welcome")));
    assert!(!s.matches(&event("card-completed", "flw_1", "other")));
    s.enabled = false;
    assert!(!s.matches(&event("card-completed", "flw_1", "welcome")));
    let mut other_env = sub();
    other_env.environment_id = "env_2".into();
    assert!(!other_env.matches(&event("card-completed", "flw_1", "welcome")));
}

#[test]
fn secrets_are_whsec_and_32_bytes() {
    let s = new_secret();
    let b64 = s.strip_prefix("whsec_").expect("prefix");
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(b64)
        .expect("base64");
    assert_eq!(bytes.len(), 32);
    assert_ne!(new_secret(), s);
}

#[test]
fn rotated_secret_signs_for_24_hours_only() {
    let mut s = sub();
    s.previous_secret = Some("whsec_old".into());
    s.previous_secret_until = Some(t0() + Duration::hours(24));
    assert_eq!(s.signing_secrets(t0()).len(), 2);
    assert_eq!(s.signing_secrets(t0() + Duration::hours(24)).len(), 1);
}

#[test]
fn retry_schedule_parses_and_rejects() {
    let p = RetryPolicy::default();
    assert_eq!(p.retries(), 7);
    assert_eq!(p.delay_after(1, None, 0.0), Some(Duration::seconds(5)));
    assert_eq!(p.delay_after(2, None, 0.0), Some(Duration::minutes(5)));
    assert_eq!(p.delay_after(7, None, 0.0), Some(Duration::hours(10)));
    assert_eq!(p.delay_after(8, None, 0.0), None);
    assert_eq!(p.delay_after(0, None, 0.0), None);
    // ±20% jitter.
    assert_eq!(p.delay_after(1, None, 1.0), Some(Duration::seconds(6)));
    assert_eq!(p.delay_after(1, None, -1.0), Some(Duration::seconds(4)));
    // Retry-After honoured up to twice the step, never shortening it.
    assert_eq!(p.delay_after(1, Some(8), 0.0), Some(Duration::seconds(8)));
    assert_eq!(
        p.delay_after(1, Some(3600), 0.0),
        Some(Duration::seconds(10))
    );
    assert_eq!(p.delay_after(1, Some(1), 0.0), Some(Duration::seconds(5)));
    let quick = RetryPolicy::parse("1s, 1s,250ms").expect("valid");
    assert_eq!(quick.retries(), 3);
    assert_eq!(
        quick.delay_after(3, None, 0.0),
        Some(Duration::milliseconds(250))
    );
    assert_eq!(RetryPolicy::parse("").expect("no retries").retries(), 0);
    for bad in ["5", "5x", "s", "-1s", "8d", "1.5s"] {
        assert!(RetryPolicy::parse(bad).is_err(), "{bad}");
    }
}

fn job(attempt: u32, failing_since: Option<Timestamp>) -> DeliveryJob {
    let mut subscription = sub();
    subscription.failing_since = failing_since;
    DeliveryJob {
        delivery_id: "whd_1".into(),
        subscription,
        event_id: "evt_1".into(),
        event_name: "card-completed".into(),
        data: json!({}),
        attempt,
        trigger: "scheduled".into(),
        lease_until: t0(),
    }
}

fn outcome(status: Option<u16>) -> AttemptOutcome {
    AttemptOutcome::from(TransportResponse {
        status,
        retry_after_seconds: None,
        body: String::new(),
        error: status.is_none().then(|| "connection refused".to_owned()),
        failure: status.is_none().then_some(CallFailure::Connect),
        duration_ms: 3,
    })
}

#[test]
fn decisions_after_an_attempt() {
    let p = RetryPolicy::default();
    let now = t0();
    // Success: done; a failing subscription recovers.
    assert_eq!(
        decide(&p, &job(1, None), &outcome(Some(204)), now, 0.0),
        (NextStep::Done, None)
    );
    assert_eq!(
        decide(&p, &job(3, Some(now)), &outcome(Some(200)), now, 0.0),
        (NextStep::Done, Some(SubscriptionChange::Recovered))
    );
    // First failure: retry after the first step, and the run of failures starts.
    assert_eq!(
        decide(&p, &job(1, None), &outcome(Some(500)), now, 0.0),
        (
            NextStep::RetryAt(now + Duration::seconds(5)),
            Some(SubscriptionChange::Failing { since: now })
        )
    );
    // Redirects and timeouts are failures too.
    assert!(matches!(
        decide(&p, &job(1, None), &outcome(Some(302)), now, 0.0).0,
        NextStep::RetryAt(_)
    ));
    assert!(matches!(
        decide(&p, &job(1, None), &outcome(None), now, 0.0).0,
        NextStep::RetryAt(_)
    ));
    // Out of retries.
    assert_eq!(
        decide(&p, &job(8, Some(now)), &outcome(Some(500)), now, 0.0),
        (NextStep::Failed, None)
    );
    // 410 disables at once.
    assert_eq!(
        decide(&p, &job(1, None), &outcome(Some(410)), now, 0.0),
        (
            NextStep::Failed,
            Some(SubscriptionChange::Disable {
                reason: "gone".into()
            })
        )
    );
    // Five days of failures disable.
    assert_eq!(
        decide(
            &p,
            &job(2, Some(now - Duration::days(5))),
            &outcome(Some(503)),
            now,
            0.0
        ),
        (
            NextStep::Failed,
            Some(SubscriptionChange::Disable {
                reason: "failing".into()
            })
        )
    );
    assert!(matches!(
        decide(
            &p,
            &job(2, Some(now - Duration::days(4))),
            &outcome(Some(503)),
            now,
            0.0
        ),
        (NextStep::RetryAt(_), None)
    ));
}

fn service(repo: MockWebhookRepository, transport: MockWebhookTransport) -> WebhookService {
    WebhookService::new(Arc::new(repo), Arc::new(transport), clock())
}

fn body() -> Value {
    json!({"types": ["card-completed"], "url": "https://example.com/h", "headers": {"X-A": "1"}})
}

#[tokio::test]
async fn subscribe_checks_the_url_and_the_limit() {
    let mut transport = MockWebhookTransport::new();
    transport
        .expect_check_url()
        .returning(|_| Err("resolves to 10.0.0.1, a private address".into()));
    let err = service(MockWebhookRepository::new(), transport)
        .subscribe(&who(Role::Workbench), &ENV.into(), &body())
        .await
        .expect_err("refused");
    assert!(
        matches!(err, DomainError::Validation(ref e) if e[0].field == "url"),
        "{err:?}"
    );

    let mut transport = MockWebhookTransport::new();
    transport.expect_check_url().returning(|_| Ok(()));
    let mut repo = MockWebhookRepository::new();
    repo.expect_create()
        .withf(|_, limit| *limit == MAX_SUBSCRIPTIONS_PER_ENVIRONMENT)
        .returning(|_, _| Ok(false));
    let err = service(repo, transport)
        .subscribe(&who(Role::Workbench), &ENV.into(), &body())
        .await
        .expect_err("limit");
    assert!(matches!(
        err,
        DomainError::Conflict {
            kind: ConflictKind::SubscriptionLimit,
            ..
        }
    ));

    let mut transport = MockWebhookTransport::new();
    transport.expect_check_url().returning(|_| Ok(()));
    let mut repo = MockWebhookRepository::new();
    repo.expect_create().returning(|_, _| Ok(true));
    let s = service(repo, transport)
        .subscribe(&who(Role::Workbench), &ENV.into(), &body())
        .await
        .expect("subscribed");
    assert!(s.id.starts_with("whk_") && s.secret.starts_with("whsec_") && s.enabled);
    assert_eq!(s.headers.get("X-A").map(String::as_str), Some("1"));
}

#[tokio::test]
async fn webhooks_need_the_workbench_role() {
    let err = service(MockWebhookRepository::new(), MockWebhookTransport::new())
        .list(&who(Role::Events), &ENV.into())
        .await
        .expect_err("forbidden");
    assert!(matches!(err, DomainError::Forbidden(_)));
    let err = service(MockWebhookRepository::new(), MockWebhookTransport::new())
        .list(&who(Role::Workbench), &"env_other".into())
        .await
        .expect_err("no access");
    assert!(matches!(err, DomainError::Unauthenticated));
}

#[tokio::test]
async fn permanent_delete_needs_a_disabled_subscription() {
    let mut repo = MockWebhookRepository::new();
    repo.expect_get().returning(|_, _| Ok(Some(sub())));
    let err = service(repo, MockWebhookTransport::new())
        .delete(&who(Role::Workbench), &ENV.into(), &"whk_1".into())
        .await
        .expect_err("enabled");
    assert!(matches!(
        err,
        DomainError::Conflict {
            kind: ConflictKind::SubscriptionEnabled,
            ..
        }
    ));

    let mut repo = MockWebhookRepository::new();
    repo.expect_get().returning(|_, _| Ok(Some(sub())));
    repo.expect_update()
        .withf(|s| !s.enabled && s.disabled_reason.as_deref() == Some("api"))
        .times(1)
        .returning(|_| Ok(()));
    let s = service(repo, MockWebhookTransport::new())
        .disable(&who(Role::Workbench), &ENV.into(), &"whk_1".into())
        .await
        .expect("disabled");
    assert!(!s.enabled);
}

#[tokio::test]
async fn rotation_keeps_the_old_secret_for_a_day() {
    let original = sub();
    let old = original.secret.clone();
    let mut repo = MockWebhookRepository::new();
    repo.expect_get()
        .returning(move |_, _| Ok(Some(original.clone())));
    repo.expect_update().times(1).returning(|_| Ok(()));
    let s = service(repo, MockWebhookTransport::new())
        .rotate_secret(&who(Role::Workbench), &ENV.into(), &"whk_1".into())
        .await
        .expect("rotated");
    assert_ne!(s.secret, old);
    assert_eq!(s.previous_secret.as_deref(), Some(old.as_str()));
    assert_eq!(s.previous_secret_until, Some(t0() + Duration::hours(24)));
}

#[tokio::test]
async fn test_call_is_sent_signed_logged_and_not_retried() {
    let mut repo = MockWebhookRepository::new();
    repo.expect_get().returning(|_, _| Ok(Some(sub())));
    repo.expect_record()
        .withf(|r| {
            r.len() == 1
                && r[0].delivery_id.is_none()
                && r[0].trigger == "test"
                && r[0].next == NextStep::Done
                && r[0].subscription.is_none()
        })
        .times(1)
        .returning(|_| Ok(0));
    let mut transport = MockWebhookTransport::new();
    transport
        .expect_send()
        .withf(|call| {
            let body: Value = serde_json::from_str(&call.body).expect("json");
            body["data"]["analyticsEvent"] == TEST_EVENT
                && body["webhookId"] == "whk_1"
                && body["isBatched"] == false
                && body["data"]["id"] == call.message_id.as_str()
                && call.secrets.len() == 1
        })
        .returning(|_| TransportResponse {
            status: Some(500),
            retry_after_seconds: None,
            body: "oops".into(),
            error: None,
            failure: None,
            duration_ms: 7,
        });
    let attempt = service(repo, transport)
        .test(&who(Role::Workbench), &ENV.into(), &"whk_1".into())
        .await
        .expect("sent");
    assert_eq!(attempt.status_code, Some(500));
    assert_eq!(attempt.error.as_deref(), Some("HTTP 500"));
    assert_eq!(attempt.next_attempt_at, None);
}

#[tokio::test]
async fn delivery_attempt_wraps_the_event_and_schedules_a_retry() {
    let mut transport = MockWebhookTransport::new();
    transport
        .expect_send()
        .withf(|call| {
            let body: Value = serde_json::from_str(&call.body).expect("json");
            body["requestId"] == "whd_1"
                && body["environmentId"] == ENV
                && body["data"] == json!({"id": "evt_1"})
                && call.message_id == "evt_1"
        })
        .returning(|_| TransportResponse {
            status: None,
            retry_after_seconds: None,
            body: String::new(),
            error: Some("timed out after 15 s".into()),
            failure: Some(CallFailure::Timeout),
            duration_ms: 15_000,
        });
    let svc = DeliveryService::new(
        Arc::new(MockWebhookRepository::new()),
        Arc::new(transport),
        clock(),
        RetryPolicy::parse("1s").expect("valid"),
    );
    let mut j = job(1, None);
    j.data = json!({"id": "evt_1"});
    let record = svc.attempt(j).await;
    assert!(matches!(record.next, NextStep::RetryAt(at) if at > t0()));
    assert_eq!(
        record.outcome.error.as_deref(),
        Some("timed out after 15 s")
    );
    assert_eq!(record.outcome.kind(), AttemptKind::Timeout);
    assert_eq!(
        record.subscription,
        Some(SubscriptionChange::Failing { since: t0() })
    );
}

#[test]
fn every_attempt_falls_in_one_of_six_named_kinds() {
    // A 2xx whose body broke off was delivered; any other answer is an HTTP error, whatever
    // the transport says of its body; no answer is told by the transport's failure.
    let got = |status: Option<u16>, failure: Option<CallFailure>| {
        AttemptOutcome::from(TransportResponse {
            status,
            retry_after_seconds: None,
            body: String::new(),
            error: failure.map(|f| format!("{f:?}")),
            failure,
            duration_ms: 1,
        })
        .kind()
    };
    assert_eq!(
        got(Some(200), Some(CallFailure::Other)),
        AttemptKind::Success
    );
    assert_eq!(got(Some(410), None), AttemptKind::HttpError);
    assert_eq!(got(Some(302), None), AttemptKind::HttpError);
    assert_eq!(
        got(Some(500), Some(CallFailure::Timeout)),
        AttemptKind::HttpError
    );
    assert_eq!(
        got(None, Some(CallFailure::Connect)),
        AttemptKind::ConnectError
    );
    assert_eq!(got(None, Some(CallFailure::Other)), AttemptKind::Error);
    assert_eq!(got(None, None), AttemptKind::Error);
    let names: std::collections::HashSet<&str> =
        AttemptKind::ALL.iter().map(|k| k.as_str()).collect();
    assert_eq!(names.len(), AttemptKind::ALL.len(), "{names:?}");
}

#[tokio::test]
async fn a_delivery_whose_call_panics_is_tried_three_times_then_fails_alone_with_an_error_id() {
    let mut transport = MockWebhookTransport::new();
    transport
        .expect_send()
        .times(crate::unit::ATTEMPTS as usize)
        .returning(|_| panic!("injected: the transport panics"));
    let svc = DeliveryService::new(
        Arc::new(MockWebhookRepository::new()),
        Arc::new(transport),
        clock(),
        RetryPolicy::parse("1s").expect("valid"),
    );
    let record = svc.attempt(job(1, None)).await;
    assert_eq!(record.next, NextStep::Failed);
    assert_eq!(record.delivery_id.as_deref(), Some("whd_1"));
    assert_eq!(record.outcome.kind(), AttemptKind::Error, "counted apart");
    let error = record.outcome.error.expect("error");
    assert!(error.contains("errorId err_"), "{error}");
    assert!(!error.contains("injected"), "{error}");
}

#[test]
fn a_retry_after_of_any_size_is_bounded_before_any_arithmetic() {
    let p = RetryPolicy::parse("5s").expect("valid");
    assert_eq!(
        p.delay_after(1, Some(u64::MAX), 0.0),
        Some(Duration::seconds(10)),
        "at most twice the step"
    );
    assert!(RetryPolicy::parse("99999999999999999d").is_err());
    assert!(RetryPolicy::parse("9223372036854775807ms").is_err());
}

#[tokio::test]
async fn an_attempt_carries_its_claims_lease_so_a_stale_holder_cannot_record_it() {
    let mut transport = MockWebhookTransport::new();
    transport.expect_send().returning(|_| TransportResponse {
        status: Some(204),
        retry_after_seconds: None,
        body: String::new(),
        error: None,
        failure: None,
        duration_ms: 2,
    });
    let mut repo = MockWebhookRepository::new();
    // The store refuses an outcome whose lease is not the one it holds (docs/architecture.md, Time,
    // leases and fencing).
    let held = t0() + Duration::seconds(90);
    repo.expect_record().returning(move |records| {
        Ok(records.iter().filter(|r| r.lease != Some(held)).count() as u64)
    });
    let svc = DeliveryService::new(
        Arc::new(repo),
        Arc::new(transport),
        clock(),
        RetryPolicy::parse("1s").expect("valid"),
    );
    let stale = DeliveryJob {
        lease_until: t0() + Duration::seconds(30),
        ..job(1, None)
    };
    let current = DeliveryJob {
        lease_until: held,
        ..job(1, None)
    };
    let late = svc.attempt(stale).await;
    let holder = svc.attempt(current).await;
    assert_eq!(late.lease, Some(t0() + Duration::seconds(30)));
    assert_eq!(svc.record(vec![late]).await.expect("record"), 1, "refused");
    assert_eq!(svc.record(vec![holder]).await.expect("record"), 0);
}

#[tokio::test]
async fn a_key_that_only_reads_webhooks_sees_their_secrets_masked() {
    let stored = Subscription {
        headers: [(
            "Authorization".to_owned(),
            "Bearer receiver-token-1234".to_owned(),
        )]
        .into_iter()
        .collect(),
        previous_secret: Some(new_secret()),
        ..sub()
    };
    let (secret, kept) = (stored.secret.clone(), stored.clone());
    let mut repo = MockWebhookRepository::new();
    repo.expect_get()
        .returning(move |_, _| Ok(Some(kept.clone())));
    let listed = stored.clone();
    repo.expect_list()
        .returning(move |_| Ok(vec![listed.clone()]));
    let svc = service(repo, MockWebhookTransport::new());
    let reader = caller(ENV, KeyAccess::Scopes(vec![Scope::WebhooksRead]));
    let shown = svc
        .get(&reader, &ENV.into(), &"whk_1".into())
        .await
        .expect("get");
    let last4: String = secret.chars().skip(secret.chars().count() - 4).collect();
    assert_eq!(shown.secret, format!("whsec_…{last4}"));
    assert_eq!(shown.previous_secret, None);
    assert_eq!(shown.headers["Authorization"], "…1234");
    let listed = svc.list(&reader, &ENV.into()).await.expect("list");
    assert_eq!(listed[0].headers["Authorization"], "…1234");
    for writer in [
        caller(
            ENV,
            KeyAccess::Scopes(vec![Scope::WebhooksRead, Scope::WebhooksWrite]),
        ),
        who(Role::Workbench),
    ] {
        let whole = svc
            .get(&writer, &ENV.into(), &"whk_1".into())
            .await
            .expect("get");
        assert_eq!(
            whole, stored,
            "a key that may change webhooks sees them whole"
        );
    }
}

#[tokio::test]
async fn an_edit_keeps_what_it_does_not_name_and_checks_only_a_new_url() {
    // The URL is unchanged: the transport is not asked.
    let before = sub();
    let mut repo = MockWebhookRepository::new();
    let stored = before.clone();
    repo.expect_get()
        .returning(move |_, _| Ok(Some(stored.clone())));
    let secret = before.secret.clone();
    repo.expect_edit()
        .withf(move |s| {
            s.types == ["card-published"]
                && s.url == "https://example.com/hook"
                && s.secret == secret
        })
        .times(1)
        .returning(|_| Ok(()));
    let edited = service(repo, MockWebhookTransport::new())
        .update(
            &who(Role::Workbench),
            &ENV.into(),
            &"whk_1".into(),
            &json!({"types": ["card-published"]}),
        )
        .await
        .expect("edited");
    assert_eq!(edited.types, ["card-published"]);
    assert_eq!(
        (edited.url.as_str(), edited.method),
        (before.url.as_str(), before.method)
    );

    // A description is set, kept by an edit that does not name it, and cleared by null.
    for (stored, patch, expected) in [
        (None, json!({"description": "CRM"}), Some("CRM")),
        (
            Some("CRM"),
            json!({"types": ["card-published"]}),
            Some("CRM"),
        ),
        (Some("CRM"), json!({"description": null}), None),
        (Some("CRM"), json!({"description": ""}), None),
    ] {
        let mut repo = MockWebhookRepository::new();
        let current = Subscription {
            description: stored.map(str::to_owned),
            ..sub()
        };
        repo.expect_get()
            .returning(move |_, _| Ok(Some(current.clone())));
        let want = expected.map(str::to_owned);
        repo.expect_edit()
            .withf(move |s| s.description == want)
            .times(1)
            .returning(|_| Ok(()));
        let edited = service(repo, MockWebhookTransport::new())
            .update(&who(Role::Workbench), &ENV.into(), &"whk_1".into(), &patch)
            .await
            .expect("edited");
        assert_eq!(edited.description.as_deref(), expected, "{patch}");
    }

    // A new URL the policy refuses: nothing is stored.
    let mut repo = MockWebhookRepository::new();
    repo.expect_get().returning(|_, _| Ok(Some(sub())));
    repo.expect_edit().times(0);
    let mut transport = MockWebhookTransport::new();
    transport
        .expect_check_url()
        .returning(|_| Err("a private address".into()));
    let err = service(repo, transport)
        .update(
            &who(Role::Workbench),
            &ENV.into(),
            &"whk_1".into(),
            &json!({"url": "https://10.0.0.1/h"}),
        )
        .await
        .expect_err("refused");
    assert!(
        matches!(err, DomainError::Validation(ref e) if e[0].field == "url"),
        "{err:?}"
    );

    // A key that may only read webhooks may not edit them.
    let err = service(MockWebhookRepository::new(), MockWebhookTransport::new())
        .update(&who(Role::Events), &ENV.into(), &"whk_1".into(), &json!({}))
        .await
        .expect_err("forbidden");
    assert!(matches!(err, DomainError::Forbidden(_)), "{err:?}");
}
