//! Push notifications: the platforms (one per environment, app and platform, with credentials
//! validated offline by a [`CredentialValidator`] and sealed at rest by the storage adapter;
//! credentials are never returned), the devices of end users, and the sending of pushes to
//! those devices when cards become active ([`PushService`]). The rules are in docs/api.md,
//! Push notification platforms, and its Sending pushes.

use crate::id::EnvironmentId;
use std::collections::BTreeMap;
use std::sync::Arc;

use async_trait::async_trait;
use serde_json::{Map, Value};

use crate::id::{new_id, IdKind, PushPlatformId};

mod input;
mod provider;
mod send;

use crate::{
    Clock, ConflictKind, DomainError, FieldError, Permission, Principal, Resource, StorageError,
    Timestamp,
};
pub use send::{
    card_platform, platform_for, reaches, serves, targeted_platforms, wants, PushJob,
    PushJobRepository, PushJobStatus, PushMessage, PushNext, PushRecord, PushSender, PushService,
    PushStatus, SendOutcome, SendReport, DEFAULT_PUSH_RETRY_SCHEDULE, MAX_PUSH_PAYLOAD_BYTES,
    PAYLOAD_KEY,
};
#[cfg(feature = "mock")]
pub use send::{MockPushJobRepository, MockPushSender};

pub use input::PlatformInput;
pub use provider::{provider_of, Provider, PLATFORMS};

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
    /// Checks the credentials of `input` for its platform without any network call, as of
    /// `now` (a certificate must be valid then), by the rules of docs/api.md, Push notification
    /// platforms. `input` comes from [`PlatformInput::parse`], so its platform is known.
    ///
    /// Answers the facts derived from the credentials, which become the record's
    /// [`PushPlatform::facts`] and are shown to callers, so they must hold nothing secret
    /// (`ProjectId`, `ClientEmail`, `PrivateKeyId`; `AppleCertificateExpirationDate`,
    /// `BundleId`, `CertificateFingerprint`; `KeyId`, ...). Refuses a GCM/FCM credential that
    /// is not service-account JSON with [`CredentialProblem::LegacyFcmKey`], and every other
    /// problem with [`CredentialProblem::Invalid`], each naming its field
    /// (`platformCredential`, `platformPrincipal`, `platformProperties.teamId`, ...).
    fn validate(
        &self,
        input: &PlatformInput,
        now: Timestamp,
    ) -> Result<BTreeMap<String, String>, CredentialProblem>;
}

/// A push notification platform: an app's credentials for one provider in one environment
/// (docs/api.md, Push notification platforms).
#[derive(Debug, Clone, PartialEq)]
pub struct PushPlatform {
    /// `npl_…`: what enabling and disabling name.
    pub id: PushPlatformId,
    /// The environment it belongs to.
    pub environment_id: String,
    /// `appId`, the app whose devices it serves.
    pub app_id: String,
    /// `GCM`, `FCM`, `APNS` or `APNS_SANDBOX`, as sent.
    pub platform: String,
    /// `arn:workbench:push:{environmentId}:app/{platform}/{appId}` (see [`arn`]).
    pub arn: String,
    /// Whether pushes go through it. A new platform is enabled; only a disabled one can be
    /// deleted, and pushes due while it is disabled are skipped (unless another enabled
    /// platform of the app serves the device).
    pub enabled: bool,
    /// Secret: sealed at rest, never returned.
    pub credential: String,
    /// `platformPrincipal` (the iOS certificate or key id). Secret like the credential.
    pub principal: Option<String>,
    /// `platformProperties`: `channelId`, `restrictedPackageName` (Android); `teamId`,
    /// `bundleId` (iOS token).
    pub properties: Map<String, Value>,
    /// Derived, non-secret (expiry, bundle id, project id, client email, key id, fingerprint).
    pub facts: BTreeMap<String, String>,
    /// When it was created.
    pub created: Timestamp,
    /// When its credentials or its state last changed.
    pub updated: Timestamp,
}

