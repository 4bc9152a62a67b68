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

use std::time::Duration;

use adapters_diesel::testing::TestDatabase;

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
    let (rate, _) = common::starts(&server, &flow, "idle").await;
    common::drained(&server).await;
    tokio::time::sleep(Duration::from_secs(15)).await;
    let used = memory(server.pid());
    println!(
        "  idle after start: {}; after 10 s of /start at {rate:.0} req/s and 15 s idle: {}",
        show(idle),
        show(used)
    );
}

#[tokio::main]
async fn main() {
    let rounds = common::setting("BENCH_ROUNDS", 3);
    let (sqlite, postgres) = common::backends();
    if sqlite {
        println!("SQLite:");
        for _ in 0..rounds {
            round(TestDatabase::sqlite()).await;
        }
    }
    if postgres && TestDatabase::postgres().is_some() {
        println!("PostgreSQL:");
        for _ in 0..rounds {
            round(TestDatabase::postgres().expect("it was there a moment ago")).await;
        }
    }
}
