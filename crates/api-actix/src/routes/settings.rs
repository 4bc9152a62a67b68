//! The environment's settings (contract §4): whether publishing needs an approved draft.

use actix_web::{web, HttpRequest, HttpResponse};
use domain::flow::EnvironmentSettings;
use domain::id::EnvironmentId;
use domain::Permission;
use serde::Serialize;
use utoipa::ToSchema;

use crate::auth::Caller;
use crate::body::{json_object, Fields};
use crate::problem::{ApiError, Problem};
use crate::AppState;

#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct SettingsDto {
    /// When on, configurations are published only as approved drafts.
    pub approvals_enabled: bool,
}

#[derive(Serialize, ToSchema)]
pub struct SettingsResponse {
    pub data: SettingsDto,
}

/// Body of a settings update.
#[derive(ToSchema)]
#[allow(dead_code)] // documents the request; bodies are read field by field (crate::body)
#[schema(example = json!({"approvalsEnabled": true}))]
pub struct SettingsRequest {
    #[schema(rename = "approvalsEnabled")]
    approvals_enabled: bool,
}

/// The environment's settings.
#[utoipa::path(
    get, path = "/v1/{environmentId}/settings", tag = "action-flows", operation_id = "getSettings",
    params(("environmentId" = String, Path, description = "Environment id")),
    responses(
        (status = 200, description = "The settings", body = SettingsResponse),
    ),
    security(("bearer" = ["action_flows:read"]))
)]
pub async fn get_settings(
    state: web::Data<AppState>,
    caller: Caller,
    env: web::Path<EnvironmentId>,
) -> Result<HttpResponse, ApiError> {
    let settings = state.flows.settings(&caller.0, &env).await?;
    Ok(HttpResponse::Ok().json(SettingsResponse {
        data: SettingsDto {
            approvals_enabled: settings.approvals_enabled,
        },
    }))
}

/// Change the environment's settings.
#[utoipa::path(
    put, path = "/v1/{environmentId}/settings", tag = "action-flows", operation_id = "putSettings",
    params(("environmentId" = String, Path, description = "Environment id")),
    request_body = SettingsRequest,
    responses(
        (status = 200, description = "The settings", body = SettingsResponse),
        (status = 400, description = "`approvalsEnabled` missing or not a boolean", body = Problem,
            content_type = "application/problem+json"),
    ),
    security(("bearer" = ["environment_settings:write"]))
)]
pub async fn put_settings(
    state: web::Data<AppState>,
    caller: Caller,
    env: web::Path<EnvironmentId>,
    req: HttpRequest,
    body: web::Bytes,
) -> Result<HttpResponse, ApiError> {
    caller
        .0
        .authorize(&env, Permission::EnvironmentSettingsWrite)?;
    let object = json_object(&req, &body)?;
    let mut fields = Fields::new(&object);
    let approvals = fields.boolean("approvalsEnabled");
    fields.finish()?;
    let settings = EnvironmentSettings {
        approvals_enabled: approvals.unwrap_or_default(),
    };
    let settings = state.flows.put_settings(&caller.0, &env, settings).await?;
    Ok(HttpResponse::Ok().json(SettingsResponse {
        data: SettingsDto {
            approvals_enabled: settings.approvals_enabled,
        },
    }))
}

/// The settings routes.
pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.service(
        web::resource("/v1/{environmentId}/settings")
            .route(web::get().to(get_settings))
            .route(web::put().to(put_settings)),
    );
}