impl PushPlatform {
    /// The `attributes` of the record as the API shows it (docs/api.md, Push notification
    /// platforms): the facts, string values, and `Enabled` as `"true"` or `"false"`.
    pub fn attributes(&self) -> BTreeMap<String, String> {
        let mut a = self.facts.clone();
        a.insert("Enabled".into(), self.enabled.to_string());
        a
    }
}

/// The ARN of an environment's platform for an app.
///
/// ```
/// assert_eq!(
///     workbench_domain::push::arn("env_1", "FCM", "com.example"),
///     "arn:workbench:push:env_1:app/FCM/com.example"
/// );
/// ```
pub fn arn(environment_id: &str, platform: &str, app_id: &str) -> String {
    format!("arn:workbench:push:{environment_id}:app/{platform}/{app_id}")
}

/// Storage of push platforms. An implementation seals the credential and the principal at
/// rest and opens them on every read, and scopes every call to the environment it is given:
/// a platform of another environment is never found, changed or deleted.
#[cfg_attr(feature = "mock", mockall::automock)]
#[async_trait]
pub trait PushPlatformRepository: Send + Sync {
    /// Stores a new platform as given. Fails with [`StorageError::UniqueViolation`] when the
    /// environment already has a platform of this app and platform value (exactly as sent:
    /// `GCM` and `FCM` are different values here), and then stores nothing.
    async fn insert(&self, platform: &PushPlatform) -> Result<(), StorageError>;
    /// Every platform of the environment, by app id, then platform.
    async fn list(&self, environment_id: &str) -> Result<Vec<PushPlatform>, StorageError>;
    /// The environment's platform of this app and platform value (exactly as sent); None when
    /// there is none.
    async fn find(
        &self,
        environment_id: &str,
        app_id: &str,
        platform: &str,
    ) -> Result<Option<PushPlatform>, StorageError>;
    /// The environment's platform with this id; None when there is none.
    async fn get(
        &self,
        environment_id: &str,
        id: &str,
    ) -> Result<Option<PushPlatform>, StorageError>;
    /// Replaces every field of the stored platform with this id and environment by the given
    /// one's, sealing the secrets again. A platform deleted meanwhile is not an error: nothing
    /// is stored.
    async fn update(&self, platform: &PushPlatform) -> Result<(), StorageError>;
    /// Deletes only a disabled platform; false when there is none such. The check and the
    /// delete are one atomic write, so a platform enabled meanwhile is kept.
    async fn delete_disabled(&self, environment_id: &str, id: &str) -> Result<bool, StorageError>;
}

