//! Flow list latency with 10,000 flows in the environment, over HTTP against the real binary
//! (release build), on SQLite and, when TEST_POSTGRES_URL is set, PostgreSQL.
//! Run: `cargo bench -p server --bench flow_list` (goal: p99 ≤ 10 ms for a filtered page).

#[allow(dead_code, unused_macros, unused_imports)]
#[path = "../../../tests/blackbox/support.rs"]
mod support;

use std::time::{Duration, Instant};

use adapters_diesel::testing::TestDatabase;
use adapters_diesel::{Database, DieselFlowRepository, DieselFolderRepository};
use chrono::Utc;
use domain::{Flow, FlowRepository, Folder, FolderRepository};
use serde_json::Map;

const FLOWS: usize = 10_000;
const REQUESTS: usize = 1_000;

fn percentile(sorted: &[Duration], p: f64) -> f64 {
    let index = ((sorted.len() as f64 * p).ceil() as usize).clamp(1, sorted.len()) - 1;
    sorted[index].as_secs_f64() * 1000.0
}

async fn seed(url: &str, env: &str, org: &str) -> Vec<String> {
    let db = Database::connect(url, 4).expect("connect");
    let folders = DieselFolderRepository::new(db.clone());
    let flows = DieselFlowRepository::new(db);
    let now = Utc::now();
    let mut folder_ids = Vec::new();
    for i in 0..5 {
        let id = format!("fld_bench{i:021}");
        let folder = Folder {
            id: id.clone().into(),
            name: format!("Folder {i}"),
            environment_id: env.into(),
            organisation_id: org.into(),
            parent_id: None,
            created: now,
            updated: now,
        };
        folders.insert(&folder).await.expect("folder");
        folder_ids.push(id);
    }
    let started = Instant::now();
    for i in 0..FLOWS {
        let published = i % 3 == 0;
        let flow = Flow {
            id: format!("flw_bench{i:021}").into(),
            environment_id: env.into(),
            organisation_id: org.into(),
            name: format!(
                "{} campaign {i}",
                if i % 2 == 0 { "Welcome" } else { "Receipt" }
            ),
            description: "seeded".into(),
            folder_id: (i % 2 == 0).then(|| folder_ids[i % 5].clone()),
            archived: i % 10 == 0,
            latest_version: u32::from(published),
            published_version: published.then_some(1),
            draft_version: None,
            variables: Map::new(),
            revision: 0,
            created: now,
            updated: now,
        };
        flows.insert(&flow, None).await.expect("flow");
    }
    println!(
        "  seeded {FLOWS} flows in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    folder_ids
}

async fn run(db: TestDatabase, backend: &str) {
    println!("{backend}:");
    let server = support::Server::start(db).await;
    let folders = seed(server.database_url(), &server.env, &server.org).await;
    let base = format!("/v1/{}/action-flow", server.env);
    let queries = [
        ("first page, no filter", "?limit=50".to_owned()),
        ("name contains", "?name=welcome&limit=50".to_owned()),
        ("status=PUBLISHED", "?status=PUBLISHED&limit=50".to_owned()),
        ("folderId", format!("?folderId={}&limit=50", folders[2])),
        (
            "name + status + folderId",
            format!(
                "?name=welcome&status=PUBLISHED&folderId={}&limit=50",
                folders[2]
            ),
        ),
        (
            "rare name (scans the environment)",
            "?name=campaign%209999&limit=50".to_owned(),
        ),
    ];
    for (label, query) in queries {
        let url = server.url(&format!("{base}{query}"));
        let get = || {
            server
                .client
                .get(&url)
                .bearer_auth(&server.admin_secret)
                .send()
        };
        for _ in 0..100 {
            get().await.expect("warm-up");
        }
        let mut latencies = Vec::with_capacity(REQUESTS);
        for _ in 0..REQUESTS {
            let started = Instant::now();
            let response = get().await.expect("request");
            assert_eq!(response.status(), 200);
            response.bytes().await.expect("body");
            latencies.push(started.elapsed());
        }
        latencies.sort();
        println!(
            "  {label:<36} p50 {:>6.2} ms   p99 {:>6.2} ms   max {:>6.2} ms",
            percentile(&latencies, 0.50),
            percentile(&latencies, 0.99),
            percentile(&latencies, 1.0)
        );
    }
}

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    println!(
        "flow list latency: {FLOWS} flows, {REQUESTS} sequential requests per query, limit 50"
    );
    runtime.block_on(run(TestDatabase::sqlite(), "SQLite"));
    if std::env::var_os("TEST_POSTGRES_URL").is_some() {
        if let Some(db) = TestDatabase::postgres() {
            runtime.block_on(run(db, "PostgreSQL"));
        }
    }
}
