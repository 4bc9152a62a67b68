//! Stopping without stalling anyone (contract §17): on SIGTERM `/readyz` answers 503 while
//! requests are still served, the listener closes after the drain, and the background work a
//! process held is taken over by another at once, not when its lease runs out.

use std::time::{Duration, Instant};

use adapters_diesel::testing::{raw_execute, raw_texts, TestDatabase};
use serde_json::json;

use crate::receiver::Receiver;
use crate::support::{call, Server};
use crate::trigger::published_flow;

fn terminate(server: &Server) {
    let status = std::process::Command::new("kill")
        .args(["-TERM", &server.pid().to_string()])
        .status()
        .expect("kill");
    assert!(status.success());
}

async fn sigterm_answers_503_while_draining_then_closes(db: TestDatabase) {
    let mut server =
        Server::start_with(db, &[("WORKBENCH_SHUTDOWN_DRAIN_SECONDS", Some("3"))]).await;
    let folders = format!("/v1/{}/workbench-folder", server.env);
    assert_eq!(
        call(&server, "GET", "/readyz", None, None).await.status,
        200
    );
    let signalled = Instant::now();
    terminate(&server);
    // Not ready at once (within the time a signal takes to arrive), still serving.
    let ready = loop {
        let ready = call(&server, "GET", "/readyz", None, None).await;
        if ready.status != 200 || signalled.elapsed() > Duration::from_secs(2) {
            break ready;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(ready.status, 503, "{}", ready.text);
    assert_eq!(ready.body["reason"], "shutting_down", "{}", ready.text);
    assert_eq!(
        call(&server, "GET", "/healthz", None, None).await.status,
        200
    );
    let served = call(&server, "GET", &folders, Some(&server.admin_secret), None).await;
    assert_eq!(served.status, 200, "{}", served.text);
    assert!(
        signalled.elapsed() < Duration::from_secs(3),
        "still in the drain"
    );
    // Then the listener closes, and the process ends well.
    let exit = server.wait_exit(Duration::from_secs(20)).expect("exited");
    assert!(exit.success(), "{exit:?}\n{}", server.logs());
    assert!(
        signalled.elapsed() >= Duration::from_secs(3),
        "the drain was kept: {:?}",
        signalled.elapsed()
    );
    assert!(server.logs().contains("\"stopped\""), "{}", server.logs());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_sigterm_answers_503_while_draining_then_closes() {
    sigterm_answers_503_while_draining_then_closes(TestDatabase::sqlite()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_sigterm_answers_503_while_draining_then_closes() {
    let Some(db) = TestDatabase::postgres() else {
        return;
    };
    sigterm_answers_503_while_draining_then_closes(db).await;
}

/// Two processes on one PostgreSQL, with 30 s leases: the one running a 50,000-user fan-out
/// is stopped with SIGTERM, and the other goes on with it at once. No gap over 2 s in card
/// creation, every user one card, and no event delivered twice by the hand-over.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_a_replica_stopped_mid_fan_out_hands_it_over_at_once() {
    const USERS: u64 = 50_000;
    let Some(db) = TestDatabase::postgres() else {
        return;
    };
    let leases = [
        ("WORKBENCH_ENGINE_LEASE_SECONDS", Some("30")),
        ("WORKBENCH_WEBHOOK_LEASE_SECONDS", Some("60")),
    ];
    let mut first = Server::start_with(db, &leases).await;
    let url = first.database_url().to_owned();
    let env = first.env.clone();
    raw_execute(
        &url,
        &format!(
            "INSERT INTO end_users (environment_id, id, test_user, attributes, created, updated) \
             SELECT '{env}', 'h' || n, FALSE, '{{}}', now(), now() FROM generate_series(1, {USERS}) AS n"
        ),
    );
    raw_execute(
        &url,
        &format!(
            "INSERT INTO end_user_tags (environment_id, tag, user_id) \
             SELECT '{env}', 'handover', 'h' || n FROM generate_series(1, {USERS}) AS n"
        ),
    );
    let receiver = Receiver::start().await;
    let subscribed = call(
        &first,
        "POST",
        &format!("/v1/{env}/webhook"),
        Some(&first.admin_secret),
        Some(json!({"types": ["card-published"], "url": receiver.url})),
    )
    .await;
    assert_eq!(subscribed.status, 201, "{}", subscribed.text);
    let flow = published_flow(&first, false).await;
    let cards = || {
        raw_texts(
            &url,
            &format!(
                "SELECT CAST(COUNT(*) AS TEXT) AS v FROM card_instances WHERE flow_id = '{flow}'"
            ),
        )[0]
        .parse::<u64>()
        .expect("count")
    };

    let started = call(
        &first,
        "POST",
        &format!("/v1/{env}/action-flow/{flow}/start"),
        Some(&first.admin_secret),
        Some(json!({"flows": [{"target": {"type": "tag", "tagName": "handover"}}]})),
    )
    .await;
    assert_eq!(started.status, 200, "{}", started.text);
    // The first process alone holds the fan-out; the second starts while it runs.
    let limit = Instant::now() + Duration::from_secs(120);
    while cards() < 2_000 {
        assert!(Instant::now() < limit, "the fan-out did not start");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let second = first.replica(&[]);
    assert_eq!(
        call(&second, "GET", "/readyz", None, None).await.status,
        200
    );
    let before = cards();
    assert!(
        before < USERS,
        "the fan-out ended before the hand-over: raise USERS"
    );
    terminate(&first);

    // Card creation never stops for more than 2 s until every user has a card.
    let (mut last, mut moved_at, mut longest) = (cards(), Instant::now(), Duration::ZERO);
    while last < USERS {
        assert!(
            Instant::now() < limit,
            "stuck at {last} cards:\n{}",
            second.logs()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
        let now = cards();
        if now != last {
            longest = longest.max(moved_at.elapsed());
            (last, moved_at) = (now, Instant::now());
        } else {
            longest = longest.max(moved_at.elapsed());
        }
    }
    assert!(
        longest <= Duration::from_secs(2),
        "card creation stopped for {longest:?}"
    );
    let exit = first
        .wait_exit(Duration::from_secs(30))
        .expect("the first process exited");
    assert!(exit.success(), "{exit:?}\n{}", first.logs());
    assert_eq!(last, USERS, "one card per user");
    let users_with_cards = raw_texts(
        &url,
        &format!("SELECT CAST(COUNT(DISTINCT user_id) AS TEXT) AS v FROM card_instances WHERE flow_id = '{flow}'"),
    );
    assert_eq!(users_with_cards, [USERS.to_string()]);

    // Every card's publication delivered once: waited for while deliveries keep arriving
    // (a busy machine drains slowly), given up after 30 s without one.
    let (mut seen, mut moved_at) = (receiver.len(), Instant::now());
    while (seen as u64) < USERS {
        assert!(
            moved_at.elapsed() < Duration::from_secs(30),
            "deliveries stopped at {seen} of {USERS}:\n{}",
            second.logs()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
        let now = receiver.len();
        if now != seen {
            (seen, moved_at) = (now, Instant::now());
        }
    }
    // Any duplicate would arrive with the rest: a moment more for one to show.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let (total, distinct) = receiver.deliveries_and_distinct_ids();
    assert_eq!(distinct as u64, USERS, "every card's publication delivered");
    assert_eq!(total, distinct, "no event delivered twice by the hand-over");
}
