//! Faults for tests of bounded waits (contract §20): a PostgreSQL server of the test's own that
//! can be frozen (SIGSTOP, as an I/O freeze or a failover looks from outside), and a TCP relay
//! that can hold every byte (a silent partition, with no firewall needed).
//!
//! [`ThrowawayPostgres::start`] needs PostgreSQL's server binaries (Debian's `postgresql`
//! package, which `.ci/run` installs). Without them it returns `None` so the caller can skip
//! visibly; when `CI` is set it panics instead.

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// A PostgreSQL server in a temporary directory, on a free port of 127.0.0.1, stopped and
/// removed when dropped.
pub struct ThrowawayPostgres {
    dir: PathBuf,
    bin: PathBuf,
    port: u16,
}

impl ThrowawayPostgres {
    /// Starts one (`initdb`, then `pg_ctl start`): about two seconds.
    pub fn start() -> Option<Self> {
        let Some(bin) = server_binaries() else {
            if std::env::var_os("CI").is_some() {
                panic!("PostgreSQL's server binaries are missing: the fault tests must run in CI");
            }
            eprintln!("skipping: PostgreSQL's server binaries are not installed");
            return None;
        };
        let dir = std::env::temp_dir().join(format!("workbench-pg-{}", crate::testing::unique()));
        std::fs::create_dir_all(&dir).expect("directory");
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        let server = Self { dir, bin, port };
        if as_root() {
            let ok = Command::new("chown")
                .args(["postgres:postgres", &server.dir.display().to_string()])
                .status()
                .is_ok_and(|s| s.success());
            assert!(ok, "chown to postgres");
        }
        server.run(&format!(
            "{}/initdb -D {}/data -U postgres --auth=trust -E UTF8 >/dev/null",
            server.bin.display(),
            server.dir.display()
        ));
        server.run(&format!(
            "{bin}/pg_ctl -D {dir}/data -w -l {dir}/log -o \"-k {dir} -p {port} \
             -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=100\" start >/dev/null",
            bin = server.bin.display(),
            dir = server.dir.display(),
            port = server.port
        ));
        Some(server)
    }

    /// The port it listens on.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The URL of its `postgres` database, as `WORKBENCH_DATABASE_URL`.
    pub fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", self.port)
    }

    /// Stops every process of the server (SIGSTOP): it keeps its sockets, and the kernel keeps
    /// acknowledging what is sent to them, but nothing answers.
    pub fn freeze(&self) {
        self.signal("STOP");
    }

    /// Lets it run again (SIGCONT).
    pub fn thaw(&self) {
        self.signal("CONT");
    }

    /// Client backends (not the server's own processes), by pid: what a test looks at to see
    /// that no connection was left behind.
    pub fn backends(&self) -> Vec<i32> {
        use diesel::{Connection, RunQueryDsl};
        #[derive(diesel::QueryableByName)]
        struct Pid {
            #[diesel(sql_type = diesel::sql_types::Integer)]
            pid: i32,
        }
        let mut admin =
            diesel::PgConnection::establish(&format!("{}?connect_timeout=5", self.url()))
                .expect("admin connection");
        diesel::sql_query(
            "SELECT pid FROM pg_stat_activity \
             WHERE backend_type = 'client backend' AND pid <> pg_backend_pid()",
        )
        .load::<Pid>(&mut admin)
        .expect("backends")
        .into_iter()
        .map(|p| p.pid)
        .collect()
    }

    fn signal(&self, signal: &str) {
        let pid = std::fs::read_to_string(self.dir.join("data/postmaster.pid"))
            .ok()
            .and_then(|text| text.lines().next()?.trim().parse::<u32>().ok());
        let Some(postmaster) = pid else { return };
        let mut pids = vec![postmaster];
        pids.extend(children_of(postmaster));
        for pid in pids {
            // A process may have ended since it was listed.
            let _ = Command::new("kill")
                .args([format!("-{signal}"), pid.to_string()])
                .stderr(std::process::Stdio::null())
                .status();
        }
    }

    fn run(&self, command: &str) {
        let status = if as_root() {
            Command::new("su")
                .args(["postgres", "-s", "/bin/sh", "-c", command])
                .status()
        } else {
            Command::new("sh").args(["-c", command]).status()
        };
        assert!(status.is_ok_and(|s| s.success()), "`{command}` failed");
    }
}

