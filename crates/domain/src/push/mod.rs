//! Push notification platforms (spec 2.10, 4.5; contract §8): one per environment, app and
//! platform, with credentials validated offline by a [`CredentialValidator`] and sealed at
//! rest by the storage adapter. Credentials are never returned. Devices of end users, and the
//! sending of pushes to them when cards become active (`send`).

use std::collections::BTreeMap;
use std::sync::Arc;

use async_trait::async_trait;
use serde_json::{Map, Value};

use crate::id::{new_id, IdKind};

mod send;

use crate::{
    Clock, ConflictKind, DomainError, FieldError, Permission, Principal, Resource, StorageError,
    Timestamp,
};
pub use send::{
    card_platform, platform_for, reaches, serves, targeted_platforms, wants, PushJob,
    PushJobRepository, PushMessage, PushNext, PushRecord, PushSender, PushService, PushStatus,
    SendOutcome, SendReport, DEFAULT_PUSH_RETRY_SCHEDULE, MAX_PUSH_PAYLOAD_BYTES, PAYLOAD_KEY,
};
#[cfg(feature = "mock")]
pub use send::{MockPushJobRepository, MockPushSender};

/// Where a field must be at most this long (credentials are PEM or JSON of a few KB).
const MAX_CREDENTIAL_CHARS: usize = 16_384;
const MAX_APP_ID_CHARS: usize = 256;

/// 1 to 256 letters, digits, dots, hyphens and underscores.
fn valid_app_id(app_id: &str) -> bool {
    !app_id.is_empty()
        && app_id.chars().count() <= MAX_APP_ID_CHARS
        && app_id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "_.-".contains(c))
}

fn app_id_problem() -> FieldError {
    FieldError::new(
        "appId",
        format!(
            "is required: 1 to {MAX_APP_ID_CHARS} letters, digits, dots, hyphens and underscores"
        ),
    )
}

/// How the platform talks to devices.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Provider {
    /// `GCM` or `FCM`: Android over FCM HTTP v1.
    Fcm,
    /// `APNS` (production) or `APNS_SANDBOX`.
    Apns { sandbox: bool },
}

/// The platform value as sent (`GCM`, `FCM`, `APNS`, `APNS_SANDBOX`); records keep it.
pub fn provider_of(platform: &str) -> Option<Provider> {
    match platform {
        "GCM" | "FCM" => Some(Provider::Fcm),
        "APNS" => Some(Provider::Apns { sandbox: false }),
        "APNS_SANDBOX" => Some(Provider::Apns { sandbox: true }),
        _ => None,
    }
}

/// What a create or update asks for.
#[derive(Debug, Clone, PartialEq)]
pub struct PlatformInput {
    pub app_id: String,
    pub platform: String,
    pub credential: String,
    pub principal: Option<String>,
    /// `channelId`, `restrictedPackageName` (Android); `teamId`, `bundleId` (iOS token).
    pub properties: Map<String, Value>,
}

