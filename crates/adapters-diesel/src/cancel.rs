//! Cancel tasks: their storage, and the batched cancelling of instances and their cards. The
//! markers engine batches check are read by [`crate::markers`].

use async_trait::async_trait;
use chrono::NaiveDateTime;
use diesel::prelude::*;
use domain::cancel::{CancelFilter, CancelRepository, CancelStatus, CancelTask};
use domain::card::{cancel_card, CardStatus, InstanceStatus};
use domain::page::After;
use domain::{StorageError, Timestamp};

use crate::db::{AnyConnection, Database, Failure};
use crate::error::{corrupt, read_number, write_number};
use crate::millis::At;
use crate::page::after;
use crate::rows::{CardRow, SharedParse};
use crate::schema::{action_flows, cancel_tasks, card_instances, invocations};
use crate::writes::insert_events;

mod waiting;
pub(crate) use waiting::insert_publish_cancel;

pub(crate) const CHUNK: usize = 500;

#[derive(Queryable, Selectable, Insertable)]
#[diesel(table_name = cancel_tasks)]
pub(crate) struct TaskRow {
    id: String,
    environment_id: String,
    flow_id: String,
    end_user_id: Option<String>,
    invocation_id: Option<String>,
    flow_version: Option<i32>,
    before_version: Option<i32>,
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

pub(crate) fn task(row: TaskRow) -> Result<CancelTask, StorageError> {
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
            before_version: row
                .before_version
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

/// Where a task's batches stopped: the last invocation they went through, in the order they
/// walk a flow's invocations (created, then id), and the last user done within it when a batch
/// stopped inside it.
#[derive(Clone, Debug, Default, PartialEq)]
struct Cursor {
    invocation: Option<(NaiveDateTime, String)>,
    user: Option<String>,
}

/// Where `t`'s batches stopped, while it still holds the lease it was claimed with (None
/// once it does not); on PostgreSQL the task's row is locked until the transaction ends, so
/// no claim can take it meanwhile.
fn held(conn: &mut AnyConnection, t: &CancelTask) -> Result<Option<Cursor>, Failure> {
    type Stored = (
        Option<NaiveDateTime>,
        Option<NaiveDateTime>,
        Option<String>,
        Option<String>,
    );
    let key = cancel_tasks::table
        .filter(cancel_tasks::environment_id.eq(&t.environment_id))
        .filter(cancel_tasks::id.eq(t.id.as_str()))
        .select((
            cancel_tasks::lease_until,
            cancel_tasks::cursor_created,
            cancel_tasks::cursor_invocation,
            cancel_tasks::cursor_user,
        ));
    let stored: Option<Stored> = match &mut *conn {
        AnyConnection::Postgresql(c) => key.for_update().first(c).optional()?,
        AnyConnection::Sqlite(c) => key.first(c).optional()?,
    };
    Ok(stored.and_then(|(lease, created, invocation, user)| {
        (lease == t.lease_until.map(|l| l.naive_utc())).then(|| Cursor {
            invocation: created.zip(invocation),
            user,
        })
    }))
}

fn load(conn: &mut AnyConnection, env: &str, id: &str) -> Result<Option<TaskRow>, Failure> {
    Ok(cancel_tasks::table
        .filter(cancel_tasks::environment_id.eq(env))
        .filter(cancel_tasks::id.eq(id))
        .select(TaskRow::as_select())
        .first(conn)
        .optional()?)
}

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

/// The task's version in its column's type: one out of that range is an error.
fn version_of(t: &CancelTask) -> Result<Option<i32>, Failure> {
    t.filter
        .flow_version
        .map(|v| write_number("cancel flow version", v))
        .transpose()
        .map_err(Failure::Domain)
}

/// The version before which the task's instances are (a publish's cancel), in its column's
/// type.
fn before_of(t: &CancelTask) -> Result<Option<i32>, Failure> {
    t.filter
        .before_version
        .map(|v| write_number("cancel flow version", v))
        .transpose()
        .map_err(Failure::Domain)
}

/// The cards of the task's matching instances: its flow, the instance still active, narrowed
/// by its filter's user and version. A flow instance is stored on its cards (`instance_status`,
/// the same on each; migration 14), all made at one time, so these are the matching instances'
/// cards. Callers narrow them to the task's invocations (created up to the task, the bound
/// the markers use: a card's own time is when its batch was built, which may be after the
/// task though saved before it), whose cards are read through `card_instances_once`
/// (environment, invocation, user, step). Used where `?` gives a [`Failure`]: a version out of
/// its column's range is an error.
macro_rules! matching_cards {
    ($t:expr) => {{
        let t: &CancelTask = $t;
        let version = version_of(t)?;
        let mut q = card_instances::table
            .filter(card_instances::environment_id.eq(t.environment_id.clone()))
            .filter(card_instances::flow_id.eq(t.flow_id.clone()))
            .filter(card_instances::instance_status.eq(InstanceStatus::Active.as_str()))
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
        if let Some(v) = before_of(t)? {
            q = q.filter(card_instances::flow_version.lt(v));
        }
        q
    }};
}

/// Up to `n` of the task's invocations after `after` in the order (created, id): of its flow,
/// created up to the task, narrowed by its filter's invocation and version. Read through
/// `invocations_flow`.
fn next_invocations(
    conn: &mut AnyConnection,
    t: &CancelTask,
    after: Option<&(NaiveDateTime, String)>,
    n: usize,
) -> Result<Vec<(NaiveDateTime, String)>, Failure> {
    let mut q = invocations::table
        .filter(invocations::environment_id.eq(t.environment_id.clone()))
        .filter(invocations::flow_id.eq(t.flow_id.clone()))
        .filter(invocations::created.le(At(t.created.naive_utc())))
        .select((invocations::created, invocations::id))
        .order((invocations::created, invocations::id))
        .limit(i64::try_from(n).unwrap_or(i64::MAX))
        .into_boxed();
    if let Some(inv) = &t.filter.invocation_id {
        q = q.filter(invocations::id.eq(inv.clone()));
    }
    if let Some(v) = version_of(t)? {
        q = q.filter(invocations::flow_version.eq(v));
    }
    if let Some(v) = before_of(t)? {
        q = q.filter(invocations::flow_version.lt(v));
    }
    if let Some((created, id)) = after {
        // The first bound alone lets the index be read from that instant on.
        q = q.filter(invocations::created.ge(At(*created))).filter(
            invocations::created
                .gt(At(*created))
                .or(invocations::id.gt(id.clone())),
        );
    }
    Ok(q.load(conn)?)
}

/// On PostgreSQL, the task's matching cards of a group of invocations, one lookup of
/// `card_instances_once` per invocation ($1 the invocations, then the environment, flow,
/// instance status, and the filter's user, version and version bound, or null). Not
/// `invocation_id = ANY(...)`, nor a join PostgreSQL may flatten (`OFFSET 0` keeps it from
/// that): with statistics of a smaller table than the one read (a table just filled, before
/// its next `ANALYZE`), those were planned as a scan of the environment's cards through
/// `card_instances_feed`, far slower a group than one lookup per invocation.
const PG_GROUP: &str = "FROM unnest($1::text[]) AS i (id) CROSS JOIN LATERAL (\
    SELECT c.id, c.invocation_id, c.user_id, c.flow_instance_id, c.status FROM card_instances c \
    WHERE c.environment_id = $2 AND c.invocation_id = i.id AND c.flow_id = $3 \
    AND c.instance_status = $4 \
    AND ($5::text IS NULL OR c.user_id = $5) AND ($6::integer IS NULL OR c.flow_version = $6) \
    AND ($7::integer IS NULL OR c.flow_version < $7) \
    OFFSET 0) c";

/// `query` (of [`PG_GROUP`]'s binds) bound for the task and the invocations `names`.
macro_rules! pg_group {
    ($query:expr, $t:expr, $names:expr) => {{
        use diesel::sql_types::{Array, Integer, Nullable, Text};
        let t: &CancelTask = $t;
        let version = version_of(t)?;
        diesel::sql_query($query)
            .bind::<Array<Text>, _>($names)
            .bind::<Text, _>(t.environment_id.clone())
            .bind::<Text, _>(t.flow_id.clone())
            .bind::<Text, _>(InstanceStatus::Active.as_str())
            .bind::<Nullable<Text>, _>(t.filter.end_user_id.clone())
            .bind::<Nullable<Integer>, _>(version)
            .bind::<Nullable<Integer>, _>(before_of(t)?)
    }};
}

/// A matching card of a group: (id, invocation, user).
#[derive(diesel::QueryableByName)]
struct Found {
    #[diesel(sql_type = diesel::sql_types::Text)]
    id: String,
    #[diesel(sql_type = diesel::sql_types::Text)]
    invocation_id: String,
    #[diesel(sql_type = diesel::sql_types::Text)]
    user_id: String,
}

/// Up to `limit` of the task's matching cards of the invocations `names`, in no order.
fn group(
    conn: &mut AnyConnection,
    t: &CancelTask,
    names: &[String],
    limit: usize,
) -> Result<Vec<(String, String, String)>, Failure> {
    let limit = i64::try_from(limit).unwrap_or(i64::MAX);
    Ok(match &mut *conn {
        AnyConnection::Postgresql(c) => {
            let sql = format!("SELECT c.id, c.invocation_id, c.user_id {PG_GROUP} LIMIT $8");
            pg_group!(sql, t, names)
                .bind::<diesel::sql_types::BigInt, _>(limit)
                .load::<Found>(c)?
                .into_iter()
                .map(|f| (f.id, f.invocation_id, f.user_id))
                .collect()
        }
        AnyConnection::Sqlite(_) => matching_cards!(t)
            .filter(card_instances::invocation_id.eq_any(names))
            .select((
                card_instances::id,
                card_instances::invocation_id,
                card_instances::user_id,
            ))
            .limit(limit)
            .load(conn)?,
    })
}

/// The task's matching instances of the invocations `names`, and their open cards.
fn counted(
    conn: &mut AnyConnection,
    t: &CancelTask,
    names: &[String],
) -> Result<(i64, i64), Failure> {
    #[derive(diesel::QueryableByName)]
    struct Counted {
        #[diesel(sql_type = diesel::sql_types::BigInt)]
        instances: i64,
        #[diesel(sql_type = diesel::sql_types::BigInt)]
        cards: i64,
    }
    Ok(match &mut *conn {
        AnyConnection::Postgresql(c) => {
            let sql = format!(
                "SELECT count(DISTINCT c.flow_instance_id) AS instances, \
                 count(*) FILTER (WHERE c.status = ANY($8)) AS cards {PG_GROUP}"
            );
            let n: Counted = pg_group!(sql, t, names)
                .bind::<diesel::sql_types::Array<diesel::sql_types::Text>, _>(
                    CardStatus::cancellable(),
                )
                .get_result(c)?;
            (n.instances, n.cards)
        }
        AnyConnection::Sqlite(_) => {
            let instances = matching_cards!(t)
                .filter(card_instances::invocation_id.eq_any(names))
                .select(diesel::dsl::count(card_instances::flow_instance_id).aggregate_distinct())
                .get_result::<i64>(conn)?;
            let cards = matching_cards!(t)
                .filter(card_instances::invocation_id.eq_any(names))
                .filter(card_instances::status.eq_any(CardStatus::cancellable()))
                .count()
                .get_result::<i64>(conn)?;
            (instances, cards)
        }
    })
}

/// Invocations a batch reads at a time.
const INVOCATIONS: usize = 500;

/// Up to `limit` of the task's matching instances after `at`, in the order of their invocations
/// (created, then id) and then of their users: the ids of their cards, and how many instances.
/// `at` moves to where they end.
///
/// Invocations are read `INVOCATIONS` at a time through `invocations_flow`, and the cards of
/// each group at once through `card_instances_once` when they fit in what is left of the
/// batch; otherwise one invocation at a time, its users in order. No matching card appears
/// behind `at` once the task is stored: an engine save either committed before it or drops
/// what it covers (`apply_markers`).
fn walk(
    conn: &mut AnyConnection,
    t: &CancelTask,
    at: &mut Cursor,
    limit: usize,
) -> Result<(Vec<String>, usize), Failure> {
    let mut ids = Vec::new();
    let mut n = 0;
    // Within the invocation the batch before stopped in.
    if let (Some((_, inv)), Some(user)) = (at.invocation.clone(), at.user.clone()) {
        let (taken, last) = within(conn, t, &inv, Some(&user), limit, &mut ids)?;
        n += taken;
        at.user = last.or(Some(user)).filter(|_| taken == limit);
    }
    while n < limit {
        let left = limit - n;
        let next = next_invocations(conn, t, at.invocation.as_ref(), left.min(INVOCATIONS))?;
        let Some(last) = next.last().cloned() else {
            break;
        };
        // The group's cards at once, when there are no more than what is left.
        let names: Vec<String> = next.iter().map(|(_, id)| id.clone()).collect();
        let rows = group(conn, t, &names, left + 1)?;
        if rows.len() <= left {
            n += rows
                .iter()
                .map(|(_, inv, user)| (inv, user))
                .collect::<std::collections::HashSet<_>>()
                .len();
            ids.extend(rows.into_iter().map(|(id, ..)| id));
            *at = Cursor {
                invocation: Some(last),
                user: None,
            };
            continue;
        }
        // More than that: one invocation at a time, up to the batch's end.
        for (created, inv) in next {
            if n == limit {
                break;
            }
            let (taken, last) = within(conn, t, &inv, None, limit - n, &mut ids)?;
            n += taken;
            *at = Cursor {
                invocation: Some((created, inv)),
                user: last.filter(|_| n == limit),
            };
        }
    }
    Ok((ids, n))
}

/// Up to `limit` of the task's matching instances in the invocation `inv`, after the user
/// `after` when given, by user: adds their cards' ids to `ids`, and answers how many instances
/// and the last user.
fn within(
    conn: &mut AnyConnection,
    t: &CancelTask,
    inv: &str,
    after: Option<&str>,
    limit: usize,
    ids: &mut Vec<String>,
) -> Result<(usize, Option<String>), Failure> {
    let of = |after: Option<&str>| -> Result<_, Failure> {
        let q = matching_cards!(t).filter(card_instances::invocation_id.eq(inv.to_owned()));
        Ok(match after {
            Some(user) => q.filter(card_instances::user_id.gt(user.to_owned())),
            None => q,
        })
    };
    let users: Vec<String> = of(after)?
        .select(card_instances::user_id)
        .distinct()
        .order(card_instances::user_id)
        .limit(i64::try_from(limit).unwrap_or(i64::MAX))
        .load(conn)?;
    let Some(last) = users.last().cloned() else {
        return Ok((0, None));
    };
    ids.extend(
        of(after)?
            .filter(card_instances::user_id.le(last.clone()))
            .select(card_instances::id)
            .load::<String>(conn)?,
    );
    Ok((users.len(), Some(last)))
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
            .transaction(move |conn| {
                let Some(mut at) = held(conn, &t)? else {
                    return Ok(None);
                };
                let start = at.clone();
                let (ids, n) = walk(conn, &t, &mut at, limit as usize)?;
                // Locked for the update on PostgreSQL, read by id.
                let mut rows: Vec<CardRow> = Vec::with_capacity(ids.len());
                for chunk in ids.chunks(CHUNK) {
                    // A macro, as each arm's selection is of its own backend.
                    macro_rules! by_id {
                        () => {
                            card_instances::table
                                .filter(card_instances::id.eq_any(chunk))
                                .select(CardRow::as_select())
                        };
                    }
                    rows.extend(match &mut *conn {
                        AnyConnection::Postgresql(c) => by_id!().for_update().load(c)?,
                        AnyConnection::Sqlite(c) => by_id!().load(c)?,
                    });
                }
                let ids: Vec<String> = rows.iter().map(|r| r.id.clone()).collect();
                // The instances of a flow that waits or branches stop too (contract §21).
                let mut instances: Vec<String> =
                    rows.iter().map(|r| r.flow_instance_id.clone()).collect();
                instances.sort_unstable();
                instances.dedup();
                let instances: Vec<&str> = instances.iter().map(String::as_str).collect();
                waiting::cancel_instances(conn, &t.environment_id, &instances, now)?;
                let now_at = now.naive_utc();
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
                            card_instances::updated.eq(At(now_at)),
                        ))
                        .execute(conn)?;
                }
                for chunk in others.chunks(CHUNK) {
                    diesel::update(card_instances::table.filter(card_instances::id.eq_any(chunk)))
                        .set(card_instances::instance_status.eq(InstanceStatus::Cancelled.as_str()))
                        .execute(conn)?;
                }
                if n == 0 && at == start {
                    return Ok(Some(0));
                }
                let cancelled_cards = events.len() as i64;
                insert_events(conn, &events)?;
                let instances = i64::try_from(n)
                    .map_err(|_| Failure::Domain(corrupt("count of instances cancelled", n)))?;
                diesel::update(cancel_tasks::table.filter(cancel_tasks::id.eq(t.id.as_str())))
                    .set((
                        cancel_tasks::actual.eq(cancel_tasks::actual + instances),
                        cancel_tasks::cards_actual.eq(cancel_tasks::cards_actual + cancelled_cards),
                        cancel_tasks::updated.eq(now_at),
                        cancel_tasks::cursor_created
                            .eq(at.invocation.as_ref().map(|(created, _)| At(*created))),
                        cancel_tasks::cursor_invocation.eq(at.invocation.map(|(_, id)| id)),
                        cancel_tasks::cursor_user.eq(at.user),
                    ))
                    .execute(conn)?;
                Ok(Some(n as u64))
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
