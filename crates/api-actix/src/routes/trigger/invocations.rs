//! Invocations (spec 4.3; contract §4): one invocation's progress, and a flow's invocations
//! listed with filters, a page at a time.

use std::collections::BTreeMap;

use actix_web::HttpRequest;
use domain::id::{EnvironmentId, FlowId, InvocationId};
use domain::trigger::views::InvocationView;
use domain::trigger::Mode;
use domain::trigger::{Invocation, InvocationFilter, InvocationStatus};
use domain::{PageRequest, Permission};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::problem::{ApiError, Problem};
use crate::routes::instances::{counts_of, StepCountsDto};
use crate::routes::query::{paged, Query};
use crate::routes::shape::{ok, valid, Call, Reply};
use crate::routes::timestamp;

#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct InvocationDto {
    pub flow_invocation_id: String,
    pub flow_config_id: String,
    pub flow_config_version: u32,
    /// `live` or `test`.
    pub mode: &'static str,
    /// `pending`, `running`, `completed`, `failed` or `cancelled`.
    pub status: &'static str,
    pub users_targeted: u64,
    pub cards_created: u64,
    pub errors: Vec<String>,
    #[schema(format = DateTime)]
    pub created: String,
    #[schema(format = DateTime)]
    pub updated: String,
    /// For a flow that waits or branches (contract §21): its instances by state (`active`,
    /// `completed`, `cancelled`, `failed`). The invocation stays `running` while one is
    /// `active`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub instances: Option<BTreeMap<String, u64>>,
    /// For a flow that waits or branches: per step id, the instances that reached it, wait at
    /// it, are done with it, and by outcome.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub steps: Option<BTreeMap<String, StepCountsDto>>,
}

impl From<InvocationView> for InvocationDto {
    fn from(view: InvocationView) -> Self {
        let status = view.status();
        let (instances, steps) = match view.instances.map(counts_of) {
            Some((instances, steps)) => (Some(instances), Some(steps)),
            None => (None, None),
        };
        InvocationDto {
            status: status.as_str(),
            instances,
            steps,
            ..view.invocation.into()
        }
    }
}

impl From<Invocation> for InvocationDto {
    fn from(i: Invocation) -> Self {
        InvocationDto {
            instances: None,
            steps: None,
            created: timestamp(&i.created),
            updated: timestamp(&i.updated),
            flow_invocation_id: i.id.into(),
            flow_config_id: i.flow_id,
            flow_config_version: i.flow_version,
            mode: i.mode.as_str(),
            status: i.status.as_str(),
            users_targeted: i.users_targeted,
            cards_created: i.cards_created,
            errors: i.errors,
        }
    }
}

#[derive(Serialize, ToSchema)]
pub struct InvocationResponse {
    pub data: InvocationDto,
}

/// A page of a flow's invocations, newest first.
#[derive(Serialize, ToSchema)]
#[schema(example = json!({
    "data": [{
        "flowInvocationId": "welcome-user-1",
        "flowConfigId": "flw_01jd3m5y6q8k9r2t4v6w8x0z1a",
        "flowConfigVersion": 1,
        "mode": "live",
        "status": "completed",
        "usersTargeted": 1,
        "cardsCreated": 1,
        "errors": [],
        "created": "2026-11-22T10:00:00.000Z",
        "updated": "2026-11-22T10:00:00.000Z"
    }],
    "next": "MjAyNi0xMS0yMlQxMDowMDowMC4wMDAwMDAwMDBafHdlbGNvbWUtdXNlci0x"
}))]
pub struct InvocationListResponse {
    /// Each in the shape of `GET .../invocations/{flowInvocationId}`.
    pub data: Vec<InvocationDto>,
    /// Pass as `cursor` for the next page; null on the last page.
    pub next: Option<String>,
}

