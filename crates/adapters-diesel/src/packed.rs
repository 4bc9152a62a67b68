//! The engine's multi-row inserts on SQLite: one statement per run of rows that share every
//! column but their ids, with the shared columns bound once and the ids packed in one JSON
//! array (`INSERT ... SELECT ... FROM jsonb_each(?)`).
//!
//! `jsonb_each`, not `json_each`: each row's `value` is then a slice of the parsed array
//! (SQLite's binary JSON), which `json_extract` reads as it is. `json_each` renders each row
//! back into JSON text for every column read from it, and `json_extract` parses that text
//! again: with a card's content among six columns that was a large share of the recorder's
//! time.
//!
//! Rows written together mostly differ only in their ids: the cards and events
//! of one fan-out batch, the events of one cancel chunk, the cards of one-user invocations (with
//! their contents when each has its own, as a CSV task's rows do), and the invocations of one
//! recording (with their fingerprints, targets, payloads and times). diesel's multi-row
//! `INSERT` binds every column of every row, and on SQLite each bind is a call into the library
//! under its mutex, after formatting timestamps and cloning the shared card content per row: in
//! a profile of a large fan-out, more of the engine's write transaction than SQLite's own work
//! of inserting the rows. PostgreSQL inserts columns instead (see [`crate::columns`]).
//!
//! Rows are grouped as they come (consecutive rows, not sorted). Runs shorter than [`MIN_RUN`]
//! are handed back for diesel's multi-row `INSERT`: one statement per row of a one-user
//! invocation made `/start` measurably slower.
//!
//! `json_extract` ends a string at a NUL character, so packed strings must hold none: ids and
//! user ids are refused with control characters (the domain's validation), and a card's content
//! and context are packed as JSON text, in which a NUL is an escape sequence.

use std::borrow::Cow;
use std::sync::{Arc, LazyLock};

use chrono::NaiveDateTime;
use diesel::query_builder::{AstPass, QueryFragment, QueryId};
use diesel::sql_types::{BigInt, Bool, Integer, Nullable, Text};
use diesel::sqlite::{Sqlite, SqliteConnection};
use diesel::{QueryResult, RunQueryDsl};
use domain::card::{AnalyticsEvent, CardInstance};
use domain::StorageError;
use serde_json::Value;

use crate::error::write_number;
use crate::millis::{millis, At, Millis};
use crate::rows::InvocationRow;

/// Rows per statement: the packed ids of 1,000 cards are ~70 KB of JSON.
const PACK: usize = 1_000;

/// Shorter runs are left to diesel's multi-row `INSERT`.
const MIN_RUN: usize = 4;

/// A value bound to a [`Statement`], owned: statements are built on one thread and run on
/// another (see `engine`'s recorder).
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Bind {
    Text(String),
    OptText(Option<String>),
    Int(i32),
    BigInt(i64),
    Bool(bool),
    Time(NaiveDateTime),
    OptTime(Option<NaiveDateTime>),
}

/// One packed multi-row insert (or another statement run in every transaction on SQLite, such
/// as the daily totals' upsert), built apart from its execution: its SQL, with one `?` per
/// bind, and its binds in order. Unlike diesel's `sql_query`, which SQLite parses again at
/// every execution (a visible cost in the recorder's profile), it is prepared once per
/// connection and kept in diesel's statement cache, keyed by its SQL.
#[derive(Debug)]
pub(crate) struct Statement {
    sql: &'static str,
    binds: Vec<Bind>,
}

impl Statement {
    pub(crate) fn new(sql: &'static str, binds: Vec<Bind>) -> Self {
        debug_assert_eq!(sql.matches('?').count(), binds.len(), "{sql}");
        Statement { sql, binds }
    }

    /// Runs it; the rows inserted.
    pub(crate) fn run(&self, conn: &mut SqliteConnection) -> QueryResult<usize> {
        RunQueryDsl::execute(self, conn)
    }
}

impl QueryId for Statement {
    type QueryId = ();
    const HAS_STATIC_QUERY_ID: bool = false;
}

