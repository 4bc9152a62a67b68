//! Contract §20 end to end: two processes on one PostgreSQL of the test's own, under steady
//! load (one-user `/start`s and feed reads over both), through a 60 s freeze of the server
//! (SIGSTOP of all its processes) and a 20 s silence of the network (a relay between them and
//! the server that holds every byte). No request waits past the deadline + 1 s, `/readyz`
//! turns 503 within 6 s and 200 within 2 s of the end, memory stays within 64 MiB of where it
//! was, no acknowledged `/start` is lost and none made two cards.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use adapters_diesel::faults::{Blackhole, ThrowawayPostgres};
use serde_json::json;

use crate::support::Server;
use crate::trigger::published_flow;

const DEADLINE: Duration = Duration::from_secs(5);
const FREEZE: Duration = Duration::from_secs(60);
const SILENCE: Duration = Duration::from_secs(40);
/// Requests per second over both processes.
const RATE: u64 = 100;

/// One request of the load: which, to which user, when it was sent, how long it took, status.
struct Sample {
    start: bool,
    user: String,
    sent: Instant,
    took: Duration,
    status: u16,
}

/// A `/readyz` answer: when it was asked, and its status (0: no answer).
type Probe = (Instant, u16);
/// A process's `/readyz` answers, and the task asking.
type Prober = (Arc<Mutex<Vec<Probe>>>, tokio::task::JoinHandle<()>);