/// An invocation's progress.
#[utoipa::path(
    get, path = "/v1/{environmentId}/action-flow/{flowConfigId}/invocations/{flowInvocationId}",
        tag = "triggers", operation_id = "getInvocation",
    params(
        ("environmentId" = String, Path, description = "Environment id"),
        ("flowConfigId" = String, Path, description = "Flow id"),
        ("flowInvocationId" = String, Path, description = "The invocation id a trigger answered"),
    ),
    responses(
        (status = 200, description = "Status, users targeted, cards created, errors",
            body = InvocationResponse),
        (status = 404, response = crate::problem::NotFound),
    ),
    security(("bearer" = ["action_flows:read"]))
)]
pub async fn invocation(call: Call<(EnvironmentId, FlowId, InvocationId)>) -> Reply {
    let (env, flow, id) = &call.path;
    let invocation = call.state.instances.invocation(&call.caller, env, flow, id);
    ok(InvocationResponse {
        data: invocation.await?.into(),
    })
}

/// `status` of the invocation list: where the invocations listed are.
#[derive(Clone, Copy, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum InvocationStatusParam {
    Pending,
    Running,
    Completed,
    Failed,
    Cancelled,
}

impl From<InvocationStatusParam> for InvocationStatus {
    fn from(s: InvocationStatusParam) -> Self {
        match s {
            InvocationStatusParam::Pending => InvocationStatus::Pending,
            InvocationStatusParam::Running => InvocationStatus::Running,
            InvocationStatusParam::Completed => InvocationStatus::Completed,
            InvocationStatusParam::Failed => InvocationStatus::Failed,
            InvocationStatusParam::Cancelled => InvocationStatus::Cancelled,
        }
    }
}

/// `mode` of the invocation list: live (`/start`) or test (`/test`) invocations.
#[derive(Clone, Copy, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum ModeParam {
    Live,
    Test,
}

impl From<ModeParam> for Mode {
    fn from(m: ModeParam) -> Self {
        match m {
            ModeParam::Live => Mode::Live,
            ModeParam::Test => Mode::Test,
        }
    }
}

/// The list's query: every problem reported at once.
fn invocation_query(req: &HttpRequest) -> Result<(InvocationFilter, PageRequest), ApiError> {
    let query = Query::parse(req)?;
    let mut errors = Vec::new();
    let filter = InvocationFilter {
        status: query.choice::<InvocationStatusParam, _>(
            "status",
            "must be pending, running, completed, failed or cancelled",
            &mut errors,
        ),
        mode: query.choice::<ModeParam, _>("mode", "must be live or test", &mut errors),
    };
    let page = query.page(&mut errors);
    valid(errors)?;
    Ok((filter, page))
}

/// A flow's invocations, newest first, each as `GET .../invocations/{flowInvocationId}` answers
/// it. Filters apply together.
#[utoipa::path(
    get, path = "/v1/{environmentId}/action-flow/{flowConfigId}/invocations", tag = "triggers",
        operation_id = "listInvocations",
    params(
        ("environmentId" = String, Path, description = "Environment id"),
        ("flowConfigId" = String, Path, description = "Flow id"),
        ("status" = inline(Option<InvocationStatusParam>), Query,
            description = "Only invocations in this status (any letter case)"),
        ("mode" = inline(Option<ModeParam>), Query,
            description = "Only live (`/start`) or test (`/test`) invocations (any letter case)"),
        ("limit" = Option<u32>, Query, description = "1–500, default 50", minimum = 1,
            maximum = 500),
        ("cursor" = Option<String>, Query, description = "`next` of the previous page"),
    ),
    responses(
        (status = 200, description = "A page of invocations, newest first",
            body = InvocationListResponse),
        (status = 400,
            description = "A query parameter is invalid (`status`, `mode`, `limit`, `cursor`), \
                each reported", body = Problem, content_type = "application/problem+json"),
        (status = 403, description = "Needs role `events` or `action_flows:read`", body = Problem,
            content_type = "application/problem+json"),
        (status = 404, description = "No such flow in this environment", body = Problem,
            content_type = "application/problem+json"),
    ),
    security(("bearer" = []))
)]
pub async fn invocations(call: Call<(EnvironmentId, FlowId)>, req: HttpRequest) -> Reply {
    // The key before the query (contract §16): 401 and 403 come before 400.
    call.authorize(Permission::ActionFlowsRead)?;
    let (filter, page) = invocation_query(&req)?;
    let (env, flow) = &call.path;
    let triggers = &call.state.triggers;
    let page = triggers.invocations(&call.caller, env, flow, filter, page);
    let (data, next) = paged(page.await?);
    ok(InvocationListResponse { data, next })
}
