//! Writes of cards, events and invocations, each with the outbox rows its events call for.

use std::sync::Arc;

use diesel::prelude::*;
use domain::card::{AnalyticsEvent, CardInstance};
use domain::trigger::BatchResult;
use domain::StorageError;

use crate::columns::ColumnInsert;
use crate::db::{AnyConnection, Backend, Failure};
use crate::packed::Statement;
use crate::rows::*;
use crate::schema::{analytics_events, card_instances, invocations};
use crate::totals::Totals;

/// Inserts events and their outbox rows: on SQLite the runs worth packing packed (see
/// [`crate::packed`]) and the others in multi-row statements, on PostgreSQL as columns (see
/// [`crate::columns`]); and adds
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

/// Runs a PostgreSQL insert of columns; the rows it inserted.
fn run_columns(conn: &mut AnyConnection, insert: &ColumnInsert) -> Result<usize, Failure> {
    if insert.len() == 0 {
        return Ok(0);
    }
    let AnyConnection::Postgresql(c) = conn else {
        return Err(Failure::Domain(StorageError::Internal(
            "inserts of columns are for PostgreSQL".into(),
        )));
    };
    Ok(insert.run(c)?)
}

/// Cards to insert, built before the transaction that writes them: on SQLite the runs worth
/// packing as statements (see [`crate::packed`]) and the other cards as rows for multi-row
/// statements; on PostgreSQL one insert of columns (see [`crate::columns`]).
pub(crate) type CardWrites = RowWrites<CardRow>;

/// Rows of one table to insert: on SQLite the runs worth packing as statements and the other
/// rows, on PostgreSQL one insert of columns.
pub(crate) enum RowWrites<R> {
    Sqlite {
        packed: Vec<Statement>,
        rows: Vec<R>,
    },
    Postgres(ColumnInsert),
}

impl<R> RowWrites<R> {
    /// Appends `more`, built for the same backend; false (this left in any state) otherwise.
    pub(crate) fn append(&mut self, more: RowWrites<R>) -> bool {
        match (self, more) {
            (
                RowWrites::Sqlite { packed, rows },
                RowWrites::Sqlite {
                    packed: more_packed,
                    rows: more_rows,
                },
            ) => {
                packed.extend(more_packed);
                rows.extend(more_rows);
                true
            }
            (RowWrites::Postgres(insert), RowWrites::Postgres(more)) => insert.append(more),
            _ => false,
        }
    }
}

impl RowWrites<CardRow> {
    /// An error when a card's number is out of its column's range.
    pub(crate) fn of(cards: &[Arc<CardInstance>], backend: Backend) -> Result<Self, StorageError> {
        match backend {
            Backend::Sqlite => {
                let (packed, rest) = crate::packed::cards(cards)?;
                let rows = rest
                    .into_iter()
                    .map(|c| card_row(c))
                    .collect::<Result<_, _>>()?;
                Ok(RowWrites::Sqlite { packed, rows })
            }
            Backend::Postgres => {
                let rows = cards
                    .iter()
                    .map(|c| card_row(c))
                    .collect::<Result<_, _>>()?;
                Ok(RowWrites::Postgres(card_columns(rows)))
            }
        }
    }

    pub(crate) fn write(&self, conn: &mut AnyConnection) -> Result<(), Failure> {
        match self {
            RowWrites::Sqlite { packed, rows } => {
                run_packed(conn, packed)?;
                for chunk in rows.chunks(INSERT_CHUNK) {
                    crate::per_backend!(&mut *conn,
                        c => diesel::insert_into(card_instances::table).values(chunk).execute(c))?;
                }
            }
            RowWrites::Postgres(insert) => {
                run_columns(conn, insert)?;
            }
        }
        Ok(())
    }
}

/// Events to insert, built like [`CardWrites`]; their outbox rows are not among them (see
/// [`enqueue`]).
pub(crate) type EventWrites = RowWrites<EventRow>;

