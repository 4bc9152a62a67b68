//! The Credentials API (contract §2): legacy `events`/`workbench` keys for one environment,
//! created and revoked by a key with the `auth` role or the `credentials:write` scope.

use actix_web::{web, HttpRequest, HttpResponse};
use domain::{Permission, Role};
use serde::Serialize;
use utoipa::ToSchema;

use crate::auth::Caller;
use crate::body::{json_object, Fields};
use crate::problem::{ApiError, Problem};
use crate::AppState;

#[derive(ToSchema)]
#[allow(dead_code)] // documents the request; bodies are read field by field (crate::body)
#[schema(example = json!({"role": "events"}))]
pub struct CreateCredentialRequest {
    /// `events` or `workbench`.
    role: String,
}

#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct CredentialDto {
    /// The key id, also the OAuth client id.
    pub client_id: String,
    /// The secret: shown once, stored only as a hash. Use it as `Authorization: Bearer`.
    pub client_secret: String,
}

#[derive(Serialize, ToSchema)]
pub struct CredentialResponse {
    pub data: CredentialDto,
}

/// Create a legacy key with one role for this environment.
#[utoipa::path(
    post, path = "/v1/{environmentId}/credentials", tag = "credentials", operation_id = "createCredential",
    params(("environmentId" = String, Path, description = "Environment id")),
    request_body = CreateCredentialRequest,
    responses(
        (status = 201, description = "The new key and its secret (shown once)", body = CredentialResponse),
        (status = 400, description = "Unknown role", body = Problem, content_type = "application/problem+json"),
        (status = 401, description = "No valid credential, or no access to the environment", body = Problem, content_type = "application/problem+json"),
        (status = 403, description = "Needs the `auth` role or `credentials:write`", body = Problem, content_type = "application/problem+json"),
        (status = 415, description = "Body is not application/json", body = Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = []))
)]
pub async fn create(
    state: web::Data<AppState>,
    caller: Caller,
    env: web::Path<String>,
    req: HttpRequest,
    body: web::Bytes,
) -> Result<HttpResponse, ApiError> {
    caller.0.authorize(&env, Permission::CredentialsWrite)?;
    let object = json_object(&req, &body)?;
    let mut fields = Fields::new(&object);
    let role = match fields.string("role").map(|r| r.parse::<Role>()) {
        Some(Ok(role)) => Some(role),
        Some(Err(_)) => {
            fields.problem("role", "must be `events` or `workbench`");
            None
        }
        None => None,
    };
    fields.finish()?;
    let role = role.ok_or_else(ApiError::internal)?;
    let issued = state.auth.create_credential(&caller.0, &env, role).await?;
    Ok(HttpResponse::Created().json(CredentialResponse {
        data: CredentialDto {
            client_id: issued.key.id,
            client_secret: issued.client_secret,
        },
    }))
}

/// Revoke a key (its access tokens die with it).
#[utoipa::path(
    delete, path = "/v1/{environmentId}/credentials/{clientId}", tag = "credentials", operation_id = "revokeCredential",
    params(("environmentId" = String, Path, description = "Environment id"), ("clientId" = String, Path, description = "Key id")),
    responses(
        (status = 204, description = "Revoked"),
        (status = 401, description = "No valid credential, or no access to the environment", body = Problem, content_type = "application/problem+json"),
        (status = 403, description = "Needs the `auth` role or `credentials:write`; or the key is granted environments beyond the caller's", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "No such key for this environment", body = Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = []))
)]
pub async fn revoke(
    state: web::Data<AppState>,
    caller: Caller,
    path: web::Path<(String, String)>,
) -> Result<HttpResponse, ApiError> {
    let (env, client_id) = path.into_inner();
    state
        .auth
        .revoke_credential(&caller.0, &env, &client_id)
        .await?;
    Ok(HttpResponse::NoContent().finish())
}

pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.service(web::resource("/v1/{environmentId}/credentials").route(web::post().to(create)))
        .service(
            web::resource("/v1/{environmentId}/credentials/{clientId}")
                .route(web::delete().to(revoke)),
        );
}
