//! The end-user feed in real time (contract §12) under load, against the real binary (release
//! build), on SQLite and, when TEST_POSTGRES_URL is set, PostgreSQL.
//!
//! `cargo bench -p server --bench feed`:
//! 1. `POST /start` of one new user per request, 32 clients for 10 s, with no stream open;
//! 2. BENCH_STREAMS (default 10,000) streams opened, one per user, over plain TCP (a client
//!    of a few kilobytes per stream); the server's RSS before and after;
//! 3. triggers for BENCH_TRIGGERED (default 1,000) of those users at BENCH_RATE (default 500)
//!    per second for 10 s, each making one card: every `card-published` must reach its user's
//!    stream, and the time from sending the trigger to receiving the event is reported;
//! 4. part 1 again with the streams open.
//!
//! Goals (issue 24): every event delivered (the ledger: as many events as triggers, each on
//! its user's stream, none on the others), trigger-to-event p99 ≤ 100 ms, RSS growth ≤ 200 MB
//! for 10,000 streams, `/start` with the streams open within 10% of the figure without.
//! With BENCH_PROCESSES=2 on PostgreSQL, the streams are held by a second process and the
//! triggers go to the first.
//!
//! With BENCH_BROWSER=1 every stream is opened as a browser opens it (docs/api.md, Browser
//! access): each user signs in with a token of its own (an EC SDK key made for the run, the
//! page's origin allowed), mints a stream ticket with it, and opens the stream with
//! `?ticket=` and `Origin`, without `Authorization`; the same goals hold (issue 61).

mod common;
#[allow(dead_code, unused_macros, unused_imports)]
#[path = "../../../tests/blackbox/support.rs"]
mod support;

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use adapters_diesel::testing::TestDatabase;
use common::{pct, setting, RUN};
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use common::STARTS_CLIENTS as CLIENTS;

/// When each user's triggers were sent, oldest first.
type Sent = Arc<Mutex<HashMap<u64, VecDeque<Instant>>>>;

/// What the streams received: latencies, and events per user.
#[derive(Default)]
struct Received {
    latencies: Mutex<Vec<Duration>>,
    per_user: Mutex<HashMap<u64, u64>>,
    unexpected: AtomicUsize,
}

/// Opens user `u`'s stream over plain TCP and reads it until `stop`: each `card-published`
/// is matched with the oldest trigger sent for its user.
/// One stream the bench holds: where, as whom, for which user, and where it reports.
struct Holder {
    address: String,
    path: String,
    credential: Credential,
    user: u64,
    sent: Sent,
    received: Arc<Received>,
    opened: Arc<AtomicUsize>,
}

async fn hold(holder: Holder, permit: tokio::sync::OwnedSemaphorePermit) {
    let Holder {
        address,
        path,
        credential,
        user,
        sent,
        received,
        opened,
    } = holder;
    // Streams open 200 at a time: the permit goes back once this one's answer has begun.
    let mut permit = Some(permit);
    let (path, credential) = match credential {
        Credential::Key(secret) => (path, format!("Authorization: Bearer {secret}\r\n")),
        Credential::Browser(page) => {
            let ticket = page.ticket(&address, &path).await;
            (
                format!("{path}?ticket={ticket}"),
                format!("Origin: {ORIGIN}\r\n"),
            )
        }
    };
    let mut socket = TcpStream::connect(&address).await.expect("connect");
    let request = format!(
        "GET {path} HTTP/1.1\r\nHost: {address}\r\n{credential}Accept: text/event-stream\r\n\r\n"
    );
    socket.write_all(request.as_bytes()).await.expect("request");
    let mut buffer = Vec::with_capacity(1024);
    let mut chunk = [0u8; 2048];
    let mut head_read = false;
    loop {
        let n = match socket.read(&mut chunk).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        buffer.extend_from_slice(&chunk[..n]);
        if !head_read {
            let Some(end) = buffer.windows(4).position(|w| w == b"\r\n\r\n") else {
                continue;
            };
            assert!(
                buffer.starts_with(b"HTTP/1.1 200"),
                "{}",
                String::from_utf8_lossy(&buffer)
            );
            buffer.drain(..end + 4);
            head_read = true;
            opened.fetch_add(1, Ordering::Relaxed);
            permit.take();
        }
        // Each frame is one chunk of the chunked body: find the events whole.
        while let Some(start) = find(&buffer, b"event: ") {
            let Some(len) = find(&buffer[start..], b"\n\n") else {
                break;
            };
            let frame = String::from_utf8_lossy(&buffer[start..start + len]).into_owned();
            buffer.drain(..start + len + 2);
            if frame.starts_with("event: card-published") {
                let at = sent
                    .lock()
                    .expect("sent")
                    .get_mut(&user)
                    .and_then(VecDeque::pop_front);
                match at {
                    Some(at) => received
                        .latencies
                        .lock()
                        .expect("latencies")
                        .push(at.elapsed()),
                    None => {
                        received.unexpected.fetch_add(1, Ordering::Relaxed);
                    }
                }
                *received
                    .per_user
                    .lock()
                    .expect("per user")
                    .entry(user)
                    .or_default() += 1;
            }
        }
        if buffer.len() > 64 * 1024 {
            buffer.clear();
        }
    }
}

