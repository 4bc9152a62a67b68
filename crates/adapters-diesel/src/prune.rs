//! Pruning (contract §14, [`PruneRepository`]): the rows a cut-off reaches, in transactions of
//! at most a batch of rows, with what only they use; and SQLite's incremental vacuum.
//!
//! Cards, events, deliveries, attempts and push jobs are found by their ids, which start
//! with the time they were minted (a ULID after the kind's prefix): the ids minted before the
//! cut-off are one range of the primary key, and the row's own time and status decide within
//! it. A batch starts after the last id the batch before looked at, so rows kept (an open
//! card, an event a pending delivery is still to be built from) are looked at once per pass.
//! Final invocations, whose ids a caller may choose, are found through the partial index
//! `invocations_ended`, a batch after the last one the batch before looked at; one with a card
//! of an active instance that can still be cancelled stays (cancel tasks find a flow's cards
//! through its invocations).

use async_trait::async_trait;
use chrono::NaiveDateTime;
use diesel::prelude::*;
use domain::retention::{PruneBatch, PruneKind, PruneRepository};
use domain::{StorageError, Timestamp};

use crate::db::{AnyConnection, Backend, Database, Failure};
use crate::schema::leases;

mod attempts;
mod batch;
mod bulk;
mod by_id;
mod cards;
mod invocations;
use batch::Batch;

/// The one lease of pruning.
const LEASE: &str = "pruner";
/// Pages one `PRAGMA incremental_vacuum` frees (4 KiB each): a writer waits at most for so
/// many.
const VACUUM_PAGES: u32 = 2_048;

/// Pruning on diesel.
#[derive(Clone)]
pub struct DieselPruneRepository {
    db: Database,
}

impl DieselPruneRepository {
    /// Over `db`.
    pub fn new(db: Database) -> Self {
        DieselPruneRepository { db }
    }
}

/// One kind's batch, as asked.
type Pruner = fn(&mut AnyConnection, &Batch) -> Result<PruneBatch, Failure>;

/// The table of kinds: the function that prunes each.
fn pruner(kind: PruneKind) -> Pruner {
    match kind {
        PruneKind::Cards => cards::prune_cards,
        PruneKind::Events => by_id::prune_events,
        PruneKind::Deliveries => by_id::prune_deliveries,
        PruneKind::Attempts => attempts::prune_attempts,
        PruneKind::PushJobs => by_id::prune_push_jobs,
        PruneKind::Invocations => invocations::prune_invocations,
        PruneKind::BulkRows => bulk::prune_bulk_rows,
        PruneKind::BulkTasks => bulk::prune_bulk_tasks,
        PruneKind::AccessTokens => by_id::prune_access_tokens,
    }
}

fn prune(
    conn: &mut AnyConnection,
    kind: PruneKind,
    cutoff: NaiveDateTime,
    after: Option<String>,
    limit: usize,
    dry_run: bool,
) -> Result<PruneBatch, Failure> {
    let after = after.unwrap_or_default();
    let batch = Batch {
        cutoff,
        after: &after,
        limit,
        dry_run,
    };
    pruner(kind)(conn, &batch)
}

#[async_trait]
impl PruneRepository for DieselPruneRepository {
    async fn lease(
        &self,
        holder: &str,
        now: Timestamp,
        until: Timestamp,
    ) -> Result<bool, StorageError> {
        let (holder, now, until) = (holder.to_owned(), now.naive_utc(), until.naive_utc());
        self.db
            .transaction(move |conn| {
                let renewed = diesel::update(
                    leases::table
                        .filter(leases::name.eq(LEASE))
                        .filter(leases::holder.eq(&holder).or(leases::until.lt(now))),
                )
                .set((leases::holder.eq(&holder), leases::until.eq(until)))
                .execute(conn)?;
                if renewed == 1 {
                    return Ok(true);
                }
                let row = (
                    leases::name.eq(LEASE),
                    leases::holder.eq(&holder),
                    leases::until.eq(until),
                );
                let inserted = crate::per_backend!(conn, c => diesel::insert_into(leases::table)
                    .values(row)
                    .on_conflict_do_nothing()
                    .execute(c)?);
                Ok(inserted == 1)
            })
            .await
    }

    async fn prune(
        &self,
        kind: PruneKind,
        cutoff: Timestamp,
        after: Option<String>,
        limit: u32,
        dry_run: bool,
    ) -> Result<PruneBatch, StorageError> {
        let cutoff = cutoff.naive_utc();
        let limit = usize::try_from(limit.clamp(1, 10_000)).unwrap_or(1_000);
        if dry_run {
            self.db
                .run(move |conn| prune(conn, kind, cutoff, after, limit, true))
                .await
        } else {
            self.db
                .transaction(move |conn| prune(conn, kind, cutoff, after, limit, false))
                .await
        }
    }

    async fn compact(&self) -> Result<(), StorageError> {
        if self.db.backend() != Backend::Sqlite {
            return Ok(());
        }
        // A step at a time, each its own write, until no free page is left.
        loop {
            let free = self
                .db
                .write(move |conn| {
                    #[derive(diesel::QueryableByName)]
                    struct Free {
                        #[diesel(sql_type = diesel::sql_types::BigInt)]
                        freelist_count: i64,
                    }
                    diesel::sql_query(format!("PRAGMA incremental_vacuum({VACUUM_PAGES})"))
                        .execute(conn)?;
                    let left: Free = diesel::sql_query("PRAGMA freelist_count").get_result(conn)?;
                    Ok(left.freelist_count)
                })
                .await?;
            if free <= 0 {
                return Ok(());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::batch::id_bound;
    use super::invocations::ENDED;

    #[test]
    fn an_id_bound_sorts_above_every_id_minted_before() {
        let at = |ms: i64| {
            chrono::DateTime::from_timestamp_millis(ms)
                .expect("time")
                .naive_utc()
        };
        assert_eq!(id_bound("crd", at(0)), "crd_0000000000");
        assert_eq!(id_bound("crd", at(1)), "crd_0000000001");
        assert_eq!(id_bound("crd", at(32)), "crd_0000000010");
        // A ULID's time is its first ten characters: an id of the millisecond before sorts
        // below, whatever its random part; one of the same millisecond above.
        let bound = id_bound("evt", at(1_764_000_000_000));
        let mut before = id_bound("evt", at(1_763_999_999_999));
        before.push_str("zzzzzzzzzzzzzzzz");
        let mut same = bound.clone();
        same.push_str("0000000000000000");
        assert!(before < bound && same > bound);
        assert_eq!(&*ENDED, "status IN ('completed', 'failed', 'cancelled')");
    }
}
