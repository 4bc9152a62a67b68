//! The instances a cancel task reaches: its flow's invocations in order, and their matching
//! cards, walked a batch at a time from where the batch before stopped, or counted.

use chrono::NaiveDateTime;
use diesel::prelude::*;
use domain::cancel::CancelTask;
use domain::card::{CardStatus, InstanceStatus};

use crate::db::{AnyConnection, Failure};
use crate::error::write_number;
use crate::millis::At;
use crate::schema::{cancel_tasks, card_instances, invocations};

/// Where a task's batches stopped: the last invocation they went through, in the order they
/// walk a flow's invocations (created, then id), and the last user done within it when a batch
/// stopped inside it.
#[derive(Clone, Debug, Default, PartialEq)]
pub(super) struct Cursor {
    pub(super) invocation: Option<(NaiveDateTime, String)>,
    pub(super) user: Option<String>,
}

/// Where `t`'s batches stopped, while it still holds the lease it was claimed with (None
/// once it does not); on PostgreSQL the task's row is locked until the transaction ends, so
/// no claim can take it meanwhile.
pub(super) fn held(conn: &mut AnyConnection, t: &CancelTask) -> Result<Option<Cursor>, Failure> {
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
pub(super) fn next_invocations(
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
pub(super) fn counted(
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
pub(super) const INVOCATIONS: usize = 500;

/// Up to `limit` of the task's matching instances after `at`, in the order of their invocations
/// (created, then id) and then of their users: the ids of their cards, and how many instances.
/// `at` moves to where they end.
///
/// Invocations are read `INVOCATIONS` at a time through `invocations_flow`, and the cards of
/// each group at once through `card_instances_once` when they fit in what is left of the
/// batch; otherwise one invocation at a time, its users in order. No matching card appears
/// behind `at` once the task is stored: an engine save either committed before it or drops
/// what it covers (`apply_markers`).
pub(super) fn walk(
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