impl QueryFragment<Sqlite> for Statement {
    fn walk_ast<'b>(&'b self, mut out: AstPass<'_, 'b, Sqlite>) -> QueryResult<()> {
        // The SQL holds no `?` but its placeholders (no string literal given to `Statement::new`
        // has one), and `push_bind_param` writes each placeholder back.
        let mut pieces = self.sql.split('?');
        out.push_sql(pieces.next().unwrap_or_default());
        for (bind, piece) in self.binds.iter().zip(pieces) {
            match bind {
                Bind::Text(v) => out.push_bind_param::<Text, _>(v)?,
                Bind::OptText(v) => out.push_bind_param::<Nullable<Text>, _>(v)?,
                Bind::Int(v) => out.push_bind_param::<Integer, _>(v)?,
                Bind::BigInt(v) => out.push_bind_param::<BigInt, _>(v)?,
                Bind::Bool(v) => out.push_bind_param::<Bool, _>(v)?,
                Bind::Time(v) => out.push_bind_param::<Millis, _>(v)?,
                Bind::OptTime(v) => out.push_bind_param::<Nullable<Millis>, _>(v)?,
            }
            out.push_sql(piece);
        }
        Ok(())
    }
}

impl RunQueryDsl<SqliteConnection> for &Statement {}

/// `items` cut into runs of consecutive items that are `same` as their run's first, at most
/// `PACK` long.
fn runs<T>(items: &[T], same: impl Fn(&T, &T) -> bool) -> Vec<&[T]> {
    let mut out = Vec::new();
    let mut start = 0;
    for i in 1..=items.len() {
        if i == items.len() || i - start == PACK || !same(&items[start], &items[i]) {
            out.push(&items[start..i]);
            start = i;
        }
    }
    out
}

/// The runs of `items` worth packing, and the items of the other runs.
fn split<T>(items: &[T], same: impl Fn(&T, &T) -> bool) -> (Vec<&[T]>, Vec<&T>) {
    let (long, short): (Vec<&[T]>, Vec<&[T]>) = runs(items, same)
        .into_iter()
        .partition(|r| r.len() >= MIN_RUN);
    (long, short.into_iter().flatten().collect())
}

/// The varying columns of a run, as a JSON array of arrays of strings (escaped by serde).
fn pack<S: AsRef<str>, const N: usize>(rows: impl Iterator<Item = [S; N]>) -> String {
    let mut out = Vec::with_capacity(4096);
    out.push(b'[');
    for (i, row) in rows.enumerate() {
        if i > 0 {
            out.push(b',');
        }
        out.push(b'[');
        for (j, text) in row.iter().enumerate() {
            if j > 0 {
                out.push(b',');
            }
            // Writing a string into a Vec cannot fail.
            let _ = serde_json::to_writer(&mut out, text.as_ref());
        }
        out.push(b']');
    }
    out.push(b']');
    String::from_utf8(out).unwrap_or_default()
}

fn naive(t: Option<domain::Timestamp>) -> Option<NaiveDateTime> {
    t.map(|t| t.naive_utc())
}

/// Invocations sharing all but their id, fingerprint, target, payload and times: the new
/// invocations of one recording (each `/start` call has its own time).
fn same_invocation(a: &&InvocationRow, b: &&InvocationRow) -> bool {
    a.environment_id == b.environment_id
        && a.flow_id == b.flow_id
        && a.mode == b.mode
        && a.flow_version == b.flow_version
        && a.strict_variables == b.strict_variables
        && a.bulk == b.bulk
        && a.status == b.status
        && a.users_targeted == b.users_targeted
        && a.cards_created == b.cards_created
        && a.errors == b.errors
        && a.cursor == b.cursor
        && a.lease_until == b.lease_until
        && a.attempts == b.attempts
}

