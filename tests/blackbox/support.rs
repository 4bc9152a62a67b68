//! Starts the real `workbench` binary on a free port against a fresh database, and talks to
//! it over HTTP. Every test gets its own process and database.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{mpsc, Arc, Mutex};
use std::time::Duration;

use adapters_diesel::testing::TestDatabase;
use serde_json::Value;

pub const BIN: &str = env!("CARGO_BIN_EXE_workbench");

/// One running server.
pub struct Server {
    child: Child,
    pub base: String,
    pub client: reqwest::Client,
    /// What the bootstrap wrote: the first environment and a key with every scope.
    pub env: String,
    pub org: String,
    pub admin_secret: String,
    pub admin_client_id: String,
    pub dir: tempfile::TempDir,
    logs: Arc<Mutex<Vec<String>>>,
    extra: ExtraEnv,
    // Dropped last: the server must be gone before its database is.
    db: Database,
}

/// The database a server runs on: a test database (removed when dropped), or a database it
/// does not own: a SQLite file in the server's own data folder (removed with it), or another
/// server's (a replica's).
enum Database {
    Test(TestDatabase),
    File(String),
}

impl Database {
    fn url(&self) -> &str {
        match self {
            Database::Test(db) => db.url(),
            Database::File(url) => url,
        }
    }
}

impl Server {
    pub async fn start(db: TestDatabase) -> Server {
        Server::start_with(db, &[]).await
    }

    /// Starts with extra settings (a `None` value removes one of the test defaults).
    pub async fn start_with(db: TestDatabase, extra: &[(&str, Option<&str>)]) -> Server {
        let dir = tempfile::tempdir().expect("temp dir");
        Server::start_on(Database::Test(db), dir, extra)
    }

    /// Starts with the SQLite database `workbench.db` in `dir`, which is also the data folder
    /// (the database, its key file and the bootstrap file all live there; `dir` is removed
    /// when the server is dropped).
    pub async fn start_in(dir: tempfile::TempDir, extra: &[(&str, Option<&str>)]) -> Server {
        let url = sqlite_url_in(dir.path());
        Server::start_on(Database::File(url), dir, extra)
    }

    /// Starts on a database the test keeps (a PostgreSQL server of its own): it is not
    /// removed with the server.
    pub async fn start_at(url: &str, extra: &[(&str, Option<&str>)]) -> Server {
        let dir = tempfile::tempdir().expect("temp dir");
        Server::start_on(Database::File(url.to_owned()), dir, extra)
    }

    fn start_on(db: Database, dir: tempfile::TempDir, extra: &[(&str, Option<&str>)]) -> Server {
        let extra = extra_env(extra);
        let (child, logs, address) = launch(db.url(), dir.path(), &extra);
        let boot: Value = serde_json::from_str(
            &std::fs::read_to_string(dir.path().join("bootstrap-credentials.json"))
                .expect("bootstrap file"),
        )
        .expect("bootstrap json");
        let text = |k: &str| boot[k].as_str().expect(k).to_owned();
        Server {
            child,
            base: format!("http://{address}"),
            client: reqwest::Client::new(),
            env: text("environmentId"),
            org: text("organisationId"),
            admin_secret: text("clientSecret"),
            admin_client_id: text("clientId"),
            dir,
            logs,
            extra,
            db,
        }
    }

    /// Another process serving this server's database (a replica sharing PostgreSQL), with
    /// this server's settings and `extra`, and a data folder of its own. Its environment and
    /// keys are this server's. It is stopped when dropped; the database stays this server's.
    pub fn replica(&self, extra: &[(&str, Option<&str>)]) -> Server {
        let dir = tempfile::tempdir().expect("temp dir");
        let mut all = self.extra.clone();
        all.retain(|(k, _)| !extra.iter().any(|(e, _)| e == k));
        all.extend(extra_env(extra));
        let url = self.db.url().to_owned();
        let (child, logs, address) = launch(&url, dir.path(), &all);
        Server {
            child,
            base: format!("http://{address}"),
            client: reqwest::Client::new(),
            env: self.env.clone(),
            org: self.org.clone(),
            admin_secret: self.admin_secret.clone(),
            admin_client_id: self.admin_client_id.clone(),
            dir,
            logs,
            extra: all,
            db: Database::File(url),
        }
    }

