//! Contract §19 end to end: two processes on one PostgreSQL, one with its wall clock five
//! minutes ahead (libfaketime, Debian's `faketime`, preloaded into that process only; its
//! monotonic clock is left alone). The service decides on the database's time, so the skewed
//! replica steals no lease and times no card wrong (expiry, embargo), and it says that its clock
//! is off.

use std::time::Duration;

use serde_json::{json, Value};

use crate::receiver::Receiver;
use crate::support::{call, Server};
use crate::trigger::{feed, fire, published_flow, users};

const LIBFAKETIME: &str = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1";

/// The PostgreSQL test database, or None (a skip) outside CI without PostgreSQL or
/// libfaketime; in CI both must be there.
fn prerequisites() -> Option<adapters_diesel::testing::TestDatabase> {
    let in_ci = std::env::var_os("CI").is_some();
    if !std::path::Path::new(LIBFAKETIME).exists() {
        assert!(!in_ci, "CI must install libfaketime (Debian's `faketime`)");
        eprintln!("skipped: no {LIBFAKETIME}");
        return None;
    }
    adapters_diesel::testing::TestDatabase::postgres()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_five_minutes_ahead_steals_no_lease_and_times_no_card_wrong() {
    let Some(db) = prerequisites() else { return };
    let a = Server::start(db).await;
    let b = a.replica(&[
        ("LD_PRELOAD", Some(LIBFAKETIME)),
        ("FAKETIME", Some("+300")),
        ("FAKETIME_DONT_FAKE_MONOTONIC", Some("1")),
        ("FAKETIME_NO_CACHE", Some("1")),
    ]);
    // It measured its offset before serving, and says so.
    let warned = b
        .logs()
        .lines()
        .any(|l| l.contains("\"WARN\"") && l.contains("clock is off the database"));
    assert!(warned, "{}", b.logs());
    let metrics = call(&b, "GET", "/metrics", None, None).await.text;
    let offset: f64 = metrics
        .lines()
        .find_map(|l| l.strip_prefix("workbench_clock_offset_seconds "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("{metrics}"));
    assert!((-301.0..=-299.0).contains(&offset), "{offset}");

    let receiver = Receiver::start().await;
    let created = call(
        &a,
        "POST",
        &format!("/v1/{}/webhook", a.env),
        Some(&a.admin_secret),
        Some(json!({"types": ["card-published"], "url": receiver.url})),
    )
    .await;
    assert_eq!(created.status, 201, "{}", created.text);
    let flow = published_flow(&a, false).await;
    // One-user starts through both processes: each card published once, delivered once.
    let starts = 200;
    for n in 0..starts {
        let server = if n % 2 == 0 { &a } else { &b };
        let reply = fire(
            server,
            &flow,
            "start",
            json!({"flows": [{"target": {"type": "user", "targetUserIds": [format!("skew-{n}")]}}]}),
        )
        .await;
        assert_eq!(reply.status, 200, "{}", reply.text);
    }
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while receiver.len() < starts && std::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // Time for any duplicate a stolen lease would send.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let (all, distinct) = receiver.deliveries_and_distinct_ids();
    assert_eq!(distinct, starts, "every event delivered");
    assert_eq!(all, starts, "no event delivered twice");
    // The receiver sees the database's time, not the skewed host's.
    for r in &receiver.received() {
        let sent: i64 = r.header("webhook-timestamp").parse().expect("timestamp");
        let skew = (r.received_at.timestamp() - sent).abs();
        assert!(skew <= 5, "webhook-timestamp {sent} is {skew} s off");
    }

    // A card started through the skewed replica expires on real time.
    users(&a, json!([{"id": "timed"}])).await;
    let started = chrono::Utc::now();
    let reply = fire(
        &b,
        &flow,
        "start",
        json!({"flows": [{"target": {"type": "user", "targetUserIds": ["timed"]},
            "payload": {"cardOptions": {"expiresInterval": "PT4S"}}}]}),
    )
    .await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    let card: Value = feed(&a, "timed").await.into_iter().next().expect("a card");
    let expires = card["expires"]
        .as_str()
        .or_else(|| card["expiresAt"].as_str())
        .unwrap_or_else(|| panic!("{card}"));
    let expires: chrono::DateTime<chrono::Utc> = expires.parse().expect("RFC 3339");
    let error = (expires - (started + chrono::Duration::seconds(4))).num_milliseconds();
    assert!(
        error.abs() <= 2_000,
        "expiry {error} ms off real time: {card}"
    );
    // And leaves the feed on time, whichever process sweeps it.
    let deadline = started + chrono::Duration::seconds(4 + 4);
    loop {
        if feed(&a, "timed").await.is_empty() {
            break;
        }
        assert!(
            chrono::Utc::now() < deadline,
            "the card did not expire on time"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let gone = chrono::Utc::now();
    assert!(
        gone >= started + chrono::Duration::seconds(3),
        "expired early: {} ms after the start",
        (gone - started).num_milliseconds()
    );

    // An embargo set through the skewed replica ends on real time, not five minutes early.
    users(&a, json!([{"id": "held"}])).await;
    let started = chrono::Utc::now();
    let embargo = (started + chrono::Duration::seconds(4))
        .to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
    let reply = fire(
        &b,
        &flow,
        "start",
        json!({"flows": [{"target": {"type": "user", "targetUserIds": ["held"]},
            "payload": {"cardOptions": {"embargo": embargo}}}]}),
    )
    .await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    assert!(feed(&a, "held").await.is_empty(), "embargoed at first");
    let deadline = started + chrono::Duration::seconds(4 + 4);
    while feed(&b, "held").await.is_empty() {
        assert!(
            chrono::Utc::now() < deadline,
            "the embargo did not end on time"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let shown = chrono::Utc::now();
    assert!(
        shown >= started + chrono::Duration::seconds(3),
        "shown early: {} ms after the start",
        (shown - started).num_milliseconds()
    );
}

/// Contract §21 on §19's clock: with one of two processes 40 s ahead, no wait ends early,
/// whichever process starts the flow or claims the wait.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_forty_seconds_ahead_ends_no_wait_early() {
    let Some(db) = prerequisites() else { return };
    let a = Server::start(db).await;
    let b = a.replica(&[
        ("LD_PRELOAD", Some(LIBFAKETIME)),
        ("FAKETIME", Some("+40")),
        ("FAKETIME_DONT_FAKE_MONOTONIC", Some("1")),
        ("FAKETIME_NO_CACHE", Some("1")),
    ]);
    let ids: Vec<String> = (0..20).map(|i| format!("skew{i:02}")).collect();
    users(
        &a,
        json!(ids.iter().map(|id| json!({"id": id})).collect::<Vec<_>>()),
    )
    .await;
    let config = crate::steps::program(
        &["first"],
        json!({"first": crate::steps::card_step("First", &["pause"]),
               "pause": {"type": "wait", "properties": {"duration": "PT5S"}, "next": ["second"]},
               "second": crate::steps::card_step("Second", &[])}),
        &["First", "Second"],
        json!({}),
    );
    let flow = crate::trigger::flow_publishing(&a, "Skew", config).await;
    // Half started through each process.
    let started = std::time::Instant::now();
    for (n, id) in ids.iter().enumerate() {
        let through = if n % 2 == 0 { &a } else { &b };
        let reply = fire(
            through,
            &flow,
            "start",
            json!({"flows": [{"target": {"type": "user", "targetUserIds": [id]}}]}),
        )
        .await;
        assert_eq!(reply.status, 200, "{}", reply.text);
    }
    let last_start = started.elapsed();
    // Until the earliest deadline (5 s after the first start), nobody has a second card.
    while started.elapsed() < Duration::from_millis(4_800) {
        for id in &ids {
            let seen = crate::steps::headlines(&a, id).await;
            assert!(
                !seen.iter().any(|h| h == "Second"),
                "{id} at {:?}: {seen:?}",
                started.elapsed()
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // Then each gets it, within a few seconds of the last deadline.
    let limit = last_start + Duration::from_secs(15);
    for id in &ids {
        loop {
            if crate::steps::headlines(&a, id).await == ["First", "Second"] {
                break;
            }
            assert!(started.elapsed() < limit, "{id}: no second card");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}
