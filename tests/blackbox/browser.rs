//! Browser access to the end-user API (docs/api.md, Browser access): CORS for the origins an
//! SDK key lists, stream tickets that open a user's stream once, and a page on a second
//! origin, in headless Chromium, that shows a card through the native `EventSource`, while a
//! page of an origin no key lists gets nothing; and the browser SDK's example page
//! (`sdks/web`, served at `/console/sdk-example/`), whose feed shows a card and completes it,
//! and whose client, its stream ended, reconnects with a new ticket and replays what it missed.

use std::time::{Duration, Instant};

use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::console::Browser;
use crate::feed::{card_for, config, Feed};
use crate::sdk::{add_key, claims, Signer};
use crate::support::{blackbox, call, Reply, Server};
use crate::trigger::{fire, flow_publishing};

const ALLOWED: &str = "http://127.0.0.1:18291";

/// A request with `Origin: origin` and the extra headers, answered.
async fn from(
    s: &Server,
    method: &str,
    path: &str,
    origin: &str,
    headers: &[(&str, &str)],
) -> reqwest::Response {
    let method = reqwest::Method::from_bytes(method.as_bytes()).expect("method");
    let mut request = s
        .client
        .request(method, s.url(&format!("/v1/{}{path}", s.env)))
        .header("Origin", origin);
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    request.send().await.expect("answered")
}

fn header(response: &reqwest::Response, name: &str) -> Option<String> {
    response
        .headers()
        .get(name)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned)
}

/// An SDK key that lets `origins` in, and a token of `user` signed with it.
async fn key_for(s: &Server, origins: &[&str], user: &str) -> String {
    let signer = Signer::ec();
    let added = add_key(
        s,
        json!({"name": "web", "publicKey": signer.public_pem, "allowedOrigins": origins}),
    )
    .await;
    assert_eq!(added.status, 201, "{}", added.text);
    assert_eq!(added.body["data"]["allowedOrigins"], json!(origins));
    signer.sign("web", &claims(user))
}

async fn mint(s: &Server, user: &str, bearer: &str) -> Reply {
    call(
        s,
        "POST",
        &format!("/v1/{}/users/{user}/cards/stream-tickets", s.env),
        Some(bearer),
        None,
    )
    .await
}

async fn cors_answers_the_origins_a_key_lists_and_no_other(s: Server) {
    // Origins are taken only as a browser writes them.
    for (origins, named) in [
        (json!([7]), vec!["allowedOrigins[0]"]),
        (
            json!(["https://app.example.com/", "*", ALLOWED]),
            vec!["allowedOrigins[0]", "allowedOrigins[1]"],
        ),
    ] {
        let refused = add_key(
            &s,
            json!({"name": "bad", "publicKey": Signer::ec().public_pem,
                   "allowedOrigins": origins}),
        )
        .await;
        refused.problem(400, "validation_failed");
        let fields: Vec<&str> = refused.body["errors"]
            .as_array()
            .expect("errors")
            .iter()
            .filter_map(|e| e["field"].as_str())
            .collect();
        assert_eq!(fields, named, "{}", refused.text);
    }
    let token = key_for(&s, &[ALLOWED], "u1").await;

    let preflight = [
        ("Access-Control-Request-Method", "POST"),
        ("Access-Control-Request-Headers", "authorization"),
    ];
    let ok = from(
        &s,
        "OPTIONS",
        "/users/u1/cards/stream-tickets",
        ALLOWED,
        &preflight,
    )
    .await;
    assert_eq!(ok.status(), 204);
    assert_eq!(
        header(&ok, "access-control-allow-origin").as_deref(),
        Some(ALLOWED)
    );
    let allowed_headers = header(&ok, "access-control-allow-headers").unwrap_or_default();
    for needed in ["authorization", "last-event-id"] {
        assert!(allowed_headers.contains(needed), "{allowed_headers}");
    }
    assert_eq!(
        header(&ok, "access-control-max-age").as_deref(),
        Some("600")
    );
    assert!(header(&ok, "vary").unwrap_or_default().contains("origin"));

    let other = "http://127.0.0.1:18292";
    let no = from(&s, "OPTIONS", "/users/u1/cards", other, &preflight).await;
    assert_eq!(no.status(), 403);
    assert_eq!(header(&no, "access-control-allow-origin"), None);

    let bearer = format!("Bearer {token}");
    let auth = [("Authorization", bearer.as_str())];
    let read = from(&s, "GET", "/users/u1/cards", ALLOWED, &auth).await;
    assert_eq!(read.status(), 200);
    assert_eq!(
        header(&read, "access-control-allow-origin").as_deref(),
        Some(ALLOWED)
    );
    assert!(header(&read, "access-control-expose-headers").is_some());
    // A refusal reaches the page too, so that it can sign in again.
    let expired = from(
        &s,
        "GET",
        "/users/u1/cards",
        ALLOWED,
        &[("Authorization", "Bearer x")],
    );
    let expired = expired.await;
    assert_eq!(expired.status(), 401);
    assert_eq!(
        header(&expired, "access-control-allow-origin").as_deref(),
        Some(ALLOWED)
    );
    // A refusal the edge writes as a problem (a method the route lacks) keeps them too.
    let wrong = from(&s, "PATCH", "/users/u1/cards", ALLOWED, &auth).await;
    assert_eq!(wrong.status(), 405);
    assert_eq!(
        header(&wrong, "access-control-allow-origin").as_deref(),
        Some(ALLOWED)
    );
    // A card's pushes are for keys only: no CORS.
    let pushes = from(&s, "GET", "/users/u1/cards/ci_x/pushes", ALLOWED, &auth).await;
    assert_eq!(header(&pushes, "access-control-allow-origin"), None);
    // Another origin is answered as anyone is, with no CORS header: the browser keeps it.
    let elsewhere = from(&s, "GET", "/users/u1/cards", other, &auth).await;
    assert_eq!(elsewhere.status(), 200);
    assert_eq!(header(&elsewhere, "access-control-allow-origin"), None);
    // Only the end-user routes are open to browsers.
    let admin = format!("Bearer {}", s.admin_secret);
    let keys = from(
        &s,
        "GET",
        "/sdk-keys",
        ALLOWED,
        &[("Authorization", admin.as_str())],
    )
    .await;
    assert_eq!(keys.status(), 200);
    assert_eq!(header(&keys, "access-control-allow-origin"), None);
    let start = from(&s, "OPTIONS", "/action-flow/x/start", ALLOWED, &preflight).await;
    assert_eq!(header(&start, "access-control-allow-origin"), None);
}