impl Drop for ThrowawayPostgres {
    fn drop(&mut self) {
        self.thaw();
        let stop = format!(
            "{}/pg_ctl -D {}/data -m immediate stop >/dev/null 2>&1",
            self.bin.display(),
            self.dir.display()
        );
        let _ = if as_root() {
            Command::new("su")
                .args(["postgres", "-s", "/bin/sh", "-c", &stop])
                .status()
        } else {
            Command::new("sh").args(["-c", &stop]).status()
        };
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn as_root() -> bool {
    // The effective uid, from /proc.
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Uid:"))
                .and_then(|l| l.split_whitespace().nth(2).map(|uid| uid == "0"))
        })
        .unwrap_or(false)
}

/// The newest `/usr/lib/postgresql/<version>/bin` with `initdb` in it.
fn server_binaries() -> Option<PathBuf> {
    let mut found: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .ok()?
        .filter_map(|e| {
            let entry = e.ok()?;
            let version = entry.file_name().to_str()?.parse::<u32>().ok()?;
            let bin = entry.path().join("bin");
            bin.join("initdb").exists().then_some((version, bin))
        })
        .collect();
    found.sort();
    found.pop().map(|(_, bin)| bin)
}

/// Processes whose parent is `parent`, from /proc.
fn children_of(parent: u32) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(|e| {
            let pid: u32 = e.ok()?.file_name().to_str()?.parse().ok()?;
            let stat =
                std::fs::read_to_string(Path::new("/proc").join(pid.to_string()).join("stat"))
                    .ok()?;
            // `pid (comm) state ppid ...`: the command may hold spaces, so read after its `)`.
            let ppid: u32 = stat
                .rsplit_once(')')?
                .1
                .split_whitespace()
                .nth(1)?
                .parse()
                .ok()?;
            (ppid == parent).then_some(pid)
        })
        .collect()
}

/// A TCP relay on a free port of 127.0.0.1 to `target`. While [`Blackhole::hold`] is on, it
/// forwards nothing either way and keeps every connection open: to the client the server has
/// gone silent. Dropped, it stops accepting.
pub struct Blackhole {
    port: u16,
    holding: Arc<AtomicBool>,
    stopped: Arc<AtomicBool>,
}

impl Blackhole {
    /// A relay to `target` on loopback, passing bytes until [`Blackhole::hold`] is on.
    pub fn to(target: u16) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").expect("relay port");
        let port = listener.local_addr().expect("address").port();
        let holding = Arc::new(AtomicBool::new(false));
        let stopped = Arc::new(AtomicBool::new(false));
        let (hold, stop) = (holding.clone(), stopped.clone());
        std::thread::spawn(move || {
            for client in listener.incoming() {
                if stop.load(Ordering::Relaxed) {
                    break;
                }
                let Ok(client) = client else { continue };
                let Ok(server) = TcpStream::connect(("127.0.0.1", target)) else {
                    continue;
                };
                for (from, to) in [
                    (client.try_clone(), server.try_clone()),
                    (server.try_clone(), client.try_clone()),
                ] {
                    if let (Ok(from), Ok(to)) = (from, to) {
                        let hold = hold.clone();
                        std::thread::spawn(move || relay(from, to, &hold));
                    }
                }
            }
        });
        Self {
            port,
            holding,
            stopped,
        }
    }

    /// The port it listens on.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Holds (true) or forwards (false) from now on.
    pub fn hold(&self, on: bool) {
        self.holding.store(on, Ordering::SeqCst);
    }
}

impl Drop for Blackhole {
    fn drop(&mut self) {
        self.stopped.store(true, Ordering::Relaxed);
        self.holding.store(false, Ordering::SeqCst);
        let _ = TcpStream::connect(("127.0.0.1", self.port));
    }
}

/// Copies `from` to `to`, each chunk only once the relay is not holding.
fn relay(mut from: TcpStream, mut to: TcpStream, holding: &AtomicBool) {
    let mut buf = [0u8; 16 * 1024];
    loop {
        while holding.load(Ordering::SeqCst) {
            std::thread::sleep(Duration::from_millis(5));
        }
        let n = match from.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        while holding.load(Ordering::SeqCst) {
            std::thread::sleep(Duration::from_millis(5));
        }
        if to.write_all(&buf[..n]).is_err() {
            break;
        }
    }
    let _ = to.shutdown(Shutdown::Write);
}
