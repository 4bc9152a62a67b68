//! The console's server-rendered pages with a 50-step flow and 90 days of daily totals, over
//! HTTP against the real binary (release build), on SQLite and, when TEST_POSTGRES_URL is set,
//! PostgreSQL.
//!
//! `cargo bench -p server --bench console`: a flow of 50 steps (ten branches, each leading to
//! four cards and the next branch, and a wait for card after the first card), published, then
//! started for BENCH_USERS (default 200) users who all wait at its wait for card, and 90 days of
//! totals for each of its steps and card events written as the engine writes them. Then, signed
//! in, BENCH_REQUESTS (default 300) reads of each page by BENCH_CLIENTS (default 4) clients at
//! once: the flow's page (its graph with counts), its insights over 90 days, a folder's insights,
//! the preview, the invocation (its graph with its instances' counts) and one user's path.
//!
//! Goal (issue 62): p99 under 100 ms for each page. The ledger: every answer is a 200 page
//! that shows what it must (on the flow's page the 90 days' sums with today's, the users
//! waiting, 90 days of insights), or the run is void.

mod common;
#[allow(dead_code, unused_macros, unused_imports)]
#[path = "../../../tests/blackbox/support.rs"]
mod support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use adapters_diesel::testing::TestDatabase;
use common::{pct, setting};
use serde_json::{json, Map, Value};

/// The 50 steps: a card, a wait for it, then ten branches of four cards and the next branch
/// (the last branch has two); 2 + 10 + 38 of them.
fn fifty_steps() -> Value {
    let mut steps = Map::new();
    let mut templates = Map::new();
    let card = |id: &str, next: Vec<String>| {
        json!({"id": id, "type": "create-card", "properties": {"cardTemplateId": "t"},
               "next": next})
    };
    steps.insert("ask".into(), card("ask", vec!["listen".into()]));
    steps.insert(
        "listen".into(),
        json!({"id": "listen", "type": "wait-for-card", "properties": {"cardStep": "ask",
            "timeout": "P30D", "on": {"submitted": ["b0"]}}}),
    );
    let mut made = 2;
    for b in 0..10 {
        let per = if b == 9 { 2 } else { 4 };
        let cards: Vec<String> = (0..per).map(|c| format!("c{b}_{c}")).collect();
        let mut next = cards.clone();
        if b < 9 {
            next.push(format!("b{}", b + 1));
        }
        steps.insert(
            format!("b{b}"),
            json!({"id": format!("b{b}"), "type": "branch", "properties": {"conditions": [
                {"if": {"variable": "steps.listen.values.rating", "op": "greaterThan",
                        "value": b}, "next": next}], "otherwise": []}}),
        );
        made += 1;
        for c in cards {
            steps.insert(c.clone(), card(&c, vec![]));
            made += 1;
        }
    }
    assert_eq!(made, 50, "fifty steps");
    templates.insert(
        "t".into(),
        json!({"metadata": {"cardName": "Step card"}, "defaultView": {"content": [
            {"key": "h", "type": "headline", "attributes": {"text": "Hello %{firstName}"}}]}}),
    );
    json!({"type": "card", "initialSteps": ["ask"], "steps": steps, "cardTemplates": templates,
           "variables": {"firstName": {"type": "string", "default": "there"}}})
}