async fn a_stream_ticket_opens_its_users_stream_once(s: Server) {
    let flow = flow_publishing(&s, "Live", config()).await;
    let token = key_for(&s, &[ALLOWED], "u1").await;
    // An API key never mints one: it does not belong in a browser.
    mint(&s, "u1", &s.admin_secret)
        .await
        .problem(403, "forbidden");
    // Nor another user's token.
    let minted = mint(&s, "u2", &token).await;
    assert_eq!(minted.status, 403, "{}", minted.text);

    let minted = mint(&s, "u1", &token).await;
    assert_eq!(minted.status, 201, "{}", minted.text);
    assert_eq!(minted.header("cache-control"), Some("no-store"));
    let ticket = minted.body["data"]["ticket"].as_str().expect("ticket");
    assert!(ticket.starts_with("wst_"), "{ticket}");
    assert!(minted.body["data"]["expiresAt"].is_string());
    let stream = |user: &str, query: String| {
        s.client
            .get(s.url(&format!("/v1/{}/users/{user}/cards/stream?{query}", s.env)))
            .send()
    };
    // Another user's stream: refused, and the ticket is not used up by it.
    let other = stream("u2", format!("ticket={ticket}"))
        .await
        .expect("answered");
    assert_eq!(other.status(), 401);
    let mut feed = Feed::read(
        stream("u1", format!("ticket={ticket}"))
            .await
            .expect("stream"),
    );
    card_for(&s, &flow, "u1").await;
    let first = feed
        .next(Duration::from_secs(3))
        .await
        .expect("card-published");
    assert_eq!(first.name, "card-published");
    // Used once.
    let again = stream("u1", format!("ticket={ticket}"))
        .await
        .expect("answered");
    assert_eq!(again.status(), 401);
    let none = stream("u1", "ticket=wst_nothing".into())
        .await
        .expect("answered");
    assert_eq!(none.status(), 401);
    // A new ticket resumes after the last event seen, as `Last-Event-ID` does.
    drop(feed);
    card_for(&s, &flow, "u1").await;
    let next = mint(&s, "u1", &token).await;
    let ticket = next.body["data"]["ticket"].as_str().expect("ticket");
    let query = format!("ticket={ticket}&lastEventId={}", first.id);
    let mut resumed = Feed::read(stream("u1", query).await.expect("stream"));
    let missed = resumed.next(Duration::from_secs(3)).await.expect("missed");
    assert_eq!(missed.name, "card-published");
    assert_ne!(missed.id, first.id);
}

