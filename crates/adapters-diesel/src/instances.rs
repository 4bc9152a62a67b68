//! Flow instances stored as they go (contract §21; the port is
//! [`domain::trigger::instances::InstanceRepository`]): written with the batch that starts them,
//! claimed when due, and saved as they run on, each save fenced by the instance's revision.

use async_trait::async_trait;
use chrono::Duration;
use diesel::prelude::*;
use domain::card::CardStatus;
use domain::flow::steps::run::{self, Records};
use domain::flow::steps::{CardClosure, ClosedCard, InstanceState};
use domain::trigger::instances::{FlowInstance, InstanceAdvance, InstanceRepository};
use domain::trigger::{BatchResult, InvocationStatus, Mode};
use domain::{StorageError, Timestamp};
use serde_json::{Map, Value};
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use crate::counts::Counts;
use crate::db::{AnyConnection, Database, Failure};
use crate::error::{read_number, write_number};
use crate::markers::markers_since;
use crate::millis::At;
use crate::schema::{analytics_events, card_instances, flow_instances, invocations};
use crate::totals::Totals;
use crate::writes::RunWrites;

/// An instance as stored.
#[derive(Queryable, Selectable, Insertable)]
#[diesel(table_name = flow_instances, treat_none_as_default_value = false)]
pub(crate) struct InstanceRow {
    environment_id: String,
    id: String,
    invocation_id: String,
    flow_id: String,
    flow_version: i32,
    user_id: String,
    status: String,
    steps: String,
    due: Option<At>,
    lease_until: Option<At>,
    revision: i64,
    created: At,
    updated: At,
}

impl InstanceRow {
    fn of(i: &FlowInstance) -> Result<Self, StorageError> {
        Ok(InstanceRow {
            environment_id: i.environment_id.clone(),
            id: i.id.clone(),
            invocation_id: i.invocation_id.clone(),
            flow_id: i.flow_id.clone(),
            flow_version: write_number("flow version", i.flow_version)?,
            user_id: i.user_id.clone(),
            status: i.state.as_str().to_owned(),
            steps: run::encode(&i.records),
            due: i.due.map(At::of),
            lease_until: None,
            revision: i.revision,
            created: At::of(i.created),
            updated: At::of(i.updated),
        })
    }

    fn into_instance(self) -> Result<FlowInstance, StorageError> {
        let corrupt =
            |what: String| StorageError::Internal(format!("flow instance {}: {what}", self.id));
        let state = InstanceState::parse(&self.status)
            .ok_or_else(|| corrupt(format!("status `{}`", self.status)))?;
        let records: Records = run::decode(&self.steps).map_err(corrupt)?;
        Ok(FlowInstance {
            flow_version: read_number("flow version", self.flow_version)?,
            environment_id: self.environment_id,
            id: self.id,
            invocation_id: self.invocation_id,
            flow_id: self.flow_id,
            user_id: self.user_id,
            state,
            records,
            due: self.due.map(At::utc),
            revision: self.revision,
            created: self.created.utc(),
            updated: self.updated.utc(),
        })
    }
}

/// The modes of invocations, by (environment, id): what their instances' daily totals are kept
/// under. One read per environment.
fn modes<'a>(
    conn: &mut AnyConnection,
    keys: impl IntoIterator<Item = (&'a str, &'a str)>,
) -> Result<HashMap<(String, String), &'static str>, Failure> {
    let mut by_env: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for (env, invocation) in keys {
        by_env.entry(env).or_default().push(invocation);
    }
    let mut out = HashMap::new();
    for (env, mut ids) in by_env {
        ids.sort_unstable();
        ids.dedup();
        for chunk in ids.chunks(500) {
            let rows: Vec<(String, String)> = invocations::table
                .filter(invocations::environment_id.eq(env))
                .filter(invocations::id.eq_any(chunk))
                .select((invocations::id, invocations::mode))
                .load(conn)?;
            for (id, mode) in rows {
                let mode = Mode::parse(&mode).unwrap_or(Mode::Live).as_str();
                out.insert((env.to_owned(), id), mode);
            }
        }
    }
    Ok(out)
}

