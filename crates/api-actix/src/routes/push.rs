//! Push notification platforms (spec 2.10, 4.5; contract §8). Role `workbench`, or the
//! `notification_platforms:*` scopes. Credentials are never returned.

use domain::id::{CardId, EndUserId, EnvironmentId};
use std::collections::BTreeMap;

use actix_web::{web, HttpRequest, HttpResponse};
use domain::push::PushPlatform;
use serde::Serialize;
use serde_json::Value;
use utoipa::ToSchema;

use super::timestamp;
use crate::auth::Caller;
use crate::body::json_object;
use crate::problem::{ApiError, Problem};
use crate::AppState;

const UNAUTHORIZED: &str = "No valid credential, or no access to the environment";
const FORBIDDEN: &str =
    "Needs role `workbench` (or the `notification_platforms:read` / `:write` scope)";

#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct PlatformAttributes {
    /// As sent: `GCM`, `FCM`, `APNS` or `APNS_SANDBOX`.
    pub platform: String,
    pub app_id: String,
    pub arn: String,
    #[schema(format = DateTime)]
    pub created: String,
    pub enabled: bool,
    /// String values: `Enabled` ("true"/"false"), `AppleCertificateExpirationDate` for
    /// certificate iOS platforms, and derived facts (BundleId, ProjectId, ClientEmail, KeyId,
    /// CertificateFingerprint, ...). Never a credential.
    pub attributes: BTreeMap<String, String>,
}

/// A platform record (spec 2.10).
#[derive(Serialize, ToSchema)]
pub struct PlatformDto {
    pub id: String,
    /// `push-notification-platform`.
    #[serde(rename = "type")]
    pub kind: String,
    pub attributes: PlatformAttributes,
}

impl From<PushPlatform> for PlatformDto {
    fn from(p: PushPlatform) -> Self {
        PlatformDto {
            kind: "push-notification-platform".into(),
            attributes: PlatformAttributes {
                attributes: p.attributes(),
                platform: p.platform,
                app_id: p.app_id,
                arn: p.arn,
                created: timestamp(&p.created),
                enabled: p.enabled,
            },
            id: p.id.into(),
        }
    }
}

#[derive(Serialize, ToSchema)]
pub struct PlatformListResponse {
    pub data: Vec<PlatformDto>,
}

#[derive(Serialize, ToSchema)]
pub struct PlatformResponse {
    pub data: PlatformDto,
}

#[derive(Serialize, ToSchema)]
pub struct ArnDto {
    pub arn: String,
    /// The platform's id (for `notification-platform-enabled`).
    pub id: String,
}

#[derive(Serialize, ToSchema)]
pub struct ArnResponse {
    pub data: ArnDto,
}

/// Body of a create or update.
#[derive(ToSchema)]
#[allow(dead_code)] // documents the request
#[schema(example = json!({"appId": "com.example.app", "platform": "APNS", "platformCredential": "-----BEGIN PRIVATE KEY-----...", "platformPrincipal": "ABC123DEFG", "platformProperties": {"teamId": "DEF123GHIJ", "bundleId": "com.example.app"}}))]
pub struct PlatformRequest {
    #[schema(rename = "appId")]
    app_id: String,
    /// `GCM`, `FCM`, `APNS` or `APNS_SANDBOX`.
    platform: String,
    /// Service-account JSON (GCM/FCM), the certificate's private key (iOS certificate), or the
    /// .p8 signing key (iOS token).
    #[schema(rename = "platformCredential")]
    platform_credential: String,
    /// Empty (GCM/FCM), the PEM certificate (iOS certificate), or the key id (iOS token).
    #[schema(rename = "platformPrincipal")]
    platform_principal: Option<String>,
    /// `channelId`, `restrictedPackageName`; for iOS token authentication `teamId`, `bundleId`.
    #[schema(rename = "platformProperties")]
    platform_properties: Option<BTreeMap<String, String>>,
}

fn arn_of(p: PushPlatform) -> ArnResponse {
    ArnResponse {
        data: ArnDto {
            arn: p.arn,
            id: p.id.into(),
        },
    }
}

/// Every push platform of the environment.
#[utoipa::path(
    get, path = "/v1/{environmentId}/notification-platforms", tag = "push", operation_id = "listPushPlatforms",
    params(("environmentId" = String, Path, description = "Environment id")),
    responses(
        (status = 200, description = "The platforms, without credentials", body = PlatformListResponse),
        (status = 401, description = UNAUTHORIZED, body = Problem, content_type = "application/problem+json"),
        (status = 403, description = FORBIDDEN, body = Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = []))
)]
pub async fn list(
    state: web::Data<AppState>,
    caller: Caller,
    env: web::Path<EnvironmentId>,
) -> Result<HttpResponse, ApiError> {
    let platforms = state.push.list(&caller.0, &env).await?;
    Ok(HttpResponse::Ok().json(PlatformListResponse {
        data: platforms.into_iter().map(Into::into).collect(),
    }))
}