/// Its bounds are the server's, measured from the client: run alone (`make test` runs it after
/// the others), since on a small machine two hundred tests beside it add their own delays to
/// what it measures.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "timed: `make test` runs it alone, after the other tests"]
async fn two_replicas_ride_out_a_frozen_server_and_a_silent_network() {
    let Some(pg) = ThrowawayPostgres::start() else {
        return;
    };
    let relay = Blackhole::to(pg.port());
    let url = format!("postgres://postgres@127.0.0.1:{}/postgres", relay.port());
    let a = Arc::new(
        Server::start_at(&url, &[("WORKBENCH_DATABASE_REQUEST_TIMEOUT", Some("5s"))]).await,
    );
    let b = Arc::new(a.replica(&[]));
    let flow = published_flow(&a, false).await;
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(30))
        .build()
        .expect("client");

    let stop = Arc::new(AtomicBool::new(false));
    let samples: Arc<Mutex<Vec<Sample>>> = Arc::default();
    let load = {
        let (a, b, flow, client) = (a.clone(), b.clone(), flow.clone(), client.clone());
        let (stop, samples) = (stop.clone(), samples.clone());
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_millis(1_000 / RATE));
            let mut n = 0u64;
            let mut sent = Vec::new();
            while !stop.load(Ordering::Relaxed) {
                tick.tick().await;
                n += 1;
                let server = if n % 2 == 0 { a.clone() } else { b.clone() };
                // Three starts, then a read of the feed of the user started last.
                let start = n % 4 != 0;
                let user = format!("hang-{}", if start { n } else { n - 1 });
                let request = if start {
                    client
                        .post(server.url(&format!("/v1/{}/action-flow/{flow}/start", server.env)))
                        .json(&json!({"flows": [{"target": {"type": "user", "targetUserIds": [user]}}]}))
                } else {
                    client.get(server.url(&format!("/v1/{}/users/{user}/cards", server.env)))
                }
                .bearer_auth(&server.admin_secret);
                let samples = samples.clone();
                sent.push(tokio::spawn(async move {
                    let at = Instant::now();
                    let status = request.send().await.map_or(0, |r| r.status().as_u16());
                    samples.lock().expect("samples").push(Sample {
                        start,
                        user,
                        sent: at,
                        took: at.elapsed(),
                        status,
                    });
                }));
            }
            for request in sent {
                let _ = request.await;
            }
        })
    };
    let probes: Vec<Prober> = [a.clone(), b.clone()]
        .into_iter()
        .map(|server| {
            let probes: Arc<Mutex<Vec<Probe>>> = Arc::default();
            let (stop, sink, client) = (stop.clone(), probes.clone(), client.clone());
            let task = tokio::spawn(async move {
                while !stop.load(Ordering::Relaxed) {
                    let at = Instant::now();
                    let status = client
                        .get(server.url("/readyz"))
                        .send()
                        .await
                        .map_or(0, |r| r.status().as_u16());
                    sink.lock().expect("probes").push((at, status));
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
            });
            (probes, task)
        })
        .collect();

    tokio::time::sleep(Duration::from_secs(5)).await;
    let rss_before = [a.rss_bytes(), b.rss_bytes()];
    let froze = Instant::now();
    pg.freeze();
    let mut rss_peak = rss_before;
    while froze.elapsed() < FREEZE {
        tokio::time::sleep(Duration::from_secs(2)).await;
        for (peak, server) in rss_peak.iter_mut().zip([&a, &b]) {
            *peak = (*peak).max(server.rss_bytes());
        }
    }
    pg.thaw();
    let thawed = Instant::now();
    tokio::time::sleep(Duration::from_secs(10)).await;
    let silenced = Instant::now();
    relay.hold(true);
    tokio::time::sleep(SILENCE).await;
    relay.hold(false);
    let healed = Instant::now();
    tokio::time::sleep(Duration::from_secs(10)).await;
    stop.store(true, Ordering::Relaxed);
    load.await.expect("load");
    let probes: Vec<Vec<Probe>> = {
        let mut all = Vec::new();
        for (probes, task) in probes {
            task.await.expect("probes");
            all.push(probes.lock().expect("probes").clone());
        }
        all
    };

    let samples = samples.lock().expect("samples");
    let longest = samples.iter().map(|s| s.took).max().unwrap_or_default();
    assert!(
        longest <= DEADLINE + Duration::from_secs(1),
        "a request waited {longest:?}"
    );
    for s in samples.iter() {
        assert!(
            s.status == 200 || s.status == 503,
            "{} answered {}",
            s.user,
            s.status
        );
    }
    let refused = samples.iter().filter(|s| s.status == 503).count();
    assert!(refused > 0, "the faults were felt");
    let during = |from: Instant, to: Instant| {
        samples
            .iter()
            .filter(|s| s.sent >= from && s.sent < to && s.status == 200)
            .count()
    };
    assert!(
        during(thawed + Duration::from_secs(2), silenced) > 0
            && during(
                healed + Duration::from_secs(2),
                healed + Duration::from_secs(10)
            ) > 0,
        "the service came back after each fault"
    );
    for (server, probes) in ["a", "b"].iter().zip(&probes) {
        for (fault, began, ended) in [("freeze", froze, thawed), ("silence", silenced, healed)] {
            let first_503 = probes
                .iter()
                .find(|(at, status)| *at >= began && *status == 503)
                .map(|(at, _)| *at - began);
            assert!(
                first_503.is_some_and(|after| after <= Duration::from_secs(6)),
                "{server}: /readyz turned 503 {first_503:?} into the {fault}"
            );
            let first_200 = probes
                .iter()
                .find(|(at, status)| *at >= ended && *status == 200)
                .map(|(at, _)| *at - ended);
            assert!(
                first_200.is_some_and(|after| after <= Duration::from_secs(2)),
                "{server}: /readyz turned 200 {first_200:?} after the {fault}"
            );
        }
    }
    for (server, (before, peak)) in ["a", "b"].iter().zip(rss_before.iter().zip(&rss_peak)) {
        let grew = peak.saturating_sub(*before);
        assert!(
            grew <= 64 << 20,
            "{server}: memory grew by {} MiB over the freeze",
            grew >> 20
        );
    }
    eprintln!(
        "{} requests, {refused} refused, longest {longest:?}; memory over the freeze: a {} → {} MiB, b {} → {} MiB",
        samples.len(),
        rss_before[0] >> 20,
        rss_peak[0] >> 20,
        rss_before[1] >> 20,
        rss_peak[1] >> 20,
    );
    // Every acknowledged start made its card, and no start made two.
    let acknowledged: Vec<&str> = samples
        .iter()
        .filter(|s| s.start && s.status == 200)
        .map(|s| s.user.as_str())
        .collect();
    let cards = cards_per_user(&pg.url());
    for user in &acknowledged {
        assert_eq!(cards.get(*user), Some(&1), "{user}: acknowledged");
    }
    let doubled: Vec<_> = cards.iter().filter(|(_, n)| **n > 1).collect();
    assert!(doubled.is_empty(), "{doubled:?}");
}

/// Cards of the load's users, per user, read from the database itself.
fn cards_per_user(url: &str) -> HashMap<String, i64> {
    use diesel::{Connection, RunQueryDsl};
    #[derive(diesel::QueryableByName)]
    struct Row {
        #[diesel(sql_type = diesel::sql_types::Text)]
        user_id: String,
        #[diesel(sql_type = diesel::sql_types::BigInt)]
        n: i64,
    }
    let mut conn = diesel::PgConnection::establish(url).expect("connect");
    diesel::sql_query(
        "SELECT user_id, count(*) AS n FROM card_instances \
         WHERE user_id LIKE 'hang-%' GROUP BY user_id",
    )
    .load::<Row>(&mut conn)
    .expect("cards")
    .into_iter()
    .map(|r| (r.user_id, r.n))
    .collect()
}
