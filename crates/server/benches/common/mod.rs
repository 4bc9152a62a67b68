//! What the benchmarks share: a flow configuration, percentiles, open-loop load, seeding.

#![allow(dead_code)]

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use diesel::connection::SimpleConnection;
use diesel::{Connection, PgConnection, SqliteConnection};
use serde_json::{json, Value};

pub const RUN: Duration = Duration::from_secs(10);

/// The whole number in the environment variable `name`, or `default` when it is unset or not
/// one.
pub fn setting(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// BENCH_PROCESSES, 1 or 2: how many `workbench serve` processes share the database (the
/// second started with `Server::replica`). SQLite is for one process, so its runs keep one.
pub fn processes(backend: &str) -> usize {
    if backend == "SQLite" {
        1
    } else {
        setting("BENCH_PROCESSES", 1).clamp(1, 2) as usize
    }
}

/// Which backends to run, (SQLite, PostgreSQL): both, unless BENCH_BACKEND names one alone
/// (`sqlite`, `postgres`); PostgreSQL only when TEST_POSTGRES_URL is set.
pub fn backends() -> (bool, bool) {
    let only = std::env::var("BENCH_BACKEND").ok();
    (
        only.as_deref() != Some("postgres"),
        only.as_deref() != Some("sqlite") && std::env::var_os("TEST_POSTGRES_URL").is_some(),
    )
}

pub fn config() -> Value {
    json!({
        "type": "card", "initialSteps": ["s1"],
        "variables": {"firstName": {"type": "string", "default": "there"}},
        "steps": {"s1": {"id": "s1", "type": "create-card",
            "properties": {"cardTemplateId": "t1"}}},
        "cardTemplates": {"t1": {"metadata": {"cardName": "Bench", "delivery": {"priority": 5}},
            "defaultView": {"content": [{"key": "h", "type": "headline",
                "attributes": {"text": "Hello %{firstName}"}}]}}}
    })
}

/// The index of the `p` percentile (0–1, nearest rank) in `len` sorted values (`len` > 0).
pub fn rank(len: usize, p: f64) -> usize {
    ((len as f64 * p).ceil() as usize).clamp(1, len) - 1
}

/// The `p` percentile (0–1) of sorted durations, in milliseconds.
pub fn pct(sorted: &[Duration], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    sorted[rank(sorted.len(), p)].as_secs_f64() * 1000.0
}

/// Open loop at a fixed rate for [`RUN`]: requests are sent on schedule whatever the answers
/// do. Returns (sent, p50, p99, max) of the answers.
pub async fn open_loop(
    make: Arc<dyn Fn(u64) -> reqwest::RequestBuilder + Send + Sync>,
    rate: u64,
) -> (usize, f64, f64, f64) {
    let interval = Duration::from_secs_f64(1.0 / rate as f64);
    let started = Instant::now();
    let mut tasks = Vec::new();
    let mut n = 0u64;
    while started.elapsed() < RUN {
        let due = started + interval * n as u32;
        if let Some(wait) = due.checked_duration_since(Instant::now()) {
            tokio::time::sleep(wait).await;
        }
        let request = make(1_000_000 + n);
        tasks.push(tokio::spawn(async move {
            let sent = Instant::now();
            let response = request.send().await.expect("request");
            assert!(response.status().is_success());
            response.bytes().await.expect("body");
            sent.elapsed()
        }));
        n += 1;
    }
    let mut all = Vec::new();
    for task in tasks {
        all.push(task.await.expect("join"));
    }
    all.sort();
    (all.len(), pct(&all, 0.5), pct(&all, 0.99), pct(&all, 1.0))
}

/// BENCH users `b1`..`b{users}`, tagged `bench`, written straight into the database.
pub fn seed_users(url: &str, env: &str, users: u64) {
    seed_tagged(url, env, "b", "'bench'", users);
}

/// Users `{prefix}1`..`{prefix}{users}`, each tagged with `tag`, an SQL expression of its
/// number `n`, written straight into the database.
pub fn seed_tagged(url: &str, env: &str, prefix: &str, tag: &str, users: u64) {
    let sql = format!(
        "INSERT INTO end_users (environment_id, id, test_user, attributes, created, updated) \
         SELECT '{env}', '{prefix}' || n, FALSE, '{{}}', CURRENT_TIMESTAMP, CURRENT_TIMESTAMP \
         FROM series; \
         INSERT INTO end_user_tags (environment_id, tag, user_id) \
         SELECT '{env}', {tag}, '{prefix}' || n FROM series;"
    );
    with_series(url, users, &sql);
}

/// Runs `sql` with a table-valued `series(n)` of 1..=rows available.
pub fn with_series(url: &str, rows: u64, sql: &str) {
    if let Some(path) = url.strip_prefix("sqlite://") {
        let mut conn = SqliteConnection::establish(path).expect("sqlite");
        conn.batch_execute(&format!(
            "PRAGMA busy_timeout = 30000; BEGIN IMMEDIATE; CREATE TEMP TABLE series AS WITH \
                RECURSIVE s(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM s WHERE n < {rows}) SELECT \
                    n FROM s; {sql} DROP TABLE series; COMMIT;"
        ))
        .expect("sql");
    } else {
        let mut conn = PgConnection::establish(url).expect("postgres");
        conn.batch_execute(&format!(
            "BEGIN; CREATE TEMP TABLE series AS SELECT n FROM generate_series(1, {rows}) AS n; \
                {sql} DROP TABLE series; COMMIT;"
        ))
        .expect("sql");
    }
}

/// A published flow of [`config`]; returns its id.
pub async fn published_flow(server: &crate::support::Server) -> String {
    published_flow_of(server, &config()).await
}

/// A published flow of `config`; returns its id.
pub async fn published_flow_of(server: &crate::support::Server, config: &Value) -> String {
    let (admin, env) = (&server.admin_secret, &server.env);
    let created = server
        .client
        .post(server.url(&format!("/v1/{env}/action-flow")))
        .bearer_auth(admin)
        .json(&json!({"name": "Bench"}))
        .send()
        .await
        .expect("create");
    let flow = created.json::<Value>().await.expect("json")["data"]["id"]
        .as_str()
        .expect("id")
        .to_owned();
    let published = server
        .client
        .post(server.url(&format!("/v1/{env}/action-flow/{flow}/config/publish")))
        .bearer_auth(admin)
        .json(config)
        .send()
        .await
        .expect("publish");
    assert!(published.status().is_success());
    flow
}

/// The latencies a closed loop's tasks gathered, since `started`: (requests/s, p50, p99).
pub async fn closed_loop_figures(
    started: Instant,
    tasks: Vec<tokio::task::JoinHandle<Vec<Duration>>>,
) -> (f64, f64, f64) {
    let mut all = Vec::new();
    for task in tasks {
        all.extend(task.await.expect("join"));
    }
    all.sort();
    (
        all.len() as f64 / started.elapsed().as_secs_f64(),
        pct(&all, 0.5),
        pct(&all, 0.99),
    )
}

/// The value of the unlabelled series `name` in the server's `/metrics`.
pub async fn metric(server: &crate::support::Server, name: &str) -> Option<f64> {
    let text = server
        .client
        .get(server.url("/metrics"))
        .send()
        .await
        .ok()?
        .text()
        .await
        .ok()?;
    let prefix = format!("{name} ");
    text.lines()
        .find_map(|l| l.strip_prefix(prefix.as_str()))
        .and_then(|v| v.trim().parse().ok())
}

/// Waits until the engine has run every invocation recorded (`workbench_invocations_pending`
/// at 0), so that a `/start` figure is not paying for the one before.
pub async fn drained(server: &crate::support::Server) {
    let started = Instant::now();
    while metric(server, "workbench_invocations_pending").await != Some(0.0) {
        assert!(
            started.elapsed() < Duration::from_secs(600),
            "the engine did not drain"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Clients of [`starts`].
pub const STARTS_CLIENTS: usize = 32;

/// Closed loop of `POST /start`, one new user per request: (requests/s, p99 ms).
pub async fn starts(server: &crate::support::Server, flow: &str, prefix: &str) -> (f64, f64) {
    let url = server.url(&format!("/v1/{}/action-flow/{flow}/start", server.env));
    let counter = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..STARTS_CLIENTS {
        let (client, url, secret, counter, prefix) = (
            server.client.clone(),
            url.clone(),
            server.admin_secret.clone(),
            counter.clone(),
            prefix.to_owned(),
        );
        tasks.push(tokio::spawn(async move {
            let mut latencies = Vec::new();
            while started.elapsed() < RUN {
                let n = counter.fetch_add(1, Ordering::Relaxed);
                let sent = Instant::now();
                let response = client
                    .post(&url)
                    .bearer_auth(&secret)
                    .json(&json!({"flows": [{"target": {"type": "user",
                        "targetUserIds": [format!("{prefix}{n}")]}}]}))
                    .send()
                    .await
                    .expect("start");
                assert!(response.status().is_success(), "{}", response.status());
                response.bytes().await.expect("body");
                latencies.push(sent.elapsed());
            }
            latencies
        }));
    }
    let (rps, _, p99) = closed_loop_figures(started, tasks).await;
    (rps, p99)
}
