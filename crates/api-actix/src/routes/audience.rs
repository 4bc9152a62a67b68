//! The audience (contract §3): end users, segments, streams. Legacy roles `events` or
//! `workbench`, or scopes `users:read` / `users:write`.

use actix_web::http::header;
use actix_web::{web, HttpRequest, HttpResponse};
use domain::audience::{EndUser, Segment, Stream, UserInput, UserQuery, MAX_BATCH_USERS};
use domain::id::{EndUserId, EnvironmentId, SegmentId, StreamId};
use domain::{FieldError, PageRequest, Permission};
use serde::Serialize;
use serde_json::{Map, Value};
use utoipa::ToSchema;

use super::query::{cursor, Query};
use super::timestamp;
use crate::auth::Caller;
use crate::body::{json_object, Fields};
use crate::problem::{ApiError, Problem};
use crate::AppState;

/// Largest `users:batch` body: 10,000 users with room for their attributes.
pub const MAX_BATCH_BODY_BYTES: usize = 32 * 1024 * 1024;

#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct EndUserDto {
    /// The caller's own id for the user.
    pub id: String,
    pub test_user: bool,
    pub tags: Vec<String>,
    #[schema(value_type = Object)]
    pub attributes: Map<String, Value>,
    #[schema(format = DateTime)]
    pub created: String,
    #[schema(format = DateTime)]
    pub updated: String,
}

impl From<EndUser> for EndUserDto {
    fn from(u: EndUser) -> Self {
        EndUserDto {
            created: timestamp(&u.created),
            updated: timestamp(&u.updated),
            id: u.id.into(),
            test_user: u.test_user,
            tags: u.tags,
            attributes: u.attributes,
        }
    }
}

#[derive(Serialize, ToSchema)]
pub struct EndUserResponse {
    pub data: EndUserDto,
}

#[derive(Serialize, ToSchema)]
pub struct EndUserListResponse {
    pub data: Vec<EndUserDto>,
    /// Pass as `cursor` for the next page; null on the last page.
    pub next: Option<String>,
}

#[derive(Serialize, ToSchema)]
pub struct BatchResult {
    /// How many users were created or replaced.
    pub upserted: usize,
}

#[derive(Serialize, ToSchema)]
pub struct BatchResponse {
    pub data: BatchResult,
}

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

#[derive(Serialize, ToSchema)]
pub struct SegmentListResponse {
    pub data: Vec<SegmentDto>,
}

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

/// Reads a user's `testUser`, `tags`, `attributes` from `object`, reporting under `prefix`.
fn user_input(
    object: &Map<String, Value>,
    id: String,
    prefix: &str,
    errors: &mut Vec<FieldError>,
) -> UserInput {
    let at = |field: &str| {
        if prefix.is_empty() {
            field.to_owned()
        } else {
            format!("{prefix}.{field}")
        }
    };
    let test_user = match object.get("testUser") {
        None | Some(Value::Null) => false,
        Some(Value::Bool(b)) => *b,
        Some(_) => {
            errors.push(FieldError::new(at("testUser"), "must be true or false"));
            false
        }
    };
    let tags = match object.get("tags") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(items)) => items
            .iter()
            .enumerate()
            .filter_map(|(i, tag)| match tag {
                Value::String(s) => Some(s.clone()),
                _ => {
                    errors.push(FieldError::new(
                        format!("{}[{i}]", at("tags")),
                        "must be a string",
                    ));
                    None
                }
            })
            .collect(),
        Some(_) => {
            errors.push(FieldError::new(at("tags"), "must be an array of strings"));
            Vec::new()
        }
    };
    let attributes = match object.get("attributes") {
        None | Some(Value::Null) => Map::new(),
        Some(Value::Object(map)) => map.clone(),
        Some(_) => {
            errors.push(FieldError::new(at("attributes"), "must be an object"));
            Map::new()
        }
    };
    UserInput {
        id,
        test_user,
        tags,
        attributes,
    }
}

