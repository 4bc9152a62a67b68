//! Action Flows (spec 4.2: update metadata, list; contract §4: create, archive); their
//! configurations are `configs`', the settings `settings`'. Legacy role `events` or scopes
//! `action_flows:*`.

use actix_web::{web, HttpRequest};
use domain::flow::{CreateFlow, FlowFilter, FlowStatus, FolderFilter, UpdateFlow};
use domain::id::{EnvironmentId, FlowId};
use domain::{Flow, PageRequest, Permission};
use serde::Serialize;
use serde_json::{Map, Value};
use utoipa::ToSchema;

use super::query::{cursor, Query};
use super::shape::{created, invalid, ok, valid, Body, Call, Reply};
use super::timestamp;
use crate::body::Fields;
use crate::problem::{ApiError, Problem};
use crate::AppState;

/// The flow summary (spec 2.2), with where it is filed and its version counters.
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct FlowSummaryDto {
    /// The flow config id.
    #[schema(example = "flw_01jd3m5y6q8k9r2t4v6w8x0z1a")]
    pub id: String,
    pub name: String,
    pub description: String,
    /// `active` (published), `draft` (never published) or `archived`.
    #[schema(example = "active")]
    pub status: &'static str,
    #[schema(format = DateTime)]
    pub created: String,
    #[schema(format = DateTime)]
    pub updated: String,
    /// Variable definitions of the published configuration, else of the draft.
    #[schema(value_type = Object)]
    pub variables: Map<String, Value>,
    /// Absolute address of this flow's start endpoint.
    pub invocation_url: String,
    /// The folder the flow is filed in; null for Uncategorized.
    pub folder_id: Option<String>,
    /// The highest version number given so far (0 before the first).
    pub latest_version: u32,
    pub published_version: Option<u32>,
    pub draft_version: Option<u32>,
}

impl FlowSummaryDto {
    fn new(flow: Flow, public_url: &str) -> Self {
        FlowSummaryDto {
            status: flow.status().summary(),
            created: timestamp(&flow.created),
            updated: timestamp(&flow.updated),
            invocation_url: format!(
                "{public_url}/v1/{}/action-flow/{}/start",
                flow.environment_id, flow.id
            ),
            id: flow.id.into(),
            name: flow.name,
            description: flow.description,
            variables: flow.variables,
            folder_id: flow.folder_id,
            latest_version: flow.latest_version,
            published_version: flow.published_version,
            draft_version: flow.draft_version,
        }
    }
}

#[derive(Serialize, ToSchema)]
pub struct FlowSummaryResponse {
    pub data: FlowSummaryDto,
}

#[derive(Serialize, ToSchema)]
pub struct FlowListResponse {
    pub data: Vec<FlowSummaryDto>,
    /// Pass as `cursor` for the next page; null on the last page.
    pub next: Option<String>,
}

/// Body of a create request.
#[derive(ToSchema)]
#[allow(dead_code)] // documents the request; bodies are read field by field (crate::body)
#[schema(example = json!({"name": "Welcome", "description": "First card", "folderId": null}))]
pub struct CreateFlowRequest {
    /// 1–255 characters.
    name: String,
    description: Option<String>,
    /// A folder of this environment; null or omitted for Uncategorized.
    #[schema(rename = "folderId")]
    folder_id: Option<String>,
    /// A configuration (docs/flows.md): when given, version 1 is a draft holding it.
    #[schema(value_type = Option<crate::schemas::FlowConfig>)]
    config: Option<Value>,
}

/// Body of a metadata update.
#[derive(ToSchema)]
#[allow(dead_code)] // documents the request; bodies are read field by field (crate::body)
#[schema(example = json!({"actionFlow": {"name": "Welcome v2",
    "description": "The first card, reworded"}}))]
pub struct UpdateFlowRequest {
    /// Any of `name`, `description`, `folderId` (null un-files).
    #[schema(rename = "actionFlow", value_type = Object)]
    action_flow: Value,
}

impl FlowSummaryResponse {
    /// The answer showing `flow`, its start endpoint under the service's public URL.
    fn new(state: &AppState, flow: Flow) -> Self {
        FlowSummaryResponse {
            data: FlowSummaryDto::new(flow, &state.public_url),
        }
    }
}

/// 200 with the flow's summary.
fn summary(state: &AppState, flow: Flow) -> Reply {
    ok(FlowSummaryResponse::new(state, flow))
}

