//! Publishing a flow's configuration, directly or from its draft, optionally cancelling the
//! active instances of its older versions (contract §21, `cancelActiveInstances`).

use actix_web::web;
use domain::id::{EnvironmentId, FlowId};
use domain::{Flow, FlowVersion, Permission};
use serde_json::{Map, Value};
use utoipa::ToSchema;

use super::configs::{config_of, ConfigRecordDto, ConfigRecordResponse};
use super::shape::{invalid, ok, Body, Call, Reply};
use crate::problem::{ApiError, Problem};

/// `cancelActiveInstances` taken out of a publish body: absent or `false` is false; any other
/// value than a boolean is a problem at its name.
fn cancel_active(body: &mut Map<String, Value>) -> Result<bool, ApiError> {
    match body.remove("cancelActiveInstances") {
        None | Some(Value::Null) | Some(Value::Bool(false)) => Ok(false),
        Some(Value::Bool(true)) => Ok(true),
        Some(_) => Err(invalid("cancelActiveInstances", "must be true or false")),
    }
}

/// 200 with the published version's record, and the cancel task's id when one was started.
fn answer(flow: &Flow, version: FlowVersion, task: Option<String>) -> Reply {
    let mut data = ConfigRecordDto::new(flow, version);
    data.cancel_task_id = task;
    ok(ConfigRecordResponse { data })
}

/// Publish a new version from the configuration in the body (or `{"config": ...}`). With
/// `"cancelActiveInstances": true` beside it, the active instances of older versions are
/// cancelled as by a cancel task, whose id the answer carries in `data.cancelTaskId`.
#[utoipa::path(
    post,
    path = "/v1/{environmentId}/action-flow/{flowConfigId}/config/publish",
    tag = "action-flows",
    operation_id = "publishActionFlowConfig",
    params(
        ("environmentId" = String, Path, description = "Environment id"),
        ("flowConfigId" = String, Path, description = "Flow id"),
    ),
    request_body(
        content = crate::schemas::FlowConfig,
        description = "The configuration (docs/flows.md), or an object whose `config` member is \
            the configuration, with an optional `cancelActiveInstances` boolean"
    ),
    responses(
        (status = 200, description = "The new PUBLISHED version; with \
            `cancelActiveInstances`, also `cancelTaskId`", body = ConfigRecordResponse),
        (status = 400, description = "`invalid_config`: every problem, with its path; \
            `validation_failed`: `cancelActiveInstances` not a boolean",
            body = Problem, content_type = "application/problem+json"),
        (status = 403, description = "`approvals_enabled`: publish an approved draft instead; \
            or `forbidden` (`cancelActiveInstances` needs `action_flows:trigger` too)",
            body = Problem, content_type = "application/problem+json"),
        (status = 404, response = crate::problem::NotFound),
        (status = 409, description = "`draft_exists`, `flow_archived` or `concurrent_change`",
            body = Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = ["action_flows:write"]))
)]
pub async fn publish(call: Call<(EnvironmentId, FlowId)>, body: Body) -> Reply {
    let mut body = call.read(Permission::ActionFlowsWrite, &body)?;
    let cancel = cancel_active(&mut body)?;
    let config = config_of(body);
    let ((env, id), flows) = (&call.path, &call.state.flows);
    if cancel {
        let published = flows.publish_cancelling(&call.caller, env, id, Some(config));
        let (flow, version, task) = published.await?;
        return answer(&flow, version, Some(task));
    }
    let (flow, version) = flows.publish(&call.caller, env, id, config).await?;
    answer(&flow, version, None)
}

/// Publish the draft (approved first when approvals are enabled). An optional JSON body
/// `{"cancelActiveInstances": true}` cancels the active instances of older versions as by a
/// cancel task, whose id the answer carries in `data.cancelTaskId`.
#[utoipa::path(
    post,
    path = "/v1/{environmentId}/action-flow/{flowConfigId}/config/draft/publish",
    tag = "action-flows",
    operation_id = "publishActionFlowDraft",
    params(
        ("environmentId" = String, Path, description = "Environment id"),
        ("flowConfigId" = String, Path, description = "Flow id"),
    ),
    request_body(content = PublishDraftRequest, description = "Optional"),
    responses(
        (status = 200, description = "The draft, now PUBLISHED; with `cancelActiveInstances`, \
            also `cancelTaskId`", body = ConfigRecordResponse),
        (status = 400, description = "`validation_failed`: `cancelActiveInstances` not a boolean",
            body = Problem, content_type = "application/problem+json"),
        (status = 403, description = "`approvals_enabled`: the draft is not approved; or \
            `forbidden` (`cancelActiveInstances` needs `action_flows:trigger` too)",
            body = Problem, content_type = "application/problem+json"),
        (status = 404, response = crate::problem::NotFound),
        (status = 409, description = "`flow_archived` or `concurrent_change`",
            body = Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = ["action_flows:write"]))
)]
pub async fn publish_draft(call: Call<(EnvironmentId, FlowId)>, body: Body) -> Reply {
    // The key first, then the body (docs/architecture.md, A request).
    call.authorize(Permission::ActionFlowsWrite)?;
    // No body, as before the option existed, publishes alone.
    let cancel = !body.is_blank() && cancel_active(&mut body.object()?)?;
    let ((env, id), flows) = (&call.path, &call.state.flows);
    if cancel {
        let published = flows.publish_cancelling(&call.caller, env, id, None);
        let (flow, version, task) = published.await?;
        return answer(&flow, version, Some(task));
    }
    let (flow, version) = flows.publish_draft(&call.caller, env, id).await?;
    answer(&flow, version, None)
}

/// The optional body of `POST .../config/draft/publish`.
#[derive(ToSchema)]
#[allow(dead_code)] // documents the request; the body is read by hand above
#[schema(example = json!({"cancelActiveInstances": true}))]
pub struct PublishDraftRequest {
    /// Cancel the active instances of the flow's older versions (contract §21).
    #[schema(rename = "cancelActiveInstances")]
    cancel_active_instances: Option<bool>,
}

/// The publish routes; registered before `configs`', whose `config/{version}` matches them too.
pub fn configure(cfg: &mut web::ServiceConfig) {
    const FLOW: &str = "/v1/{environmentId}/action-flow/{flowConfigId}";
    cfg.service(web::resource(format!("{FLOW}/config/publish")).route(web::post().to(publish)))
        .service(
            web::resource(format!("{FLOW}/config/draft/publish"))
                .route(web::post().to(publish_draft)),
        );
}
