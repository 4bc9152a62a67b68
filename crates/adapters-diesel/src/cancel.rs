//! Cancel tasks: the markers engine batches check, and the batched cancelling of instances and
//! their cards.

use async_trait::async_trait;
use chrono::NaiveDateTime;
use diesel::prelude::*;
use domain::cancel::{CancelFilter, CancelRepository, CancelStatus, CancelTask};
use domain::card::{cancel_card, CardStatus, InstanceStatus};
use domain::page::After;
use domain::{StorageError, Timestamp};

use crate::db::{AnyConnection, Database, Failure};
use crate::millis::At;
use std::collections::HashMap;

use domain::trigger::BatchResult;

use crate::error::{corrupt, read_number, write_number};
use crate::page::after;
use crate::rows::{CardRow, SharedParse};
use crate::schema::{action_flows, cancel_tasks, card_instances, invocations};
use crate::writes::insert_events;

const CHUNK: usize = 500;

#[derive(Queryable, Selectable, Insertable)]
#[diesel(table_name = cancel_tasks)]
struct TaskRow {
    id: String,
    environment_id: String,
    flow_id: String,
    end_user_id: Option<String>,
    invocation_id: Option<String>,
    flow_version: Option<i32>,
    cancel_cards: bool,
    status: String,
    expected: Option<i64>,
    actual: i64,
    cards_expected: Option<i64>,
    cards_actual: i64,
    errors: String,
    lease_until: Option<NaiveDateTime>,
    created: NaiveDateTime,
    updated: NaiveDateTime,
}

fn task(row: TaskRow) -> Result<CancelTask, StorageError> {
    Ok(CancelTask {
        status: CancelStatus::parse(&row.status)
            .ok_or_else(|| corrupt("cancel status", &row.status))?,
        errors: serde_json::from_str(&row.errors).map_err(|e| corrupt("cancel errors", e))?,
        id: row.id.into(),
        environment_id: row.environment_id,
        flow_id: row.flow_id,
        filter: CancelFilter {
            end_user_id: row.end_user_id,
            invocation_id: row.invocation_id,
            flow_version: row
                .flow_version
                .map(|v| read_number("cancel flow version", v))
                .transpose()?,
            cancel_cards: row.cancel_cards,
        },
        expected: row
            .expected
            .map(|n| read_number("cancel expected count", n))
            .transpose()?,
        actual: read_number("cancel count", row.actual)?,
        cards_expected: row
            .cards_expected
            .map(|n| read_number("cancel expected card count", n))
            .transpose()?,
        cards_actual: read_number("cancel card count", row.cards_actual)?,
        created: row.created.and_utc(),
        updated: row.updated.and_utc(),
        lease_until: row.lease_until.map(|t| t.and_utc()),
    })
}

/// Whether `t` still holds the lease it was claimed with; on PostgreSQL the task's row is
/// locked until the transaction ends, so no claim can take it meanwhile.
fn holds(conn: &mut AnyConnection, t: &CancelTask) -> Result<bool, Failure> {
    let key = cancel_tasks::table
        .filter(cancel_tasks::environment_id.eq(&t.environment_id))
        .filter(cancel_tasks::id.eq(t.id.as_str()));
    let lease: Option<Option<NaiveDateTime>> = match &mut *conn {
        AnyConnection::Postgresql(c) => key
            .select(cancel_tasks::lease_until)
            .for_update()
            .first(c)
            .optional()?,
        AnyConnection::Sqlite(c) => key.select(cancel_tasks::lease_until).first(c).optional()?,
    };
    Ok(lease.is_some_and(|held| held == t.lease_until.map(|l| l.naive_utc())))
}

fn load(conn: &mut AnyConnection, env: &str, id: &str) -> Result<Option<TaskRow>, Failure> {
    Ok(cancel_tasks::table
        .filter(cancel_tasks::environment_id.eq(env))
        .filter(cancel_tasks::id.eq(id))
        .select(TaskRow::as_select())
        .first(conn)
        .optional()?)
}

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

pub struct DieselCancelRepository {
    db: Database,
}

impl DieselCancelRepository {
    pub fn new(db: Database) -> Self {
        Self { db }
    }
}