/// 90 days of totals of every step and card event of `flow`, in folder `folder`, with the
/// flow's creation moved back before them (a version's step counts are read from it): the sum
/// of each metric written.
fn ninety_days(
    server: &support::Server,
    flow: &str,
    folder: &str,
    steps: &[String],
) -> std::collections::HashMap<String, u64> {
    let mut metrics: Vec<String> = steps
        .iter()
        .flat_map(|s| {
            [
                format!("steps.{s}.reached"),
                format!("steps.{s}.outcome.matched"),
            ]
        })
        .collect();
    for event in [
        "card-published",
        "card-completed",
        "card-dismissed",
        "card-expired",
    ] {
        metrics.push(format!("events.{event}"));
    }
    metrics.push("cards.created".into());
    let today = chrono::Utc::now().date_naive();
    let env = &server.env;
    let mut values = Vec::new();
    let mut sums = std::collections::HashMap::new();
    for back in 1..=90i64 {
        let day = today - chrono::Duration::days(back);
        for (i, m) in metrics.iter().enumerate() {
            let n = 10 + (back as usize * 7 + i) % 90;
            *sums.entry(m.clone()).or_insert(0u64) += n as u64;
            values.push(format!(
                "('{env}', '{flow}', '{day}', 1, '{folder}', 'live', '{m}', 0, {n})"
            ));
        }
    }
    for chunk in values.chunks(500) {
        adapters_diesel::testing::raw_execute(
            server.database_url(),
            &format!(
                "INSERT INTO flow_totals (environment_id, flow_id, day, flow_version, folder_id, \
                 mode, metric, shard, n) VALUES {}",
                chunk.join(", ")
            ),
        );
    }
    let created = (today - chrono::Duration::days(91)).format("%Y-%m-%d 00:00:00");
    adapters_diesel::testing::raw_execute(
        server.database_url(),
        &format!("UPDATE action_flows SET created = '{created}' WHERE id = '{flow}'"),
    );
    println!("  seeded {} daily totals", values.len());
    sums
}

async fn api(server: &support::Server, method: &str, path: &str, body: Value) -> Value {
    let reply = support::call(server, method, path, Some(&server.admin_secret), Some(body)).await;
    assert!(reply.status < 300, "{path}: {}", reply.text);
    reply.body
}

/// Signs in to the console: the session's cookie.
async fn sign_in(server: &support::Server, client: &reqwest::Client) -> String {
    let reply = client
        .post(server.url("/console/sign-in"))
        .form(&[
            ("client_id", server.admin_client_id.as_str()),
            ("client_secret", server.admin_secret.as_str()),
        ])
        .send()
        .await
        .expect("sign in");
    assert_eq!(reply.status(), 303);
    let cookie = reply.headers()["set-cookie"].to_str().expect("cookie");
    cookie.split(';').next().expect("pair").to_owned()
}

/// `requests` reads of `path` by `clients` at once: the sorted latencies; panics (the run is
/// void) on any answer that is not a 200 page holding `must`.
async fn measure(
    server: &support::Server,
    cookie: &str,
    path: &str,
    must: &'static str,
    requests: usize,
    clients: usize,
) -> Vec<Duration> {
    let client = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .expect("client");
    let url = Arc::new(server.url(path));
    let mut tasks = Vec::new();
    for c in 0..clients {
        let (client, url, cookie) = (client.clone(), url.clone(), cookie.to_owned());
        let share = requests / clients + usize::from(c < requests % clients);
        tasks.push(tokio::spawn(async move {
            let mut took = Vec::with_capacity(share);
            for _ in 0..share {
                let started = Instant::now();
                let reply = client
                    .get(url.as_str())
                    .header("cookie", &cookie)
                    .send()
                    .await
                    .expect("get");
                let status = reply.status();
                let page = reply.text().await.expect("page");
                took.push(started.elapsed());
                assert_eq!(status, 200, "{url}: void run");
                assert!(page.contains(must), "{url} lacks {must:?}: void run");
            }
            took
        }));
    }
    let mut all = Vec::new();
    for t in tasks {
        all.extend(t.await.expect("client"));
    }
    assert_eq!(all.len(), requests, "the ledger: every read answered");
    all.sort();
    all
}

