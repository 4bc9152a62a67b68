//! Storage faults on SQLite (contract §18): the data folder on a small tmpfs of its own, filled
//! with a file until the low-disk guard trips or writes really fail for lack of space.
//!
//! Mounting needs root (as in CI). Without it these tests say why and skip, unless `CI` is set:
//! then they fail, so CI can never pass by skipping.

use std::collections::{HashMap, HashSet};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use adapters_diesel::testing::raw_texts;
use serde_json::{json, Value};

use crate::receiver::Receiver;
use crate::support::{call, serve_until_exit, Reply, Server};
use crate::trigger::{feed, finished, fire, invocation_id, published_flow};

const MIB: u64 = 1 << 20;

/// A tmpfs mounted on a fresh temporary folder, unmounted (lazily) when dropped.
struct Tmpfs {
    // Removed after the unmount, once the mount point is an empty folder again.
    point: tempfile::TempDir,
}

impl Tmpfs {
    /// A tmpfs of `mib` MiB, or `None` (after saying why) when it cannot be mounted outside CI.
    fn mount(mib: u64) -> Option<Tmpfs> {
        let point = tempfile::tempdir().expect("mount point");
        let out = Command::new("mount")
            .args([
                "-t",
                "tmpfs",
                "-o",
                &format!("size={mib}m,mode=0700"),
                "tmpfs",
            ])
            .arg(point.path())
            .output();
        let why = match out {
            Ok(out) if out.status.success() => return Some(Tmpfs { point }),
            Ok(out) => format!(
                "`mount -t tmpfs` failed ({}): {}",
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            ),
            Err(e) => format!("cannot run `mount`: {e}"),
        };
        if std::env::var_os("CI").is_some() {
            panic!("{why}: the storage tests must run in CI (as root)");
        }
        eprintln!("skipping: {why} (the storage tests need root to mount a tmpfs)");
        None
    }

    fn path(&self) -> &Path {
        self.point.path()
    }

    /// A fresh folder on this filesystem, for a server's database and data.
    fn folder(&self) -> tempfile::TempDir {
        tempfile::tempdir_in(self.path()).expect("folder on the tmpfs")
    }

    /// Free bytes for an unprivileged writer, as `statvfs` says (`f_bavail * f_frsize`).
    fn free(&self) -> u64 {
        let out = Command::new("stat")
            .args(["-f", "-c", "%a %S"])
            .arg(self.path())
            .output()
            .expect("stat -f");
        let text = String::from_utf8_lossy(&out.stdout);
        let mut parts = text.split_whitespace().map(|p| p.parse::<u64>().expect(p));
        parts.next().expect("blocks") * parts.next().expect("block size")
    }

    /// Writes a file of zeros until at most `leave` bytes are free; with `leave` 0, until the
    /// filesystem refuses another byte.
    fn fill_leaving(&self, leave: u64) -> Filler {
        let path = self.path().join("filler");
        let mut file = std::fs::File::create(&path).expect("filler");
        let chunk = vec![0u8; MIB as usize];
        let mut left = self.free().saturating_sub(leave);
        while left > 0 {
            let n = left.min(MIB) as usize;
            match file.write_all(&chunk[..n]) {
                Ok(()) => left -= n as u64,
                Err(e) if e.raw_os_error() == Some(28) => break, // ENOSPC
                Err(e) => panic!("filling: {e}"),
            }
        }
        if leave == 0 {
            // Whatever the server took or gave back meanwhile: write until ENOSPC.
            loop {
                match file.write(&chunk[..4096]) {
                    Ok(0) => break,
                    Ok(_) => {}
                    Err(e) if e.raw_os_error() == Some(28) => break,
                    Err(e) => panic!("filling: {e}"),
                }
            }
        }
        let _ = file.sync_all();
        Filler { path }
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount")
            .arg("-l")
            .arg(self.point.path())
            .status();
    }
}

/// The file that fills a tmpfs.
struct Filler {
    path: PathBuf,
}

impl Filler {
    /// Deletes it: the space is free again at once (tmpfs).
    fn remove(self) -> Instant {
        std::fs::remove_file(&self.path).expect("remove the filler");
        Instant::now()
    }
}

/// A server on the tmpfs `fs`, with its database, key file and bootstrap file there.
async fn server_on(fs: &Tmpfs, min_free: &str) -> Server {
    Server::start_in(fs.folder(), &[("WORKBENCH_MIN_FREE_DISK", Some(min_free))]).await
}

