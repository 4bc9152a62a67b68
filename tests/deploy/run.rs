//! Runs the built binary as an artifact would: its arguments and exactly its `WORKBENCH_*`
//! variables, but on a temporary SQLite file, a free loopback port and a temporary data
//! directory; and reads the settings a process is given with `workbench config check`.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

use crate::artifacts::{Process, Value};

pub const BIN: &str = env!("CARGO_BIN_EXE_workbench");

/// A stand-in secret key for settings a Secret or the operator provides.
const TEST_KEY: &str = "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=";

/// How long a start, a migration or a stop may take here.
const PATIENCE: Duration = Duration::from_secs(60);

/// Fails unless the binary accepts `args` (asked with `--help`, which needs no settings).
pub fn assert_known(process: &Process, args: &[String]) {
    let output = Command::new(BIN)
        .args(args)
        .arg("--help")
        .env_clear()
        .output()
        .expect("run workbench --help");
    assert!(
        output.status.success(),
        "{}: the binary refuses `workbench {}`:\n{}",
        process.origin,
        args.join(" "),
        String::from_utf8_lossy(&output.stderr)
    );
}

/// The process's variables as text: a provided one gets a stand-in.
fn variables(process: &Process) -> Vec<(String, String)> {
    let mut env: Vec<(String, String)> = Vec::new();
    for (name, value) in &process.env {
        let value = match value {
            Value::Literal(text) => text.clone(),
            Value::Provided(from) => match name.as_str() {
                "WORKBENCH_SECRET_KEY" => TEST_KEY.to_owned(),
                "WORKBENCH_DATABASE_URL" => "postgres://workbench@db.invalid/workbench".to_owned(),
                _ => panic!(
                    "{}: {name} is {from}, and this test has no stand-in for it",
                    process.origin
                ),
            },
        };
        env.retain(|(k, _)| k != name);
        env.push((name.clone(), value));
    }
    env
}

/// The settings the process would run with, as `workbench config check` prints them from
/// exactly its variables (defaults filled in); it fails on a value the binary refuses.
pub fn effective(process: &Process) -> serde_json::Value {
    let output = Command::new(BIN)
        .args(["config", "check"])
        .env_clear()
        .envs(variables(process))
        .output()
        .expect("run workbench config check");
    assert!(
        output.status.success(),
        "{}: the binary refuses its settings ({}):\n{}",
        process.origin,
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).unwrap_or_else(|e| {
        panic!(
            "{}: `workbench config check` printed no JSON ({e}): {}",
            process.origin,
            String::from_utf8_lossy(&output.stdout)
        )
    })
}

/// A temporary database and data directory.
pub struct Sandbox {
    pub dir: tempfile::TempDir,
}

impl Sandbox {
    pub fn new() -> Sandbox {
        Sandbox {
            dir: tempfile::tempdir().expect("temp dir"),
        }
    }

    /// The process's variables, the provided ones given stand-ins, then the database, the
    /// address and the data directory replaced by the sandbox's.
    pub fn environment(&self, process: &Process, listen: &str) -> Vec<(String, String)> {
        let mut env = variables(process);
        let dir = self.dir.path();
        let fixed = [
            (
                "WORKBENCH_DATABASE_URL",
                format!("sqlite://{}", dir.join("workbench.db").display()),
            ),
            ("WORKBENCH_LISTEN", listen.to_owned()),
            ("WORKBENCH_DATA_DIR", dir.display().to_string()),
        ];
        for (name, value) in fixed {
            env.retain(|(k, _)| k != name);
            env.push((name.to_owned(), value));
        }
        env
    }

    fn command(&self, process: &Process, args: &[String], listen: &str) -> Command {
        let mut command = Command::new(BIN);
        command
            .args(args)
            .current_dir(self.dir.path())
            .env_clear()
            .envs(self.environment(process, listen));
        command
    }