/// Create a platform; its credentials are validated offline and sealed at rest.
#[utoipa::path(
    post, path = "/v1/{environmentId}/notification-platforms", tag = "push", operation_id = "createPushPlatform",
    params(("environmentId" = String, Path, description = "Environment id")),
    request_body = PlatformRequest,
    responses(
        (status = 201, description = "Created: its arn and id", body = ArnResponse),
        (status = 400, description = "A field or credential is invalid (`validation_failed`, naming the field and why), or a legacy FCM key (`legacy_fcm_key_unsupported`)", body = Problem, content_type = "application/problem+json"),
        (status = 401, description = UNAUTHORIZED, body = Problem, content_type = "application/problem+json"),
        (status = 403, description = FORBIDDEN, body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "The environment has a platform for this app and platform (`platform_exists`)", body = Problem, content_type = "application/problem+json"),
        (status = 415, description = "Body is not application/json", body = Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = []))
)]
pub async fn create(
    state: web::Data<AppState>,
    caller: Caller,
    env: web::Path<EnvironmentId>,
    req: HttpRequest,
    body: web::Bytes,
) -> Result<HttpResponse, ApiError> {
    // The key before the body (contract §16): 401 and 403 come before 400.
    caller
        .0
        .authorize(&env, domain::Permission::NotificationPlatformsWrite)?;
    let body = Value::Object(json_object(&req, &body)?);
    let platform = state.push.create(&caller.0, &env, &body).await?;
    Ok(HttpResponse::Created().json(arn_of(platform)))
}

/// Replace the credentials of the platform with this `appId` and `platform`.
#[utoipa::path(
    put, path = "/v1/{environmentId}/notification-platforms", tag = "push", operation_id = "updatePushPlatform",
    params(("environmentId" = String, Path, description = "Environment id")),
    request_body = PlatformRequest,
    responses(
        (status = 200, description = "Updated: its arn and id", body = ArnResponse),
        (status = 400, description = "A field or credential is invalid, or a legacy FCM key", body = Problem, content_type = "application/problem+json"),
        (status = 401, description = UNAUTHORIZED, body = Problem, content_type = "application/problem+json"),
        (status = 403, description = FORBIDDEN, body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "No platform for this app and platform", body = Problem, content_type = "application/problem+json"),
        (status = 415, description = "Body is not application/json", body = Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = []))
)]
pub async fn update(
    state: web::Data<AppState>,
    caller: Caller,
    env: web::Path<EnvironmentId>,
    req: HttpRequest,
    body: web::Bytes,
) -> Result<HttpResponse, ApiError> {
    // The key before the body (contract §16): 401 and 403 come before 400.
    caller
        .0
        .authorize(&env, domain::Permission::NotificationPlatformsWrite)?;
    let body = Value::Object(json_object(&req, &body)?);
    let platform = state.push.update(&caller.0, &env, &body).await?;
    Ok(HttpResponse::Ok().json(arn_of(platform)))
}

/// Delete the platform with this `appId` and `platform`; only a disabled one.
#[utoipa::path(
    delete, path = "/v1/{environmentId}/notification-platforms", tag = "push", operation_id = "deletePushPlatform",
    params(("environmentId" = String, Path, description = "Environment id")),
    request_body(content = Object, description = "`appId` and `platform`"),
    responses(
        (status = 204, description = "Deleted"),
        (status = 400, description = "appId or platform missing or invalid", body = Problem, content_type = "application/problem+json"),
        (status = 401, description = UNAUTHORIZED, body = Problem, content_type = "application/problem+json"),
        (status = 403, description = FORBIDDEN, body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "No platform for this app and platform", body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "The platform is enabled (`platform_enabled`)", body = Problem, content_type = "application/problem+json"),
        (status = 415, description = "Body is not application/json", body = Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = []))
)]
pub async fn delete(
    state: web::Data<AppState>,
    caller: Caller,
    env: web::Path<EnvironmentId>,
    req: HttpRequest,
    body: web::Bytes,
) -> Result<HttpResponse, ApiError> {
    // The key before the body (contract §16): 401 and 403 come before 400.
    caller
        .0
        .authorize(&env, domain::Permission::NotificationPlatformsWrite)?;
    let body = Value::Object(json_object(&req, &body)?);
    state.push.delete(&caller.0, &env, &body).await?;
    Ok(HttpResponse::NoContent().finish())
}

