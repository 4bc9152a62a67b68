//! Devices: the tokens pushes reach, registered per end user, and [`DeviceService`].

use super::input::{app_id_problem, valid_app_id};
use super::*;
use crate::id::{EndUserId, EnvironmentId};

/// A device of an end user that pushes can reach (docs/api.md, Push notification platforms).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Device {
    /// The environment it is registered in.
    pub environment_id: String,
    /// `endUserId`: the end user it belongs to, who need not exist yet.
    pub user_id: String,
    /// The provider's token; one device belongs to one user (registering it again moves it).
    pub token: String,
    /// `appId`: the app it is registered for, whose platforms serve it.
    pub app_id: String,
    /// `GCM`, `FCM`, `APNS` or `APNS_SANDBOX`, as registered.
    pub platform: String,
    /// When the token was first registered in the environment.
    pub created: Timestamp,
    /// When it was last registered (or moved to another user).
    pub updated: Timestamp,
}

/// The longest device token accepted, in characters (visible ASCII only).
pub const MAX_DEVICE_TOKEN_CHARS: usize = 4_096;

/// Storage of end users' devices. A token is one device of its environment, and belongs to one
/// user at a time. Every call is scoped to the environment it is given.
#[cfg_attr(feature = "mock", mockall::automock)]
#[async_trait]
pub trait DeviceRepository: Send + Sync {
    /// Inserts, or moves the token to this user and app; answers the stored device. When the
    /// environment has the token already, the stored device takes this user, app, platform and
    /// `updated`, and keeps its `created`. One atomic write: registrations of one token at once
    /// leave one device.
    async fn upsert(&self, device: &Device) -> Result<Device, StorageError>;
    /// Like [`upsert`](Self::upsert), but a token another user of the environment holds stays
    /// where it is: `None` then, and nothing written. One atomic write, as `upsert`: for an end
    /// user's own token, which may not take another user's device.
    async fn upsert_own(&self, device: &Device) -> Result<Option<Device>, StorageError>;
    /// Deletes the user's device with this token. False when the user has no such device (a
    /// token of another user is left alone).
    async fn delete(
        &self,
        environment_id: &str,
        user_id: &str,
        token: &str,
    ) -> Result<bool, StorageError>;
    /// The user's devices, by token; none for a user that has none or does not exist.
    async fn of_user(
        &self,
        environment_id: &str,
        user_id: &str,
    ) -> Result<Vec<Device>, StorageError>;
}

/// End users' devices: register, list and unregister (docs/api.md, Push notification
/// platforms). Registering and unregistering need [`Permission::UsersWrite`] on the environment,
/// listing [`Permission::UsersRead`]; a caller without the environment gets
/// [`DomainError::Unauthenticated`], one without the permission [`DomainError::Forbidden`].
///
/// ```
/// use std::sync::Arc;
///
/// use workbench_domain::mocks::{MockClock, MockDeviceRepository};
/// use workbench_domain::push::DeviceService;
/// use workbench_domain::serde_json::json;
/// use workbench_domain::{DomainError, Principal};
///
/// let mut repo = MockDeviceRepository::new();
/// // The store answers the device as stored: here, a new one, as given.
/// repo.expect_upsert().times(1).returning(|device| Ok(device.clone()));
/// let mut clock = MockClock::new();
/// clock.expect_now().returning(workbench_domain::chrono::Utc::now);
/// let devices = DeviceService::new(Arc::new(repo), Arc::new(clock));
/// let who = Principal::trusted("example-service", "org_1", &["env_1"]);
///
/// # let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
/// # rt.block_on(async {
/// let body = json!({"appId": "com.example", "platform": "APNS"});
/// let device = devices.register(&who, &"env_1".into(), &"user-1".into(), "a1b2c3",
///     &body).await.unwrap();
/// assert_eq!((device.user_id.as_str(), device.token.as_str()), ("user-1", "a1b2c3"));
/// assert_eq!(device.platform, "APNS");
///
/// // Every problem at once, and nothing stored.
/// let body = json!({"appId": "", "platform": "WNS"});
/// match devices.register(&who, &"env_1".into(), &"user-1".into(), "a1b2c3", &body).await {
///     Err(DomainError::Validation(errors)) => {
///         let fields: Vec<&str> = errors.iter().map(|e| e.field.as_str()).collect();
///         assert_eq!(fields, ["appId", "platform"]);
///     }
///     other => panic!("expected a validation error, got {other:?}"),
/// }
/// # });
/// ```
pub struct DeviceService {
    devices: Arc<dyn DeviceRepository>,
    clock: Arc<dyn Clock>,
}

