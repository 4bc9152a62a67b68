//! A pooled connection and the state of one call on it: what a call given up at its deadline
//! leaves behind, and the thread that cancels its statement on PostgreSQL.

use diesel::pg::PgConnection;
use diesel::RunQueryDsl;

use super::connection::AnyConnection;

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
    pub(super) pid: i32,
    pub(super) started: chrono::NaiveDateTime,
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
