//! Rows of invocations, card instances and analytics events, and their mapping to the
//! domain's entities.

use std::collections::HashMap;
use std::sync::Arc;

use diesel::prelude::*;
#[cfg(test)]
use domain::card::card_event;
use domain::card::{AnalyticsEvent, CardContent, CardContext, CardInstance, CardStatus};
use domain::json::JsonText;
use domain::trigger::Mode;
use domain::trigger::{BatchResult, Invocation, InvocationStatus};
use domain::StorageError;
use serde_json::Value;

use crate::columns::{column_insert, ColumnInsert};
use crate::db::{AnyConnection, Failure};
use crate::error::{corrupt, read_number, write_number};
use crate::millis::At;
use crate::schema::{analytics_events, card_instances, invocations};

/// Rows per multi-row INSERT: well under SQLite's 32,766 bound parameters for every table.
pub(crate) const INSERT_CHUNK: usize = 500;

#[derive(Queryable, Selectable, Insertable)]
#[diesel(table_name = invocations, treat_none_as_default_value = false)]
pub(crate) struct InvocationRow {
    pub(crate) environment_id: String,
    pub(crate) id: String,
    pub(crate) flow_id: String,
    pub(crate) mode: String,
    pub(crate) flow_version: i32,
    pub(crate) fingerprint: String,
    pub(crate) target: String,
    pub(crate) payload: String,
    pub(crate) strict_variables: bool,
    pub(crate) bulk: bool,
    pub(crate) status: String,
    pub(crate) users_targeted: i64,
    pub(crate) cards_created: i64,
    pub(crate) errors: String,
    pub(crate) cursor: Option<String>,
    pub(crate) lease_until: Option<At>,
    pub(crate) attempts: i32,
    pub(crate) created: At,
    pub(crate) updated: At,
}

/// A card as stored. Its flow instance's status (`instance_status`) is not part of the card:
/// inserted as the column's default, `active`, and changed by cancel tasks only.
#[derive(Queryable, Selectable, Insertable)]
#[diesel(table_name = card_instances)]
pub(crate) struct CardRow {
    pub(crate) id: String,
    environment_id: String,
    user_id: String,
    pub(crate) flow_instance_id: String,
    invocation_id: String,
    flow_id: String,
    flow_version: i32,
    step_id: String,
    template_id: String,
    template_name: String,
    pub(crate) status: String,
    priority: i32,
    stream_ids: String,
    platforms: String,
    content: String,
    context: String,
    embargo_until: Option<At>,
    expires_at: Option<At>,
    snoozed_until: Option<At>,
    published_at: Option<At>,
    created: At,
    updated: At,
}

/// An event as stored: its change. The card supplies the rest of its payload.
#[derive(Queryable, Selectable, Insertable)]
#[diesel(table_name = analytics_events)]
pub(crate) struct EventRow {
    id: String,
    environment_id: String,
    card_instance_id: String,
    name: String,
    status: String,
    previous_status: Option<String>,
    submitted: Option<String>,
    published_at: Option<At>,
    created: At,
}

pub(crate) fn json(text: &str, what: &str) -> Result<Value, StorageError> {
    serde_json::from_str(text).map_err(|e| corrupt(what, e))
}

pub(crate) fn mode_text(mode: Mode) -> &'static str {
    mode.as_str()
}

impl InvocationRow {
    /// The row of `i`; an error when one of its numbers is out of its column's range.
    pub(crate) fn from_invocation(i: &Invocation) -> Result<Self, StorageError> {
        Ok(InvocationRow {
            environment_id: i.environment_id.clone(),
            id: i.id.clone().into(),
            flow_id: i.flow_id.clone(),
            mode: mode_text(i.mode).to_owned(),
            flow_version: write_number("invocation flow version", i.flow_version)?,
            fingerprint: i.fingerprint.clone(),
            target: i.target.text().to_owned(),
            payload: i.payload.text().to_owned(),
            strict_variables: i.strict_variables,
            bulk: i.bulk,
            status: i.status.as_str().to_owned(),
            users_targeted: write_number("invocation users targeted", i.users_targeted)?,
            cards_created: write_number("invocation cards created", i.cards_created)?,
            errors: serde_json::to_string(&i.errors).unwrap_or_else(|_| "[]".into()),
            cursor: i.cursor.clone(),
            lease_until: None,
            attempts: 0,
            created: At::of(i.created),
            updated: At::of(i.updated),
        })
    }

