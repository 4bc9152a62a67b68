//! Database URLs, the waits bounded on them and SQLite's durability setting: what a
//! [`Database`](super::Database) is opened with.

use std::path::PathBuf;
use std::time::Duration;

use diesel::connection::SimpleConnection;
use diesel::pg::PgConnection;
use diesel::r2d2::R2D2Connection;
use diesel::sqlite::SqliteConnection;
use diesel::Connection;

use super::calls::{Pooled, ServerProcess, FRESH};
use super::connection::{AnyConnection, Backend, DatabaseError, WRITER_CHECKPOINT_PAGES};

/// SQLite's `PRAGMA synchronous` (contract §18). `Full`, the default, fsyncs the WAL at every
/// commit: a write acknowledged survives a power loss. `Normal` fsyncs only at checkpoints:
/// faster, and on a power loss the writes acknowledged since the last checkpoint are lost
/// (docs/operations.md has the measured trade-off).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Synchronous {
    /// `FULL`: every commit reaches the disk before it is answered.
    #[default]
    Full,
    /// `NORMAL`: commits reach the disk at checkpoints.
    Normal,
}

impl Synchronous {
    /// `full` or `normal`, as `WORKBENCH_SQLITE_SYNCHRONOUS` is written.
    pub fn parse(text: &str) -> Option<Self> {
        match text.trim().to_ascii_lowercase().as_str() {
            "full" => Some(Self::Full),
            "normal" => Some(Self::Normal),
            _ => None,
        }
    }

    const fn pragma(self) -> &'static str {
        match self {
            Self::Full => "FULL",
            Self::Normal => "NORMAL",
        }
    }
}

/// Bounded waits on the database (contract §20).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Waits {
    /// One request's deadline for the database (`WORKBENCH_DATABASE_REQUEST_TIMEOUT`): the
    /// wait for a connection, its health check, the queries and a batched commit's reply. A
    /// background step's call has one of its own.
    pub request: Duration,
    /// PostgreSQL: how long the network may be silent before a connection is given up
    /// (`WORKBENCH_DATABASE_TCP_TIMEOUT`): `connect_timeout`, TCP keepalives and
    /// `tcp_user_timeout`, on both ends of the connection.
    pub tcp: Duration,
    /// The longest wait for a free connection (`WORKBENCH_DATABASE_POOL_TIMEOUT`), within the
    /// request's deadline.
    pub pool: Duration,
    /// PostgreSQL: the longest one statement may run on the server
    /// (`WORKBENCH_DATABASE_STATEMENT_TIMEOUT`; migrations are not bound by it).
    pub statement: Duration,
}

impl Default for Waits {
    fn default() -> Self {
        Self {
            request: Duration::from_secs(5),
            tcp: Duration::from_secs(10),
            pool: Duration::from_secs(5),
            statement: Duration::from_secs(30),
        }
    }
}

impl Waits {
    /// libpq connection parameters bounding the network, appended to a URL that does not set
    /// them itself.
    fn libpq(&self) -> Vec<(&'static str, String)> {
        let (tcp, idle, interval) = self.keepalives();
        vec![
            ("connect_timeout", tcp.to_string()),
            ("keepalives", "1".into()),
            ("keepalives_idle", idle.to_string()),
            ("keepalives_interval", interval.to_string()),
            ("keepalives_count", "3".into()),
            ("tcp_user_timeout", (tcp * 1000).to_string()),
            // The connections' name in `pg_stat_activity` (contract §17).
            ("application_name", "workbench".into()),
        ]
    }

    /// The network bound in seconds, and the keepalives' idle time and interval that give up
    /// within it (three probes).
    fn keepalives(&self) -> (u64, u64, u64) {
        let tcp = self.tcp.as_secs();
        (tcp, (tcp / 2).max(1), (tcp / 6).max(1))
    }

    /// Within the bounds every use of them is safe with (an instant plus the request
    /// deadline, milliseconds of the TCP bound in a server setting): the request deadline at
    /// most an hour, the TCP bound from 2 s to an hour.
    fn bounded(self) -> Self {
        const HOUR: Duration = Duration::from_secs(3600);
        let request = self.request.clamp(Duration::from_millis(1), HOUR);
        Self {
            request,
            tcp: self.tcp.clamp(Duration::from_secs(2), HOUR),
            pool: self.pool.clamp(Duration::from_millis(1), request),
            statement: self.statement.clamp(Duration::from_secs(1), 24 * HOUR),
        }
    }

    /// The server's end of the same bounds, and an abandoned transaction's (a client that
    /// vanished mid-transaction): so that no backend outlives its client for long.
    fn server_settings(&self) -> String {
        let (tcp, idle, interval) = self.keepalives();
        let abandoned = (self.request.as_millis() * 4).max(30_000);
        format!(
            "SET tcp_keepalives_idle = {idle}; SET tcp_keepalives_interval = {interval}; \
             SET tcp_keepalives_count = 3; SET tcp_user_timeout = {}; \
             SET idle_in_transaction_session_timeout = {abandoned}; \
             SET statement_timeout = {}",
            tcp * 1000,
            self.statement.as_millis(),
        )
    }
}