/// What the changes of instances add up to: their invocations' counts and the daily totals of
/// their steps. `changes` are each instance as it is now, with its records and state before
/// (none for a new one).
fn count<'a>(
    conn: &mut AnyConnection,
    changes: &[(&'a FlowInstance, Option<(&'a Records, InstanceState)>)],
    totals: &mut Totals,
) -> Result<(), Failure> {
    let modes = modes(
        conn,
        changes
            .iter()
            .map(|(i, _)| (i.environment_id.as_str(), i.invocation_id.as_str())),
    )?;
    let mut counts = Counts::new();
    for (instance, before) in changes {
        let mut deltas = BTreeMap::new();
        run::tally(*before, (&instance.records, instance.state), &mut deltas);
        let key = (
            instance.environment_id.clone(),
            instance.invocation_id.clone(),
        );
        let mode = modes.get(&key).copied().unwrap_or(Mode::Live.as_str());
        totals.steps(instance, mode, &deltas);
        let sums = counts.entry(key).or_default();
        for (metric, n) in deltas {
            // `reached` and `done` follow from the others when read: not stored.
            if matches!(metric.1.as_str(), "reached" | "done") {
                continue;
            }
            *sums.entry(metric).or_insert(0) += n;
        }
    }
    crate::counts::add(conn, &counts)
}

/// Inside a batch's save: the instances its batches start, in statements of 500 rows, and what
/// they count.
pub(crate) fn insert_instances<'a>(
    conn: &mut AnyConnection,
    batches: impl IntoIterator<Item = &'a BatchResult>,
    totals: &mut Totals,
) -> Result<(), Failure> {
    let instances: Vec<&FlowInstance> = batches
        .into_iter()
        .flat_map(|b| b.instances.iter())
        .collect();
    if instances.is_empty() {
        return Ok(());
    }
    let rows: Vec<InstanceRow> = instances
        .iter()
        .map(|i| InstanceRow::of(i))
        .collect::<Result<_, _>>()
        .map_err(Failure::Domain)?;
    let changes: Vec<_> = instances.iter().map(|i| (*i, None)).collect();
    count(conn, &changes, totals)?;
    for chunk in rows.chunks(500) {
        // Multi-row inserts are outside MultiConnection's subset; both backends speak them.
        crate::per_backend!(&mut *conn, c => diesel::insert_into(flow_instances::table)
            .values(chunk)
            .execute(c))?;
    }
    Ok(())
}

/// Inside a card's transition: the instance that made `card`, when it still waits, is due at
/// once and its revision changes, so that a save that read the card still open changes nothing
/// and the instance is run again with the card as it closed.
pub(crate) fn card_closed(
    conn: &mut AnyConnection,
    environment_id: &str,
    instance_id: &str,
    at: Timestamp,
) -> Result<(), Failure> {
    let changed = diesel::update(
        flow_instances::table
            .filter(flow_instances::environment_id.eq(environment_id))
            .filter(flow_instances::id.eq(instance_id))
            .filter(flow_instances::status.eq(InstanceState::Active.as_str())),
    )
    .set((
        flow_instances::due.eq(Some(At::of(at))),
        flow_instances::lease_until.eq(None::<At>),
        flow_instances::revision.eq(flow_instances::revision + 1),
    ))
    .execute(conn)?;
    if changed > 0 {
        crate::db::notices::queued(crate::Work::Instances);
    }
    Ok(())
}

/// Flow instances on diesel.
#[derive(Clone)]
pub struct DieselInstanceRepository {
    db: Database,
}

impl DieselInstanceRepository {
    /// Instances in `db`.
    pub fn new(db: Database) -> Self {
        Self { db }
    }
}

