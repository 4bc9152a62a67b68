//! Daily totals (contract §14): what a transaction counts is gathered here as it writes, and
//! added to `flow_totals` at its end, in the same transaction, one upsert
//! (`n = n + excluded.n`) per row the transaction touches — not one per thing counted. The
//! rows are written in one order (their key's), so that two transactions never wait on each
//! other's rows crosswise, and on PostgreSQL each transaction writes one shard of its counts,
//! so that concurrent writers of the same flow and day rarely wait on one row at all.
//!
//! A count is kept under the folder its flow was in when the counted thing's flow instance
//! started (an invocation when it was recorded, a card and its events when the card was
//! made): `flow_folders`, kept by triggers on `action_flows`, says which.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU32, Ordering};

use chrono::{NaiveDate, NaiveDateTime};
use diesel::prelude::*;
use domain::card::{AnalyticsEvent, CardInstance};
use domain::stats::{
    event_metric, CANCELLED, CARDS_CREATED, COMPLETED, FAILED, STARTED, STEPS, WEBHOOKS_FAILED,
    WEBHOOKS_SUCCEEDED,
};
use domain::trigger::instances::FlowInstance;
use domain::trigger::{Invocation, InvocationStatus, Mode};

use crate::columns::column_insert;
use crate::db::{AnyConnection, Failure};
use crate::packed::{Bind, Statement};
use crate::schema::flow_folders;

/// Shards of one count on PostgreSQL.
const SHARDS: u32 = 8;

/// What a count is kept under, before the folder is known: its flow instance's start says
/// which folder.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Pending {
    environment_id: String,
    flow_id: String,
    flow_version: i32,
    mode: &'static str,
    started: NaiveDateTime,
    day: NaiveDate,
    metric: String,
}

/// The counts of one transaction, to be [`flush`](Totals::flush)ed before it commits.
#[derive(Debug, Default)]
pub(crate) struct Totals {
    counts: HashMap<Pending, i64>,
    /// The mode of card contexts already read, by the address of their shared text.
    modes: HashMap<(usize, usize), &'static str>,
}

/// The mode of a card: its context's `test` flag.
fn card_mode(
    card: &CardInstance,
    modes: &mut HashMap<(usize, usize), &'static str>,
) -> &'static str {
    let text = card.context.text();
    let key = (text.as_ptr() as usize, text.len());
    if let Some(mode) = modes.get(&key) {
        return mode;
    }
    let mode = mode_of(context_is_test(text));
    modes.insert(key, mode);
    mode
}

impl Totals {
    fn add(&mut self, key: Pending, n: i64) {
        *self.counts.entry(key).or_insert(0) += n;
    }

    /// An invocation recorded.
    pub(crate) fn started(&mut self, i: &Invocation) {
        let created = i.created.naive_utc();
        self.add(
            Pending {
                environment_id: i.environment_id.clone(),
                flow_id: i.flow_id.clone(),
                flow_version: i32::try_from(i.flow_version).unwrap_or(i32::MAX),
                mode: i.mode.as_str(),
                started: created,
                day: created.date(),
                metric: STARTED.to_owned(),
            },
            1,
        );
    }

    /// An invocation that became final (`status`) at `at`; nothing for one that is not final.
    pub(crate) fn ended(&mut self, ended: &Ended, status: InvocationStatus, at: NaiveDateTime) {
        let metric = match status {
            InvocationStatus::Completed => COMPLETED,
            InvocationStatus::Failed => FAILED,
            InvocationStatus::Cancelled => CANCELLED,
            InvocationStatus::Pending | InvocationStatus::Running => return,
        };
        self.add(
            Pending {
                environment_id: ended.environment_id.clone(),
                flow_id: ended.flow_id.clone(),
                flow_version: ended.flow_version,
                mode: Mode::parse(&ended.mode).unwrap_or(Mode::Live).as_str(),
                started: ended.created,
                day: at.date(),
                metric: metric.to_owned(),
            },
            1,
        );
    }

