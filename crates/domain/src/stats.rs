//! What flows did, day by day (contract §14): daily totals kept for ever, per environment,
//! flow, flow version, the folder a flow was in when its instance started, and mode; read by
//! flow or by folder (with its subfolders) over at most [`MAX_DAYS`] days. Storage keeps the
//! totals in the transactions that write what they count; this module reads them and decides
//! the ranges, the sums and the completion rate.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;

use async_trait::async_trait;
use chrono::{Duration, NaiveDate};

use crate::card::CardStatus;
use crate::flow::FlowRepository;
use crate::folder::{Folder, FolderRepository};
use crate::id::{EnvironmentId, FlowId, FolderId};
use crate::tenancy::{Permission, Principal};
use crate::time::Clock;
use crate::trigger::instances::InstanceRepository;
use crate::trigger::Mode;
use crate::{DomainError, FieldError, Resource, StorageError};

pub mod steps;

/// The longest range one request may read, in days (both ends included).
pub const MAX_DAYS: i64 = 366;
/// The range's length when only its end is given: `from` is this many days before `to`.
pub const DEFAULT_DAYS_BEFORE: i64 = 29;

/// Invocations recorded.
pub const STARTED: &str = "invocations.started";
/// Invocations completed.
pub const COMPLETED: &str = "invocations.completed";
/// Invocations failed.
pub const FAILED: &str = "invocations.failed";
/// Invocations cancelled.
pub const CANCELLED: &str = "invocations.cancelled";
/// Cards created.
pub const CARDS_CREATED: &str = "cards.created";
/// Webhook deliveries that succeeded.
pub const WEBHOOKS_SUCCEEDED: &str = "webhooks.succeeded";
/// Webhook deliveries that failed for good.
pub const WEBHOOKS_FAILED: &str = "webhooks.failed";
/// The prefix of a flow step's metrics (contract §21): `steps.<id>.reached` and
/// `steps.<id>.outcome.<name>`.
pub const STEPS: &str = "steps.";

/// The metric of an analytics event: `events.` and its name.
pub fn event_metric(name: &str) -> String {
    format!("events.{name}")
}

/// Every card event name (contract §4), in life-cycle order: the keys of a day's `cards`.
pub fn event_names() -> Vec<&'static str> {
    let mut names = vec!["card-published", "card-embargoed"];
    for status in CardStatus::ALL {
        for name in [
            status.event_name(Some(CardStatus::Snoozed)),
            status.event_name(None),
        ] {
            if !names.contains(&name) {
                names.push(name);
            }
        }
    }
    names
}

/// One stored total: a metric's count on a day, for a flow version.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Total {
    /// The UTC day the counted things happened.
    pub day: NaiveDate,
    /// The flow version they were of.
    pub flow_version: u32,
    /// What was counted (`invocations.started`, `events.card-completed`, ...).
    pub metric: String,
    /// How many.
    pub n: u64,
}

/// The counts of one day (and one version, for a flow).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DayTotals {
    /// The UTC day.
    pub date: NaiveDate,
    /// The flow version; None in a folder's totals, which add all versions up.
    pub version: Option<u32>,
    /// Each metric's count; a metric missing counts 0.
    pub counts: BTreeMap<String, u64>,
}

impl DayTotals {
    /// The count of `metric` (0 when none).
    pub fn count(&self, metric: &str) -> u64 {
        self.counts.get(metric).copied().unwrap_or(0)
    }

    /// `card-completed` ÷ `card-published` of the day; None when nothing was published.
    pub fn completion_rate(&self) -> Option<f64> {
        completion_rate(
            self.count(&event_metric("card-published")),
            self.count(&event_metric("card-completed")),
        )
    }
}

/// `completed` ÷ `published`; None when nothing was published.
pub fn completion_rate(published: u64, completed: u64) -> Option<f64> {
    if published == 0 {
        return None;
    }
    // Counts stay far below 2^53, where f64 is exact.
    Some(completed as f64 / published as f64)
}

/// The statistics of a flow or a folder over a range of days.
#[derive(Debug, Clone, PartialEq)]
pub struct Stats {
    /// The first day, included.
    pub from: NaiveDate,
    /// The last day, included.
    pub to: NaiveDate,
    /// Live or test.
    pub mode: Mode,
    /// The days (per version, for a flow) that have anything to count, oldest first.
    pub days: Vec<DayTotals>,
}