/// Asserts a 503 `storage_full` problem with a `Retry-After` of whole seconds.
#[track_caller]
fn assert_storage_full(reply: &Reply, what: &str) {
    assert_eq!(
        reply.status, 503,
        "{what}: expected 503 storage_full, got {}: {}",
        reply.status, reply.text
    );
    reply.problem(503, "storage_full");
    let retry = reply
        .header("retry-after")
        .unwrap_or_else(|| panic!("{what}: no Retry-After on {}", reply.text));
    assert!(
        retry.parse::<u64>().is_ok(),
        "{what}: Retry-After `{retry}` is not whole seconds"
    );
}

/// Asserts `/readyz` answers 503 `storage_full` with `"reason": "storage_full"`.
#[track_caller]
fn assert_not_ready_for_storage(ready: &Reply) {
    assert_eq!(ready.status, 503, "/readyz: {}", ready.text);
    assert_eq!(
        ready.body["code"], "storage_full",
        "/readyz: {}",
        ready.text
    );
    assert_eq!(
        ready.body["reason"], "storage_full",
        "/readyz: {}",
        ready.text
    );
}

/// The value of the sample `series` (a metric name with its labels, if any) in `/metrics`.
async fn metric(s: &Server, series: &str) -> Option<f64> {
    let metrics = call(s, "GET", "/metrics", None, None).await;
    assert_eq!(metrics.status, 200, "{}", metrics.text);
    metrics.text.lines().find_map(|line| {
        let value = line.strip_prefix(series)?.strip_prefix(' ')?;
        value.trim().parse().ok()
    })
}

/// Asserts the three storage series of `/metrics`: full or not, and free bytes present.
async fn assert_storage_metrics(s: &Server, full: bool) {
    let text = call(s, "GET", "/metrics", None, None).await.text;
    let gauge = metric(s, "workbench_storage_full").await;
    assert_eq!(
        gauge,
        Some(if full { 1.0 } else { 0.0 }),
        "workbench_storage_full:\n{text}"
    );
    assert!(
        metric(s, "workbench_storage_free_bytes").await.is_some(),
        "workbench_storage_free_bytes:\n{text}"
    );
}

/// A log line that is not about one request (request lines, and lines logged within a
/// request's span, carry its `request_id`).
fn background(line: &str) -> bool {
    !line.contains("\"request_id\"")
}

/// Lines other than request lines that the server logs in `window`, without traffic.
async fn background_lines_over(s: &Server, window: Duration) -> Vec<String> {
    let before = s.logs().lines().count();
    tokio::time::sleep(window).await;
    s.logs()
        .lines()
        .skip(before)
        .filter(|l| background(l))
        .map(str::to_owned)
        .collect()
}

/// Asserts at most about 2 background log lines a second over `window`.
async fn assert_quiet_log(s: &Server, window: Duration) {
    let lines = background_lines_over(s, window).await;
    let allowed = 2 * window.as_secs() as usize + 2;
    eprintln!(
        "{} background log lines in {window:?}, the disk full:\n{}",
        lines.len(),
        lines.join("\n")
    );
    assert!(
        lines.len() <= allowed,
        "{} background log lines in {window:?} (at most {allowed}):\n{}",
        lines.len(),
        lines.join("\n")
    );
}

/// Asserts the server process is the one that started: it was never restarted.
fn assert_same_process(s: &mut Server, pid: u32) {
    assert_eq!(s.pid(), pid);
    assert!(
        s.wait_exit(Duration::from_millis(50)).is_none(),
        "the server exited:\n{}",
        s.logs()
    );
}

