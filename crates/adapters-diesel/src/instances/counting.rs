//! What changes of instances add up to: their invocations' counts and the daily totals of
//! their steps, kept under their invocations' modes.

use std::collections::{BTreeMap, HashMap};

use diesel::prelude::*;
use domain::flow::steps::run::{self, Records};
use domain::flow::steps::InstanceState;
use domain::trigger::instances::FlowInstance;
use domain::trigger::Mode;

use crate::counts::Counts;
use crate::db::{AnyConnection, Failure};
use crate::schema::invocations;
use crate::totals::Totals;

/// The modes of invocations, by (environment, id): what their instances' daily totals are kept
/// under. One read per environment.
fn modes<'a>(
    conn: &mut AnyConnection,
    keys: impl IntoIterator<Item = (&'a str, &'a str)>,
) -> Result<HashMap<(String, String), &'static str>, Failure> {
    let mut by_env: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for (env, invocation) in keys {
        by_env.entry(env).or_default().push(invocation);
    }
    let mut out = HashMap::new();
    for (env, mut ids) in by_env {
        ids.sort_unstable();
        ids.dedup();
        for chunk in ids.chunks(500) {
            let rows: Vec<(String, String)> = invocations::table
                .filter(invocations::environment_id.eq(env))
                .filter(invocations::id.eq_any(chunk))
                .select((invocations::id, invocations::mode))
                .load(conn)?;
            for (id, mode) in rows {
                let mode = Mode::parse(&mode).unwrap_or(Mode::Live).as_str();
                out.insert((env.to_owned(), id), mode);
            }
        }
    }
    Ok(out)
}

/// What the changes of instances add up to: their invocations' counts and the daily totals of
/// their steps. `changes` are each instance as it is now, with its records and state before
/// (none for a new one).
pub(super) fn count<'a>(
    conn: &mut AnyConnection,
    changes: &[(&'a FlowInstance, Option<(&'a Records, InstanceState)>)],
    totals: &mut Totals,
) -> Result<(), Failure> {
    let modes = modes(
        conn,
        changes
            .iter()
            .map(|(i, _)| (i.environment_id.as_str(), i.invocation_id.as_str())),
    )?;
    let mut counts = Counts::new();
    for (instance, before) in changes {
        let mut deltas = BTreeMap::new();
        run::tally(*before, (&instance.records, instance.state), &mut deltas);
        let key = (
            instance.environment_id.clone(),
            instance.invocation_id.clone(),
        );
        let mode = modes.get(&key).copied().unwrap_or(Mode::Live.as_str());
        totals.steps(instance, mode, &deltas);
        let sums = counts.entry(key).or_default();
        for (metric, n) in deltas {
            // `reached` and `done` follow from the others when read: not stored.
            if matches!(metric.1.as_str(), "reached" | "done") {
                continue;
            }
            *sums.entry(metric).or_insert(0) += n;
        }
    }
    crate::counts::add(conn, &counts)
}