/// `WHERE true`: SQLite needs it to read `ON CONFLICT` as the upsert clause.
const INVOCATION_INSERT: &str = "INSERT INTO invocations \
     (id, fingerprint, target, payload, created, updated, environment_id, flow_id, \
      mode, flow_version, strict_variables, bulk, status, users_targeted, \
      cards_created, errors, cursor, lease_until, attempts) \
     SELECT json_extract(value, '$[0]'), json_extract(value, '$[1]'), \
      json_extract(value, '$[2]'), json_extract(value, '$[3]'), \
      CAST(json_extract(value, '$[4]') AS INTEGER), CAST(json_extract(value, '$[5]') AS INTEGER), \
      ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ? \
     FROM jsonb_each(?) WHERE true \
     ON CONFLICT (environment_id, id) DO NOTHING";

/// An instant packed as text: its milliseconds ([`crate::millis`]), which the insert casts.
fn millis_text(t: At) -> String {
    millis(t.0).to_string()
}

/// The inserts of the runs of `rows` worth packing, each id inserted only when it is new in
/// its environment (the statements count the rows they insert); and the indexes of the other
/// rows.
pub(crate) fn invocations(rows: &[InvocationRow]) -> (Vec<Statement>, Vec<usize>) {
    let refs: Vec<&InvocationRow> = rows.iter().collect();
    let mut statements = Vec::new();
    let mut rest = Vec::new();
    let mut at = 0;
    for run in runs(&refs, same_invocation) {
        if run.len() < MIN_RUN {
            rest.extend(at..at + run.len());
            at += run.len();
            continue;
        }
        at += run.len();
        let first = run[0];
        let packed = pack(run.iter().map(|i| {
            [
                Cow::Borrowed(i.id.as_str()),
                Cow::Borrowed(i.fingerprint.as_str()),
                Cow::Borrowed(i.target.as_str()),
                Cow::Borrowed(i.payload.as_str()),
                Cow::Owned(millis_text(i.created)),
                Cow::Owned(millis_text(i.updated)),
            ]
        }));
        statements.push(Statement::new(
            INVOCATION_INSERT,
            vec![
                Bind::Text(first.environment_id.clone()),
                Bind::Text(first.flow_id.clone()),
                Bind::Text(first.mode.clone()),
                Bind::Int(first.flow_version),
                Bind::Bool(first.strict_variables),
                Bind::Bool(first.bulk),
                Bind::Text(first.status.clone()),
                Bind::BigInt(first.users_targeted),
                Bind::BigInt(first.cards_created),
                Bind::Text(first.errors.clone()),
                Bind::OptText(first.cursor.clone()),
                Bind::OptTime(first.lease_until.map(|t| t.0)),
                Bind::Int(first.attempts),
                Bind::Text(packed),
            ],
        ));
    }
    (statements, rest)
}

/// Cards sharing all but their id, user, flow instance, invocation, content and context: the
/// cards of one step of a flow made at one time.
fn same_frame(a: &CardInstance, b: &CardInstance) -> bool {
    a.environment_id == b.environment_id
        && a.flow_id == b.flow_id
        && a.flow_version == b.flow_version
        && a.step_id == b.step_id
        && a.template_id == b.template_id
        && a.template_name == b.template_name
        && a.status == b.status
        && a.priority == b.priority
        && a.stream_ids == b.stream_ids
        && a.platforms == b.platforms
        && a.embargo_until == b.embargo_until
        && a.expires_at == b.expires_at
        && a.snoozed_until == b.snoozed_until
        && a.published_at == b.published_at
        && a.created == b.created
        && a.updated == b.updated
}

/// Cards sharing their frame and their `content` and `context`: shared by the cards of one step
/// of one batch (compared by pointer first), and equal across the one-user invocations of one
/// request payload.
fn same_card(a: &CardInstance, b: &CardInstance) -> bool {
    a.content == b.content && a.context == b.context && same_frame(a, b)
}

/// The columns of a card's frame (see [`same_frame`]), in the order [`frame`] binds them.
const FRAME_COLUMNS: &str = "environment_id, flow_id, flow_version, step_id, template_id, \
     template_name, status, priority, stream_ids, platforms, embargo_until, expires_at, \
     snoozed_until, published_at, created, updated";