    pub(crate) fn into_invocation(self) -> Result<Invocation, StorageError> {
        Ok(Invocation {
            mode: Mode::parse(&self.mode).ok_or_else(|| corrupt("invocation mode", &self.mode))?,
            status: InvocationStatus::parse(&self.status)
                .ok_or_else(|| corrupt("invocation status", &self.status))?,
            target: JsonText::stored(json_text(self.target, "invocation target")?),
            payload: JsonText::stored(json_text(self.payload, "invocation payload")?),
            errors: serde_json::from_str(&self.errors)
                .map_err(|e| corrupt("invocation errors", e))?,
            environment_id: self.environment_id,
            id: self.id.into(),
            flow_id: self.flow_id,
            flow_version: read_number("invocation flow version", self.flow_version)?,
            fingerprint: self.fingerprint,
            strict_variables: self.strict_variables,
            bulk: self.bulk,
            users_targeted: read_number("invocation users targeted", self.users_targeted)?,
            cards_created: read_number("invocation cards created", self.cards_created)?,
            cursor: self.cursor,
            created: self.created.utc(),
            updated: self.updated.utc(),
        })
    }
}

/// A card's row: its content and context as they are held, text. An error when its version is
/// out of its column's range.
pub(crate) fn card_row(c: &CardInstance) -> Result<CardRow, StorageError> {
    Ok(CardRow {
        id: c.id.clone().into(),
        environment_id: c.environment_id.clone(),
        user_id: c.user_id.clone(),
        flow_instance_id: c.flow_instance_id.clone(),
        invocation_id: c.invocation_id.clone(),
        flow_id: c.flow_id.clone(),
        flow_version: write_number("card flow version", c.flow_version)?,
        step_id: c.step_id.clone(),
        template_id: c.template_id.clone(),
        template_name: c.template_name.clone(),
        status: c.status.as_str().to_owned(),
        priority: i32::from(c.priority),
        stream_ids: serde_json::to_string(&c.stream_ids).unwrap_or_else(|_| "[]".into()),
        platforms: serde_json::to_string(&c.platforms).unwrap_or_else(|_| "[]".into()),
        content: c.content.text().to_owned(),
        context: c.context.text().to_owned(),
        embargo_until: c.embargo_until.map(At::of),
        expires_at: c.expires_at.map(At::of),
        snoozed_until: c.snoozed_until.map(At::of),
        published_at: c.published_at.map(At::of),
        created: At::of(c.created),
        updated: At::of(c.updated),
    })
}

pub(crate) fn card(row: CardRow) -> Result<CardInstance, StorageError> {
    SharedParse::default().card(row)
}

/// `text` if it is a JSON object.
pub(crate) fn json_object(text: String, what: &str) -> Result<String, StorageError> {
    if !text.starts_with('{') {
        return Err(corrupt(what, "not an object"));
    }
    json_text(text, what)
}

/// `text` if it is JSON.
pub(crate) fn json_text(text: String, what: &str) -> Result<String, StorageError> {
    serde_json::from_str::<serde::de::IgnoredAny>(&text).map_err(|e| corrupt(what, e))?;
    Ok(text)
}

/// Reads the shared parts of cards once: cards read together (a cancel's chunk, the
/// scheduler's due cards, a feed) are mostly of a few invocations, whose cards hold the same
/// `content` and `context` text.
#[derive(Default)]
pub(crate) struct SharedParse {
    /// Kept as their text (parsed where they are read), checked to be JSON objects.
    content: Option<CardContent>,
    context: Option<CardContext>,
}

