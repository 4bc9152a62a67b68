//! `GET /v1/environments`: the environments the credential may use.

use actix_web::{web, HttpResponse};
use domain::Environment;
use serde::Serialize;
use utoipa::ToSchema;

use super::timestamp;
use crate::auth::Caller;
use crate::problem::ApiError;
use crate::AppState;

#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct EnvironmentDto {
    pub id: String,
    pub name: String,
    pub organisation_id: String,
    #[schema(format = DateTime)]
    pub created: String,
}

#[derive(Serialize, ToSchema)]
pub struct EnvironmentListResponse {
    pub data: Vec<EnvironmentDto>,
}

impl From<Environment> for EnvironmentDto {
    fn from(e: Environment) -> Self {
        EnvironmentDto {
            created: timestamp(&e.created),
            id: e.id.into(),
            name: e.name,
            organisation_id: e.organisation_id,
        }
    }
}

/// List the environments this credential may use.
#[utoipa::path(
    get, path = "/v1/environments", tag = "credentials", operation_id = "listEnvironments",
    responses(
        (status = 200, description = "The environments, oldest first",
            body = EnvironmentListResponse),
    ),
    security(("bearer" = []))
)]
pub async fn list(state: web::Data<AppState>, caller: Caller) -> Result<HttpResponse, ApiError> {
    let envs = state.auth.list_environments(&caller.0).await?;
    Ok(HttpResponse::Ok().json(EnvironmentListResponse {
        data: envs.into_iter().map(Into::into).collect(),
    }))
}

pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.service(web::resource("/v1/environments").route(web::get().to(list)));
}