impl PlatformInput {
    /// Reads a create/update body; every problem at once. Unknown fields are ignored.
    pub fn parse(body: &Value) -> Result<PlatformInput, DomainError> {
        let Some(obj) = body.as_object() else {
            return Err(DomainError::invalid("", "the body must be a JSON object"));
        };
        let mut errors = Vec::new();
        let text = |key: &str, errors: &mut Vec<FieldError>, required: bool| -> Option<String> {
            match obj.get(key) {
                None | Some(Value::Null) if !required => None,
                Some(Value::String(s)) if s.chars().count() <= MAX_CREDENTIAL_CHARS => {
                    Some(s.clone())
                }
                Some(Value::String(_)) => {
                    errors.push(FieldError::new(
                        key,
                        format!("must be at most {MAX_CREDENTIAL_CHARS} characters"),
                    ));
                    None
                }
                _ => {
                    errors.push(FieldError::new(key, "is required: a string"));
                    None
                }
            }
        };
        let app_id = text("appId", &mut errors, true).unwrap_or_default();
        let platform = text("platform", &mut errors, true).unwrap_or_default();
        let credential = text("platformCredential", &mut errors, true).unwrap_or_default();
        let principal = text("platformPrincipal", &mut errors, false);
        if obj.get("appId").is_some_and(Value::is_string) && !valid_app_id(&app_id) {
            errors.push(app_id_problem());
        }
        if obj.get("platform").is_some_and(Value::is_string) && provider_of(&platform).is_none() {
            errors.push(FieldError::new(
                "platform",
                "must be GCM, FCM, APNS or APNS_SANDBOX",
            ));
        }
        if obj.get("platformCredential").is_some_and(Value::is_string)
            && credential.trim().is_empty()
        {
            errors.push(FieldError::new("platformCredential", "must not be empty"));
        }
        let properties = match obj.get("platformProperties") {
            None | Some(Value::Null) => Map::new(),
            Some(Value::Object(p)) => {
                for (k, v) in p {
                    if !["channelId", "restrictedPackageName", "teamId", "bundleId"]
                        .contains(&k.as_str())
                    {
                        errors.push(FieldError::new(format!("platformProperties.{k}"), "is not a property this service knows (channelId, restrictedPackageName, teamId, bundleId)"));
                    } else if !v.is_string() {
                        errors.push(FieldError::new(
                            format!("platformProperties.{k}"),
                            "must be a string",
                        ));
                    }
                }
                p.clone()
            }
            Some(_) => {
                errors.push(FieldError::new(
                    "platformProperties",
                    "must be an object of strings",
                ));
                Map::new()
            }
        };
        if !errors.is_empty() {
            return Err(DomainError::Validation(errors));
        }
        Ok(PlatformInput {
            app_id,
            platform,
            credential,
            principal,
            properties,
        })
    }

    pub fn property(&self, key: &str) -> Option<&str> {
        self.properties.get(key).and_then(Value::as_str)
    }
}

/// Why credentials are refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CredentialProblem {
    /// Field problems (400 `validation_failed`).
    Invalid(Vec<FieldError>),
    /// A legacy FCM server key (400 `legacy_fcm_key_unsupported`).
    LegacyFcmKey,
}

/// Validates credentials offline; answers the non-secret facts shown in `attributes`.
#[cfg_attr(feature = "mock", mockall::automock)]
pub trait CredentialValidator: Send + Sync {
    fn validate(
        &self,
        input: &PlatformInput,
        now: Timestamp,
    ) -> Result<BTreeMap<String, String>, CredentialProblem>;
}

#[derive(Debug, Clone, PartialEq)]
pub struct PushPlatform {
    pub id: String,
    pub environment_id: String,
    pub app_id: String,
    pub platform: String,
    pub arn: String,
    pub enabled: bool,
    /// Secret: sealed at rest, never returned.
    pub credential: String,
    pub principal: Option<String>,
    pub properties: Map<String, Value>,
    /// Derived, non-secret (expiry, bundle id, project id, client email, key id, fingerprint).
    pub facts: BTreeMap<String, String>,
    pub created: Timestamp,
    pub updated: Timestamp,
}

impl PushPlatform {
    /// The `attributes` of spec 2.10: string values, `Enabled` as text.
    pub fn attributes(&self) -> BTreeMap<String, String> {
        let mut a = self.facts.clone();
        a.insert("Enabled".into(), self.enabled.to_string());
        a
    }
}

pub fn arn(environment_id: &str, platform: &str, app_id: &str) -> String {
    format!("arn:workbench:push:{environment_id}:app/{platform}/{app_id}")
}

#[cfg_attr(feature = "mock", mockall::automock)]
#[async_trait]
pub trait PushPlatformRepository: Send + Sync {
    /// Fails with `UniqueViolation` when the environment has this app and platform.
    async fn insert(&self, platform: &PushPlatform) -> Result<(), StorageError>;
    async fn list(&self, environment_id: &str) -> Result<Vec<PushPlatform>, StorageError>;
    async fn find(
        &self,
        environment_id: &str,
        app_id: &str,
        platform: &str,
    ) -> Result<Option<PushPlatform>, StorageError>;
    async fn get(
        &self,
        environment_id: &str,
        id: &str,
    ) -> Result<Option<PushPlatform>, StorageError>;
    async fn update(&self, platform: &PushPlatform) -> Result<(), StorageError>;
    /// Deletes only a disabled platform; false when there is none such.
    async fn delete_disabled(&self, environment_id: &str, id: &str) -> Result<bool, StorageError>;
}

