//! Contract §20 against a real PostgreSQL that hangs: frozen with SIGSTOP, or silenced by a
//! relay that holds every byte. Every repository call answers by its deadline (+1 s), the
//! connections that hung are never used again, and no backend is left on the server once the
//! fault ends.

use std::sync::Arc;
use std::time::{Duration, Instant};

use chrono::TimeZone;
use domain::folder::FolderRepository;
use domain::trigger::Mode;
use domain::trigger::{Invocation, InvocationRepository, InvocationStatus};
use domain::{HealthProbe, StorageError};
use serde_json::json;

use crate::faults::{Blackhole, ThrowawayPostgres};
use crate::{Database, DatabaseUrl, Waits};

const WAITS: Waits = Waits {
    request: Duration::from_secs(1),
    tcp: Duration::from_secs(2),
    pool: Duration::from_secs(1),
    statement: Duration::from_secs(30),
};
const POOL: u32 = 4;

/// A call: what it was, how long it took, what it answered.
type Answered = (&'static str, Duration, Result<(), StorageError>);

#[derive(Clone, Copy, Debug)]
enum Fault {
    Freeze,
    Silence,
}

/// `inv_N` in `env_a`, fingerprint `fpN`, of the flow `flw_1`.
pub(crate) fn invocation(n: usize) -> Invocation {
    let at = chrono::Utc
        .timestamp_opt(1_800_000_000, 0)
        .single()
        .expect("time");
    Invocation {
        environment_id: "env_a".into(),
        id: format!("inv_{n}").into(),
        flow_id: "flw_1".into(),
        mode: Mode::Live,
        flow_version: 1,
        fingerprint: format!("fp{n}"),
        target: json!({"type": "user", "targetUserIds": ["u1"]}).into(),
        payload: json!({}).into(),
        strict_variables: false,
        bulk: false,
        status: InvocationStatus::Pending,
        users_targeted: 0,
        cards_created: 0,
        errors: Vec::new(),
        cursor: None,
        created: at,
        updated: at,
    }
}

/// The backend pid of each of the pool's connections, each held at once so that all are used.
async fn pool_backends(db: &Database) -> Vec<i32> {
    let mut calls = Vec::new();
    for _ in 0..POOL {
        let db = db.clone();
        calls.push(tokio::spawn(async move {
            db.run(|conn| {
                #[derive(diesel::QueryableByName)]
                struct Pid {
                    #[diesel(sql_type = diesel::sql_types::Integer)]
                    pid: i32,
                }
                let pid: Pid = diesel::RunQueryDsl::get_result(
                    diesel::sql_query("SELECT pg_backend_pid() AS pid, pg_sleep(0.3)"),
                    conn,
                )?;
                Ok(pid.pid)
            })
            .await
        }));
    }
    let mut pids = Vec::new();
    for call in calls {
        pids.push(call.await.expect("join").expect("backend pid"));
    }
    pids.sort_unstable();
    pids.dedup();
    pids
}

async fn calls_answer_by_their_deadline_and_leave_no_backend(fault: Fault) {
    let Some(pg) = ThrowawayPostgres::start() else {
        return;
    };
    let relay = Blackhole::to(pg.port());
    let url = match fault {
        Fault::Freeze => pg.url(),
        Fault::Silence => format!("postgres://postgres@127.0.0.1:{}/postgres", relay.port()),
    };
    let url = DatabaseUrl::parse(&url).expect("url").with_waits(WAITS);
    let db = tokio::task::spawn_blocking(move || Database::open(url, POOL))
        .await
        .expect("join")
        .expect("open");
    let folders = Arc::new(crate::DieselFolderRepository::new(db.clone()));
    let invocations = Arc::new(crate::DieselInvocationRepository::new(db.clone()));
    let probe = Arc::new(crate::DieselHealthProbe::new(db.clone()));
    let hung = pool_backends(&db).await;
    assert_eq!(hung.len(), POOL as usize, "{hung:?}");

    match fault {
        Fault::Freeze => pg.freeze(),
        Fault::Silence => relay.hold(true),
    }
    // Reads, the /start recorder, claims and readiness, all at once, more than the pool holds.
    let mut calls: Vec<tokio::task::JoinHandle<Answered>> = Vec::new();
    for n in 0..8 {
        let (folders, invocations, probe) = (folders.clone(), invocations.clone(), probe.clone());
        calls.push(tokio::spawn(async move {
            let started = Instant::now();
            let outcome = folders.list("env_a").await.map(drop);
            ("folder list", started.elapsed(), outcome)
        }));
        calls.push(tokio::spawn(async move {
            let started = Instant::now();
            let outcome = invocations
                .record_run(vec![(invocation(n), None)])
                .await
                .map(drop);
            ("recorded /start", started.elapsed(), outcome)
        }));
        if n % 2 == 0 {
            let invocations = crate::DieselInvocationRepository::new(db.clone());
            calls.push(tokio::spawn(async move {
                let started = Instant::now();
                let now = chrono::Utc::now();
                let outcome = invocations
                    .claim(now, now + chrono::Duration::seconds(30), 10)
                    .await
                    .map(drop);
                ("claim", started.elapsed(), outcome)
            }));
            calls.push(tokio::spawn(async move {
                let started = Instant::now();
                let outcome = probe.ready().await;
                ("readiness", started.elapsed(), outcome)
            }));
        }
    }
    for call in calls {
        let (what, took, outcome) = call.await.expect("join");
        assert!(
            matches!(outcome, Err(StorageError::Unavailable(_))),
            "{fault:?}: {what} answered {outcome:?}"
        );
        assert!(
            took <= WAITS.request + Duration::from_secs(1),
            "{fault:?}: {what} took {took:?}"
        );
    }

    match fault {
        Fault::Freeze => pg.thaw(),
        Fault::Silence => relay.hold(false),
    }
    let ended = Instant::now();
    loop {
        match folders.list("env_a").await {
            Ok(_) => break,
            Err(e) => assert!(
                ended.elapsed() < Duration::from_secs(5),
                "{fault:?}: still failing after the fault: {e}"
            ),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(probe.ready().await.is_ok());
    // Every connection that hung was discarded, so its backend ended.
    loop {
        let left: Vec<i32> = pg
            .backends()
            .into_iter()
            .filter(|pid| hung.contains(pid))
            .collect();
        if left.is_empty() {
            break;
        }
        assert!(
            ended.elapsed() < Duration::from_secs(30),
            "{fault:?}: backends {left:?} outlived the fault by 30 s"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let now_used = pool_backends(&db).await;
    assert!(
        now_used.iter().all(|pid| !hung.contains(pid)),
        "{fault:?}: a connection that hung was used again: {now_used:?} {hung:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_frozen_server_every_call_answers_by_its_deadline() {
    calls_answer_by_their_deadline_and_leave_no_backend(Fault::Freeze).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_silent_network_every_call_answers_by_its_deadline() {
    calls_answer_by_their_deadline_and_leave_no_backend(Fault::Silence).await;
}

/// A query still running when its call is given up is cancelled on the server (contract §20):
/// the server stops working for a client that is gone, and its connection is not used again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_query_given_up_is_cancelled_on_the_server() {
    let Some(test) = crate::testing::TestDatabase::postgres() else {
        return;
    };
    let url = DatabaseUrl::parse(test.url())
        .expect("url")
        .with_waits(WAITS);
    let db = tokio::task::spawn_blocking(move || Database::open(url, 2))
        .await
        .expect("join")
        .expect("open");
    let marker = format!("given-up-{}", crate::testing::unique());
    let sql = format!("SELECT pg_sleep(30) /* {marker} */");
    let started = Instant::now();
    let outcome = db
        .run(move |conn| {
            diesel::RunQueryDsl::execute(diesel::sql_query(sql), conn)?;
            Ok(())
        })
        .await;
    assert!(
        matches!(outcome, Err(StorageError::Unavailable(_))),
        "{outcome:?}"
    );
    assert!(started.elapsed() <= WAITS.request + Duration::from_secs(1));
    let running = |db: Database, marker: String| async move {
        db.run(move |conn| {
            #[derive(diesel::QueryableByName)]
            struct Count {
                #[diesel(sql_type = diesel::sql_types::BigInt)]
                n: i64,
            }
            let count: Count = diesel::RunQueryDsl::get_result(
                diesel::sql_query(
                    "SELECT count(*) AS n FROM pg_stat_activity \
                     WHERE state = 'active' AND query LIKE '%' || $1 || '%' \
                     AND pid <> pg_backend_pid()",
                )
                .bind::<diesel::sql_types::Text, _>(marker),
                conn,
            )?;
            Ok(count.n)
        })
        .await
        .expect("activity")
    };
    loop {
        if running(db.clone(), marker.clone()).await == 0 {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "the query given up still runs on the server"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