impl DeviceService {
    /// A service over `devices`; `clock` stamps `created` and `updated` of registrations.
    pub fn new(devices: Arc<dyn DeviceRepository>, clock: Arc<dyn Clock>) -> Self {
        Self { devices, clock }
    }

    /// `PUT .../users/{id}/devices/{token}` with `{"appId", "platform"}`. The user need not
    /// exist yet (SDKs may register before the user is sent). A token registered already, for
    /// this user or another, moves to this user, app and platform; but an end user's own token
    /// ([`Principal::end_user`]) may not move another user's device, which fails with
    /// [`DomainError::Conflict`] ([`ConflictKind::DeviceTaken`]) and changes nothing. Answers
    /// the device as stored.
    ///
    /// Fails with [`DomainError::Validation`] listing every problem: `endUserId` not 1 to
    /// [`USER_ID_MAX_CHARS`](crate::audience::USER_ID_MAX_CHARS) characters without control
    /// characters; `deviceToken` not 1 to
    /// [`MAX_DEVICE_TOKEN_CHARS`] visible ASCII characters; `appId` not 1 to 256 letters,
    /// digits, dots, hyphens and underscores; `platform` not `GCM`, `FCM`, `APNS` or
    /// `APNS_SANDBOX`.
    pub async fn register(
        &self,
        who: &Principal,
        env: &EnvironmentId,
        user_id: &EndUserId,
        token: &str,
        body: &Value,
    ) -> Result<Device, DomainError> {
        who.authorize_user(env, Permission::UsersWrite, user_id)?;
        let mut errors = Vec::new();
        crate::audience::validate_user_id(&mut errors, "endUserId", user_id);
        if token.is_empty()
            || token.chars().count() > MAX_DEVICE_TOKEN_CHARS
            || !token.chars().all(|c| c.is_ascii_graphic())
        {
            errors.push(FieldError::new(
                "deviceToken",
                format!("must be 1 to {MAX_DEVICE_TOKEN_CHARS} visible ASCII characters"),
            ));
        }
        let app_id = body
            .get("appId")
            .and_then(Value::as_str)
            .unwrap_or_default();
        if !valid_app_id(app_id) {
            errors.push(app_id_problem());
        }
        let platform = body
            .get("platform")
            .and_then(Value::as_str)
            .unwrap_or_default();
        if provider_of(platform).is_none() {
            errors.push(FieldError::new(
                "platform",
                "must be GCM, FCM, APNS or APNS_SANDBOX",
            ));
        }
        if !errors.is_empty() {
            return Err(DomainError::Validation(errors));
        }
        let now = self.clock.now();
        let device = Device {
            environment_id: env.as_str().to_owned(),
            user_id: user_id.as_str().to_owned(),
            token: token.to_owned(),
            app_id: app_id.to_owned(),
            platform: platform.to_owned(),
            created: now,
            updated: now,
        };
        if who.end_user.is_none() {
            // A customer's key may move a token: a shared device changes hands.
            return Ok(self.devices.upsert(&device).await?);
        }
        self.devices
            .upsert_own(&device)
            .await?
            .ok_or_else(|| DomainError::Conflict {
                kind: ConflictKind::DeviceTaken,
                message: "the device token is registered to another end user; an end user's own \
                          token cannot move it (a key with users:write can)"
                    .into(),
            })
    }

    /// The user's devices, by token; an unknown user has none.
    pub async fn list(
        &self,
        who: &Principal,
        env: &EnvironmentId,
        user_id: &EndUserId,
    ) -> Result<Vec<Device>, DomainError> {
        who.authorize_user(env, Permission::UsersRead, user_id)?;
        Ok(self.devices.of_user(env, user_id).await?)
    }

    /// `DELETE .../users/{id}/devices/{token}`: removes the user's device. Fails with
    /// [`DomainError::NotFound`] when the user has no device with this token.
    pub async fn unregister(
        &self,
        who: &Principal,
        env: &EnvironmentId,
        user_id: &EndUserId,
        token: &str,
    ) -> Result<(), DomainError> {
        who.authorize_user(env, Permission::UsersWrite, user_id)?;
        if !self.devices.delete(env, user_id, token).await? {
            return Err(DomainError::NotFound(Resource::Device));
        }
        Ok(())
    }
}
