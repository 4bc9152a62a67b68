//! The Credentials API (contract §2): legacy `events`/`workbench` keys for one environment,
//! created and revoked by a key with the `auth` role or the `credentials:write` scope.

use actix_web::{web, HttpRequest};
use domain::id::{EnvironmentId, KeyId};
use domain::{Permission, Role};
use serde::Serialize;
use utoipa::ToSchema;

use super::query::{page_only, paged};
use super::shape::{created, no_content, ok, Body, Call, Reply};
use crate::body::Fields;
use crate::problem::{ApiError, Problem};

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
    post, path = "/v1/{environmentId}/credentials", tag = "credentials",
        operation_id = "createCredential",
    params(("environmentId" = String, Path, description = "Environment id")),
    request_body = crate::schemas::CreateCredentialRequest,
    responses(
        (status = 201, description = "The new key and its secret (shown once)",
            body = CredentialResponse,
            headers(("Location" = String,
                description = "Address of the key (where it is revoked)"))),
        (status = 400, description = "Unknown role", body = Problem,
            content_type = "application/problem+json"),
        (status = 403,
            description = "The key lacks the scope `credentials:write` and the legacy role \
            `auth`, or a permission of the role asked for: a key creates no key that can do more \
            than itself (`forbidden`)",
            body = Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = ["credentials:write"]))
)]
pub async fn create(call: Call<EnvironmentId>, body: Body) -> Reply {
    let object = call.read(Permission::CredentialsWrite, &body)?;
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
    let (auth, env) = (&call.state.auth, &call.path);
    let issued = auth.create_credential(&call.caller, env, role).await?;
    let location = format!("/v1/{env}/credentials/{}", issued.key.id);
    let data = CredentialDto {
        client_id: issued.key.id.into(),
        client_secret: issued.client_secret,
    };
    created(location, CredentialResponse { data })
}

/// A key as the list shows it: never its secret nor its hash.
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct KeyDto {
    /// The key id, also the OAuth client id.
    pub client_id: String,
    /// The label an administrator gave it; null for keys of this API.
    pub name: Option<String>,
    /// Its legacy roles (`events`, `workbench`, `auth`); empty for a fine-grained key.
    pub roles: Vec<&'static str>,
    /// Its scopes; empty for a legacy key.
    pub scopes: Vec<&'static str>,
    /// True for a key of every environment of the organisation, present and future.
    pub all_environments: bool,
    /// The environments it was granted; empty when `allEnvironments`.
    pub environment_ids: Vec<String>,
    pub created: chrono::DateTime<chrono::Utc>,
    /// When it last authenticated, to the minute; null if never.
    pub last_used: Option<chrono::DateTime<chrono::Utc>>,
    /// When it was revoked; null while it works.
    pub revoked: Option<chrono::DateTime<chrono::Utc>>,
}

impl From<domain::KeySummary> for KeyDto {
    fn from(s: domain::KeySummary) -> Self {
        let (all_environments, environment_ids) = s.key.environments.listed();
        KeyDto {
            client_id: s.key.id.into(),
            name: s.key.name,
            roles: s.key.access.role_names(),
            scopes: s.key.access.scope_names(),
            all_environments,
            environment_ids,
            created: s.key.created,
            last_used: s.last_used,
            revoked: s.key.revoked,
        }
    }
}

#[derive(Serialize, ToSchema)]
pub struct KeyListResponse {
    pub data: Vec<KeyDto>,
    /// The cursor of the next page; absent on the last.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next: Option<String>,
}

/// The keys that may use this environment (granted it, or every environment), revoked ones
/// included, by client id.
#[utoipa::path(
    get, path = "/v1/{environmentId}/credentials", tag = "credentials",
        operation_id = "listCredentials",
    params(
        ("environmentId" = String, Path, description = "Environment id"),
        ("limit" = Option<u32>, Query, description = "1–500, default 50", minimum = 1,
            maximum = 500),
        ("cursor" = Option<String>, Query, description = "`next` of the previous page"),
    ),
    responses(
        (status = 200, description = "A page of keys (never a secret)", body = KeyListResponse),
    ),
    security(("bearer" = ["credentials:read"]))
)]
pub async fn list(call: Call<EnvironmentId>, req: HttpRequest) -> Reply {
    call.authorize(Permission::CredentialsRead)?;
    let page = page_only(&req)?;
    let page = call
        .state
        .auth
        .list_credentials(&call.caller, &call.path, page);
    let (data, next) = paged(page.await?);
    ok(KeyListResponse { data, next })
}

/// Revoke a key (its access tokens die with it).
#[utoipa::path(
    delete, path = "/v1/{environmentId}/credentials/{clientId}", tag = "credentials",
        operation_id = "revokeCredential",
    params(("environmentId" = String, Path, description = "Environment id"), ("clientId" = String,
        Path, description = "Key id")),
    responses(
        (status = 204, description = "Revoked"),
        (status = 404, response = crate::problem::NotFound),
    ),
    security(("bearer" = ["credentials:write"]))
)]
pub async fn revoke(call: Call<(EnvironmentId, KeyId)>) -> Reply {
    let (env, client_id) = &call.path;
    let auth = &call.state.auth;
    auth.revoke_credential(&call.caller, env, client_id).await?;
    no_content()
}

pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.service(
        web::resource("/v1/{environmentId}/credentials")
            .route(web::post().to(create))
            .route(web::get().to(list)),
    )
    .service(
        web::resource("/v1/{environmentId}/credentials/{clientId}").route(web::delete().to(revoke)),
    );
}
