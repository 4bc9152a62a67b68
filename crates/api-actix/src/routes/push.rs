//! Push notification platforms (spec 2.10, 4.5; contract §8). Role `workbench`, or the
//! `notification_platforms:*` scopes. Credentials are never returned.

use domain::id::{CardId, EndUserId, EnvironmentId};
use std::collections::BTreeMap;

use actix_web::web;
use domain::push::PushPlatform;
use domain::Permission;
use serde::Serialize;
use serde_json::Value;
use utoipa::ToSchema;

use super::shape::{created, listed, no_content, ok, Body, Call, Reply};
use super::timestamp;
use crate::auth::UserCaller;
use crate::problem::{ApiError, Problem};

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
    get, path = "/v1/{environmentId}/notification-platforms", tag = "push",
        operation_id = "listPushPlatforms",
    params(("environmentId" = String, Path, description = "Environment id")),
    responses(
        (status = 200, description = "The platforms, without credentials",
            body = PlatformListResponse),
    ),
    security(("bearer" = ["notification_platforms:read"]))
)]
pub async fn list(call: Call<EnvironmentId>) -> Reply {
    let platforms = call.state.push.list(&call.caller, &call.path).await?;
    ok(PlatformListResponse {
        data: listed(platforms),
    })
}

/// The body of a platform request, read once the caller may write platforms.
fn platform_body(call: &Call<EnvironmentId>, body: &Body) -> Result<Value, ApiError> {
    Ok(Value::Object(
        call.read(Permission::NotificationPlatformsWrite, body)?,
    ))
}

/// Create a platform; its credentials are validated offline and sealed at rest.
#[utoipa::path(
    post, path = "/v1/{environmentId}/notification-platforms", tag = "push",
        operation_id = "createPushPlatform",
    params(("environmentId" = String, Path, description = "Environment id")),
    request_body = crate::schemas::PlatformRequest,
    responses(
        (status = 201, description = "Created: its arn and id", body = ArnResponse,
            headers(("Location" = String,
                description = "Where the platform is listed, replaced and deleted, by its `appId` \
                    and `platform`: platforms have no address of their own"))),
        (status = 400,
            description = "A field or credential is invalid (`validation_failed`, naming the field \
                and why), or a legacy FCM key (`legacy_fcm_key_unsupported`)", body = Problem,
                    content_type = "application/problem+json"),
        (status = 409,
            description = "The environment has a platform for this app and platform \
                (`platform_exists`)", body = Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = ["notification_platforms:write"]))
)]
pub async fn create(call: Call<EnvironmentId>, body: Body) -> Reply {
    let body = platform_body(&call, &body)?;
    let push = &call.state.push;
    let platform = push.create(&call.caller, &call.path, &body).await?;
    created(
        format!("/v1/{}/notification-platforms", call.path),
        arn_of(platform),
    )
}

/// Replace the credentials of the platform with this `appId` and `platform`.
#[utoipa::path(
    put, path = "/v1/{environmentId}/notification-platforms", tag = "push",
        operation_id = "updatePushPlatform",
    params(("environmentId" = String, Path, description = "Environment id")),
    request_body = crate::schemas::PlatformRequest,
    responses(
        (status = 200, description = "Updated: its arn and id", body = ArnResponse),
        (status = 400, description = "A field or credential is invalid, or a legacy FCM key",
            body = Problem, content_type = "application/problem+json"),
        (status = 404, response = crate::problem::NotFound),
    ),
    security(("bearer" = ["notification_platforms:write"]))
)]
pub async fn update(call: Call<EnvironmentId>, body: Body) -> Reply {
    let body = platform_body(&call, &body)?;
    let push = &call.state.push;
    ok(arn_of(push.update(&call.caller, &call.path, &body).await?))
}

/// Delete the platform with this `appId` and `platform`; only a disabled one.
#[utoipa::path(
    delete, path = "/v1/{environmentId}/notification-platforms", tag = "push",
        operation_id = "deletePushPlatform",
    params(("environmentId" = String, Path, description = "Environment id")),
    request_body = crate::schemas::PlatformKey,
    responses(
        (status = 204, description = "Deleted"),
        (status = 400, description = "appId or platform missing or invalid", body = Problem,
            content_type = "application/problem+json"),
        (status = 404, response = crate::problem::NotFound),
        (status = 409, description = "The platform is enabled (`platform_enabled`)",
            body = Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = ["notification_platforms:write"]))
)]
pub async fn delete(call: Call<EnvironmentId>, body: Body) -> Reply {
    let body = platform_body(&call, &body)?;
    let push = &call.state.push;
    push.delete(&call.caller, &call.path, &body).await?;
    no_content()
}

