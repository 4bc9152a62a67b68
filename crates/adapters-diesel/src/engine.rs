use std::collections::HashMap;
use std::sync::Arc;

use async_trait::async_trait;
use chrono::NaiveDateTime;
use diesel::prelude::*;
#[cfg(test)]
use domain::card::card_event;
use domain::card::{
    AnalyticsEvent, CardContent, CardContext, CardInstance, CardRepository, CardStatus, Transition,
};
use domain::json::JsonText;
use domain::trigger::engine::{BatchResult, Invocation, InvocationRepository, InvocationStatus};
use domain::trigger::Mode;
use domain::{StorageError, Timestamp};
use serde_json::Value;

use crate::db::{AnyConnection, Backend, Database, Failure};
use crate::error::corrupt;
use crate::packed::Statement;
use crate::schema::{analytics_events, card_instances, invocations};

/// Rows per multi-row INSERT: well under SQLite's 32,766 bound parameters for every table.
const INSERT_CHUNK: usize = 500;

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
    pub(crate) lease_until: Option<NaiveDateTime>,
    pub(crate) attempts: i32,
    pub(crate) created: NaiveDateTime,
    pub(crate) updated: NaiveDateTime,
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
    embargo_until: Option<NaiveDateTime>,
    expires_at: Option<NaiveDateTime>,
    snoozed_until: Option<NaiveDateTime>,
    published_at: Option<NaiveDateTime>,
    created: NaiveDateTime,
    updated: NaiveDateTime,
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
    published_at: Option<NaiveDateTime>,
    created: NaiveDateTime,
}

fn json(text: &str, what: &str) -> Result<Value, StorageError> {
    serde_json::from_str(text).map_err(|e| corrupt(what, e))
}

fn mode_text(mode: Mode) -> &'static str {
    mode.as_str()
}

impl InvocationRow {
    fn from_invocation(i: &Invocation) -> Self {
        InvocationRow {
            environment_id: i.environment_id.clone(),
            id: i.id.clone(),
            flow_id: i.flow_id.clone(),
            mode: mode_text(i.mode).to_owned(),
            flow_version: i32::try_from(i.flow_version).unwrap_or(i32::MAX),
            fingerprint: i.fingerprint.clone(),
            target: i.target.text().to_owned(),
            payload: i.payload.text().to_owned(),
            strict_variables: i.strict_variables,
            bulk: i.bulk,
            status: i.status.as_str().to_owned(),
            users_targeted: i64::try_from(i.users_targeted).unwrap_or(i64::MAX),
            cards_created: i64::try_from(i.cards_created).unwrap_or(i64::MAX),
            errors: serde_json::to_string(&i.errors).unwrap_or_else(|_| "[]".into()),
            cursor: i.cursor.clone(),
            lease_until: None,
            attempts: 0,
            created: i.created.naive_utc(),
            updated: i.updated.naive_utc(),
        }
    }

    fn into_invocation(self) -> Result<Invocation, StorageError> {
        Ok(Invocation {
            mode: match self.mode.as_str() {
                "live" => Mode::Live,
                "test" => Mode::Test,
                other => return Err(corrupt("invocation mode", other)),
            },
            status: InvocationStatus::parse(&self.status)
                .ok_or_else(|| corrupt("invocation status", &self.status))?,
            target: JsonText::stored(json_text(self.target, "invocation target")?),
            payload: JsonText::stored(json_text(self.payload, "invocation payload")?),
            errors: serde_json::from_str(&self.errors)
                .map_err(|e| corrupt("invocation errors", e))?,
            environment_id: self.environment_id,
            id: self.id,
            flow_id: self.flow_id,
            flow_version: u32::try_from(self.flow_version).unwrap_or(0),
            fingerprint: self.fingerprint,
            strict_variables: self.strict_variables,
            bulk: self.bulk,
            users_targeted: u64::try_from(self.users_targeted).unwrap_or(0),
            cards_created: u64::try_from(self.cards_created).unwrap_or(0),
            cursor: self.cursor,
            created: self.created.and_utc(),
            updated: self.updated.and_utc(),
        })
    }
}

/// A card's row: its content and context as they are held, text.
fn card_row(c: &CardInstance) -> CardRow {
    CardRow {
        id: c.id.clone(),
        environment_id: c.environment_id.clone(),
        user_id: c.user_id.clone(),
        flow_instance_id: c.flow_instance_id.clone(),
        invocation_id: c.invocation_id.clone(),
        flow_id: c.flow_id.clone(),
        flow_version: i32::try_from(c.flow_version).unwrap_or(i32::MAX),
        step_id: c.step_id.clone(),
        template_id: c.template_id.clone(),
        template_name: c.template_name.clone(),
        status: c.status.as_str().to_owned(),
        priority: i32::from(c.priority),
        stream_ids: serde_json::to_string(&c.stream_ids).unwrap_or_else(|_| "[]".into()),
        platforms: serde_json::to_string(&c.platforms).unwrap_or_else(|_| "[]".into()),
        content: c.content.text().to_owned(),
        context: c.context.text().to_owned(),
        embargo_until: c.embargo_until.map(|t| t.naive_utc()),
        expires_at: c.expires_at.map(|t| t.naive_utc()),
        snoozed_until: c.snoozed_until.map(|t| t.naive_utc()),
        published_at: c.published_at.map(|t| t.naive_utc()),
        created: c.created.naive_utc(),
        updated: c.updated.naive_utc(),
    }
}

pub(crate) fn card(row: CardRow) -> Result<CardInstance, StorageError> {
    SharedParse::default().card(row)
}

