//! Statistics (contract §14): what a flow, or the flows of a folder, did day by day, from
//! daily totals that outlive the rows they count.

use std::collections::BTreeMap;

use actix_web::{web, HttpRequest};
use domain::id::{EnvironmentId, FlowId, FolderId};
use domain::stats::{
    event_names, DayTotals, Stats, StatsQuery, CANCELLED, CARDS_CREATED, COMPLETED, FAILED,
    STARTED, STEPS, WEBHOOKS_FAILED, WEBHOOKS_SUCCEEDED,
};
use domain::Permission;
use serde::Serialize;
use serde_json::{Map, Value};
use utoipa::ToSchema;

use super::query::Query;
use super::shape::{ok, Call, Reply};
use crate::problem::{ApiError, Problem};

/// Invocations of a day.
#[derive(Serialize, ToSchema)]
pub struct InvocationCounts {
    #[schema(example = 120)]
    pub started: u64,
    #[schema(example = 118)]
    pub completed: u64,
    #[schema(example = 1)]
    pub failed: u64,
    #[schema(example = 1)]
    pub cancelled: u64,
}

/// Webhook deliveries of a day, by their outcome.
#[derive(Serialize, ToSchema)]
pub struct WebhookCounts {
    #[schema(example = 230)]
    pub succeeded: u64,
    #[schema(example = 2)]
    pub failed: u64,
}

/// One day (UTC), of one flow version for a flow.
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct StatsDay {
    #[schema(format = Date, example = "2026-11-24")]
    pub date: String,
    /// The flow version; absent from a folder's days, which add every version up.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(example = 1)]
    pub version: Option<u32>,
    pub invocations: InvocationCounts,
    /// `created`, and one key per card event name, 0 when none.
    #[schema(value_type = Object, example = json!({"created": 118, "card-published": 118,
        "card-embargoed": 0, "card-unsnoozed": 3, "card-snoozed": 4, "card-completed": 71,
        "card-dismissed": 12, "card-cancelled": 0, "card-expired": 5}))]
    pub cards: Map<String, Value>,
    pub webhooks: WebhookCounts,
    /// `card-completed` ÷ `card-published`; null when nothing was published.
    #[schema(example = 0.6017)]
    pub completion_rate: Option<f64>,
    /// For a flow that waits or branches (contract §21): per step id, how many instances
    /// reached it that day, and how many it ended for by outcome. Absent when none did.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    #[schema(example = json!({"listen": {"reached": 118,
        "outcomes": {"submitted": 71, "timeout": 30}}}))]
    pub steps: BTreeMap<String, StepDay>,
}

/// What one step did on one day.
#[derive(Serialize, ToSchema, Default)]
pub struct StepDay {
    /// Instances that reached the step.
    pub reached: u64,
    /// Instances it ended for, by outcome.
    pub outcomes: BTreeMap<String, u64>,
}

/// The steps' counts of a day, from its `steps.<id>.reached` and `steps.<id>.outcome.<name>`
/// metrics.
fn steps_of(d: &DayTotals) -> BTreeMap<String, StepDay> {
    let mut steps: BTreeMap<String, StepDay> = BTreeMap::new();
    for (metric, n) in &d.counts {
        let Some(rest) = metric.strip_prefix(STEPS) else {
            continue;
        };
        if let Some(step) = rest.strip_suffix(".reached") {
            steps.entry(step.to_owned()).or_default().reached += n;
        } else if let Some((step, outcome)) = rest.rsplit_once(".outcome.") {
            *steps
                .entry(step.to_owned())
                .or_default()
                .outcomes
                .entry(outcome.to_owned())
                .or_insert(0) += n;
        }
    }
    steps
}

impl From<&DayTotals> for StatsDay {
    fn from(d: &DayTotals) -> Self {
        let mut cards = Map::new();
        cards.insert("created".into(), d.count(CARDS_CREATED).into());
        for name in event_names() {
            cards.insert(
                name.into(),
                d.count(&domain::stats::event_metric(name)).into(),
            );
        }
        StatsDay {
            date: d.date.format("%Y-%m-%d").to_string(),
            version: d.version,
            invocations: InvocationCounts {
                started: d.count(STARTED),
                completed: d.count(COMPLETED),
                failed: d.count(FAILED),
                cancelled: d.count(CANCELLED),
            },
            cards,
            webhooks: WebhookCounts {
                succeeded: d.count(WEBHOOKS_SUCCEEDED),
                failed: d.count(WEBHOOKS_FAILED),
            },
            completion_rate: d.completion_rate(),
            steps: steps_of(d),
        }
    }
}

/// The statistics of a range of days.
#[derive(Serialize, ToSchema)]
pub struct StatsDto {
    #[schema(format = Date, example = "2026-10-26")]
    pub from: String,
    #[schema(format = Date, example = "2026-11-24")]
    pub to: String,
    #[schema(example = "live")]
    pub mode: String,
    /// The days that have anything to count, oldest first.
    pub days: Vec<StatsDay>,
}

#[derive(Serialize, ToSchema)]
pub struct StatsResponse {
    pub data: StatsDto,
}

