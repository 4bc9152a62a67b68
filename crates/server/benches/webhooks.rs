//! Webhook delivery against the real binary (release build) and a receiver on loopback, on
//! SQLite and, when TEST_POSTGRES_URL is set, PostgreSQL.
//!
//! `cargo bench -p server --bench webhooks` runs:
//! 1. throughput: BENCH_EVENTS card-published events (default 20,000) from one tag fan-out,
//!    delivered to one subscription; then the same deliveries queued again at once (an outbox
//!    backlog) and drained: deliveries/s;
//! 2. latency: one-user triggers at 500/s for 10 s; event time (`data.timestamp`, when the
//!    engine stored the card and its event) to arrival at the receiver, p50/p95/p99;
//! 3. isolation: the same with a second subscription whose endpoint never answers (every call
//!    times out after 15 s): the healthy endpoint's percentiles beside those of 2.
//!
//! Each part keeps a ledger: every event it made delivered to the healthy endpoint (by
//! `webhook-id`), with the calls beyond one per event counted as duplicates; a part whose
//! ledger does not close is void.
//!
//! BENCH_BACKEND=postgres runs PostgreSQL alone. BENCH_PROCESSES=2 (PostgreSQL) starts a second
//! `workbench serve` on the same database: both run the engine and delivery loops of every
//! part, and the triggers of 2 and 3 alternate between the two.

mod common;
#[allow(dead_code)]
#[path = "../../../tests/blackbox/receiver.rs"]
mod receiver;
#[allow(dead_code, unused_macros, unused_imports)]
#[path = "../../../tests/blackbox/support.rs"]
mod support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use adapters_diesel::testing::TestDatabase;
use diesel::connection::SimpleConnection;
use diesel::{Connection, PgConnection, SqliteConnection};
use serde_json::{json, Value};

use common::pct;
use receiver::Receiver;

async fn subscribe(server: &support::Server, url: &str) {
    let reply = server
        .client
        .post(server.url(&format!("/v1/{}/webhook", server.env)))
        .bearer_auth(&server.admin_secret)
        .json(&json!({"types": ["card-published"], "url": url}))
        .send()
        .await
        .expect("subscribe");
    assert_eq!(reply.status(), 201);
}

