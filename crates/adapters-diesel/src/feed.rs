//! The end-user feed in real time (contract §12): the feed's reads, and the notices of whose
//! cards changed.
//!
//! Every write of card events goes through [`crate::writes::enqueue`], which notes the events'
//! users here (kept by `db::notices` for the transaction under way). A write transaction that
//! commits tells them to the process's [`FeedNotices`] (registered with
//! [`crate::Database::tell_feed`]); one that rolls back tells nothing. On PostgreSQL the same
//! transaction also sends them with `NOTIFY` on the channel [`CHANNEL`], delivered at its commit,
//! and [`listen`] hands those of other processes to their own notices.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use chrono::NaiveDateTime;
use diesel::prelude::*;
use domain::card::AnalyticsEvent;
use domain::feed::{EventHead, FeedNotices, FeedRepository};
use domain::id::EventId;
use domain::{StorageError, Timestamp};

use crate::db::{AnyConnection, Database, DatabaseUrl, Failure};
use crate::millis::At;
use crate::schema::{analytics_events, card_instances};

/// The PostgreSQL notification channel of the feed's changes.
pub const CHANNEL: &str = "workbench_feed";
/// The longest payload sent in one notification (PostgreSQL's limit is 8,000 bytes).
const PAYLOAD_MAX: usize = 7_000;
/// How often the listener looks for notifications: the most a change waits on this end.
const LISTEN_EVERY: Duration = Duration::from_millis(20);
/// How often the listener proves its connection alive.
const PROBE_EVERY: Duration = Duration::from_secs(5);

/// This process, as its notifications name it: its own are not told twice.
fn instance() -> &'static str {
    static INSTANCE: OnceLock<String> = OnceLock::new();
    INSTANCE.get_or_init(|| {
        use std::hash::BuildHasher;
        // Random per process (the hasher's keys are), with the process id beside it.
        let random = std::collections::hash_map::RandomState::new().hash_one(std::process::id());
        format!("{}-{random:016x}", std::process::id())
    })
}

/// Notes the users of `events` for the transaction under way; on PostgreSQL, also sends them
/// to the other processes (delivered when it commits).
pub(crate) fn note(conn: &mut AnyConnection, events: &[&AnalyticsEvent]) -> Result<(), Failure> {
    if events.is_empty() {
        return Ok(());
    }
    let mut users: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for event in events {
        let list = users.entry(event.environment_id()).or_default();
        if list.last() != Some(&event.user_id()) {
            list.push(event.user_id());
        }
    }
    for (env, list) in &users {
        crate::db::notices::note(env, list);
    }
    if let AnyConnection::Postgresql(c) = conn {
        for payload in payloads(&users) {
            Notify(payload).execute(c)?;
        }
    }
    Ok(())
}

/// `SELECT pg_notify(CHANNEL, payload)`: a statement of its own type, which diesel prepares
/// once per connection and keeps (a `sql_query` it sends to be parsed and planned each time,
/// in every transaction that writes events).
#[derive(diesel::query_builder::QueryId)]
struct Notify(String);

impl diesel::query_builder::QueryFragment<diesel::pg::Pg> for Notify {
    fn walk_ast<'b>(
        &'b self,
        mut out: diesel::query_builder::AstPass<'_, 'b, diesel::pg::Pg>,
    ) -> QueryResult<()> {
        out.push_sql("SELECT pg_notify(");
        out.push_bind_param::<diesel::sql_types::Text, _>(CHANNEL)?;
        out.push_sql(", ");
        out.push_bind_param::<diesel::sql_types::Text, _>(&self.0)?;
        out.push_sql(")");
        Ok(())
    }
}

impl RunQueryDsl<diesel::pg::PgConnection> for Notify {}