    /// Kills the process with SIGKILL (no shutdown of any kind) and starts a new one on the
    /// same database and data folder.
    pub fn kill_and_restart(&mut self) {
        self.child.kill().expect("SIGKILL");
        self.child.wait().expect("reaped");
        let (child, logs, address) = launch(self.db.url(), self.dir.path(), &self.extra);
        self.child = child;
        self.logs = logs;
        self.base = format!("http://{address}");
    }

    /// Adds settings (a `None` value removes one) and restarts on the same database and data
    /// folder: the environment and keys stay.
    pub fn restart_with(&mut self, extra: &[(&str, Option<&str>)]) {
        self.extra
            .retain(|(k, _)| !extra.iter().any(|(e, _)| e == k));
        self.extra.extend(
            extra
                .iter()
                .map(|(k, v)| ((*k).to_owned(), v.map(str::to_owned))),
        );
        self.kill_and_restart();
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    /// Runs an admin subcommand against this server's database; its stdout as JSON.
    pub fn admin(&self, args: &[&str]) -> Result<Value, String> {
        let out = command(self.db.url(), self.dir.path(), &self.extra)
            .args(args)
            .output()
            .expect("run workbench");
        if out.status.success() {
            Ok(serde_json::from_slice(&out.stdout).expect("admin output is JSON"))
        } else {
            Err(String::from_utf8_lossy(&out.stderr).into_owned())
        }
    }

    /// A new key: `--env` is this server's environment unless `args` says otherwise.
    pub fn key(&self, args: &[&str]) -> String {
        let mut all = vec!["key", "create"];
        if !args.iter().any(|a| *a == "--env" || *a == "--all-envs") {
            all.extend(["--env", self.env.as_str()]);
        }
        all.extend(args);
        let key = self
            .admin(&all)
            .unwrap_or_else(|e| panic!("key create {args:?}: {e}"));
        key["clientSecret"].as_str().expect("secret").to_owned()
    }

    /// A second environment in the same organisation.
    pub fn other_env(&self, name: &str) -> String {
        let env = self
            .admin(&["env", "create", "--name", name])
            .expect("env create");
        env["environmentId"].as_str().expect("id").to_owned()
    }

    pub fn logs(&self) -> String {
        self.logs.lock().expect("logs").join("\n")
    }

    /// The process's resident memory, in bytes.
    pub fn rss_bytes(&self) -> u64 {
        std::fs::read_to_string(format!("/proc/{}/status", self.pid()))
            .ok()
            .and_then(|status| {
                let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
                line.split_whitespace().nth(1)?.parse::<u64>().ok()
            })
            .map_or(0, |kib| kib * 1024)
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// CPU time the process has used so far, user and system, in clock ticks
    /// (`/proc/<pid>/stat`; 100 a second on Linux).
    pub fn cpu_ticks(&self) -> u64 {
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", self.pid())).expect("stat");
        // The fields after the command's closing parenthesis: utime and stime are the 12th and
        // 13th of them.
        let after = stat.rsplit_once(')').map(|(_, rest)| rest).expect("fields");
        let fields: Vec<&str> = after.split_whitespace().collect();
        let tick = |i: usize| {
            fields
                .get(i)
                .and_then(|f| f.parse::<u64>().ok())
                .expect("ticks")
        };
        tick(11) + tick(12)
    }

    /// Waits for the process to exit by itself.
    pub fn wait_exit(&mut self, timeout: Duration) -> Option<std::process::ExitStatus> {
        let deadline = std::time::Instant::now() + timeout;
        while std::time::Instant::now() < deadline {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Some(status);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        None
    }

    pub fn data_dir(&self) -> &Path {
        self.dir.path()
    }

    pub fn database_url(&self) -> &str {
        self.db.url()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts `workbench serve` and waits for the address it listens on.
fn launch(url: &str, dir: &Path, extra: &ExtraEnv) -> (Child, Arc<Mutex<Vec<String>>>, String) {
    let mut child = command(url, dir, extra)
        .arg("serve")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start workbench");
    let stderr = child.stderr.take().expect("stderr");
    let logs = Arc::new(Mutex::new(Vec::new()));
    let (address_tx, address_rx) = mpsc::channel();
    let sink = logs.clone();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if let Ok(event) = serde_json::from_str::<Value>(&line) {
                if let Some(address) = event.get("address").and_then(Value::as_str) {
                    let _ = address_tx.send(address.to_owned());
                }
            }
            sink.lock().expect("logs").push(line);
        }
    });
    match address_rx.recv_timeout(Duration::from_secs(30)) {
        Ok(address) => (child, logs, address),
        Err(_) => {
            let _ = child.kill();
            let logs = logs.lock().expect("logs").join("\n");
            panic!("workbench did not start:\n{logs}");
        }
    }
}

/// Extra settings of a server (None removes a default).
pub type ExtraEnv = Vec<(String, Option<String>)>;

fn extra_env(extra: &[(&str, Option<&str>)]) -> ExtraEnv {
    extra
        .iter()
        .map(|(k, v)| ((*k).to_owned(), v.map(str::to_owned)))
        .collect()
}

/// The URL of the SQLite database `workbench.db` in `dir`, as [`Server::start_in`] uses it.
pub fn sqlite_url_in(dir: &Path) -> String {
    format!("sqlite://{}", dir.join("workbench.db").display())
}

/// Runs `workbench ARGS` to its end on the database at `url` (with `dir` as the data folder),
/// with the test defaults and `extra`: its exit status, stdout and stderr.
pub fn workbench(
    url: &str,
    dir: &Path,
    args: &[&str],
    extra: &[(&str, Option<&str>)],
) -> std::process::Output {
    command(url, dir, &extra_env(extra))
        .args(args)
        .output()
        .expect("run workbench")
}

/// Starts `workbench serve` on the database at `url` (with `dir` as the data folder), with the
/// test defaults and `extra`, without waiting for anything; its stderr is discarded.
pub fn spawn_serve(url: &str, dir: &Path, extra: &[(&str, Option<&str>)]) -> Child {
    command(url, dir, &extra_env(extra))
        .arg("serve")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start workbench")
}

/// How a `workbench serve` that was expected to stop by itself ended.
pub struct Exited {
    /// `None` when it still ran after the time allowed (it was then killed).
    pub status: Option<std::process::ExitStatus>,
    pub elapsed: Duration,
    pub stderr: String,
}

/// Runs `workbench serve` on the SQLite database `workbench.db` in `dir` (also the data folder),
/// with the test defaults and `extra`, and waits up to `limit` for it to exit by itself.
pub fn serve_until_exit(dir: &Path, extra: &[(&str, Option<&str>)], limit: Duration) -> Exited {
    run_until_exit(&sqlite_url_in(dir), dir, &["serve"], extra, limit)
}

/// Runs `workbench ARGS` on the database at `url` (with `dir` as the data folder) and waits up
/// to `limit` for it to exit by itself.
pub fn run_until_exit(
    url: &str,
    dir: &Path,
    args: &[&str],
    extra: &[(&str, Option<&str>)],
    limit: Duration,
) -> Exited {
    let started = std::time::Instant::now();
    let mut child = command(url, dir, &extra_env(extra))
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start workbench");
    let mut stderr = child.stderr.take().expect("stderr");
    let reader = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = std::io::Read::read_to_string(&mut stderr, &mut text);
        text
    });
    let status = loop {
        if let Ok(Some(status)) = child.try_wait() {
            break Some(status);
        }
        if started.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let elapsed = started.elapsed();
    Exited {
        status,
        elapsed,
        stderr: reader.join().expect("stderr reader"),
    }
}

fn command(url: &str, dir: &Path, extra: &ExtraEnv) -> Command {
    let mut cmd = Command::new(BIN);
    cmd.current_dir(dir)
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("WORKBENCH_DATABASE_URL", url)
        .env("WORKBENCH_LISTEN", "127.0.0.1:0")
        .env("WORKBENCH_LOG_FORMAT", "json")
        .env("WORKBENCH_LOG", "info")
        .env("WORKBENCH_DATA_DIR", dir)
        .env("WORKBENCH_WORKERS", "2")
        .env("WORKBENCH_DATABASE_POOL_SIZE", "4")
        // A worker that dies mid-invocation is taken over after two seconds.
        .env("WORKBENCH_ENGINE_LEASE_SECONDS", "2")
        // Webhooks go to receivers on loopback, retried quickly.
        .env("WORKBENCH_WEBHOOK_ALLOW_CIDRS", "127.0.0.0/8")
        .env("WORKBENCH_WEBHOOK_RETRY_SCHEDULE", "1s,1s,1s")
        .env("WORKBENCH_WEBHOOK_LEASE_SECONDS", "5")
        // Many test servers share two cores and one PostgreSQL: a 10,000-user batch may take
        // longer than the 5 s default there. The tests of a hung database set their own.
        .env("WORKBENCH_DATABASE_REQUEST_TIMEOUT", "30s")
        // One key drives each test, faster than a key's default limit allows; the tests of
        // the limits set their own (tests/blackbox/limits.rs).
        .env("WORKBENCH_RATE_LIMIT_KEY", "off")
        .env("WORKBENCH_RATE_LIMIT_TOKEN", "off")
        // Stopped at once by SIGTERM; the tests of the drain set their own.
        .env("WORKBENCH_SHUTDOWN_DRAIN_SECONDS", "0");
    if url.starts_with("postgres") {
        // PostgreSQL needs an explicit key; SQLite runs generate a key file beside the database.
        cmd.env(
            "WORKBENCH_SECRET_KEY",
            "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=",
        );
    }
    for (k, v) in extra {
        match v {
            Some(v) => cmd.env(k, v),
            None => cmd.env_remove(k),
        };
    }
    cmd
}

/// A response read whole: status, headers and JSON body (Null when empty or not JSON).
pub struct Reply {
    pub status: u16,
    pub headers: reqwest::header::HeaderMap,
    pub body: Value,
    pub text: String,
}

impl Reply {
    pub async fn from(response: reqwest::Response) -> Reply {
        let status = response.status().as_u16();
        let headers = response.headers().clone();
        let text = response.text().await.expect("body");
        let body = serde_json::from_str(&text).unwrap_or(Value::Null);
        Reply {
            status,
            headers,
            body,
            text,
        }
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    /// Asserts a problem document with this status and code; returns the field paths.
    #[track_caller]
    pub fn problem(&self, status: u16, code: &str) -> Vec<String> {
        assert_eq!(self.status, status, "status; body: {}", self.text);
        assert_eq!(
            self.header("content-type"),
            Some("application/problem+json"),
            "{}",
            self.text
        );
        assert_eq!(self.body["code"], code, "{}", self.text);
        assert_eq!(self.body["status"], status);
        assert_eq!(self.body["type"], format!("urn:workbench:error:{code}"));
        assert!(self.body["title"].is_string() && self.body["detail"].is_string());
        assert!(self.header("x-request-id").is_some());
        self.body["errors"]
            .as_array()
            .expect("errors array")
            .iter()
            .map(|e| e["field"].as_str().expect("field").to_owned())
            .collect()
    }
}

/// Shorthand for requests with a bearer and an optional JSON body.
pub async fn call(
    server: &Server,
    method: &str,
    path: &str,
    bearer: Option<&str>,
    body: Option<Value>,
) -> Reply {
    let method = reqwest::Method::from_bytes(method.as_bytes()).expect("method");
    let mut request = server.client.request(method, server.url(path));
    if let Some(bearer) = bearer {
        request = request.bearer_auth(bearer);
    }
    if let Some(body) = body {
        request = request.json(&body);
    }
    Reply::from(request.send().await.expect("request sent")).await
}

/// Writes each black-box test once and runs it on both backends.
macro_rules! blackbox {
    ($($test:ident),* $(,)?) => {
        mod sqlite {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $test() {
                    let server = $crate::support::Server::start(adapters_diesel::testing::TestDatabase::sqlite()).await;
                    super::$test(server).await;
                }
            )*
        }
        mod postgres {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $test() {
                    let Some(db) = adapters_diesel::testing::TestDatabase::postgres() else { return };
                    let server = $crate::support::Server::start(db).await;
                    super::$test(server).await;
                }
            )*
        }
    };
}
pub(crate) use blackbox;
