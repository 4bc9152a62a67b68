//! The cancel markers a save checks: the cancels of a flow accepted since a batch's invocation
//! was created take precedence over its cards (contract §6).

use chrono::NaiveDateTime;
use diesel::prelude::*;
use domain::cancel::CancelTask;
use domain::trigger::BatchResult;
use domain::Timestamp;
use std::collections::HashMap;

use crate::cancel::{task, TaskRow};
use crate::db::{AnyConnection, Failure};
use crate::error::read_number;
use crate::schema::{action_flows, cancel_tasks, invocations};

/// Inside an engine save's transaction: the cancel markers of a flow accepted since `since`
/// (the oldest invocation of the flow in the save). On PostgreSQL the flow's row is
/// share-locked first, so a cancel being recorded (which takes it exclusively) is either seen
/// here or sees this save's cards.
pub(crate) fn markers_since(
    conn: &mut AnyConnection,
    environment_id: &str,
    flow_id: &str,
    since: Timestamp,
) -> Result<Vec<CancelTask>, Failure> {
    if let AnyConnection::Postgresql(c) = &mut *conn {
        action_flows::table
            .filter(action_flows::id.eq(flow_id))
            .select(action_flows::id)
            .for_share()
            .load::<String>(c)?;
    }
    let rows: Vec<TaskRow> = cancel_tasks::table
        .filter(cancel_tasks::environment_id.eq(environment_id))
        .filter(cancel_tasks::flow_id.eq(flow_id))
        .filter(cancel_tasks::created.ge(since.naive_utc()))
        .select(TaskRow::as_select())
        .load(conn)?;
    rows.into_iter()
        .map(task)
        .collect::<Result<_, _>>()
        .map_err(Failure::Domain)
}

/// (environment, invocation id) → the invocation's (flow, version, created).
pub(crate) type Known = HashMap<(String, String), (String, u32, NaiveDateTime)>;

/// Applies the cancels accepted meanwhile to the batches (contract §6: they take precedence).
/// One read of the batches' invocations and one of each flow's markers, for the whole save.
pub(crate) fn apply_cancels(
    conn: &mut AnyConnection,
    batches: &mut [BatchResult],
) -> Result<(), Failure> {
    let known = known(conn, batches)?;
    apply_markers(conn, batches, &known)
}

/// The batches' invocations still stored: (environment, id) -> (flow, version, created), one
/// read per environment (nearly always one), on the primary key.
pub(crate) fn known(conn: &mut AnyConnection, batches: &[BatchResult]) -> Result<Known, Failure> {
    let mut by_env: HashMap<&str, Vec<&str>> = HashMap::new();
    for batch in batches.iter() {
        by_env
            .entry(batch.environment_id.as_str())
            .or_default()
            .push(batch.invocation_id.as_str());
    }
    let mut known: Known = HashMap::new();
    for (env, ids) in by_env {
        let rows: Vec<(String, String, i32, NaiveDateTime)> = invocations::table
            .filter(invocations::environment_id.eq(env))
            .filter(invocations::id.eq_any(&ids))
            .select((
                invocations::id,
                invocations::flow_id,
                invocations::flow_version,
                invocations::created,
            ))
            .load(conn)?;
        for (id, flow, version, created) in rows {
            let version =
                read_number("invocation flow version", version).map_err(Failure::Domain)?;
            known.insert((env.to_owned(), id), (flow, version, created));
        }
    }
    Ok(known)
}

/// Each flow's cancel markers accepted since the oldest of its `known` invocations among
/// `batches`: one read per flow. Flows without any are left out.
pub(crate) fn markers_for<'a>(
    conn: &mut AnyConnection,
    batches: impl Iterator<Item = &'a BatchResult>,
    known: &Known,
) -> Result<Markers, Failure> {
    let mut since: HashMap<(&str, &str), NaiveDateTime> = HashMap::new();
    for batch in batches {
        if let Some((flow, _, created)) =
            known.get(&(batch.environment_id.clone(), batch.invocation_id.clone()))
        {
            let oldest = since
                .entry((batch.environment_id.as_str(), flow.as_str()))
                .or_insert(*created);
            *oldest = (*oldest).min(*created);
        }
    }
    let mut markers = HashMap::new();
    for ((env, flow), oldest) in since {
        let found = markers_since(conn, env, flow, oldest.and_utc())?;
        if !found.is_empty() {
            markers.insert((env.to_owned(), flow.to_owned()), found);
        }
    }
    Ok(markers)
}

/// (environment, flow) → its cancel markers.
pub(crate) type Markers = HashMap<(String, String), Vec<CancelTask>>;

/// Applies to each batch of a `known` invocation its flow's cancel markers accepted since the
/// invocation was created: one read of each flow's markers.
pub(crate) fn apply_markers(
    conn: &mut AnyConnection,
    batches: &mut [BatchResult],
    known: &Known,
) -> Result<(), Failure> {
    let markers = markers_for(conn, batches.iter(), known)?;
    if markers.is_empty() {
        return Ok(());
    }
    for batch in batches.iter_mut() {
        let key = (batch.environment_id.clone(), batch.invocation_id.clone());
        if let Some((flow, version, created)) = known.get(&key) {
            if let Some(found) = markers.get(&(batch.environment_id.clone(), flow.clone())) {
                batch.apply_cancels(found, *version, created.and_utc());
            }
        }
    }
    Ok(())
}