/// Enable or disable a platform; answers the record.
#[utoipa::path(
    put, path = "/v1/{environmentId}/notification-platform-enabled", tag = "push", operation_id = "enablePushPlatform",
    params(("environmentId" = String, Path, description = "Environment id")),
    request_body(content = Object, description = "`id` and `enabled`"),
    responses(
        (status = 200, description = "The platform", body = PlatformResponse),
        (status = 400, description = "id or enabled missing or invalid", body = Problem, content_type = "application/problem+json"),
        (status = 401, description = UNAUTHORIZED, body = Problem, content_type = "application/problem+json"),
        (status = 403, description = FORBIDDEN, body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "No such platform in this environment", body = Problem, content_type = "application/problem+json"),
        (status = 415, description = "Body is not application/json", body = Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = []))
)]
pub async fn set_enabled(
    state: web::Data<AppState>,
    caller: Caller,
    env: web::Path<EnvironmentId>,
    req: HttpRequest,
    body: web::Bytes,
) -> Result<HttpResponse, ApiError> {
    // The key before the body (contract §16): 401 and 403 come before 400.
    caller
        .0
        .authorize(&env, domain::Permission::NotificationPlatformsWrite)?;
    let body = Value::Object(json_object(&req, &body)?);
    let platform = state.push.set_enabled(&caller.0, &env, &body).await?;
    Ok(HttpResponse::Ok().json(PlatformResponse {
        data: platform.into(),
    }))
}

pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.service(
        web::resource("/v1/{environmentId}/notification-platforms")
            .route(web::get().to(list))
            .route(web::post().to(create))
            .route(web::put().to(update))
            .route(web::delete().to(delete)),
    )
    .service(
        web::resource("/v1/{environmentId}/notification-platform-enabled")
            .route(web::put().to(set_enabled)),
    )
    .service(
        web::resource("/v1/{environmentId}/users/{endUserId}/devices")
            .route(web::get().to(list_devices)),
    )
    .service(
        web::resource("/v1/{environmentId}/users/{endUserId}/devices/{deviceToken}")
            .route(web::put().to(register_device))
            .route(web::delete().to(unregister_device)),
    )
    .service(
        web::resource("/v1/{environmentId}/users/{endUserId}/cards/{cardInstanceId}/pushes")
            .route(web::get().to(card_pushes)),
    );
}

/// A registered device.
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct DeviceDto {
    pub end_user_id: String,
    pub device_token: String,
    pub app_id: String,
    pub platform: String,
    #[schema(format = DateTime)]
    pub created: String,
    #[schema(format = DateTime)]
    pub updated: String,
}

impl From<domain::push::Device> for DeviceDto {
    fn from(d: domain::push::Device) -> Self {
        DeviceDto {
            created: timestamp(&d.created),
            updated: timestamp(&d.updated),
            end_user_id: d.user_id,
            device_token: d.token,
            app_id: d.app_id,
            platform: d.platform,
        }
    }
}

#[derive(Serialize, ToSchema)]
pub struct DeviceResponse {
    pub data: DeviceDto,
}

#[derive(Serialize, ToSchema)]
pub struct DeviceListResponse {
    pub data: Vec<DeviceDto>,
}

/// The devices of an end user, by token.
#[utoipa::path(
    get, path = "/v1/{environmentId}/users/{endUserId}/devices", tag = "push", operation_id = "listDevices",
    params(
        ("environmentId" = String, Path, description = "Environment id"),
        ("endUserId" = String, Path, description = "End-user id"),
    ),
    responses(
        (status = 200, description = "The user's devices (none for an unknown user)", body = DeviceListResponse),
        (status = 401, description = UNAUTHORIZED, body = Problem, content_type = "application/problem+json"),
        (status = 403, description = "Needs role `events` or `workbench`, or `users:read`", body = Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = []))
)]
pub async fn list_devices(
    state: web::Data<AppState>,
    caller: Caller,
    path: web::Path<(EnvironmentId, EndUserId)>,
) -> Result<HttpResponse, ApiError> {
    let (env, user) = path.into_inner();
    let devices = state.devices.list(&caller.0, &env, &user).await?;
    Ok(HttpResponse::Ok().json(DeviceListResponse {
        data: devices.into_iter().map(DeviceDto::from).collect(),
    }))
}

/// One push of a card to one device.
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct PushDto {
    pub id: String,
    pub card_instance_id: String,
    pub device_token: String,
    pub app_id: String,
    pub platform: String,
    /// `pending`, `sent`, `failed`, `dead_token` (the provider reported the token dead; the
    /// device was removed) or `skipped` (the card closed, or the device or platform went away).
    pub status: String,
    pub attempts: u32,
    /// The provider's HTTP status of the last attempt.
    pub status_code: Option<u16>,
    /// Why the last attempt did not deliver, or why nothing was sent.
    pub error: Option<String>,
    #[schema(format = DateTime)]
    pub next_attempt_at: Option<String>,
    #[schema(format = DateTime)]
    pub created: String,
    #[schema(format = DateTime)]
    pub updated: String,
}