/// The push notification platform API (docs/api.md, Push notification platforms): list,
/// create, update, enable or disable, and delete. Reading needs
/// [`Permission::NotificationPlatformsRead`] on the environment, every change
/// [`Permission::NotificationPlatformsWrite`]; a caller without the environment gets
/// [`DomainError::Unauthenticated`], one without the permission [`DomainError::Forbidden`].
///
/// ```
/// use std::collections::BTreeMap;
/// use std::sync::Arc;
///
/// use workbench_domain::mocks::{MockClock, MockCredentialValidator, MockPushPlatformRepository};
/// use workbench_domain::push::PushPlatformService;
/// use workbench_domain::serde_json::json;
/// use workbench_domain::Principal;
///
/// let mut validator = MockCredentialValidator::new();
/// validator.expect_validate().returning(|_, _| {
///     Ok(BTreeMap::from([("ProjectId".to_owned(), "example-project".to_owned())]))
/// });
/// let mut repo = MockPushPlatformRepository::new();
/// repo.expect_insert().times(1).returning(|_| Ok(()));
/// let mut clock = MockClock::new();
/// clock.expect_now().returning(workbench_domain::chrono::Utc::now);
/// let platforms = PushPlatformService::new(Arc::new(repo), Arc::new(validator), Arc::new(clock));
/// let who = Principal::trusted("example-service", "org_1", &["env_1"]);
///
/// let body = json!({"appId": "com.example", "platform": "FCM", "platformCredential": "{}"});
/// # let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
/// # rt.block_on(async {
/// let platform = platforms.create(&who, &"env_1".into(), &body).await.unwrap();
/// assert!(platform.enabled && platform.id.starts_with("npl_"));
/// assert_eq!(platform.arn, "arn:workbench:push:env_1:app/FCM/com.example");
/// assert_eq!(platform.attributes()["ProjectId"], "example-project");
/// assert_eq!(platform.attributes()["Enabled"], "true");
///
/// // An environment the caller may not use: refused before anything is validated or stored.
/// assert!(platforms.create(&who, &"env_2".into(), &body).await.is_err());
/// # });
/// ```
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
    /// A service over these ports. `clock` stamps `created` and `updated`, and is the time
    /// credentials are validated at.
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

    /// Every platform of `env`, by app id, then platform. The records carry their credentials:
    /// what shows them must leave `credential` and `principal` out.
    pub async fn list(
        &self,
        who: &Principal,
        env: &EnvironmentId,
    ) -> Result<Vec<PushPlatform>, DomainError> {
        who.authorize(env, Permission::NotificationPlatformsRead)?;
        Ok(self.repo.list(env).await?)
    }

    /// Creates the platform a create body asks for ([`PlatformInput::parse`]), its credentials
    /// checked by the [`CredentialValidator`]: enabled, with a new `npl_…` id and its [`arn`].
    /// Answers the record, credentials included (not to be shown).
    ///
    /// Fails with [`DomainError::Validation`] for problems of the body or the credentials,
    /// [`DomainError::LegacyFcmKey`] for a legacy FCM server key (with the steps to a service
    /// account), and a [`DomainError::Conflict`] of kind [`ConflictKind::PlatformExists`] when
    /// the environment already has a platform of this app and platform value.
    pub async fn create(
        &self,
        who: &Principal,
        env: &EnvironmentId,
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
            id: new_id(IdKind::PushPlatform).into(),
            environment_id: env.as_str().to_owned(),
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
                    "the environment already has a {} platform for app {:?}; update it (PUT) \
                        instead",
                    platform.platform, platform.app_id
                ),
            )),
            Err(e) => Err(e.into()),
        }
    }

    /// Replaces the credentials (validated again) of the platform with this app and platform:
    /// credential, principal, properties and facts. Its id, `arn` and `enabled` stay.
    ///
    /// Fails like [`create`](Self::create) on the body and the credentials, and with
    /// [`DomainError::NotFound`] when the environment has no platform of this app and
    /// platform value.
    pub async fn update(
        &self,
        who: &Principal,
        env: &EnvironmentId,
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

    /// `PUT .../notification-platform-enabled` with `{"id", "enabled"}`: enables or disables
    /// the platform with this id, and answers it. A platform already so is answered unchanged
    /// (`updated` included). While disabled, no push is queued through it, and pushes already
    /// queued are skipped when due unless another enabled platform of the app serves their
    /// device.
    ///
    /// Fails with [`DomainError::Validation`] when `id` is not a non-empty string or `enabled`
    /// not a boolean (both reported), and [`DomainError::NotFound`] when the environment has
    /// no platform with this id.
    pub async fn set_enabled(
        &self,
        who: &Principal,
        env: &EnvironmentId,
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
    /// `body` is `{"appId", "platform"}`.
    ///
    /// Fails with [`DomainError::Validation`] when `appId` is not a non-empty string or
    /// `platform` not one of the four values, [`DomainError::NotFound`] when there is no such
    /// platform, and a [`DomainError::Conflict`] of kind [`ConflictKind::PlatformEnabled`]
    /// while it is enabled (also when it was enabled again between the check and the delete).
    pub async fn delete(
        &self,
        who: &Principal,
        env: &EnvironmentId,
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

mod device;

pub use device::*;

#[cfg(test)]
mod tests;