/// `text` if it is a JSON object.
fn json_object(text: String, what: &str) -> Result<String, StorageError> {
    if !text.starts_with('{') {
        return Err(corrupt(what, "not an object"));
    }
    json_text(text, what)
}

/// `text` if it is JSON.
fn json_text(text: String, what: &str) -> Result<String, StorageError> {
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
            id: row.id,
            environment_id: row.environment_id,
            user_id: row.user_id,
            flow_instance_id: row.flow_instance_id,
            invocation_id: row.invocation_id,
            flow_id: row.flow_id,
            flow_version: u32::try_from(row.flow_version).unwrap_or(0),
            step_id: row.step_id,
            template_id: row.template_id,
            template_name: row.template_name,
            priority: u8::try_from(row.priority).unwrap_or(5),
            embargo_until: row.embargo_until.map(|t| t.and_utc()),
            expires_at: row.expires_at.map(|t| t.and_utc()),
            snoozed_until: row.snoozed_until.map(|t| t.and_utc()),
            published_at: row.published_at.map(|t| t.and_utc()),
            created: row.created.and_utc(),
            updated: row.updated.and_utc(),
        })
    }
}

fn event_row(e: &AnalyticsEvent) -> EventRow {
    EventRow {
        id: e.id.clone(),
        environment_id: e.card.environment_id.clone(),
        card_instance_id: e.card.id.clone(),
        name: e.name.clone(),
        status: e.card.status.as_str().to_owned(),
        previous_status: e.previous.map(|p| p.as_str().to_owned()),
        submitted: e.values.as_ref().map(Value::to_string),
        published_at: e.card.published_at.map(|t| t.naive_utc()),
        created: e.created.naive_utc(),
    }
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
            cards.insert(card.id.clone(), card);
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
            published_at: row.published_at.map(|t| t.and_utc()),
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
            id: row.id,
            name: row.name,
            card: Arc::new(snapshot),
            created: row.created.and_utc(),
        });
    }
    Ok(events)
}

/// Inserts events and their outbox rows: on SQLite the runs worth packing packed (see
/// [`crate::packed`]), the others (and all on PostgreSQL) in multi-row statements.
pub(crate) fn insert_events(
    conn: &mut AnyConnection,
    events: &[AnalyticsEvent],
) -> Result<(), Failure> {
    let events: Vec<&AnalyticsEvent> = events.iter().collect();
    EventWrites::of(&events, backend_of(conn)).write(conn)?;
    enqueue(conn, &events)
}

/// The outboxes: webhook deliveries and pushes commit with their events.
fn enqueue(conn: &mut AnyConnection, events: &[&AnalyticsEvent]) -> Result<(), Failure> {
    crate::webhooks::enqueue(conn, events)?;
    crate::push_jobs::enqueue(conn, events)
}

fn backend_of(conn: &AnyConnection) -> Backend {
    match conn {
        AnyConnection::Sqlite(_) => Backend::Sqlite,
        AnyConnection::Postgresql(_) => Backend::Postgres,
    }
}