/// Polls `attempt` every 50 ms until it holds; panics after `limit` from `since`.
async fn within<F, Fut>(since: Instant, limit: Duration, what: &str, mut attempt: F) -> Duration
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<(), String>>,
{
    loop {
        match attempt().await {
            Ok(()) => return since.elapsed(),
            Err(last) if since.elapsed() > limit => {
                panic!(
                    "{what} not within {limit:?} (after {:?}): {last}",
                    since.elapsed()
                )
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
        }
    }
}

/// A `/start` of `flow` for two users of its own, with a payload large enough that a few
/// hundred of them fill the last free space.
fn start_body(id: &str) -> Value {
    json!({"flows": [{
        "flowInvocationId": id,
        "target": {"type": "user", "targetUserIds": [format!("{id}-a"), format!("{id}-b")]},
        "payload": {"variables": {"firstName": "x".repeat(1_000)},
                    "metadata": {"padding": "y".repeat(1_000)}}
    }]})
}

fn users_of(id: &str) -> [String; 2] {
    [format!("{id}-a"), format!("{id}-b")]
}

/// One `/start` of the load: its id and what came back (`None`: no answer).
struct Attempt {
    id: String,
    reply: Option<Reply>,
}

/// `/start` calls from several clients at once, each with a new invocation id, until stopped.
struct Load {
    refused: Arc<AtomicUsize>,
    stop: Arc<std::sync::atomic::AtomicBool>,
    attempts: Arc<Mutex<Vec<Attempt>>>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Load {
    fn start(s: &Server, flow: &str, workers: usize) -> Load {
        let url = s.url(&format!("/v1/{}/action-flow/{flow}/start", s.env));
        let load = Load {
            refused: Arc::default(),
            stop: Arc::default(),
            attempts: Arc::default(),
            tasks: Vec::new(),
        };
        let tasks = (0..workers)
            .map(|worker| {
                let (client, url, secret) = (s.client.clone(), url.clone(), s.admin_secret.clone());
                let (refused, stop) = (load.refused.clone(), load.stop.clone());
                let attempts = load.attempts.clone();
                tokio::spawn(async move {
                    for n in 0.. {
                        if stop.load(Ordering::SeqCst) {
                            break;
                        }
                        let id = format!("inv-{worker}-{n}");
                        let sent = client
                            .post(&url)
                            .bearer_auth(&secret)
                            .json(&start_body(&id))
                            .timeout(Duration::from_secs(15))
                            .send()
                            .await;
                        let reply = match sent {
                            Ok(sent) => Some(Reply::from(sent).await),
                            Err(_) => None,
                        };
                        if reply.as_ref().is_some_and(|r| r.status == 503) {
                            refused.fetch_add(1, Ordering::SeqCst);
                        }
                        let gone = reply.is_none();
                        attempts
                            .lock()
                            .expect("attempts")
                            .push(Attempt { id, reply });
                        if gone {
                            break;
                        }
                    }
                })
            })
            .collect();
        Load { tasks, ..load }
    }

    /// Waits until `refusals` calls were answered 503, or `limit` passed.
    async fn until_refused(&self, refusals: usize, limit: Duration) {
        let started = Instant::now();
        while self.refused.load(Ordering::SeqCst) < refusals && started.elapsed() < limit {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// Stops the clients; every call made and what came back.
    async fn finish(self) -> Vec<Attempt> {
        self.stop.store(true, Ordering::SeqCst);
        for task in self.tasks {
            task.await.expect("load client");
        }
        let attempts = std::mem::take(&mut *self.attempts.lock().expect("attempts"));
        attempts
    }
}

async fn subscribe_to_published(s: &Server, receiver: &Receiver) {
    let reply = call(
        s,
        "POST",
        &format!("/v1/{}/webhook", s.env),
        Some(&s.admin_secret),
        Some(json!({"types": ["card-published"], "url": receiver.url})),
    )
    .await;
    assert_eq!(reply.status, 201, "{}", reply.text);
}

/// Sends `signal` to the server and waits for it to exit.
fn stop(s: &mut Server, signal: &str) {
    let status = Command::new("kill")
        .args([signal, &s.pid().to_string()])
        .status()
        .expect("kill");
    assert!(status.success());
    let exit = s.wait_exit(Duration::from_secs(20));
    assert!(exit.is_some(), "did not stop:\n{}", s.logs());
}

/// Checks the (stopped) server's database file with `PRAGMA integrity_check`.
fn assert_intact(s: &Server) {
    let check = raw_texts(
        s.database_url(),
        "SELECT integrity_check AS v FROM pragma_integrity_check()",
    );
    assert_eq!(check, ["ok"], "PRAGMA integrity_check");
}

/// Stops the server with SIGTERM, then checks its database file.
fn stop_and_check_integrity(s: &mut Server) {
    stop(s, "-TERM");
    assert_intact(s);
}

/// Asserts no request was answered 500 (by the server's own count).
async fn assert_no_500(s: &Server) {
    let metrics = call(s, "GET", "/metrics", None, None).await;
    let five_hundreds: Vec<&str> = metrics
        .text
        .lines()
        .filter(|l| l.starts_with("workbench_http_requests_total") && l.contains("status=\"500\""))
        .collect();
    assert!(five_hundreds.is_empty(), "answered 500: {five_hundreds:?}");
}

/// The data folder on a 64 MiB tmpfs, the guard off, the disk filled but for 1 MiB, then
/// `/start` calls from four clients until the last space is gone: writes are refused with 503
/// `storage_full` (never a 500), reads answer, `/readyz` is 503, the background log stays
/// quiet, and within 2 s of space returning, without a restart, `/start` works again. Every
/// acknowledged `/start` was stored and its events delivered; the refused ones, retried, run
/// once; the database is intact.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_disk_refuses_writes_with_503_loses_nothing_acknowledged_and_recovers() {
    let Some(fs) = Tmpfs::mount(64) else { return };
    let mut s = server_on(&fs, "0").await;
    let pid = s.pid();
    let receiver = Receiver::start().await;
    subscribe_to_published(&s, &receiver).await;
    let flow = published_flow(&s, false).await;
    let first = fire(&s, &flow, "start", start_body("inv-first")).await;
    assert_eq!(invocation_id(&first), "inv-first");
    let card = feed(&s, "inv-first-a").await.remove(0);

    let filler = fs.fill_leaving(MIB);
    let load = Load::start(&s, &flow, 4);
    load.until_refused(12, Duration::from_secs(20)).await;
    let mut acknowledged = vec!["inv-first".to_owned()];
    let mut refused = Vec::new();
    let mut others = Vec::new();
    for Attempt { id, reply } in load.finish().await {
        match reply {
            Some(reply) if reply.status == 200 => {
                assert_eq!(invocation_id(&reply), id);
                acknowledged.push(id);
            }
            Some(reply) if reply.status == 503 => {
                assert_storage_full(&reply, &format!("/start {id}"));
                refused.push(id);
            }
            Some(reply) => others.push(format!("/start {id}: {} {}", reply.status, reply.text)),
            None => others.push(format!("/start {id}: no answer")),
        }
    }
    eprintln!(
        "{} /start acknowledged, {} refused before the load stopped",
        acknowledged.len(),
        refused.len()
    );
    assert!(
        others.is_empty(),
        "answers other than 200 and 503:\n{}",
        others.join("\n")
    );
    assert!(
        !refused.is_empty(),
        "the disk never filled: {} /start calls all answered 200; {} bytes free",
        acknowledged.len(),
        fs.free()
    );

    // While full: right after a refused write, /readyz and /metrics say so. (Any write that
    // succeeds clears it, as the contract says; on a full disk SQLite may still fit some in its
    // WAL, so it is looked at right after a refusal, a few times.)
    let (mut seen_ready, mut seen_gauge) = (None, None);
    for n in 0..20 {
        let id = format!("inv-full-{n}");
        let reply = fire(&s, &flow, "start", start_body(&id)).await;
        if reply.status == 200 {
            acknowledged.push(id);
            continue;
        }
        assert_storage_full(&reply, &format!("/start {id} on a full disk"));
        refused.push(id);
        let ready = call(&s, "GET", "/readyz", None, None).await;
        let gauge = metric(&s, "workbench_storage_full").await;
        if seen_ready.is_none() || ready.status == 503 {
            seen_ready = Some(ready);
        }
        if seen_gauge != Some(1.0) {
            seen_gauge = gauge;
        }
        if seen_ready.as_ref().is_some_and(|r| r.status == 503) && seen_gauge == Some(1.0) {
            break;
        }
    }
    assert_not_ready_for_storage(&seen_ready.expect("a /start refused on a full disk"));
    assert_eq!(
        seen_gauge,
        Some(1.0),
        "workbench_storage_full right after a refused write"
    );
    let created = call(
        &s,
        "POST",
        &format!("/v1/{}/workbench-folder", s.env),
        Some(&s.admin_secret),
        Some(json!({"name": "On a full disk"})),
    )
    .await;
    assert!(
        matches!(created.status, 201 | 503),
        "a folder on a full disk: {} {}",
        created.status,
        created.text
    );
    if created.status == 503 {
        assert_storage_full(&created, "POST workbench-folder on a full disk");
    }
    assert_eq!(call(&s, "GET", "/healthz", None, None).await.status, 200);
    for path in [
        format!("/v1/{}/users/inv-first-a/cards", s.env),
        format!("/v1/{}/action-flow/{flow}/invocations/inv-first", s.env),
        format!(
            "/v1/{}/action-flow/{flow}/invocations/{}",
            s.env,
            acknowledged.last().expect("one")
        ),
        format!("/v1/{}/action-flow", s.env),
        format!("/v1/{}/workbench-folder", s.env),
        format!(
            "/v1/{}/users/inv-first-a/cards/{}/events",
            s.env,
            card["id"].as_str().expect("card id")
        ),
    ] {
        let read = call(&s, "GET", &path, Some(&s.admin_secret), None).await;
        assert_eq!(read.status, 200, "GET {path} on a full disk: {}", read.text);
    }
    let errors = metric(&s, "workbench_storage_errors_total{kind=\"full\"}").await;
    assert!(
        errors.is_some_and(|e| e >= 1.0),
        "workbench_storage_errors_total{{kind=\"full\"}}: {errors:?}"
    );

    // The background loops (deliveries, checkpoints) fail quietly.
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_quiet_log(&s, Duration::from_secs(5)).await;
    let sampled = metric(&s, "workbench_storage_free_bytes").await;
    let free = fs.free();
    assert!(
        sampled.is_some_and(|f| f <= (free + 256 * 1024) as f64),
        "workbench_storage_free_bytes {sampled:?} with {free} bytes free"
    );
    let still = fire(&s, &flow, "start", start_body("inv-still-full")).await;
    if still.status == 200 {
        acknowledged.push("inv-still-full".into());
    } else {
        assert_storage_full(&still, "/start after the quiet window");
        refused.push("inv-still-full".into());
    }

    // Space returns: writes and /readyz within 2 s, the same process.
    let freed = filler.remove();
    let took = within(
        freed,
        Duration::from_secs(2),
        "/start after space returned",
        || async {
            let reply = fire(&s, &flow, "start", start_body("inv-after")).await;
            match reply.status {
                200 => Ok(()),
                _ => Err(format!("{} {}", reply.status, reply.text)),
            }
        },
    )
    .await;
    acknowledged.push("inv-after".into());
    within(
        freed,
        Duration::from_secs(2),
        "/readyz 200 after space returned",
        || async {
            let ready = call(&s, "GET", "/readyz", None, None).await;
            match ready.status {
                200 => Ok(()),
                _ => Err(format!("{} {}", ready.status, ready.text)),
            }
        },
    )
    .await;
    eprintln!("/start answered 200 {took:?} after space returned");
    assert_same_process(&mut s, pid);
    assert_storage_metrics(&s, false).await;

    // Nothing refused was half-stored: the same /start again runs once.
    for id in &refused {
        let again = fire(&s, &flow, "start", start_body(id)).await;
        assert_eq!(
            again.status, 200,
            "/start {id} again after recovery: {}",
            again.text
        );
        assert_eq!(invocation_id(&again), *id);
    }
    // Every acknowledged /start was stored, ran once, and its events were delivered.
    let all: Vec<String> = acknowledged.iter().chain(&refused).cloned().collect();
    for id in &all {
        let done = finished(&s, &flow, id).await;
        assert_eq!(
            (done["status"].clone(), done["cardsCreated"].clone()),
            (json!("completed"), json!(2)),
            "invocation {id}: {done}"
        );
        for user in users_of(id) {
            let cards = feed(&s, &user).await;
            assert_eq!(cards.len(), 1, "{user}'s feed: {cards:?}");
        }
    }
    let expected: HashMap<String, HashSet<String>> = all
        .iter()
        .map(|id| (id.clone(), users_of(id).into_iter().collect()))
        .collect();
    let published = |got: &[crate::receiver::Received]| {
        let mut seen: HashMap<String, HashSet<String>> = HashMap::new();
        for r in got {
            let data = &r.json()["data"];
            if let (Some(id), Some(user)) = (
                data["platformContext"]["flowInvocationId"].as_str(),
                data["endUserId"].as_str(),
            ) {
                seen.entry(id.to_owned())
                    .or_default()
                    .insert(user.to_owned());
            }
        }
        seen
    };
    let delivered = receiver
        .wait_for(
            Duration::from_secs(25),
            "card-published of every /start",
            |got| {
                let seen = published(got);
                expected
                    .iter()
                    .all(|(id, users)| seen.get(id) == Some(users))
            },
        )
        .await;
    let seen = published(&delivered);
    assert!(
        seen.keys().all(|id| expected.contains_key(id)),
        "events of invocations never acknowledged: {:?}",
        seen.keys()
            .filter(|id| !expected.contains_key(*id))
            .collect::<Vec<_>>()
    );
    assert_no_500(&s).await;
    stop_and_check_integrity(&mut s);
}

/// Killed (SIGKILL) under load on a full disk: the next start on that disk exits 2; once
/// space is back it starts, and every `/start` it acknowledged is there and has run, and
/// none it refused was stored; the database is intact.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_under_load_on_a_full_disk_loses_nothing_acknowledged() {
    let Some(fs) = Tmpfs::mount(64) else { return };
    let mut s = server_on(&fs, "0").await;
    let flow = published_flow(&s, false).await;
    let filler = fs.fill_leaving(MIB);
    let load = Load::start(&s, &flow, 4);
    load.until_refused(8, Duration::from_secs(20)).await;
    stop(&mut s, "-KILL");
    let (mut acknowledged, mut refused) = (Vec::new(), Vec::new());
    for Attempt { id, reply } in load.finish().await {
        match reply.map(|r| r.status) {
            Some(200) => acknowledged.push(id),
            Some(503) => refused.push(id),
            Some(other) => panic!("/start {id}: {other}"),
            None => {} // cut off by the kill: either way
        }
    }
    assert!(!refused.is_empty(), "the disk never filled");
    eprintln!(
        "killed after {} /start acknowledged and {} refused",
        acknowledged.len(),
        refused.len()
    );

    let exited = serve_until_exit(
        s.data_dir(),
        &[("WORKBENCH_MIN_FREE_DISK", Some("0"))],
        Duration::from_secs(10),
    );
    assert_eq!(
        exited.status.and_then(|e| e.code()),
        Some(2),
        "a start on the full disk after the crash:\n{}",
        exited.stderr
    );

    filler.remove();
    assert_intact(&s);
    s.restart_with(&[]);
    for id in &acknowledged {
        let done = finished(&s, &flow, id).await;
        assert_eq!(
            (done["status"].clone(), done["cardsCreated"].clone()),
            (json!("completed"), json!(2)),
            "acknowledged invocation {id} after the crash: {done}"
        );
    }
    for id in &refused {
        let read = call(
            &s,
            "GET",
            &format!("/v1/{}/action-flow/{flow}/invocations/{id}", s.env),
            Some(&s.admin_secret),
            None,
        )
        .await;
        assert_eq!(
            read.status, 404,
            "refused invocation {id} after the crash: {}",
            read.text
        );
    }
    stop_and_check_integrity(&mut s);
}

/// A 64 MiB tmpfs and a 16 MiB guard; filled to 8 MiB free: a new `/start`, a folder, a user
/// batch are refused with 503 `storage_full`, while a card action, a cancel, a token, a delete
/// and reads go on, and `/readyz` says why. Within 2 s of the filler going, `/start` works.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_low_disk_guard_refuses_new_work_but_card_actions_and_cancels_go_on() {
    let Some(fs) = Tmpfs::mount(64) else { return };
    let mut s = server_on(&fs, "16MiB").await;
    let pid = s.pid();
    let admin = Some(s.admin_secret.as_str());
    let flow = published_flow(&s, false).await;
    let first = fire(&s, &flow, "start", start_body("inv-1")).await;
    finished(&s, &flow, &invocation_id(&first)).await;
    let card = feed(&s, "inv-1-a").await.remove(0);
    let card = card["id"].as_str().expect("card id").to_owned();
    let folder = call(
        &s,
        "POST",
        &format!("/v1/{}/workbench-folder", s.env),
        admin,
        Some(json!({"name": "Doomed"})),
    )
    .await;
    assert_eq!(folder.status, 201, "{}", folder.text);
    let folder = folder.body["data"]["id"].as_str().expect("id").to_owned();
    assert_eq!(call(&s, "GET", "/readyz", None, None).await.status, 200);
    assert_storage_metrics(&s, false).await;

    let filler = fs.fill_leaving(8 * MIB);
    let free = fs.free();
    assert!(free < 16 * MIB, "{free} bytes free");
    tokio::time::sleep(Duration::from_millis(1_500)).await;

    let refused = fire(&s, &flow, "start", start_body("inv-2")).await;
    assert_storage_full(&refused, "a new /start below the guard");
    for (method, path, body) in [
        (
            "POST",
            format!("/v1/{}/workbench-folder", s.env),
            json!({"name": "New"}),
        ),
        (
            "POST",
            format!("/v1/{}/action-flow", s.env),
            json!({"name": "New flow"}),
        ),
        (
            "POST",
            format!("/v1/{}/users:batch", s.env),
            json!({"users": [{"id": "new"}]}),
        ),
        (
            "PUT",
            format!("/v1/{}/users/new", s.env),
            json!({"tags": ["t"]}),
        ),
        (
            "PUT",
            format!("/v1/{}/action-flow/{flow}/config/draft", s.env),
            json!({"type": "card", "initialSteps": [], "steps": {}}),
        ),
    ] {
        let reply = call(&s, method, &path, admin, Some(body)).await;
        assert_storage_full(&reply, &format!("{method} {path} below the guard"));
    }
    // One warning for the condition, not one per refused request (an outside probe saw 171
    // lines a second at 400 requests a second); each request keeps its own line.
    let warnings = s
        .logs()
        .lines()
        .filter(|l| l.contains("new work refused"))
        .count();
    assert_eq!(warnings, 1, "{}", s.logs());
    let action = call(
        &s,
        "POST",
        &format!("/v1/{}/users/inv-1-a/cards/{card}/actions", s.env),
        admin,
        Some(json!({"action": "dismiss"})),
    )
    .await;
    assert_eq!(
        action.status, 200,
        "a card action below the guard: {}",
        action.text
    );
    let cancel = call(
        &s,
        "POST",
        &format!("/v1/{}/action-flow/{flow}/task/cancel", s.env),
        admin,
        Some(json!({"endUserId": "inv-1-b"})),
    )
    .await;
    assert_eq!(
        cancel.status, 202,
        "a cancel below the guard: {}",
        cancel.text
    );
    let task = cancel.body["data"]["taskId"]
        .as_str()
        .expect("taskId")
        .to_owned();
    let token = Reply::from(
        s.client
            .post(s.url("/oauth/token"))
            .basic_auth(&s.admin_client_id, Some(&s.admin_secret))
            .header("content-type", "application/x-www-form-urlencoded")
            .body("grant_type=client_credentials")
            .send()
            .await
            .expect("sent"),
    )
    .await;
    assert_eq!(
        token.status, 200,
        "/oauth/token below the guard: {}",
        token.text
    );
    let deleted = call(
        &s,
        "DELETE",
        &format!("/v1/{}/workbench-folder/{folder}", s.env),
        admin,
        None,
    )
    .await;
    assert!(
        (200..300).contains(&deleted.status),
        "a delete below the guard: {} {}",
        deleted.status,
        deleted.text
    );
    for path in [
        format!("/v1/{}/action-flow/{flow}/invocations/inv-1", s.env),
        format!("/v1/{}/users/inv-1-b/cards", s.env),
        format!("/v1/{}/action-flow", s.env),
    ] {
        let read = call(&s, "GET", &path, admin, None).await;
        assert_eq!(
            read.status, 200,
            "GET {path} below the guard: {}",
            read.text
        );
    }
    assert_not_ready_for_storage(&call(&s, "GET", "/readyz", None, None).await);
    assert_eq!(call(&s, "GET", "/healthz", None, None).await.status, 200);
    assert_storage_metrics(&s, true).await;
    let sampled = metric(&s, "workbench_storage_free_bytes")
        .await
        .expect("free bytes");
    assert!(
        sampled < (16 * MIB) as f64,
        "workbench_storage_free_bytes {sampled} below a 16 MiB guard"
    );
    // The cancel finishes below the guard: it is work already accepted.
    let status_path = format!("/v1/{}/action-flow/{flow}/task/{task}/status", s.env);
    within(
        Instant::now(),
        Duration::from_secs(10),
        "the cancel below the guard",
        || async {
            let status = call(&s, "GET", &status_path, admin, None).await;
            match status.body["status"].as_str() {
                Some("completed") => Ok(()),
                _ => Err(status.text),
            }
        },
    )
    .await;
    assert!(
        feed(&s, "inv-1-b").await.is_empty(),
        "the cancel cancelled its card"
    );
    assert_quiet_log(&s, Duration::from_secs(3)).await;

    let freed = filler.remove();
    let took = within(
        freed,
        Duration::from_secs(2),
        "/start after the guard cleared",
        || async {
            let reply = fire(&s, &flow, "start", start_body("inv-2")).await;
            match reply.status {
                200 => Ok(()),
                _ => Err(format!("{} {}", reply.status, reply.text)),
            }
        },
    )
    .await;
    eprintln!("/start answered 200 {took:?} after the filler went");
    within(
        freed,
        Duration::from_secs(2),
        "/readyz 200 after the guard cleared",
        || async {
            let ready = call(&s, "GET", "/readyz", None, None).await;
            match ready.status {
                200 => Ok(()),
                _ => Err(format!("{} {}", ready.status, ready.text)),
            }
        },
    )
    .await;
    assert_eq!(finished(&s, &flow, "inv-2").await["cardsCreated"], 2);
    assert_same_process(&mut s, pid);
    assert_storage_metrics(&s, false).await;
    assert_no_500(&s).await;
    stop_and_check_integrity(&mut s);
}

/// Whether `message` states `free` bytes: a number with a byte unit (B, bytes, KiB, MiB, GiB,
/// kB, MB, GB) within 64 KiB or 1% of it.
fn states_free_bytes(message: &str, free: u64) -> bool {
    let chars: Vec<char> = message.chars().collect();
    let mut i = 0;
    while i < chars.len() {
        if !chars[i].is_ascii_digit()
            || (i > 0 && (chars[i - 1].is_alphanumeric() || chars[i - 1] == '_'))
        {
            i += 1;
            continue;
        }
        let start = i;
        while i < chars.len()
            && (chars[i].is_ascii_digit() || chars[i] == '.' || chars[i] == ',' || chars[i] == '_')
        {
            i += 1;
        }
        let number: String = chars[start..i]
            .iter()
            .filter(|c| c.is_ascii_digit() || **c == '.')
            .collect();
        let number = number.trim_end_matches('.');
        let mut j = i;
        while j < chars.len() && chars[j] == ' ' {
            j += 1;
        }
        let unit: String = chars[j..]
            .iter()
            .take_while(|c| c.is_ascii_alphabetic())
            .collect();
        let scale = match unit.as_str() {
            "B" | "bytes" | "byte" => 1.0,
            "KiB" => 1024.0,
            "MiB" => MIB as f64,
            "GiB" => (MIB * 1024) as f64,
            "kB" | "KB" => 1e3,
            "MB" => 1e6,
            "GB" => 1e9,
            _ => continue,
        };
        if let Ok(value) = number.parse::<f64>() {
            let stated = value * scale;
            let slack = (64.0 * 1024.0f64).max(free as f64 * 0.01);
            if (stated - free as f64).abs() <= slack {
                return true;
            }
        }
    }
    false
}

#[track_caller]
fn assert_refused_start(exited: &crate::support::Exited, folder: &Path, free: u64) {
    let stderr = &exited.stderr;
    assert_eq!(
        exited.status.and_then(|s| s.code()),
        Some(2),
        "exit status {:?} after {:?}; stderr:\n{stderr}",
        exited.status,
        exited.elapsed
    );
    assert!(
        exited.elapsed < Duration::from_secs(5),
        "exited after {:?}; stderr:\n{stderr}",
        exited.elapsed
    );
    let folder = folder.display().to_string();
    assert!(
        stderr.contains(&folder),
        "the data folder {folder} is not named:\n{stderr}"
    );
    assert!(
        stderr.contains("WORKBENCH_MIN_FREE_DISK"),
        "the setting is not named:\n{stderr}"
    );
    assert!(
        states_free_bytes(stderr, free),
        "its free space ({free} bytes) is not stated:\n{stderr}"
    );
}

/// On a 64 MiB tmpfs the default guard (128 MiB) is not met: `serve` exits 2 at once, naming
/// the folder, its free space and the setting.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_start_below_the_guard_exits_2_naming_the_folder_its_free_space_and_the_setting() {
    let Some(fs) = Tmpfs::mount(64) else { return };
    let folder = fs.folder();
    let exited = serve_until_exit(folder.path(), &[], Duration::from_secs(10));
    assert_refused_start(&exited, folder.path(), fs.free());
}

