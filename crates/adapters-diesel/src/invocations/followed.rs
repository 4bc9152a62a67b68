//! A batch saved after the one before it ([`InvocationRepository::save_after`]): its writes,
//! the wait for its turn, then its flow's cancels and its progress, in a savepoint it is
//! rolled back to when the cancels or the invocation changed under it.
//!
//! [`InvocationRepository::save_after`]: domain::trigger::InvocationRepository::save_after

use diesel::prelude::*;
use domain::trigger::{BatchResult, InvocationStatus, SaveTurn};
use domain::StorageError;

use super::progress::{at_start, save_one};
use crate::db::{AnyConnection, Failure};
use crate::markers::{apply_markers, known, markers_for, Known, Markers};
use crate::schema::invocations;
use crate::totals::Totals;
use crate::writes::*;

/// Why the writes of [`write_then_progress`] were rolled back to their savepoint.
enum Followed {
    /// The batch's invocation is no longer at its starting cursor.
    Stale,
    /// Cancels of its flow accepted since its invocation was created cover some of it: they
    /// were not applied.
    Cancels,
    Failed(Failure),
}

impl From<Failure> for Followed {
    fn from(e: Failure) -> Self {
        Followed::Failed(e)
    }
}

impl From<diesel::result::Error> for Followed {
    fn from(e: diesel::result::Error) -> Self {
        Followed::Failed(Failure::Query(e))
    }
}

/// [`InvocationRepository::save_after`] in its transaction.
///
/// First the batch's cards, events and outbox rows, as built; then the wait for `after`;
/// only then the flow's lock and its cancels ([`markers_for`]), so that the flow's row is
/// never share-locked by two saves of one fan-out without a gap, which would hold a cancel
/// being recorded (it locks the row exclusively) until the step ends. When cancels cover any
/// of it, the batch is written again after them, in the order of every other save. Its
/// progress last, fenced by its starting cursor.
///
/// Returns 1, with everything it wrote rolled back to a savepoint, when its invocation is no
/// longer at that cursor (the batch before was not saved, or another worker took the
/// invocation over), and when the unique card key (invocation, user, step) refused its cards
/// and the invocation has moved on: another worker saved them. A refusal while the invocation
/// is still at the batch's cursor is an error. A turn not ended by `until` is an error too.
pub(super) fn save_followed(
    conn: &mut AnyConnection,
    batch: BatchResult,
    after: &SaveTurn,
    until: std::time::Instant,
) -> Result<u64, Failure> {
    let mut batch = [batch];
    let known = known(conn, &batch)?;
    let first = write_then_progress(conn, &batch[0], |conn| {
        wait_for(after, until)?;
        let markers = markers_for(conn, batch.iter(), &known)?;
        if changed_by(&batch[0], &markers, &known) {
            Err(Followed::Cancels)
        } else {
            Ok(())
        }
    });
    let outcome = match first {
        Err(Followed::Cancels) => {
            crate::db::notices::discard();
            apply_markers(conn, &mut batch, &known)?;
            write_then_progress(conn, &batch[0], |_| Ok(()))
        }
        other => other,
    };
    match outcome {
        Ok(()) => Ok(0),
        Err(Followed::Stale) => {
            // Nothing of it is committed: no feed is told of its cards.
            crate::db::notices::discard();
            Ok(1)
        }
        Err(Followed::Failed(Failure::Query(diesel::result::Error::DatabaseError(
            diesel::result::DatabaseErrorKind::UniqueViolation,
            info,
        )))) => {
            crate::db::notices::discard();
            wait_for(after, until)?;
            if at_cursor(conn, &batch[0])? {
                Err(Failure::Query(diesel::result::Error::DatabaseError(
                    diesel::result::DatabaseErrorKind::UniqueViolation,
                    info,
                )))
            } else {
                Ok(1)
            }
        }
        Err(Followed::Failed(failure)) => Err(failure),
        Err(Followed::Cancels) => Err(Failure::Domain(StorageError::Internal(
            "a batch's cancels changed under the flow's lock".into(),
        ))),
    }
}

/// Whether `markers` (its flow's cancels, read for `known` invocations) drop any of `batch` or
/// stop its invocation.
fn changed_by(batch: &BatchResult, markers: &Markers, known: &Known) -> bool {
    let env = batch.environment_id.clone();
    let Some((flow, version, created)) = known.get(&(env.clone(), batch.invocation_id.clone()))
    else {
        return false;
    };
    let Some(found) = markers.get(&(env, flow.clone())) else {
        return false;
    };
    let mut applied = batch.clone();
    applied.apply_cancels(found, *version, created.and_utc());
    applied.status != batch.status
        || applied.cursor != batch.cursor
        || applied.cards.len() != batch.cards.len()
        || applied.instances.len() != batch.instances.len()
}

/// In a savepoint: `batch`'s cards, events and outbox rows; then `before`; then its progress,
/// fenced by its starting cursor, and its daily totals.
fn write_then_progress(
    conn: &mut AnyConnection,
    batch: &BatchResult,
    before: impl FnOnce(&mut AnyConnection) -> Result<(), Followed>,
) -> Result<(), Followed> {
    conn.transaction::<_, Followed, _>(|conn| {
        let saved = [batch];
        let mut totals = Totals::default();
        RunWrites::of(&saved, conn.backend())
            .map_err(Failure::Domain)?
            .write(conn, &saved, &mut totals)?;
        before(conn)?;
        let ended = save_one(conn, batch)?.ok_or(Followed::Stale)?;
        // After the invocation's row, as every save orders them: then its instances' counts.
        crate::instances::insert_instances(conn, saved, &mut totals)?;
        totals.ended(&ended, batch.status, batch.updated.naive_utc());
        totals.flush(conn)?;
        Ok(())
    })
}

/// Waits for the save before to end, until `until`; an error when it has not.
fn wait_for(after: &SaveTurn, until: std::time::Instant) -> Result<(), Failure> {
    if after.wait(until.saturating_duration_since(std::time::Instant::now())) {
        Ok(())
    } else {
        Err(Failure::Domain(StorageError::Unavailable(
            "the save of the batch before did not end within the database's wait".into(),
        )))
    }
}

/// Whether `batch`'s invocation is still at the cursor the batch starts at, pending or running.
fn at_cursor(conn: &mut AnyConnection, batch: &BatchResult) -> Result<bool, Failure> {
    let found: i64 = at_start!(batch, |key| key.count().get_result(conn)?);
    Ok(found > 0)
}