fn user_list_query(
    req: &HttpRequest,
) -> Result<(UserQuery, Option<String>, PageRequest), ApiError> {
    let query = Query::parse(req)?;
    let mut errors = Vec::new();
    let test_user = match query.get("testUser").as_deref() {
        None => None,
        Some("true") => Some(true),
        Some("false") => Some(false),
        Some(_) => {
            errors.push(FieldError::new("testUser", "must be true or false"));
            None
        }
    };
    let page = query.page(&mut errors);
    if !errors.is_empty() {
        return Err(ApiError::validation(errors));
    }
    Ok((
        UserQuery {
            tag: query.get("tag"),
            test_user,
        },
        query.get("segmentId"),
        page,
    ))
}

/// Create or replace an end user (the whole user: omitted fields take their defaults).
#[utoipa::path(
    put, path = "/v1/{environmentId}/users/{endUserId}", tag = "audience",
        operation_id = "putEndUser",
    params(("environmentId" = String, Path, description = "Environment id"), ("endUserId" = String,
        Path, description = "Your id for the user")),
    request_body = crate::schemas::PutUserRequest,
    responses(
        (status = 200, description = "The user as stored", body = EndUserResponse),
    ),
    security(("bearer" = ["users:write"]))
)]
pub async fn put_user(
    state: web::Data<AppState>,
    caller: Caller,
    path: web::Path<(EnvironmentId, EndUserId)>,
    req: HttpRequest,
    body: web::Bytes,
) -> Result<HttpResponse, ApiError> {
    let (env, id) = path.into_inner();
    caller.0.authorize(&env, Permission::UsersWrite)?;
    let object = json_object(&req, &body)?;
    let mut errors = Vec::new();
    let input = user_input(&object, id.into_string(), "", &mut errors);
    if !errors.is_empty() {
        return Err(ApiError::validation(errors));
    }
    let user = state.audience.put_user(&caller.0, &env, input).await?;
    Ok(HttpResponse::Ok().json(EndUserResponse { data: user.into() }))
}

/// Get an end user.
#[utoipa::path(
    get, path = "/v1/{environmentId}/users/{endUserId}", tag = "audience",
        operation_id = "getEndUser",
    params(("environmentId" = String, Path, description = "Environment id"), ("endUserId" = String,
        Path, description = "Your id for the user")),
    responses(
        (status = 200, description = "The user", body = EndUserResponse),
        (status = 404, response = crate::problem::NotFound),
    ),
    security(("bearer" = ["users:read"]))
)]
pub async fn get_user(
    state: web::Data<AppState>,
    caller: Caller,
    path: web::Path<(EnvironmentId, EndUserId)>,
) -> Result<HttpResponse, ApiError> {
    let (env, id) = path.into_inner();
    let user = state.audience.get_user(&caller.0, &env, &id).await?;
    Ok(HttpResponse::Ok().json(EndUserResponse { data: user.into() }))
}

/// Delete an end user and its tags.
#[utoipa::path(
    delete, path = "/v1/{environmentId}/users/{endUserId}", tag = "audience",
        operation_id = "deleteEndUser",
    params(("environmentId" = String, Path, description = "Environment id"), ("endUserId" = String,
        Path, description = "Your id for the user")),
    responses(
        (status = 204, description = "Deleted"),
        (status = 404, response = crate::problem::NotFound),
    ),
    security(("bearer" = ["users:write"]))
)]
pub async fn delete_user(
    state: web::Data<AppState>,
    caller: Caller,
    path: web::Path<(EnvironmentId, EndUserId)>,
) -> Result<HttpResponse, ApiError> {
    let (env, id) = path.into_inner();
    state.audience.delete_user(&caller.0, &env, &id).await?;
    Ok(HttpResponse::NoContent().finish())
}