    fn of_card(&mut self, card: &CardInstance, day: NaiveDate, metric: String) -> Pending {
        Pending {
            environment_id: card.environment_id.clone(),
            flow_id: card.flow_id.clone(),
            flow_version: i32::try_from(card.flow_version).unwrap_or(i32::MAX),
            mode: card_mode(card, &mut self.modes),
            started: card.created.naive_utc(),
            day,
            metric,
        }
    }

    /// Cards created.
    pub(crate) fn cards<'a>(&mut self, cards: impl IntoIterator<Item = &'a CardInstance>) {
        for card in cards {
            let key = self.of_card(card, card.created.naive_utc().date(), CARDS_CREATED.into());
            self.add(key, 1);
        }
    }

    /// What a change of a flow instance added to its steps (contract §21): per step, `reached`
    /// and each outcome (`steps.<id>.reached`, `steps.<id>.outcome.<name>`), on the day of the
    /// change; the `deltas` of [`domain::flow::steps::run::tally`].
    pub(crate) fn steps(
        &mut self,
        instance: &FlowInstance,
        mode: &'static str,
        deltas: &BTreeMap<(String, String), i64>,
    ) {
        for ((step, metric), n) in deltas {
            let counted = metric == "reached" || metric.starts_with("outcome.");
            if step.is_empty() || !counted || *n <= 0 {
                continue;
            }
            self.add(
                Pending {
                    environment_id: instance.environment_id.clone(),
                    flow_id: instance.flow_id.clone(),
                    flow_version: i32::try_from(instance.flow_version).unwrap_or(i32::MAX),
                    mode,
                    started: instance.created.naive_utc(),
                    day: instance.updated.naive_utc().date(),
                    metric: format!("{STEPS}{step}.{metric}"),
                },
                *n,
            );
        }
    }

    /// Events written.
    pub(crate) fn events<'a>(&mut self, events: impl IntoIterator<Item = &'a AnalyticsEvent>) {
        for event in events {
            let day = event.created.naive_utc().date();
            let key = self.of_card(&event.card, day, event_metric(&event.name));
            self.add(key, 1);
        }
    }

    /// A webhook delivery of an event of `card` that succeeded or failed for good at `at`.
    pub(crate) fn delivery(&mut self, card: &CardOf, succeeded: bool, at: NaiveDateTime) {
        let metric = if succeeded {
            WEBHOOKS_SUCCEEDED
        } else {
            WEBHOOKS_FAILED
        };
        self.add(
            Pending {
                environment_id: card.environment_id.clone(),
                flow_id: card.flow_id.clone(),
                flow_version: card.flow_version,
                mode: mode_of(context_is_test(&card.context)),
                started: card.created,
                day: at.date(),
                metric: metric.to_owned(),
            },
            1,
        );
    }

    /// Adds the counts to `flow_totals`, each under its folder at start; the transaction's
    /// last writes (see the module's comment).
    pub(crate) fn flush(self, conn: &mut AnyConnection) -> Result<(), Failure> {
        if self.counts.is_empty() {
            return Ok(());
        }
        let history = self.folder_history(conn)?;
        let shard = match conn {
            AnyConnection::Sqlite(_) => 0,
            AnyConnection::Postgresql(_) => next_shard(),
        };
        let mut rows: BTreeMap<Key, i64> = BTreeMap::new();
        for (p, n) in &self.counts {
            let folder = history
                .get(p.flow_id.as_str())
                .map(|h| folder_at(h, p.started))
                .unwrap_or_default();
            let key = Key {
                environment_id: p.environment_id.clone(),
                flow_id: p.flow_id.clone(),
                day: p.day.format("%Y-%m-%d").to_string(),
                flow_version: p.flow_version,
                folder_id: folder.to_owned(),
                mode: p.mode,
                metric: p.metric.clone(),
            };
            *rows.entry(key).or_insert(0) += n;
        }
        let rows: Vec<TotalRow> = rows
            .into_iter()
            .map(|(k, n)| TotalRow {
                environment_id: k.environment_id,
                flow_id: k.flow_id,
                day: k.day,
                flow_version: k.flow_version,
                folder_id: k.folder_id,
                mode: k.mode.to_owned(),
                metric: k.metric,
                shard,
                n,
            })
            .collect();
        upsert(conn, rows)
    }

    /// The folders of each flow counted, with the time each was entered, in order.
    fn folder_history(&self, conn: &mut AnyConnection) -> Result<History<'_>, Failure> {
        let mut flows: Vec<&str> = self.counts.keys().map(|k| k.flow_id.as_str()).collect();
        flows.sort_unstable();
        flows.dedup();
        let mut history: History = HashMap::new();
        for flow in flows {
            // One flow at a time: the statement is the same whatever the number of flows, and
            // a transaction rarely counts more than a few.
            let rows: Vec<(NaiveDateTime, String)> = flow_folders::table
                .filter(flow_folders::flow_id.eq(flow))
                .order(flow_folders::since)
                .select((flow_folders::since, flow_folders::folder_id))
                .load(conn)?;
            history.insert(flow, rows);
        }
        Ok(history)
    }
}

