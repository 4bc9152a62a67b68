//! Flows that wait (contract §21), against the real binary (release build), on SQLite and,
//! when TEST_POSTGRES_URL is set, PostgreSQL.
//!
//! `cargo bench -p server --bench waits` runs:
//! 1. `POST /start` of one user per request, 32 clients for 10 s, to a one-step flow (a card)
//!    and to a three-step flow (card, `wait P1D`, card), alternating four times each in the same
//!    minutes (A/B): requests/s and p99. Ledger: every invocation of each run completes with one
//!    card, and each three-step one leaves one instance waiting.
//! 2. A tag of BENCH_WAITS users (default 20,000) through card → a wait of BENCH_WAIT_SECONDS
//!    (20) → card: how late each second card is made after its deadline (the least, p50, p99
//!    and the largest), on the database's own times. Ledger: every user has each card once.
//! 3. (SQLite) the bytes a waiting instance takes at rest: `flow_instances` and its indexes, read
//!    with `dbstat`, over the instances of the second part while they wait.
//!
//! 4. BENCH_DUE_RATE (2,000) waits a second falling due while `/start` runs open-loop at 2,000/s
//!    ([`loads::beside`]).
//! 5. BENCH_SUBMITS (500) submits a second, each resuming a `wait-for-card` step
//!    ([`loads::submits`]).
//!
//! BENCH_BACKEND=sqlite or postgres runs one backend; BENCH_PART=starts, waits, beside or
//! submits runs one part (the third goes with the second).

mod common;
#[path = "waits/loads.rs"]
mod loads;
#[allow(dead_code, unused_macros, unused_imports)]
#[path = "../../../tests/blackbox/support.rs"]
mod support;

use std::time::{Duration, Instant};

use adapters_diesel::testing::{raw_texts, TestDatabase};
use serde_json::{json, Value};

/// A flow of `steps` from `first`, their cards of one template (`template`, else a headline),
/// published.
async fn flow_of(
    server: &support::Server,
    name: &str,
    first: &str,
    steps: Value,
    template: Option<Value>,
) -> String {
    let (admin, env) = (&server.admin_secret, &server.env);
    let template = template.unwrap_or_else(|| {
        json!({"metadata": {"cardName": "Bench"},
        "defaultView": {"content": [
            {"key": "h", "type": "headline", "attributes": {"text": "Hello"}}]}})
    });
    let config = json!({"type": "card", "initialSteps": [first], "steps": steps,
                        "cardTemplates": {"t1": template}});
    let created: Value = server
        .client
        .post(server.url(&format!("/v1/{env}/action-flow")))
        .bearer_auth(admin)
        .json(&json!({"name": name}))
        .send()
        .await
        .expect("create")
        .json()
        .await
        .expect("json");
    let id = created["data"]["id"].as_str().expect("id").to_owned();
    let published = server
        .client
        .post(server.url(&format!("/v1/{env}/action-flow/{id}/config/publish")))
        .bearer_auth(admin)
        .json(&config)
        .send()
        .await
        .expect("publish");
    assert!(published.status().is_success(), "{}", published.status());
    id
}

fn card(id: &str, next: &[&str]) -> Value {
    json!({"id": id, "type": "create-card", "properties": {"cardTemplateId": "t1"}, "next": next})
}

fn wait(id: &str, duration: &str, next: &[&str]) -> Value {
    json!({"id": id, "type": "wait", "properties": {"duration": duration}, "next": next})
}

/// A published flow of card `s1` → `wait` of `duration` → card `s2`.
async fn waiting_flow(server: &support::Server, name: &str, duration: &str) -> String {
    let steps = json!({"s1": card("s1", &["pause"]), "pause": wait("pause", duration, &["s2"]),
                       "s2": card("s2", &[])});
    flow_of(server, name, "s1", steps, None).await
}

/// One number a query's single row answers, as text.
fn number(url: &str, sql: &str) -> f64 {
    raw_texts(url, sql)
        .first()
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("a number from {sql}"))
}

/// `COUNT(*)` of `table` rows that match `filter`.
fn count(url: &str, table: &str, filter: &str) -> u64 {
    number(
        url,
        &format!("SELECT CAST(COUNT(*) AS TEXT) AS v FROM {table} WHERE {filter}"),
    ) as u64
}

