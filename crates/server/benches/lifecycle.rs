//! History that stays bounded (contract §14), against the real binary (release build), on
//! SQLite and, when TEST_POSTGRES_URL is set, PostgreSQL.
//!
//! `cargo bench -p server --bench lifecycle` runs, per backend, steady open-loop `/start`
//! traffic (one user each, BENCH_RATE requests/s, default 400) whose cards expire 10 s after
//! they are made (so they close, and a card's whole life is in the run), for BENCH_SECONDS
//! (default 300):
//! 1. with `WORKBENCH_RETENTION=1m`: the database's size every 30 s, which must stop growing
//!    (the last 2 minutes add at most 10%: from their first sample to the last, and to the
//!    largest size before them), `/start` p99 with the pruner running, and the bytes
//!    per card kept at steady state: the size over the cards in the database at the end, and
//!    over the last 2 minutes (the sizes and the cards of the last 5 samples, summed);
//! 2. with retention `off`: `/start` p99 under the same load, and the bytes each card adds.
//!
//! One webhook subscription (`card-published`, `card-expired`) to a receiver on loopback takes
//! every card's two events, so that deliveries and their attempts are among the rows kept. The
//! ledger: every request answered 2xx, and every event of every card delivered (duplicates
//! counted); a run whose ledger does not close is void.
//!
//! BENCH_MIX=soak runs a production-like mix instead of `/start` alone: of every 5 scheduled
//! slots, 3 are a `/start`, 1 a feed read of the user started a second before followed at once
//! by the submit of the card it shows (2 requests), and 1 a read of the last invocation started:
//! BENCH_RATE × 6/5 requests/s (BENCH_RATE=500 makes 600). Its ledger also counts every feed
//! read, submit and invocation read answered 2xx, and each card's closing event (completed or
//! expired) delivered.
//!
//! Each phase prints `/start` p99 over the first and over the last minute of the run, and the
//! share of the run the pruner spent in its transactions (`workbench_prune_seconds_total`).
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
use serde_json::{json, Value};

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

/// Whether the load is the soak's mix (BENCH_MIX=soak) rather than `/start` alone.
fn soak() -> bool {
    std::env::var("BENCH_MIX").as_deref() == Ok("soak")
}

/// The flow of the load: [`common::config`], with a submit button for the mix's submits (only
/// then: the button would add to the bytes a card takes, which `/start` alone measures).
fn flow_config() -> Value {
    let mut config = common::config();
    if soak() {
        config["cardTemplates"]["t1"]["defaultView"]["actions"] =
            json!([{"key": "ok", "type": "submitButton", "attributes": {"text": "OK"}}]);
    }
    config
}

/// One answered request of the load.
struct Answered {
    /// Whether it was a `/start`.
    start: bool,
    /// When it was sent, since the run began.
    sent: Duration,
    /// How long its answer took.
    took: Duration,
}

/// What sends the load's requests.
#[derive(Clone)]
struct Load {
    client: reqwest::Client,
    /// `.../v1/{env}`.
    base: String,
    flow: String,
    secret: String,
    /// The invocation of the last `/start` answered, for the mix's invocation reads.
    last: Arc<Mutex<Option<String>>>,
    started: Instant,
}

impl Load {
    /// Sends request `n` (slot `slot` of the mix; always 0 without it) and what it leads to.
    async fn send(self, slot: u64, n: u64) -> Vec<Answered> {
        match slot {
            0..=2 => vec![self.start(n).await],
            3 => self.read_and_submit(n).await,
            _ => vec![self.invocation().await],
        }
    }

    /// Sends `request`, which must be answered 2xx: the answer's JSON (null if none).
    async fn timed(&self, request: reqwest::RequestBuilder, start: bool) -> (Answered, Value) {
        let sent = Instant::now();
        let response = request
            .bearer_auth(&self.secret)
            .send()
            .await
            .expect("request");
        let status = response.status();
        let body = response.bytes().await.expect("body");
        assert!(
            status.is_success(),
            "{status}: {}",
            String::from_utf8_lossy(&body)
        );
        let answered = Answered {
            start,
            sent: sent.duration_since(self.started),
            took: sent.elapsed(),
        };
        (
            answered,
            serde_json::from_slice(&body).unwrap_or(Value::Null),
        )
    }

