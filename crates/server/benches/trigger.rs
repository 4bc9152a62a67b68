//! Trigger throughput and fan-out, against the real binary (release build), on SQLite and,
//! when TEST_POSTGRES_URL is set, PostgreSQL.
//!
//! `cargo bench -p server --bench trigger` runs:
//! 1. closed-loop load with 32 concurrent clients for 10 s: `POST .../start` with one user per
//!    request, beside `GET /healthz` of the same server (actix with the same middleware: the
//!    HTTP stack's ceiling on this machine);
//! 2. open-loop load at a fixed 2,000 requests/s for 10 s, reporting latency percentiles; then
//!    closed-loop feed reads (`GET /users/{id}/cards` of users the loads gave a card);
//! 3. a tag target of BENCH_USERS users (default 100,000) to all cards active, beside a raw
//!    `INSERT ... SELECT` of as many rows into a scratch table, and the schema's floor: as many
//!    cards (with their flow instances) and events written by `INSERT ... SELECT` alone.
//!
//! BENCH_ONLY=fanout runs the third part alone, BENCH_ONLY=loads the first two; BENCH_BACKEND=
//! postgres runs PostgreSQL alone. BENCH_PROCESSES=2 (PostgreSQL) starts a second `workbench
//! serve` on the same database: the loads' requests alternate between the two, and both run
//! the fan-out's engine loops (its ledger, one card per user, is the invocation's count).

mod common;
#[allow(dead_code, unused_macros, unused_imports)]
#[path = "../../../tests/blackbox/support.rs"]
mod support;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use adapters_diesel::testing::TestDatabase;
use diesel::connection::SimpleConnection;
use diesel::{Connection, PgConnection, SqliteConnection};
use serde_json::{json, Value};

const CLIENTS: usize = 32;
use common::RUN;

/// Closed loop: CLIENTS tasks send back to back for RUN. Returns (requests/s, p50, p99).
async fn closed_loop(
    make: Arc<dyn Fn(u64) -> reqwest::RequestBuilder + Send + Sync>,
) -> (f64, f64, f64) {
    let counter = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..CLIENTS {
        let (make, counter) = (make.clone(), counter.clone());
        tasks.push(tokio::spawn(async move {
            let mut latencies = Vec::new();
            while started.elapsed() < RUN {
                let n = counter.fetch_add(1, Ordering::Relaxed);
                let sent = Instant::now();
                let response = make(n).send().await.expect("request");
                assert!(response.status().is_success(), "{}", response.status());
                response.bytes().await.expect("body");
                latencies.push(sent.elapsed());
            }
            latencies
        }));
    }
    common::closed_loop_figures(started, tasks).await
}

