//! The feed read with an end user's own token (contract §15) against the same read with a
//! customer key, over HTTP against the real binary (release build), on SQLite and, when
//! TEST_POSTGRES_URL is set, PostgreSQL.
//!
//! `cargo bench -p server --bench user_token` gives 1,000 users one card each, then runs
//! closed loops of 32 clients for 10 s each, alternating in the same minutes: the customer
//! key; one remembered RS256 token per user; one remembered ES256 token per user; and, for
//! the cost of a first sign-in, a token never seen before on every request (ES256, each
//! verified, its user merged). Goal (issue 28): a remembered token's throughput is at least
//! 90% of the key's. Ledger: every answer is 200 with the one card of its user, or the run
//! is void.
//!
//! BENCH_BACKEND=postgres runs PostgreSQL alone, BENCH_BACKEND=sqlite SQLite alone.

mod common;
#[allow(dead_code, unused_macros, unused_imports)]
#[path = "../../../tests/blackbox/support.rs"]
mod support;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use adapters_diesel::testing::TestDatabase;
use common::RUN;
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use p256::pkcs8::{EncodePrivateKey, EncodePublicKey, LineEnding};
use serde_json::{json, Value};

const CLIENTS: usize = 32;
const USERS: u64 = 1_000;
const ROUNDS: usize = 2;

/// How each request of a loop authenticates: the bearer of request `n` for user `n % USERS`.
type Bearer = Arc<dyn Fn(u64) -> String + Send + Sync>;

fn now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}

struct Signer {
    algorithm: Algorithm,
    key: EncodingKey,
    kid: &'static str,
}

impl Signer {
    fn sign(&self, user: &str, nonce: u64) -> String {
        let mut header = Header::new(self.algorithm);
        header.kid = Some(self.kid.into());
        let claims = json!({"sub": user, "iat": now() - 60, "exp": now() + 3_600, "jti": nonce});
        jsonwebtoken::encode(&header, &claims, &self.key).expect("signed")
    }
}

/// Adds an SDK key of `public_pem` named `kid` and answers a signer with the private half.
async fn sdk_key(
    server: &support::Server,
    kid: &'static str,
    algorithm: Algorithm,
    private_pem: &str,
    public_pem: &str,
) -> Signer {
    let added = server
        .client
        .post(server.url(&format!("/v1/{}/sdk-keys", server.env)))
        .bearer_auth(&server.admin_secret)
        .json(&json!({"name": kid, "publicKey": public_pem}))
        .send()
        .await
        .expect("sdk key");
    assert_eq!(added.status().as_u16(), 201);
    let key = match algorithm {
        Algorithm::RS256 => EncodingKey::from_rsa_pem(private_pem.as_bytes()),
        _ => EncodingKey::from_ec_pem(private_pem.as_bytes()),
    }
    .expect("encoding key");
    Signer {
        algorithm,
        key,
        kid,
    }
}

/// Closed loop of feed reads: CLIENTS tasks back to back for RUN. Every answer must be 200
/// with its user's one card (the ledger). Returns (requests/s, p50, p99).
async fn feed_loop(server: &support::Server, bearer: Bearer) -> (f64, f64, f64) {
    let counter = Arc::new(AtomicU64::new(0));
    let base = server.url(&format!("/v1/{}/users", server.env));
    let started = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..CLIENTS {
        let (counter, bearer, client, base) = (
            counter.clone(),
            bearer.clone(),
            server.client.clone(),
            base.clone(),
        );
        tasks.push(tokio::spawn(async move {
            let mut latencies = Vec::new();
            while started.elapsed() < RUN {
                let n = counter.fetch_add(1, Ordering::Relaxed);
                let token = bearer(n);
                let sent = Instant::now();
                let response = client
                    .get(format!("{base}/b{}/cards", n % USERS + 1))
                    .bearer_auth(token)
                    .send()
                    .await
                    .expect("request");
                let status = response.status().as_u16();
                let body: Value = response.json().await.expect("json");
                latencies.push(sent.elapsed());
                assert_eq!(status, 200, "{body}");
                assert_eq!(
                    body["data"].as_array().map(Vec::len),
                    Some(1),
                    "ledger: every user has one card"
                );
            }
            latencies
        }));
    }
    common::closed_loop_figures(started, tasks).await
}

