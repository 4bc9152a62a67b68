//! Cancel tasks: their storage, and the batched cancelling of instances and their cards. The
//! markers engine batches check are read by [`crate::markers`].

use async_trait::async_trait;
use diesel::prelude::*;
use domain::cancel::{CancelRepository, CancelStatus, CancelTask};
use domain::page::After;
use domain::{StorageError, Timestamp};

use crate::db::{AnyConnection, Database};
use crate::error::{read_number, write_number};
use crate::page::after;
use crate::schema::{action_flows, cancel_tasks};

mod batch;
mod task;
mod waiting;
mod walk;
use task::load;
pub(crate) use task::{task, TaskRow};
pub(crate) use waiting::insert_publish_cancel;
use walk::{counted, held, next_invocations, INVOCATIONS};

/// The domain's `CancelRepository` port on the service's database.
pub struct DieselCancelRepository {
    db: Database,
}

impl DieselCancelRepository {
    /// Over `db`.
    pub fn new(db: Database) -> Self {
        Self { db }
    }
}

#[async_trait]
impl CancelRepository for DieselCancelRepository {
    async fn create(&self, t: &CancelTask) -> Result<(), StorageError> {
        // A version out of the column's range is refused, not stored as no version (which
        // would cancel the instances of every version).
        let flow_version = t
            .filter
            .flow_version
            .map(|v| write_number("cancel flow version", v))
            .transpose()?;
        let row = TaskRow {
            id: t.id.clone().into(),
            environment_id: t.environment_id.clone(),
            flow_id: t.flow_id.clone(),
            end_user_id: t.filter.end_user_id.clone(),
            invocation_id: t.filter.invocation_id.clone(),
            flow_version,
            before_version: t
                .filter
                .before_version
                .map(|v| write_number("cancel flow version", v))
                .transpose()?,
            cancel_cards: t.filter.cancel_cards,
            status: t.status.as_str().into(),
            expected: None,
            actual: 0,
            cards_expected: None,
            cards_actual: 0,
            errors: "[]".into(),
            lease_until: None,
            created: t.created.naive_utc(),
            updated: t.updated.naive_utc(),
        };
        self.db
            .transaction(move |conn| {
                if let AnyConnection::Postgresql(c) = &mut *conn {
                    action_flows::table
                        .filter(action_flows::id.eq(&row.flow_id))
                        .select(action_flows::id)
                        .for_update()
                        .load::<String>(c)?;
                }
                diesel::insert_into(cancel_tasks::table)
                    .values(&row)
                    .execute(conn)?;
                crate::db::notices::queued(crate::Work::Cancels);
                Ok(())
            })
            .await
    }

    async fn get(
        &self,
        environment_id: &str,
        id: &str,
    ) -> Result<Option<CancelTask>, StorageError> {
        let (env, id) = (environment_id.to_owned(), id.to_owned());
        let row = self.db.run(move |conn| load(conn, &env, &id)).await?;
        row.map(task).transpose()
    }

    async fn list(
        &self,
        environment_id: &str,
        flow_id: &str,
        status: Option<CancelStatus>,
        after: Option<After<String>>,
        limit: u32,
    ) -> Result<Vec<CancelTask>, StorageError> {
        let (env, flow) = (environment_id.to_owned(), flow_id.to_owned());
        let rows = self
            .db
            .run(move |conn| {
                // Read through `cancel_tasks_flow` (environment, flow, created, id), backwards.
                let mut query = cancel_tasks::table
                    .filter(cancel_tasks::environment_id.eq(env))
                    .filter(cancel_tasks::flow_id.eq(flow))
                    .select(TaskRow::as_select())
                    .order((cancel_tasks::created.desc(), cancel_tasks::id.desc()))
                    .limit(i64::from(limit))
                    .into_boxed();
                if let Some(status) = status {
                    query = query.filter(cancel_tasks::status.eq(status.as_str()));
                }
                let query = after!(query, cancel_tasks::created, cancel_tasks::id, after);
                Ok(query.load(conn)?)
            })
            .await?;
        rows.into_iter().map(task).collect()
    }

    async fn claim(
        &self,
        now: Timestamp,
        lease_until: Timestamp,
    ) -> Result<Option<CancelTask>, StorageError> {
        let (now, lease) = (now.naive_utc(), lease_until.naive_utc());
        let row = self
            .db
            .claim_transaction(move |conn| {
                let due = cancel_tasks::table
                    .filter(cancel_tasks::status.eq(CancelStatus::Processing.as_str()))
                    .filter(
                        cancel_tasks::lease_until
                            .is_null()
                            .or(cancel_tasks::lease_until.lt(now)),
                    )
                    .order(cancel_tasks::created)
                    .select((cancel_tasks::environment_id, cancel_tasks::id));
                let key: Option<(String, String)> = crate::first_unclaimed!(&mut *conn, due)?;
                let Some((env, id)) = key else {
                    return Ok(None);
                };
                diesel::update(cancel_tasks::table.filter(cancel_tasks::id.eq(&id)))
                    .set(cancel_tasks::lease_until.eq(Some(lease)))
                    .execute(conn)?;
                load(conn, &env, &id)
            })
            .await?;
        row.map(task).transpose()
    }

    async fn count(&self, t: &CancelTask) -> Result<(u64, u64), StorageError> {
        let t = t.clone();
        let (instances, cards) = self
            .db
            .run(move |conn| {
                // The task's invocations `INVOCATIONS` at a time, and their cards through
                // `card_instances_once`. An instance is of one invocation: the counts add up.
                let (mut instances, mut cards) = (0i64, 0i64);
                let mut after = None;
                loop {
                    let next = next_invocations(conn, &t, after.as_ref(), INVOCATIONS)?;
                    let Some(last) = next.last().cloned() else {
                        break;
                    };
                    let names: Vec<String> = next.iter().map(|(_, id)| id.clone()).collect();
                    let (i, c) = counted(conn, &t, &names)?;
                    instances += i;
                    cards += c;
                    after = Some(last);
                }
                Ok((instances, cards))
            })
            .await?;
        Ok((
            read_number("count of matching instances", instances)?,
            read_number("count of matching cards", cards)?,
        ))
    }

    async fn cancel_batch(
        &self,
        t: &CancelTask,
        limit: u32,
        now: Timestamp,
    ) -> Result<Option<u64>, StorageError> {
        let t = t.clone();
        self.db
            .transaction(move |conn| batch::cancel_batch(conn, &t, limit as usize, now))
            .await
    }

    async fn save(&self, t: &CancelTask) -> Result<bool, StorageError> {
        let expected: Option<i64> = t
            .expected
            .map(|n| write_number("cancel expected count", n))
            .transpose()?;
        let cards_expected: Option<i64> = t
            .cards_expected
            .map(|n| write_number("cancel expected card count", n))
            .transpose()?;
        let t = t.clone();
        self.db
            .transaction(move |conn| {
                if held(conn, &t)?.is_none() {
                    return Ok(false);
                }
                diesel::update(cancel_tasks::table.filter(cancel_tasks::id.eq(t.id.as_str())))
                    .set((
                        cancel_tasks::status.eq(t.status.as_str()),
                        cancel_tasks::expected.eq(expected),
                        cancel_tasks::cards_expected.eq(cards_expected),
                        cancel_tasks::errors
                            .eq(serde_json::to_string(&t.errors).unwrap_or_else(|_| "[]".into())),
                        cancel_tasks::updated.eq(t.updated.naive_utc()),
                    ))
                    .execute(conn)?;
                Ok(true)
            })
            .await
    }
}