impl RowWrites<EventRow> {
    pub(crate) fn of(events: &[&AnalyticsEvent], backend: Backend) -> Self {
        match backend {
            Backend::Sqlite => {
                let (packed, rest) = crate::packed::events(events);
                RowWrites::Sqlite {
                    packed,
                    rows: rest.into_iter().map(event_row).collect(),
                }
            }
            Backend::Postgres => {
                RowWrites::Postgres(event_columns(events.iter().map(|e| event_row(e)).collect()))
            }
        }
    }

    pub(crate) fn write(&self, conn: &mut AnyConnection) -> Result<(), Failure> {
        match self {
            RowWrites::Sqlite { packed, rows } => {
                run_packed(conn, packed)?;
                for chunk in rows.chunks(INSERT_CHUNK) {
                    crate::per_backend!(&mut *conn,
                        c => diesel::insert_into(analytics_events::table).values(chunk)
                            .execute(c))?;
                }
            }
            RowWrites::Postgres(insert) => {
                run_columns(conn, insert)?;
            }
        }
        Ok(())
    }
}

/// New invocations to insert, built like [`CardWrites`]: all of them, or none when an id is
/// stored already in its environment ([`InvocationWrites::write`]).
pub(crate) enum InvocationWrites {
    Sqlite {
        rows: Vec<InvocationRow>,
        packed: Vec<Statement>,
        /// The rows not packed.
        other: Vec<usize>,
    },
    Postgres(ColumnInsert),
}

impl InvocationWrites {
    pub(crate) fn of(rows: Vec<InvocationRow>, backend: Backend) -> Self {
        match backend {
            Backend::Sqlite => {
                let (packed, other) = crate::packed::invocations(&rows);
                InvocationWrites::Sqlite {
                    rows,
                    packed,
                    other,
                }
            }
            Backend::Postgres => InvocationWrites::Postgres(invocation_columns(rows)),
        }
    }

    /// Appends `more`, built for the same backend; false (this left in any state) otherwise.
    pub(crate) fn append(&mut self, more: InvocationWrites) -> bool {
        match (self, more) {
            (
                InvocationWrites::Sqlite {
                    rows,
                    packed,
                    other,
                },
                InvocationWrites::Sqlite {
                    rows: more_rows,
                    packed: more_packed,
                    other: more_other,
                },
            ) => {
                let offset = rows.len();
                other.extend(more_other.into_iter().map(|i| i + offset));
                rows.extend(more_rows);
                packed.extend(more_packed);
                true
            }
            (InvocationWrites::Postgres(insert), InvocationWrites::Postgres(more)) => {
                insert.append(more)
            }
            _ => false,
        }
    }

    /// Inserts them all; [`Failure::Retry`] when an id was stored already, leaving the
    /// transaction to be rolled back (on PostgreSQL it is aborted).
    pub(crate) fn write(&self, conn: &mut AnyConnection) -> Result<(), Failure> {
        match self {
            InvocationWrites::Sqlite {
                rows,
                packed,
                other,
            } => {
                let mut inserted = run_packed(conn, packed)?;
                let other: Vec<&InvocationRow> = other.iter().map(|&i| &rows[i]).collect();
                for chunk in other.chunks(INSERT_CHUNK / 2) {
                    let chunk: Vec<&InvocationRow> = chunk.to_vec();
                    inserted += crate::per_backend!(&mut *conn,
                        c => diesel::insert_into(invocations::table)
                        .values(chunk)
                        .on_conflict((invocations::environment_id, invocations::id))
                        .do_nothing()
                        .execute(c))?;
                }
                if inserted == rows.len() {
                    Ok(())
                } else {
                    Err(Failure::Retry)
                }
            }
            InvocationWrites::Postgres(insert) => match run_columns(conn, insert) {
                Err(Failure::Query(diesel::result::Error::DatabaseError(
                    diesel::result::DatabaseErrorKind::UniqueViolation,
                    info,
                ))) if info.constraint_name() == Some(INVOCATIONS_KEY) => Err(Failure::Retry),
                other => other.map(drop),
            },
        }
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

    /// Appends `more`, built for the same backend; false (this left in any state) otherwise.
    pub(crate) fn append(&mut self, more: RunWrites) -> bool {
        self.cards.append(more.cards) && self.events.append(more.events)
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