/// How a card's final status closes a `wait-for-card` step.
fn closure_of(status: CardStatus) -> Option<CardClosure> {
    match status {
        CardStatus::Completed => Some(CardClosure::Submitted),
        CardStatus::Dismissed => Some(CardClosure::Dismissed),
        CardStatus::Expired => Some(CardClosure::Expired),
        CardStatus::Cancelled => Some(CardClosure::Cancelled),
        _ => None,
    }
}

#[async_trait]
impl InstanceRepository for DieselInstanceRepository {
    async fn claim_due(
        &self,
        now: Timestamp,
        lease: Duration,
        limit: usize,
    ) -> Result<Vec<FlowInstance>, StorageError> {
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let until = At::of(domain::time::saturating_after(now, lease));
        let now = At::of(now);
        let rows = self
            .db
            .claim_transaction(move |conn| {
                // Oldest due first, through `flow_instances_due`; a claim whose lease has run out
                // is taken over.
                macro_rules! due {
                    () => {
                        flow_instances::table
                            .filter(flow_instances::status.eq(InstanceState::Active.as_str()))
                            .filter(flow_instances::due.le(now))
                            .filter(
                                flow_instances::lease_until
                                    .is_null()
                                    .or(flow_instances::lease_until.le(now)),
                            )
                            .order(flow_instances::due)
                            .limit(limit)
                            .select((flow_instances::environment_id, flow_instances::id))
                    };
                }
                // Several processes share PostgreSQL: skip rows another one is claiming.
                let keys: Vec<(String, String)> = match &mut *conn {
                    AnyConnection::Postgresql(c) => due!().for_update().skip_locked().load(c)?,
                    AnyConnection::Sqlite(c) => due!().load(c)?,
                };
                let mut by_env: HashMap<String, Vec<String>> = HashMap::new();
                for (env, id) in keys {
                    by_env.entry(env).or_default().push(id);
                }
                let mut rows: Vec<InstanceRow> = Vec::new();
                for (env, ids) in by_env {
                    let claimed = || {
                        flow_instances::table
                            .filter(flow_instances::environment_id.eq(&env))
                            .filter(flow_instances::id.eq_any(&ids))
                    };
                    diesel::update(claimed())
                        .set((
                            flow_instances::lease_until.eq(Some(until)),
                            flow_instances::revision.eq(flow_instances::revision + 1),
                        ))
                        .execute(conn)?;
                    rows.extend(claimed().select(InstanceRow::as_select()).load(conn)?);
                }
                rows.sort_by_key(|r| r.due);
                // One that cannot be read fails alone, stored failed, and is claimed no more.
                let mut claimed = Vec::with_capacity(rows.len());
                for row in rows {
                    let key = (row.environment_id.clone(), row.invocation_id.clone());
                    let id = row.id.clone();
                    match row.into_instance() {
                        Ok(instance) => claimed.push(instance),
                        Err(e) => {
                            tracing::error!(
                                instance = %id,
                                error = %e,
                                "a flow instance cannot be read; it is failed"
                            );
                            unreadable(conn, key, &id, now)?;
                        }
                    }
                }
                Ok(claimed)
            })
            .await?;
        Ok(rows)
    }

    async fn closed_cards(
        &self,
        environment_id: &str,
        card_ids: Vec<String>,
    ) -> Result<Vec<(String, ClosedCard)>, StorageError> {
        let env = environment_id.to_owned();
        self.db
            .run(move |conn| {
                let cards: Vec<(String, String)> = card_instances::table
                    .filter(card_instances::id.eq_any(&card_ids))
                    .filter(card_instances::environment_id.eq(&env))
                    .select((card_instances::id, card_instances::status))
                    .load(conn)?;
                let mut closed = Vec::new();
                for (id, status) in cards {
                    let Some(closure) = CardStatus::parse(&status).and_then(closure_of) else {
                        continue;
                    };
                    let mut values = Map::new();
                    if closure == CardClosure::Submitted {
                        let submitted: Option<Option<String>> = analytics_events::table
                            .filter(analytics_events::environment_id.eq(&env))
                            .filter(analytics_events::card_instance_id.eq(&id))
                            .filter(analytics_events::status.eq(CardStatus::Completed.as_str()))
                            .select(analytics_events::submitted)
                            .first(conn)
                            .optional()?;
                        if let Some(Value::Object(v)) = submitted
                            .flatten()
                            .and_then(|text| serde_json::from_str(&text).ok())
                        {
                            values = v;
                        }
                    }
                    closed.push((id, ClosedCard { closure, values }));
                }
                Ok(closed)
            })
            .await
    }