/// Waits until no invocation is pending or running (a staged flow's are completed once every
/// user had its batch), then checks the ledger of the run whose users start with `prefix`.
async fn settled(server: &support::Server, flow: &str, prefix: &str, staged: bool) -> u64 {
    common::drained(server).await;
    let url = server.database_url();
    let started = count(
        url,
        "invocations",
        &format!("flow_id = '{flow}' AND target LIKE '%\"{prefix}%'"),
    );
    let ours = format!("flow_id = '{flow}' AND target LIKE '%\"{prefix}%'");
    let completed = count(
        url,
        "invocations",
        &format!("{ours} AND status = 'completed' AND cards_created = 1"),
    );
    assert_eq!(
        completed, started,
        "every {prefix} start completed with one card"
    );
    let theirs = format!("flow_id = '{flow}' AND user_id LIKE '{prefix}%'");
    let cards = count(url, "card_instances", &theirs);
    assert_eq!(cards, started, "one card per {prefix} start");
    if staged {
        let waiting = count(
            url,
            "flow_instances",
            &format!("{theirs} AND status = 'active'"),
        );
        assert_eq!(waiting, started, "one waiting instance per {prefix} start");
    }
    started
}

async fn starts(server: &support::Server) {
    let one = flow_of(
        server,
        "One step",
        "s1",
        json!({"s1": card("s1", &[])}),
        None,
    )
    .await;
    let three = waiting_flow(server, "Three steps", "P1D").await;
    let mut figures: [Vec<(f64, f64)>; 2] = [Vec::new(), Vec::new()];
    for round in 0..4 {
        for (n, (flow, staged)) in [(&one, false), (&three, true)].into_iter().enumerate() {
            let prefix = format!("r{round}f{n}u");
            let (rps, p99) = common::starts(server, flow, &prefix).await;
            let ledger = settled(server, flow, &prefix, staged).await;
            println!(
                "  round {round}, {} flow: {rps:.0} req/s, p99 {p99:.2} ms; \
                 ledger {ledger} starts, each one card{}",
                if staged { "three-step" } else { "one-step" },
                if staged {
                    " and one waiting instance"
                } else {
                    ""
                }
            );
            figures[n].push((rps, p99));
        }
    }
    let mean = |f: &[(f64, f64)], i: usize| {
        f.iter()
            .map(|x| if i == 0 { x.0 } else { x.1 })
            .sum::<f64>()
            / f.len() as f64
    };
    let (one_rps, three_rps) = (mean(&figures[0], 0), mean(&figures[1], 0));
    println!(
        "  /start, mean of 4: one-step {one_rps:.0} req/s (p99 {:.2} ms), \
         three-step {three_rps:.0} req/s (p99 {:.2} ms): {:+.1}%",
        mean(&figures[0], 1),
        mean(&figures[1], 1),
        (three_rps / one_rps - 1.0) * 100.0
    );
}

