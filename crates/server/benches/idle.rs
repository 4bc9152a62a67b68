//! The memory of an idle process, against the real binary (release build), on SQLite and,
//! when TEST_POSTGRES_URL is set, PostgreSQL. `cargo bench -p server --bench idle`.
//!
//! For each of BENCH_ROUNDS (default 3) fresh processes, with the service's own pool size:
//! 1. started, then idle for 10 s: its resident memory (`VmRSS`) and what it is made of, the
//!    process's own memory (`RssAnon`) and the pages of its binary and libraries (`RssFile`);
//! 2. after 10 s of `POST /start` (32 clients, one new user each) and the engine's drain,
//!    idle again for 15 s: the same figures, to show what use adds and keeps.
//!
//! Goal (issue 23): idle RSS ≤ 30 MB after start on both backends; pools and caches grow with
//! use, not at start. The ledger: every `/start` answered 200, and the engine ran every
//! invocation recorded (`workbench_invocations_pending` back to 0).

mod common;
#[allow(dead_code, unused_macros, unused_imports)]
#[path = "../../../tests/blackbox/support.rs"]
mod support;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use adapters_diesel::testing::TestDatabase;
use common::RUN;
use serde_json::json;

const CLIENTS: usize = 32;

/// `VmRSS`, `RssAnon` and `RssFile` of a process, in KiB.
fn memory(pid: u32) -> [u64; 3] {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("status");
    ["VmRSS:", "RssAnon:", "RssFile:"].map(|name| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|rest| rest.split_whitespace().next()?.parse().ok())
            .expect("a figure of /proc/PID/status")
    })
}

fn show([rss, anon, file]: [u64; 3]) -> String {
    let mib = |kib: u64| kib as f64 / 1024.0;
    format!(
        "RSS {:.1} MiB (own {:.1}, binary and libraries {:.1})",
        mib(rss),
        mib(anon),
        mib(file)
    )
}

/// Closed loop of `POST /start` for [`RUN`], one new user per request: the answers counted.
async fn starts(server: &support::Server, flow: &str) -> u64 {
    let url = server.url(&format!("/v1/{}/action-flow/{flow}/start", server.env));
    let counter = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..CLIENTS {
        let (client, url, secret, counter) = (
            server.client.clone(),
            url.clone(),
            server.admin_secret.clone(),
            counter.clone(),
        );
        tasks.push(tokio::spawn(async move {
            while started.elapsed() < RUN {
                let n = counter.fetch_add(1, Ordering::Relaxed);
                let response = client
                    .post(&url)
                    .bearer_auth(&secret)
                    .json(&json!({"flows": [{"target": {"type": "user", "targetUserIds": [format!("idle{n}")]}}]}))
                    .send()
                    .await
                    .expect("start");
                assert!(response.status().is_success(), "{}", response.status());
                response.bytes().await.expect("body");
            }
        }));
    }
    for task in tasks {
        task.await.expect("join");
    }
    counter.load(Ordering::Relaxed)
}

async fn round(db: TestDatabase) {
    // The service's own pool size, not the tests' smaller one.
    let server = support::Server::start_with(
        db,
        &[
            ("WORKBENCH_DATABASE_POOL_SIZE", None),
            ("WORKBENCH_RATE_LIMIT_KEY", Some("off")),
        ],
    )
    .await;
    tokio::time::sleep(Duration::from_secs(10)).await;
    let idle = memory(server.pid());
    let flow = common::published_flow(&server).await;
    let sent = starts(&server, &flow).await;
    let drained = Instant::now();
    while common::metric(&server, "workbench_invocations_pending").await != Some(0.0) {
        assert!(
            drained.elapsed() < Duration::from_secs(600),
            "the engine did not drain"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    tokio::time::sleep(Duration::from_secs(15)).await;
    let used = memory(server.pid());
    println!(
        "  idle after start: {}; after {sent} /start and 15 s idle: {}",
        show(idle),
        show(used)
    );
}

#[tokio::main]
async fn main() {
    let rounds = std::env::var("BENCH_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3);
    let only = std::env::var("BENCH_BACKEND").ok();
    if only.as_deref() != Some("postgres") {
        println!("SQLite:");
        for _ in 0..rounds {
            round(TestDatabase::sqlite()).await;
        }
    }
    if only.as_deref() != Some("sqlite") && TestDatabase::postgres().is_some() {
        println!("PostgreSQL:");
        for _ in 0..rounds {
            round(TestDatabase::postgres().expect("it was there a moment ago")).await;
        }
    }
}
