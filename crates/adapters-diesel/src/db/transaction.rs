//! The write transaction every unit of work that writes runs in, and the deadlock that
//! PostgreSQL breaks by ending one.

use diesel::connection::{AnsiTransactionManager, TransactionManager};
use diesel::Connection;

use super::connection::AnyConnection;
use super::failure::Failure;
use super::notices;

/// PostgreSQL ended this transaction to break a deadlock (SQLSTATE 40P01), and running it
/// again may succeed. diesel has no kind for it; the server's message names it, in English
/// (`lc_messages`; docs/operations.md).
pub(super) fn deadlocked(e: &diesel::result::Error) -> bool {
    match e {
        diesel::result::Error::DatabaseError(_, info) => {
            info.message().starts_with("deadlock detected")
        }
        _ => false,
    }
}

/// Runs `work` in a transaction meant to write. On SQLite it starts with `BEGIN IMMEDIATE`,
/// taking the write lock up front: a deferred transaction that reads and then writes cannot
/// wait for the lock (SQLite answers "database is locked" at once, whatever `busy_timeout`
/// says), while an immediate one waits its turn. diesel's MultiConnection delegates
/// transaction state to the inner connection, so beginning on the inner connection and
/// committing through the outer one is consistent.
pub(crate) fn write_transaction<T, F>(conn: &mut AnyConnection, work: F) -> Result<T, Failure>
where
    F: FnOnce(&mut AnyConnection) -> Result<T, Failure>,
{
    type Manager = <AnyConnection as Connection>::TransactionManager;
    notices::discard();
    match conn {
        AnyConnection::Sqlite(inner) => {
            AnsiTransactionManager::begin_transaction_sql(inner, "BEGIN IMMEDIATE")?
        }
        AnyConnection::Postgresql(_) => Manager::begin_transaction(conn)?,
    }
    match work(conn) {
        Ok(value) => match Manager::commit_transaction(conn) {
            Ok(()) => Ok(value),
            Err(commit) => {
                notices::discard();
                let _ = Manager::rollback_transaction(conn);
                Err(commit.into())
            }
        },
        Err(failure) => {
            notices::discard();
            // SQLite rolls a transaction back by itself on some errors (a full disk among
            // them): the rollback then finds none, and the failure that caused it is the
            // answer. A connection left in doubt is discarded by the pool (`has_broken`).
            if let Err(rollback) = Manager::rollback_transaction(conn) {
                tracing::debug!(error = %rollback, "rollback after a failed transaction");
            }
            Err(failure)
        }
    }
}