/// Each flow's folders, with the time it entered each, in order.
type History<'a> = HashMap<&'a str, Vec<(NaiveDateTime, String)>>;

/// Adds `rows` to `flow_totals`, in the order given (their key's).
fn upsert(conn: &mut AnyConnection, rows: Vec<TotalRow>) -> Result<(), Failure> {
    match conn {
        // Row by row: a flow, version, mode and day each count a handful of metrics.
        AnyConnection::Sqlite(c) => {
            for row in rows {
                sqlite_upsert(row).run(c)?;
            }
        }
        // As arrays of columns: one statement text whatever the number of rows, which
        // PostgreSQL plans once per connection (diesel's multi-row upsert it parsed and
        // planned again in every transaction). In key order, as the arrays are.
        AnyConnection::Postgresql(c) => {
            column_insert!(
                "flow_totals",
                rows,
                " ON CONFLICT (environment_id, flow_id, day, flow_version, folder_id, mode, \
                 metric, shard) DO UPDATE SET n = flow_totals.n + excluded.n",
                {
                    environment_id: Text,
                    flow_id: Text,
                    day: Text,
                    flow_version: Int,
                    folder_id: Text,
                    mode: Text,
                    metric: Text,
                    shard: Int,
                    n: BigInt,
                }
            )
            .run(c)?;
        }
    }
    Ok(())
}

/// The shard of the next transaction on PostgreSQL: in turn.
fn next_shard() -> i32 {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    i32::try_from(NEXT.fetch_add(1, Ordering::Relaxed) % SHARDS).unwrap_or(0)
}

/// The upsert of one row on SQLite, by a statement of one text, which diesel keeps prepared:
/// it prepares its own upserts again at every execution (a visible share of the profile of the
/// recorder's writing thread under a `/start` load).
fn sqlite_upsert(row: TotalRow) -> Statement {
    Statement::new(
        "INSERT INTO flow_totals (environment_id, flow_id, day, flow_version, folder_id, mode, \
         metric, shard, n) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (environment_id, \
         flow_id, day, flow_version, folder_id, mode, metric, shard) DO UPDATE SET n = \
         flow_totals.n + excluded.n",
        vec![
            Bind::Text(row.environment_id),
            Bind::Text(row.flow_id),
            Bind::Text(row.day),
            Bind::Int(row.flow_version),
            Bind::Text(row.folder_id),
            Bind::Text(row.mode),
            Bind::Text(row.metric),
            Bind::Int(row.shard),
            Bind::BigInt(row.n),
        ],
    )
}

/// The folder a flow was in at `at` ('' for none), from its history oldest first.
pub(crate) fn folder_at(history: &[(NaiveDateTime, String)], at: NaiveDateTime) -> &str {
    history
        .iter()
        .take_while(|(since, _)| *since <= at)
        .last()
        .or_else(|| history.first())
        .map(|(_, folder)| folder.as_str())
        .unwrap_or("")
}