async fn run(db: TestDatabase, backend: &str, users: u64) {
    // WORKBENCH_SQLITE_SYNCHRONOUS reaches the server as the bench was given it (FULL unless
    // set), so that both settings are measured with one binary.
    let synchronous = std::env::var("WORKBENCH_SQLITE_SYNCHRONOUS").ok();
    println!(
        "{backend} (SQLite synchronous: {}):",
        synchronous.as_deref().unwrap_or("full")
    );
    // WORKBENCH_RATE_LIMIT_KEY too: the harness turns the limit off (one key drives every
    // client), and a rate no client reaches (`1000000/s`) measures what the limiter costs.
    let key_limit = std::env::var("WORKBENCH_RATE_LIMIT_KEY").unwrap_or_else(|_| "off".into());
    println!("  rate limit per key: {key_limit}");
    let server = support::Server::start_with(
        db,
        &[
            ("WORKBENCH_SQLITE_SYNCHRONOUS", synchronous.as_deref()),
            ("WORKBENCH_RATE_LIMIT_KEY", Some(key_limit.as_str())),
        ],
    )
    .await;
    let admin = server.admin_secret.clone();
    let env = server.env.clone();
    let flow = common::published_flow(&server).await;
    let processes = common::processes(backend);
    let replica = (processes > 1).then(|| server.replica(&[]));
    if replica.is_some() {
        println!("  two processes on one database, requests alternating");
    }
    // Each request's server, by its number.
    let bases: Arc<Vec<String>> = Arc::new(
        std::iter::once(server.url(""))
            .chain(replica.iter().map(|r| r.url("")))
            .collect(),
    );
    let base = move |n: u64| bases[(n % bases.len() as u64) as usize].clone();

    let (client, secret, at) = (server.client.clone(), admin.clone(), base.clone());
    let start_path = format!("/v1/{env}/action-flow/{flow}/start");
    let trigger: Arc<dyn Fn(u64) -> reqwest::RequestBuilder + Send + Sync> = Arc::new(move |n| {
        client
            .post(format!("{}{start_path}", at(n)))
            .bearer_auth(&secret)
            .json(&json!({"flows": [{"target": {"type": "user",
                "targetUserIds": [format!("user{n}")]}}]}))
    });
    let (client, at) = (server.client.clone(), base.clone());
    let health: Arc<dyn Fn(u64) -> reqwest::RequestBuilder + Send + Sync> =
        Arc::new(move |n| client.get(format!("{}/healthz", at(n))));
    let (client, secret, at) = (server.client.clone(), admin.clone(), base);
    let users_path = format!("/v1/{env}/users");
    // The feed of users the loads gave a card, one user per request.
    let feed: Arc<dyn Fn(u64) -> reqwest::RequestBuilder + Send + Sync> = Arc::new(move |n| {
        client
            .get(format!("{}{users_path}/user{}/cards", at(n), n % 1_000))
            .bearer_auth(&secret)
    });

    // BENCH_ONLY=fanout skips the request loads (for profiling the fan-out alone);
    // BENCH_ONLY=loads skips the fan-out (for many short A/B rounds of the request loads).
    let only = std::env::var("BENCH_ONLY").ok();
    if only.as_deref() != Some("fanout") {
        loads(&server, &env, &flow, trigger, health, feed).await;
    }
    if only.as_deref() != Some("loads") {
        fan_out(&server, &env, &flow, users).await;
    }
}

async fn loads(
    server: &support::Server,
    env: &str,
    flow: &str,
    trigger: Arc<dyn Fn(u64) -> reqwest::RequestBuilder + Send + Sync>,
    health: Arc<dyn Fn(u64) -> reqwest::RequestBuilder + Send + Sync>,
    feed: Arc<dyn Fn(u64) -> reqwest::RequestBuilder + Send + Sync>,
) {
    let (rps, p50, p99) = closed_loop(health.clone()).await;
    println!(
        "  GET /healthz (HTTP stack baseline), {CLIENTS} clients: {rps:>7.0} req/s  p50 \
        {p50:.2} ms  p99 {p99:.2} ms"
    );
    let (rps, p50, p99) = closed_loop(trigger.clone()).await;
    println!(
        "  POST /start, 1 user each, {CLIENTS} clients:      {rps:>7.0} req/s  p50 {p50:.2} \
        ms  p99 {p99:.2} ms"
    );
    let (sent, p50, p99, max) = common::open_loop(trigger, 2_000).await;
    println!(
        "  POST /start at 2,000 req/s for 10 s ({sent} sent): p50 {p50:.2} ms  p99 {p99:.2} \
        ms  max {max:.2} ms"
    );
    // Let the engine drain what the load queued before the fan-out is timed.
    drain(server, env, flow).await;
    let (rps, p50, p99) = closed_loop(feed).await;
    println!(
        "  GET /users/{{id}}/cards, {CLIENTS} clients:       {rps:>7.0} req/s  p50 {p50:.2} \
        ms  p99 {p99:.2} ms"
    );
}