impl SharedParse {
    pub(crate) fn card(&mut self, row: CardRow) -> Result<CardInstance, StorageError> {
        let platforms: Vec<String> =
            serde_json::from_str(&row.platforms).map_err(|e| corrupt("card platforms", e))?;
        let content = match &self.content {
            Some(read) if read.text() == row.content => read.clone(),
            _ => {
                let read = CardContent::stored(json_object(row.content, "card content")?);
                self.content = Some(read.clone());
                read
            }
        };
        let context = match &self.context {
            Some(read) if read.text() == row.context => read.clone(),
            _ => {
                let read = CardContext::stored(json_object(row.context, "card context")?);
                self.context = Some(read.clone());
                read
            }
        };
        Ok(CardInstance {
            status: CardStatus::parse(&row.status)
                .ok_or_else(|| corrupt("card status", &row.status))?,
            stream_ids: serde_json::from_str(&row.stream_ids)
                .map_err(|e| corrupt("card streams", e))?,
            platforms,
            content,
            context,
            id: row.id.into(),
            environment_id: row.environment_id,
            user_id: row.user_id,
            flow_instance_id: row.flow_instance_id,
            invocation_id: row.invocation_id,
            flow_id: row.flow_id,
            flow_version: read_number("card flow version", row.flow_version)?,
            step_id: row.step_id,
            template_id: row.template_id,
            template_name: row.template_name,
            priority: read_number("card priority", row.priority)?,
            embargo_until: row.embargo_until.map(At::utc),
            expires_at: row.expires_at.map(At::utc),
            snoozed_until: row.snoozed_until.map(At::utc),
            published_at: row.published_at.map(At::utc),
            created: row.created.utc(),
            updated: row.updated.utc(),
        })
    }
}

pub(crate) fn event_row(e: &AnalyticsEvent) -> EventRow {
    EventRow {
        id: e.id.clone().into(),
        environment_id: e.card.environment_id.clone(),
        card_instance_id: e.card.id.clone().into(),
        name: e.name.clone(),
        status: e.card.status.as_str().to_owned(),
        previous_status: e.previous.map(|p| p.as_str().to_owned()),
        submitted: e.values.as_ref().map(Value::to_string),
        published_at: e.card.published_at.map(At::of),
        created: At::of(e.created),
    }
}

/// Cards as one PostgreSQL insert of a column each (see [`crate::columns`]).
pub(crate) fn card_columns(rows: Vec<CardRow>) -> ColumnInsert {
    column_insert!("card_instances", rows, "", {
        // Classes: 1 the step of a flow, 2 the invocation, 3 the content, 4 the times.
        id: Text,
        environment_id: Text @ 1,
        user_id: Text,
        flow_instance_id: Text,
        invocation_id: Text @ 2,
        flow_id: Text @ 1,
        flow_version: Int @ 1,
        step_id: Text @ 1,
        template_id: Text @ 1,
        template_name: Text @ 1,
        status: Text @ 1,
        priority: Int @ 1,
        stream_ids: Text @ 1,
        platforms: Text @ 1,
        content: Text @ 3,
        context: Text @ 3,
        embargo_until: OptTime @ 4,
        expires_at: OptTime @ 4,
        snoozed_until: OptTime @ 4,
        published_at: OptTime @ 4,
        created: Time @ 4,
        updated: Time @ 4,
    })
}

/// Events as one PostgreSQL insert of a column each.
pub(crate) fn event_columns(rows: Vec<EventRow>) -> ColumnInsert {
    column_insert!("analytics_events", rows, "", {
        // Classes: 1 the change, 2 the values submitted, 3 the time.
        id: Text,
        environment_id: Text @ 1,
        card_instance_id: Text,
        name: Text @ 1,
        status: Text @ 1,
        previous_status: OptText @ 1,
        submitted: OptText @ 2,
        published_at: OptTime @ 3,
        created: Time @ 3,
    })
}

/// The name PostgreSQL gives the invocations' primary key, `(environment_id, id)`.
pub(crate) const INVOCATIONS_KEY: &str = "invocations_pkey";

/// Invocations as one PostgreSQL insert of a column each. A plain `INSERT`: an id stored
/// already in its environment fails it on [`INVOCATIONS_KEY`], which the write turns into a
/// retry. `ON CONFLICT DO NOTHING` would answer it by a count, but inserts each row
/// speculatively, which took measurably longer than the plain insert.
pub(crate) fn invocation_columns(rows: Vec<InvocationRow>) -> ColumnInsert {
    column_insert!(
        "invocations",
        rows,
        "",
        {
            // Classes: 1 the flow, 2 the payload, 3 the time, 4 the outcome.
            environment_id: Text @ 1,
            id: Text,
            flow_id: Text @ 1,
            mode: Text @ 1,
            flow_version: Int @ 1,
            fingerprint: Text,
            target: Text,
            payload: Text @ 2,
            strict_variables: Bool @ 1,
            bulk: Bool @ 1,
            status: Text @ 4,
            users_targeted: BigInt @ 4,
            cards_created: BigInt @ 4,
            errors: Text @ 4,
            cursor: OptText @ 4,
            lease_until: OptTime @ 4,
            attempts: Int @ 4,
            created: Time @ 3,
            updated: Time @ 3,
        }
    )
}