pub struct PushPlatformService {
    repo: Arc<dyn PushPlatformRepository>,
    validator: Arc<dyn CredentialValidator>,
    clock: Arc<dyn Clock>,
}

fn credential_error(p: CredentialProblem) -> DomainError {
    match p {
        CredentialProblem::Invalid(errors) => DomainError::Validation(errors),
        CredentialProblem::LegacyFcmKey => DomainError::LegacyFcmKey(
            "legacy FCM server keys are no longer accepted: Google shut the legacy FCM API down. \
             Create a service account in the Firebase console (Project settings > Service \
             accounts > Generate new private key) and send its JSON as platformCredential, with \
             platformPrincipal empty (FCM HTTP v1)"
                .into(),
        ),
    }
}

impl PushPlatformService {
    pub fn new(
        repo: Arc<dyn PushPlatformRepository>,
        validator: Arc<dyn CredentialValidator>,
        clock: Arc<dyn Clock>,
    ) -> Self {
        Self {
            repo,
            validator,
            clock,
        }
    }

    pub async fn list(&self, who: &Principal, env: &str) -> Result<Vec<PushPlatform>, DomainError> {
        who.authorize(env, Permission::NotificationPlatformsRead)?;
        Ok(self.repo.list(env).await?)
    }

    pub async fn create(
        &self,
        who: &Principal,
        env: &str,
        body: &Value,
    ) -> Result<PushPlatform, DomainError> {
        who.authorize(env, Permission::NotificationPlatformsWrite)?;
        let input = PlatformInput::parse(body)?;
        let now = self.clock.now();
        let facts = self
            .validator
            .validate(&input, now)
            .map_err(credential_error)?;
        let platform = PushPlatform {
            id: new_id(IdKind::PushPlatform),
            environment_id: env.to_owned(),
            arn: arn(env, &input.platform, &input.app_id),
            app_id: input.app_id,
            platform: input.platform,
            enabled: true,
            credential: input.credential,
            principal: input.principal,
            properties: input.properties,
            facts,
            created: now,
            updated: now,
        };
        match self.repo.insert(&platform).await {
            Ok(()) => Ok(platform),
            Err(StorageError::UniqueViolation(_)) => Err(DomainError::conflict(
                ConflictKind::PlatformExists,
                format!(
                    "the environment already has a {} platform for app {:?}; update it (PUT) instead",
                    platform.platform, platform.app_id
                ),
            )),
            Err(e) => Err(e.into()),
        }
    }

    /// Replaces the credentials (validated again) of the platform with this app and platform.
    pub async fn update(
        &self,
        who: &Principal,
        env: &str,
        body: &Value,
    ) -> Result<PushPlatform, DomainError> {
        who.authorize(env, Permission::NotificationPlatformsWrite)?;
        let input = PlatformInput::parse(body)?;
        let mut platform = self
            .repo
            .find(env, &input.app_id, &input.platform)
            .await?
            .ok_or(DomainError::NotFound(Resource::PushPlatform))?;
        let now = self.clock.now();
        platform.facts = self
            .validator
            .validate(&input, now)
            .map_err(credential_error)?;
        platform.credential = input.credential;
        platform.principal = input.principal;
        platform.properties = input.properties;
        platform.updated = now;
        self.repo.update(&platform).await?;
        Ok(platform)
    }

    pub async fn set_enabled(
        &self,
        who: &Principal,
        env: &str,
        body: &Value,
    ) -> Result<PushPlatform, DomainError> {
        who.authorize(env, Permission::NotificationPlatformsWrite)?;
        let mut errors = Vec::new();
        let id = match body.get("id") {
            Some(Value::String(s)) if !s.is_empty() => Some(s.clone()),
            _ => {
                errors.push(FieldError::new("id", "is required: the platform's id"));
                None
            }
        };
        let enabled = match body.get("enabled") {
            Some(Value::Bool(b)) => Some(*b),
            _ => {
                errors.push(FieldError::new("enabled", "is required: true or false"));
                None
            }
        };
        let (Some(id), Some(enabled)) = (id, enabled) else {
            return Err(DomainError::Validation(errors));
        };
        let mut platform = self
            .repo
            .get(env, &id)
            .await?
            .ok_or(DomainError::NotFound(Resource::PushPlatform))?;
        if platform.enabled != enabled {
            platform.enabled = enabled;
            platform.updated = self.clock.now();
            self.repo.update(&platform).await?;
        }
        Ok(platform)
    }

