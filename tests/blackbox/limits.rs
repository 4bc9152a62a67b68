//! Rate limits (contract §16): a bucket per API key, and per client id and address on the
//! token exchange. The other tests turn them off; these set their own.

use serde_json::json;

use adapters_diesel::testing::TestDatabase;

use crate::support::{call, Reply, Server};

async fn folders(server: &Server, secret: &str) -> Reply {
    call(
        server,
        "GET",
        &format!("/v1/{}/workbench-folder", server.env),
        Some(secret),
        None,
    )
    .await
}

fn header(reply: &Reply, name: &str) -> u64 {
    reply
        .header(name)
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("{name} in {:?}", reply.headers))
}

/// At `5/min` a key may send 10 at once; the 11th is refused with 429 and the headers, before
/// its body is read; another key is not slowed.
async fn keys_past_their_rate_get_429_and_other_keys_are_not_slowed(db: TestDatabase) {
    let server = Server::start_with(db, &[("WORKBENCH_RATE_LIMIT_KEY", Some("5/min"))]).await;
    let first = server.key(&[
        "--scope",
        "workbench_folders:read",
        "--scope",
        "workbench_folders:create",
    ]);
    let second = server.key(&[
        "--scope",
        "workbench_folders:read",
        "--scope",
        "workbench_folders:create",
    ]);
    for sent in 1..=10 {
        let reply = folders(&server, &first).await;
        assert_eq!(reply.status, 200, "{}", reply.text);
        assert_eq!(header(&reply, "ratelimit-limit"), 10);
        assert_eq!(header(&reply, "ratelimit-remaining"), 10 - sent);
        assert!(
            header(&reply, "ratelimit-reset") <= 12 * sent,
            "{:?}",
            reply.headers
        );
    }
    let refused = folders(&server, &first).await;
    assert_eq!(refused.problem(429, "rate_limited"), Vec::<String>::new());
    let wait = header(&refused, "retry-after");
    assert!((1..=12).contains(&wait), "Retry-After {wait}");
    assert_eq!(header(&refused, "ratelimit-remaining"), 0);
    assert_eq!(header(&refused, "ratelimit-reset"), wait);
    // Refused before its body is read: a malformed body is not what it hears about.
    let malformed = call(
        &server,
        "POST",
        &format!("/v1/{}/workbench-folder", server.env),
        Some(&first),
        Some(json!({"name": 5})),
    )
    .await;
    assert_eq!(malformed.status, 429, "{}", malformed.text);

    let other = folders(&server, &second).await;
    assert_eq!(other.status, 200, "{}", other.text);
    assert_eq!(header(&other, "ratelimit-remaining"), 9);
}

/// The defaults of contract §16: 200/s per key (a burst of 400), and 10/min on the token
/// exchange (a burst of 20) per client id and per client address.
async fn the_defaults_limit_keys_and_token_exchanges(db: TestDatabase) {
    let server = Server::start_with(
        db,
        &[
            ("WORKBENCH_RATE_LIMIT_KEY", None),
            ("WORKBENCH_RATE_LIMIT_TOKEN", None),
        ],
    )
    .await;
    let reply = folders(&server, &server.admin_secret).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    assert_eq!(header(&reply, "ratelimit-limit"), 400);
    assert_eq!(header(&reply, "ratelimit-remaining"), 399);

    let exchange = |id: String, secret: String| {
        let server = &server;
        async move {
            Reply::from(
                server
                    .client
                    .post(server.url("/oauth/token"))
                    .basic_auth(id, Some(secret))
                    .header("content-type", "application/x-www-form-urlencoded")
                    .body("grant_type=client_credentials")
                    .send()
                    .await
                    .expect("sent"),
            )
            .await
        }
    };
    for sent in 1..=20 {
        let reply = exchange(server.admin_client_id.clone(), server.admin_secret.clone()).await;
        assert_eq!(reply.status, 200, "{}", reply.text);
        assert_eq!(header(&reply, "ratelimit-limit"), 20);
        assert_eq!(header(&reply, "ratelimit-remaining"), 20 - sent);
    }
    let refused = exchange(server.admin_client_id.clone(), server.admin_secret.clone()).await;
    assert_eq!(refused.problem(429, "rate_limited"), Vec::<String>::new());
    assert!(header(&refused, "retry-after") >= 1);
    // Another client from the same address: the address's bucket is empty too.
    let other = server
        .admin(&["key", "create", "--env", &server.env, "--role", "events"])
        .expect("key");
    let (id, secret) = (
        other["clientId"].as_str().expect("id").to_owned(),
        other["clientSecret"].as_str().expect("secret").to_owned(),
    );
    let refused = exchange(id, secret).await;
    assert_eq!(refused.status, 429, "{}", refused.text);
    // A key's own calls are not slowed by the exchanges.
    assert_eq!(folders(&server, &server.admin_secret).await.status, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_keys_past_their_rate_get_429_and_other_keys_are_not_slowed() {
    keys_past_their_rate_get_429_and_other_keys_are_not_slowed(TestDatabase::sqlite()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_keys_past_their_rate_get_429_and_other_keys_are_not_slowed() {
    let Some(db) = TestDatabase::postgres() else {
        return;
    };
    keys_past_their_rate_get_429_and_other_keys_are_not_slowed(db).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_the_defaults_limit_keys_and_token_exchanges() {
    the_defaults_limit_keys_and_token_exchanges(TestDatabase::sqlite()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_the_defaults_limit_keys_and_token_exchanges() {
    let Some(db) = TestDatabase::postgres() else {
        return;
    };
    the_defaults_limit_keys_and_token_exchanges(db).await;
}