/// The binds of `c`'s frame, in [`FRAME_COLUMNS`]' order; an error when its version is out of
/// its column's range.
fn frame(c: &CardInstance) -> Result<[Bind; 16], StorageError> {
    Ok([
        Bind::Text(c.environment_id.clone()),
        Bind::Text(c.flow_id.clone()),
        Bind::Int(write_number("card flow version", c.flow_version)?),
        Bind::Text(c.step_id.clone()),
        Bind::Text(c.template_id.clone()),
        Bind::Text(c.template_name.clone()),
        Bind::Text(c.status.as_str().to_owned()),
        Bind::Int(i32::from(c.priority)),
        Bind::Text(serde_json::to_string(&c.stream_ids).unwrap_or_else(|_| "[]".into())),
        Bind::Text(serde_json::to_string(&c.platforms).unwrap_or_else(|_| "[]".into())),
        Bind::OptTime(naive(c.embargo_until)),
        Bind::OptTime(naive(c.expires_at)),
        Bind::OptTime(naive(c.snoozed_until)),
        Bind::OptTime(naive(c.published_at)),
        Bind::Time(c.created.naive_utc()),
        Bind::Time(c.updated.naive_utc()),
    ])
}

/// The columns a card's packed row may hold, in its order; the frame follows.
const CARD_ROW_COLUMNS: [&str; 6] = [
    "id",
    "user_id",
    "flow_instance_id",
    "invocation_id",
    "content",
    "context",
];

/// The insert of cards whose first `packed` [`CARD_ROW_COLUMNS`] come from the packed rows (the
/// last `?`), the rest of them and the frame bound in that order.
fn card_insert(packed: usize) -> String {
    let frame = FRAME_COLUMNS.split(',').count();
    let values: Vec<String> = (0..CARD_ROW_COLUMNS.len() + frame)
        .map(|i| {
            if i < packed {
                format!("json_extract(value, '$[{i}]')")
            } else {
                "?".to_owned()
            }
        })
        .collect();
    format!(
        "INSERT INTO card_instances ({}, {FRAME_COLUMNS}) SELECT {} FROM jsonb_each(?)",
        CARD_ROW_COLUMNS.join(", "),
        values.join(", ")
    )
}

/// Cards of one content: their ids packed.
static CARDS_BY_ID: LazyLock<String> = LazyLock::new(|| card_insert(4));
/// Cards each with its own content: their ids, contents and contexts packed.
static CARDS_WITH_CONTENT: LazyLock<String> = LazyLock::new(|| card_insert(6));

/// The inserts of the runs of `rows` worth packing; the other rows. An error when a card's
/// number is out of its column's range.
///
/// Cards of one content (a fan-out batch, one-user invocations of one payload) pack their ids
/// only. Cards of one frame but each its own content (the one-user invocations of a CSV task,
/// each row with its own variables) pack their content and context with their ids.
pub(crate) fn cards(
    rows: &[Arc<CardInstance>],
) -> Result<(Vec<Statement>, Vec<&Arc<CardInstance>>), StorageError> {
    let mut statements = Vec::new();
    let (long, rest) = split(rows, |a, b| same_card(a, b));
    for run in long {
        let c = &run[0];
        let ids = pack(run.iter().map(|c| {
            [
                c.id.as_str(),
                c.user_id.as_str(),
                c.flow_instance_id.as_str(),
                c.invocation_id.as_str(),
            ]
        }));
        let mut binds = vec![
            Bind::Text(c.content.text().to_owned()),
            Bind::Text(c.context.text().to_owned()),
        ];
        binds.extend(frame(c)?);
        binds.push(Bind::Text(ids));
        statements.push(Statement::new(&CARDS_BY_ID, binds));
    }
    let (long, rest) = split(&rest, |a, b| same_frame(a, b));
    for run in long {
        let c = run[0];
        let rows = pack(run.iter().map(|c| {
            [
                Cow::Borrowed(c.id.as_str()),
                Cow::Borrowed(c.user_id.as_str()),
                Cow::Borrowed(c.flow_instance_id.as_str()),
                Cow::Borrowed(c.invocation_id.as_str()),
                Cow::Borrowed(c.content.text()),
                Cow::Borrowed(c.context.text()),
            ]
        }));
        let mut binds = Vec::from(frame(c)?);
        binds.push(Bind::Text(rows));
        statements.push(Statement::new(&CARDS_WITH_CONTENT, binds));
    }
    Ok((statements, rest.into_iter().copied().collect()))
}