/// The origin of the page the browser streams are opened from.
const ORIGIN: &str = "http://127.0.0.1:18291";

/// How a stream signs in.
enum Credential {
    /// The bench's key, in `Authorization`.
    Key(String),
    /// As a browser page: a user token traded for a stream ticket.
    Browser(Page),
}

/// A user's page: the client it calls with, and the user's token.
struct Page {
    client: reqwest::Client,
    token: String,
}

impl Page {
    /// A ticket for the stream at `path`, minted with the user's token from the page's origin.
    async fn ticket(&self, address: &str, path: &str) -> String {
        let minted = self
            .client
            .post(format!("http://{address}{path}-tickets"))
            .bearer_auth(&self.token)
            .header("Origin", ORIGIN)
            .send()
            .await
            .expect("mint");
        assert_eq!(minted.status(), 201, "a stream ticket");
        let body: serde_json::Value = minted.json().await.expect("ticket");
        body["data"]["ticket"].as_str().expect("ticket").to_owned()
    }
}

/// An EC SDK key named `bench` that allows [`ORIGIN`], added to the server's environment;
/// the signing half.
async fn browser_key(server: &support::Server) -> jsonwebtoken::EncodingKey {
    use p256::pkcs8::{EncodePrivateKey, EncodePublicKey, LineEnding};
    let secret = p256::SecretKey::random(&mut rand::rngs::OsRng);
    let public = secret
        .public_key()
        .to_public_key_pem(LineEnding::LF)
        .expect("public PEM");
    let added = server
        .client
        .post(server.url(&format!("/v1/{}/sdk-keys", server.env)))
        .bearer_auth(&server.admin_secret)
        .json(&json!({"name": "bench", "publicKey": public, "allowedOrigins": [ORIGIN]}))
        .send()
        .await
        .expect("add the SDK key");
    assert_eq!(added.status(), 201, "the SDK key");
    let private = secret.to_pkcs8_pem(LineEnding::LF).expect("private PEM");
    jsonwebtoken::EncodingKey::from_ec_pem(private.as_bytes()).expect("signing key")
}