async fn wait_for(receiver: &Receiver, count: usize, limit: Duration) {
    let started = Instant::now();
    while receiver.len() < count {
        assert!(
            started.elapsed() < limit,
            "only {} of {count} deliveries arrived",
            receiver.len()
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// The ledger of one part: every event it made delivered, each call counted. Waits a moment
/// for late calls (duplicates) before taking what arrived; a part whose ledger does not close
/// is void.
async fn ledger(receiver: &Receiver, expected: usize) -> Vec<receiver::Received> {
    tokio::time::sleep(Duration::from_secs(1)).await;
    let got = receiver.take();
    let distinct: std::collections::HashSet<&str> =
        got.iter().map(|r| r.header("webhook-id")).collect();
    println!(
        "    ledger: {} of {expected} events delivered ({} calls, {} duplicates): {}",
        distinct.len(),
        got.len(),
        got.len() - distinct.len(),
        if distinct.len() == expected {
            "closed"
        } else {
            "VOID"
        }
    );
    got
}

/// Event-to-arrival latencies, sorted.
fn latencies(got: &[receiver::Received]) -> Vec<Duration> {
    let mut all: Vec<Duration> = got
        .iter()
        .map(|r| {
            let body: Value = serde_json::from_str(&r.body).expect("json");
            let at = chrono::DateTime::parse_from_rfc3339(
                body["data"]["timestamp"].as_str().expect("timestamp"),
            )
            .expect("rfc 3339");
            (r.received_at - at.to_utc()).to_std().unwrap_or_default()
        })
        .collect();
    all.sort();
    all
}

fn execute(url: &str, sql: &str) {
    if let Some(path) = url.strip_prefix("sqlite://") {
        let mut conn = SqliteConnection::establish(path).expect("sqlite");
        // The server writes beside this connection: wait for its transactions, as it does.
        conn.batch_execute("PRAGMA busy_timeout = 10000;")
            .expect("busy timeout");
        conn.batch_execute(sql).expect("sql");
    } else {
        PgConnection::establish(url)
            .expect("postgres")
            .batch_execute(sql)
            .expect("sql");
    }
}

async fn latency_run(
    servers: &[&support::Server],
    flow: &str,
    healthy: &Receiver,
    label: &str,
) -> f64 {
    healthy.take();
    let server = servers[0];
    let (client, secret) = (server.client.clone(), server.admin_secret.clone());
    // Each trigger's server, by its number.
    let urls: Vec<String> = servers
        .iter()
        .map(|s| s.url(&format!("/v1/{}/action-flow/{flow}/start", s.env)))
        .collect();
    let trigger: Arc<dyn Fn(u64) -> reqwest::RequestBuilder + Send + Sync> = Arc::new(move |n| {
        let url = &urls[(n % urls.len() as u64) as usize];
        client.post(url).bearer_auth(&secret).json(
            &json!({"flows": [{"target": {"type": "user", "targetUserIds": [format!("b{}",
                n % 20_000 + 1)]}}]}),
        )
    });
    let (sent, ..) = common::open_loop(trigger, 500).await;
    wait_for(healthy, sent, Duration::from_secs(60)).await;
    let got = ledger(healthy, sent).await;
    let all = latencies(&got);
    let p95 = pct(&all, 0.95);
    println!(
        "  {label}: {} events, event→delivery p50 {:.1} ms  p95 {p95:.1} ms  p99 {:.1} ms  max \
            {:.1} ms",
        all.len(),
        pct(&all, 0.5),
        pct(&all, 0.99),
        pct(&all, 1.0)
    );
    p95
}

async fn run(db: TestDatabase, backend: &str, events: u64) {
    println!("{backend}:");
    // WORKBENCH_SQLITE_SYNCHRONOUS reaches the server as the bench was given it (FULL unless
    // set), so that both settings are measured with one binary.
    let synchronous = std::env::var("WORKBENCH_SQLITE_SYNCHRONOUS").ok();
    let server = support::Server::start_with(
        db,
        &[("WORKBENCH_SQLITE_SYNCHRONOUS", synchronous.as_deref())],
    )
    .await;
    let replica = (common::processes(backend) > 1).then(|| server.replica(&[]));
    if replica.is_some() {
        println!("  two processes on one database");
    }
    let servers: Vec<&support::Server> = std::iter::once(&server).chain(&replica).collect();
    let flow = common::published_flow(&server).await;
    let healthy = Receiver::start().await;
    subscribe(&server, &healthy.url).await;
    common::seed_users(server.database_url(), &server.env, events);

    // 1. Throughput.
    let started = Instant::now();
    let reply = server
        .client
        .post(server.url(&format!("/v1/{}/action-flow/{flow}/start", server.env)))
        .bearer_auth(&server.admin_secret)
        .json(&json!({"flows": [{"target": {"type": "tag", "tagName": "bench"}}]}))
        .send()
        .await
        .expect("fan-out");
    assert!(reply.status().is_success());
    wait_for(&healthy, events as usize, Duration::from_secs(600)).await;
    let pipeline = started.elapsed().as_secs_f64();
    println!(
        "  fan-out of {events} users with delivery of their {events} events: {pipeline:.1} s \
            ({:.0} deliveries/s, engine included)",
        events as f64 / pipeline
    );
    ledger(&healthy, events as usize).await;
    // A delivery leaves the outbox once delivered (its attempt is its record), so the backlog
    // is the same deliveries queued again: one pending per event, due now.
    let now = (chrono::Utc::now() - chrono::Duration::seconds(1)).naive_utc();
    let now = now.format("%Y-%m-%d %H:%M:%S%.6f");
    execute(
        server.database_url(),
        &format!(
            "INSERT INTO webhook_deliveries (id, environment_id, subscription_id, event_id, \
             event_name, status, attempts, trigger_kind, next_attempt_at, created, updated) \
             SELECT 'whd_' || e.id, e.environment_id, s.id, e.id, e.name, 'pending', 0, \
             'scheduled', '{now}', '{now}', '{now}' \
             FROM analytics_events e JOIN webhook_subscriptions s \
             ON s.environment_id = e.environment_id WHERE e.name = 'card-published'"
        ),
    );
    let started = Instant::now();
    wait_for(&healthy, events as usize, Duration::from_secs(600)).await;
    let drain = started.elapsed().as_secs_f64();
    println!(
        "  backlog of {events} due deliveries drained in {drain:.2} s: {:.0} deliveries/s",
        events as f64 / drain
    );
    ledger(&healthy, events as usize).await;
    healthy.take();

    // 2. Latency at 500 events/s; 3. the same beside an endpoint that never answers.
    let alone = latency_run(
        &servers,
        &flow,
        &healthy,
        "500 events/s, one healthy endpoint",
    )
    .await;
    let dead = Receiver::start().await;
    dead.answer(|_| 0);
    subscribe(&server, &dead.url).await;
    let beside = latency_run(
        &servers,
        &flow,
        &healthy,
        "500 events/s, beside one that times out",
    )
    .await;
    println!(
        "  healthy endpoint p95 beside a dead one: {:+.0}% ({} calls to the dead endpoint in \
            flight or done)",
        (beside / alone - 1.0) * 100.0,
        dead.len()
    );
}

fn main() {
    let events = std::env::var("BENCH_EVENTS")
        .ok()
        .and_then(|u| u.parse().ok())
        .unwrap_or(20_000);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    println!("webhook benchmarks: release binary, receiver on loopback in this process");
    let (sqlite, postgres) = common::backends();
    if sqlite {
        runtime.block_on(run(TestDatabase::sqlite(), "SQLite", events));
    }
    if postgres {
        if let Some(db) = TestDatabase::postgres() {
            runtime.block_on(run(db, "PostgreSQL", events));
        }
    }
}