/// Events sharing all but their id and card: the change (name, status, previous status,
/// submitted values, publication time) and the time.
fn same_event(a: &&AnalyticsEvent, b: &&AnalyticsEvent) -> bool {
    a.card.environment_id == b.card.environment_id
        && a.name == b.name
        && a.card.status == b.card.status
        && a.previous == b.previous
        && a.values == b.values
        && a.card.published_at == b.card.published_at
        && a.created == b.created
}

const EVENT_INSERT: &str = "INSERT INTO analytics_events \
     (id, card_instance_id, environment_id, name, status, previous_status, submitted, \
      published_at, created) \
     SELECT json_extract(value, '$[0]'), json_extract(value, '$[1]'), ?, ?, ?, ?, ?, ?, ? \
     FROM jsonb_each(?)";

/// The inserts of the runs of `rows` worth packing; the other rows.
pub(crate) fn events<'a>(rows: &[&'a AnalyticsEvent]) -> (Vec<Statement>, Vec<&'a AnalyticsEvent>) {
    let (long, rest) = split(rows, same_event);
    let statements = long
        .into_iter()
        .map(|run| {
            let e = run[0];
            let ids = pack(run.iter().map(|e| [e.id.as_str(), e.card.id.as_str()]));
            Statement::new(
                EVENT_INSERT,
                vec![
                    Bind::Text(e.card.environment_id.clone()),
                    Bind::Text(e.name.clone()),
                    Bind::Text(e.card.status.as_str().to_owned()),
                    Bind::OptText(e.previous.map(|p| p.as_str().to_owned())),
                    Bind::OptText(e.values.as_ref().map(Value::to_string)),
                    Bind::OptTime(naive(e.card.published_at)),
                    Bind::Time(e.created.naive_utc()),
                    Bind::Text(ids),
                ],
            )
        })
        .collect();
    (statements, rest.into_iter().copied().collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_cut_at_a_change_and_at_the_pack_size() {
        let items: Vec<u32> = [1, 1, 2, 2, 2, 1].into_iter().collect();
        let cut: Vec<&[u32]> = runs(&items, |a, b| a == b);
        assert_eq!(cut, vec![&[1, 1][..], &[2, 2, 2][..], &[1][..]]);
        let long = vec![7u32; PACK * 2 + 1];
        let lengths: Vec<usize> = runs(&long, |a, b| a == b).iter().map(|r| r.len()).collect();
        assert_eq!(lengths, vec![PACK, PACK, 1]);
        assert!(runs(&Vec::<u32>::new(), |a, b| a == b).is_empty());
        let items: Vec<u32> = [1, 2, 2, 2, 2, 3, 3].into_iter().collect();
        let (long, rest) = split(&items, |a, b| a == b);
        assert_eq!(long, vec![&[2, 2, 2, 2][..]]);
        assert_eq!(rest, vec![&1, &3, &3]);
    }

    #[test]
    fn card_inserts_take_their_first_columns_from_the_packed_rows() {
        let narrow = card_insert(4);
        assert!(narrow.starts_with(
            "INSERT INTO card_instances (id, user_id, flow_instance_id, invocation_id, content, \
                context, environment_id,"
        ));
        assert!(narrow.contains("json_extract(value, '$[3]'), ?, ?"));
        assert!(!narrow.contains("'$[4]'"));
        // 2 columns and a frame of 16 bound, then the packed rows.
        assert_eq!(narrow.matches('?').count(), 2 + 16 + 1);
        let wide = card_insert(6);
        assert!(wide.contains("json_extract(value, '$[5]'), ?"));
        assert_eq!(wide.matches('?').count(), 16 + 1);
    }

    #[test]
    fn packed_ids_are_json_escaped() {
        let text = pack([["a\"b", "ü\\"], ["c", "d"]].into_iter());
        assert_eq!(text, r#"[["a\"b","ü\\"],["c","d"]]"#);
    }
}
