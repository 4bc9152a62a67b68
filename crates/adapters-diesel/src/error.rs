use diesel::result::{DatabaseErrorKind, Error as DieselError};
use domain::StorageError;

const SQLITE_FOREIGN_KEY_MESSAGE: &str = "FOREIGN KEY constraint failed";

/// Whether a database's message says the failure passes by itself: SQLite's busy and locked
/// answers, PostgreSQL's deadlock, lock and statement timeouts, and a server shutting down or
/// restarting (contract §10: such errors are not a unit's failure).
pub(crate) fn says_passing(message: &str) -> bool {
    [
        "database is locked",
        "database table is locked",
        "deadlock detected",
        "could not serialize access",
        "canceling statement due to",
        "terminating connection",
        "the database system is starting up",
        "the database system is shutting down",
        "server closed the connection",
    ]
    .iter()
    .any(|m| message.contains(m))
}

/// Whether a database's message says it has no room for a write (contract §18): SQLite's
/// `SQLITE_FULL` ("database or disk is full"), and PostgreSQL's `53100 disk_full`, whose
/// messages name the operating system's ENOSPC ("could not extend file ...: No space left on
/// device"). diesel gives neither backend's error code, only the message.
pub(crate) fn says_full(message: &str) -> bool {
    message.contains("database or disk is full") || message.contains("No space left on device")
}

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
                _ if says_full(info.message()) => StorageError::Full(info.message().to_owned()),
                // Passing conditions: the work is tried again, never failed for them.
                DatabaseErrorKind::SerializationFailure => StorageError::Unavailable(what),
                _ if says_passing(info.message()) => {
                    StorageError::Unavailable(info.message().to_owned())
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
            crate::db::Failure::Retry => {
                StorageError::Internal("a retry was asked outside the recorder".into())
            }
        }
    }
}

/// A stored value that cannot be read back (bad JSON, an unknown status): a fault of the
/// system, never of the caller.
pub(crate) fn corrupt(what: &str, e: impl std::fmt::Display) -> StorageError {
    StorageError::Internal(format!("stored {what} cannot be read: {e}"))
}

/// A number read from the database as the domain's type: `u32` from an `INTEGER` column,
/// `u64` from a `BIGINT`, `u8` from a priority stored as an `INTEGER`...
///
/// The columns are wider or signed where the domain's numbers are not (both backends share
/// one schema, and PostgreSQL has no unsigned types), so a stored value may be out of the
/// domain's range: a row written by hand, a migration gone wrong, a bug. Such a value is
/// [`corrupt`], never read as some default: a version past `i32` read back as 0, or a priority
/// of 300 as 5, would be a wrong answer given as a right one.
///
/// `what` names the value in the error ("card priority"). Nothing is formatted unless the value
/// is out of range: this runs for every row read.
pub(crate) fn read_number<S, T>(what: &str, value: S) -> Result<T, StorageError>
where
    S: Copy + std::fmt::Display,
    T: TryFrom<S>,
{
    T::try_from(value).map_err(|_| out_of_range_read(what, &value))
}

/// A domain number as its column's type, to be written or compared with: `i32` for a `u32`,
/// `i64` for a `u64`.
///
/// The domain's unsigned numbers reach past the signed columns that hold them (a `u32` version
/// past `i32::MAX`, a `u64` count past `i64::MAX`). Such a value is refused with
/// [`StorageError::Internal`] naming `what` and the value: clamped, it would be stored (or
/// matched) as another number than the one the domain meant.
///
/// Nothing is formatted unless the value is out of range: this runs for every card of a
/// fan-out.
pub(crate) fn write_number<S, T>(what: &str, value: S) -> Result<T, StorageError>
where
    S: Copy + std::fmt::Display,
    T: TryFrom<S>,
{
    T::try_from(value).map_err(|_| out_of_range_write(what, &value))
}

#[cold]
fn out_of_range_read(what: &str, value: &dyn std::fmt::Display) -> StorageError {
    corrupt(what, format_args!("{value} is out of range"))
}

#[cold]
fn out_of_range_write(what: &str, value: &dyn std::fmt::Display) -> StorageError {
    StorageError::Internal(format!(
        "{what} {value} cannot be stored: out of its column's range"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Info(&'static str);

    impl diesel::result::DatabaseErrorInformation for Info {
        fn message(&self) -> &str {
            self.0
        }
        fn details(&self) -> Option<&str> {
            None
        }
        fn hint(&self) -> Option<&str> {
            None
        }
        fn table_name(&self) -> Option<&str> {
            None
        }
        fn column_name(&self) -> Option<&str> {
            None
        }
        fn constraint_name(&self) -> Option<&str> {
            None
        }
        fn statement_position(&self) -> Option<i32> {
            None
        }
    }

    fn error(message: &'static str) -> DieselError {
        DieselError::DatabaseError(DatabaseErrorKind::Unknown, Box::new(Info(message)))
    }

    #[test]
    fn a_full_disk_is_its_own_kind_on_both_backends() {
        // SQLite's SQLITE_FULL.
        assert!(matches!(
            map(error("database or disk is full")),
            StorageError::Full(_)
        ));
        // PostgreSQL's 53100 disk_full, as its server words it.
        for message in [
            "could not extend file \"base/16384/16402\": No space left on device",
            "could not write to file \"pg_wal/xlogtemp.123\": No space left on device",
        ] {
            assert!(
                matches!(map(error(message)), StorageError::Full(_)),
                "{message}"
            );
        }
        assert!(matches!(
            map(error("syntax error at or near \"x\"")),
            StorageError::Internal(_)
        ));
    }

    #[test]
    fn stored_numbers_out_of_the_domains_range_are_corrupt() {
        assert_eq!(read_number::<i32, u8>("card priority", 7), Ok(7));
        assert_eq!(read_number::<i64, u64>("count", 0), Ok(0));
        for (read, value) in [
            (read_number::<i32, u8>("card priority", 300), "300"),
            (read_number::<i32, u8>("card priority", -1), "-1"),
        ] {
            assert_eq!(
                read,
                Err(StorageError::Internal(format!(
                    "stored card priority cannot be read: {value} is out of range"
                )))
            );
        }
        assert!(matches!(
            read_number::<i64, u64>("invocation users targeted", -5),
            Err(StorageError::Internal(m)) if m.contains("users targeted") && m.contains("-5")
        ));
    }

    #[test]
    fn domain_numbers_past_their_columns_are_refused_not_clamped() {
        assert_eq!(write_number::<u32, i32>("flow version", 7), Ok(7));
        assert_eq!(
            write_number::<u32, i32>("flow version", u32::MAX),
            Err(StorageError::Internal(
                "flow version 4294967295 cannot be stored: out of its column's range".into()
            ))
        );
        assert!(matches!(
            write_number::<u64, i64>("bulk task cursor", u64::MAX),
            Err(StorageError::Internal(m)) if m.contains(&u64::MAX.to_string())
        ));
    }

    #[test]
    fn passing_conditions_are_waited_out_not_failed() {
        for message in [
            "database is locked",
            "deadlock detected",
            "canceling statement due to statement timeout",
            "terminating connection due to administrator command",
        ] {
            assert!(
                matches!(map(error(message)), StorageError::Unavailable(_)),
                "{message}"
            );
        }
    }
}