/// The events of `rows` with their cards as each event left them (its status and publication
/// time). Cards are read in one query per 500 events; an event without its card in its
/// environment is left out (cards are never deleted).
pub(crate) fn with_cards(
    conn: &mut AnyConnection,
    rows: Vec<EventRow>,
) -> Result<Vec<AnalyticsEvent>, Failure> {
    let mut ids: Vec<&str> = rows.iter().map(|r| r.card_instance_id.as_str()).collect();
    ids.sort_unstable();
    ids.dedup();
    let mut shared = SharedParse::default();
    let mut cards: HashMap<String, CardInstance> = HashMap::with_capacity(ids.len());
    for chunk in ids.chunks(INSERT_CHUNK) {
        let found: Vec<CardRow> = card_instances::table
            .filter(card_instances::id.eq_any(chunk))
            .select(CardRow::as_select())
            .load(conn)?;
        for row in found {
            let card = shared.card(row).map_err(Failure::Domain)?;
            cards.insert(card.id.clone().into(), card);
        }
    }
    let parse_status = |s: &str| CardStatus::parse(s).ok_or_else(|| corrupt("event status", s));
    let mut events = Vec::with_capacity(rows.len());
    for row in rows {
        // An event and its card are written together, in one environment; checked again here
        // since the cards were read by id alone.
        let Some(card) = cards
            .get(&row.card_instance_id)
            .filter(|c| c.environment_id == row.environment_id)
        else {
            continue;
        };
        let snapshot = CardInstance {
            status: parse_status(&row.status).map_err(Failure::Domain)?,
            published_at: row.published_at.map(At::utc),
            ..card.clone()
        };
        events.push(AnalyticsEvent {
            previous: row
                .previous_status
                .as_deref()
                .map(parse_status)
                .transpose()
                .map_err(Failure::Domain)?,
            values: row
                .submitted
                .as_deref()
                .map(|v| json(v, "event values"))
                .transpose()
                .map_err(Failure::Domain)?,
            id: row.id.into(),
            name: row.name,
            card: Arc::new(snapshot),
            created: row.created.utc(),
        });
    }
    Ok(events)
}

pub(crate) fn load_invocation(
    conn: &mut AnyConnection,
    env: &str,
    id: &str,
) -> Result<Option<InvocationRow>, Failure> {
    Ok(invocations::table
        .filter(
            invocations::environment_id
                .eq(env)
                .and(invocations::id.eq(id)),
        )
        .select(InvocationRow::as_select())
        .first(conn)
        .optional()?)
}

pub(crate) fn errors_text(batch: &BatchResult) -> String {
    serde_json::to_string(&batch.errors).unwrap_or_else(|_| "[]".into())
}

/// The active cards of `user` in `env`, in `stream` when given: the rows the feed lists and
/// its count counts.
pub(crate) fn active_cards(
    env: &str,
    user: &str,
    stream: Option<&str>,
) -> card_instances::BoxedQuery<'static, <AnyConnection as diesel::Connection>::Backend> {
    let mut query = card_instances::table
        .filter(
            card_instances::environment_id
                .eq(env.to_owned())
                .and(card_instances::user_id.eq(user.to_owned())),
        )
        .filter(card_instances::status.eq(CardStatus::Active.as_str()))
        .into_boxed();
    if let Some(stream) = stream {
        query = query.filter(
            card_instances::stream_ids
                .like(stream_pattern(stream))
                .escape('\\'),
        );
    }
    query
}