    /// Runs a command that ends by itself (`migrate`, `probe`): its exit status, stdout and
    /// stderr.
    pub fn run(&self, process: &Process, args: &[String], listen: &str) -> Finished {
        let mut child = self
            .command(process, args, listen)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start workbench");
        let stdout = drain(child.stdout.take().expect("stdout"));
        let stderr = drain(child.stderr.take().expect("stderr"));
        let status = wait(&mut child, PATIENCE).unwrap_or_else(|| {
            let _ = child.kill();
            panic!(
                "{}: `workbench {}` did not end within {PATIENCE:?}",
                process.origin,
                args.join(" ")
            )
        });
        Finished {
            status,
            stdout: stdout.join().expect("stdout"),
            stderr: stderr.join().expect("stderr"),
        }
    }

    /// Starts `serve` and waits for the address it listens on.
    pub fn serve(&self, process: &Process, args: &[String]) -> Running {
        let mut child = self
            .command(process, args, "127.0.0.1:0")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start workbench");
        let stderr = child.stderr.take().expect("stderr");
        let logs = Arc::new(Mutex::new(String::new()));
        let (address_tx, address_rx) = mpsc::channel();
        let sink = logs.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if let Some(at) = line.find("listening on http://") {
                    let rest = &line[at + "listening on http://".len()..];
                    let end = rest
                        .find(|c: char| c.is_whitespace() || c == '"')
                        .unwrap_or(rest.len());
                    if let Ok(address) = rest[..end].parse::<SocketAddr>() {
                        let _ = address_tx.send(address);
                    }
                }
                let mut logs = sink.lock().expect("logs");
                logs.push_str(&line);
                logs.push('\n');
            }
        });
        let mut running = Running {
            child,
            logs,
            address: None,
        };
        match address_rx.recv_timeout(PATIENCE) {
            Ok(address) => running.address = Some(address),
            Err(_) => panic!(
                "{}: `workbench {}` did not start listening:\n{}",
                process.origin,
                args.join(" "),
                running.logs()
            ),
        }
        running
    }
}

pub struct Finished {
    pub status: ExitStatus,
    pub stdout: String,
    pub stderr: String,
}

/// A `serve` process; killed when dropped.
pub struct Running {
    child: Child,
    logs: Arc<Mutex<String>>,
    address: Option<SocketAddr>,
}

impl Running {
    pub fn address(&self) -> SocketAddr {
        self.address.expect("listening")
    }

    pub fn logs(&self) -> String {
        self.logs.lock().expect("logs").clone()
    }

    /// Waits until `GET /readyz` answers 200.
    pub fn wait_ready(&self, origin: &str) {
        let deadline = Instant::now() + PATIENCE;
        while Instant::now() < deadline {
            if get(self.address(), "/readyz") == Some(200) {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("{origin}: /readyz never answered 200:\n{}", self.logs());
    }

    /// Sends SIGTERM and waits for the exit, at most `grace`.
    pub fn stop(&mut self, origin: &str, grace: Duration) -> ExitStatus {
        let sent = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .expect("kill -TERM");
        assert!(sent.success(), "kill -TERM failed");
        wait(&mut self.child, grace).unwrap_or_else(|| {
            panic!(
                "{origin}: still running {grace:?} after SIGTERM, the time it is given before \
                 SIGKILL:\n{}",
                self.logs()
            )
        })
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The status code of `GET path`, or None when nothing answers.
pub fn get(address: SocketAddr, path: &str) -> Option<u16> {
    let mut stream = TcpStream::connect_timeout(&address, Duration::from_secs(2)).ok()?;
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .ok()?;
    let request = format!("GET {path} HTTP/1.1\r\nHost: {address}\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).ok()?;
    let mut answer = String::new();
    stream.read_to_string(&mut answer).ok()?;
    answer.split_whitespace().nth(1)?.parse().ok()
}

/// The start-up warnings about variables that are not settings.
pub fn not_settings(logs: &str) -> Vec<String> {
    logs.lines()
        .filter(|line| line.contains("not a setting"))
        .map(str::to_owned)
        .collect()
}

fn drain(mut from: impl Read + Send + 'static) -> std::thread::JoinHandle<String> {
    std::thread::spawn(move || {
        let mut text = String::new();
        let _ = from.read_to_string(&mut text);
        text
    })
}

fn wait(child: &mut Child, limit: Duration) -> Option<ExitStatus> {
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline {
        if let Ok(Some(status)) = child.try_wait() {
            return Some(status);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    None
}