/// A token of `user`, valid for an hour.
fn token(key: &jsonwebtoken::EncodingKey, user: &str) -> String {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let mut header = jsonwebtoken::Header::new(jsonwebtoken::Algorithm::ES256);
    header.kid = Some("bench".into());
    let claims = json!({"sub": user, "iat": now - 60, "exp": now + 3_600});
    jsonwebtoken::encode(&header, &claims, key).expect("signed")
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

async fn run(db: TestDatabase, backend: &str) {
    let streams = setting("BENCH_STREAMS", 10_000);
    let triggered = setting("BENCH_TRIGGERED", 1_000).min(streams);
    let rate = setting("BENCH_RATE", 500);
    let processes = common::processes(backend);
    let browser = setting("BENCH_BROWSER", 0) == 1;
    let path_taken = if browser {
        "user tokens, stream tickets, Origin"
    } else {
        "the key in Authorization"
    };
    println!("{backend} ({processes} process(es); streams opened with {path_taken}):");
    let server =
        support::Server::start_with(db, &[("WORKBENCH_RATE_LIMIT_KEY", Some("off"))]).await;
    let replica = (processes > 1).then(|| server.replica(&[]));
    let holder = replica.as_ref().unwrap_or(&server);
    let flow = common::published_flow(&server).await;
    let signing = if browser {
        Some(browser_key(&server).await)
    } else {
        None
    };

    let (without, p99_without) = common::starts(&server, &flow, "before").await;
    common::drained(&server).await;
    println!(
        "  POST /start, no stream open, {CLIENTS} clients: {without:>7.0} req/s  p99 \
        {p99_without:.2} ms"
    );

    let rss_before = holder.rss_bytes();
    let sent: Sent = Arc::default();
    let received = Arc::new(Received::default());
    let opened = Arc::new(AtomicUsize::new(0));
    let address = holder
        .url("")
        .trim_start_matches("http://")
        .trim_end_matches('/')
        .to_owned();
    let opening = Instant::now();
    let gate = Arc::new(tokio::sync::Semaphore::new(200));
    let mut readers: Vec<tokio::task::JoinHandle<()>> = Vec::new();
    for user in 0..streams {
        let permit = gate.clone().acquire_owned().await.expect("gate");
        let path = format!("/v1/{}/users/s{user}/cards/stream", holder.env);
        let credential = match &signing {
            Some(key) => Credential::Browser(Page {
                client: server.client.clone(),
                token: token(key, &format!("s{user}")),
            }),
            None => Credential::Key(holder.admin_secret.clone()),
        };
        let stream = Holder {
            address: address.clone(),
            path,
            credential,
            user,
            sent: sent.clone(),
            received: received.clone(),
            opened: opened.clone(),
        };
        readers.push(tokio::spawn(hold(stream, permit)));
    }
    while opened.load(Ordering::Relaxed) < streams as usize {
        assert!(
            opening.elapsed() < Duration::from_secs(300),
            "streams did not open"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    let rss_open = holder.rss_bytes();
    println!(
        "  {streams} streams open in {:.1} s; RSS {} → {} MB (+{:.1} KB per stream)",
        opening.elapsed().as_secs_f64(),
        rss_before >> 20,
        rss_open >> 20,
        rss_open.saturating_sub(rss_before) as f64 / 1024.0 / streams as f64
    );

    // Triggers for `triggered` of the streamed users, round robin, at `rate` per second.
    let url = server.url(&format!("/v1/{}/action-flow/{flow}/start", server.env));
    let interval = Duration::from_secs_f64(1.0 / rate as f64);
    let started = Instant::now();
    let mut tasks = Vec::new();
    let mut n = 0u64;
    while started.elapsed() < RUN {
        let due = started + interval * n as u32;
        if let Some(wait) = due.checked_duration_since(Instant::now()) {
            tokio::time::sleep(wait).await;
        }
        let user = n % triggered;
        let (client, url, secret, sent) = (
            server.client.clone(),
            url.clone(),
            server.admin_secret.clone(),
            sent.clone(),
        );
        tasks.push(tokio::spawn(async move {
            sent.lock()
                .expect("sent")
                .entry(user)
                .or_default()
                .push_back(Instant::now());
            let response = client
                .post(&url)
                .bearer_auth(&secret)
                .json(&json!({"flows": [{"target": {"type": "user",
                    "targetUserIds": [format!("s{user}")]}}]}))
                .send()
                .await
                .expect("start");
            assert!(response.status().is_success(), "{}", response.status());
        }));
        n += 1;
    }
    for task in tasks {
        task.await.expect("trigger");
    }
    // Every event delivered, or the run is void.
    let waited = Instant::now();
    while (received.latencies.lock().expect("latencies").len() as u64) < n {
        if waited.elapsed() > Duration::from_secs(60) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let mut latencies = received.latencies.lock().expect("latencies").clone();
    latencies.sort();
    let per_user = received.per_user.lock().expect("per user").clone();
    let stray = per_user.keys().filter(|u| **u >= triggered).count();
    let expected = n / triggered;
    let wrong = (0..triggered)
        .filter(|u| {
            let want = expected + u64::from(*u < n % triggered);
            per_user.get(u).copied().unwrap_or(0) != want
        })
        .count();
    println!(
        "  {n} triggers at {rate}/s for {triggered} users: {} events received ({} unexpected, \
            {stray} on untriggered streams, {wrong} users off count); trigger → event p50 {:.1} \
                ms  p99 {:.1} ms  max {:.1} ms",
        latencies.len(),
        received.unexpected.load(Ordering::Relaxed),
        pct(&latencies, 0.5),
        pct(&latencies, 0.99),
        pct(&latencies, 1.0),
    );
    let ledger = latencies.len() as u64 == n
        && received.unexpected.load(Ordering::Relaxed) == 0
        && stray == 0
        && wrong == 0;
    println!("  ledger: {}", if ledger { "closed" } else { "VOID" });
    let rss_after = holder.rss_bytes();
    common::drained(&server).await;
    let (with, p99_with) = common::starts(&server, &flow, "after").await;
    common::drained(&server).await;
    // And once more without the streams, for the drift of the machine and the database.
    for reader in readers.drain(..) {
        reader.abort();
    }
    while common::metric(holder, "workbench_feed_streams")
        .await
        .unwrap_or(0.0)
        > 0.0
    {
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let (again, p99_again) = common::starts(&server, &flow, "again").await;
    println!(
        "  POST /start, the streams closed again, {CLIENTS} clients: {again:>7.0} req/s  p99 \
        {p99_again:.2} ms"
    );
    println!(
        "  with the streams open: {:.1}% of the mean of the figures without",
        with / ((without + again) / 2.0) * 100.0
    );
    println!(
        "  POST /start, {streams} streams open, {CLIENTS} clients: {with:>7.0} req/s  p99 \
        {p99_with:.2} ms ({:.1}% of the figure without)",
        with / without * 100.0
    );
    println!(
        "  RSS of the process holding the streams: {} MB before, {} MB open, {} MB after the \
            triggers",
        rss_before >> 20,
        rss_open >> 20,
        rss_after >> 20
    );
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