    async fn advance(&self, advances: Vec<InstanceAdvance>) -> Result<u64, StorageError> {
        if advances.is_empty() {
            return Ok(0);
        }
        self.db
            .transaction(move |conn| {
                let mut advances = advances;
                // Rows are locked in one order, (environment, id), as cancels lock them.
                advances.sort_by(|a, b| {
                    (&a.instance.environment_id, &a.instance.id)
                        .cmp(&(&b.instance.environment_id, &b.instance.id))
                });
                // Each flow's cancels since its oldest invocation here, read once.
                let mut since: BTreeMap<(String, String), Timestamp> = BTreeMap::new();
                for a in &advances {
                    let key = (
                        a.instance.environment_id.clone(),
                        a.instance.flow_id.clone(),
                    );
                    let at = since.entry(key).or_insert(a.invocation_created);
                    *at = (*at).min(a.invocation_created);
                }
                let mut markers = HashMap::new();
                for ((env, flow), at) in since {
                    let found = markers_since(conn, &env, &flow, at)?;
                    markers.insert((env, flow), found);
                }
                let mut decided = Vec::with_capacity(advances.len());
                for advance in advances {
                    let InstanceAdvance {
                        mut instance,
                        before,
                        invocation_created,
                        cards,
                        events,
                    } = advance;
                    let key = (instance.environment_id.clone(), instance.flow_id.clone());
                    let covered = markers.get(&key).is_some_and(|found| {
                        found.iter().any(|m| {
                            m.covers(
                                &instance.invocation_id,
                                instance.flow_version,
                                invocation_created,
                                &instance.user_id,
                            )
                        })
                    });
                    let (cards, events) = if covered {
                        // Nothing of the run happens: its steps stop as they were read.
                        instance.records = before.0.clone();
                        run::cancel(&mut instance.records, instance.updated);
                        instance.state = InstanceState::Cancelled;
                        instance.due = None;
                        (Vec::new(), Vec::new())
                    } else {
                        (cards, events)
                    };
                    decided.push((instance, before, cards, events));
                }
                let kept = save_fenced(conn, decided.iter().map(|(i, ..)| i))?;
                let mut stale = 0;
                let mut made = carrier();
                let mut saved = Vec::new();
                let mut cards_created: BTreeMap<(String, String), i64> = BTreeMap::new();
                for ((instance, before, cards, events), kept) in decided.into_iter().zip(kept) {
                    if !kept {
                        stale += 1;
                        continue;
                    }
                    if !cards.is_empty() {
                        let key = (
                            instance.environment_id.clone(),
                            instance.invocation_id.clone(),
                        );
                        *cards_created.entry(key).or_insert(0) +=
                            i64::try_from(cards.len()).unwrap_or(i64::MAX);
                    }
                    made.cards.extend(cards);
                    made.events.extend(events);
                    saved.push((instance, before));
                }
                // Then the invocations' rows, in key order, then their counts: the order of the
                // engine's saves (an invocation's row before its counts).
                for ((env, invocation), n) in cards_created {
                    diesel::update(
                        invocations::table
                            .filter(invocations::environment_id.eq(env))
                            .filter(invocations::id.eq(invocation)),
                    )
                    .set(invocations::cards_created.eq(invocations::cards_created + n))
                    .execute(conn)?;
                }
                let mut totals = Totals::default();
                let changes: Vec<_> = saved
                    .iter()
                    .map(|(i, (records, state))| (i, Some((records, *state))))
                    .collect();
                count(conn, &changes, &mut totals)?;
                if !made.cards.is_empty() {
                    RunWrites::of(&[&made], conn.backend())
                        .map_err(Failure::Domain)?
                        .write(conn, &[&made], &mut totals)?;
                }
                totals.flush(conn)?;
                Ok(stale)
            })
            .await
    }

