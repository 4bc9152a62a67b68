//! Cancels and flows that wait (contract §21): a cancel batch stops the stored instances of the
//! cards it takes, and a publish with `cancelActiveInstances` accepts a cancel task of the
//! instances of older versions.

use diesel::prelude::*;
use domain::cancel::CancelStatus;
use domain::card::InstanceStatus;
use domain::flow::steps::{run, InstanceState};
use domain::Timestamp;

use super::task::{TaskRow, CHUNK};
use crate::db::{AnyConnection, Failure};
use crate::error::write_number;
use crate::millis::At;
use crate::schema::{cancel_tasks, flow_instances};

/// Inside a publish's transaction (contract §21, `cancelActiveInstances`): the cancel task of
/// the flow's active instances of the versions before the one published, cards included. The
/// flow's row is locked by the publish's own update, as [`CancelRepository::create`] locks it.
pub(crate) fn insert_publish_cancel(
    conn: &mut AnyConnection,
    environment_id: &str,
    flow_id: &str,
    older: &domain::flow::CancelOlder,
) -> Result<(), Failure> {
    let row = TaskRow {
        id: older.task_id.clone(),
        environment_id: environment_id.to_owned(),
        flow_id: flow_id.to_owned(),
        end_user_id: None,
        invocation_id: None,
        flow_version: None,
        before_version: Some(
            write_number("cancel flow version", older.before_version).map_err(Failure::Domain)?,
        ),
        cancel_cards: true,
        status: CancelStatus::Processing.as_str().into(),
        expected: None,
        actual: 0,
        cards_expected: None,
        cards_actual: 0,
        errors: "[]".into(),
        lease_until: None,
        created: older.at.naive_utc(),
        updated: older.at.naive_utc(),
    };
    diesel::insert_into(cancel_tasks::table)
        .values(&row)
        .execute(conn)?;
    crate::db::notices::queued(crate::Work::Cancels);
    Ok(())
}

/// Inside a cancel's transaction: these instances of the environment, when still active, are
/// cancelled (nothing of theirs runs again), and their invocations' counts follow.
pub(super) fn cancel_instances(
    conn: &mut AnyConnection,
    environment_id: &str,
    ids: &[&str],
    at: Timestamp,
) -> Result<(), Failure> {
    let mut counts = crate::counts::Counts::new();
    for chunk in ids.chunks(CHUNK) {
        let active = || {
            flow_instances::table
                .filter(flow_instances::environment_id.eq(environment_id))
                .filter(flow_instances::id.eq_any(chunk))
                .filter(flow_instances::status.eq(InstanceStatus::Active.as_str()))
        };
        // Locked on PostgreSQL, so that a waits save committed meanwhile is either seen here or
        // finds the row cancelled; counted only as this update changes them.
        let rows: Vec<(String, String)> = match &mut *conn {
            AnyConnection::Postgresql(c) => active()
                .select((flow_instances::invocation_id, flow_instances::steps))
                .order(flow_instances::id)
                .for_update()
                .load(c)?,
            AnyConnection::Sqlite(c) => active()
                .select((flow_instances::invocation_id, flow_instances::steps))
                .load(c)?,
        };
        if rows.is_empty() {
            continue;
        }
        for (invocation, steps) in rows {
            // Records that cannot be read still count the instance as cancelled.
            let before = run::decode(&steps).unwrap_or_default();
            let mut after = before.clone();
            run::cancel(&mut after, at);
            let mut deltas = std::collections::BTreeMap::new();
            run::tally(
                Some((&before, InstanceState::Active)),
                (&after, InstanceState::Cancelled),
                &mut deltas,
            );
            let sums = counts
                .entry((environment_id.to_owned(), invocation))
                .or_default();
            // As the waits loop stores them: `reached` and `done` follow from the others.
            for (metric, n) in deltas {
                if !matches!(metric.1.as_str(), "reached" | "done") {
                    *sums.entry(metric).or_insert(0) += n;
                }
            }
        }
        diesel::update(active())
            .set((
                flow_instances::status.eq(InstanceStatus::Cancelled.as_str()),
                flow_instances::due.eq(None::<At>),
                flow_instances::lease_until.eq(None::<At>),
                flow_instances::revision.eq(flow_instances::revision + 1),
                flow_instances::updated.eq(At::of(at)),
            ))
            .execute(conn)?;
    }
    crate::counts::add(conn, &counts)
}