/// The URL with `params` appended, each unless the URL sets it already. The query is what
/// follows the first `?` after the user information (a password may hold a `?` of its own).
fn with_params(url: &str, params: &[(&'static str, String)]) -> String {
    let authority = url.find("://").map_or(0, |i| i + 3);
    let after_user = url[authority..]
        .rfind('@')
        .map_or(authority, |i| authority + i + 1);
    let mut url = url.to_owned();
    for (name, value) in params {
        let query = url[after_user..].find('?').map(|i| after_user + i + 1);
        let set = query.is_some_and(|q| {
            url[q..]
                .split('&')
                .any(|p| p.split('=').next() == Some(*name))
        });
        if set {
            continue;
        }
        if query.is_none() {
            url.push('?');
        } else if !(url.ends_with('?') || url.ends_with('&')) {
            url.push('&');
        }
        url.push_str(&format!("{name}={value}"));
    }
    url
}

#[cfg(test)]
mod params_tests {
    use super::{with_params, Waits};
    use std::time::Duration;

    #[test]
    fn waits_from_outside_are_bounded_before_any_arithmetic() {
        let url = super::DatabaseUrl::parse("postgres://h/db")
            .expect("url")
            .with_waits(Waits {
                request: Duration::MAX,
                tcp: Duration::ZERO,
                pool: Duration::MAX,
                statement: Duration::MAX,
            });
        assert_eq!(url.waits.request, Duration::from_secs(3600));
        assert_eq!(url.waits.tcp, Duration::from_secs(2));
        assert!(url
            .waits
            .server_settings()
            .contains("tcp_user_timeout = 2000"));
        assert_eq!(
            url.waits.pool, url.waits.request,
            "within the request's deadline"
        );
        assert!(url
            .waits
            .server_settings()
            .contains("statement_timeout = 86400000"));
        let huge = Waits {
            request: Duration::from_secs(1),
            tcp: Duration::MAX,
            ..Waits::default()
        }
        .bounded();
        assert_eq!(huge.pool, Duration::from_secs(1));
        assert!(huge
            .libpq()
            .contains(&("tcp_user_timeout", "3600000".to_owned())));
    }

    #[test]
    fn parameters_are_appended_to_the_query_only_when_the_url_does_not_set_them() {
        let params = [
            ("connect_timeout", "10".to_owned()),
            ("keepalives", "1".to_owned()),
        ];
        let cases = [
            (
                "postgres://h/db",
                "postgres://h/db?connect_timeout=10&keepalives=1",
            ),
            (
                "postgres://h/db?",
                "postgres://h/db?connect_timeout=10&keepalives=1",
            ),
            (
                "postgres://h/db?sslmode=require&",
                "postgres://h/db?sslmode=require&connect_timeout=10&keepalives=1",
            ),
            (
                "postgres://h/db?connect_timeout=3",
                "postgres://h/db?connect_timeout=3&keepalives=1",
            ),
            (
                "postgres://u:p?ss@h/db",
                "postgres://u:p?ss@h/db?connect_timeout=10&keepalives=1",
            ),
            (
                "postgres://u:p?connect_timeout=1@h/db",
                "postgres://u:p?connect_timeout=1@h/db?connect_timeout=10&keepalives=1",
            ),
        ];
        for (url, expected) in cases {
            assert_eq!(with_params(url, &params), expected, "{url}");
        }
    }
}

/// A parsed database URL. Never printed: it may hold a password.
#[derive(Clone)]
pub struct DatabaseUrl {
    pub(super) backend: Backend,
    /// For SQLite the file path (or `file:` URI); for PostgreSQL the URL as given.
    pub(super) target: String,
    pub(super) synchronous: Synchronous,
    pub(super) waits: Waits,
}

impl DatabaseUrl {
    /// `sqlite://PATH` or `postgres://...` (`postgresql://`), with the default settings.
    pub fn parse(url: &str) -> Result<Self, DatabaseError> {
        if url.starts_with("postgres://") || url.starts_with("postgresql://") {
            Ok(Self {
                backend: Backend::Postgres,
                target: url.to_owned(),
                synchronous: Synchronous::Full,
                waits: Waits::default(),
            })
        } else if let Some(path) = url.strip_prefix("sqlite://") {
            if path.is_empty() {
                return Err(DatabaseError::UnsupportedUrl);
            }
            Ok(Self {
                backend: Backend::Sqlite,
                target: path.to_owned(),
                synchronous: Synchronous::Full,
                waits: Waits::default(),
            })
        } else {
            Err(DatabaseError::UnsupportedUrl)
        }
    }

    /// Which backend it names.
    pub fn backend(&self) -> Backend {
        self.backend
    }

    /// SQLite's `synchronous` for every connection (PostgreSQL's commits are never lowered).
    pub fn with_synchronous(mut self, synchronous: Synchronous) -> Self {
        self.synchronous = synchronous;
        self
    }

    /// The bounds of every wait on the database (contract §20).
    pub fn with_waits(mut self, waits: Waits) -> Self {
        self.waits = waits.bounded();
        self
    }

    /// The SQLite database file, for placing files "beside the database".
    pub fn sqlite_file(&self) -> Option<PathBuf> {
        match self.backend {
            Backend::Sqlite => {
                let path = self.target.strip_prefix("file:").unwrap_or(&self.target);
                Some(PathBuf::from(path.split('?').next().unwrap_or(path)))
            }
            Backend::Postgres => None,
        }
    }

    pub(crate) fn establish(&self) -> Result<AnyConnection, diesel::ConnectionError> {
        match self.backend {
            Backend::Postgres => {
                // The network bounded on this end (libpq) and on the server's (contract §20).
                let mut conn =
                    PgConnection::establish(&with_params(&self.target, &self.waits.libpq()))?;
                conn.batch_execute(&self.waits.server_settings())
                    .map_err(|e| diesel::ConnectionError::BadConnection(e.to_string()))?;
                Ok(AnyConnection::Postgresql(conn))
            }
            Backend::Sqlite => {
                // Contract §16: a database this creates is readable by its owner only (SQLite
                // gives its `-wal` and `-shm` files the database file's mode).
                if let Some(file) = self.sqlite_file().filter(|f| !f.exists()) {
                    use std::os::unix::fs::OpenOptionsExt;
                    // Another process may create it meanwhile: then it is theirs, as it is.
                    let _ = std::fs::OpenOptions::new()
                        .write(true)
                        .create_new(true)
                        .mode(0o600)
                        .open(&file);
                }
                let mut conn = SqliteConnection::establish(&self.target)?;
                // Per connection: wait for locks instead of failing, enforce foreign keys.
                // WAL is persistent (set once at pool creation). `synchronous` is FULL unless
                // NORMAL is asked for (see [`Synchronous`]). The WAL is bounded at rest by the
                // checkpointer ([`Database::checkpoint`]), not by `journal_size_limit`, which
                // truncated it while busy (measurably slowing `/start`).
                // Checkpoints are the background checkpointer's ([`Database::checkpoint`]): a
                // writer checkpoints at commit only when the WAL passes 32 MiB,
                // when the checkpointer has fallen behind or is not running. Temporary files
                // (statement journals: a packed insert calls SQL functions, which may fail) in
                // memory: on disk each was created and deleted per transaction.
                conn.batch_execute(&format!(
                    "PRAGMA busy_timeout = 5000; PRAGMA foreign_keys = ON; PRAGMA synchronous = \
                        {}; \
                     PRAGMA wal_autocheckpoint = {WRITER_CHECKPOINT_PAGES}; PRAGMA temp_store = \
                         MEMORY;",
                    self.synchronous.pragma()
                ))
                .map_err(|e| diesel::ConnectionError::BadConnection(e.to_string()))?;
                Ok(AnyConnection::Sqlite(conn))
            }
        }
    }
}

/// An r2d2 manager that dispatches on the URL scheme itself, so a PostgreSQL connection error
/// reaches the operator as it is (diesel's generated `establish` would hide it).
pub(super) struct Manager(pub(super) DatabaseUrl);

impl r2d2::ManageConnection for Manager {
    type Connection = Pooled;
    type Error = diesel::r2d2::Error;

    fn connect(&self) -> Result<Pooled, Self::Error> {
        let mut conn = self
            .0
            .establish()
            .map_err(diesel::r2d2::Error::ConnectionError)?;
        let backend = match &mut conn {
            AnyConnection::Postgresql(c) => {
                Some(ServerProcess::of(c).map_err(diesel::r2d2::Error::QueryError)?)
            }
            AnyConnection::Sqlite(_) => None,
        };
        Ok(Pooled {
            conn,
            discard: false,
            backend,
            returned: None,
        })
    }

    fn is_valid(&self, pooled: &mut Pooled) -> Result<(), Self::Error> {
        if pooled.returned.is_some_and(|at| at.elapsed() < FRESH) {
            return Ok(());
        }
        pooled.conn.ping().map_err(diesel::r2d2::Error::QueryError)
    }

    /// Called as each connection is given back.
    fn has_broken(&self, pooled: &mut Pooled) -> bool {
        pooled.returned = Some(std::time::Instant::now());
        pooled.discard || std::thread::panicking() || pooled.conn.is_broken()
    }
}
