//! Flow instances stored as they go (contract §21; the port is
//! [`domain::trigger::instances::InstanceRepository`]): written with the batch that starts them,
//! claimed when due, and saved as they run on, each save fenced by the instance's revision.

use std::collections::{BTreeMap, HashMap};

use async_trait::async_trait;
use chrono::Duration;
use diesel::prelude::*;
use domain::card::CardStatus;
use domain::flow::steps::{CardClosure, ClosedCard, InstanceState};
use domain::trigger::instances::{FlowInstance, InstanceAdvance, InstanceRepository};
use domain::trigger::{BatchResult, Mode};
use domain::{StorageError, Timestamp};
use serde_json::{Map, Value};

use crate::counts::Counts;
use crate::db::{AnyConnection, Database, Failure};
use crate::error::write_number;
use crate::millis::At;
use crate::schema::{analytics_events, card_instances, flow_instances};
use crate::totals::Totals;

mod advance;
mod counting;
mod fenced;
mod row;
use counting::count;
use row::InstanceRow;

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
        // On SQLite a save of many instances hands the writers' turn on between parts when a
        // writer waits (a `/start`, a submit), and goes on in a transaction of its own after:
        // each instance is saved whole in one of them.
        let (mut stale, mut rest) = (0, advances);
        while !rest.is_empty() {
            let (more, left) = self
                .db
                .transaction_handing_on(move |conn, others| advance::in_parts(conn, rest, others))
                .await?;
            stale += more;
            rest = left;
        }
        Ok(stale)
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
