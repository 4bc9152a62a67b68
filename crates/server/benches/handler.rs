//! `POST /start` on SQLite beside a bare actix-web POST handler, both loaded by `wrk -t2 -c64
//! -d10s` (Debian's `wrk`) in the same run. `cargo bench -p server --bench handler`.
//!
//! 1. The bare handler: an actix-web server in this process, 2 workers like the service,
//!    whose one route reads the body and answers a small JSON document. What the HTTP stack
//!    and the client cost, with no work behind them.
//! 2. The service (release binary, SQLite): `GET /healthz`, then `POST /start` with one new
//!    user per request, the same body shape as the bare handler receives. Its
//!    `WORKBENCH_SQLITE_SYNCHRONOUS` is the bench's (FULL, the default, unless set).
//!
//! Goal (issue 23): `/start` ≥ 25% of the bare handler's requests per second. The ledger: no
//! answer but 200 from either, and after the engine's drain the service holds one invocation
//! and one card per `/start` wrk counted (plus at most one per connection, for the requests
//! wrk cut off when its time ran out).

mod common;
#[allow(dead_code, unused_macros, unused_imports)]
#[path = "../../../tests/blackbox/support.rs"]
mod support;

use std::process::Command;

use actix_web::{web, App, HttpResponse, HttpServer};
use adapters_diesel::testing::{raw_texts, TestDatabase};

const CONNECTIONS: u64 = 64;

/// What a wrk run reported.
struct Wrk {
    requests: u64,
    per_second: f64,
    /// Answers other than 2xx or 3xx, and socket errors.
    failed: u64,
    p99_ms: f64,
}

/// A wrk script: POST with `authorization`, one new user per request (threads numbered in
/// `setup`, requests within a thread), JSON bodies alike for both servers.
fn script(dir: &std::path::Path, authorization: &str) -> std::path::PathBuf {
    let path = dir.join("start.lua");
    let text = format!(
        r#"wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
{auth}
local threads = 0
function setup(thread)
  threads = threads + 1
  thread:set("tid", threads)
end
function init(args)
  n = 0
end
function request()
  n = n + 1
  local body = '{{"flows":[{{"target":{{"type":"user","targetUserIds":["w'
    .. tid .. '-' .. n .. '"]}}}}]}}'
  return wrk.format(nil, nil, nil, body)
end
"#,
        auth = if authorization.is_empty() {
            String::new()
        } else {
            format!("wrk.headers[\"Authorization\"] = \"{authorization}\"")
        }
    );
    std::fs::write(&path, text).expect("write the wrk script");
    path
}

fn wrk(url: &str, script: Option<&std::path::Path>) -> Wrk {
    let mut command = Command::new("wrk");
    command.args(["-t2", &format!("-c{CONNECTIONS}"), "-d10s", "--latency"]);
    if let Some(script) = script {
        command.arg("-s").arg(script);
    }
    let output = command
        .arg(url)
        .output()
        .expect("wrk (Debian's package `wrk`: apt-get install wrk)");
    let text = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(output.status.success(), "wrk failed: {text}");
    let after = |label: &str| -> Option<&str> {
        text.lines()
            .find_map(|l| l.trim_start().strip_prefix(label))
            .map(str::trim)
    };
    let requests = text
        .lines()
        .find_map(|l| l.trim().split_once(" requests in "))
        .and_then(|(n, _)| n.trim().parse().ok())
        .expect("wrk's count of requests");
    let per_second = after("Requests/sec:")
        .and_then(|v| v.parse().ok())
        .expect("wrk's requests per second");
    let non_2xx: u64 = after("Non-2xx or 3xx responses:")
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    // "Socket errors: connect 0, read 0, write 0, timeout 0"
    let socket_errors: u64 = after("Socket errors:").map_or(0, |v| {
        v.split(',')
            .filter_map(|part| part.split_whitespace().last()?.parse::<u64>().ok())
            .sum()
    });
    let p99_ms = after("99%")
        .map(|v| {
            let (number, unit) = v.split_at(v.find(|c: char| c.is_alphabetic()).unwrap_or(v.len()));
            let n: f64 = number.parse().unwrap_or(f64::NAN);
            match unit {
                "us" => n / 1000.0,
                "s" => n * 1000.0,
                _ => n,
            }
        })
        .unwrap_or(f64::NAN);
    Wrk {
        requests,
        per_second,
        failed: non_2xx + socket_errors,
        p99_ms,
    }
}

