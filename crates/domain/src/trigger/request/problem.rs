//! How the request's parsers record a problem: at its path, beside every other one, so that
//! the answer lists them all at once.

use crate::FieldError;

/// Records the problem `message` at `path`.
pub(super) fn err(
    errors: &mut Vec<FieldError>,
    path: impl Into<String>,
    message: impl Into<String>,
) {
    errors.push(FieldError::new(path, message));
}