    /// `/start` of `user{n}`, whose card expires 10 s after it is made.
    async fn start(&self, n: u64) -> Answered {
        let request = self
            .client
            .post(format!("{}/action-flow/{}/start", self.base, self.flow))
            .json(&json!({"flows": [{
                "target": {"type": "user", "targetUserIds": [format!("user{n}")]},
                "payload": {"cardOptions": {"expiresInterval": "PT10S"}}
            }]}));
        let (answered, body) = self.timed(request, true).await;
        if let Some(id) = body["data"]["triggeredFlows"][0]["flowInvocationId"].as_str() {
            *self.last.lock().expect("last") = Some(id.to_owned());
        }
        answered
    }

    /// The feed of the user started about a second before slot `n` (slot 3 of the mix reads
    /// the user of a slot 0, one a slot), then the submit of the card it shows. In the first
    /// second, the feed of the first user, and no submit.
    async fn read_and_submit(&self, n: u64) -> Vec<Answered> {
        let back = 3 + 5 * (rate() / 5).max(1);
        let started = n.checked_sub(back);
        let user = format!("user{}", started.unwrap_or(0));
        let feed = self.client.get(format!("{}/users/{user}/cards", self.base));
        let (read, body) = self.timed(feed, false).await;
        let mut answered = vec![read];
        let card = body["data"][0]["id"].as_str().filter(|_| started.is_some());
        if let Some(card) = card {
            let submit = self
                .client
                .post(format!("{}/users/{user}/cards/{card}/actions", self.base))
                .json(&json!({"action": "submit", "values": {"ok": true}}));
            answered.push(self.timed(submit, false).await.0);
        }
        answered
    }

    /// A read of the last invocation started (of the flow's first, before any is answered).
    async fn invocation(&self) -> Answered {
        let last = self.last.lock().expect("last").clone();
        let url = match last {
            Some(id) => format!("{}/action-flow/{}/invocations/{id}", self.base, self.flow),
            None => format!("{}/action-flow/{}", self.base, self.flow),
        };
        self.timed(self.client.get(url), false).await.0
    }
}

/// The p99 of the `/start` answers sent within `from..to` of the run, in milliseconds.
fn start_p99(answered: &[Answered], from: Duration, to: Duration) -> f64 {
    let mut took: Vec<Duration> = answered
        .iter()
        .filter(|a| a.start && a.sent >= from && a.sent < to)
        .map(|a| a.took)
        .collect();
    took.sort();
    pct(&took, 0.99)
}