/// Notification payloads: `instance TAB environment TAB user US user ...`, each within
/// [`PAYLOAD_MAX`] bytes. Ids hold no control characters (validated where they enter).
fn payloads(users: &BTreeMap<&str, Vec<&str>>) -> Vec<String> {
    let mut out = Vec::new();
    for (env, list) in users {
        let head = format!("{}\t{env}\t", instance());
        let mut payload = head.clone();
        for user in list {
            if payload.len() > head.len() && payload.len() + 1 + user.len() > PAYLOAD_MAX {
                out.push(std::mem::replace(&mut payload, head.clone()));
            }
            if payload.len() > head.len() {
                payload.push('\u{1f}');
            }
            payload.push_str(user);
        }
        if payload.len() > head.len() {
            out.push(payload);
        }
    }
    out
}

/// A payload read back: its environment and users, unless this process sent it.
fn parse(payload: &str) -> Option<(&str, Vec<&str>)> {
    let mut parts = payload.splitn(3, '\t');
    let (from, env, users) = (parts.next()?, parts.next()?, parts.next()?);
    (from != instance()).then(|| (env, users.split('\u{1f}').collect()))
}

/// Hands the notifications other processes send on [`CHANNEL`] to `notices`, on a thread of
/// its own, until `stop` is set. A connection lost is made again (each second); after each
/// reconnection `notices` is told to catch up, since notifications sent meanwhile are gone.
/// SQLite has one process: nothing to listen to.
pub fn listen(
    url: DatabaseUrl,
    notices: Arc<dyn FeedNotices>,
    stop: Arc<AtomicBool>,
) -> Option<std::thread::JoinHandle<()>> {
    if url.sqlite_file().is_some() {
        return None;
    }
    let spawned = std::thread::Builder::new()
        .name("feed-listener".into())
        .spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                match listening(&url) {
                    Ok(mut conn) => {
                        // What other processes told while this one was not listening (before
                        // its first connection too) is read by every stream.
                        notices.catch_up();
                        if let Err(e) = relay(&mut conn, notices.as_ref(), &stop) {
                            tracing::warn!(error = %e, "feed notifications lost; listening again");
                            notices.catch_up();
                        }
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "cannot listen for feed notifications");
                        std::thread::sleep(Duration::from_secs(1));
                    }
                }
            }
        });
    match spawned {
        Ok(handle) => Some(handle),
        Err(e) => {
            tracing::error!(error = %e, "cannot start the feed listener");
            None
        }
    }
}

fn listening(url: &DatabaseUrl) -> Result<diesel::PgConnection, String> {
    match url.establish().map_err(|e| e.to_string())? {
        AnyConnection::Postgresql(mut c) => {
            diesel::sql_query(format!("LISTEN {CHANNEL}"))
                .execute(&mut c)
                .map_err(|e| e.to_string())?;
            Ok(c)
        }
        AnyConnection::Sqlite(_) => Err("SQLite has no notifications".into()),
    }
}

fn relay(
    conn: &mut diesel::PgConnection,
    notices: &dyn FeedNotices,
    stop: &AtomicBool,
) -> Result<(), diesel::result::Error> {
    let mut probed = Instant::now();
    while !stop.load(Ordering::Relaxed) {
        for notification in conn.notifications_iter() {
            let notification = notification?;
            if let Some((env, users)) = parse(&notification.payload) {
                notices.cards_changed(env, &users);
            }
        }
        if probed.elapsed() >= PROBE_EVERY {
            // A silent network shows only when asked: the connection's bounds end the wait.
            diesel::sql_query("SELECT 1").execute(conn)?;
            probed = Instant::now();
        }
        std::thread::sleep(LISTEN_EVERY);
    }
    Ok(())
}

#[derive(Queryable)]
struct HeadRow {
    id: String,
    name: String,
    card_instance_id: String,
    created: NaiveDateTime,
}

fn head(row: HeadRow) -> EventHead {
    EventHead {
        id: row.id.into(),
        name: row.name,
        card_id: row.card_instance_id.into(),
        created: row.created.and_utc(),
    }
}

/// The domain's `FeedRepository` port on the service's database.
pub struct DieselFeedRepository {
    db: Database,
}