/// The cards of the task's matching instances: its flow, the instance still active, created up
/// to the task, narrowed by its filter. A flow instance is stored on its cards
/// (`instance_status`, the same on each; migration 14), all made at one time, so these are the
/// matching instances' cards, found through `card_instances_cancel`. Used where `?` gives a
/// [`Failure`]: a version out of its column's range is an error.
macro_rules! matching_cards {
    ($t:expr) => {{
        let t: &CancelTask = $t;
        let version: Option<i32> = t
            .filter
            .flow_version
            .map(|v| write_number("cancel flow version", v))
            .transpose()
            .map_err(Failure::Domain)?;
        let mut q = card_instances::table
            .filter(card_instances::environment_id.eq(t.environment_id.clone()))
            .filter(card_instances::flow_id.eq(t.flow_id.clone()))
            .filter(card_instances::instance_status.eq(InstanceStatus::Active.as_str()))
            .filter(card_instances::created.le(At(t.created.naive_utc())))
            .into_boxed();
        if let Some(user) = &t.filter.end_user_id {
            q = q.filter(card_instances::user_id.eq(user.clone()));
        }
        if let Some(inv) = &t.filter.invocation_id {
            q = q.filter(card_instances::invocation_id.eq(inv.clone()));
        }
        if let Some(v) = version {
            q = q.filter(card_instances::flow_version.eq(v));
        }
        q
    }};
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
                let instances: i64 = matching_cards!(&t)
                    .select(
                        diesel::dsl::count(card_instances::flow_instance_id).aggregate_distinct(),
                    )
                    .get_result(conn)?;
                let cards: i64 = matching_cards!(&t)
                    .filter(card_instances::status.eq_any(CardStatus::cancellable()))
                    .count()
                    .get_result(conn)?;
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
            .transaction(move |conn| {
                if !holds(conn, &t)? {
                    return Ok(None);
                }
                // The first `limit` instances, oldest first; an instance's cards share their
                // creation time, so its cards are together in this order.
                let first: Vec<(NaiveDateTime, String)> = matching_cards!(&t)
                    .select((card_instances::created, card_instances::flow_instance_id))
                    .distinct()
                    .order((card_instances::created, card_instances::flow_instance_id))
                    .limit(i64::from(limit))
                    .load(conn)?;
                let Some((last_created, last_instance)) = first.last().cloned() else {
                    return Ok(Some(0));
                };
                // Their cards: the matching ones up to the last instance in that order. The
                // bound on the time alone keeps the scan of the index within those instances.
                // A macro, as each arm's boxed query is of its own backend.
                macro_rules! upto {
                    () => {
                        matching_cards!(&t)
                            .filter(card_instances::created.le(At(last_created)))
                            .filter(
                                card_instances::created
                                    .lt(At(last_created))
                                    .or(card_instances::flow_instance_id.le(last_instance.clone())),
                            )
                    };
                }
                let rows: Vec<CardRow> = match &mut *conn {
                    // Locked for the update: read by id (a lock cannot follow this query's
                    // boxed form).
                    AnyConnection::Postgresql(c) => {
                        let ids: Vec<String> = upto!().select(card_instances::id).load(c)?;
                        let mut rows = Vec::with_capacity(ids.len());
                        for chunk in ids.chunks(CHUNK) {
                            rows.extend(
                                card_instances::table
                                    .filter(card_instances::id.eq_any(chunk))
                                    .select(CardRow::as_select())
                                    .for_update()
                                    .load(c)?,
                            );
                        }
                        rows
                    }
                    AnyConnection::Sqlite(c) => upto!().select(CardRow::as_select()).load(c)?,
                };
                let ids: Vec<String> = rows.iter().map(|r| r.id.clone()).collect();
                let at = now.naive_utc();
                let n = rows
                    .iter()
                    .map(|r| r.flow_instance_id.as_str())
                    .collect::<std::collections::HashSet<_>>()
                    .len() as i64;
                // The open cards to cancel with their instances (when asked), each updated once.
                let mut events = Vec::new();
                if t.filter.cancel_cards {
                    let mut shared = SharedParse::default();
                    for row in rows {
                        let card = shared.card(row).map_err(Failure::Domain)?;
                        events.extend(cancel_card(card, now));
                    }
                }
                let open: std::collections::HashSet<&str> =
                    events.iter().map(|e| e.card_instance_id()).collect();
                let (open_ids, others): (Vec<&str>, Vec<&str>) = ids
                    .iter()
                    .map(String::as_str)
                    .partition(|id| open.contains(id));
                for chunk in open_ids.chunks(CHUNK) {
                    diesel::update(card_instances::table.filter(card_instances::id.eq_any(chunk)))
                        .set((
                            card_instances::instance_status.eq(InstanceStatus::Cancelled.as_str()),
                            card_instances::status.eq(CardStatus::Cancelled.as_str()),
                            card_instances::updated.eq(At(at)),
                        ))
                        .execute(conn)?;
                }
                for chunk in others.chunks(CHUNK) {
                    diesel::update(card_instances::table.filter(card_instances::id.eq_any(chunk)))
                        .set(card_instances::instance_status.eq(InstanceStatus::Cancelled.as_str()))
                        .execute(conn)?;
                }
                let cancelled_cards = events.len() as i64;
                insert_events(conn, &events)?;
                diesel::update(cancel_tasks::table.filter(cancel_tasks::id.eq(t.id.as_str())))
                    .set((
                        cancel_tasks::actual.eq(cancel_tasks::actual + n),
                        cancel_tasks::cards_actual.eq(cancel_tasks::cards_actual + cancelled_cards),
                        cancel_tasks::updated.eq(at),
                    ))
                    .execute(conn)?;
                Ok(Some(u64::try_from(n).unwrap_or(0)))
            })
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
                if !holds(conn, &t)? {
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
        let found = crate::cancel::markers_since(conn, env, flow, oldest.and_utc())?;
        if !found.is_empty() {
            markers.insert((env.to_owned(), flow.to_owned()), found);
        }
    }
    Ok(markers)
}

/// (environment, flow) → its cancel markers.
pub(crate) type Markers = HashMap<(String, String), Vec<domain::cancel::CancelTask>>;

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