blackbox!(
    cors_answers_the_origins_a_key_lists_and_no_other,
    a_stream_ticket_opens_its_users_stream_once,
);

/// The page a customer's app would be: it mints a ticket with the user token given in its
/// address, opens the stream with the browser's own `EventSource`, and lists each card's
/// headline as it arrives. `#status` says where it stands.
const PAGE: &str = r#"<!doctype html>
<meta charset="utf-8"><title>feed</title>
<p id="status">starting</p><ul id="cards"></ul>
<script type="module">
const q = new URLSearchParams(location.hash.slice(1));
const base = q.get("base"), env = q.get("env"), user = q.get("user"), token = q.get("token");
const status = document.getElementById("status");
try {
  const minted = await fetch(`${base}/v1/${env}/users/${user}/cards/stream-tickets`,
    {method: "POST", headers: {authorization: `Bearer ${token}`}});
  const {data} = await minted.json();
  const stream = new EventSource(
    `${base}/v1/${env}/users/${user}/cards/stream?ticket=${encodeURIComponent(data.ticket)}`);
  stream.onopen = () => { status.textContent = "open"; };
  stream.addEventListener("card-published", (event) => {
    const {card} = JSON.parse(event.data);
    const view = Object.values(card.content)[0].defaultView;
    const headline = view.content.find((c) => c.type === "headline");
    const item = document.createElement("li");
    item.className = "card";
    item.textContent = headline.attributes.text;
    document.getElementById("cards").append(item);
  });
} catch (e) {
  status.textContent = "blocked: " + e;
}
</script>"#;

/// Serves [`PAGE`] on `port` of 127.0.0.1 until the test ends: a second origin.
async fn serve_page(port: u16) -> tokio::task::JoinHandle<()> {
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", port))
        .await
        .expect("the page's port");
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut request = [0u8; 4096];
                let _ = socket.read(&mut request).await;
                let answer = format!(
                    "HTTP/1.1 200 OK\r\ncontent-type: text/html; charset=utf-8\r\n\
                     content-length: {}\r\nconnection: close\r\n\r\n{PAGE}",
                    PAGE.len()
                );
                let _ = socket.write_all(answer.as_bytes()).await;
            });
        }
    })
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}

