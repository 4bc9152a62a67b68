//! What a push platform create or update body asks for ([`PlatformInput`]), read and checked
//! for its shape, and the app ids platforms and devices share.

use serde_json::{Map, Value};

use super::provider::provider_of;
use crate::{DomainError, FieldError};

/// Where a field must be at most this long (credentials are PEM or JSON of a few KB).
const MAX_CREDENTIAL_CHARS: usize = 16_384;
const MAX_APP_ID_CHARS: usize = 256;

/// 1 to 256 letters, digits, dots, hyphens and underscores.
pub(super) fn valid_app_id(app_id: &str) -> bool {
    !app_id.is_empty()
        && app_id.chars().count() <= MAX_APP_ID_CHARS
        && app_id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "_.-".contains(c))
}

pub(super) fn app_id_problem() -> FieldError {
    FieldError::new(
        "appId",
        format!(
            "is required: 1 to {MAX_APP_ID_CHARS} letters, digits, dots, hyphens and underscores"
        ),
    )
}

/// What a create or update asks for, as [`PlatformInput::parse`] read it: the shape is checked,
/// the credentials are not yet (that is the
/// [`CredentialValidator`](super::CredentialValidator)'s work).
#[derive(Debug, Clone, PartialEq)]
pub struct PlatformInput {
    /// `appId`: 1 to 256 letters, digits, dots, hyphens and underscores.
    pub app_id: String,
    /// `platform`: `GCM`, `FCM`, `APNS` or `APNS_SANDBOX`, as sent.
    pub platform: String,
    /// `platformCredential`, secret: service-account JSON (FCM), the certificate's private key
    /// (iOS certificate) or a .p8 key (iOS token). Not blank, at most 16,384 characters.
    pub credential: String,
    /// `platformPrincipal`, secret: the PEM certificate (iOS certificate) or the key id (iOS
    /// token); None or empty for FCM. At most 16,384 characters.
    pub principal: Option<String>,
    /// `channelId`, `restrictedPackageName` (Android); `teamId`, `bundleId` (iOS token).
    pub properties: Map<String, Value>,
}

impl PlatformInput {
    /// Reads a create/update body; every problem at once. Unknown fields are ignored.
    ///
    /// Fails with [`DomainError::Validation`] listing each field's problem: a body that is
    /// not an object (field `""`), `appId`, `platform` or `platformCredential` missing or not
    /// valid, a text longer than 16,384 characters, and a `platformProperties` that is not an
    /// object of strings or has a key other than `channelId`, `restrictedPackageName`,
    /// `teamId` and `bundleId`.
    pub fn parse(body: &Value) -> Result<PlatformInput, DomainError> {
        let Some(obj) = body.as_object() else {
            return Err(DomainError::invalid("", "the body must be a JSON object"));
        };
        let mut errors = Vec::new();
        let app_id = text_field(obj, "appId", true, &mut errors).unwrap_or_default();
        let platform = text_field(obj, "platform", true, &mut errors).unwrap_or_default();
        let credential =
            text_field(obj, "platformCredential", true, &mut errors).unwrap_or_default();
        let principal = text_field(obj, "platformPrincipal", false, &mut errors);
        check_texts(obj, &app_id, &platform, &credential, &mut errors);
        let properties = properties_field(obj, &mut errors);
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

    /// The value of a `platformProperties` key (`channelId`, `teamId`, ...); None when it was
    /// not given.
    pub fn property(&self, key: &str) -> Option<&str> {
        self.properties.get(key).and_then(Value::as_str)
    }
}

/// The keys a `platformProperties` object may hold.
const PROPERTY_KEYS: [&str; 4] = ["channelId", "restrictedPackageName", "teamId", "bundleId"];

/// A text field of a platform body, at most [`MAX_CREDENTIAL_CHARS`] characters; None (with
/// its problem in `errors`) when it is missing but `required`, not a string, or too long.
fn text_field(
    obj: &Map<String, Value>,
    key: &str,
    required: bool,
    errors: &mut Vec<FieldError>,
) -> Option<String> {
    match obj.get(key) {
        None | Some(Value::Null) if !required => None,
        Some(Value::String(s)) if s.chars().count() <= MAX_CREDENTIAL_CHARS => Some(s.clone()),
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
}

/// The values of the text fields that were sent as strings: a valid app id, a known
/// platform, a credential that is not blank.
fn check_texts(
    obj: &Map<String, Value>,
    app_id: &str,
    platform: &str,
    credential: &str,
    errors: &mut Vec<FieldError>,
) {
    if obj.get("appId").is_some_and(Value::is_string) && !valid_app_id(app_id) {
        errors.push(app_id_problem());
    }
    if obj.get("platform").is_some_and(Value::is_string) && provider_of(platform).is_none() {
        errors.push(FieldError::new(
            "platform",
            "must be GCM, FCM, APNS or APNS_SANDBOX",
        ));
    }
    if obj.get("platformCredential").is_some_and(Value::is_string) && credential.trim().is_empty() {
        errors.push(FieldError::new("platformCredential", "must not be empty"));
    }
}

/// `platformProperties`: an object of strings under [`PROPERTY_KEYS`]; empty when not sent.
fn properties_field(obj: &Map<String, Value>, errors: &mut Vec<FieldError>) -> Map<String, Value> {
    match obj.get("platformProperties") {
        None | Some(Value::Null) => Map::new(),
        Some(Value::Object(p)) => {
            for (k, v) in p {
                if !PROPERTY_KEYS.contains(&k.as_str()) {
                    errors.push(FieldError::new(
                        format!("platformProperties.{k}"),
                        "is not a property this service knows (channelId, \
                            restrictedPackageName, teamId, bundleId)",
                    ));
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
    }
}
