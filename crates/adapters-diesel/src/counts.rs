//! What an invocation's flow instances did, counted as they go (`instance_counts`), in the
//! transaction that changes them (contract §21; the metrics are those of
//! [`domain::flow::steps::run::tally`]).

use std::collections::BTreeMap;

use diesel::prelude::*;
use diesel::upsert::excluded;

use crate::db::{AnyConnection, Failure};
use crate::schema::{instance_counts, invocations};
use domain::trigger::Mode;

/// Counts by (environment, invocation), then by (step id, metric).
pub(crate) type Counts = BTreeMap<(String, String), BTreeMap<(String, String), i64>>;

#[derive(Insertable)]
#[diesel(table_name = instance_counts)]
struct CountRow<'a> {
    environment_id: &'a str,
    invocation_id: &'a str,
    step_id: &'a str,
    metric: &'a str,
    n: i64,
}

/// Adds `counts` to the stored ones, in key order: on PostgreSQL one upsert statement per 500
/// rows (a recording of 256 one-user starts adds three rows for each, and a round trip each
/// would be most of its transaction), on SQLite one per row, which is no round trip there.
pub(crate) fn add(conn: &mut AnyConnection, counts: &Counts) -> Result<(), Failure> {
    let rows: Vec<CountRow<'_>> = counts
        .iter()
        .flat_map(|((env, invocation), deltas)| {
            deltas
                .iter()
                .filter(|(_, n)| **n != 0)
                .map(move |((step, metric), n)| CountRow {
                    environment_id: env,
                    invocation_id: invocation,
                    step_id: step,
                    metric,
                    n: *n,
                })
        })
        .collect();
    macro_rules! upsert {
        ($rows:expr, $c:expr) => {
            diesel::insert_into(instance_counts::table)
                .values($rows)
                .on_conflict((
                    instance_counts::environment_id,
                    instance_counts::invocation_id,
                    instance_counts::step_id,
                    instance_counts::metric,
                ))
                .do_update()
                .set(instance_counts::n.eq(instance_counts::n + excluded(instance_counts::n)))
                .execute($c)
        };
    }
    match &mut *conn {
        // Each key is once in `counts`, so no statement updates a row twice.
        AnyConnection::Postgresql(c) => {
            for chunk in rows.chunks(500) {
                upsert!(chunk, c)?;
            }
        }
        // diesel writes no multi-row upsert for SQLite; a row is no round trip there.
        AnyConnection::Sqlite(c) => {
            for row in &rows {
                upsert!(row, c)?;
            }
        }
    }
    Ok(())
}

/// The stored counts of an invocation: `(step id, metric, n)`.
pub(crate) fn of(
    conn: &mut AnyConnection,
    environment_id: &str,
    invocation_id: &str,
) -> Result<Vec<(String, String, i64)>, Failure> {
    Ok(instance_counts::table
        .filter(instance_counts::environment_id.eq(environment_id))
        .filter(instance_counts::invocation_id.eq(invocation_id))
        .select((
            instance_counts::step_id,
            instance_counts::metric,
            instance_counts::n,
        ))
        .load(conn)?)
}

/// How many instances wait at each step of every invocation of `(flow, version, mode)`.
pub(crate) fn waiting(
    conn: &mut AnyConnection,
    environment_id: &str,
    flow_id: &str,
    flow_version: i32,
    mode: Mode,
) -> Result<Vec<(String, u64)>, Failure> {
    let of_version = invocations::table
        .filter(invocations::environment_id.eq(environment_id))
        .filter(invocations::flow_id.eq(flow_id))
        .filter(invocations::flow_version.eq(flow_version))
        .filter(invocations::mode.eq(mode.as_str()))
        .select(invocations::id);
    let rows: Vec<(String, i64)> = instance_counts::table
        .filter(instance_counts::environment_id.eq(environment_id))
        .filter(instance_counts::invocation_id.eq_any(of_version))
        .filter(instance_counts::metric.eq("waiting"))
        .filter(instance_counts::step_id.ne(""))
        .filter(instance_counts::n.gt(0))
        .select((instance_counts::step_id, instance_counts::n))
        .load(conn)?;
    let mut by_step: BTreeMap<String, u64> = BTreeMap::new();
    for (step, n) in rows {
        let n = u64::try_from(n).unwrap_or(0);
        let sum = by_step.entry(step).or_insert(0);
        *sum = sum.saturating_add(n);
    }
    Ok(by_step.into_iter().collect())
}
