//! History that stays bounded (contract §14), against the real binary (release build), on
//! SQLite and, when TEST_POSTGRES_URL is set, PostgreSQL.
//!
//! `cargo bench -p server --bench lifecycle` runs, per backend, steady open-loop `/start`
//! traffic (one user each, BENCH_RATE requests/s, default 400) whose cards expire 10 s after
//! they are made (so they close, and a card's whole life is in the run), for BENCH_SECONDS
//! (default 300):
//! 1. with `WORKBENCH_RETENTION=1m`: the database's size every 30 s, which must stop growing
//!    (the last 2 minutes add at most 10%), `/start` p99 with the pruner running, and the bytes
//!    per card kept at steady state: the size over the cards in the database at the end, and
//!    over the last 2 minutes (the sizes and the cards of the last 5 samples, summed);
//! 2. with retention `off`: `/start` p99 under the same load, and the bytes each card adds.
//!
//! One webhook subscription (`card-published`, `card-expired`) to a receiver on loopback takes
//! every card's two events, so that deliveries and their attempts are among the rows kept. The
//! ledger: every request answered 2xx, and every event of every card delivered (duplicates
//! counted); a run whose ledger does not close is void.
//!
//! BENCH_BACKEND=sqlite or postgres runs one backend alone; BENCH_PHASE=pruned or off one
//! phase alone.

mod common;
#[allow(dead_code)]
#[path = "../../../tests/blackbox/receiver.rs"]
mod receiver;
#[allow(dead_code, unused_macros, unused_imports)]
#[path = "../../../tests/blackbox/support.rs"]
mod support;

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use adapters_diesel::testing::TestDatabase;
use diesel::{Connection, PgConnection, QueryableByName, RunQueryDsl};
use serde_json::json;

use common::pct;

const SAMPLE: Duration = Duration::from_secs(30);

