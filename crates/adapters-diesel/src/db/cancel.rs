//! The thread that cancels, on the server, the statements of calls given up at their deadline
//! (contract §20).

use diesel::pg::PgConnection;
use diesel::RunQueryDsl;

use super::calls::ServerProcess;
use super::connection::AnyConnection;
use super::url::DatabaseUrl;

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
