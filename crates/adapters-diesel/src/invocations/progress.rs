//! A batch's progress saved in its invocation's row, only from the cursor the batch started
//! at: alike batches (one-user invocations) 500 to a statement, the others one by one.

use std::collections::HashMap;

use chrono::NaiveDateTime;
use diesel::prelude::*;
use domain::trigger::{BatchResult, InvocationStatus};

use crate::db::{AnyConnection, Failure};
use crate::error::write_number;
use crate::millis::At;
use crate::rows::*;
use crate::schema::invocations;
use crate::totals::Ended;

/// Saves the batches' progress, each only from the cursor it started at; None for a batch
/// whose invocation is no longer there (another worker took it over and saved this batch
/// first), and nothing of that batch is to be written; else what its invocation is counted
/// under in the daily totals.
///
/// Batches that start at no cursor and change their invocations alike (the one batch of each
/// one-user invocation of a `/start` load or a CSV task) are saved with one statement per
/// 500, the saved ones told apart by `RETURNING`; the others one by one.
pub(super) fn save_progress(
    conn: &mut AnyConnection,
    batches: &[BatchResult],
) -> Result<Vec<Option<Ended>>, Failure> {
    let mut kept: Vec<Option<Ended>> = vec![None; batches.len()];
    let mut alike: HashMap<ProgressKey, Vec<usize>> = HashMap::new();
    for (i, batch) in batches.iter().enumerate() {
        match batch.from_cursor {
            None => alike.entry(ProgressKey::of(batch)).or_default().push(i),
            Some(_) => kept[i] = save_one(conn, batch)?,
        }
    }
    for (key, members) in alike {
        if let [only] = members[..] {
            kept[only] = save_one(conn, &batches[only])?;
            continue;
        }
        let batch = &batches[members[0]];
        for chunk in members.chunks(INSERT_CHUNK) {
            let ids: Vec<&str> = chunk
                .iter()
                .map(|&i| batches[i].invocation_id.as_str())
                .collect();
            let saved: Vec<(String, Ended)> = diesel::update(
                invocations::table
                    .filter(invocations::environment_id.eq(&key.environment_id))
                    .filter(invocations::id.eq_any(&ids))
                    .filter(invocations::cursor.is_null())
                    .filter(
                        invocations::status
                            .eq(InvocationStatus::Pending.as_str())
                            .or(invocations::status.eq(InvocationStatus::Running.as_str())),
                    ),
            )
            .set(progress(batch)?)
            .returning((invocations::id, ENDED))
            .get_results(conn)?;
            let mut saved: HashMap<String, Ended> = saved.into_iter().collect();
            for &i in chunk {
                kept[i] = saved.remove(&batches[i].invocation_id);
            }
        }
    }
    Ok(kept)
}

/// What a batch that starts at no cursor changes in its invocation, besides its key.
#[derive(PartialEq, Eq, Hash)]
pub(super) struct ProgressKey {
    environment_id: String,
    status: &'static str,
    cursor: Option<String>,
    users_targeted: u64,
    cards_created: u64,
    errors: String,
    updated: NaiveDateTime,
    lease_until: Option<NaiveDateTime>,
}

impl ProgressKey {
    fn of(batch: &BatchResult) -> Self {
        ProgressKey {
            environment_id: batch.environment_id.clone(),
            status: batch.status.as_str(),
            cursor: batch.cursor.clone(),
            users_targeted: batch.users_targeted,
            cards_created: batch.cards_created,
            errors: errors_text(batch),
            updated: batch.updated.naive_utc(),
            lease_until: batch.lease_until.map(|t| t.naive_utc()),
        }
    }
}

/// The changes a batch makes to its invocation; an error when its counts are out of their
/// columns' range.
#[allow(clippy::type_complexity)]
pub(super) fn progress(
    batch: &BatchResult,
) -> Result<
    (
        diesel::dsl::Eq<invocations::status, &'static str>,
        diesel::dsl::Eq<invocations::cursor, Option<String>>,
        diesel::dsl::Eq<
            invocations::users_targeted,
            diesel::dsl::Add<invocations::users_targeted, i64>,
        >,
        diesel::dsl::Eq<
            invocations::cards_created,
            diesel::dsl::Add<invocations::cards_created, i64>,
        >,
        diesel::dsl::Eq<invocations::errors, String>,
        diesel::dsl::Eq<invocations::lease_until, Option<At>>,
        diesel::dsl::Eq<invocations::updated, At>,
    ),
    Failure,
> {
    let users_targeted: i64 =
        write_number("batch users targeted", batch.users_targeted).map_err(Failure::Domain)?;
    let cards_created: i64 =
        write_number("batch cards created", batch.cards_created).map_err(Failure::Domain)?;
    Ok((
        invocations::status.eq(batch.status.as_str()),
        invocations::cursor.eq(batch.cursor.clone()),
        invocations::users_targeted.eq(invocations::users_targeted + users_targeted),
        invocations::cards_created.eq(invocations::cards_created + cards_created),
        invocations::errors.eq(errors_text(batch)),
        // The claim ends with the batch (the next one may be claimed at once), unless the
        // worker goes on with the next one itself.
        invocations::lease_until.eq(batch.lease_until.map(|t| At(t.naive_utc()))),
        invocations::updated.eq(At(batch.updated.naive_utc())),
    ))
}

/// What an invocation is counted under in the daily totals.
const ENDED: (
    invocations::environment_id,
    invocations::flow_id,
    invocations::flow_version,
    invocations::mode,
    invocations::created,
) = (
    invocations::environment_id,
    invocations::flow_id,
    invocations::flow_version,
    invocations::mode,
    invocations::created,
);

/// `$then` of `key`, the query of `$batch`'s invocation at the batch's starting point: its
/// cursor and a status not yet final (a one-batch invocation keeps a null cursor from start
/// to end). (`eq` OR `eq`, not `eq_any`: diesel caches the prepared statement only for a fixed
/// number of binds, and this runs once per invocation — re-parsing it was a large share of the
/// server's CPU while a CSV task ran.) A macro: the two cursors' queries are of two types.
macro_rules! at_start {
    ($batch:expr, |$key:ident| $then:expr) => {{
        let batch: &BatchResult = $batch;
        let start = invocations::table
            .filter(
                invocations::environment_id
                    .eq(&batch.environment_id)
                    .and(invocations::id.eq(&batch.invocation_id)),
            )
            .filter(
                invocations::status
                    .eq(InvocationStatus::Pending.as_str())
                    .or(invocations::status.eq(InvocationStatus::Running.as_str())),
            );
        match &batch.from_cursor {
            Some(from) => {
                let $key = start.filter(invocations::cursor.eq(from));
                $then
            }
            None => {
                let $key = start.filter(invocations::cursor.is_null());
                $then
            }
        }
    }};
}
pub(super) use at_start;

/// Saves one batch's progress, only from the cursor it started at; None when its invocation
/// is no longer there, else what it is counted under.
pub(super) fn save_one(
    conn: &mut AnyConnection,
    batch: &BatchResult,
) -> Result<Option<Ended>, Failure> {
    Ok(at_start!(batch, |key| diesel::update(key)
        .set(progress(batch)?)
        .returning(ENDED)
        .get_result(conn)
        .optional()?))
}