/// From which time of a user's first card (of the step named) its second card is timed.
#[derive(Clone, Copy)]
enum Gap {
    /// From when the first was made.
    Created(&'static str),
    /// From its last change (a submit).
    Updated(&'static str),
}

/// How long after `offset_ms` past the time `from` of each user's first card of `flow` its card
/// of step `s2` was made, in milliseconds, from the database's own times.
fn lateness(url: &str, flow: &str, from: Gap, offset_ms: u64) -> Vec<f64> {
    let (column, step) = match from {
        Gap::Created(step) => ("created", step),
        Gap::Updated(step) => ("updated", step),
    };
    let gap = if url.starts_with("sqlite://") {
        format!("b.created - a.{column}")
    } else {
        // Statistics of the tables just filled, or PostgreSQL plans the join as nested loops.
        adapters_diesel::testing::raw_execute(url, "ANALYZE card_instances");
        format!("EXTRACT(EPOCH FROM (b.created - a.{column})) * 1000")
    };
    raw_texts(
        url,
        &format!(
            "SELECT CAST({gap} - {offset_ms} AS TEXT) AS v \
             FROM card_instances a JOIN card_instances b \
             ON b.environment_id = a.environment_id AND b.invocation_id = a.invocation_id \
             AND b.user_id = a.user_id AND b.step_id = 's2' \
             WHERE a.flow_id = '{flow}' AND a.step_id = '{step}'"
        ),
    )
    .iter()
    .filter_map(|v| v.parse().ok())
    .collect()
}

async fn due_waits(server: &support::Server, backend: &str, users: u64) {
    let env = &server.env;
    common::seed_users(server.database_url(), env, users);
    let wait_s = common::setting("BENCH_WAIT_SECONDS", 20).max(1);
    let flow = waiting_flow(server, "Waits", &format!("PT{wait_s}S")).await;
    let started = Instant::now();
    start_tag(server, &flow, "bench").await;
    // Every user had its batch: the stored invocation is completed (its instances wait).
    let url = server.database_url();
    loop {
        let done = raw_texts(
            url,
            &format!("SELECT status AS v FROM invocations WHERE flow_id = '{flow}'"),
        );
        if done == ["completed"] {
            break;
        }
        assert!(started.elapsed() < Duration::from_secs(wait_s), "{done:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    println!(
        "  {users} users to their first card and a waiting instance: {:.1} s",
        started.elapsed().as_secs_f64()
    );
    if backend == "SQLite" {
        let bytes = number(
            url,
            "SELECT CAST(SUM(pgsize) AS TEXT) AS v FROM dbstat WHERE name = 'flow_instances' \
             OR name LIKE 'sqlite_autoindex_flow_instances%' OR name LIKE 'flow_instances_%'",
        );
        // Every stored instance waits (the first part's too, on `P1D`): the table's bytes are
        // theirs.
        let stored = number(
            url,
            "SELECT CAST(COUNT(*) AS TEXT) AS v FROM flow_instances WHERE status = 'active'",
        );
        let all = number(
            url,
            "SELECT CAST(COUNT(*) AS TEXT) AS v FROM flow_instances",
        );
        assert_eq!(stored, all, "every stored instance waits");
        let parts = raw_texts(
            url,
            "SELECT name || ' ' || CAST(SUM(pgsize) AS TEXT) AS v FROM dbstat \
             WHERE name = 'flow_instances' OR name LIKE 'sqlite_autoindex_flow_instances%' \
             OR name LIKE 'flow_instances_%' GROUP BY name",
        );
        let parts: Vec<String> = parts
            .iter()
            .filter_map(|p| {
                let (name, b) = p.rsplit_once(' ')?;
                Some(format!("{name} {:.0}", b.parse::<f64>().ok()? / stored))
            })
            .collect();
        println!(
            "  storage per waiting instance (flow_instances and its indexes, dbstat, \
             {stored} instances): {:.0} bytes ({})",
            bytes / stored,
            parts.join(", ")
        );
    }
    let limit = Duration::from_secs(wait_s + 120).saturating_sub(started.elapsed());
    cards_made(server, &flow, "s2", users, limit).await;
    let distinct = number(
        url,
        &format!(
            "SELECT CAST(COUNT(DISTINCT user_id) AS TEXT) AS v FROM card_instances \
             WHERE flow_id = '{flow}' AND step_id = 's2'"
        ),
    ) as u64;
    assert_eq!(distinct, users, "each user's second card once");
    let late = lateness(url, &flow, Gap::Created("s1"), wait_s * 1000);
    assert_eq!(late.len() as u64, users, "ledger: a second card per first");
    let (least, p50, p99, max) = spread(late);
    println!(
        "  {users} waits of {wait_s} s falling due together: second card after its deadline \
         p50 {p50:.0} ms, p99 {p99:.0} ms, max {max:.0} ms (least {least:.0} ms); \
         ledger: {users} second cards, one per user"
    );
}

/// The least, p50, p99 and largest of `values`, sorted here.
fn spread(mut values: Vec<f64>) -> (f64, f64, f64, f64) {
    assert!(!values.is_empty(), "no values");
    values.sort_by(f64::total_cmp);
    let at = |p: f64| values[common::rank(values.len(), p)];
    (values[0], at(0.5), at(0.99), at(1.0))
}

/// `POST /start` of the users tagged `tag`.
async fn start_tag(server: &support::Server, flow: &str, tag: &str) {
    let reply = server
        .client
        .post(server.url(&format!("/v1/{}/action-flow/{flow}/start", server.env)))
        .bearer_auth(&server.admin_secret)
        .json(&json!({"flows": [{"target": {"type": "tag", "tagName": tag}}]}))
        .send()
        .await
        .expect("start");
    assert!(reply.status().is_success(), "{}", reply.status());
}

/// Waits until `flow` has `n` cards of `step`.
async fn cards_made(server: &support::Server, flow: &str, step: &str, n: u64, limit: Duration) {
    let started = Instant::now();
    let filter = format!("flow_id = '{flow}' AND step_id = '{step}'");
    loop {
        let made = count(server.database_url(), "card_instances", &filter);
        if made == n {
            return;
        }
        assert!(started.elapsed() < limit, "{made} of {n} cards of {step}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn run(db: TestDatabase, backend: &str) {
    println!("{backend}:");
    let server = support::Server::start(db).await;
    let part = std::env::var("BENCH_PART").unwrap_or_default();
    let parts = ["", "starts", "waits", "beside", "submits"];
    assert!(
        parts.contains(&part.as_str()),
        "BENCH_PART: one of {parts:?}"
    );
    if part.is_empty() || part == "starts" {
        starts(&server).await;
    }
    if part.is_empty() || part == "waits" {
        due_waits(&server, backend, common::setting("BENCH_WAITS", 20_000)).await;
    }
    if part.is_empty() || part == "beside" {
        loads::beside(&server).await;
    }
    if part.is_empty() || part == "submits" {
        loads::submits(&server).await;
    }
}

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    println!("waits benchmarks: release binary, 2 HTTP workers, 2 engine loops, one waits loop");
    let (sqlite, postgres) = common::backends();
    if sqlite {
        runtime.block_on(run(TestDatabase::sqlite(), "SQLite"));
    }
    if postgres {
        if let Some(db) = TestDatabase::postgres() {
            runtime.block_on(run(db, "PostgreSQL"));
        }
    }
}
