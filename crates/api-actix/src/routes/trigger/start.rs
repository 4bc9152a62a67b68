//! Triggering flows (spec 4.2 test/start): a published flow for real users, or a flow's draft
//! for test users.

use domain::id::{EnvironmentId, FlowId};
use domain::trigger::Mode;
use domain::Permission;
use serde::Serialize;
use serde_json::Value;
use utoipa::ToSchema;

use crate::problem::Problem;
use crate::routes::shape::{ok, Body, Call, Reply};

#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct TriggeredFlow {
    pub flow_invocation_id: String,
}

#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct TriggeredFlows {
    pub triggered_flows: Vec<TriggeredFlow>,
}

#[derive(Serialize, ToSchema)]
pub struct TriggerResponse {
    pub data: TriggeredFlows,
}

impl TriggerResponse {
    /// The answer naming the invocations a trigger started (or replayed).
    fn of(ids: Vec<String>) -> Self {
        let triggered_flows = ids
            .into_iter()
            .map(|flow_invocation_id| TriggeredFlow { flow_invocation_id })
            .collect();
        TriggerResponse {
            data: TriggeredFlows { triggered_flows },
        }
    }
}

/// `/start` and `/test`: the same request, in one mode or the other.
async fn trigger(call: Call<(EnvironmentId, FlowId)>, body: Body, mode: Mode) -> Reply {
    let body = Value::Object(call.read(Permission::ActionFlowsTrigger, &body)?);
    let (env, flow) = &call.path;
    let triggers = &call.state.triggers;
    let ids = triggers.trigger_body(&call.caller, env, flow, mode, &body);
    ok(TriggerResponse::of(ids.await?))
}

const TRIGGER_400: &str = "Every invalid field of the request (`validation_failed`), paths like \
        `flows[0].payload.cardOptions.priority`";

/// Start a published flow for users, a segment, a tag, all test users or a filter.
#[utoipa::path(
    post, path = "/v1/{environmentId}/action-flow/{flowConfigId}/start", tag = "triggers",
        operation_id = "startActionFlow",
    params(("environmentId" = String, Path, description = "Environment id"),
        ("flowConfigId" = String, Path, description = "Flow id")),
    request_body = crate::schemas::TriggerRequestBody,
    responses(
        (status = 200, description = "Accepted durably (also for a replay of the same invocation)",
            body = TriggerResponse),
        (status = 400, description = TRIGGER_400, body = Problem,
            content_type = "application/problem+json"),
        (status = 404, response = crate::problem::NotFound),
        (status = 409,
            description = "`invocation_conflict` (an id reused with another target or payload) or \
                `flow_archived`", body = Problem, content_type = "application/problem+json"),
        (status = 422,
            description = "`invocation_mismatch`: an id reused with another flow or mode",
                body = Problem, content_type = "application/problem+json"),
        (status = 429,
            description = "`rate_limited`: five bulk-target tasks already run (see Retry-After)",
                body = Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = ["action_flows:trigger"]))
)]
pub async fn start(call: Call<(EnvironmentId, FlowId)>, body: Body) -> Reply {
    trigger(call, body, Mode::Live).await
}

/// Send a flow (its draft when it has one) to test users only; others are ignored silently.
#[utoipa::path(
    post, path = "/v1/{environmentId}/action-flow/{flowConfigId}/test", tag = "triggers",
        operation_id = "testActionFlow",
    params(("environmentId" = String, Path, description = "Environment id"),
        ("flowConfigId" = String, Path, description = "Flow id")),
    request_body = crate::schemas::TriggerRequestBody,
    responses(
        (status = 200, description = "Accepted durably (also for a replay of the same invocation)",
            body = TriggerResponse),
        (status = 400, description = TRIGGER_400, body = Problem,
            content_type = "application/problem+json"),
        (status = 404, response = crate::problem::NotFound),
        (status = 409,
            description = "`invocation_conflict`: an id reused with another target or payload",
                body = Problem, content_type = "application/problem+json"),
        (status = 422,
            description = "`invocation_mismatch`: an id reused with another flow or mode",
                body = Problem, content_type = "application/problem+json"),
        (status = 429,
            description = "`rate_limited`: five bulk-target tasks already run (see Retry-After)",
                body = Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = ["action_flows:trigger"]))
)]
pub async fn test(call: Call<(EnvironmentId, FlowId)>, body: Body) -> Reply {
    trigger(call, body, Mode::Test).await
}