/// The list's query: every problem reported at once.
fn list_query(req: &HttpRequest) -> Result<(FlowFilter, PageRequest), ApiError> {
    let query = Query::parse(req)?;
    let mut errors = Vec::new();
    let status = query
        .get("status")
        .and_then(|s| match FlowStatus::parse(&s) {
            Some(status) => Some(status),
            None => {
                errors.push(domain::FieldError::new(
                    "status",
                    "must be DRAFT, PUBLISHED or ARCHIVED",
                ));
                None
            }
        });
    let uncategorized = query.flag("uncategorized", &mut errors) == Some(true);
    let folder = match (query.get("folderId"), uncategorized) {
        (Some(_), true) => {
            errors.push(domain::FieldError::new(
                "folderId",
                "cannot be combined with uncategorized=true",
            ));
            None
        }
        (Some(folder), false) if folder.chars().any(char::is_control) => {
            errors.push(domain::FieldError::new(
                "folderId",
                "must be an id: it has a control character",
            ));
            None
        }
        (Some(folder), false) => Some(FolderFilter::In(folder)),
        (None, true) => Some(FolderFilter::Uncategorized),
        (None, false) => None,
    };
    let page = query.page(&mut errors);
    valid(errors)?;
    Ok((
        FlowFilter {
            name_contains: query.get("name"),
            status,
            folder,
        },
        page,
    ))
}

/// List flows, newest first. Filters apply together.
#[utoipa::path(
    get, path = "/v1/{environmentId}/action-flow", tag = "action-flows",
        operation_id = "listActionFlows",
    params(
        ("environmentId" = String, Path, description = "Environment id"),
        ("name" = Option<String>, Query, description = "Case-insensitive part of the name"),
        ("status" = Option<String>, Query,
            description = "DRAFT (never published), PUBLISHED (published, not archived) or \
                ARCHIVED"),
        ("folderId" = Option<String>, Query, description = "Only flows filed in this folder"),
        ("uncategorized" = Option<bool>, Query, description = "true: only flows in no folder"),
        ("limit" = Option<u32>, Query, description = "1–500, default 50", minimum = 1,
            maximum = 500),
        ("cursor" = Option<String>, Query, description = "`next` of the previous page"),
    ),
    responses(
        (status = 200, description = "A page of flow summaries", body = FlowListResponse),
    ),
    security(("bearer" = ["action_flows:read"]))
)]
pub async fn list(call: Call<EnvironmentId>, req: HttpRequest) -> Reply {
    call.authorize(Permission::ActionFlowsRead)?;
    let (filter, page) = list_query(&req)?;
    let flows = &call.state.flows;
    let page = flows.list(&call.caller, &call.path, filter, page).await?;
    let public_url = &call.state.public_url;
    let summaries = page
        .items
        .into_iter()
        .map(|f| FlowSummaryDto::new(f, public_url));
    ok(FlowListResponse {
        data: summaries.collect(),
        next: cursor(page.next_after),
    })
}

/// Create a flow; with a `config`, its version 1 is a draft.
#[utoipa::path(
    post, path = "/v1/{environmentId}/action-flow", tag = "action-flows",
        operation_id = "createActionFlow",
    params(("environmentId" = String, Path, description = "Environment id")),
    request_body = CreateFlowRequest,
    responses(
        (status = 201, description = "The flow", body = FlowSummaryResponse,
            headers(("Location" = String, description = "Address of the flow"))),
        (status = 400,
            description = "`validation_failed` (name, description, folderId) or `invalid_config` \
                (with every configuration problem)", body = Problem,
                    content_type = "application/problem+json"),
    ),
    security(("bearer" = ["action_flows:write"]))
)]
pub async fn create(call: Call<EnvironmentId>, body: Body) -> Reply {
    let object = call.read(Permission::ActionFlowsWrite, &body)?;
    let mut fields = Fields::new(&object);
    let name = fields.string("name");
    let description = fields.nullable_string("description").flatten();
    let folder_id = fields.nullable_id("folderId").flatten();
    fields.finish()?;
    let config = object.get("config").filter(|c| !c.is_null()).cloned();
    let request = CreateFlow {
        name: name.unwrap_or_default(),
        description,
        folder_id,
        config,
    };
    let flows = &call.state.flows;
    let flow = flows.create(&call.caller, &call.path, request).await?;
    let location = format!("/v1/{}/action-flow/{}", flow.environment_id, flow.id);
    created(location, FlowSummaryResponse::new(&call.state, flow))
}

/// Get a flow's summary.
#[utoipa::path(
    get, path = "/v1/{environmentId}/action-flow/{flowConfigId}", tag = "action-flows",
        operation_id = "getActionFlow",
    params(("environmentId" = String, Path, description = "Environment id"),
        ("flowConfigId" = String, Path, description = "Flow id")),
    responses(
        (status = 200, description = "The flow summary", body = FlowSummaryResponse),
        (status = 404, response = crate::problem::NotFound),
    ),
    security(("bearer" = ["action_flows:read"]))
)]
pub async fn get(call: Call<(EnvironmentId, FlowId)>) -> Reply {
    let (env, id) = &call.path;
    summary(
        &call.state,
        call.state.flows.get(&call.caller, env, id).await?,
    )
}

