//! End users (contract §3): one at a time by the caller's own id, in batches, and listed with
//! filters, a page at a time.

use actix_web::HttpRequest;
use domain::audience::{EndUser, UserInput, UserQuery, MAX_BATCH_USERS};
use domain::id::{EndUserId, EnvironmentId};
use domain::{FieldError, PageRequest, Permission};
use serde::Serialize;
use serde_json::{Map, Value};
use utoipa::ToSchema;

use crate::problem::{ApiError, Problem};
use crate::routes::query::{paged, Query};
use crate::routes::shape::{invalid, no_content, ok, valid, Body, Call, Reply};
use crate::routes::timestamp;

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

/// The list's query: every problem reported at once.
fn user_list_query(
    req: &HttpRequest,
) -> Result<(UserQuery, Option<String>, PageRequest), ApiError> {
    let query = Query::parse(req)?;
    let mut errors = Vec::new();
    let test_user = query.flag("testUser", &mut errors);
    let page = query.page(&mut errors);
    valid(errors)?;
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
pub async fn put_user(call: Call<(EnvironmentId, EndUserId)>, body: Body) -> Reply {
    let object = call.read(Permission::UsersWrite, &body)?;
    let (env, id) = &call.path;
    let mut errors = Vec::new();
    let input = user_input(&object, id.as_str().to_owned(), "", &mut errors);
    valid(errors)?;
    let audience = &call.state.audience;
    let user = audience.put_user(&call.caller, env, input).await?;
    ok(EndUserResponse { data: user.into() })
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
pub async fn get_user(call: Call<(EnvironmentId, EndUserId)>) -> Reply {
    let (env, id) = &call.path;
    let user = call.state.audience.get_user(&call.caller, env, id).await?;
    ok(EndUserResponse { data: user.into() })
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
pub async fn delete_user(call: Call<(EnvironmentId, EndUserId)>) -> Reply {
    let (env, id) = &call.path;
    let audience = &call.state.audience;
    audience.delete_user(&call.caller, env, id).await?;
    no_content()
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
pub async fn list_users(call: Call<EnvironmentId>, req: HttpRequest) -> Reply {
    call.authorize(Permission::UsersRead)?;
    let (query, segment, page) = user_list_query(&req)?;
    let audience = &call.state.audience;
    let page = audience.list_users(&call.caller, &call.path, query, segment, page);
    let (data, next) = paged(page.await?);
    ok(EndUserListResponse { data, next })
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
pub async fn put_users(call: Call<EnvironmentId>, body: Body) -> Reply {
    let object = call.read(Permission::UsersWrite, &body)?;
    let inputs = batch_inputs(&object)?;
    let audience = &call.state.audience;
    let upserted = audience.put_users(&call.caller, &call.path, inputs);
    ok(BatchResponse {
        data: BatchResult {
            upserted: upserted.await?,
        },
    })
}

/// The users of a batch body, each as `users[i]`: every problem reported at once.
fn batch_inputs(object: &Map<String, Value>) -> Result<Vec<UserInput>, ApiError> {
    let Some(Value::Array(items)) = object.get("users") else {
        return Err(invalid(
            "users",
            format!("must be an array of 1 to {MAX_BATCH_USERS} users"),
        ));
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
    valid(errors)?;
    Ok(inputs)
}