fn seconds() -> u64 {
    std::env::var("BENCH_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(300)
}

fn rate() -> u64 {
    std::env::var("BENCH_RATE")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(400)
}

#[derive(QueryableByName)]
struct Figure {
    #[diesel(sql_type = diesel::sql_types::BigInt)]
    n: i64,
}

/// The database's size in bytes: SQLite's file (its WAL, bounded at 32 MiB and emptied at
/// rest, is [`wal`]); PostgreSQL's tables, indexes and TOAST in the test's schema.
fn size(url: &str) -> u64 {
    if let Some(path) = url.strip_prefix("sqlite://") {
        return std::fs::metadata(path).map_or(0, |m| m.len());
    }
    let mut c = PgConnection::establish(url).expect("postgres");
    let f: Figure = diesel::sql_query(
        "SELECT CAST(COALESCE(SUM(pg_total_relation_size(c.oid)), 0) AS BIGINT) AS n \
         FROM pg_class c JOIN pg_namespace s ON s.oid = c.relnamespace \
         WHERE s.nspname = current_schema() AND c.relkind = 'r'",
    )
    .get_result(&mut c)
    .expect("size");
    u64::try_from(f.n).unwrap_or(0)
}

/// SQLite's WAL file, in bytes (0 on PostgreSQL).
fn wal(url: &str) -> u64 {
    url.strip_prefix("sqlite://")
        .and_then(|path| std::fs::metadata(format!("{path}-wal")).ok())
        .map_or(0, |m| m.len())
}

/// Cards in the database now.
fn cards(url: &str) -> u64 {
    let sql = "SELECT CAST(COUNT(*) AS BIGINT) AS n FROM card_instances";
    let f: Figure = if let Some(path) = url.strip_prefix("sqlite://") {
        let mut c = diesel::SqliteConnection::establish(path).expect("sqlite");
        diesel::connection::SimpleConnection::batch_execute(&mut c, "PRAGMA busy_timeout = 5000")
            .expect("busy timeout");
        diesel::sql_query(sql).get_result(&mut c).expect("count")
    } else {
        let mut c = PgConnection::establish(url).expect("postgres");
        diesel::sql_query(sql).get_result(&mut c).expect("count")
    };
    u64::try_from(f.n).unwrap_or(0)
}

fn mb(bytes: u64) -> f64 {
    bytes as f64 / 1_048_576.0
}

/// One phase: steady traffic for the run, sampling the size and the cards in the database;
/// (p50 ms, p99 ms, sizes, cards made, cards kept at the end, cards at each size sample).
async fn phase(db: TestDatabase, retention: &str) -> (f64, f64, Vec<u64>, u64, u64, Vec<u64>) {
    let server = support::Server::start_with(
        db,
        &[
            ("WORKBENCH_RETENTION", Some(retention)),
            ("WORKBENCH_RATE_LIMIT_KEY", Some("off")),
        ],
    )
    .await;
    let env = server.env.clone();
    let flow = common::published_flow(&server).await;
    let receiver = receiver::Receiver::start().await;
    let subscribed = server
        .client
        .post(server.url(&format!("/v1/{env}/webhook")))
        .bearer_auth(&server.admin_secret)
        .json(&json!({"types": ["card-published", "card-expired"], "url": receiver.url}))
        .send()
        .await
        .expect("subscribe");
    assert_eq!(subscribed.status(), 201, "subscribe");
    // What arrived, by event id; taken from the receiver each second so that it holds nothing.
    let delivered: Arc<Mutex<(HashSet<String>, u64)>> = Arc::default();
    let collector = {
        let (receiver, delivered) = (receiver.clone(), delivered.clone());
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(Duration::from_secs(1)).await;
                let got = receiver.take();
                let mut seen = delivered.lock().expect("delivered");
                seen.1 += got.len() as u64;
                for r in got {
                    seen.0.insert(r.header("webhook-id").to_owned());
                }
            }
        })
    };
    let (client, url, secret) = (
        server.client.clone(),
        server.url(&format!("/v1/{env}/action-flow/{flow}/start")),
        server.admin_secret.clone(),
    );
    let run = Duration::from_secs(seconds());
    let interval = Duration::from_secs_f64(1.0 / rate() as f64);
    let database = server.database_url().to_owned();
    let started = Instant::now();
    let sampler = tokio::spawn(async move {
        let mut sizes = vec![size(&database)];
        let mut counts = vec![0];
        let mut next = SAMPLE;
        while next <= run {
            tokio::time::sleep_until(tokio::time::Instant::from_std(started + next)).await;
            let database = database.clone();
            let (s, w, n) = tokio::task::spawn_blocking(move || {
                (size(&database), wal(&database), cards(&database))
            })
            .await
            .expect("size");
            println!(
                "    {:>4} s: {:>8.1} MB (WAL {:.1} MB), {n} cards",
                (started + next).duration_since(started).as_secs(),
                mb(s),
                mb(w)
            );
            sizes.push(s);
            counts.push(n);
            next += SAMPLE;
        }
        (sizes, counts)
    });
    let mut tasks = Vec::new();
    let mut n = 0u64;
    while started.elapsed() < run {
        let due = started + interval * u32::try_from(n).unwrap_or(u32::MAX);
        if let Some(wait) = due.checked_duration_since(Instant::now()) {
            tokio::time::sleep(wait).await;
        }
        let request = client
            .post(&url)
            .bearer_auth(&secret)
            .json(&json!({"flows": [{
                "target": {"type": "user", "targetUserIds": [format!("user{n}")]},
                "payload": {"cardOptions": {"expiresInterval": "PT10S"}}
            }]}));
        tasks.push(tokio::spawn(async move {
            let sent = Instant::now();
            let response = request.send().await.expect("request");
            assert!(response.status().is_success(), "{}", response.status());
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
    let (sizes, counts) = sampler.await.expect("sampler");
    let kept = cards(server.database_url());
    // The ledger: every request sent was answered 2xx (asserted as each came), and each card's
    // two events delivered; the last cards expire 10 s after the run.
    let expected = 2 * n;
    let waited = Instant::now();
    while delivered.lock().expect("delivered").0.len() < expected as usize
        && waited.elapsed() < Duration::from_secs(120)
    {
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    collector.abort();
    let (events, calls) = {
        let seen = delivered.lock().expect("delivered");
        (seen.0.len() as u64, seen.1)
    };
    let closed = all.len() as u64 == n && events == expected;
    println!(
        "    ledger: {n} sent, {} answered 2xx; {events} of {expected} events delivered ({} calls, \
            {} duplicates): {}",
        all.len(),
        calls,
        calls.saturating_sub(events),
        if closed { "closed" } else { "VOID" }
    );
    (pct(&all, 0.5), pct(&all, 0.99), sizes, n, kept, counts)
}

async fn run(backend: &str, make: impl Fn() -> TestDatabase) {
    let phases = std::env::var("BENCH_PHASE").ok();
    println!(
        "{backend}: {} s of /start at {} req/s, cards expiring after 10 s",
        seconds(),
        rate()
    );
    if phases.as_deref() != Some("off") {
        println!("  WORKBENCH_RETENTION=1m, database size:");
        let (p50, p99, sizes, made, kept, counts) = phase(make(), "1m").await;
        let last = *sizes.last().unwrap_or(&0);
        // The size 2 minutes before the end (4 samples of 30 s).
        let before = sizes.len().checked_sub(5).map_or(0, |i| sizes[i]);
        let growth = if before > 0 {
            (last as f64 / before as f64 - 1.0) * 100.0
        } else {
            f64::NAN
        };
        // Over the last 2 minutes (the last 5 samples): the cards kept swing with the pruner's
        // passes (every 30 s), so one instant's count moves the figure by a tenth either way.
        let recent = sizes.len().saturating_sub(5);
        let steady = sizes[recent..].iter().sum::<u64>() as f64
            / counts[recent..].iter().sum::<u64>().max(1) as f64;
        println!(
            "  pruned: /start p50 {p50:.2} ms  p99 {p99:.2} ms; {made} cards made, {kept} kept at \
                the end; \
             last 2 min {growth:+.1}%; {:.0} bytes per card kept at the end, {steady:.0} over the \
                 last 2 min",
            last as f64 / kept.max(1) as f64
        );
    }
    if phases.as_deref() != Some("pruned") {
        let (p50, p99, sizes, made, _, _) = phase(make(), "off").await;
        let (first, last) = (sizes[0], *sizes.last().unwrap_or(&0));
        println!(
            "  retention off: /start p50 {p50:.2} ms  p99 {p99:.2} ms; {made} cards, {:.1} MB at \
                the end, {:.0} bytes each",
            mb(last),
            last.saturating_sub(first) as f64 / made.max(1) as f64
        );
    }
}

#[tokio::main]
async fn main() {
    let (sqlite, postgres) = common::backends();
    if sqlite {
        run("SQLite", TestDatabase::sqlite).await;
    }
    if postgres && TestDatabase::postgres().is_some() {
        run("PostgreSQL", || {
            TestDatabase::postgres().expect("it was there a moment ago")
        })
        .await;
    }
}
