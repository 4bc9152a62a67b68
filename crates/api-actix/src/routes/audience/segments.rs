//! Segments (contract §3): saved filters of end users, evaluated whenever they are used.

use domain::audience::Segment;
use domain::id::{EnvironmentId, SegmentId};
use domain::Permission;
use serde::Serialize;
use serde_json::{Map, Value};
use utoipa::ToSchema;

use crate::body::Fields;
use crate::problem::{ApiError, Problem};
use crate::routes::shape::{created, listed, no_content, ok, Body, Call, Reply};
use crate::routes::timestamp;

#[derive(Serialize, ToSchema)]
pub struct SegmentDto {
    pub id: String,
    pub name: String,
    /// The filter as sent (contract §3 shape).
    #[schema(value_type = Object)]
    pub filter: Value,
    #[schema(format = DateTime)]
    pub created: String,
    #[schema(format = DateTime)]
    pub updated: String,
}

impl From<Segment> for SegmentDto {
    fn from(s: Segment) -> Self {
        SegmentDto {
            created: timestamp(&s.created),
            updated: timestamp(&s.updated),
            id: s.id.into(),
            name: s.name,
            filter: s.filter.source,
        }
    }
}

#[derive(Serialize, ToSchema)]
pub struct SegmentResponse {
    pub data: SegmentDto,
}

impl From<Segment> for SegmentResponse {
    fn from(segment: Segment) -> Self {
        SegmentResponse {
            data: segment.into(),
        }
    }
}

#[derive(Serialize, ToSchema)]
pub struct SegmentListResponse {
    pub data: Vec<SegmentDto>,
}

/// The name and the filter of a segment's body.
fn segment_body(object: &Map<String, Value>) -> Result<(String, Value), ApiError> {
    let mut fields = Fields::new(object);
    let name = fields.string("name");
    if !object.contains_key("filter") {
        fields.problem("filter", "is required");
    }
    fields.finish()?;
    Ok((
        name.unwrap_or_default(),
        object.get("filter").cloned().unwrap_or(Value::Null),
    ))
}

/// Create a segment: a saved filter, evaluated whenever it is used.
#[utoipa::path(
    post, path = "/v1/{environmentId}/segments", tag = "audience", operation_id = "createSegment",
    params(("environmentId" = String, Path, description = "Environment id")),
    request_body = crate::schemas::SegmentRequest,
    responses(
        (status = 201, description = "The segment", body = SegmentResponse,
            headers(("Location" = String, description = "Address of the segment"))),
        (status = 400, description = "Every problem of the name and the filter", body = Problem,
            content_type = "application/problem+json"),
    ),
    security(("bearer" = ["users:write"]))
)]
pub async fn create_segment(call: Call<EnvironmentId>, body: Body) -> Reply {
    let (name, filter) = segment_body(&call.read(Permission::UsersWrite, &body)?)?;
    let audience = &call.state.audience;
    let segment = audience.create_segment(&call.caller, &call.path, name, filter);
    let segment = segment.await?;
    let location = format!("/v1/{}/segments/{}", segment.environment_id, segment.id);
    created(location, SegmentResponse::from(segment))
}

/// List the environment's segments, by name.
#[utoipa::path(
    get, path = "/v1/{environmentId}/segments", tag = "audience", operation_id = "listSegments",
    params(("environmentId" = String, Path, description = "Environment id")),
    responses(
        (status = 200, description = "Every segment", body = SegmentListResponse),
    ),
    security(("bearer" = ["users:read"]))
)]
pub async fn list_segments(call: Call<EnvironmentId>) -> Reply {
    let segments = call.state.audience.list_segments(&call.caller, &call.path);
    ok(SegmentListResponse {
        data: listed(segments.await?),
    })
}

/// Get a segment.
#[utoipa::path(
    get, path = "/v1/{environmentId}/segments/{segmentId}", tag = "audience",
        operation_id = "getSegment",
    params(("environmentId" = String, Path, description = "Environment id"), ("segmentId" = String,
        Path, description = "Segment id")),
    responses(
        (status = 200, description = "The segment", body = SegmentResponse),
        (status = 404, response = crate::problem::NotFound),
    ),
    security(("bearer" = ["users:read"]))
)]
pub async fn get_segment(call: Call<(EnvironmentId, SegmentId)>) -> Reply {
    let (env, id) = &call.path;
    let audience = &call.state.audience;
    let segment = audience.get_segment(&call.caller, env, id).await?;
    ok(SegmentResponse::from(segment))
}

/// Replace a segment's name and filter.
#[utoipa::path(
    put, path = "/v1/{environmentId}/segments/{segmentId}", tag = "audience",
        operation_id = "updateSegment",
    params(("environmentId" = String, Path, description = "Environment id"), ("segmentId" = String,
        Path, description = "Segment id")),
    request_body = crate::schemas::SegmentRequest,
    responses(
        (status = 200, description = "The segment", body = SegmentResponse),
        (status = 400, description = "Every problem of the name and the filter", body = Problem,
            content_type = "application/problem+json"),
        (status = 404, response = crate::problem::NotFound),
    ),
    security(("bearer" = ["users:write"]))
)]
pub async fn update_segment(call: Call<(EnvironmentId, SegmentId)>, body: Body) -> Reply {
    let (name, filter) = segment_body(&call.read(Permission::UsersWrite, &body)?)?;
    let (env, id) = &call.path;
    let audience = &call.state.audience;
    let segment = audience.update_segment(&call.caller, env, id, name, filter);
    ok(SegmentResponse::from(segment.await?))
}

/// Delete a segment.
#[utoipa::path(
    delete, path = "/v1/{environmentId}/segments/{segmentId}", tag = "audience",
        operation_id = "deleteSegment",
    params(("environmentId" = String, Path, description = "Environment id"), ("segmentId" = String,
        Path, description = "Segment id")),
    responses(
        (status = 204, description = "Deleted"),
        (status = 404, response = crate::problem::NotFound),
    ),
    security(("bearer" = ["users:write"]))
)]
pub async fn delete_segment(call: Call<(EnvironmentId, SegmentId)>) -> Reply {
    let (env, id) = &call.path;
    let audience = &call.state.audience;
    audience.delete_segment(&call.caller, env, id).await?;
    no_content()
}