fn show(what: &str, run: &Wrk) {
    println!(
        "  {what:<34} {:>8.0} req/s  p99 {:.2} ms  ({} requests, {} failed)",
        run.per_second, run.p99_ms, run.requests, run.failed
    );
}

async fn bare(body: web::Bytes) -> HttpResponse {
    HttpResponse::Ok()
        .content_type("application/json")
        .body(format!("{{\"received\":{}}}", body.len()))
}

/// The bare handler's server on a free port, on a thread of its own: its address and a handle
/// to stop it.
fn bare_server() -> (std::net::SocketAddr, actix_web::dev::ServerHandle) {
    let (sender, receiver) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        actix_web::rt::System::new().block_on(async move {
            let server = HttpServer::new(|| App::new().route("/start", web::post().to(bare)))
                .workers(2)
                .bind("127.0.0.1:0")
                .expect("bind");
            let address = server.addrs()[0];
            let server = server.run();
            sender.send((address, server.handle())).expect("hand over");
            server.await.expect("bare server");
        });
    });
    receiver.recv().expect("the bare server started")
}

/// The invocations and the cards, read in one statement: one snapshot of the database. (Read
/// one after the other, a request wrk cut off that the service recorded between the two reads
/// counted as a card without its invocation.)
fn counts(url: &str) -> (u64, u64) {
    let both = &raw_texts(
        url,
        "SELECT CAST((SELECT count(*) FROM invocations) AS TEXT) || ',' \
         || CAST((SELECT count(*) FROM card_instances) AS TEXT) AS v",
    )[0];
    let (invocations, cards) = both.split_once(',').expect("two counts");
    let number = |text: &str| text.parse().expect("a count");
    (number(invocations), number(cards))
}

#[tokio::main]
async fn main() {
    let dir = tempfile::tempdir().expect("temp dir");
    println!("handler benchmark: wrk -t2 -c{CONNECTIONS} -d10s, one new user per POST");

    let (address, handle) = bare_server();
    let plain = script(dir.path(), "");
    let bare_run = wrk(&format!("http://{address}/start"), Some(&plain));
    handle.stop(true).await;
    assert_eq!(bare_run.failed, 0, "the bare handler failed requests");
    show("bare actix-web POST handler:", &bare_run);

    // WORKBENCH_SQLITE_SYNCHRONOUS reaches the server as the bench was given it (FULL unless
    // set).
    let synchronous = std::env::var("WORKBENCH_SQLITE_SYNCHRONOUS").ok();
    let server = support::Server::start_with(
        TestDatabase::sqlite(),
        &[
            ("WORKBENCH_RATE_LIMIT_KEY", Some("off")),
            ("WORKBENCH_SQLITE_SYNCHRONOUS", synchronous.as_deref()),
        ],
    )
    .await;
    let health = wrk(&server.url("/healthz"), None);
    show("service GET /healthz:", &health);
    let flow = common::published_flow(&server).await;
    let authorized = script(dir.path(), &format!("Bearer {}", server.admin_secret));
    let start = wrk(
        &server.url(&format!("/v1/{}/action-flow/{flow}/start", server.env)),
        Some(&authorized),
    );
    show("service POST /start (SQLite):", &start);
    println!(
        "  /start is {:.1}% of the bare handler (goal ≥ 25%)",
        100.0 * start.per_second / bare_run.per_second
    );

    // The ledger.
    assert_eq!(start.failed, 0, "/start failed requests");
    common::drained(&server).await;
    let url = server.database_url();
    let (invocations, cards) = counts(url);
    println!(
        "  ledger: {} answered by wrk, {invocations} invocations, {cards} cards",
        start.requests
    );
    assert!(
        (start.requests..=start.requests + CONNECTIONS).contains(&invocations),
        "invocations do not match the requests answered"
    );
    assert_eq!(cards, invocations, "not one card per invocation");
}
