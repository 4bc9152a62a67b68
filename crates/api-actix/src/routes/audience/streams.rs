//! Streams (contract §3): the named feeds cards are filed in; `All cards` holds every card.

use domain::audience::Stream;
use domain::id::{EnvironmentId, StreamId};
use domain::Permission;
use serde::Serialize;
use utoipa::ToSchema;

use crate::body::Fields;
use crate::problem::Problem;
use crate::routes::shape::{created, listed, no_content, ok, Body, Call, Reply};
use crate::routes::timestamp;

#[derive(Serialize, ToSchema)]
pub struct StreamDto {
    pub id: String,
    pub name: String,
    /// True for `All cards`, which every card is in and which cannot be deleted.
    pub default: bool,
    #[schema(format = DateTime)]
    pub created: String,
}

impl From<Stream> for StreamDto {
    fn from(s: Stream) -> Self {
        StreamDto {
            created: timestamp(&s.created),
            id: s.id.into(),
            name: s.name,
            default: s.is_default,
        }
    }
}

#[derive(Serialize, ToSchema)]
pub struct StreamResponse {
    pub data: StreamDto,
}

#[derive(Serialize, ToSchema)]
pub struct StreamListResponse {
    pub data: Vec<StreamDto>,
}

/// List the environment's streams, `All cards` first.
#[utoipa::path(
    get, path = "/v1/{environmentId}/streams", tag = "audience", operation_id = "listStreams",
    params(("environmentId" = String, Path, description = "Environment id")),
    responses(
        (status = 200, description = "Every stream", body = StreamListResponse),
    ),
    security(("bearer" = ["users:read"]))
)]
pub async fn list_streams(call: Call<EnvironmentId>) -> Reply {
    let streams = call.state.audience.list_streams(&call.caller, &call.path);
    ok(StreamListResponse {
        data: listed(streams.await?),
    })
}

/// Create a stream.
#[utoipa::path(
    post, path = "/v1/{environmentId}/streams", tag = "audience", operation_id = "createStream",
    params(("environmentId" = String, Path, description = "Environment id")),
    request_body = crate::schemas::StreamRequest,
    responses(
        (status = 201, description = "The stream", body = StreamResponse,
            headers(("Location" = String, description = "Address of the stream"))),
        (status = 400, description = "Invalid name", body = Problem,
            content_type = "application/problem+json"),
        (status = 409, description = "A stream has this name (`stream_name_taken`)",
            body = Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = ["users:write"]))
)]
pub async fn create_stream(call: Call<EnvironmentId>, body: Body) -> Reply {
    let object = call.read(Permission::UsersWrite, &body)?;
    let mut fields = Fields::new(&object);
    let name = fields.string("name").unwrap_or_default();
    fields.finish()?;
    let audience = &call.state.audience;
    let stream = audience.create_stream(&call.caller, &call.path, name);
    let stream = stream.await?;
    let location = format!("/v1/{}/streams/{}", stream.environment_id, stream.id);
    let data = stream.into();
    created(location, StreamResponse { data })
}

/// Delete a stream (not `All cards`).
#[utoipa::path(
    delete, path = "/v1/{environmentId}/streams/{streamId}", tag = "audience",
        operation_id = "deleteStream",
    params(("environmentId" = String, Path, description = "Environment id"), ("streamId" = String,
        Path, description = "Stream id")),
    responses(
        (status = 204, description = "Deleted"),
        (status = 404, response = crate::problem::NotFound),
        (status = 409, description = "`All cards` cannot be deleted (`default_stream`)",
            body = Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = ["users:write"]))
)]
pub async fn delete_stream(call: Call<(EnvironmentId, StreamId)>) -> Reply {
    let (env, id) = &call.path;
    let audience = &call.state.audience;
    audience.delete_stream(&call.caller, env, id).await?;
    no_content()
}