    /// Deletes the platform of this app and platform; only a disabled one (409 otherwise).
    pub async fn delete(
        &self,
        who: &Principal,
        env: &str,
        body: &Value,
    ) -> Result<(), DomainError> {
        who.authorize(env, Permission::NotificationPlatformsWrite)?;
        let mut errors = Vec::new();
        let app_id = body
            .get("appId")
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty());
        if app_id.is_none() {
            errors.push(FieldError::new("appId", "is required: a string"));
        }
        let platform = body.get("platform").and_then(Value::as_str);
        if platform.and_then(provider_of).is_none() {
            errors.push(FieldError::new(
                "platform",
                "must be GCM, FCM, APNS or APNS_SANDBOX",
            ));
        }
        let (Some(app_id), Some(platform)) = (app_id, platform.filter(|_| errors.is_empty()))
        else {
            return Err(DomainError::Validation(errors));
        };
        let found = self
            .repo
            .find(env, app_id, platform)
            .await?
            .ok_or(DomainError::NotFound(Resource::PushPlatform))?;
        if found.enabled {
            return Err(DomainError::conflict(
                ConflictKind::PlatformEnabled,
                "disable the platform (PUT /notification-platform-enabled) before deleting it",
            ));
        }
        if !self.repo.delete_disabled(env, &found.id).await? {
            return Err(DomainError::conflict(
                ConflictKind::PlatformEnabled,
                "the platform was enabled meanwhile; disable it first",
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use chrono::TimeZone;
    use serde_json::json;

    use super::*;
    use crate::tenancy::{KeyAccess, Role};

    fn who() -> Principal {
        Principal {
            key_id: "key_1".into(),
            organisation_id: "org_1".into(),
            access: KeyAccess::Roles(vec![Role::Workbench]),
            environment_ids: vec!["env_1".into()],
        }
    }

    fn service(
        repo: MockPushPlatformRepository,
        validator: MockCredentialValidator,
    ) -> PushPlatformService {
        let mut clock = crate::time::MockClock::new();
        clock.expect_now().returning(|| {
            chrono::Utc
                .with_ymd_and_hms(2026, 11, 22, 10, 0, 0)
                .single()
                .expect("time")
        });
        PushPlatformService::new(Arc::new(repo), Arc::new(validator), Arc::new(clock))
    }

    fn body() -> Value {
        json!({"appId": "app", "platform": "FCM", "platformCredential": "{}"})
    }

    #[tokio::test]
    async fn create_maps_legacy_keys_and_duplicates() {
        let mut validator = MockCredentialValidator::new();
        validator
            .expect_validate()
            .returning(|_, _| Err(CredentialProblem::LegacyFcmKey));
        let err = service(MockPushPlatformRepository::new(), validator)
            .create(&who(), "env_1", &body())
            .await
            .expect_err("legacy");
        assert!(matches!(err, DomainError::LegacyFcmKey(ref m) if m.contains("HTTP v1")));

        let mut validator = MockCredentialValidator::new();
        validator
            .expect_validate()
            .returning(|_, _| Ok(BTreeMap::from([("ProjectId".into(), "p".into())])));
        let mut repo = MockPushPlatformRepository::new();
        repo.expect_insert()
            .returning(|_| Err(StorageError::UniqueViolation("push_platforms".into())));
        let err = service(repo, validator)
            .create(&who(), "env_1", &body())
            .await
            .expect_err("duplicate");
        assert!(matches!(
            err,
            DomainError::Conflict {
                kind: ConflictKind::PlatformExists,
                ..
            }
        ));

        let mut validator = MockCredentialValidator::new();
        validator
            .expect_validate()
            .returning(|_, _| Ok(BTreeMap::new()));
        let mut repo = MockPushPlatformRepository::new();
        repo.expect_insert()
            .withf(|p| p.enabled && p.arn == "arn:workbench:push:env_1:app/FCM/app")
            .returning(|_| Ok(()));
        let p = service(repo, validator)
            .create(&who(), "env_1", &body())
            .await
            .expect("created");
        assert_eq!(p.attributes()["Enabled"], "true");
    }

    #[tokio::test]
    async fn only_disabled_platforms_are_deleted() {
        let platform = PushPlatform {
            id: "npl_1".into(),
            environment_id: "env_1".into(),
            app_id: "app".into(),
            platform: "FCM".into(),
            arn: arn("env_1", "FCM", "app"),
            enabled: true,
            credential: "{}".into(),
            principal: None,
            properties: Map::new(),
            facts: BTreeMap::new(),
            created: chrono::Utc::now(),
            updated: chrono::Utc::now(),
        };
        let enabled = platform.clone();
        let mut repo = MockPushPlatformRepository::new();
        repo.expect_find()
            .returning(move |_, _, _| Ok(Some(enabled.clone())));
        repo.expect_delete_disabled().never();
        let err = service(repo, MockCredentialValidator::new())
            .delete(&who(), "env_1", &json!({"appId": "app", "platform": "FCM"}))
            .await
            .expect_err("enabled");
        assert!(matches!(
            err,
            DomainError::Conflict {
                kind: ConflictKind::PlatformEnabled,
                ..
            }
        ));
        let mut disabled = platform;
        disabled.enabled = false;
        let mut repo = MockPushPlatformRepository::new();
        repo.expect_find()
            .returning(move |_, _, _| Ok(Some(disabled.clone())));
        repo.expect_delete_disabled()
            .times(1)
            .returning(|_, _| Ok(true));
        service(repo, MockCredentialValidator::new())
            .delete(&who(), "env_1", &json!({"appId": "app", "platform": "FCM"}))
            .await
            .expect("deleted");
    }
}

/// A device of an end user that pushes can reach (contract §8).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Device {
    pub environment_id: String,
    pub user_id: String,
    /// The provider's token; one device belongs to one user (registering it again moves it).
    pub token: String,
    pub app_id: String,
    pub platform: String,
    pub created: Timestamp,
    pub updated: Timestamp,
}

pub const MAX_DEVICE_TOKEN_CHARS: usize = 4_096;

#[cfg_attr(feature = "mock", mockall::automock)]
#[async_trait]
pub trait DeviceRepository: Send + Sync {
    /// Inserts, or moves the token to this user and app; answers the stored device.
    async fn upsert(&self, device: &Device) -> Result<Device, StorageError>;
    /// False when the user has no such device.
    async fn delete(
        &self,
        environment_id: &str,
        user_id: &str,
        token: &str,
    ) -> Result<bool, StorageError>;
    async fn of_user(
        &self,
        environment_id: &str,
        user_id: &str,
    ) -> Result<Vec<Device>, StorageError>;
}

pub struct DeviceService {
    devices: Arc<dyn DeviceRepository>,
    clock: Arc<dyn Clock>,
}

impl DeviceService {
    pub fn new(devices: Arc<dyn DeviceRepository>, clock: Arc<dyn Clock>) -> Self {
        Self { devices, clock }
    }

    /// `PUT .../users/{id}/devices/{token}` with `{"appId", "platform"}`. The user need not
    /// exist yet (SDKs may register before the user is sent).
    pub async fn register(
        &self,
        who: &Principal,
        env: &str,
        user_id: &str,
        token: &str,
        body: &Value,
    ) -> Result<Device, DomainError> {
        who.authorize(env, Permission::UsersWrite)?;
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
        Ok(self
            .devices
            .upsert(&Device {
                environment_id: env.to_owned(),
                user_id: user_id.to_owned(),
                token: token.to_owned(),
                app_id: app_id.to_owned(),
                platform: platform.to_owned(),
                created: now,
                updated: now,
            })
            .await?)
    }

    /// The user's devices, by token.
    pub async fn list(
        &self,
        who: &Principal,
        env: &str,
        user_id: &str,
    ) -> Result<Vec<Device>, DomainError> {
        who.authorize(env, Permission::UsersRead)?;
        Ok(self.devices.of_user(env, user_id).await?)
    }

    pub async fn unregister(
        &self,
        who: &Principal,
        env: &str,
        user_id: &str,
        token: &str,
    ) -> Result<(), DomainError> {
        who.authorize(env, Permission::UsersWrite)?;
        if !self.devices.delete(env, user_id, token).await? {
            return Err(DomainError::NotFound(Resource::Device));
        }
        Ok(())
    }
}
