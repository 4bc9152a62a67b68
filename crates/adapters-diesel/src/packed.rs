//! The engine's multi-row inserts on SQLite: one statement per run of rows that share every
//! column but their ids, with the shared columns bound once and the ids packed in one JSON
//! array (`INSERT ... SELECT ... FROM jsonb_each(?)`).
//!
//! `jsonb_each`, not `json_each`: each row's `value` is then a slice of the parsed array
//! (SQLite's binary JSON), which `json_extract` reads as it is. `json_each` renders each row
//! back into JSON text for every column read from it, and `json_extract` parses that text
//! again: with a card's content among six columns that was a fifth of the recorder's time
//! (docs/benchmarks.md, ninth session).
//!
//! Rows written together mostly differ only in their ids: the cards and events
//! of one fan-out batch, the events of one cancel chunk, the cards of one-user invocations (with
//! their contents when each has its own, as a CSV task's rows do), and the invocations of one
//! recording (with their fingerprints, targets, payloads and times). diesel's multi-row `INSERT` binds
//! every column of every row, and on SQLite each bind is a call into the library under its
//! mutex, after formatting timestamps and cloning the shared card content per row: about half
//! of the engine's write transaction in a profile of a 1,000,000-user fan-out, more than
//! SQLite's own work of inserting the rows. PostgreSQL keeps diesel's multi-row `INSERT`.
//!
//! Rows are grouped as they come (consecutive rows, not sorted). Runs shorter than [`MIN_RUN`]
//! are handed back for diesel's multi-row `INSERT`: one statement per row of a one-user
//! invocation cost `/start` a sixth of its rate.
//!
//! `json_extract` ends a string at a NUL character, so packed strings must hold none: ids and
//! user ids are refused with control characters (the domain's validation), and a card's content
//! and context are packed as JSON text, in which a NUL is an escape sequence.

use std::sync::Arc;

use chrono::NaiveDateTime;
use diesel::prelude::*;
use diesel::sql_types::{BigInt, Bool, Integer, Nullable, Text, Timestamp};
use diesel::sqlite::SqliteConnection;
use domain::card::{AnalyticsEvent, CardInstance};
use serde_json::Value;

use crate::engine::InvocationRow;

/// Rows per statement: the packed ids of 1,000 cards are ~70 KB of JSON.
const PACK: usize = 1_000;

/// Shorter runs are left to diesel's multi-row `INSERT`.
const MIN_RUN: usize = 4;

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

fn version(v: u32) -> i32 {
    i32::try_from(v).unwrap_or(i32::MAX)
}

/// diesel's own text for a time on SQLite, so that packed and bound times are the same text
/// (SQLite compares times as text).
const SQLITE_TIME: &str = "%F %T%.f";

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

/// Inserts the runs of `rows` worth packing, each id only when it is new in its environment;
/// returns how many were inserted, and the rows of the other runs.
pub(crate) fn invocations<'a>(
    conn: &mut SqliteConnection,
    rows: &'a [InvocationRow],
) -> QueryResult<(usize, Vec<&'a InvocationRow>)> {
    let refs: Vec<&InvocationRow> = rows.iter().collect();
    let (long, rest) = split(&refs, same_invocation);
    let mut inserted = 0;
    for run in long {
        let first = run[0];
        let packed = pack(run.iter().map(|i| {
            [
                i.id.clone(),
                i.fingerprint.clone(),
                i.target.clone(),
                i.payload.clone(),
                i.created.format(SQLITE_TIME).to_string(),
                i.updated.format(SQLITE_TIME).to_string(),
            ]
        }));
        // `WHERE true`: SQLite needs it to read `ON CONFLICT` as the upsert clause.
        inserted += diesel::sql_query(
            "INSERT INTO invocations \
             (id, fingerprint, target, payload, created, updated, environment_id, flow_id, \
              mode, flow_version, strict_variables, bulk, status, users_targeted, \
              cards_created, errors, cursor, lease_until, attempts) \
             SELECT json_extract(value, '$[0]'), json_extract(value, '$[1]'), \
              json_extract(value, '$[2]'), json_extract(value, '$[3]'), \
              json_extract(value, '$[4]'), json_extract(value, '$[5]'), \
              ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ? \
             FROM jsonb_each(?) WHERE true \
             ON CONFLICT (environment_id, id) DO NOTHING",
        )
        .bind::<Text, _>(&first.environment_id)
        .bind::<Text, _>(&first.flow_id)
        .bind::<Text, _>(&first.mode)
        .bind::<Integer, _>(first.flow_version)
        .bind::<Bool, _>(first.strict_variables)
        .bind::<Bool, _>(first.bulk)
        .bind::<Text, _>(&first.status)
        .bind::<BigInt, _>(first.users_targeted)
        .bind::<BigInt, _>(first.cards_created)
        .bind::<Text, _>(&first.errors)
        .bind::<Nullable<Text>, _>(&first.cursor)
        .bind::<Nullable<Timestamp>, _>(first.lease_until)
        .bind::<Integer, _>(first.attempts)
        .bind::<Text, _>(packed)
        .execute(conn)?;
    }
    Ok((inserted, rest.into_iter().copied().collect()))
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
    (Arc::ptr_eq(&a.content, &b.content) || a.content == b.content)
        && (Arc::ptr_eq(&a.context, &b.context) || a.context == b.context)
        && same_frame(a, b)
}