    async fn get(
        &self,
        environment_id: &str,
        invocation_id: &str,
        user_id: &str,
    ) -> Result<Option<FlowInstance>, StorageError> {
        let (env, inv, user) = (
            environment_id.to_owned(),
            invocation_id.to_owned(),
            user_id.to_owned(),
        );
        let row: Option<InstanceRow> = self
            .db
            .run(move |conn| {
                Ok(flow_instances::table
                    .filter(flow_instances::environment_id.eq(env))
                    .filter(flow_instances::invocation_id.eq(inv))
                    .filter(flow_instances::user_id.eq(user))
                    .select(InstanceRow::as_select())
                    .first(conn)
                    .optional()?)
            })
            .await?;
        row.map(InstanceRow::into_instance).transpose()
    }

    async fn counts(
        &self,
        environment_id: &str,
        invocation_id: &str,
    ) -> Result<Vec<(String, String, i64)>, StorageError> {
        let (env, inv) = (environment_id.to_owned(), invocation_id.to_owned());
        self.db
            .run(move |conn| crate::counts::of(conn, &env, &inv))
            .await
    }

    async fn waiting(
        &self,
        environment_id: &str,
        flow_id: &str,
        flow_version: u32,
        mode: Mode,
    ) -> Result<Vec<(String, u64)>, StorageError> {
        let (env, flow) = (environment_id.to_owned(), flow_id.to_owned());
        let version = write_number("a flow version", flow_version)?;
        self.db
            .run(move |conn| crate::counts::waiting(conn, &env, &flow, version, mode))
            .await
    }
}

/// Fails a stored instance of `(environment, invocation)` that its row cannot be read back
/// into: it is claimed no more, and its invocation counts it failed.
fn unreadable(
    conn: &mut AnyConnection,
    (env, invocation): (String, String),
    id: &str,
    at: At,
) -> Result<(), Failure> {
    diesel::update(
        flow_instances::table
            .filter(flow_instances::environment_id.eq(&env))
            .filter(flow_instances::id.eq(id)),
    )
    .set((
        flow_instances::status.eq(InstanceState::Failed.as_str()),
        flow_instances::due.eq(None::<At>),
        flow_instances::lease_until.eq(None::<At>),
        flow_instances::updated.eq(at),
    ))
    .execute(conn)?;
    let deltas = BTreeMap::from([
        (
            (String::new(), InstanceState::Active.as_str().to_owned()),
            -1,
        ),
        (
            (String::new(), InstanceState::Failed.as_str().to_owned()),
            1,
        ),
    ]);
    crate::counts::add(conn, &Counts::from([((env, invocation), deltas)]))
}

/// Stores each of `instances` while its revision is the stored one: whether each was. In the
/// order given (the caller's, by environment and id). On PostgreSQL 500 to a statement
/// (`UPDATE ... FROM unnest(...)`), a round trip each being most of a save of due waits; on
/// SQLite one statement each, which is no round trip there.
fn save_fenced<'a>(
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

/// A batch that carries the cards of instances run on to the writes of cards and events, which
/// take batches; its progress is never saved.
fn carrier() -> BatchResult {
    BatchResult {
        environment_id: String::new(),
        invocation_id: String::new(),
        from_cursor: None,
        cursor: None,
        status: InvocationStatus::Running,
        users_targeted: 0,
        cards_created: 0,
        errors: Vec::new(),
        cards: Vec::<Arc<domain::card::CardInstance>>::new(),
        events: Vec::new(),
        instances: Vec::new(),
        updated: Timestamp::default(),
        lease_until: None,
    }
}