/// The `LIKE` pattern (escaped with `\`) of the cards in `stream`: `stream_ids` is a JSON array of
/// ids, and ids hold no quote, `%` or `_` of their own that matter once quoted and escaped.
pub(crate) fn stream_pattern(stream: &str) -> String {
    let quoted = serde_json::to_string(stream)
        .unwrap_or_default()
        .replace('\\', "\\\\")
        .replace('%', "\\%")
        .replace('_', "\\_");
    format!("%{quoted}%")
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::{TimeZone, Utc};
    use serde_json::json;

    fn card_of(id: &str, content: Value, context: Value) -> CardInstance {
        let at = Utc.timestamp_opt(1_700_000_000, 0).unwrap();
        CardInstance {
            id: id.into(),
            environment_id: "env_a".into(),
            user_id: format!("user-{id}"),
            flow_instance_id: format!("fin-{id}"),
            invocation_id: "inv_1".into(),
            flow_id: "flw_1".into(),
            flow_version: 2,
            step_id: "s1".into(),
            template_id: "t1".into(),
            template_name: "T".into(),
            status: CardStatus::Active,
            priority: 7,
            stream_ids: vec!["str_all".into()],
            platforms: vec!["Web".into(), "iOS".into()],
            content: content.as_object().cloned().unwrap_or_default().into(),
            context: context.into(),
            embargo_until: None,
            expires_at: Some(at),
            snoozed_until: None,
            published_at: Some(at),
            created: at,
            updated: at,
        }
    }

    #[test]
    fn shared_parts_are_serialised_and_parsed_once_and_round_trip() {
        let one = card_of("crd_1", json!({"Web": {"a": 1}}), json!({"test": false}));
        let two = CardInstance {
            id: "crd_2".into(),
            ..one.clone()
        };
        let other = card_of("crd_3", json!({"Web": {"b": 2}}), json!({"test": true}));
        let rows: Vec<CardRow> = [&one, &two, &other]
            .map(|c| card_row(c).expect("row"))
            .into();
        let mut parse = SharedParse::default();
        let back: Vec<CardInstance> = rows
            .into_iter()
            .map(|r| parse.card(r).expect("parse"))
            .collect();
        assert_eq!(back, [one, two, other.clone()], "every field round-trips");
        assert!(back[0].content.same(&back[1].content), "read once");
        assert!(back[0].context.same(&back[1].context), "read once");
        assert!(!back[1].content.same(&back[2].content));
        assert_eq!(back[2].content, other.content);
    }

    #[test]
    fn contents_are_stored_as_rendered_and_read_back_per_platform() {
        let view = json!({"defaultView": {"content": [{"key": "h", "text": "Hi \"you\""}]}});
        // Rendered once for every platform (see CardContent), and as earlier versions stored
        // contents: one view per platform.
        let shared = CardInstance {
            content: CardContent::shared(&view.to_string(), false),
            ..card_of("crd_1", json!({}), json!({}))
        };
        let apart = card_of(
            "crd_2",
            json!({"Web": view, "iOS": {"defaultView": {}}}),
            json!({}),
        );
        let rows: Vec<CardRow> = [&shared, &apart].map(|c| card_row(c).expect("row")).into();
        assert_eq!(rows[0].content, format!("{{\"*\":{view}}}"));
        let mut parse = SharedParse::default();
        let back: Vec<CardInstance> = rows
            .into_iter()
            .map(|r| parse.card(r).expect("parse"))
            .collect();
        assert_eq!(
            Value::Object(back[0].content.views(&back[0].platforms)),
            json!({"Web": view, "iOS": view})
        );
        assert_eq!(
            Value::Object(back[1].content.views(&back[1].platforms)),
            json!({"Web": view, "iOS": {"defaultView": {}}})
        );
        for text in ["[1]", "{\"*\":", "not json"] {
            let mut corrupt = card_row(&shared).expect("row");
            corrupt.content = text.into();
            assert!(SharedParse::default().card(corrupt).is_err(), "{text}");
        }
    }

    /// Events stored with their payload (before migration 12) are converted to their change,
    /// and read back with the same payload, on both backends; a flow instance's status moves
    /// to its cards (migration 14).
    fn stored_payloads_are_converted_by_the_migration(db: crate::testing::TestDatabase) {
        use crate::db::{DatabaseUrl, POSTGRES_MIGRATIONS, SQLITE_MIGRATIONS};
        use diesel::sql_types::{Text, Timestamp as SqlTimestamp};
        use diesel_migrations::MigrationHarness;
        let mut conn = DatabaseUrl::parse(db.url())
            .expect("url")
            .establish()
            .expect("connect");
        // Migrations 1 to 11: events still carried their payload.
        for _ in 0..11 {
            match &mut conn {
                AnyConnection::Sqlite(c) => c.run_next_migration(SQLITE_MIGRATIONS).map(drop),
                AnyConnection::Postgresql(c) => c.run_next_migration(POSTGRES_MIGRATIONS).map(drop),
            }
            .expect("migration");
        }
        let at = Utc.timestamp_opt(1_700_000_000, 0).unwrap();
        let active = card_of(
            "crd_1",
            json!({"iOS": {"notification": {"title": "t"}}}),
            json!({"test": true, "variables": {"n": "Ada"}, "metadata": {"m": [1]}}),
        );
        let completed = CardInstance {
            status: CardStatus::Completed,
            ..active.clone()
        };
        let events = [
            card_event(Arc::new(active.clone()), None, None, at),
            card_event(
                Arc::new(completed.clone()),
                Some(CardStatus::Active),
                Some(json!({"a": 1})),
                at + chrono::Duration::seconds(1),
            ),
        ];
        let row = card_row(&completed).expect("row");
        crate::per_backend!(&mut conn, c => {
            // Its flow instance, cancelled with `cancelCards: false` (migration 14 keeps the
            // instance's status on its cards).
            diesel::sql_query(
                "INSERT INTO flow_instances (id, environment_id, invocation_id, flow_id, \
                 flow_version, user_id, status, created) \
                 VALUES ($1, $2, $3, $4, 2, $5, 'cancelled', $6)",
            )
            .bind::<Text, _>(&completed.flow_instance_id)
            .bind::<Text, _>(&completed.environment_id)
            .bind::<Text, _>(&completed.invocation_id)
            .bind::<Text, _>(&completed.flow_id)
            .bind::<Text, _>(&completed.user_id)
            .bind::<SqlTimestamp, _>(at.naive_utc())
            .execute(c)
            .expect("instance");
            diesel::insert_into(card_instances::table).values(&row).execute(c).expect("card");
            for e in &events {
                diesel::sql_query(
                    "INSERT INTO analytics_events (id, environment_id, name, user_id, \
                     card_instance_id, flow_id, invocation_id, data, created) \
                     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)",
                )
                .bind::<Text, _>(e.id.as_str())
                .bind::<Text, _>(e.environment_id())
                .bind::<Text, _>(&e.name)
                .bind::<Text, _>(e.user_id())
                .bind::<Text, _>(e.card_instance_id())
                .bind::<Text, _>(e.flow_id())
                .bind::<Text, _>(&e.card.invocation_id)
                .bind::<Text, _>(e.data().to_string())
                .bind::<SqlTimestamp, _>(e.created.naive_utc())
                .execute(c)
                .expect("legacy event");
            }
        });
        match &mut conn {
            AnyConnection::Sqlite(c) => c.run_pending_migrations(SQLITE_MIGRATIONS).map(drop),
            AnyConnection::Postgresql(c) => c.run_pending_migrations(POSTGRES_MIGRATIONS).map(drop),
        }
        .expect("migrations");
        let (card_id, instance_status): (String, String) = card_instances::table
            .select((card_instances::id, card_instances::instance_status))
            .first(&mut conn)
            .expect("card");
        assert_eq!(
            (card_id.as_str(), instance_status.as_str()),
            ("crd_1", "cancelled")
        );
        let rows: Vec<EventRow> = analytics_events::table
            .order(analytics_events::created)
            .select(EventRow::as_select())
            .load(&mut conn)
            .expect("rows");
        let read = match with_cards(&mut conn, rows) {
            Ok(read) => read,
            Err(_) => panic!("events"),
        };
        assert_eq!(read.len(), 2);
        for (read, written) in read.iter().zip(&events) {
            assert_eq!(read.data(), written.data());
            assert_eq!(read.card.status, written.card.status);
        }
    }

    #[test]
    fn stored_payloads_are_converted_by_the_migration_sqlite() {
        stored_payloads_are_converted_by_the_migration(crate::testing::TestDatabase::sqlite());
    }

    #[test]
    fn stored_payloads_are_converted_by_the_migration_postgres() {
        if let Some(db) = crate::testing::TestDatabase::postgres() {
            stored_payloads_are_converted_by_the_migration(db);
        }
    }
}
