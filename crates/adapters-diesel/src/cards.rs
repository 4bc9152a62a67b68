//! Card instances: the end-user feed, actions, events and the scheduler's transitions.

use async_trait::async_trait;
use diesel::prelude::*;
use domain::card::{AnalyticsEvent, CardInstance, CardRepository, CardStatus, Transition};
use domain::{StorageError, Timestamp};

use crate::db::Database;
use crate::millis::At;
use crate::rows::*;
use crate::schema::{analytics_events, card_instances};
use crate::writes::*;

/// The domain's `CardRepository` port on the service's database.
pub struct DieselCardRepository {
    db: Database,
}

impl DieselCardRepository {
    /// Over `db`.
    pub fn new(db: Database) -> Self {
        Self { db }
    }
}

/// The cards due by `$now` (`At`), at most `$limit` of each kind: embargoes and snoozes ended,
/// expiries come. Five reads, each served by its own (status, time) partial index, in one
/// statement (`UNION ALL`, which diesel builds for each backend, not for `AnyConnection`; one
/// read with OR would read every card).
macro_rules! due_cards {
    ($now:expr, $limit:expr) => {{
        let due = |status: CardStatus| {
            card_instances::table
                .filter(card_instances::status.eq(status.as_str()))
                .limit($limit)
                .select(CardRow::as_select())
        };
        due(CardStatus::Embargoed)
            .filter(card_instances::embargo_until.le($now))
            .union_all(due(CardStatus::Snoozed).filter(card_instances::snoozed_until.le($now)))
            .union_all(due(CardStatus::Embargoed).filter(card_instances::expires_at.le($now)))
            .union_all(due(CardStatus::Active).filter(card_instances::expires_at.le($now)))
            .union_all(due(CardStatus::Snoozed).filter(card_instances::expires_at.le($now)))
    }};
}

#[async_trait]
impl CardRepository for DieselCardRepository {
    async fn feed(
        &self,
        environment_id: &str,
        user_id: &str,
        stream_id: Option<String>,
    ) -> Result<Vec<CardInstance>, StorageError> {
        let (env, user) = (environment_id.to_owned(), user_id.to_owned());
        let rows = self
            .db
            .run(move |conn| {
                let query = crate::rows::active_cards(&env, &user, stream_id.as_deref())
                    .order((
                        card_instances::priority.desc(),
                        card_instances::created.desc(),
                        card_instances::id.desc(),
                    ))
                    .select(CardRow::as_select());
                Ok(query.load(conn)?)
            })
            .await?;
        let mut shared = SharedParse::default();
        rows.into_iter().map(|row| shared.card(row)).collect()
    }

    async fn get(
        &self,
        environment_id: &str,
        user_id: &str,
        card_id: &str,
    ) -> Result<Option<CardInstance>, StorageError> {
        let (env, user, id) = (
            environment_id.to_owned(),
            user_id.to_owned(),
            card_id.to_owned(),
        );
        let row = self
            .db
            .run(move |conn| {
                Ok(card_instances::table
                    .filter(
                        card_instances::environment_id
                            .eq(env)
                            .and(card_instances::user_id.eq(user))
                            .and(card_instances::id.eq(id)),
                    )
                    .select(CardRow::as_select())
                    .first(conn)
                    .optional()?)
            })
            .await?;
        row.map(card).transpose()
    }

    async fn due(&self, now: Timestamp, limit: u32) -> Result<Vec<CardInstance>, StorageError> {
        let now = now.naive_utc();
        let rows = self
            .db
            .run(move |conn| {
                let mut rows: Vec<CardRow> = crate::per_backend!(&mut *conn, c => {
                    due_cards!(At(now), i64::from(limit)).load(c)?
                });
                // A card may be due twice (an embargo and an expiry both past): once is enough.
                let mut seen = std::collections::HashSet::new();
                rows.retain(|r| seen.insert(r.id.clone()));
                rows.truncate(usize::try_from(limit).unwrap_or(usize::MAX));
                Ok(rows)
            })
            .await?;
        let mut shared = SharedParse::default();
        rows.into_iter().map(|row| shared.card(row)).collect()
    }

    async fn transition(&self, transitions: Vec<Transition>) -> Result<usize, StorageError> {
        self.db
            .transaction(move |conn| {
                let mut applied = Vec::new();
                for t in &transitions {
                    let c = &t.event.card;
                    let changed = diesel::update(
                        card_instances::table.filter(
                            card_instances::id
                                .eq(c.id.as_str())
                                .and(card_instances::status.eq(t.from.as_str())),
                        ),
                    )
                    .set((
                        card_instances::status.eq(c.status.as_str()),
                        card_instances::snoozed_until
                            .eq(c.snoozed_until.map(|x| At(x.naive_utc()))),
                        card_instances::published_at.eq(c.published_at.map(|x| At(x.naive_utc()))),
                        card_instances::updated.eq(At(c.updated.naive_utc())),
                    ))
                    .execute(conn)?;
                    if changed == 1 {
                        if c.status.is_closed() {
                            crate::instances::card_closed(
                                conn,
                                &c.environment_id,
                                &c.flow_instance_id,
                                c.updated,
                            )?;
                        }
                        applied.push(t.event.clone());
                    }
                }
                insert_events(conn, &applied)?;
                Ok(applied.len())
            })
            .await
    }

    async fn events_of(
        &self,
        environment_id: &str,
        card_id: &str,
    ) -> Result<Vec<AnalyticsEvent>, StorageError> {
        let (env, id) = (environment_id.to_owned(), card_id.to_owned());
        self.db
            .run(move |conn| {
                let rows = analytics_events::table
                    .filter(
                        analytics_events::environment_id
                            .eq(env)
                            .and(analytics_events::card_instance_id.eq(id)),
                    )
                    .order((analytics_events::created, analytics_events::id))
                    .select(EventRow::as_select())
                    .load(conn)?;
                with_cards(conn, rows)
            })
            .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each of the five reads of due cards goes through its own partial index, none through a
    /// scan of every card.
    #[test]
    fn due_cards_are_read_through_their_partial_indexes() {
        let now = chrono::DateTime::from_timestamp(1_700_000_000, 0)
            .expect("time")
            .naive_utc();
        let query = due_cards!(At(now), 10_i64);
        let plan = crate::testing::sqlite_query_plan(&query);
        for index in [
            "card_instances_embargo",
            "card_instances_snooze",
            "card_instances_expiry",
        ] {
            assert!(plan.iter().any(|d| d.contains(index)), "{index}: {plan:?}");
        }
        assert!(
            !plan.iter().any(|d| d.starts_with("SCAN card_instances")),
            "{plan:?}"
        );
    }
}