async fn fan_out(server: &support::Server, env: &str, flow: &str, users: u64) {
    let admin = &server.admin_secret;
    // Fan-out: BENCH_USERS users with one tag.
    let seeded = Instant::now();
    common::seed_users(server.database_url(), env, users);
    println!(
        "  seeded {users} tagged users in {:.1} s",
        seeded.elapsed().as_secs_f64()
    );
    let started = Instant::now();
    let reply = server
        .client
        .post(server.url(&format!("/v1/{env}/action-flow/{flow}/start")))
        .bearer_auth(admin)
        .json(&json!({"flows": [{"target": {"type": "tag", "tagName": "bench"}}]}))
        .send()
        .await
        .expect("fan-out");
    let body: Value = reply.json().await.expect("json");
    let id = body["data"]["triggeredFlows"][0]["flowInvocationId"]
        .as_str()
        .expect("id")
        .to_owned();
    let status_url = server.url(&format!("/v1/{env}/action-flow/{flow}/invocations/{id}"));
    loop {
        let status: Value = server
            .client
            .get(&status_url)
            .bearer_auth(admin)
            .send()
            .await
            .expect("status")
            .json()
            .await
            .expect("json");
        if status["data"]["status"] == "completed" {
            assert_eq!(status["data"]["cardsCreated"], users);
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let fan_out = started.elapsed().as_secs_f64();
    println!(
        "  tag of {users} users to all cards active: {fan_out:.1} s ({:.0} cards/s)",
        users as f64 / fan_out
    );
    let (cards, distinct) = cards_of(server.database_url(), &id);
    assert_eq!((cards, distinct), (users, users), "one card per user");
    println!("  ledger: {cards} cards stored, one per user");
    let raw = raw_insert(server.database_url(), users);
    println!("  raw INSERT ... SELECT of {users} rows into a scratch table: {raw:.2} s");
    let floor = schema_floor(server.database_url(), &id, users);
    println!(
        "  as many cards and events by INSERT ... SELECT alone (1,000 users per transaction): \
            {floor:.1} s"
    );
}

/// The floor of the schema: as many cards (with their flow instances) and events as invocation
/// `id` made, each a copy of its first ones (same sizes) under new ids and users in ascending
/// order like the engine's, written by `INSERT ... SELECT` alone into the same tables and
/// indexes, 1,000 users per transaction like the engine's batches: no Rust, no binding, no
/// engine work.
fn schema_floor(url: &str, id: &str, users: u64) -> f64 {
    let sqlite = url.starts_with("sqlite://");
    // Zero-padded so that ids and users ascend as text, like ULIDs and the tag's user order.
    let padded = |n: &str| {
        if sqlite {
            format!("printf('%016d', {n})")
        } else {
            format!("lpad({n}::text, 16, '0')")
        }
    };
    let (fin, crd, evt, user) = (
        format!("'xfin' || {}", padded("s.n")),
        format!("'xcrd' || {}", padded("s.n")),
        format!("'xevt' || {}", padded("s.n")),
        format!("'xu' || {}", padded("s.n")),
    );
    // One row of each, read once (untimed) into temporary tables.
    let samples = format!(
        "CREATE TEMP TABLE floor_c AS SELECT * FROM card_instances WHERE invocation_id = '{id}' \
            LIMIT 1; \
         CREATE TEMP TABLE floor_e AS SELECT * FROM analytics_events WHERE card_instance_id = \
             (SELECT id FROM floor_c);"
    );
    let chunk = |from: u64| {
        let rows = if sqlite {
            format!(
                "floor_series s WHERE s.n > {from} AND s.n <= {}",
                from + 1_000
            )
        } else {
            format!("generate_series({}, {}) AS s(n)", from + 1, from + 1_000)
        };
        format!(
            "{begin}; \
             INSERT INTO card_instances (id, environment_id, user_id, flow_instance_id, \
                 invocation_id, flow_id, flow_version, \
              step_id, template_id, template_name, status, priority, stream_ids, platforms, \
                  content, context, embargo_until, \
              expires_at, snoozed_until, published_at, created, updated, instance_status) \
             SELECT {crd}, c.environment_id, {user}, {fin}, 'floor', c.flow_id, c.flow_version, \
              c.step_id, c.template_id, c.template_name, c.status, c.priority, c.stream_ids, \
                  c.platforms, c.content, c.context, \
              c.embargo_until, c.expires_at, c.snoozed_until, c.published_at, c.created, \
                  c.updated, c.instance_status \
             FROM floor_c c, {rows}; \
             INSERT INTO analytics_events (id, environment_id, card_instance_id, name, status, \
                 previous_status, submitted, published_at, created) \
             SELECT {evt}, e.environment_id, {crd}, e.name, e.status, e.previous_status, \
                 e.submitted, e.published_at, e.created \
             FROM floor_e e, {rows}; \
             COMMIT;",
            begin = if sqlite { "BEGIN IMMEDIATE" } else { "BEGIN" },
        )
    };
    let chunks: Vec<String> = (0..users).step_by(1_000).map(chunk).collect();
    fn run(conn: &mut impl SimpleConnection, setup: &str, chunks: &[String]) -> f64 {
        conn.batch_execute(setup).expect("floor setup");
        let started = Instant::now();
        for chunk in chunks {
            conn.batch_execute(chunk).expect("floor chunk");
        }
        started.elapsed().as_secs_f64()
    }
    if let Some(path) = url.strip_prefix("sqlite://") {
        let mut conn = SqliteConnection::establish(path).expect("sqlite");
        let setup = format!(
            "PRAGMA busy_timeout = 30000; {samples} \
             CREATE TEMP TABLE floor_series (n INTEGER PRIMARY KEY); \
             INSERT INTO floor_series WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM \
                 r WHERE n < {users}) SELECT n FROM r;"
        );
        run(&mut conn, &setup, &chunks)
    } else {
        let mut conn = PgConnection::establish(url).expect("postgres");
        run(&mut conn, &samples, &chunks)
    }
}

async fn drain(server: &support::Server, env: &str, flow: &str) {
    // Invocations are claimed oldest first: one sent now finishes after all queued before it.
    let url = server.url(&format!("/v1/{env}/action-flow/{flow}/start"));
    let reply = server
        .client
        .post(url)
        .bearer_auth(&server.admin_secret)
        .json(&json!({"flows": [{"target": {"type": "user", "targetUserIds": ["drain"]}}]}))
        .send()
        .await
        .expect("drain");
    let body: Value = reply.json().await.expect("json");
    let id = body["data"]["triggeredFlows"][0]["flowInvocationId"]
        .as_str()
        .expect("id")
        .to_owned();
    let status_url = server.url(&format!("/v1/{env}/action-flow/{flow}/invocations/{id}"));
    let started = Instant::now();
    loop {
        let status: Value = server
            .client
            .get(&status_url)
            .bearer_auth(&server.admin_secret)
            .send()
            .await
            .expect("status")
            .json()
            .await
            .expect("json");
        if status["data"]["status"] == "completed" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    println!(
        "  the engine drained the queued invocations {:.1} s after the load stopped",
        started.elapsed().as_secs_f64()
    );
}

/// The cards invocation `id` stored, and the users they are of, counted in the database.
fn cards_of(url: &str, id: &str) -> (u64, u64) {
    #[derive(diesel::QueryableByName)]
    struct Counted {
        #[diesel(sql_type = diesel::sql_types::BigInt)]
        cards: i64,
        #[diesel(sql_type = diesel::sql_types::BigInt)]
        users: i64,
    }
    use diesel::RunQueryDsl;
    let query = diesel::sql_query(
        "SELECT count(*) AS cards, count(DISTINCT user_id) AS users FROM card_instances \
         WHERE invocation_id = $1",
    );
    let counted: Counted = match url.strip_prefix("sqlite://") {
        Some(path) => query
            .bind::<diesel::sql_types::Text, _>(id)
            .get_result(&mut SqliteConnection::establish(path).expect("sqlite")),
        None => query
            .bind::<diesel::sql_types::Text, _>(id)
            .get_result(&mut PgConnection::establish(url).expect("postgres")),
    }
    .expect("count the cards");
    let count = |n: i64| u64::try_from(n).expect("a count");
    (count(counted.cards), count(counted.users))
}

fn raw_insert(url: &str, rows: u64) -> f64 {
    let started = Instant::now();
    common::with_series(
        url,
        rows,
        "CREATE TABLE scratch (id TEXT PRIMARY KEY, user_id TEXT NOT NULL, content TEXT NOT NULL, \
            created TIMESTAMP NOT NULL); \
         INSERT INTO scratch SELECT 'crd' || n, 'b' || n, '{\"Web\":{}}', CURRENT_TIMESTAMP FROM \
             series;",
    );
    started.elapsed().as_secs_f64()
}

fn main() {
    let users = std::env::var("BENCH_USERS")
        .ok()
        .and_then(|u| u.parse().ok())
        .unwrap_or(100_000);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    println!("trigger benchmarks: release binary, 2 HTTP workers, 2 engine loops");
    let (sqlite, postgres) = common::backends();
    if sqlite {
        runtime.block_on(run(TestDatabase::sqlite(), "SQLite", users));
    }
    if postgres {
        if let Some(db) = TestDatabase::postgres() {
            runtime.block_on(run(db, "PostgreSQL", users));
        }
    }
}
