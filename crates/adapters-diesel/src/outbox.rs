//! What the two outboxes (webhook deliveries, push jobs) share: the read, in every transaction
//! that writes events, of what is enabled in the environments of those events.

use diesel::pg::PgConnection;
use diesel::sqlite::SqliteConnection;

use crate::db::{AnyConnection, Failure};

/// The rows of a read over several environments: on SQLite by `one`, one environment at a time
/// (diesel prepares an `IN (...)` list again at every execution on SQLite, where `= ?` it
/// prepares once per connection; a transaction's events rarely come from more than one
/// environment), on PostgreSQL by `all` at once (`= ANY($1)`: one statement whatever their
/// number). Preparing the webhook subscriptions' `IN` list in every transaction showed in the
/// profile of the recorder's writing thread under a `/start` load on SQLite.
pub(crate) fn per_environment<T>(
    conn: &mut AnyConnection,
    envs: &[&str],
    one: impl Fn(&mut SqliteConnection, &str) -> diesel::QueryResult<Vec<T>>,
    all: impl FnOnce(&mut PgConnection, &[&str]) -> diesel::QueryResult<Vec<T>>,
) -> Result<Vec<T>, Failure> {
    Ok(match conn {
        AnyConnection::Sqlite(c) => {
            let mut rows = Vec::new();
            for env in envs {
                rows.extend(one(c, env)?);
            }
            rows
        }
        AnyConnection::Postgresql(c) => all(c, envs)?,
    })
}

/// The enabled rows of `table` (a table with `environment_id` and `enabled` columns) in the
/// environments `envs`, as a tuple of `columns`, by [`per_environment`].
macro_rules! enabled_in {
    ($conn:expr, $envs:expr, $table:ident, $columns:tt) => {
        $crate::outbox::per_environment(
            $conn,
            $envs,
            |c, env| $crate::outbox::enabled_in!(@read c, $table, $table::environment_id.eq(env),
                $columns),
            |c, envs| $crate::outbox::enabled_in!(@read c, $table,
                $table::environment_id.eq_any(envs), $columns),
        )
    };
    (@read $c:ident, $table:ident, $envs:expr, ($($column:ident),+ $(,)?)) => {
        $table::table
            .filter($envs)
            .filter($table::enabled.eq(true))
            .select(($($table::$column),+))
            .load($c)
    };
}
pub(crate) use enabled_in;

#[cfg(test)]
mod tests {
    #[test]
    fn the_enabled_subscriptions_and_platforms_are_read_by_statements_prepared_once_on_sqlite() {
        let envs = ["env_a", "env_b"];
        crate::testing::sqlite_keeps_one_read_of("webhook_subscriptions", |conn| {
            let found = crate::webhooks::subscriptions_of(conn, &envs);
            assert!(matches!(found, Ok(rows) if rows.is_empty()));
        });
        crate::testing::sqlite_keeps_one_read_of("push_platforms", |conn| {
            let found = crate::push_jobs::enabled_platforms(conn, &envs);
            assert!(matches!(found, Ok(rows) if rows.is_empty()));
        });
    }
}
