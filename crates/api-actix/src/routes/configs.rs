//! A flow's configuration versions (spec 2.3, 4.2; contract §4): read one, save, discard and
//! approve the draft; the configuration record every publish and draft answers with.

use actix_web::web;
use domain::flow::{ShownStatus, VersionRef};
use domain::id::{EnvironmentId, FlowId};
use domain::{Flow, FlowVersion, Permission};
use serde::Serialize;
use serde_json::{Map, Value};
use utoipa::ToSchema;

use super::shape::{invalid, no_content, ok, Body, Call, Reply};
use super::timestamp;
use crate::problem::{ApiError, Problem};

/// A configuration version (spec 2.3).
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ConfigRecordDto {
    /// `DRAFT`, `PUBLISHED`, or `ARCHIVED` (every version of an archived flow).
    #[schema(example = "PUBLISHED")]
    pub status: &'static str,
    /// The configuration as stored, unknown fields included.
    #[schema(value_type = Object)]
    pub config: Value,
    #[schema(format = DateTime)]
    pub created: String,
    #[schema(format = DateTime)]
    pub updated: String,
    pub version: u32,
    pub flow_config_id: String,
    /// The key that saved this configuration.
    pub created_by: String,
    /// The key that approved this draft, if any.
    pub approved_by: Option<String>,
    #[schema(format = DateTime)]
    pub published: Option<String>,
    /// Only after a publish with `cancelActiveInstances` (contract §21): the cancel task of the
    /// older versions' active instances (`GET .../task/{cancelTaskId}/status`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cancel_task_id: Option<String>,
}

impl ConfigRecordDto {
    pub(super) fn new(flow: &Flow, version: FlowVersion) -> Self {
        ConfigRecordDto {
            status: match version.shown_status(flow) {
                ShownStatus::Draft => "DRAFT",
                ShownStatus::Published => "PUBLISHED",
                ShownStatus::Archived => "ARCHIVED",
            },
            created: timestamp(&version.created),
            updated: timestamp(&version.updated),
            published: version.published.as_ref().map(timestamp),
            version: version.version,
            flow_config_id: version.flow_id,
            created_by: version.created_by,
            approved_by: version.approved_by,
            config: version.config,
            cancel_task_id: None,
        }
    }
}

#[derive(Serialize, ToSchema)]
pub struct ConfigRecordResponse {
    pub data: ConfigRecordDto,
}

/// 200 with the configuration record of `version`, a version of `flow`.
fn record((flow, version): (Flow, FlowVersion)) -> Reply {
    ok(ConfigRecordResponse {
        data: ConfigRecordDto::new(&flow, version),
    })
}

/// The configuration in a publish or draft body: the body itself, or its `config` member
/// when the body is `{"config": {...}}`.
pub(super) fn config_of(object: Map<String, Value>) -> Value {
    match object.get("config") {
        Some(Value::Object(_)) if !object.contains_key("type") && !object.contains_key("steps") => {
            object
                .into_iter()
                .find(|(k, _)| k == "config")
                .map(|(_, v)| v)
                .unwrap_or(Value::Null)
        }
        _ => Value::Object(object),
    }
}

fn version_ref(raw: &str) -> Result<VersionRef, ApiError> {
    if raw == "latest" {
        return Ok(VersionRef::Latest);
    }
    match raw.parse::<u32>() {
        Ok(n) if n >= 1 => Ok(VersionRef::Number(n)),
        _ => Err(invalid(
            "flowConfigVersion",
            "must be a version number (1, 2, ...) or `latest`",
        )),
    }
}

/// Get a configuration version: a number, or `latest` (the newest of any status).
#[utoipa::path(
    get, path = "/v1/{environmentId}/action-flow/{flowConfigId}/config/{flowConfigVersion}",
        tag = "action-flows", operation_id = "getActionFlowConfig",
    params(
        ("environmentId" = String, Path, description = "Environment id"),
        ("flowConfigId" = String, Path, description = "Flow id"),
        ("flowConfigVersion" = crate::schemas::VersionRef, Path,
            description = "A version number (1 to 4294967295) or `latest`"),
    ),
    responses(
        (status = 200, description = "The configuration record", body = ConfigRecordResponse),
        (status = 400, description = "The version is neither a number nor `latest`",
            body = Problem, content_type = "application/problem+json"),
        (status = 404, response = crate::problem::NotFound),
    ),
    security(("bearer" = ["action_flows:read"]))
)]
pub async fn get_config(call: Call<(EnvironmentId, FlowId, String)>) -> Reply {
    call.authorize(Permission::ActionFlowsRead)?;
    let (env, id, version) = &call.path;
    let version = version_ref(version)?;
    let flows = &call.state.flows;
    record(flows.get_config(&call.caller, env, id, version).await?)
}