/// A statistics request's query, as sent (`from`, `to`, `version`, `mode`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StatsQuery {
    /// `YYYY-MM-DD`; default 29 days before `to`.
    pub from: Option<String>,
    /// `YYYY-MM-DD`; default today (UTC).
    pub to: Option<String>,
    /// A flow version (from 1); all when unset. Flows only.
    pub version: Option<String>,
    /// `live` (the default) or `test`.
    pub mode: Option<String>,
}

/// A request's query decided: the range, the mode, the version.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DayRange {
    /// The first day, included.
    pub from: NaiveDate,
    /// The last day, included.
    pub to: NaiveDate,
    /// Live or test.
    pub mode: Mode,
    /// One version only, when asked.
    pub version: Option<u32>,
    /// These metrics only, when given (a chart that draws a few); every metric otherwise.
    pub metrics: Option<&'static [&'static str]>,
}

/// The metrics of the console's insights chart: cards published, completed and dismissed.
pub const CARD_METRICS: [&str; 3] = [
    "events.card-published",
    "events.card-completed",
    "events.card-dismissed",
];

/// The query's range, mode and version on `today` (UTC): every problem at once, each at its
/// parameter, as [`DomainError::Validation`]. A bad date, `from` after `to`, or more than
/// [`MAX_DAYS`] days are refused.
pub fn decide_range(query: &StatsQuery, today: NaiveDate) -> Result<DayRange, DomainError> {
    let mut errors = Vec::new();
    let date = |field: &str, text: &Option<String>, errors: &mut Vec<FieldError>| match text {
        None => None,
        Some(text) => match NaiveDate::parse_from_str(text, "%Y-%m-%d") {
            Ok(d) if text.len() == 10 => Some(d),
            _ => {
                errors.push(FieldError::new(
                    field,
                    format!("must be a date written YYYY-MM-DD, got `{text}`"),
                ));
                None
            }
        },
    };
    let to_asked = date("to", &query.to, &mut errors);
    let from_asked = date("from", &query.from, &mut errors);
    let mode = match query.mode.as_deref() {
        None | Some("live") => Mode::Live,
        Some("test") => Mode::Test,
        Some(other) => {
            errors.push(FieldError::new(
                "mode",
                format!("must be `live` or `test`, got `{other}`"),
            ));
            Mode::Live
        }
    };
    let version = match query.version.as_deref() {
        None => None,
        Some(text) => match text.parse::<u32>() {
            Ok(v)
                if (1..=crate::flow::MAX_FLOW_VERSION).contains(&v)
                    && text.bytes().all(|b| b.is_ascii_digit()) =>
            {
                Some(v)
            }
            _ => {
                errors.push(FieldError::new(
                    "version",
                    format!(
                        "must be a flow version (a whole number from 1 to {}), got `{text}`",
                        crate::flow::MAX_FLOW_VERSION
                    ),
                ));
                None
            }
        },
    };
    if !errors.is_empty() {
        return Err(DomainError::Validation(errors));
    }
    let to = to_asked.unwrap_or(today);
    let from = match from_asked {
        Some(from) => from,
        None => to
            .checked_sub_signed(Duration::days(DEFAULT_DAYS_BEFORE))
            .unwrap_or(NaiveDate::MIN),
    };
    if from > to {
        return Err(DomainError::invalid("from", "must not be after `to`"));
    }
    // Both dates are valid, so their difference is far within i64.
    if (to - from).num_days() + 1 > MAX_DAYS {
        return Err(DomainError::invalid(
            "from",
            format!("the range may span at most {MAX_DAYS} days"),
        ));
    }
    Ok(DayRange {
        from,
        to,
        mode,
        version,
        metrics: None,
    })
}

/// The days of `totals`, oldest first: per day and version when `by_version`, else per day
/// with the versions added up. Shards and folders of one day are added up.
pub fn days(totals: Vec<Total>, by_version: bool) -> Vec<DayTotals> {
    let mut by_day: BTreeMap<(NaiveDate, Option<u32>), BTreeMap<String, u64>> = BTreeMap::new();
    for t in totals {
        let version = by_version.then_some(t.flow_version);
        let count = by_day
            .entry((t.day, version))
            .or_default()
            .entry(t.metric)
            .or_insert(0);
        *count = count.saturating_add(t.n);
    }
    by_day
        .into_iter()
        .filter(|(_, counts)| counts.values().any(|n| *n > 0))
        .map(|((date, version), counts)| DayTotals {
            date,
            version,
            counts,
        })
        .collect()
}

