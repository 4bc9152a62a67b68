use diesel::result::{DatabaseErrorKind, Error as DieselError};
use domain::StorageError;

const SQLITE_FOREIGN_KEY_MESSAGE: &str = "FOREIGN KEY constraint failed";

/// Maps a diesel error to what the domain understands. Constraint names (not messages, which
/// may quote values) identify the violated rule.
pub(crate) fn map(err: DieselError) -> StorageError {
    match err {
        DieselError::DatabaseError(kind, info) => {
            let what = info.constraint_name().unwrap_or(info.message()).to_owned();
            match kind {
                DatabaseErrorKind::UniqueViolation => StorageError::UniqueViolation(what),
                DatabaseErrorKind::ForeignKeyViolation => StorageError::ForeignKeyViolation(what),
                DatabaseErrorKind::ClosedConnection => StorageError::Unavailable(what),
                // SQLite raises ON DELETE RESTRICT with the generic constraint code, which
                // diesel cannot classify; its message is fixed by SQLite.
                DatabaseErrorKind::Unknown if info.message() == SQLITE_FOREIGN_KEY_MESSAGE => {
                    StorageError::ForeignKeyViolation(what)
                }
                _ => StorageError::Internal(format!("{kind:?}: {}", info.message())),
            }
        }
        DieselError::BrokenTransactionManager => {
            StorageError::Unavailable("connection left in a broken transaction state".into())
        }
        other => StorageError::Internal(other.to_string()),
    }
}

impl From<crate::db::Failure> for StorageError {
    fn from(f: crate::db::Failure) -> Self {
        match f {
            crate::db::Failure::Query(e) => map(e),
            crate::db::Failure::Domain(e) => e,
        }
    }
}

/// A stored value that cannot be read back (bad JSON, an unknown status): a fault of the
/// system, never of the caller.
pub(crate) fn corrupt(what: &str, e: impl std::fmt::Display) -> StorageError {
    StorageError::Internal(format!("stored {what} cannot be read: {e}"))
}
