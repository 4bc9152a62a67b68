//! The failure of a unit of work on a connection.

use domain::StorageError;

/// The failure of a unit of work: a diesel error, or a domain answer decided inside it.
pub(crate) enum Failure {
    /// A statement failed.
    Query(diesel::result::Error),
    /// The work decided on a domain answer.
    Domain(StorageError),
    /// The work asks for its transaction to be rolled back and run again: the `/start`
    /// recorder's signal that an id it took to be new was stored meanwhile. Only
    /// [`Database::transaction_blocking_or_retry`] takes it; it never leaves this crate.
    Retry,
}

impl From<diesel::result::Error> for Failure {
    fn from(e: diesel::result::Error) -> Self {
        Failure::Query(e)
    }
}