/// Runs packed statements, built for SQLite; the rows they inserted.
fn run_packed(conn: &mut AnyConnection, statements: &[Statement]) -> Result<usize, Failure> {
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
struct CardWrites {
    packed: Vec<Statement>,
    rows: Vec<CardRow>,
}

impl CardWrites {
    fn of(cards: &[Arc<CardInstance>], backend: Backend) -> Self {
        let (packed, rest) = match backend {
            Backend::Sqlite => crate::packed::cards(cards),
            Backend::Postgres => (Vec::new(), cards.iter().collect()),
        };
        let rows = rest.into_iter().map(|c| card_row(c)).collect();
        CardWrites { packed, rows }
    }

    fn write(&self, conn: &mut AnyConnection) -> Result<(), Failure> {
        run_packed(conn, &self.packed)?;
        for chunk in self.rows.chunks(INSERT_CHUNK) {
            crate::per_backend!(&mut *conn, c => diesel::insert_into(card_instances::table).values(chunk).execute(c))?;
        }
        Ok(())
    }
}

/// Events to insert, built like [`CardWrites`]; their outbox rows are not among them (see
/// [`enqueue`]).
struct EventWrites {
    packed: Vec<Statement>,
    rows: Vec<EventRow>,
}

impl EventWrites {
    fn of(events: &[&AnalyticsEvent], backend: Backend) -> Self {
        let (packed, rest) = match backend {
            Backend::Sqlite => crate::packed::events(events),
            Backend::Postgres => (Vec::new(), events.to_vec()),
        };
        EventWrites {
            packed,
            rows: rest.into_iter().map(event_row).collect(),
        }
    }

    fn write(&self, conn: &mut AnyConnection) -> Result<(), Failure> {
        run_packed(conn, &self.packed)?;
        for chunk in self.rows.chunks(INSERT_CHUNK) {
            crate::per_backend!(&mut *conn, c => diesel::insert_into(analytics_events::table).values(chunk).execute(c))?;
        }
        Ok(())
    }
}

/// New invocations to insert, built like [`CardWrites`]; each inserted only when its id is new
/// in its environment.
struct InvocationWrites {
    rows: Vec<InvocationRow>,
    packed: Vec<Statement>,
    /// The rows not packed.
    other: Vec<usize>,
}

impl InvocationWrites {
    fn of(rows: Vec<InvocationRow>, backend: Backend) -> Self {
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
    fn write(&self, conn: &mut AnyConnection) -> Result<bool, Failure> {
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

fn load_invocation(
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

/// What one `record` call gets back.
type Recorded = Result<Vec<Option<Invocation>>, StorageError>;

/// An invocation to record, and its run when it has one.
type Asked = (Invocation, Option<BatchResult>);

/// A `record_run` call waiting for the recorder.
struct Pending {
    asked: Vec<Asked>,
    reply: tokio::sync::oneshot::Sender<Recorded>,
}

/// Calls packed together, at most.
const RECORD_GROUP: usize = 256;
/// Calls waiting for the recorder, at most: while the database hangs, the ones beyond are
/// refused at once (contract §20).
const RECORDER_QUEUE: usize = 8_192;
/// Packed groups waiting for the writing thread, at most; it writes all of those waiting in
/// one transaction.
const PACKED_AHEAD: usize = 16;

/// Calls on their way to the writing thread, with what they write when every invocation they
/// ask for is new and no cancel applies to them (nearly always), built on the packing thread.
struct Group {
    calls: Vec<Pending>,
    writes: Option<NewWrites>,
}

/// What a transaction recorded, freed on a thread of its own.
type Spent = (Vec<Vec<Asked>>, Vec<Option<NewWrites>>);

pub struct DieselInvocationRepository {
    db: Database,
    /// Group commit: `record_run` calls queue here, and one thread writes all those waiting in
    /// one transaction: SQLite takes one writer at a time, so that thread does nothing but
    /// write. A thread before it builds each group's rows and packed statements
    /// ([`NewWrites`]) while the group before is written, and one after it frees what each
    /// group recorded (in a CSV task's profile, building and freeing took half of the writing
    /// thread's time). Threads rather than tasks, so that they work however busy their
    /// callers' runtimes are (a CSV step prepares its next rows while the last ones are
    /// recorded), and each group saves a hop to the blocking pool. Started on first use; they
    /// end when the repository is dropped.
    recorder: std::sync::OnceLock<tokio::sync::mpsc::Sender<Pending>>,
}

impl DieselInvocationRepository {
    pub fn new(db: Database) -> Self {
        Self {
            db,
            recorder: std::sync::OnceLock::new(),
        }
    }

    fn recorder(&self) -> Result<&tokio::sync::mpsc::Sender<Pending>, StorageError> {
        if let Some(sender) = self.recorder.get() {
            return Ok(sender);
        }
        let (sender, queue) = tokio::sync::mpsc::channel::<Pending>(RECORDER_QUEUE);
        start_recorder(self.db.clone(), queue).map_err(|e| {
            StorageError::Unavailable(format!("cannot start the invocation recorder: {e}"))
        })?;
        // Two first callers at once: the second's threads end with its unused sender.
        Ok(self.recorder.get_or_init(|| sender))
    }
}

/// The recorder's three threads: packing, writing, freeing. Each ends when the one before it
/// does, the first when `queue`'s senders are gone.
fn start_recorder(
    db: Database,
    mut queue: tokio::sync::mpsc::Receiver<Pending>,
) -> std::io::Result<()> {
    let (spent, freed) = std::sync::mpsc::channel::<Spent>();
    std::thread::Builder::new()
        .name("recorder-free".into())
        .spawn(move || freed.into_iter().for_each(drop))?;
    // Groups are packed as calls come; the writer takes all of those packed meanwhile at
    // once. Each transaction rewrites the last pages of every table and index it appends
    // to: with one per call (a CSV chunk) a CSV task wrote a quarter more.
    let (packed, groups) = std::sync::mpsc::sync_channel::<Group>(PACKED_AHEAD);
    let writer = db.clone();
    std::thread::Builder::new()
        .name("recorder".into())
        .spawn(move || {
            while let Ok(first) = groups.recv() {
                let mut taken = vec![first];
                taken.extend(groups.try_iter().take(PACKED_AHEAD));
                let _ = spent.send(record_groups(&writer, taken));
            }
        })?;
    std::thread::Builder::new()
        .name("recorder-pack".into())
        .spawn(move || {
            let backend = db.backend();
            while let Some(first) = queue.blocking_recv() {
                let mut calls = vec![first];
                while calls.len() < RECORD_GROUP {
                    match queue.try_recv() {
                        Ok(next) => calls.push(next),
                        Err(_) => break,
                    }
                }
                let all: Vec<(&Invocation, Option<&BatchResult>)> = calls
                    .iter()
                    .flat_map(|c| c.asked.iter().map(|(i, run)| (i, run.as_ref())))
                    .collect();
                let writes = distinct(&all).then(|| NewWrites::of(&all, backend));
                drop(all);
                if packed.send(Group { calls, writes }).is_err() {
                    break;
                }
            }
        })?;
    Ok(())
}

/// Every invocation `calls` ask for, in order, with its run.
fn asked_in(calls: &[Vec<Asked>]) -> Vec<(&Invocation, Option<&BatchResult>)> {
    calls
        .iter()
        .flatten()
        .map(|(i, run)| (i, run.as_ref()))
        .collect()
}

/// True when no (environment, id) is asked twice.
fn distinct(all: &[(&Invocation, Option<&BatchResult>)]) -> bool {
    let mut seen = std::collections::HashSet::with_capacity(all.len());
    all.iter()
        .all(|(i, _)| seen.insert((i.environment_id.as_str(), i.id.as_str())))
}

/// Records the calls of `groups` in one transaction and answers each, on the writing thread;
/// returns what they recorded, to be freed elsewhere. Every call is decided on its own, in
/// queue order, as if it ran alone: an id that clashes refuses that call only, and an id asked
/// by two calls is inserted by the first and found by the second.
fn record_groups(db: &Database, groups: Vec<Group>) -> Spent {
    let mut calls: Vec<Vec<Asked>> = Vec::new();
    let mut replies = Vec::new();
    let mut writes = Vec::with_capacity(groups.len());
    for mut group in groups {
        // Calls whose caller gave up (its deadline passed while an earlier transaction hung)
        // are not recorded: it was answered 503. What was built for the group then covers
        // calls left out, so it is built again in the transaction.
        if group.calls.iter().any(|c| c.reply.is_closed()) {
            group.calls.retain(|c| !c.reply.is_closed());
            group.writes = None;
        }
        if group.calls.is_empty() {
            continue;
        }
        writes.push((group.calls.len(), group.writes));
        for pending in group.calls {
            calls.push(pending.asked);
            replies.push(pending.reply);
        }
    }
    if calls.is_empty() {
        return (calls, Vec::new());
    }
    // A racing insert of a conflicting id (PostgreSQL, another process) rolls this attempt
    // back; the next attempt sees it before inserting anything.
    let mut outcome = Err(StorageError::Unavailable(
        "invocation ids kept being reused concurrently".into(),
    ));
    // First as if every asked id were new; once one was not, each call decided on its own.
    let mut all_new = true;
    for _ in 0..4 {
        outcome = db.transaction_blocking(|conn| record_calls(conn, &calls, &writes, all_new));
        if !matches!(outcome, Err(StorageError::StaleRevision)) {
            break;
        }
        all_new = false;
    }
    match outcome {
        Ok(answers) => {
            for (reply, answer) in replies.into_iter().zip(answers) {
                let _ = reply.send(Ok(answer));
            }
        }
        Err(e) => {
            for reply in replies {
                let _ = reply.send(Err(e.clone()));
            }
        }
    }
    (calls, writes.into_iter().map(|(_, w)| w).collect())
}

/// The whole of one transaction. With `all_new`, as if every asked id were new (nearly always
/// so): all are inserted, with the rows of their runs, group by group, from `writes` (per
/// group, its count of calls and what the packing thread built for them); when one was stored
/// already, the transaction is rolled back (StaleRevision) to be run again without `all_new`
/// (a savepoint to roll back to made SQLite journal the pages the inserts changed). Without
/// `all_new`, or when an id is asked twice, every call is decided on its own: one read per
/// environment for every asked id, then the new ones of every call that clashes with nothing
/// inserted.
fn record_calls(
    conn: &mut AnyConnection,
    calls: &[Vec<Asked>],
    writes: &[(usize, Option<NewWrites>)],
    all_new: bool,
) -> Result<Vec<Vec<Option<Invocation>>>, Failure> {
    let all = asked_in(calls);
    if all_new && distinct(&all) {
        let mut from = 0;
        for (count, built) in writes {
            let group = asked_in(&calls[from..from + count]);
            from += count;
            if !insert_new(conn, &group, built.as_ref())? {
                return Err(Failure::Domain(StorageError::StaleRevision));
            }
        }
        return Ok(calls.iter().map(|c| vec![None; c.len()]).collect());
    }
    let mut found: HashMap<(String, String), Invocation> = HashMap::new();
    let mut by_env: HashMap<&str, Vec<&str>> = HashMap::new();
    for (i, _) in &all {
        by_env
            .entry(i.environment_id.as_str())
            .or_default()
            .push(i.id.as_str());
    }
    for (env, mut ids) in by_env {
        ids.sort_unstable();
        ids.dedup();
        for chunk in ids.chunks(INSERT_CHUNK) {
            let rows: Vec<InvocationRow> = invocations::table
                .filter(invocations::environment_id.eq(env))
                .filter(invocations::id.eq_any(chunk))
                .select(InvocationRow::as_select())
                .load(conn)?;
            for row in rows {
                let stored = row.into_invocation().map_err(Failure::Domain)?;
                found.insert((stored.environment_id.clone(), stored.id.clone()), stored);
            }
        }
    }
    let mut new: Vec<(&Invocation, Option<&BatchResult>)> = Vec::new();
    let mut answers = Vec::with_capacity(calls.len());
    for asked in calls {
        let key = |i: &Invocation| (i.environment_id.clone(), i.id.clone());
        let stored: Vec<Option<Invocation>> = asked
            .iter()
            .map(|(i, _)| found.get(&key(i)).cloned())
            .collect();
        let clash = stored
            .iter()
            .zip(asked)
            .any(|(stored, (i, _))| stored.as_ref().is_some_and(|s| !s.same_run(i)));
        if !clash {
            // The same id asked twice in one call is inserted once; a later call finds it.
            for (i, run) in asked {
                if let std::collections::hash_map::Entry::Vacant(slot) = found.entry(key(i)) {
                    new.push((i, run.as_ref()));
                    slot.insert(i.clone());
                }
            }
        }
        answers.push(stored);
    }
    if !insert_new(conn, &new, None)? {
        // A racing request inserted some of these ids first: decide again.
        return Err(Failure::Domain(StorageError::StaleRevision));
    }
    Ok(answers)
}

/// What recording invocations taken to be new writes: their rows, and the cards and events of
/// their runs as [`save_batches`](InvocationRepository::save_batches) writes batches, each
/// run's progress its invocation's.
struct NewWrites {
    invocations: InvocationWrites,
    runs: RunWrites,
}

impl NewWrites {
    /// For `new` with its runs as they are (no cancel applied).
    fn of(new: &[(&Invocation, Option<&BatchResult>)], backend: Backend) -> Self {
        let rows = new
            .iter()
            .map(|(i, run)| {
                let mut row = InvocationRow::from_invocation(i);
                if let Some(run) = run {
                    row.status = run.status.as_str().to_owned();
                    row.users_targeted += i64::try_from(run.users_targeted).unwrap_or(0);
                    row.cards_created += i64::try_from(run.cards_created).unwrap_or(0);
                    row.errors = errors_text(run);
                    row.cursor = run.cursor.clone();
                    row.updated = run.updated.naive_utc();
                }
                row
            })
            .collect();
        let runs: Vec<&BatchResult> = new.iter().filter_map(|(_, run)| *run).collect();
        NewWrites {
            invocations: InvocationWrites::of(rows, backend),
            runs: RunWrites::of(&runs, backend),
        }
    }
}

/// Inserts invocations taken to be new, and the rows of their runs (cancel markers applied;
/// the invocations known without reading), from `built` when it was built from `new`. False,
/// with the runs not saved, when some of the invocations were stored already.
fn insert_new(
    conn: &mut AnyConnection,
    new: &[(&Invocation, Option<&BatchResult>)],
    built: Option<&NewWrites>,
) -> Result<bool, Failure> {
    let mut known: Known = HashMap::new();
    for (i, run) in new {
        if run.is_some() {
            known.insert(
                (i.environment_id.clone(), i.id.clone()),
                (
                    i.flow_id.clone(),
                    i32::try_from(i.flow_version).unwrap_or(i32::MAX),
                    i.created.naive_utc(),
                ),
            );
        }
    }
    let runs = new.iter().filter_map(|(_, run)| *run);
    if markers_for(conn, runs, &known)?.is_empty() {
        // Nearly always: no cancel accepted since these invocations were created.
        let fresh;
        let writes = match built {
            Some(writes) => writes,
            None => {
                fresh = NewWrites::of(new, backend_of(conn));
                &fresh
            }
        };
        return write_new(conn, writes, new);
    }
    let mut runs: Vec<BatchResult> = new.iter().filter_map(|(_, run)| run.cloned()).collect();
    apply_markers(conn, &mut runs, &known)?;
    let mut applied = runs.iter();
    let new: Vec<(&Invocation, Option<&BatchResult>)> = new
        .iter()
        .map(|(i, run)| (*i, run.and_then(|_| applied.next())))
        .collect();
    let writes = NewWrites::of(&new, backend_of(conn));
    write_new(conn, &writes, &new)
}

/// Writes what was built from `new`; false, with the runs not written, when some of the
/// invocations were stored already.
fn write_new(
    conn: &mut AnyConnection,
    writes: &NewWrites,
    new: &[(&Invocation, Option<&BatchResult>)],
) -> Result<bool, Failure> {
    if !writes.invocations.write(conn)? {
        return Ok(false);
    }
    let runs: Vec<&BatchResult> = new.iter().filter_map(|(_, run)| *run).collect();
    writes.runs.write(conn, &runs)?;
    Ok(true)
}

/// The conditions of the statuses an engine claims, each the condition of its partial index
/// (`invocations_pending`, `invocations_running`): written literally, since a bound status
/// cannot choose a partial index.
const DUE_STATUSES: [&str; 2] = ["status = 'pending'", "status = 'running'"];

/// The oldest invocations of one of [`DUE_STATUSES`] whose lease (if any) ran out by `$now`:
/// (created, environment, id), read in the order of the status's partial index.
macro_rules! invocations_due {
    ($status:expr, $now:expr, $limit:expr) => {
        invocations::table
            .filter(diesel::dsl::sql::<diesel::sql_types::Bool>($status))
            .filter(
                invocations::lease_until
                    .is_null()
                    .or(invocations::lease_until.lt($now)),
            )
            .order(invocations::created)
            .select((
                invocations::created,
                invocations::environment_id,
                invocations::id,
            ))
            .limit($limit)
    };
}

#[async_trait]
impl InvocationRepository for DieselInvocationRepository {
    /// Answered by the call's deadline (contract §20), even while the recorder's transaction
    /// is stuck on a hung database; a call given up is then left out of the recorder's next
    /// transaction if it has not begun.
    async fn record_run(&self, asked: Vec<Asked>) -> Recorded {
        let deadline = self.db.deadline();
        let (reply, answer) = tokio::sync::oneshot::channel();
        self.recorder()?
            .try_send(Pending { asked, reply })
            .map_err(|e| match e {
                tokio::sync::mpsc::error::TrySendError::Full(_) => StorageError::Unavailable(
                    "the invocation recorder is full: the database is not keeping up".into(),
                ),
                tokio::sync::mpsc::error::TrySendError::Closed(_) => {
                    StorageError::Unavailable("the invocation recorder stopped".into())
                }
            })?;
        match tokio::time::timeout_at(deadline, answer).await {
            Ok(answered) => answered
                .map_err(|_| StorageError::Unavailable("the invocation recorder stopped".into()))?,
            Err(_) => Err(self.db.timed_out()),
        }
    }

    async fn get(
        &self,
        environment_id: &str,
        id: &str,
    ) -> Result<Option<Invocation>, StorageError> {
        let (env, id) = (environment_id.to_owned(), id.to_owned());
        let row = self
            .db
            .run(move |conn| load_invocation(conn, &env, &id))
            .await?;
        row.map(InvocationRow::into_invocation).transpose()
    }

    async fn running_bulk(&self, environment_id: &str) -> Result<u64, StorageError> {
        let env = environment_id.to_owned();
        self.db
            .run(move |conn| crate::bulk::slots_held(conn, &env))
            .await
    }

    async fn claim(
        &self,
        now: Timestamp,
        lease_until: Timestamp,
        limit: u32,
    ) -> Result<Vec<Invocation>, StorageError> {
        let (now, lease) = (now.naive_utc(), lease_until.naive_utc());
        let rows =
            self.db
                .claim_transaction(move |conn| {
                    // Oldest first. One query per status, each read in the order of its
                    // (status, created) index: one query with both statuses would sort every
                    // waiting invocation to find the first few (a CSV task queues hundreds of
                    // thousands).
                    let mut keys: Vec<(NaiveDateTime, String, String)> = Vec::new();
                    for status in DUE_STATUSES {
                        let due = invocations_due!(status, now, i64::from(limit));
                        // Several processes share PostgreSQL: skip rows another one is claiming.
                        keys.extend(match &mut *conn {
                            AnyConnection::Postgresql(c) => due
                                .for_update()
                                .skip_locked()
                                .load::<(NaiveDateTime, String, String)>(c)?,
                            AnyConnection::Sqlite(c) => due.load(c)?,
                        });
                    }
                    keys.sort();
                    keys.truncate(usize::try_from(limit).unwrap_or(usize::MAX));
                    // One update and one read per environment (nearly always one).
                    let mut by_env: HashMap<String, Vec<String>> = HashMap::new();
                    for (_, env, id) in keys {
                        by_env.entry(env).or_default().push(id);
                    }
                    let mut rows = Vec::new();
                    for (env, ids) in by_env {
                        let claimed = || {
                            invocations::table
                                .filter(invocations::environment_id.eq(&env))
                                .filter(invocations::id.eq_any(&ids))
                        };
                        diesel::update(claimed())
                            .set((
                                invocations::status.eq("running"),
                                invocations::lease_until.eq(Some(lease)),
                                invocations::attempts.eq(invocations::attempts + 1),
                            ))
                            .execute(conn)?;
                        rows.extend(
                            claimed()
                                .select(InvocationRow::as_select())
                                .load::<InvocationRow>(conn)?,
                        );
                    }
                    rows.sort_by_key(|r| r.created);
                    Ok(rows)
                })
                .await?;
        rows.into_iter()
            .map(InvocationRow::into_invocation)
            .collect()
    }

    async fn save_batches(&self, batches: Vec<BatchResult>) -> Result<u64, StorageError> {
        if batches.is_empty() {
            return Ok(0);
        }
        self.db
            .transaction(move |conn| {
                let mut batches = batches;
                apply_cancels(conn, &mut batches)?;
                let kept = save_progress(conn, &batches)?;
                let saved: Vec<&BatchResult> = batches
                    .iter()
                    .zip(kept)
                    .filter_map(|(batch, kept)| kept.then_some(batch))
                    .collect();
                RunWrites::of(&saved, backend_of(conn)).write(conn, &saved)?;
                Ok((batches.len() - saved.len()) as u64)
            })
            .await
    }
}

/// The cards and events of batches, built like [`CardWrites`]: the rows of every batch
/// together, not one statement per batch.
struct RunWrites {
    cards: CardWrites,
    events: EventWrites,
}

impl RunWrites {
    fn of(batches: &[&BatchResult], backend: Backend) -> Self {
        let cards: Vec<Arc<CardInstance>> = batches
            .iter()
            .flat_map(|b| b.cards.iter().cloned())
            .collect();
        RunWrites {
            cards: CardWrites::of(&cards, backend),
            events: EventWrites::of(&events_of(batches), backend),
        }
    }

    /// Writes them, with the outbox rows of the events of `batches`, the batches they were
    /// built from.
    fn write(&self, conn: &mut AnyConnection, batches: &[&BatchResult]) -> Result<(), Failure> {
        self.cards.write(conn)?;
        self.events.write(conn)?;
        enqueue(conn, &events_of(batches))
    }
}

fn events_of<'a>(batches: &[&'a BatchResult]) -> Vec<&'a AnalyticsEvent> {
    batches.iter().flat_map(|b| b.events.iter()).collect()
}

/// (environment, invocation id) → the invocation's (flow, version, created).
type Known = HashMap<(String, String), (String, i32, NaiveDateTime)>;

/// Applies the cancels accepted meanwhile to the batches (contract §6: they take precedence).
/// One read of the batches' invocations and one of each flow's markers, for the whole save.
fn apply_cancels(conn: &mut AnyConnection, batches: &mut [BatchResult]) -> Result<(), Failure> {
    // (environment, id) -> (flow, version, created): one read per environment (nearly always
    // one), on the primary key.
    let mut by_env: HashMap<&str, Vec<&str>> = HashMap::new();
    for batch in batches.iter() {
        by_env
            .entry(batch.environment_id.as_str())
            .or_default()
            .push(batch.invocation_id.as_str());
    }
    let mut known: Known = HashMap::new();
    for (env, ids) in by_env {
        let rows: Vec<(String, String, i32, NaiveDateTime)> = invocations::table
            .filter(invocations::environment_id.eq(env))
            .filter(invocations::id.eq_any(&ids))
            .select((
                invocations::id,
                invocations::flow_id,
                invocations::flow_version,
                invocations::created,
            ))
            .load(conn)?;
        known.extend(
            rows.into_iter().map(|(id, flow, version, created)| {
                ((env.to_owned(), id), (flow, version, created))
            }),
        );
    }
    apply_markers(conn, batches, &known)
}

/// Each flow's cancel markers accepted since the oldest of its `known` invocations among
/// `batches`: one read per flow. Flows without any are left out.
fn markers_for<'a>(
    conn: &mut AnyConnection,
    batches: impl Iterator<Item = &'a BatchResult>,
    known: &Known,
) -> Result<Markers, Failure> {
    let mut since: HashMap<(&str, &str), NaiveDateTime> = HashMap::new();
    for batch in batches {
        if let Some((flow, _, created)) =
            known.get(&(batch.environment_id.clone(), batch.invocation_id.clone()))
        {
            let oldest = since
                .entry((batch.environment_id.as_str(), flow.as_str()))
                .or_insert(*created);
            *oldest = (*oldest).min(*created);
        }
    }
    let mut markers = HashMap::new();
    for ((env, flow), oldest) in since {
        let found = crate::cancel::markers_since(conn, env, flow, oldest.and_utc())?;
        if !found.is_empty() {
            markers.insert((env.to_owned(), flow.to_owned()), found);
        }
    }
    Ok(markers)
}

/// (environment, flow) → its cancel markers.
type Markers = HashMap<(String, String), Vec<domain::cancel::CancelTask>>;

/// Applies to each batch of a `known` invocation its flow's cancel markers accepted since the
/// invocation was created: one read of each flow's markers.
fn apply_markers(
    conn: &mut AnyConnection,
    batches: &mut [BatchResult],
    known: &Known,
) -> Result<(), Failure> {
    let markers = markers_for(conn, batches.iter(), known)?;
    if markers.is_empty() {
        return Ok(());
    }
    for batch in batches.iter_mut() {
        let key = (batch.environment_id.clone(), batch.invocation_id.clone());
        if let Some((flow, version, created)) = known.get(&key) {
            if let Some(found) = markers.get(&(batch.environment_id.clone(), flow.clone())) {
                batch.apply_cancels(
                    found,
                    u32::try_from(*version).unwrap_or(0),
                    created.and_utc(),
                );
            }
        }
    }
    Ok(())
}

/// Saves the batches' progress, each only from the cursor it started at; false for a batch
/// whose invocation is no longer there (another worker took it over and saved this batch
/// first), and nothing of that batch is to be written.
///
/// Batches that start at no cursor and change their invocations alike (the one batch of each
/// one-user invocation of a `/start` load or a CSV task) are saved with one statement per
/// 500, the saved ones told apart by `RETURNING`; the others one by one.
fn save_progress(conn: &mut AnyConnection, batches: &[BatchResult]) -> Result<Vec<bool>, Failure> {
    let mut kept = vec![false; batches.len()];
    let mut alike: HashMap<ProgressKey, Vec<usize>> = HashMap::new();
    for (i, batch) in batches.iter().enumerate() {
        match batch.from_cursor {
            None => alike.entry(ProgressKey::of(batch)).or_default().push(i),
            Some(_) => kept[i] = save_one(conn, batch)?,
        }
    }
    for (key, members) in alike {
        if let [only] = members[..] {
            kept[only] = save_one(conn, &batches[only])?;
            continue;
        }
        let batch = &batches[members[0]];
        for chunk in members.chunks(INSERT_CHUNK) {
            let ids: Vec<&str> = chunk
                .iter()
                .map(|&i| batches[i].invocation_id.as_str())
                .collect();
            let saved: Vec<String> = diesel::update(
                invocations::table
                    .filter(invocations::environment_id.eq(&key.environment_id))
                    .filter(invocations::id.eq_any(&ids))
                    .filter(invocations::cursor.is_null())
                    .filter(
                        invocations::status
                            .eq("pending")
                            .or(invocations::status.eq("running")),
                    ),
            )
            .set(progress(batch))
            .returning(invocations::id)
            .get_results(conn)?;
            let saved: std::collections::HashSet<String> = saved.into_iter().collect();
            for &i in chunk {
                kept[i] = saved.contains(&batches[i].invocation_id);
            }
        }
    }
    Ok(kept)
}

/// What a batch that starts at no cursor changes in its invocation, besides its key.
#[derive(PartialEq, Eq, Hash)]
struct ProgressKey {
    environment_id: String,
    status: &'static str,
    cursor: Option<String>,
    users_targeted: u64,
    cards_created: u64,
    errors: String,
    updated: NaiveDateTime,
    lease_until: Option<NaiveDateTime>,
}

impl ProgressKey {
    fn of(batch: &BatchResult) -> Self {
        ProgressKey {
            environment_id: batch.environment_id.clone(),
            status: batch.status.as_str(),
            cursor: batch.cursor.clone(),
            users_targeted: batch.users_targeted,
            cards_created: batch.cards_created,
            errors: errors_text(batch),
            updated: batch.updated.naive_utc(),
            lease_until: batch.lease_until.map(|t| t.naive_utc()),
        }
    }
}

fn errors_text(batch: &BatchResult) -> String {
    serde_json::to_string(&batch.errors).unwrap_or_else(|_| "[]".into())
}

/// The changes a batch makes to its invocation.
#[allow(clippy::type_complexity)]
fn progress(
    batch: &BatchResult,
) -> (
    diesel::dsl::Eq<invocations::status, &'static str>,
    diesel::dsl::Eq<invocations::cursor, Option<String>>,
    diesel::dsl::Eq<
        invocations::users_targeted,
        diesel::dsl::Add<invocations::users_targeted, i64>,
    >,
    diesel::dsl::Eq<invocations::cards_created, diesel::dsl::Add<invocations::cards_created, i64>>,
    diesel::dsl::Eq<invocations::errors, String>,
    diesel::dsl::Eq<invocations::lease_until, Option<NaiveDateTime>>,
    diesel::dsl::Eq<invocations::updated, NaiveDateTime>,
) {
    (
        invocations::status.eq(batch.status.as_str()),
        invocations::cursor.eq(batch.cursor.clone()),
        invocations::users_targeted
            .eq(invocations::users_targeted + i64::try_from(batch.users_targeted).unwrap_or(0)),
        invocations::cards_created
            .eq(invocations::cards_created + i64::try_from(batch.cards_created).unwrap_or(0)),
        invocations::errors.eq(errors_text(batch)),
        // The claim ends with the batch (the next one may be claimed at once), unless the
        // worker goes on with the next one itself.
        invocations::lease_until.eq(batch.lease_until.map(|t| t.naive_utc())),
        invocations::updated.eq(batch.updated.naive_utc()),
    )
}

/// Saves one batch's progress, only from the cursor it started at; false when its invocation
/// is no longer there.
fn save_one(conn: &mut AnyConnection, batch: &BatchResult) -> Result<bool, Failure> {
    // A batch's starting point is the cursor and a status not yet final: a one-batch
    // invocation keeps a null cursor from start to end. (`eq` OR `eq`, not `eq_any`: diesel
    // caches the prepared statement only for a fixed number of binds, and this runs once per
    // invocation — re-parsing it was ~15% of the server's CPU while a CSV task ran.)
    let key = invocations::table
        .filter(
            invocations::environment_id
                .eq(&batch.environment_id)
                .and(invocations::id.eq(&batch.invocation_id)),
        )
        .filter(
            invocations::status
                .eq("pending")
                .or(invocations::status.eq("running")),
        );
    // Applies only from the cursor this batch started at.
    let updated = match &batch.from_cursor {
        Some(from) => diesel::update(key.filter(invocations::cursor.eq(from)))
            .set(progress(batch))
            .execute(conn)?,
        None => diesel::update(key.filter(invocations::cursor.is_null()))
            .set(progress(batch))
            .execute(conn)?,
    };
    Ok(updated == 1)
}

pub struct DieselCardRepository {
    db: Database,
}

impl DieselCardRepository {
    pub fn new(db: Database) -> Self {
        Self { db }
    }
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
                let mut query = card_instances::table
                    .filter(
                        card_instances::environment_id
                            .eq(env)
                            .and(card_instances::user_id.eq(user)),
                    )
                    .filter(card_instances::status.eq("active"))
                    .order((
                        card_instances::priority.desc(),
                        card_instances::created.desc(),
                        card_instances::id.desc(),
                    ))
                    .select(CardRow::as_select())
                    .into_boxed();
                if let Some(stream) = stream_id {
                    // stream_ids is a JSON array of ids; ids hold no quote, % or _ of their own
                    // that matter once quoted and escaped.
                    let quoted = serde_json::to_string(&stream)
                        .unwrap_or_default()
                        .replace('\\', "\\\\")
                        .replace('%', "\\%")
                        .replace('_', "\\_");
                    query = query.filter(
                        card_instances::stream_ids
                            .like(format!("%{quoted}%"))
                            .escape('\\'),
                    );
                }
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
                // Three queries, each served by its own (status, time) index; one query with
                // OR would read every card.
                let limit = i64::from(limit);
                let mut rows: Vec<CardRow> = card_instances::table
                    .filter(
                        card_instances::status
                            .eq("embargoed")
                            .and(card_instances::embargo_until.le(now)),
                    )
                    .limit(limit)
                    .select(CardRow::as_select())
                    .load(conn)?;
                rows.extend(
                    card_instances::table
                        .filter(
                            card_instances::status
                                .eq("snoozed")
                                .and(card_instances::snoozed_until.le(now)),
                        )
                        .limit(limit)
                        .select(CardRow::as_select())
                        .load(conn)?,
                );
                for status in ["embargoed", "active", "snoozed"] {
                    rows.extend(
                        card_instances::table
                            .filter(
                                card_instances::status
                                    .eq(status)
                                    .and(card_instances::expires_at.le(now)),
                            )
                            .limit(limit)
                            .select(CardRow::as_select())
                            .load(conn)?,
                    );
                }
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
                                .eq(&c.id)
                                .and(card_instances::status.eq(t.from.as_str())),
                        ),
                    )
                    .set((
                        card_instances::status.eq(c.status.as_str()),
                        card_instances::snoozed_until.eq(c.snoozed_until.map(|x| x.naive_utc())),
                        card_instances::published_at.eq(c.published_at.map(|x| x.naive_utc())),
                        card_instances::updated.eq(c.updated.naive_utc()),
                    ))
                    .execute(conn)?;
                    if changed == 1 {
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
    fn claims_read_each_status_through_its_partial_index() {
        use diesel::sql_types::Timestamp as SqlTimestamp;
        #[derive(diesel::QueryableByName)]
        struct Step {
            #[diesel(sql_type = diesel::sql_types::Text)]
            detail: String,
        }
        let db = crate::testing::TestDatabase::sqlite();
        let mut conn = crate::db::DatabaseUrl::parse(db.url())
            .expect("url")
            .establish()
            .expect("connect");
        crate::db::migrate(&mut conn).expect("migrate");
        let AnyConnection::Sqlite(conn) = &mut conn else {
            panic!("sqlite")
        };
        let now = Utc.timestamp_opt(1_700_000_000, 0).unwrap().naive_utc();
        for (status, index) in DUE_STATUSES
            .iter()
            .zip(["invocations_pending", "invocations_running"])
        {
            let query = invocations_due!(*status, now, 10);
            let sql = diesel::debug_query::<diesel::sqlite::Sqlite, _>(&query).to_string();
            let sql = sql.split(" -- binds").next().unwrap_or_default();
            let plan: Vec<Step> = diesel::sql_query(format!("EXPLAIN QUERY PLAN {sql}"))
                .bind::<SqlTimestamp, _>(now)
                .bind::<diesel::sql_types::BigInt, _>(10)
                .load(conn)
                .expect("plan");
            let plan: Vec<String> = plan.into_iter().map(|s| s.detail).collect();
            assert!(
                plan.iter().any(|d| d.contains(index))
                    && !plan.iter().any(|d| d.contains("TEMP B-TREE")),
                "{status}: {plan:?}"
            );
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
        let rows: Vec<CardRow> = [&one, &two, &other].map(card_row).into();
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
        let rows: Vec<CardRow> = [&shared, &apart].map(card_row).into();
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
            let mut corrupt = card_row(&shared);
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
        let row = card_row(&completed);
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
                .bind::<Text, _>(&e.id)
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
