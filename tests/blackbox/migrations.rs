//! Migrations under the operator's control (contract §17): `migrate`, `migrate status`,
//! `serve --no-migrate`, and a database migrated by a newer version refused.

use std::time::Duration;

use adapters_diesel::testing::TestDatabase;
use serde_json::Value;

use crate::support::{call, run_until_exit, workbench, Server};

fn json_of(output: &std::process::Output) -> Value {
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).expect("JSON on stdout")
}

fn strings(value: &Value) -> Vec<String> {
    value
        .as_array()
        .expect("array")
        .iter()
        .map(|v| v.as_str().expect("text").to_owned())
        .collect()
}

async fn migrations_run_only_when_asked_and_a_newer_schema_is_refused(db: TestDatabase) {
    let dir = tempfile::tempdir().expect("dir");
    let (url, dir) = (db.url(), dir.path());
    let limit = Duration::from_secs(30);

    let status = json_of(&workbench(url, dir, &["migrate", "status"], &[]));
    let pending = strings(&status["pending"]);
    assert!(
        !pending.is_empty() && strings(&status["applied"]).is_empty(),
        "{status}"
    );
    assert_eq!(status["current"], Value::Null);
    assert_eq!(
        status["latest"].as_str(),
        pending.last().map(String::as_str)
    );

    // Not allowed to migrate: exit 2, naming what is pending, by the flag or the setting.
    for (args, extra) in [
        (vec!["serve", "--no-migrate"], vec![]),
        (vec!["serve"], vec![("WORKBENCH_MIGRATE", Some("false"))]),
    ] {
        let exited = run_until_exit(url, dir, &args, &extra, limit);
        assert_eq!(
            exited.status.and_then(|s| s.code()),
            Some(2),
            "{}",
            exited.stderr
        );
        assert!(exited.stderr.contains(&pending[0]), "{}", exited.stderr);
        assert!(
            exited.stderr.contains("workbench migrate"),
            "{}",
            exited.stderr
        );
    }

    let migrated = json_of(&workbench(url, dir, &["migrate"], &[]));
    assert_eq!(strings(&migrated["applied"]), pending);
    assert_eq!(migrated["current"], status["latest"]);
    let again = json_of(&workbench(url, dir, &["migrate"], &[]));
    assert!(strings(&again["applied"]).is_empty(), "{again}");
    let status = json_of(&workbench(url, dir, &["migrate", "status"], &[]));
    assert!(strings(&status["pending"]).is_empty(), "{status}");

    {
        let server = Server::start_at(url, &[("WORKBENCH_MIGRATE", Some("false"))]).await;
        assert_eq!(
            call(&server, "GET", "/readyz", None, None).await.status,
            200
        );
    }

    // A newer version migrated the database: neither serve nor migrate touches it.
    adapters_diesel::testing::raw_execute(
        url,
        "INSERT INTO __diesel_schema_migrations (version) VALUES ('99991231000000')",
    );
    let exited = run_until_exit(url, dir, &["serve"], &[], limit);
    assert_eq!(
        exited.status.and_then(|s| s.code()),
        Some(2),
        "{}",
        exited.stderr
    );
    let latest = status["latest"].as_str().expect("latest");
    assert!(
        exited.stderr.contains("99991231000000") && exited.stderr.contains(latest),
        "{}",
        exited.stderr
    );
    let refused = workbench(url, dir, &["migrate"], &[]);
    assert_eq!(refused.status.code(), Some(2));
    let status = json_of(&workbench(url, dir, &["migrate", "status"], &[]));
    assert_eq!(strings(&status["newer"]), ["99991231000000"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_migrations_run_only_when_asked_and_a_newer_schema_is_refused() {
    migrations_run_only_when_asked_and_a_newer_schema_is_refused(TestDatabase::sqlite()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_migrations_run_only_when_asked_and_a_newer_schema_is_refused() {
    let Some(db) = TestDatabase::postgres() else {
        return;
    };
    migrations_run_only_when_asked_and_a_newer_schema_is_refused(db).await;
}

/// Contract §17: while migrations wait (another process holds PostgreSQL's migration lock),
/// `/healthz` answers 200 and `/readyz` 503, so a liveness probe does not kill the process;
/// once the lock is free it migrates and becomes ready.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_healthz_answers_while_migrations_wait_for_the_lock() {
    use diesel::{Connection, RunQueryDsl};
    let Some(db) = TestDatabase::postgres() else {
        return;
    };
    let mut holder = diesel::PgConnection::establish(db.url()).expect("connect");
    diesel::sql_query("SELECT pg_advisory_lock(8608480567731124835)")
        .execute(&mut holder)
        .expect("lock");
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let dir = tempfile::tempdir().expect("dir");
    let listen = format!("127.0.0.1:{port}");
    let mut child = crate::support::spawn_serve(
        db.url(),
        dir.path(),
        &[("WORKBENCH_LISTEN", Some(listen.as_str()))],
    );
    let client = reqwest::Client::new();
    let get = |path: &str| client.get(format!("http://{listen}{path}")).send();
    let limit = std::time::Instant::now() + Duration::from_secs(20);
    let health = loop {
        if let Ok(reply) = get("/healthz").await {
            break reply;
        }
        assert!(std::time::Instant::now() < limit, "/healthz never answered");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(health.status(), 200);
    let ready = get("/readyz").await.expect("readyz");
    assert_eq!(ready.status(), 503);
    let body: Value = ready.json().await.expect("json");
    assert_eq!(body["reason"], "starting", "{body}");
    assert!(
        !dir.path().join("bootstrap-credentials.json").exists(),
        "not migrated nor bootstrapped while the lock is held"
    );

    drop(holder);
    loop {
        if let Ok(reply) = get("/readyz").await {
            if reply.status() == 200 {
                break;
            }
        }
        assert!(
            std::time::Instant::now() < limit,
            "never ready after the lock was freed"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let _ = child.kill();
    let _ = child.wait();
}

/// Contract §17: what needs no database is checked before it is touched; a data folder that
/// does not exist stops the start (exit 2) before a key is stored whose secret would have no
/// file to go to.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_data_folder_stops_the_start_before_the_database_is_touched() {
    let dir = tempfile::tempdir().expect("dir");
    let url = crate::support::sqlite_url_in(dir.path());
    let missing = dir.path().join("missing");
    let exited = run_until_exit(
        &url,
        dir.path(),
        &["serve"],
        &[("WORKBENCH_DATA_DIR", missing.to_str())],
        Duration::from_secs(30),
    );
    assert_eq!(
        exited.status.and_then(|s| s.code()),
        Some(2),
        "{}",
        exited.stderr
    );
    assert!(
        exited.stderr.contains("WORKBENCH_DATA_DIR"),
        "{}",
        exited.stderr
    );
    assert!(
        !dir.path().join("workbench.db").exists(),
        "the database was not created"
    );
}

/// Contract §17: `config check` prints the configuration as it would be used, secrets masked,
/// and refuses a bad one with exit 2, touching no database.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn config_check_prints_the_configuration_with_secrets_masked() {
    let dir = tempfile::tempdir().expect("dir");
    let url = "postgres://app:s3cret-password@127.0.0.1:1/none";
    let shown = json_of(&workbench(url, dir.path(), &["config", "check"], &[]));
    assert_eq!(
        shown["database_url"],
        "postgres://app:****@127.0.0.1:1/none"
    );
    assert!(
        shown["secret_key"]
            .as_str()
            .is_some_and(|k| k.starts_with("(set")),
        "{shown}"
    );
    assert!(!shown.to_string().contains("s3cret-password"), "{shown}");
    assert_eq!(
        shown["rate_limit_key"], "off",
        "the harness's setting: {shown}"
    );
    let refused = workbench(
        url,
        dir.path(),
        &["config", "check"],
        &[("WORKBENCH_WORKERS", Some("0"))],
    );
    assert_eq!(refused.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&refused.stderr).contains("WORKBENCH_WORKERS"));
}

/// Contract §17: an unreachable database is tried again for `WORKBENCH_DATABASE_WAIT`, then
/// given up; without it, at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_database_is_tried_again_for_the_configured_wait() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let url = format!("postgres://nobody:pw@127.0.0.1:{port}/none");
    let dir = tempfile::tempdir().expect("dir");
    let at_once = run_until_exit(&url, dir.path(), &["serve"], &[], Duration::from_secs(30));
    assert!(
        at_once.status.is_some_and(|s| !s.success()),
        "{}",
        at_once.stderr
    );
    assert!(
        at_once.elapsed < Duration::from_secs(3),
        "{:?}",
        at_once.elapsed
    );
    let waited = run_until_exit(
        &url,
        dir.path(),
        &["serve"],
        &[("WORKBENCH_DATABASE_WAIT", Some("3s"))],
        Duration::from_secs(30),
    );
    assert!(
        waited.status.is_some_and(|s| !s.success()),
        "{}",
        waited.stderr
    );
    assert!(
        waited.elapsed >= Duration::from_secs(3),
        "{:?}",
        waited.elapsed
    );
    assert!(waited.stderr.contains("trying again"), "{}", waited.stderr);
}