/// Update a flow's name, description or folder.
#[utoipa::path(
    put, path = "/v1/{environmentId}/action-flow/{flowConfigId}", tag = "action-flows",
        operation_id = "updateActionFlow",
    params(("environmentId" = String, Path, description = "Environment id"),
        ("flowConfigId" = String, Path, description = "Flow id")),
    request_body = UpdateFlowRequest,
    responses(
        (status = 200, description = "The updated summary", body = FlowSummaryResponse),
        (status = 400,
            description = "Invalid name or description, or folderId not a folder of this \
                environment", body = Problem, content_type = "application/problem+json"),
        (status = 404, response = crate::problem::NotFound),
    ),
    security(("bearer" = ["action_flows:write"]))
)]
pub async fn update(call: Call<(EnvironmentId, FlowId)>, body: Body) -> Reply {
    let request = update_request(&call.read(Permission::ActionFlowsWrite, &body)?)?;
    let (env, id) = &call.path;
    let flows = &call.state.flows;
    let flow = flows.update(&call.caller, env, id, request).await?;
    summary(&call.state, flow)
}

/// The metadata update an update body asks for: every problem reported at once.
fn update_request(object: &Map<String, Value>) -> Result<UpdateFlow, ApiError> {
    let Some(Value::Object(inner)) = object.get("actionFlow") else {
        return Err(invalid("actionFlow", "is required and must be an object"));
    };
    let mut fields = Fields::new(inner);
    fields.prefix("actionFlow");
    let name = fields.nullable_string("name");
    let description = fields.nullable_string("description");
    let folder_id = fields.nullable_id("folderId");
    if name == Some(None) {
        fields.problem("name", "must be a string");
    }
    if !["name", "description", "folderId"]
        .iter()
        .any(|k| inner.contains_key(*k))
    {
        fields.problem("", "give at least one of name, description, folderId");
    }
    fields.finish()?;
    Ok(UpdateFlow {
        name: name.flatten(),
        description: description.map(Option::unwrap_or_default),
        folder_id: folder_id.map(|f| f.filter(|f| !f.is_empty())),
    })
}

/// Archive a flow: it no longer starts, its versions show ARCHIVED.
#[utoipa::path(
    post, path = "/v1/{environmentId}/action-flow/{flowConfigId}/archive", tag = "action-flows",
        operation_id = "archiveActionFlow",
    params(("environmentId" = String, Path, description = "Environment id"),
        ("flowConfigId" = String, Path, description = "Flow id")),
    responses(
        (status = 200, description = "The archived flow", body = FlowSummaryResponse),
        (status = 404, response = crate::problem::NotFound),
    ),
    security(("bearer" = ["action_flows:write"]))
)]
pub async fn archive(call: Call<(EnvironmentId, FlowId)>) -> Reply {
    set_archived(call, true).await
}

/// Archives the path's flow, or unarchives it.
async fn set_archived(call: Call<(EnvironmentId, FlowId)>, archived: bool) -> Reply {
    let (env, id) = &call.path;
    let flows = &call.state.flows;
    summary(
        &call.state,
        flows.set_archived(&call.caller, env, id, archived).await?,
    )
}

/// Unarchive a flow.
#[utoipa::path(
    post, path = "/v1/{environmentId}/action-flow/{flowConfigId}/unarchive", tag = "action-flows",
        operation_id = "unarchiveActionFlow",
    params(("environmentId" = String, Path, description = "Environment id"),
        ("flowConfigId" = String, Path, description = "Flow id")),
    responses(
        (status = 200, description = "The flow", body = FlowSummaryResponse),
        (status = 404, response = crate::problem::NotFound),
    ),
    security(("bearer" = ["action_flows:write"]))
)]
pub async fn unarchive(call: Call<(EnvironmentId, FlowId)>) -> Reply {
    set_archived(call, false).await
}

pub fn configure(cfg: &mut web::ServiceConfig) {
    const FLOW: &str = "/v1/{environmentId}/action-flow/{flowConfigId}";
    cfg.service(
        web::resource("/v1/{environmentId}/action-flow")
            .route(web::get().to(list))
            .route(web::post().to(create)),
    )
    .service(web::resource(format!("{FLOW}/archive")).route(web::post().to(archive)))
    .service(web::resource(format!("{FLOW}/unarchive")).route(web::post().to(unarchive)))
    .service(
        web::resource(FLOW)
            .route(web::get().to(get))
            .route(web::put().to(update)),
    );
}