/// List end users by id; filters apply together.
#[utoipa::path(
    get, path = "/v1/{environmentId}/users", tag = "audience", operation_id = "listEndUsers",
    params(
        ("environmentId" = String, Path, description = "Environment id"),
        ("tag" = Option<String>, Query, description = "Only users with this tag"),
        ("segmentId" = Option<String>, Query,
            description = "Only users the segment's filter matches"),
        ("testUser" = Option<bool>, Query, description = "Only test (true) or live (false) users"),
        ("limit" = Option<u32>, Query, description = "1–500, default 50", minimum = 1,
            maximum = 500),
        ("cursor" = Option<String>, Query, description = "`next` of the previous page"),
    ),
    responses(
        (status = 200, description = "A page of users", body = EndUserListResponse),
        (status = 400, description = "A query parameter is invalid, or segmentId is not a segment",
            body = Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = ["users:read"]))
)]
pub async fn list_users(
    state: web::Data<AppState>,
    caller: Caller,
    env: web::Path<EnvironmentId>,
    req: HttpRequest,
) -> Result<HttpResponse, ApiError> {
    caller.0.authorize(&env, Permission::UsersRead)?;
    let (query, segment, page) = user_list_query(&req)?;
    let page = state
        .audience
        .list_users(&caller.0, &env, query, segment, page)
        .await?;
    Ok(HttpResponse::Ok().json(EndUserListResponse {
        data: page.items.into_iter().map(Into::into).collect(),
        next: cursor(page.next_after),
    }))
}

/// Create or replace up to 10,000 users in one transaction (all or nothing).
#[utoipa::path(
    post, path = "/v1/{environmentId}/users:batch", tag = "audience", operation_id = "putEndUsers",
    params(("environmentId" = String, Path, description = "Environment id")),
    request_body = crate::schemas::BatchRequest,
    responses(
        (status = 200, description = "How many users were stored", body = BatchResponse),
        (status = 400, description = "Every invalid field, as `users[i].field`; nothing is stored",
            body = Problem, content_type = "application/problem+json"),
        (status = 413, description = "Body over 32 MiB", body = Problem,
            content_type = "application/problem+json"),
    ),
    security(("bearer" = ["users:write"]))
)]
pub async fn put_users(
    state: web::Data<AppState>,
    caller: Caller,
    env: web::Path<EnvironmentId>,
    req: HttpRequest,
    body: web::Bytes,
) -> Result<HttpResponse, ApiError> {
    caller.0.authorize(&env, Permission::UsersWrite)?;
    let object = json_object(&req, &body)?;
    let Some(Value::Array(items)) = object.get("users") else {
        return Err(ApiError::validation(vec![FieldError::new(
            "users",
            format!("must be an array of 1 to {MAX_BATCH_USERS} users"),
        )]));
    };
    let mut errors = Vec::new();
    let mut inputs = Vec::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        let prefix = format!("users[{i}]");
        let Some(object) = item.as_object() else {
            errors.push(FieldError::new(prefix, "must be an object"));
            continue;
        };
        let id = match object.get("id") {
            Some(Value::String(id)) => id.clone(),
            _ => {
                errors.push(FieldError::new(
                    format!("{prefix}.id"),
                    "is required and must be a string",
                ));
                String::new()
            }
        };
        inputs.push(user_input(object, id, &prefix, &mut errors));
    }
    if !errors.is_empty() {
        return Err(ApiError::validation(errors));
    }
    let upserted = state.audience.put_users(&caller.0, &env, inputs).await?;
    Ok(HttpResponse::Ok().json(BatchResponse {
        data: BatchResult { upserted },
    }))
}

