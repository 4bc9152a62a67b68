//! A pooled connection and the state of one call on it: what a call given up at its deadline
//! leaves behind, and the thread that cancels its statement on PostgreSQL.

use super::*;

/// A pooled connection, discarded instead of returned when a call on it outlived its deadline
/// (contract §20): what it was doing is unknown, and the server may still be hung.
pub(crate) struct Pooled {
    pub(super) conn: AnyConnection,
    pub(super) discard: bool,
    /// PostgreSQL: the server process serving it, to cancel what it runs once given up.
    pub(super) backend: Option<ServerProcess>,
    /// When it was last given back to the pool: one given back less than [`FRESH`] ago is
    /// handed out again without a ping.
    pub(super) returned: Option<std::time::Instant>,
}

/// How long a connection given back to the pool is taken to be alive without a ping. A ping
/// on every checkout was a round trip more for every call on PostgreSQL (one in three of a
/// feed read's); a connection idle longer is pinged, so that after a database restart a dead
/// one is replaced instead of failing a request. One that dies within this time fails the
/// call that gets it, and is discarded (see [`Manager`]'s `has_broken`).
pub(super) const FRESH: std::time::Duration = std::time::Duration::from_secs(1);

/// A PostgreSQL backend: its pid and when it started, which together name it (a pid alone may
/// be reused by a later backend).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct ServerProcess {
    pid: i32,
    started: chrono::NaiveDateTime,
}

impl ServerProcess {
    pub(super) fn of(conn: &mut PgConnection) -> Result<Self, diesel::result::Error> {
        #[derive(diesel::QueryableByName)]
        struct Row {
            #[diesel(sql_type = diesel::sql_types::Integer)]
            pid: i32,
            #[diesel(sql_type = diesel::sql_types::Timestamp)]
            started: chrono::NaiveDateTime,
        }
        let row: Row = diesel::sql_query(
            "SELECT pid, (backend_start AT TIME ZONE 'UTC') AS started \
             FROM pg_stat_activity WHERE pid = pg_backend_pid()",
        )
        .get_result(conn)?;
        Ok(Self {
            pid: row.pid,
            started: row.started,
        })
    }
}

/// Where a database call stands, shared by its thread and its waiter.
#[derive(Debug, Default)]
pub(super) enum CallState {
    /// Waiting for a thread or a connection.
    #[default]
    Waiting,
    /// Its work runs on a connection to this backend (PostgreSQL).
    Running(Option<ServerProcess>),
    /// Its work ended; its connection went back to the pool.
    Ended,
    /// Its waiter gave up: what it runs is cancelled, its connection discarded.
    Abandoned,
}

impl CallState {
    pub(super) fn is_abandoned(&self) -> bool {
        matches!(self, CallState::Abandoned)
    }
}

/// The lock, even if a thread panicked while holding it (the state stays meaningful).
pub(super) fn lock<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Cancels, on the server, what calls given up were running (contract §20), one at a time on
/// a thread and a connection of its own, so that no backend goes on working for a client that
/// is gone. Requests beyond [`CANCELS_WAITING`] are dropped: while the server hangs, the
/// cancels wait with everything else, and the connections they name are discarded anyway.
#[derive(Clone)]
pub(super) struct Canceller(std::sync::mpsc::SyncSender<ServerProcess>);

const CANCELS_WAITING: usize = 64;

impl Canceller {
    pub(super) fn start(url: DatabaseUrl) -> std::io::Result<Self> {
        let (sender, asked) = std::sync::mpsc::sync_channel::<ServerProcess>(CANCELS_WAITING);
        std::thread::Builder::new()
            .name("db-canceller".into())
            .spawn(move || {
                let mut conn: Option<PgConnection> = None;
                for process in asked {
                    if conn.is_none() {
                        conn = match url.establish() {
                            Ok(AnyConnection::Postgresql(c)) => Some(c),
                            _ => None,
                        };
                    }
                    let Some(c) = conn.as_mut() else { continue };
                    let cancelled = diesel::sql_query(
                        "SELECT pg_cancel_backend(pid) FROM pg_stat_activity \
                         WHERE pid = $1 AND (backend_start AT TIME ZONE 'UTC') = $2",
                    )
                    .bind::<diesel::sql_types::Integer, _>(process.pid)
                    .bind::<diesel::sql_types::Timestamp, _>(process.started)
                    .execute(c);
                    if let Err(e) = cancelled {
                        tracing::debug!(error = %e, pid = process.pid,
                            "cancelling a given-up query failed");
                        conn = None;
                    }
                }
            })?;
        Ok(Self(sender))
    }

    pub(super) fn cancel(&self, process: ServerProcess) {
        let _ = self.0.try_send(process);
    }
}