async fn run(db: TestDatabase, backend: &str) {
    println!("{backend}:");
    let server = support::Server::start(db).await;
    let (users, requests, clients) = (
        setting("BENCH_USERS", 200),
        setting("BENCH_REQUESTS", 300) as usize,
        setting("BENCH_CLIENTS", 4) as usize,
    );
    let env = server.env.clone();
    let folder = api(
        &server,
        "POST",
        &format!("/v1/{env}/workbench-folder"),
        json!({"name": "F"}),
    )
    .await["data"]["id"]
        .as_str()
        .expect("folder")
        .to_owned();
    let flow = api(
        &server,
        "POST",
        &format!("/v1/{env}/action-flow"),
        json!({"name": "Fifty steps", "folderId": folder}),
    )
    .await["data"]["id"]
        .as_str()
        .expect("flow")
        .to_owned();
    let config = fifty_steps();
    let steps: Vec<String> = config["steps"]
        .as_object()
        .expect("steps")
        .keys()
        .cloned()
        .collect();
    api(
        &server,
        "POST",
        &format!("/v1/{env}/action-flow/{flow}/config/publish"),
        config,
    )
    .await;
    let ids: Vec<String> = (1..=users).map(|u| format!("u{u}")).collect();
    let started = api(
        &server,
        "POST",
        &format!("/v1/{env}/action-flow/{flow}/start"),
        json!({"flows": [{"target": {"type": "user", "targetUserIds": ids}}]}),
    )
    .await;
    let invocation = started["data"]["triggeredFlows"][0]["flowInvocationId"]
        .as_str()
        .expect("invocation")
        .to_owned();
    let sums = ninety_days(&server, &flow, &folder, &steps);
    let client = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .expect("client");
    let cookie = sign_in(&server, &client).await;
    let base = format!("/console/{env}/flows/{flow}");
    let waiting = format!("{users} reached · {users} waiting");
    let waiting: &'static str = Box::leak(waiting.into_boxed_str());
    // The flow's page adds the 90 days to today's: `listen` was reached by every user today.
    let listen = sums.get("steps.listen.reached").copied().unwrap_or(0) + users;
    let with_days = format!("{listen} reached · {users} waiting");
    let with_days: &'static str = Box::leak(with_days.into_boxed_str());
    // Wait until every user waits at `listen`, so that each page shows it.
    let until = Instant::now() + Duration::from_secs(60);
    loop {
        let page = client
            .get(server.url(&base))
            .header("cookie", &cookie)
            .send()
            .await
            .expect("page")
            .text()
            .await
            .expect("text");
        if page.contains(with_days) {
            break;
        }
        assert!(Instant::now() < until, "the users never all waited");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let pages: [(&str, String, &'static str); 6] = [
        ("flow page, graph with counts", base.clone(), with_days),
        (
            "flow insights, 90 days",
            format!("{base}/insights?days=90"),
            "Over 90 days",
        ),
        (
            "folder insights, 90 days",
            format!("/console/{env}/folders/{folder}/insights?days=90"),
            "Over 90 days",
        ),
        (
            "card preview",
            format!("{base}/preview?v.firstName=Ada"),
            "Hello Ada",
        ),
        (
            "invocation, graph with its counts",
            format!("{base}/invocations/{invocation}"),
            waiting,
        ),
        (
            "one user's path",
            format!("{base}/invocations/{invocation}/users/u7"),
            "step listen waiting",
        ),
    ];
    for (name, path, must) in &pages {
        // A read first, so that each figure is of a warm page.
        measure(&server, &cookie, path, must, clients, clients).await;
        let took = measure(&server, &cookie, path, must, requests, clients).await;
        let p99 = pct(&took, 0.99);
        println!(
            "  {name}: {requests} reads by {clients} clients, p50 {:.1} ms, p99 {p99:.1} ms \
             (goal: p99 < 100 ms) {}",
            pct(&took, 0.5),
            if p99 < 100.0 { "ok" } else { "MISSED" }
        );
    }
}

#[tokio::main]
async fn main() {
    let (sqlite, postgres) = common::backends();
    if sqlite {
        run(TestDatabase::sqlite(), "SQLite").await;
    }
    if postgres {
        if let Some(db) = TestDatabase::postgres() {
            run(db, "PostgreSQL").await;
        }
    }
}