impl DieselFeedRepository {
    /// Over `db`.
    pub fn new(db: Database) -> Self {
        Self { db }
    }
}

#[async_trait]
impl FeedRepository for DieselFeedRepository {
    async fn count_active(
        &self,
        environment_id: &str,
        user_id: &str,
        stream_id: Option<String>,
    ) -> Result<u64, StorageError> {
        let (env, user) = (environment_id.to_owned(), user_id.to_owned());
        self.db
            .run(move |conn| {
                let query = crate::rows::active_cards(&env, &user, stream_id.as_deref());
                let count: i64 = query.count().get_result(conn)?;
                Ok(u64::try_from(count).unwrap_or(0))
            })
            .await
    }

    async fn events_since(
        &self,
        environment_id: &str,
        user_id: &str,
        since: Timestamp,
        after: Option<(Timestamp, EventId)>,
        limit: u32,
    ) -> Result<Vec<EventHead>, StorageError> {
        let (env, user) = (environment_id.to_owned(), user_id.to_owned());
        let since = At(since.naive_utc());
        self.db
            .run(move |conn| {
                let mut query = analytics_events::table
                    .inner_join(card_instances::table)
                    .filter(
                        card_instances::environment_id
                            .eq(env)
                            .and(card_instances::user_id.eq(user)),
                    )
                    .filter(analytics_events::created.ge(since))
                    .order((analytics_events::created, analytics_events::id))
                    .limit(i64::from(limit))
                    .select((
                        analytics_events::id,
                        analytics_events::name,
                        analytics_events::card_instance_id,
                        analytics_events::created,
                    ))
                    .into_boxed();
                if let Some((at, id)) = after {
                    let at = At(at.naive_utc());
                    query = query.filter(
                        analytics_events::created
                            .gt(at)
                            .or(analytics_events::created
                                .eq(at)
                                .and(analytics_events::id.gt(id.into_string()))),
                    );
                }
                let rows: Vec<HeadRow> = query.load(conn)?;
                Ok(rows.into_iter().map(head).collect())
            })
            .await
    }

    async fn event(
        &self,
        environment_id: &str,
        user_id: &str,
        event_id: &str,
    ) -> Result<Option<EventHead>, StorageError> {
        let (env, user, id) = (
            environment_id.to_owned(),
            user_id.to_owned(),
            event_id.to_owned(),
        );
        self.db
            .run(move |conn| {
                let row: Option<HeadRow> = analytics_events::table
                    .inner_join(card_instances::table)
                    .filter(analytics_events::id.eq(id))
                    .filter(
                        card_instances::environment_id
                            .eq(env)
                            .and(card_instances::user_id.eq(user)),
                    )
                    .select((
                        analytics_events::id,
                        analytics_events::name,
                        analytics_events::card_instance_id,
                        analytics_events::created,
                    ))
                    .first(conn)
                    .optional()?;
                Ok(row.map(head))
            })
            .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn payloads_stay_within_the_limit_and_read_back_in_other_processes_only() {
        let users: Vec<String> = (0..2_000).map(|i| format!("user-{i:05}")).collect();
        let list: Vec<&str> = users.iter().map(String::as_str).collect();
        let mut by_env = BTreeMap::new();
        by_env.insert("env_1", list.clone());
        let sent = payloads(&by_env);
        assert!(sent.len() > 1);
        assert!(sent.iter().all(|p| p.len() <= PAYLOAD_MAX));
        // This process's own are not read back; another's are, whole.
        assert!(sent.iter().all(|p| parse(p).is_none()));
        let mut read = Vec::new();
        for p in &sent {
            let foreign = p.replacen(instance(), "another", 1);
            let (env, users) = parse(&foreign)
                .map(|(e, u)| {
                    (
                        e.to_owned(),
                        u.into_iter().map(str::to_owned).collect::<Vec<_>>(),
                    )
                })
                .expect("parsed");
            assert_eq!(env, "env_1");
            read.extend(users);
        }
        assert_eq!(read, users);
    }
}