/// The spelling of test mode when `test`, else of live mode.
fn mode_of(test: bool) -> &'static str {
    if test {
        Mode::Test.as_str()
    } else {
        Mode::Live.as_str()
    }
}

/// Whether a card's context (JSON text) is of test mode.
fn context_is_test(context: &str) -> bool {
    #[derive(serde::Deserialize)]
    struct Flag {
        #[serde(default)]
        test: bool,
    }
    matches!(
        serde_json::from_str::<Flag>(context),
        Ok(Flag { test: true })
    )
}

/// An invocation as its end is counted: what it is kept under.
#[derive(Debug, Clone, Queryable)]
pub(crate) struct Ended {
    pub(crate) environment_id: String,
    pub(crate) flow_id: String,
    pub(crate) flow_version: i32,
    pub(crate) mode: String,
    pub(crate) created: NaiveDateTime,
}

impl Ended {
    /// What `i` is kept under.
    pub(crate) fn of(i: &Invocation) -> Self {
        Ended {
            environment_id: i.environment_id.clone(),
            flow_id: i.flow_id.clone(),
            flow_version: i32::try_from(i.flow_version).unwrap_or(i32::MAX),
            mode: i.mode.as_str().to_owned(),
            created: i.created.naive_utc(),
        }
    }
}

/// A card as a delivery of one of its events is counted.
#[derive(Debug, Clone, Queryable)]
pub(crate) struct CardOf {
    pub(crate) environment_id: String,
    pub(crate) flow_id: String,
    pub(crate) flow_version: i32,
    pub(crate) context: String,
    pub(crate) created: NaiveDateTime,
}

#[derive(Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Key {
    environment_id: String,
    flow_id: String,
    day: String,
    flow_version: i32,
    folder_id: String,
    mode: &'static str,
    metric: String,
}

/// One row of the daily totals to add.
struct TotalRow {
    environment_id: String,
    flow_id: String,
    day: String,
    flow_version: i32,
    folder_id: String,
    mode: String,
    metric: String,
    shard: i32,
    n: i64,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schema::flow_totals;

    fn at(s: &str) -> NaiveDateTime {
        NaiveDateTime::parse_from_str(s, "%Y-%m-%d %H:%M:%S").expect("time")
    }

    #[test]
    fn a_count_goes_to_the_folder_of_its_start() {
        let history = vec![
            (at("1970-01-01 00:00:00"), "fld_a".to_owned()),
            (at("2026-11-24 10:00:00"), "fld_b".to_owned()),
            (at("2026-11-25 10:00:00"), String::new()),
        ];
        assert_eq!(folder_at(&history, at("2026-11-24 09:59:59")), "fld_a");
        assert_eq!(folder_at(&history, at("2026-11-24 10:00:00")), "fld_b");
        assert_eq!(folder_at(&history, at("2026-11-26 00:00:00")), "");
        assert_eq!(folder_at(&[], at("2026-11-26 00:00:00")), "");
        assert!(context_is_test(
            r#"{"metadata":{"test":false},"test":true}"#
        ));
        assert!(!context_is_test(r#"{"test":false}"#));
        assert!(!context_is_test("not json"));
    }

    #[test]
    fn a_flush_adds_on_sqlite_by_an_upsert_prepared_once_per_connection() {
        let mut totals = Vec::new();
        let kept = crate::testing::sqlite_kept(|conn| {
            let mut counts = Totals::default();
            counts.started(&crate::waits_tests::invocation(1));
            counts.started(&crate::waits_tests::invocation(2));
            let Ok(()) = counts.flush(conn) else {
                panic!("the flush failed")
            };
            let AnyConnection::Sqlite(c) = conn else {
                panic!("sqlite")
            };
            let n: i64 = flow_totals::table
                .select(flow_totals::n)
                .first(c)
                .expect("the row");
            totals.push(n);
        });
        assert_eq!(totals, [2, 4]);
        let upserts = kept
            .iter()
            .filter(|sql| sql.starts_with("INSERT") && sql.contains("flow_totals"));
        assert_eq!(upserts.count(), 1, "{kept:#?}");
    }
}
