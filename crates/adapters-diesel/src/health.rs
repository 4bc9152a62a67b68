use std::sync::{Arc, LazyLock};

use async_trait::async_trait;
use diesel::sql_types::{BigInt, Nullable};
use diesel::RunQueryDsl;
use domain::health::{Backlog, Pool, Queue};
use domain::push::PushJobStatus;
use domain::trigger::InvocationStatus;
use domain::webhook::DeliveryStatus;
use domain::{Clock, HealthProbe, StorageError};

use crate::db::AnyConnection;
use crate::Database;

/// Ready when a pooled connection answers and no embedded migration is pending. Reads the
/// queues' backlog by `clock`, the database's time (contract §19; the host's until
/// [`DieselHealthProbe::with_clock`] says otherwise, which on SQLite is the database's).
pub struct DieselHealthProbe {
    db: Database,
    clock: Arc<dyn Clock>,
}

impl DieselHealthProbe {
    /// Over `db`.
    pub fn new(db: Database) -> Self {
        Self {
            db,
            clock: Arc::new(domain::SystemClock),
        }
    }

    /// Ages the backlog by `clock` (the service's `DatabaseClock`).
    pub fn with_clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }
}

/// The invocations not yet run to the end, and the earliest recorded. One count per status,
/// each through its partial index (`invocations_pending`, `invocations_running`), which holds
/// `created` in order; written literally, since a bound status cannot choose a partial index.
static INVOCATIONS: LazyLock<String> = LazyLock::new(|| {
    let count = |status: InvocationStatus| {
        format!(
            "SELECT COUNT(*) AS n, MIN(created) AS oldest FROM invocations WHERE status = '{}'",
            status.as_str()
        )
    };
    format!(
        "SELECT CAST(SUM(n) AS BIGINT) AS pending, MIN(oldest) AS oldest FROM ({} UNION ALL {}) \
         AS queues",
        count(InvocationStatus::Pending),
        count(InvocationStatus::Running)
    )
});

/// The deliveries not yet done, and when the first of them was due: a range of the
/// `webhook_deliveries_due` index (status, next_attempt_at).
static WEBHOOK_DELIVERIES: LazyLock<String> = LazyLock::new(|| {
    format!(
        "SELECT COUNT(*) AS pending, MIN(next_attempt_at) AS oldest \
         FROM webhook_deliveries WHERE status = '{}'",
        DeliveryStatus::Pending.as_str()
    )
});

/// The pushes not yet done, and when the first of them was due: the partial `push_jobs_due`
/// index (next_attempt_at, pending rows only).
static PUSH_JOBS: LazyLock<String> = LazyLock::new(|| {
    format!(
        "SELECT COUNT(*) AS pending, MIN(next_attempt_at) AS oldest \
         FROM push_jobs WHERE status = '{}'",
        PushJobStatus::Pending.as_str()
    )
});

/// A queue's pending items, and the earliest time one of them was due.
#[derive(diesel::QueryableByName)]
struct Waiting {
    #[diesel(sql_type = BigInt)]
    pending: i64,
    /// `Millis` reads the invocations' integer instants and the other queues' text ones alike.
    #[diesel(sql_type = Nullable<crate::millis::Millis>)]
    oldest: Option<chrono::NaiveDateTime>,
}

fn waiting(conn: &mut AnyConnection, query: &str) -> Result<Waiting, diesel::result::Error> {
    diesel::sql_query(query).get_result(conn)
}

#[async_trait]
impl HealthProbe for DieselHealthProbe {
    async fn ready(&self) -> Result<(), StorageError> {
        if self.db.migrations_current().await? {
            Ok(())
        } else {
            Err(StorageError::Unavailable("migrations pending".into()))
        }
    }

    async fn backlog(&self) -> Result<Backlog, StorageError> {
        let [invocations, webhook_deliveries, push_jobs] = self
            .db
            .run(|conn| {
                Ok([
                    waiting(conn, &INVOCATIONS)?,
                    waiting(conn, &WEBHOOK_DELIVERIES)?,
                    waiting(conn, &PUSH_JOBS)?,
                ])
            })
            .await?;
        let now = self.clock.now();
        let queue = |w: Waiting| {
            Queue::at(
                u64::try_from(w.pending).unwrap_or(0),
                w.oldest.map(|t| t.and_utc()),
                now,
            )
        };
        Ok(Backlog {
            invocations: queue(invocations),
            webhook_deliveries: queue(webhook_deliveries),
            push_jobs: queue(push_jobs),
        })
    }

    fn pool(&self) -> Pool {
        self.db.pool_state()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The backlog is read at every scrape: each of its counts must stay within an index,
    /// never a scan of a table that holds every invocation, delivery and push ever made.
    #[test]
    fn backlog_counts_read_indexes_not_tables() {
        for (query, table, indexes) in [
            (
                INVOCATIONS.as_str(),
                "invocations",
                &["invocations_pending", "invocations_running"][..],
            ),
            (
                WEBHOOK_DELIVERIES.as_str(),
                "webhook_deliveries",
                &["webhook_deliveries_due"][..],
            ),
            (PUSH_JOBS.as_str(), "push_jobs", &["push_jobs_due"][..]),
        ] {
            let plan = crate::testing::sqlite_plan(query);
            for index in indexes {
                assert!(plan.iter().any(|d| d.contains(index)), "{index}: {plan:?}");
            }
            // Every step on the table goes through an index that holds what it reads.
            let on_table = format!(" {table} ");
            assert!(
                plan.iter()
                    .filter(|d| format!("{d} ").contains(&on_table))
                    .all(|d| d.contains("COVERING INDEX")),
                "{plan:?}"
            );
        }
    }
}