/// 200 with the statistics of a range of days.
fn render(stats: Stats) -> Reply {
    ok(StatsResponse {
        data: StatsDto {
            from: stats.from.format("%Y-%m-%d").to_string(),
            to: stats.to.format("%Y-%m-%d").to_string(),
            mode: stats.mode.as_str().to_owned(),
            days: stats.days.iter().map(StatsDay::from).collect(),
        },
    })
}

fn stats_query(req: &HttpRequest) -> Result<StatsQuery, ApiError> {
    let q = Query::parse(req)?;
    // An empty `to=` is no date: refused, not read as the default.
    Ok(StatsQuery {
        from: q.get_sent("from"),
        to: q.get_sent("to"),
        version: q.get_sent("version"),
        mode: q.get_sent("mode"),
    })
}

/// What an Action Flow did, per day (UTC) and version, from totals kept for ever.
#[utoipa::path(
    get, path = "/v1/{environmentId}/action-flow/{flowConfigId}/stats", tag = "action-flows",
        operation_id = "getFlowStats",
    params(
        ("environmentId" = String, Path, description = "Environment id"),
        ("flowConfigId" = String, Path, description = "Action Flow id"),
        ("from" = Option<String>, Query, pattern = r"^[0-9]{4}-[0-9]{2}-[0-9]{2}$",
            description = "First day, `YYYY-MM-DD` (default: 29 days before `to`)",
                example = "2026-10-26"),
        ("to" = Option<String>, Query, pattern = r"^[0-9]{4}-[0-9]{2}-[0-9]{2}$",
            description = "Last day, `YYYY-MM-DD` (default: today, UTC); at most 366 days after \
                `from`", example = "2026-11-24"),
        ("version" = Option<u32>, Query, minimum = 1, maximum = 2147483647,
            description = "One flow version only", example = 1),
        ("mode" = Option<String>, Query, description = "`live` (default) or `test`",
            example = "live"),
    ),
    responses(
        (status = 200,
            description = "One entry per day and version with anything to count, oldest first",
                body = StatsResponse),
        (status = 400,
            description = "A bad date, mode or version, `from` after `to`, or more than 366 days \
                (`validation_failed`)", body = Problem, content_type = "application/problem+json"),
        (status = 401, description = "No valid credential, or no access to the environment",
            body = Problem, content_type = "application/problem+json"),
        (status = 403, description = "The key lacks `action_flows:read` (or the role `events`)",
            body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "No such Action Flow in this environment", body = Problem,
            content_type = "application/problem+json"),
    ),
    security(("bearer" = []))
)]
pub async fn flow(call: Call<(EnvironmentId, FlowId)>, req: HttpRequest) -> Reply {
    call.authorize(Permission::ActionFlowsRead)?;
    let query = stats_query(&req)?;
    let (env, id) = &call.path;
    render(call.state.stats.flow(&call.caller, env, id, &query).await?)
}

/// What the Action Flows of a folder did, per day (UTC): the flows that were in the folder,
/// or one of its subfolders, when their instances started.
#[utoipa::path(
    get, path = "/v1/{environmentId}/workbench-folder/{folderId}/stats", tag = "folders",
        operation_id = "getFolderStats",
    params(
        ("environmentId" = String, Path, description = "Environment id"),
        ("folderId" = String, Path, description = "Folder id"),
        ("from" = Option<String>, Query, pattern = r"^[0-9]{4}-[0-9]{2}-[0-9]{2}$",
            description = "First day, `YYYY-MM-DD` (default: 29 days before `to`)",
                example = "2026-10-26"),
        ("to" = Option<String>, Query, pattern = r"^[0-9]{4}-[0-9]{2}-[0-9]{2}$",
            description = "Last day, `YYYY-MM-DD` (default: today, UTC); at most 366 days after \
                `from`", example = "2026-11-24"),
        ("mode" = Option<String>, Query, description = "`live` (default) or `test`",
            example = "live"),
    ),
    responses(
        (status = 200, description = "One entry per day with anything to count, oldest first",
            body = StatsResponse),
        (status = 400,
            description = "A bad date or mode, `from` after `to`, or more than 366 days \
                (`validation_failed`)", body = Problem, content_type = "application/problem+json"),
        (status = 401, description = "No valid credential, or no access to the environment",
            body = Problem, content_type = "application/problem+json"),
        (status = 403,
            description = "The key lacks `workbench_folders:read` or `action_flows:read`",
                body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "No such folder in this environment", body = Problem,
            content_type = "application/problem+json"),
    ),
    security(("bearer" = []))
)]
pub async fn folder(call: Call<(EnvironmentId, FolderId)>, req: HttpRequest) -> Reply {
    call.authorize(Permission::FoldersRead)?;
    call.authorize(Permission::ActionFlowsRead)?;
    let query = stats_query(&req)?;
    let (env, id) = &call.path;
    let stats = &call.state.stats;
    render(stats.folder(&call.caller, env, id, &query).await?)
}

pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.service(
        web::resource("/v1/{environmentId}/action-flow/{flowConfigId}/stats")
            .route(web::get().to(flow)),
    )
    .service(
        web::resource("/v1/{environmentId}/workbench-folder/{folderId}/stats")
            .route(web::get().to(folder)),
    );
}
