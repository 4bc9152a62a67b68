//! Saves fenced by an instance's revision: a save of an instance read at an older revision
//! (claimed again since, or woken by a card that closed) changes nothing.

use diesel::prelude::*;
use domain::trigger::instances::FlowInstance;

use super::row::InstanceRow;
use crate::db::{AnyConnection, Failure};
use crate::millis::At;
use crate::schema::flow_instances;

/// Stores each of `instances` while its revision is the stored one: whether each was. In the
/// order given (the caller's, by environment and id). On PostgreSQL 500 to a statement
/// (`UPDATE ... FROM unnest(...)`), a round trip each being most of a save of due waits; on
/// SQLite one statement each, which is no round trip there.
pub(super) fn save_fenced<'a>(
    conn: &mut AnyConnection,
    instances: impl Iterator<Item = &'a FlowInstance>,
) -> Result<Vec<bool>, Failure> {
    let instances: Vec<&FlowInstance> = instances.collect();
    let AnyConnection::Postgresql(c) = &mut *conn else {
        return instances.iter().map(|i| save_one(conn, i)).collect();
    };
    #[derive(diesel::QueryableByName)]
    struct Saved {
        #[diesel(sql_type = diesel::sql_types::Text)]
        environment_id: String,
        #[diesel(sql_type = diesel::sql_types::Text)]
        id: String,
    }
    let mut saved = std::collections::HashSet::new();
    for chunk in instances.chunks(500) {
        use diesel::sql_types::{Array, BigInt, Nullable, Text, Timestamp};
        let rows: Vec<InstanceRow> = chunk
            .iter()
            .map(|i| InstanceRow::of(i))
            .collect::<Result<_, _>>()
            .map_err(Failure::Domain)?;
        let found: Vec<Saved> = diesel::sql_query(
            "UPDATE flow_instances AS f SET status = u.status, steps = u.steps, due = u.due, \
             lease_until = NULL, revision = f.revision + 1, updated = u.updated \
             FROM unnest($1::text[], $2::text[], $3::bigint[], $4::text[], $5::text[], \
             $6::timestamp[], $7::timestamp[]) AS u (environment_id, id, revision, status, steps, \
             due, updated) \
             WHERE f.environment_id = u.environment_id AND f.id = u.id AND f.revision = u.revision \
             RETURNING f.environment_id, f.id",
        )
        .bind::<Array<Text>, _>(
            rows.iter()
                .map(|r| r.environment_id.clone())
                .collect::<Vec<_>>(),
        )
        .bind::<Array<Text>, _>(rows.iter().map(|r| r.id.clone()).collect::<Vec<_>>())
        .bind::<Array<BigInt>, _>(rows.iter().map(|r| r.revision).collect::<Vec<_>>())
        .bind::<Array<Text>, _>(rows.iter().map(|r| r.status.clone()).collect::<Vec<_>>())
        .bind::<Array<Text>, _>(rows.iter().map(|r| r.steps.clone()).collect::<Vec<_>>())
        .bind::<Array<Nullable<Timestamp>>, _>(
            rows.iter().map(|r| r.due.map(|d| d.0)).collect::<Vec<_>>(),
        )
        .bind::<Array<Timestamp>, _>(rows.iter().map(|r| r.updated.0).collect::<Vec<_>>())
        .load(c)?;
        saved.extend(found.into_iter().map(|s| (s.environment_id, s.id)));
    }
    Ok(instances
        .iter()
        .map(|i| saved.contains(&(i.environment_id.clone(), i.id.clone())))
        .collect())
}

/// Stores `instance` while its revision is the stored one; false (nothing written) otherwise.
fn save_one(conn: &mut AnyConnection, instance: &FlowInstance) -> Result<bool, Failure> {
    let row = InstanceRow::of(instance).map_err(Failure::Domain)?;
    let changed = diesel::update(
        flow_instances::table
            .filter(flow_instances::environment_id.eq(&row.environment_id))
            .filter(flow_instances::id.eq(&row.id))
            .filter(flow_instances::revision.eq(row.revision)),
    )
    .set((
        flow_instances::status.eq(&row.status),
        flow_instances::steps.eq(&row.steps),
        flow_instances::due.eq(row.due),
        flow_instances::lease_until.eq(None::<At>),
        flow_instances::revision.eq(flow_instances::revision + 1),
        flow_instances::updated.eq(row.updated),
    ))
    .execute(conn)?;
    Ok(changed == 1)
}