#[derive(Serialize, ToSchema)]
pub struct PushListResponse {
    pub data: Vec<PushDto>,
}

/// The pushes of a card, oldest first: one per device the card reached when it became active.
#[utoipa::path(
    get, path = "/v1/{environmentId}/users/{endUserId}/cards/{cardInstanceId}/pushes", tag = "push", operation_id = "listCardPushes",
    params(
        ("environmentId" = String, Path, description = "Environment id"),
        ("endUserId" = String, Path, description = "End-user id"),
        ("cardInstanceId" = String, Path, description = "Card id"),
    ),
    responses(
        (status = 200, description = "The card's pushes", body = PushListResponse),
        (status = 401, description = UNAUTHORIZED, body = Problem, content_type = "application/problem+json"),
        (status = 403, description = "Needs role `events` or `workbench`, or `users:read`", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "No such card for this user", body = Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = []))
)]
pub async fn card_pushes(
    state: web::Data<AppState>,
    caller: Caller,
    path: web::Path<(EnvironmentId, EndUserId, CardId)>,
) -> Result<HttpResponse, ApiError> {
    let (env, user, card) = path.into_inner();
    let pushes = state.pushes.of_card(&caller.0, &env, &user, &card).await?;
    Ok(HttpResponse::Ok().json(PushListResponse {
        data: pushes
            .into_iter()
            .map(|p| PushDto {
                next_attempt_at: p.next_attempt_at.as_ref().map(timestamp),
                created: timestamp(&p.created),
                updated: timestamp(&p.updated),
                id: p.id,
                card_instance_id: p.card_instance_id,
                device_token: p.token,
                app_id: p.app_id,
                platform: p.platform,
                status: p.status,
                attempts: p.attempts,
                status_code: p.status_code,
                error: p.error,
            })
            .collect(),
    }))
}

/// Register a device of an end user (or move a token to this user).
#[utoipa::path(
    put, path = "/v1/{environmentId}/users/{endUserId}/devices/{deviceToken}", tag = "push", operation_id = "registerDevice",
    params(
        ("environmentId" = String, Path, description = "Environment id"),
        ("endUserId" = String, Path, description = "End-user id"),
        ("deviceToken" = String, Path, description = "The provider's device token"),
    ),
    request_body(content = Object, description = "`appId` and `platform` (GCM, FCM, APNS or APNS_SANDBOX)"),
    responses(
        (status = 200, description = "The device", body = DeviceResponse),
        (status = 400, description = "Invalid appId, platform, user id or token", body = Problem, content_type = "application/problem+json"),
        (status = 401, description = UNAUTHORIZED, body = Problem, content_type = "application/problem+json"),
        (status = 403, description = "Needs role `events` or `workbench`, or `users:write`", body = Problem, content_type = "application/problem+json"),
        (status = 415, description = "Body is not application/json", body = Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = []))
)]
pub async fn register_device(
    state: web::Data<AppState>,
    caller: Caller,
    path: web::Path<(EnvironmentId, EndUserId, String)>,
    req: HttpRequest,
    body: web::Bytes,
) -> Result<HttpResponse, ApiError> {
    let (env, user, token) = path.into_inner();
    // The key before the body (contract §16): 401 and 403 come before 400.
    caller.0.authorize(&env, domain::Permission::UsersWrite)?;
    let body = Value::Object(json_object(&req, &body)?);
    let d = state
        .devices
        .register(&caller.0, &env, &user, &token, &body)
        .await?;
    Ok(HttpResponse::Ok().json(DeviceResponse { data: d.into() }))
}

/// Forget a device of an end user.
#[utoipa::path(
    delete, path = "/v1/{environmentId}/users/{endUserId}/devices/{deviceToken}", tag = "push", operation_id = "unregisterDevice",
    params(
        ("environmentId" = String, Path, description = "Environment id"),
        ("endUserId" = String, Path, description = "End-user id"),
        ("deviceToken" = String, Path, description = "The provider's device token"),
    ),
    responses(
        (status = 204, description = "Forgotten"),
        (status = 401, description = UNAUTHORIZED, body = Problem, content_type = "application/problem+json"),
        (status = 403, description = "Needs role `events` or `workbench`, or `users:write`", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "The user has no such device", body = Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = []))
)]
pub async fn unregister_device(
    state: web::Data<AppState>,
    caller: Caller,
    path: web::Path<(EnvironmentId, EndUserId, String)>,
) -> Result<HttpResponse, ApiError> {
    let (env, user, token) = path.into_inner();
    state
        .devices
        .unregister(&caller.0, &env, &user, &token)
        .await?;
    Ok(HttpResponse::NoContent().finish())
}