/// A new data folder on a full disk, the guard off: `serve` exits 2 within 5 s with a message
/// that says why, not a bare "disk I/O error".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_first_start_on_a_full_disk_exits_2() {
    let Some(fs) = Tmpfs::mount(16) else { return };
    let folder = fs.folder();
    let _filler = fs.fill_leaving(0);
    let exited = serve_until_exit(
        folder.path(),
        &[("WORKBENCH_MIN_FREE_DISK", Some("0"))],
        Duration::from_secs(10),
    );
    assert_refused_start(&exited, folder.path(), fs.free());
}

/// A database in use, the server stopped, the disk filled: the next start exits 2 within 5 s,
/// harms nothing, and once space is back the server starts with everything still there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_on_a_full_disk_exits_2_and_harms_nothing() {
    let Some(fs) = Tmpfs::mount(32) else { return };
    let mut s = server_on(&fs, "0").await;
    let created = call(
        &s,
        "POST",
        &format!("/v1/{}/workbench-folder", s.env),
        Some(&s.admin_secret),
        Some(json!({"name": "Kept"})),
    )
    .await;
    assert_eq!(created.status, 201, "{}", created.text);
    stop(&mut s, "-TERM");

    let filler = fs.fill_leaving(0);
    let exited = serve_until_exit(
        s.data_dir(),
        &[("WORKBENCH_MIN_FREE_DISK", Some("0"))],
        Duration::from_secs(10),
    );
    assert_refused_start(&exited, s.data_dir(), fs.free());

    filler.remove();
    s.restart_with(&[]);
    let folders = call(
        &s,
        "GET",
        &format!("/v1/{}/workbench-folder", s.env),
        Some(&s.admin_secret),
        None,
    )
    .await;
    assert_eq!(folders.status, 200, "{}", folders.text);
    assert!(folders.text.contains("Kept"), "{}", folders.text);
    assert_eq!(call(&s, "GET", "/readyz", None, None).await.status, 200);
    stop_and_check_integrity(&mut s);
}