/// Enable or disable a platform; answers the record.
#[utoipa::path(
    put, path = "/v1/{environmentId}/notification-platform-enabled", tag = "push",
        operation_id = "enablePushPlatform",
    params(("environmentId" = String, Path, description = "Environment id")),
    request_body = crate::schemas::PlatformEnabledRequest,
    responses(
        (status = 200, description = "The platform", body = PlatformResponse),
        (status = 400, description = "id or enabled missing or invalid", body = Problem,
            content_type = "application/problem+json"),
        (status = 404, response = crate::problem::NotFound),
    ),
    security(("bearer" = ["notification_platforms:write"]))
)]
pub async fn set_enabled(call: Call<EnvironmentId>, body: Body) -> Reply {
    let body = platform_body(&call, &body)?;
    let push = &call.state.push;
    let platform = push.set_enabled(&call.caller, &call.path, &body).await?;
    ok(PlatformResponse {
        data: platform.into(),
    })
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
    get, path = "/v1/{environmentId}/users/{endUserId}/devices", tag = "push",
        operation_id = "listDevices",
    params(
        ("environmentId" = String, Path, description = "Environment id"),
        ("endUserId" = String, Path, description = "End-user id"),
    ),
    responses(
        (status = 200, description = "The user's devices (none for an unknown user)",
            body = DeviceListResponse),
    ),
    security(("bearer" = ["users:read"]), ("userToken" = []))
)]
pub async fn list_devices(call: Call<(EnvironmentId, EndUserId), UserCaller>) -> Reply {
    let (env, user) = &call.path;
    let devices = call.state.devices.list(&call.caller, env, user).await?;
    ok(DeviceListResponse {
        data: listed(devices),
    })
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

impl From<domain::push::PushStatus> for PushDto {
    fn from(p: domain::push::PushStatus) -> Self {
        PushDto {
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
        }
    }
}

#[derive(Serialize, ToSchema)]
pub struct PushListResponse {
    pub data: Vec<PushDto>,
}

/// The pushes of a card, oldest first: one per device the card reached when it became active.
#[utoipa::path(
    get, path = "/v1/{environmentId}/users/{endUserId}/cards/{cardInstanceId}/pushes",
        tag = "push", operation_id = "listCardPushes",
    params(
        ("environmentId" = String, Path, description = "Environment id"),
        ("endUserId" = String, Path, description = "End-user id"),
        ("cardInstanceId" = String, Path, description = "Card id"),
    ),
    responses(
        (status = 200, description = "The card's pushes", body = PushListResponse),
        (status = 404, response = crate::problem::NotFound),
    ),
    security(("bearer" = ["users:read"]))
)]
pub async fn card_pushes(call: Call<(EnvironmentId, EndUserId, CardId)>) -> Reply {
    let (env, user, card) = &call.path;
    let pushes = call.state.pushes.of_card(&call.caller, env, user, card);
    ok(PushListResponse {
        data: listed(pushes.await?),
    })
}

/// Register a device of an end user (or move a token to this user).
#[utoipa::path(
    put, path = "/v1/{environmentId}/users/{endUserId}/devices/{deviceToken}", tag = "push",
        operation_id = "registerDevice",
    params(
        ("environmentId" = String, Path, description = "Environment id"),
        ("endUserId" = String, Path, description = "End-user id"),
        ("deviceToken" = String, Path,
            description = "The provider's device token: 1 to 4,096 visible ASCII characters",
                pattern = "^[!-~]{1,4096}$"),
    ),
    request_body = crate::schemas::DeviceRequest,
    responses(
        (status = 200, description = "The device", body = DeviceResponse),
        (status = 400, description = "Invalid appId, platform, user id or token", body = Problem,
            content_type = "application/problem+json"),
        (status = 409,
            description = "With an end user's own token: the device token is registered to \
            another end user (`device_taken`); a key with `users:write` may move it",
            body = Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = ["users:write"]), ("userToken" = []))
)]
pub async fn register_device(
    call: Call<(EnvironmentId, EndUserId, String), UserCaller>,
    body: Body,
) -> Reply {
    let (env, user, token) = &call.path;
    // The key before the body (contract §16): 401 and 403 come before 400.
    call.caller
        .authorize_user(env, Permission::UsersWrite, user)?;
    let body = Value::Object(body.object()?);
    let devices = &call.state.devices;
    let device = devices.register(&call.caller, env, user, token, &body);
    ok(DeviceResponse {
        data: device.await?.into(),
    })
}

/// Forget a device of an end user.
#[utoipa::path(
    delete, path = "/v1/{environmentId}/users/{endUserId}/devices/{deviceToken}", tag = "push",
        operation_id = "unregisterDevice",
    params(
        ("environmentId" = String, Path, description = "Environment id"),
        ("endUserId" = String, Path, description = "End-user id"),
        ("deviceToken" = String, Path,
            description = "The provider's device token: 1 to 4,096 visible ASCII characters",
                pattern = "^[!-~]{1,4096}$"),
    ),
    responses(
        (status = 204, description = "Forgotten"),
        (status = 404, response = crate::problem::NotFound),
    ),
    security(("bearer" = ["users:write"]), ("userToken" = []))
)]
pub async fn unregister_device(
    call: Call<(EnvironmentId, EndUserId, String), UserCaller>,
) -> Reply {
    let (env, user, token) = &call.path;
    let devices = &call.state.devices;
    devices.unregister(&call.caller, env, user, token).await?;
    no_content()
}