async fn run(db: TestDatabase, backend: &str) {
    println!("{backend}:");
    let server = support::Server::start_with(
        db,
        &[
            ("WORKBENCH_RATE_LIMIT_KEY", Some("off")),
            ("WORKBENCH_RATE_LIMIT_USER", Some("off")),
        ],
    )
    .await;
    let env = server.env.clone();
    let flow = common::published_flow(&server).await;
    common::seed_users(server.database_url(), &env, USERS);
    let started = server
        .client
        .post(server.url(&format!("/v1/{env}/action-flow/{flow}/start")))
        .bearer_auth(&server.admin_secret)
        .json(&json!({"flows": [{"target": {"type": "tag", "tagName": "bench"}}]}))
        .send()
        .await
        .expect("start");
    let body: Value = started.json().await.expect("json");
    let id = body["data"]["triggeredFlows"][0]["flowInvocationId"]
        .as_str()
        .expect("id")
        .to_owned();
    loop {
        let status: Value = server
            .client
            .get(server.url(&format!("/v1/{env}/action-flow/{flow}/invocations/{id}")))
            .bearer_auth(&server.admin_secret)
            .send()
            .await
            .expect("status")
            .json()
            .await
            .expect("json");
        if status["data"]["status"] == "completed" {
            assert_eq!(
                status["data"]["cardsCreated"], USERS,
                "ledger: one card per user"
            );
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }

    let rsa_private = rsa::RsaPrivateKey::new(&mut rand::rngs::OsRng, 2048).expect("RSA key");
    let rsa = sdk_key(
        &server,
        "rsa-app",
        Algorithm::RS256,
        &rsa_private.to_pkcs8_pem(LineEnding::LF).expect("pem"),
        &rsa::RsaPublicKey::from(&rsa_private)
            .to_public_key_pem(LineEnding::LF)
            .expect("pem"),
    )
    .await;
    let ec_private = p256::SecretKey::random(&mut rand::rngs::OsRng);
    let ec = Arc::new(
        sdk_key(
            &server,
            "ec-app",
            Algorithm::ES256,
            &ec_private.to_pkcs8_pem(LineEnding::LF).expect("pem"),
            &ec_private
                .public_key()
                .to_public_key_pem(LineEnding::LF)
                .expect("pem"),
        )
        .await,
    );
    let per_user = |signer: &Signer| -> Bearer {
        let tokens: Vec<String> = (1..=USERS)
            .map(|u| signer.sign(&format!("b{u}"), 0))
            .collect();
        Arc::new(move |n| tokens[(n % USERS) as usize].clone())
    };
    let admin = server.admin_secret.clone();
    let variants: Vec<(&str, Bearer)> = vec![
        ("customer key", Arc::new(move |_| admin.clone())),
        ("RS256 token, remembered", per_user(&rsa)),
        ("ES256 token, remembered", per_user(&ec)),
    ];
    // Warm-up: each remembered token verified once, and every path's first calls made.
    for (_, bearer) in &variants {
        for n in 0..USERS {
            let reply = server
                .client
                .get(server.url(&format!("/v1/{env}/users/b{}/cards", n + 1)))
                .bearer_auth(bearer(n))
                .send()
                .await
                .expect("warm-up");
            assert_eq!(reply.status().as_u16(), 200);
        }
    }
    let mut figures: Vec<Vec<f64>> = vec![Vec::new(); variants.len()];
    for round in 1..=ROUNDS {
        for (i, (name, bearer)) in variants.iter().enumerate() {
            let (rps, p50, p99) = feed_loop(&server, bearer.clone()).await;
            figures[i].push(rps);
            println!(
                "  round {round}, {name:<26} {CLIENTS} clients: {rps:>7.0} req/s  p50 \
                {p50:.2} ms  p99 {p99:.2} ms"
            );
        }
    }
    let median = |v: &[f64]| {
        let mut v = v.to_vec();
        v.sort_by(f64::total_cmp);
        (v[(v.len() - 1) / 2] + v[v.len() / 2]) / 2.0
    };
    let key = median(&figures[0]);
    for (i, (name, _)) in variants.iter().enumerate().skip(1) {
        let token = median(&figures[i]);
        println!(
            "  {name}: {:.1}% of the customer key's throughput (medians {token:.0} / {key:.0} \
                req/s)",
            token / key * 100.0
        );
    }
    // A first sign-in on every request: a token never seen, verified and its user merged.
    let fresh = Arc::new(AtomicU64::new(1_000_000));
    let signer = ec.clone();
    let cold: Bearer = Arc::new(move |n| {
        signer.sign(
            &format!("b{}", n % USERS + 1),
            fresh.fetch_add(1, Ordering::Relaxed),
        )
    });
    let (rps, p50, p99) = feed_loop(&server, cold).await;
    println!(
        "  ES256 token, new on every request, {CLIENTS} clients: {rps:>7.0} req/s  p50 \
        {p50:.2} ms  p99 {p99:.2} ms"
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
