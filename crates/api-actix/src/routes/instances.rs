//! Flow instances of flows that wait or branch (contract §21): an invocation's counts by
//! instance state and by step, and one user's instance with each step it reached.

use std::collections::BTreeMap;

use domain::flow::steps::run::StepRecord;
use domain::flow::steps::StepState;
use domain::id::{EndUserId, EnvironmentId, FlowId, InvocationId};
use domain::trigger::instances::{FlowInstance, InstanceCounts, StepCounts};
use serde::Serialize;
use utoipa::ToSchema;

use super::shape::{ok, Call, Reply};
use super::timestamp;

/// What the instances did at one step.
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
#[schema(example = json!({"reached": 3, "waiting": 1, "done": 2,
    "outcomes": {"submitted": 1, "timeout": 1}}))]
pub struct StepCountsDto {
    /// Instances that reached the step.
    pub reached: u64,
    /// Instances waiting at it now.
    pub waiting: u64,
    /// Instances for which it is done.
    pub done: u64,
    /// The done ones by outcome (`created`, `elapsed`, `past`, `capped`, `submitted`,
    /// `dismissed`, `expired`, `cancelled`, `timeout`, `matched`, `otherwise`, `unmatched`).
    pub outcomes: BTreeMap<String, u64>,
}

impl From<StepCounts> for StepCountsDto {
    fn from(c: StepCounts) -> Self {
        StepCountsDto {
            reached: c.reached,
            waiting: c.waiting,
            done: c.done,
            outcomes: c.outcomes,
        }
    }
}

/// An invocation's instances by state (`active`, `completed`, `cancelled`, `failed`), and per
/// step id.
pub(crate) fn counts_of(
    counts: InstanceCounts,
) -> (BTreeMap<String, u64>, BTreeMap<String, StepCountsDto>) {
    (
        counts.instances,
        counts
            .steps
            .into_iter()
            .map(|(id, c)| (id, c.into()))
            .collect(),
    )
}

/// One step an instance reached.
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct InstanceStepDto {
    pub step_id: String,
    /// `waiting`, `done`, `cancelled` or `failed`.
    pub state: &'static str,
    /// Once done: how it ended.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub outcome: Option<&'static str>,
    #[schema(format = DateTime)]
    pub started: String,
    /// A waiting step's deadline, on the database's clock.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(format = DateTime)]
    pub deadline: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(format = DateTime)]
    pub finished: Option<String>,
    /// The card a `create-card` step made.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub card_instance_id: Option<String>,
    /// Why a failed step failed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

fn step_of(id: String, r: StepRecord) -> InstanceStepDto {
    let (outcome, deadline, error) = match &r.state {
        StepState::Done { outcome, .. } => (Some(outcome.as_str()), None, None),
        StepState::Waiting { deadline } => (None, Some(timestamp(deadline)), None),
        StepState::Failed { error } => (None, None, Some(error.to_string())),
        StepState::Pending | StepState::Running | StepState::Cancelled => (None, None, None),
    };
    InstanceStepDto {
        step_id: id,
        state: r.state.status().as_str(),
        outcome,
        started: timestamp(&r.started),
        deadline,
        finished: r.finished.as_ref().map(timestamp),
        card_instance_id: r.card,
        error,
    }
}

/// One user's flow instance.
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
#[schema(example = json!({"data": {
    "flowInstanceId": "fin_01jd3m5y6q8k9r2t4v6w8x0z1a", "flowInvocationId": "welcome-user-1",
    "endUserId": "user-1", "flowConfigVersion": 1, "state": "active",
    "steps": [
        {"stepId": "ask", "state": "done", "outcome": "created",
         "started": "2026-11-22T10:00:00.000Z", "finished": "2026-11-22T10:00:00.000Z",
         "cardInstanceId": "crd_01jd3m5y6q8k9r2t4v6w8x0z1b"},
        {"stepId": "listen", "state": "waiting", "started": "2026-11-22T10:00:00.000Z",
         "deadline": "2026-11-23T10:00:00.000Z"}
    ],
    "created": "2026-11-22T10:00:00.000Z", "updated": "2026-11-22T10:00:00.000Z"}}))]
pub struct InstanceDto {
    pub flow_instance_id: String,
    pub flow_invocation_id: String,
    pub end_user_id: String,
    /// The version it runs to its end.
    pub flow_config_version: u32,
    /// `active` (a step waits), `completed`, `cancelled` or `failed`.
    pub state: &'static str,
    /// Each step it reached, in the order it reached them.
    pub steps: Vec<InstanceStepDto>,
    #[schema(format = DateTime)]
    pub created: String,
    #[schema(format = DateTime)]
    pub updated: String,
}

impl From<FlowInstance> for InstanceDto {
    fn from(i: FlowInstance) -> Self {
        let mut steps: Vec<(String, StepRecord)> = i.records.into_iter().collect();
        steps.sort_by_key(|(_, r)| r.order);
        InstanceDto {
            flow_instance_id: i.id,
            flow_invocation_id: i.invocation_id,
            end_user_id: i.user_id,
            flow_config_version: i.flow_version,
            state: i.state.as_str(),
            steps: steps.into_iter().map(|(id, r)| step_of(id, r)).collect(),
            created: timestamp(&i.created),
            updated: timestamp(&i.updated),
        }
    }
}

#[derive(Serialize, ToSchema)]
pub struct InstanceResponse {
    pub data: InstanceDto,
}

/// One user's instance of a flow that waits or branches: its state, version, and each step it
/// reached (contract §21).
#[utoipa::path(
    get,
    path = "/v1/{environmentId}/action-flow/{flowConfigId}/invocations/{flowInvocationId}\
        /users/{endUserId}",
    tag = "triggers", operation_id = "getInvocationInstance",
    params(
        ("environmentId" = String, Path, description = "Environment id"),
        ("flowConfigId" = String, Path, description = "Flow id"),
        ("flowInvocationId" = String, Path, description = "The invocation id a trigger answered"),
        ("endUserId" = String, Path, description = "A user the invocation reached"),
    ),
    responses(
        (status = 200, description = "The instance and the steps it reached",
            body = InstanceResponse),
        (status = 404, response = crate::problem::NotFound),
    ),
    security(("bearer" = ["action_flows:read"]))
)]
pub async fn instance(call: Call<(EnvironmentId, FlowId, InvocationId, EndUserId)>) -> Reply {
    let (env, flow, id, user) = &call.path;
    let instances = &call.state.instances;
    let instance = instances.instance(&call.caller, env, flow, id, user);
    ok(InstanceResponse {
        data: instance.await?.into(),
    })
}