/// `root` and every folder below it, from the environment's `folders`.
pub fn subtree(root: &FolderId, folders: &[Folder]) -> Vec<String> {
    let mut found: Vec<String> = vec![root.as_str().to_owned()];
    let mut seen: HashSet<String> = found.iter().cloned().collect();
    let mut i = 0;
    while i < found.len() {
        let parent = found[i].clone();
        for f in folders {
            if f.parent_id.as_deref() == Some(parent.as_str())
                && seen.insert(f.id.as_str().to_owned())
            {
                found.push(f.id.as_str().to_owned());
            }
        }
        i += 1;
    }
    found
}

/// Storage of the daily totals (a port). Written by the storage adapter itself, in the
/// transactions that write what it counts; read here.
#[cfg_attr(feature = "mock", mockall::automock)]
#[async_trait]
pub trait StatsRepository: Send + Sync {
    /// The totals of a flow of the environment in `mode`, from `from` to `to` (UTC days,
    /// included), of one version when given.
    async fn flow_totals(
        &self,
        environment_id: &str,
        flow_id: &str,
        range: DayRange,
    ) -> Result<Vec<Total>, StorageError>;
    /// The totals of every flow of the environment whose instances started in one of
    /// `folder_ids`, in `mode`, from `from` to `to`.
    async fn folder_totals(
        &self,
        environment_id: &str,
        folder_ids: Vec<String>,
        range: DayRange,
    ) -> Result<Vec<Total>, StorageError>;
}

/// Reads statistics (`GET .../action-flow/{id}/stats`, `.../workbench-folder/{id}/stats`).
pub struct StatsService {
    totals: Arc<dyn StatsRepository>,
    flows: Arc<dyn FlowRepository>,
    folders: Arc<dyn FolderRepository>,
    instances: Arc<dyn InstanceRepository>,
    clock: Arc<dyn Clock>,
}

impl StatsService {
    /// A service over these ports.
    pub fn new(
        totals: Arc<dyn StatsRepository>,
        flows: Arc<dyn FlowRepository>,
        folders: Arc<dyn FolderRepository>,
        instances: Arc<dyn InstanceRepository>,
        clock: Arc<dyn Clock>,
    ) -> Self {
        StatsService {
            totals,
            flows,
            folders,
            instances,
            clock,
        }
    }

    /// Today, on the service's clock (UTC): the last day a range can end on.
    pub fn today(&self) -> NaiveDate {
        self.clock.now().date_naive()
    }

    /// What each step of a version of the flow did in `mode` since the flow was created
    /// ([`steps::step_totals`]): reached and outcomes from the daily totals, waiting now from
    /// the instances. Needs [`Permission::ActionFlowsRead`]; a flow not in the environment is
    /// not found. Steps nothing reached are left out.
    pub async fn steps(
        &self,
        who: &Principal,
        env: &EnvironmentId,
        flow_id: &FlowId,
        version: u32,
        mode: Mode,
    ) -> Result<BTreeMap<String, steps::StepTotals>, DomainError> {
        who.authorize(env, Permission::ActionFlowsRead)?;
        let Some(flow) = self.flows.get(env, flow_id).await? else {
            return Err(DomainError::NotFound(Resource::Flow));
        };
        let range = DayRange {
            from: flow.created.date_naive(),
            to: self.clock.now().date_naive(),
            mode,
            version: Some(version),
            metrics: None,
        };
        let totals = self.totals.flow_totals(env, flow_id, range).await?;
        let waiting = self.instances.waiting(env, flow_id, version, mode).await?;
        Ok(steps::step_totals(&totals, &waiting))
    }

    /// A flow's days, per version. Needs [`Permission::ActionFlowsRead`]; a bad query is
    /// [`DomainError::Validation`]; a flow not in the environment is not found.
    pub async fn flow(
        &self,
        who: &Principal,
        env: &EnvironmentId,
        flow_id: &FlowId,
        query: &StatsQuery,
    ) -> Result<Stats, DomainError> {
        self.flow_metrics(who, env, flow_id, query, None).await
    }