fn page_url(s: &Server, port: u16, token: &str) -> String {
    format!(
        "http://127.0.0.1:{port}/#base={}&env={}&user=u1&token={token}",
        s.base, s.env
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_a_browser_a_page_of_a_listed_origin_shows_a_card_and_another_gets_nothing() {
    let Some(b) = Browser::start().await else {
        return;
    };
    let s = Server::start(adapters_diesel::testing::TestDatabase::sqlite()).await;
    let (listed, unlisted) = (free_port(), free_port());
    let _pages = (serve_page(listed).await, serve_page(unlisted).await);
    let origin = format!("http://127.0.0.1:{listed}");
    let token = key_for(&s, &[origin.as_str()], "u1").await;
    let flow = flow_publishing(&s, "Live", config()).await;

    b.c()
        .goto(&page_url(&s, listed, &token))
        .await
        .expect("goto");
    b.until("#status", "open").await;
    let fired = Instant::now();
    let started = fire(
        &s,
        &flow,
        "start",
        json!({"flows": [{"target": {"type": "user", "targetUserIds": ["u1"]}}]}),
    )
    .await;
    assert!(started.status < 300, "{}", started.text);
    b.until("#cards .card", "Hi").await;
    let shown = fired.elapsed();
    assert!(shown < Duration::from_secs(1), "the card took {shown:?}");

    // An origin no key lists: the browser keeps every answer from the page.
    b.c()
        .goto(&page_url(&s, unlisted, &token))
        .await
        .expect("goto");
    b.until("#status", "blocked").await;
    let cards: Value = b
        .c()
        .execute("return document.querySelectorAll('.card').length", vec![])
        .await
        .expect("script");
    assert_eq!(cards, json!(0));
    b.end().await;
}

/// The SDK's value in the example page's feed: the cards' headlines, from its shadow root.
const HEADLINES: &str = "const feed = document.querySelector('workbench-feed'); \
    return feed && feed.shadowRoot \
      ? [...feed.shadowRoot.querySelectorAll('.card h3')].map((h) => h.textContent) : [];";

/// Waits up to 5 s for the example page's feed to show `want`.
async fn headlines_become(b: &Browser, want: Value) {
    let mut shown = Value::Null;
    for _ in 0..50 {
        shown = b.c().execute(HEADLINES, vec![]).await.expect("script");
        if shown == want {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("the SDK's feed shows {shown}, not {want}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_a_browser_the_sdk_example_shows_a_card_and_its_button_completes_it() {
    let Some(b) = Browser::start().await else {
        return;
    };
    let s = Server::start(adapters_diesel::testing::TestDatabase::sqlite()).await;
    // Served by the service itself: its own origin needs no CORS.
    let token = key_for(&s, &[], "u1").await;
    let flow = flow_publishing(&s, "Live", config()).await;
    let page = format!(
        "{}/console/sdk-example/#base={}&env={}&user=u1&token={token}",
        s.base, s.base, s.env
    );
    b.c().goto(&page).await.expect("goto");
    b.until("#status", "open").await;
    card_for(&s, &flow, "u1").await;
    headlines_become(&b, json!(["Hi"])).await;
    // The template's submit button, clicked in the page, completes the card.
    b.c()
        .execute(
            "document.querySelector('workbench-feed').shadowRoot \
               .querySelector('.card button.action').click()",
            vec![],
        )
        .await
        .expect("click");
    let mut left = false;
    for _ in 0..50 {
        let feed = call(
            &s,
            "GET",
            &format!("/v1/{}/users/u1/cards", s.env),
            Some(&s.admin_secret),
            None,
        )
        .await;
        left = feed.body["data"].as_array().is_some_and(Vec::is_empty);
        if left {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(left, "the card left the user's feed once submitted");
    // And the SDK's feed takes it away.
    headlines_become(&b, json!([])).await;
    b.end().await;
}

/// In the example page: the SDK's client following `u1`'s stream, its opens and events counted
/// on `window`.
const FOLLOW: &str = "const [base, env, token, done] = arguments; \
    import('./workbench.js').then(({WorkbenchClient}) => { \
      window.opens = 0; window.seen = []; \
      const client = new WorkbenchClient({baseUrl: base, environmentId: env, userId: 'u1', token}); \
      window.live = client.stream({onCard: () => {}, \
        onEvent: (e) => window.seen.push(e.type), onOpen: () => { window.opens += 1; }}); \
      done(true); \
    });";

/// Waits up to 10 s for `script` to answer `want` in the page.
async fn page_says(b: &Browser, script: &str, want: Value) {
    let mut said = Value::Null;
    for _ in 0..100 {
        said = b.c().execute(script, vec![]).await.expect("script");
        if said == want {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("`{script}` says {said}, not {want}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_a_browser_the_sdk_reconnects_and_replays_what_it_missed() {
    let Some(b) = Browser::start().await else {
        return;
    };
    let s = Server::start(adapters_diesel::testing::TestDatabase::sqlite()).await;
    let token = key_for(&s, &[], "u1").await;
    let flow = flow_publishing(&s, "Live", config()).await;
    // The example page is only the place the SDK is served from; its own feed waits for a hash.
    b.c()
        .goto(&format!("{}/console/sdk-example/", s.base))
        .await
        .expect("goto");
    let args = vec![json!(s.base), json!(s.env), json!(token)];
    b.c().execute_async(FOLLOW, args).await.expect("the SDK");
    page_says(&b, "return window.opens", json!(1)).await;
    card_for(&s, &flow, "u1").await;
    page_says(&b, "return window.seen", json!(["card-published"])).await;
    // A change of its SDK key ends the stream at its next change (its token is checked again
    // before anything is sent), so the card below is published while the SDK is away.
    let path = format!("/v1/{}/sdk-keys", s.env);
    let keys = call(&s, "GET", &path, Some(&s.admin_secret), None).await;
    let id = keys.body["data"][0]["id"].as_str().expect("key").to_owned();
    let changed = call(
        &s,
        "PATCH",
        &format!("/v1/{}/sdk-keys/{id}", s.env),
        Some(&s.admin_secret),
        Some(json!({"maxTokenExpiryDays": 7})),
    )
    .await;
    assert_eq!(changed.status, 200, "{}", changed.text);
    tokio::time::sleep(Duration::from_millis(1_200)).await;
    card_for(&s, &flow, "u1").await;
    // It reconnects with a new ticket and the last event it saw, and the missed card arrives.
    page_says(&b, "return window.opens", json!(2)).await;
    let both = json!(["card-published", "card-published"]);
    page_says(&b, "return window.seen", both).await;
    b.c()
        .execute("window.live.close()", vec![])
        .await
        .expect("close");
    b.end().await;
}