fn segment_body(req: &HttpRequest, body: &[u8]) -> Result<(String, Value), ApiError> {
    let object = json_object(req, body)?;
    let mut fields = Fields::new(&object);
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
pub async fn create_segment(
    state: web::Data<AppState>,
    caller: Caller,
    env: web::Path<EnvironmentId>,
    req: HttpRequest,
    body: web::Bytes,
) -> Result<HttpResponse, ApiError> {
    caller.0.authorize(&env, Permission::UsersWrite)?;
    let (name, filter) = segment_body(&req, &body)?;
    let segment = state
        .audience
        .create_segment(&caller.0, &env, name, filter)
        .await?;
    let location = format!("/v1/{}/segments/{}", segment.environment_id, segment.id);
    Ok(HttpResponse::Created()
        .insert_header((header::LOCATION, location))
        .json(SegmentResponse {
            data: segment.into(),
        }))
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
pub async fn list_segments(
    state: web::Data<AppState>,
    caller: Caller,
    env: web::Path<EnvironmentId>,
) -> Result<HttpResponse, ApiError> {
    let segments = state.audience.list_segments(&caller.0, &env).await?;
    Ok(HttpResponse::Ok().json(SegmentListResponse {
        data: segments.into_iter().map(Into::into).collect(),
    }))
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
pub async fn get_segment(
    state: web::Data<AppState>,
    caller: Caller,
    path: web::Path<(EnvironmentId, SegmentId)>,
) -> Result<HttpResponse, ApiError> {
    let (env, id) = path.into_inner();
    let segment = state.audience.get_segment(&caller.0, &env, &id).await?;
    Ok(HttpResponse::Ok().json(SegmentResponse {
        data: segment.into(),
    }))
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
pub async fn update_segment(
    state: web::Data<AppState>,
    caller: Caller,
    path: web::Path<(EnvironmentId, SegmentId)>,
    req: HttpRequest,
    body: web::Bytes,
) -> Result<HttpResponse, ApiError> {
    let (env, id) = path.into_inner();
    caller.0.authorize(&env, Permission::UsersWrite)?;
    let (name, filter) = segment_body(&req, &body)?;
    let segment = state
        .audience
        .update_segment(&caller.0, &env, &id, name, filter)
        .await?;
    Ok(HttpResponse::Ok().json(SegmentResponse {
        data: segment.into(),
    }))
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
pub async fn delete_segment(
    state: web::Data<AppState>,
    caller: Caller,
    path: web::Path<(EnvironmentId, SegmentId)>,
) -> Result<HttpResponse, ApiError> {
    let (env, id) = path.into_inner();
    state.audience.delete_segment(&caller.0, &env, &id).await?;
    Ok(HttpResponse::NoContent().finish())
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
pub async fn list_streams(
    state: web::Data<AppState>,
    caller: Caller,
    env: web::Path<EnvironmentId>,
) -> Result<HttpResponse, ApiError> {
    let streams = state.audience.list_streams(&caller.0, &env).await?;
    Ok(HttpResponse::Ok().json(StreamListResponse {
        data: streams.into_iter().map(Into::into).collect(),
    }))
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
pub async fn create_stream(
    state: web::Data<AppState>,
    caller: Caller,
    env: web::Path<EnvironmentId>,
    req: HttpRequest,
    body: web::Bytes,
) -> Result<HttpResponse, ApiError> {
    caller.0.authorize(&env, Permission::UsersWrite)?;
    let object = json_object(&req, &body)?;
    let mut fields = Fields::new(&object);
    let name = fields.string("name");
    fields.finish()?;
    let stream = state
        .audience
        .create_stream(&caller.0, &env, name.unwrap_or_default())
        .await?;
    let location = format!("/v1/{}/streams/{}", stream.environment_id, stream.id);
    Ok(HttpResponse::Created()
        .insert_header((header::LOCATION, location))
        .json(StreamResponse {
            data: stream.into(),
        }))
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
pub async fn delete_stream(
    state: web::Data<AppState>,
    caller: Caller,
    path: web::Path<(EnvironmentId, StreamId)>,
) -> Result<HttpResponse, ApiError> {
    let (env, id) = path.into_inner();
    state.audience.delete_stream(&caller.0, &env, &id).await?;
    Ok(HttpResponse::NoContent().finish())
}

pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.service(web::resource("/v1/{environmentId}/users").route(web::get().to(list_users)))
        .service(
            web::resource("/v1/{environmentId}/users:batch")
                .app_data(web::PayloadConfig::new(MAX_BATCH_BODY_BYTES))
                .route(web::post().to(put_users)),
        )
        .service(
            web::resource("/v1/{environmentId}/users/{endUserId}")
                .route(web::put().to(put_user))
                .route(web::get().to(get_user))
                .route(web::delete().to(delete_user)),
        )
        .service(
            web::resource("/v1/{environmentId}/segments")
                .route(web::get().to(list_segments))
                .route(web::post().to(create_segment)),
        )
        .service(
            web::resource("/v1/{environmentId}/segments/{segmentId}")
                .route(web::get().to(get_segment))
                .route(web::put().to(update_segment))
                .route(web::delete().to(delete_segment)),
        )
        .service(
            web::resource("/v1/{environmentId}/streams")
                .route(web::get().to(list_streams))
                .route(web::post().to(create_stream)),
        )
        .service(
            web::resource("/v1/{environmentId}/streams/{streamId}")
                .route(web::delete().to(delete_stream)),
        );
}
