//! The slots of an environment's bulk work (contract §10): bulk invocations pending or
//! running, and processing tasks not queued.

use diesel::prelude::*;
use domain::bulk::BulkStatus;
use domain::trigger::InvocationStatus;

use crate::db::{AnyConnection, Failure};
use crate::error::read_number;
use crate::schema::bulk_tasks;

/// The statuses in which a bulk invocation holds a slot, as the partial index
/// `invocations_bulk` spells them: written literally, since a bound status cannot choose a
/// partial index.
pub(super) static HOLDING: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
    format!(
        "status IN ('{}', '{}')",
        InvocationStatus::Pending.as_str(),
        InvocationStatus::Running.as_str()
    )
});

/// The count of `$env`'s bulk invocations that hold a slot, read through `invocations_bulk`:
/// the bare column, not `= ?`, and [`HOLDING`] are the partial index's own condition.
macro_rules! held_invocations {
    ($env:expr) => {
        crate::schema::invocations::table
            .filter(crate::schema::invocations::environment_id.eq($env))
            .filter(crate::schema::invocations::bulk)
            .filter(diesel::dsl::sql::<diesel::sql_types::Bool>(
                &*crate::bulk::slots::HOLDING,
            ))
            .count()
    };
}

/// Slots of `env` held (contract §10): bulk invocations pending or running, and processing
/// tasks not queued.
pub(crate) fn slots_held(conn: &mut AnyConnection, env: &str) -> Result<u64, Failure> {
    let invocations: i64 = held_invocations!(env).get_result(conn)?;
    let tasks: i64 = bulk_tasks::table
        .filter(bulk_tasks::environment_id.eq(env))
        .filter(bulk_tasks::status.eq(BulkStatus::Processing.as_str()))
        .filter(bulk_tasks::queued.eq(false))
        .count()
        .get_result(conn)?;
    let count = |what: &str, n: i64| -> Result<u64, Failure> {
        read_number(what, n).map_err(Failure::Domain)
    };
    Ok(count("count of bulk invocations", invocations)? + count("count of bulk tasks", tasks)?)
}

#[cfg(test)]
mod tests {
    #[test]
    fn held_slots_are_counted_through_their_partial_index() {
        use diesel::prelude::*;
        let query = held_invocations!("env_a");
        let plan = crate::testing::sqlite_query_plan(&query);
        assert!(
            plan.iter().any(|d| d.contains("invocations_bulk")),
            "{plan:?}"
        );
    }
}