/// The columns of a card's frame (see [`same_frame`]), in the order [`bind_frame`] binds them.
const FRAME_COLUMNS: &str = "environment_id, flow_id, flow_version, step_id, template_id, \
     template_name, status, priority, stream_ids, platforms, embargo_until, expires_at, \
     snoozed_until, published_at, created, updated";

/// Binds the columns of `$card`'s frame to `$query`, in [`FRAME_COLUMNS`]' order.
macro_rules! bind_frame {
    ($query:expr, $card:expr) => {{
        let c: &CardInstance = $card;
        $query
            .bind::<Text, _>(&c.environment_id)
            .bind::<Text, _>(&c.flow_id)
            .bind::<Integer, _>(version(c.flow_version))
            .bind::<Text, _>(&c.step_id)
            .bind::<Text, _>(&c.template_id)
            .bind::<Text, _>(&c.template_name)
            .bind::<Text, _>(c.status.as_str())
            .bind::<Integer, _>(i32::from(c.priority))
            .bind::<Text, _>(serde_json::to_string(&c.stream_ids).unwrap_or_else(|_| "[]".into()))
            .bind::<Text, _>(serde_json::to_string(&c.platforms).unwrap_or_else(|_| "[]".into()))
            .bind::<Nullable<Timestamp>, _>(naive(c.embargo_until))
            .bind::<Nullable<Timestamp>, _>(naive(c.expires_at))
            .bind::<Nullable<Timestamp>, _>(naive(c.snoozed_until))
            .bind::<Nullable<Timestamp>, _>(naive(c.published_at))
            .bind::<Timestamp, _>(c.created.naive_utc())
            .bind::<Timestamp, _>(c.updated.naive_utc())
    }};
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

fn content_text(c: &CardInstance) -> String {
    serde_json::to_string(&*c.content).unwrap_or_else(|_| "{}".into())
}

/// Inserts the runs of `rows` worth packing; returns the others.
///
/// Cards of one content (a fan-out batch, one-user invocations of one payload) pack their ids
/// only. Cards of one frame but each its own content (the one-user invocations of a CSV task,
/// each row with its own variables) pack their content and context with their ids.
pub(crate) fn cards<'a>(
    conn: &mut SqliteConnection,
    rows: &'a [Arc<CardInstance>],
) -> QueryResult<Vec<&'a Arc<CardInstance>>> {
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
        let query = diesel::sql_query(card_insert(4))
            .bind::<Text, _>(content_text(c))
            .bind::<Text, _>(c.context.to_string());
        bind_frame!(query, c).bind::<Text, _>(ids).execute(conn)?;
    }
    let (long, rest) = split(&rest, |a, b| same_frame(a, b));
    for run in long {
        let c = run[0];
        let rows = pack(run.iter().map(|c| {
            [
                c.id.clone(),
                c.user_id.clone(),
                c.flow_instance_id.clone(),
                c.invocation_id.clone(),
                content_text(c),
                c.context.to_string(),
            ]
        }));
        let query = diesel::sql_query(card_insert(6));
        bind_frame!(query, c).bind::<Text, _>(rows).execute(conn)?;
    }
    Ok(rest.into_iter().copied().collect())
}

/// Events sharing all but their id and card: the change (name, status, previous status,
/// submitted values, publication time) and the time.
fn same_event(a: &AnalyticsEvent, b: &AnalyticsEvent) -> bool {
    a.card.environment_id == b.card.environment_id
        && a.name == b.name
        && a.card.status == b.card.status
        && a.previous == b.previous
        && a.values == b.values
        && a.card.published_at == b.card.published_at
        && a.created == b.created
}

/// Inserts the runs of `rows` worth packing; returns the others.
pub(crate) fn events<'a>(
    conn: &mut SqliteConnection,
    rows: &'a [AnalyticsEvent],
) -> QueryResult<Vec<&'a AnalyticsEvent>> {
    let (long, rest) = split(rows, same_event);
    for run in long {
        let e = &run[0];
        let ids = pack(run.iter().map(|e| [e.id.as_str(), e.card.id.as_str()]));
        diesel::sql_query(
            "INSERT INTO analytics_events \
             (id, card_instance_id, environment_id, name, status, previous_status, submitted, \
              published_at, created) \
             SELECT json_extract(value, '$[0]'), json_extract(value, '$[1]'), ?, ?, ?, ?, ?, ?, ? \
             FROM jsonb_each(?)",
        )
        .bind::<Text, _>(&e.card.environment_id)
        .bind::<Text, _>(&e.name)
        .bind::<Text, _>(e.card.status.as_str())
        .bind::<Nullable<Text>, _>(e.previous.map(|p| p.as_str()))
        .bind::<Nullable<Text>, _>(e.values.as_ref().map(Value::to_string))
        .bind::<Nullable<Timestamp>, _>(naive(e.card.published_at))
        .bind::<Timestamp, _>(e.created.naive_utc())
        .bind::<Text, _>(ids)
        .execute(conn)?;
    }
    Ok(rest)
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
            "INSERT INTO card_instances (id, user_id, flow_instance_id, invocation_id, content, context, environment_id,"
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