    /// [`flow`](Self::flow), of `metrics` only (none: every metric): a chart reads the few it
    /// draws ([`CARD_METRICS`]).
    pub async fn flow_metrics(
        &self,
        who: &Principal,
        env: &EnvironmentId,
        flow_id: &FlowId,
        query: &StatsQuery,
        metrics: Option<&'static [&'static str]>,
    ) -> Result<Stats, DomainError> {
        who.authorize(env, Permission::ActionFlowsRead)?;
        let range = DayRange {
            metrics,
            ..decide_range(query, self.clock.now().date_naive())?
        };
        if self.flows.get(env, flow_id).await?.is_none() {
            return Err(DomainError::NotFound(Resource::Flow));
        }
        let totals = self.totals.flow_totals(env, flow_id, range).await?;
        Ok(Stats {
            from: range.from,
            to: range.to,
            mode: range.mode,
            days: days(totals, true),
        })
    }

    /// A folder's days: the flows that were in it or in one of its subfolders when their
    /// instances started, all versions added up. Needs [`Permission::FoldersRead`] and
    /// [`Permission::ActionFlowsRead`]; `version` is not a parameter here.
    pub async fn folder(
        &self,
        who: &Principal,
        env: &EnvironmentId,
        folder_id: &FolderId,
        query: &StatsQuery,
    ) -> Result<Stats, DomainError> {
        self.folder_metrics(who, env, folder_id, query, None).await
    }

    /// [`folder`](Self::folder), of `metrics` only (none: every metric).
    pub async fn folder_metrics(
        &self,
        who: &Principal,
        env: &EnvironmentId,
        folder_id: &FolderId,
        query: &StatsQuery,
        metrics: Option<&'static [&'static str]>,
    ) -> Result<Stats, DomainError> {
        who.authorize(env, Permission::FoldersRead)?;
        who.authorize(env, Permission::ActionFlowsRead)?;
        let query = StatsQuery {
            version: None,
            ..query.clone()
        };
        let range = DayRange {
            metrics,
            ..decide_range(&query, self.clock.now().date_naive())?
        };
        let folders = self.folders.list(env).await?;
        if !folders.iter().any(|f| &f.id == folder_id) {
            return Err(DomainError::NotFound(Resource::Folder));
        }
        let ids = subtree(folder_id, &folders);
        let totals = self.totals.folder_totals(env, ids, range).await?;
        Ok(Stats {
            from: range.from,
            to: range.to,
            mode: range.mode,
            days: days(totals, false),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn day(s: &str) -> NaiveDate {
        NaiveDate::parse_from_str(s, "%Y-%m-%d").expect("date")
    }

    fn query(from: Option<&str>, to: Option<&str>) -> StatsQuery {
        StatsQuery {
            from: from.map(Into::into),
            to: to.map(Into::into),
            ..StatsQuery::default()
        }
    }

    fn fields(e: DomainError) -> Vec<String> {
        match e {
            DomainError::Validation(errors) => errors.into_iter().map(|e| e.field).collect(),
            other => panic!("not a validation error: {other:?}"),
        }
    }

    #[test]
    fn the_range_defaults_to_the_thirty_days_up_to_today_in_live_mode() {
        let today = day("2026-11-26");
        let r = decide_range(&StatsQuery::default(), today).expect("accepted");
        assert_eq!((r.from, r.to), (day("2026-10-28"), today));
        assert_eq!(r.mode, Mode::Live);
        assert_eq!(r.version, None);
        let r = decide_range(&query(None, Some("2026-01-30")), today).expect("accepted");
        assert_eq!((r.from, r.to), (day("2026-01-01"), day("2026-01-30")));
        let r =
            decide_range(&query(Some("2026-11-26"), Some("2026-11-26")), today).expect("accepted");
        assert_eq!(r.from, r.to);
        let r = decide_range(
            &StatsQuery {
                mode: Some("test".into()),
                version: Some("3".into()),
                ..StatsQuery::default()
            },
            today,
        )
        .expect("accepted");
        assert_eq!((r.mode, r.version), (Mode::Test, Some(3)));
    }

    #[test]
    fn at_most_366_days_and_from_not_after_to() {
        let today = day("2026-11-26");
        assert!(decide_range(&query(Some("2025-11-26"), Some("2026-11-26")), today).is_ok());
        let too_long = decide_range(&query(Some("2025-11-25"), Some("2026-11-26")), today);
        assert_eq!(fields(too_long.expect_err("refused")), ["from"]);
        let reversed = decide_range(&query(Some("2026-11-27"), Some("2026-11-26")), today);
        assert_eq!(fields(reversed.expect_err("refused")), ["from"]);
        // A `to` long before today without a `from` is fine; the earliest date is not an overflow.
        assert!(decide_range(&query(None, Some("0001-01-01")), today).is_ok());
    }

    #[test]
    fn bad_dates_modes_and_versions_are_each_named() {
        let today = day("2026-11-26");
        for bad in [
            "2026-13-01",
            "2026-02-30",
            "26-11-01",
            "2026-1-01",
            "yesterday",
            "",
        ] {
            let e = decide_range(&query(Some(bad), None), today).expect_err("refused");
            assert_eq!(fields(e), ["from"], "{bad}");
        }
        let e = decide_range(
            &StatsQuery {
                from: Some("x".into()),
                to: Some("y".into()),
                mode: Some("LIVE".into()),
                version: Some("0".into()),
            },
            today,
        )
        .expect_err("refused");
        assert_eq!(fields(e), ["to", "from", "mode", "version"]);
        // 2147483648 fits a u32 but no flow version (MAX_FLOW_VERSION), found by the API fuzzing.
        for bad in ["", "-1", "+1", "1.0", "99999999999", "2147483648"] {
            let e = decide_range(
                &StatsQuery {
                    version: Some(bad.into()),
                    ..StatsQuery::default()
                },
                today,
            )
            .expect_err("refused");
            assert_eq!(fields(e), ["version"], "{bad}");
        }
    }

    #[test]
    fn completion_is_completed_over_published_or_none() {
        assert_eq!(completion_rate(0, 0), None);
        assert_eq!(completion_rate(0, 3), None);
        assert_eq!(completion_rate(4, 1), Some(0.25));
        assert_eq!(completion_rate(u64::MAX, u64::MAX), Some(1.0));
    }

    fn total(d: &str, v: u32, metric: &str, n: u64) -> Total {
        Total {
            day: day(d),
            flow_version: v,
            metric: metric.into(),
            n,
        }
    }

    #[test]
    fn totals_add_up_by_day_and_version_oldest_first() {
        let totals = vec![
            total("2026-11-25", 2, STARTED, 1),
            total("2026-11-24", 1, STARTED, 2),
            total("2026-11-24", 1, STARTED, 3),
            total("2026-11-24", 2, &event_metric("card-published"), 4),
            total("2026-11-24", 2, &event_metric("card-completed"), 1),
            total("2026-11-23", 1, STARTED, 0),
        ];
        let by_version = days(totals.clone(), true);
        let keys: Vec<(NaiveDate, Option<u32>)> =
            by_version.iter().map(|d| (d.date, d.version)).collect();
        assert_eq!(
            keys,
            [
                (day("2026-11-24"), Some(1)),
                (day("2026-11-24"), Some(2)),
                (day("2026-11-25"), Some(2))
            ]
        );
        assert_eq!(by_version[0].count(STARTED), 5);
        assert_eq!(by_version[0].completion_rate(), None);
        assert_eq!(by_version[1].completion_rate(), Some(0.25));
        let summed = days(totals, false);
        assert_eq!(summed.len(), 2);
        assert_eq!(summed[0].version, None);
        assert_eq!(summed[0].count(STARTED), 5);
        assert_eq!(summed[0].count(FAILED), 0);
    }

    #[test]
    fn a_folder_covers_its_subfolders() {
        let now = chrono::Utc::now();
        let folder = |id: &str, parent: Option<&str>| Folder {
            id: id.into(),
            name: id.into(),
            environment_id: "env".into(),
            organisation_id: "org".into(),
            parent_id: parent.map(Into::into),
            created: now,
            updated: now,
        };
        let folders = [
            folder("a", None),
            folder("b", Some("a")),
            folder("c", Some("b")),
            folder("d", None),
            folder("e", Some("d")),
        ];
        assert_eq!(subtree(&"a".into(), &folders), ["a", "b", "c"]);
        assert_eq!(subtree(&"c".into(), &folders), ["c"]);
        assert_eq!(subtree(&"d".into(), &folders), ["d", "e"]);
    }

    #[test]
    fn every_card_event_has_a_key() {
        assert_eq!(
            event_names(),
            [
                "card-published",
                "card-embargoed",
                "card-unsnoozed",
                "card-snoozed",
                "card-completed",
                "card-dismissed",
                "card-cancelled",
                "card-expired"
            ]
        );
    }
}
