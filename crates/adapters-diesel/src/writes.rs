//! Writes of cards, events and invocations, each with the outbox rows its events call for.

use std::sync::Arc;

use diesel::prelude::*;
use domain::card::{AnalyticsEvent, CardInstance};
use domain::trigger::BatchResult;
use domain::StorageError;

use crate::db::{AnyConnection, Backend, Failure};
use crate::packed::Statement;
use crate::rows::*;
use crate::schema::{analytics_events, card_instances, invocations};
use crate::totals::Totals;

/// Inserts events and their outbox rows: on SQLite the runs worth packing packed (see
/// [`crate::packed`]), the others (and all on PostgreSQL) in multi-row statements; and adds
/// them to the daily totals.
pub(crate) fn insert_events(
    conn: &mut AnyConnection,
    events: &[AnalyticsEvent],
) -> Result<(), Failure> {
    let events: Vec<&AnalyticsEvent> = events.iter().collect();
    EventWrites::of(&events, conn.backend()).write(conn)?;
    enqueue(conn, &events)?;
    let mut totals = Totals::default();
    totals.events(events.iter().copied());
    totals.flush(conn)
}

/// The outboxes: webhook deliveries and pushes commit with their events.
/// And the feed's streams are told whose cards changed, when the transaction commits.
pub(crate) fn enqueue(conn: &mut AnyConnection, events: &[&AnalyticsEvent]) -> Result<(), Failure> {
    crate::webhooks::enqueue(conn, events)?;
    crate::push_jobs::enqueue(conn, events)?;
    crate::feed::note(conn, events)
}

/// Runs packed statements, built for SQLite; the rows they inserted.
pub(crate) fn run_packed(
    conn: &mut AnyConnection,
    statements: &[Statement],
) -> Result<usize, Failure> {
    if statements.is_empty() {
        return Ok(0);
    }
    let AnyConnection::Sqlite(c) = conn else {
        return Err(Failure::Domain(StorageError::Internal(
            "packed statements are for SQLite".into(),
        )));
    };
    let mut inserted = 0;
    for statement in statements {
        inserted += statement.run(c)?;
    }
    Ok(inserted)
}

/// Cards to insert, built before the transaction that writes them: on SQLite the runs worth
/// packing as statements (see [`crate::packed`]), the other cards (all on PostgreSQL) as rows
/// for multi-row statements.
pub(crate) struct CardWrites {
    packed: Vec<Statement>,
    rows: Vec<CardRow>,
}

impl CardWrites {
    /// An error when a card's number is out of its column's range.
    pub(crate) fn of(cards: &[Arc<CardInstance>], backend: Backend) -> Result<Self, StorageError> {
        let (packed, rest) = match backend {
            Backend::Sqlite => crate::packed::cards(cards)?,
            Backend::Postgres => (Vec::new(), cards.iter().collect()),
        };
        let rows = rest
            .into_iter()
            .map(|c| card_row(c))
            .collect::<Result<_, _>>()?;
        Ok(CardWrites { packed, rows })
    }

    pub(crate) fn write(&self, conn: &mut AnyConnection) -> Result<(), Failure> {
        run_packed(conn, &self.packed)?;
        for chunk in self.rows.chunks(INSERT_CHUNK) {
            crate::per_backend!(&mut *conn, c => diesel::insert_into(card_instances::table).values(chunk).execute(c))?;
        }
        Ok(())
    }
}

/// Events to insert, built like [`CardWrites`]; their outbox rows are not among them (see
/// [`enqueue`]).
pub(crate) struct EventWrites {
    packed: Vec<Statement>,
    rows: Vec<EventRow>,
}

impl EventWrites {
    pub(crate) fn of(events: &[&AnalyticsEvent], backend: Backend) -> Self {
        let (packed, rest) = match backend {
            Backend::Sqlite => crate::packed::events(events),
            Backend::Postgres => (Vec::new(), events.to_vec()),
        };
        EventWrites {
            packed,
            rows: rest.into_iter().map(event_row).collect(),
        }
    }

    pub(crate) fn write(&self, conn: &mut AnyConnection) -> Result<(), Failure> {
        run_packed(conn, &self.packed)?;
        for chunk in self.rows.chunks(INSERT_CHUNK) {
            crate::per_backend!(&mut *conn, c => diesel::insert_into(analytics_events::table).values(chunk).execute(c))?;
        }
        Ok(())
    }
}

/// New invocations to insert, built like [`CardWrites`]; each inserted only when its id is new
/// in its environment.
pub(crate) struct InvocationWrites {
    rows: Vec<InvocationRow>,
    packed: Vec<Statement>,
    /// The rows not packed.
    other: Vec<usize>,
}

impl InvocationWrites {
    pub(crate) fn of(rows: Vec<InvocationRow>, backend: Backend) -> Self {
        let (packed, other) = match backend {
            Backend::Sqlite => crate::packed::invocations(&rows),
            Backend::Postgres => (Vec::new(), (0..rows.len()).collect()),
        };
        InvocationWrites {
            rows,
            packed,
            other,
        }
    }

    /// True when every one was new (inserted).
    pub(crate) fn write(&self, conn: &mut AnyConnection) -> Result<bool, Failure> {
        let mut inserted = run_packed(conn, &self.packed)?;
        let other: Vec<&InvocationRow> = self.other.iter().map(|&i| &self.rows[i]).collect();
        for chunk in other.chunks(INSERT_CHUNK / 2) {
            let chunk: Vec<&InvocationRow> = chunk.to_vec();
            inserted += crate::per_backend!(&mut *conn, c => diesel::insert_into(invocations::table)
                .values(chunk)
                .on_conflict((invocations::environment_id, invocations::id))
                .do_nothing()
                .execute(c))?;
        }
        Ok(inserted == self.rows.len())
    }
}

/// The cards and events of batches, built like [`CardWrites`]: the rows of every batch
/// together, not one statement per batch.
pub(crate) struct RunWrites {
    cards: CardWrites,
    events: EventWrites,
}

impl RunWrites {
    /// An error when a card's number is out of its column's range.
    pub(crate) fn of(batches: &[&BatchResult], backend: Backend) -> Result<Self, StorageError> {
        let cards: Vec<Arc<CardInstance>> = batches
            .iter()
            .flat_map(|b| b.cards.iter().cloned())
            .collect();
        Ok(RunWrites {
            cards: CardWrites::of(&cards, backend)?,
            events: EventWrites::of(&events_of(batches), backend),
        })
    }

    /// Writes them, with the outbox rows of the events of `batches`, the batches they were
    /// built from; counts them in `totals`.
    pub(crate) fn write(
        &self,
        conn: &mut AnyConnection,
        batches: &[&BatchResult],
        totals: &mut Totals,
    ) -> Result<(), Failure> {
        self.cards.write(conn)?;
        self.events.write(conn)?;
        let events = events_of(batches);
        enqueue(conn, &events)?;
        totals.cards(batches.iter().flat_map(|b| b.cards.iter().map(|c| &**c)));
        totals.events(events);
        Ok(())
    }
}

pub(crate) fn events_of<'a>(batches: &[&'a BatchResult]) -> Vec<&'a AnalyticsEvent> {
    batches.iter().flat_map(|b| b.events.iter()).collect()
}