/// Save the draft (validated like a publish). Replacing a draft clears its approval.
#[utoipa::path(
    put, path = "/v1/{environmentId}/action-flow/{flowConfigId}/config/draft",
        tag = "action-flows", operation_id = "saveActionFlowDraft",
    params(("environmentId" = String, Path, description = "Environment id"),
        ("flowConfigId" = String, Path, description = "Flow id")),
    request_body(content = crate::schemas::FlowConfig,
        description = "The configuration (docs/flows.md), or an object whose `config` member is \
            the configuration"),
    responses(
        (status = 200, description = "The DRAFT version", body = ConfigRecordResponse),
        (status = 400, description = "`invalid_config`: every problem, with its path",
            body = Problem, content_type = "application/problem+json"),
        (status = 404, response = crate::problem::NotFound),
        (status = 409, description = "`flow_archived` or `concurrent_change`", body = Problem,
            content_type = "application/problem+json"),
    ),
    security(("bearer" = ["action_flows:write"]))
)]
pub async fn save_draft(call: Call<(EnvironmentId, FlowId)>, body: Body) -> Reply {
    let config = config_of(call.read(Permission::ActionFlowsWrite, &body)?);
    let (env, id) = &call.path;
    let flows = &call.state.flows;
    record(flows.save_draft(&call.caller, env, id, config).await?)
}

/// Discard the draft. Its version number is not given again.
#[utoipa::path(
    delete, path = "/v1/{environmentId}/action-flow/{flowConfigId}/config/draft",
        tag = "action-flows", operation_id = "discardActionFlowDraft",
    params(("environmentId" = String, Path, description = "Environment id"),
        ("flowConfigId" = String, Path, description = "Flow id")),
    responses(
        (status = 204, description = "Discarded"),
        (status = 404, response = crate::problem::NotFound),
    ),
    security(("bearer" = ["action_flows:write"]))
)]
pub async fn discard_draft(call: Call<(EnvironmentId, FlowId)>) -> Reply {
    let (env, id) = &call.path;
    let flows = &call.state.flows;
    flows.discard_draft(&call.caller, env, id).await?;
    no_content()
}

/// Approve the draft: by a credential other than the one that saved it.
#[utoipa::path(
    post, path = "/v1/{environmentId}/action-flow/{flowConfigId}/config/draft/approve",
        tag = "action-flows", operation_id = "approveActionFlowDraft",
    params(("environmentId" = String, Path, description = "Environment id"),
        ("flowConfigId" = String, Path, description = "Flow id")),
    responses(
        (status = 200, description = "The approved DRAFT version", body = ConfigRecordResponse),
        (status = 404, response = crate::problem::NotFound),
    ),
    security(("bearer" = ["action_flows:write"]))
)]
pub async fn approve_draft(call: Call<(EnvironmentId, FlowId)>) -> Reply {
    let (env, id) = &call.path;
    let flows = &call.state.flows;
    record(flows.approve_draft(&call.caller, env, id).await?)
}

/// The configuration routes, after the publish module's (`config/{version}` would match its
/// paths).
pub fn configure(cfg: &mut web::ServiceConfig) {
    const FLOW: &str = "/v1/{environmentId}/action-flow/{flowConfigId}";
    cfg.service(
        web::resource(format!("{FLOW}/config/draft"))
            .route(web::put().to(save_draft))
            .route(web::delete().to(discard_draft)),
    )
    .service(
        web::resource(format!("{FLOW}/config/draft/approve")).route(web::post().to(approve_draft)),
    )
    .service(
        web::resource(format!("{FLOW}/config/{{flowConfigVersion}}"))
            .route(web::get().to(get_config)),
    );
}
