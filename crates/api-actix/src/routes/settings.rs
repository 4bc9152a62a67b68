//! The environment's settings (contract §4): whether publishing needs an approved draft.

use actix_web::web;
use domain::flow::EnvironmentSettings;
use domain::id::EnvironmentId;
use domain::Permission;
use serde::Serialize;
use utoipa::ToSchema;

use super::shape::{ok, Body, Call, Reply};
use crate::body::Fields;
use crate::problem::Problem;

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

impl From<EnvironmentSettings> for SettingsResponse {
    fn from(settings: EnvironmentSettings) -> Self {
        SettingsResponse {
            data: SettingsDto {
                approvals_enabled: settings.approvals_enabled,
            },
        }
    }
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
pub async fn get_settings(call: Call<EnvironmentId>) -> Reply {
    let settings = call.state.flows.settings(&call.caller, &call.path).await?;
    ok(SettingsResponse::from(settings))
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
pub async fn put_settings(call: Call<EnvironmentId>, body: Body) -> Reply {
    let object = call.read(Permission::EnvironmentSettingsWrite, &body)?;
    let mut fields = Fields::new(&object);
    let approvals = fields.boolean("approvalsEnabled");
    fields.finish()?;
    let settings = EnvironmentSettings {
        approvals_enabled: approvals.unwrap_or_default(),
    };
    let settings = call
        .state
        .flows
        .put_settings(&call.caller, &call.path, settings);
    ok(SettingsResponse::from(settings.await?))
}

/// The settings routes.
pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.service(
        web::resource("/v1/{environmentId}/settings")
            .route(web::get().to(get_settings))
            .route(web::put().to(put_settings)),
    );
}