/// The figures of one phase.
struct Phase {
    p50: f64,
    p99: f64,
    /// `/start` p99 over the first and over the last minute.
    first_minute: f64,
    last_minute: f64,
    /// The database's size at each sample.
    sizes: Vec<u64>,
    /// Cards made (one a `/start`), and kept at the end.
    made: u64,
    kept: u64,
    /// Cards in the database at each sample.
    counts: Vec<u64>,
    /// The share of the run the pruner spent in its transactions, in percent.
    pruning: f64,
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

/// One phase: steady traffic for the run, sampling the size and the cards in the database.
async fn phase(db: TestDatabase, retention: &str) -> Phase {
    let server = support::Server::start_with(
        db,
        &[
            ("WORKBENCH_RETENTION", Some(retention)),
            ("WORKBENCH_RATE_LIMIT_KEY", Some("off")),
        ],
    )
    .await;
    let env = server.env.clone();
    let flow = common::published_flow_of(&server, &flow_config()).await;
    let receiver = receiver::Receiver::start().await;
    let subscribed = server
        .client
        .post(server.url(&format!("/v1/{env}/webhook")))
        .bearer_auth(&server.admin_secret)
        .json(
            &json!({"types": ["card-published", "card-expired", "card-completed"],
            "url": receiver.url}),
        )
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
    let run = Duration::from_secs(seconds());
    let interval = Duration::from_secs_f64(1.0 / rate() as f64);
    let database = server.database_url().to_owned();
    let pruned_before = common::metric(&server, "workbench_prune_seconds_total").await;
    let started = Instant::now();
    let load = Load {
        client: server.client.clone(),
        base: server.url(&format!("/v1/{env}")),
        flow,
        secret: server.admin_secret.clone(),
        last: Arc::default(),
        started,
    };
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
    let (mut n, mix) = (0u64, soak());
    while started.elapsed() < run {
        let due = started + interval * u32::try_from(n).unwrap_or(u32::MAX);
        if let Some(wait) = due.checked_duration_since(Instant::now()) {
            tokio::time::sleep(wait).await;
        }
        let slot = if mix { n % 5 } else { 0 };
        tasks.push(tokio::spawn(load.clone().send(slot, n)));
        n += 1;
    }
    let mut all = Vec::new();
    for task in tasks {
        all.extend(task.await.expect("join"));
    }
    let ran = started.elapsed();
    let pruning = match (
        pruned_before,
        common::metric(&server, "workbench_prune_seconds_total").await,
    ) {
        (Some(before), Some(after)) => (after - before) / ran.as_secs_f64() * 100.0,
        _ => f64::NAN,
    };
    let (sizes, counts) = sampler.await.expect("sampler");
    let kept = cards(server.database_url());
    // The ledger: every request sent was answered 2xx (asserted as each came), and each card's
    // two events (published, then completed or expired) delivered; the last cards expire 10 s
    // after the run.
    let starts = all.iter().filter(|a| a.start).count() as u64;
    let expected = 2 * starts;
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
    let closed = events == expected;
    println!(
        "    ledger: {n} slots sent, {} requests answered 2xx ({starts} /start); {events} of \
            {expected} events delivered ({calls} calls, {} duplicates): {}",
        all.len(),
        calls.saturating_sub(events),
        if closed { "closed" } else { "VOID" }
    );
    let minute = Duration::from_secs(60);
    let mut took: Vec<Duration> = all.iter().filter(|a| a.start).map(|a| a.took).collect();
    took.sort();
    Phase {
        p50: pct(&took, 0.5),
        p99: pct(&took, 0.99),
        first_minute: start_p99(&all, Duration::ZERO, minute),
        last_minute: start_p99(&all, run.saturating_sub(minute), run),
        sizes,
        made: starts,
        kept,
        counts,
        pruning,
    }
}

async fn run(backend: &str, make: impl Fn() -> TestDatabase) {
    let phases = std::env::var("BENCH_PHASE").ok();
    let what = match soak() {
        true => "the soak's mix (3 /start, 1 feed read and its submit, 1 invocation read)",
        false => "/start",
    };
    println!(
        "{backend}: {} s of {what} at {} slots/s, cards expiring after 10 s",
        seconds(),
        rate()
    );
    if phases.as_deref() != Some("off") {
        println!("  WORKBENCH_RETENTION=1m, database size:");
        let phase = phase(make(), "1m").await;
        let (sizes, counts) = (&phase.sizes, &phase.counts);
        let last = *sizes.last().unwrap_or(&0);
        // The size 2 minutes before the end (4 samples of 30 s).
        let before = sizes.len().checked_sub(5).map_or(0, |i| sizes[i]);
        let growth = if before > 0 {
            (last as f64 / before as f64 - 1.0) * 100.0
        } else {
            f64::NAN
        };
        // What the last 2 minutes add to the largest size before them: two instants swing by a
        // third with the pruner's passes (every 30 s), the high-water mark does not.
        let split = sizes.len().saturating_sub(4);
        let peak = |part: &[u64]| part.iter().copied().max().unwrap_or(0) as f64;
        let added = match split {
            0 => f64::NAN,
            _ => (peak(&sizes[split..]) / peak(&sizes[..split]).max(1.0) - 1.0) * 100.0,
        };
        // Over the last 2 minutes (the last 5 samples): the cards kept swing with the pruner's
        // passes (every 30 s), so one instant's count moves the figure by a tenth either way.
        let recent = sizes.len().saturating_sub(5);
        let steady = sizes[recent..].iter().sum::<u64>() as f64
            / counts[recent..].iter().sum::<u64>().max(1) as f64;
        println!(
            "  pruned: /start p50 {:.2} ms  p99 {:.2} ms (first minute {:.2}, last minute {:.2}); \
                {} cards made, {} kept at the end; last 2 min {growth:+.1}% end to end, \
                {added:+.1}% to the largest size before; {:.0} bytes per \
                card kept at the end, {steady:.0} over the last 2 min; pruning {:.1}% of the run",
            phase.p50,
            phase.p99,
            phase.first_minute,
            phase.last_minute,
            phase.made,
            phase.kept,
            last as f64 / phase.kept.max(1) as f64,
            phase.pruning
        );
    }
    if phases.as_deref() != Some("pruned") {
        let phase = phase(make(), "off").await;
        let (first, last) = (phase.sizes[0], *phase.sizes.last().unwrap_or(&0));
        println!(
            "  retention off: /start p50 {:.2} ms  p99 {:.2} ms (first minute {:.2}, last minute \
                {:.2}); {} cards, {:.1} MB at the end, {:.0} bytes each",
            phase.p50,
            phase.p99,
            phase.first_minute,
            phase.last_minute,
            phase.made,
            mb(last),
            last.saturating_sub(first) as f64 / phase.made.max(1) as f64
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
