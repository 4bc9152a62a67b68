//! SDK keys as stored and as sent (contract §15): a name that tokens give as their `kid`, the
//! public keys that verify them, and what the tokens may say.

use std::collections::BTreeMap;

use async_trait::async_trait;

use super::{
    PublicKeyInput, TokenPolicy, VerifyingKey, DEFAULT_MAX_TOKEN_EXPIRY_DAYS, MAX_TOKEN_EXPIRY_DAYS,
};
use crate::audience::ATTRIBUTE_NAME_MAX_CHARS;
use crate::id::SdkKeyId;
use crate::{FieldError, StorageError, Timestamp};

/// Longest SDK key name, in characters: the `kid` of its tokens.
pub const SDK_KEY_NAME_MAX_CHARS: usize = 64;
/// The most SDK keys an environment holds.
pub const MAX_SDK_KEYS: usize = 50;
/// The most `allowedIssuers` of one key.
pub const MAX_ALLOWED_ISSUERS: usize = 10;
/// Longest issuer, in characters.
pub const ISSUER_MAX_CHARS: usize = 256;
/// The most `claimMappings` of one key.
pub const MAX_CLAIM_MAPPINGS: usize = 20;
/// Longest claim name in a mapping, in characters.
pub const CLAIM_MAX_CHARS: usize = 64;
/// What a mapping's target starts with: claims map into the user's attributes.
pub const ATTRIBUTE_TARGET_PREFIX: &str = "attributes.";

/// An SDK key of an environment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SdkKey {
    /// `sdk_...`.
    pub id: SdkKeyId,
    /// The environment whose end users' tokens it verifies.
    pub environment_id: String,
    /// Unique in the environment: a token names its key by this, as its header's `kid`.
    pub name: String,
    /// The public keys (one from a PEM, up to [`super::MAX_JWKS_KEYS`] from a JWKS), each RSA
    /// of 2048 to 4096 bits or EC P-256.
    pub keys: Vec<VerifyingKey>,
    /// `maxTokenExpiryDays`: the longest `exp - iat` of its tokens, 1 to
    /// [`MAX_TOKEN_EXPIRY_DAYS`].
    pub max_token_expiry_days: u32,
    /// `allowedIssuers`: when not empty, a token's `iss` must be one of them.
    pub allowed_issuers: Vec<String>,
    /// `claimMappings`: a token claim's name → the name of the user attribute it sets (the
    /// part after [`ATTRIBUTE_TARGET_PREFIX`]).
    pub claim_mappings: BTreeMap<String, String>,
    /// `allowedOrigins`: the web origins whose pages may call its end users' routes from a
    /// browser (docs/api.md, Browser access), each as a browser writes its `Origin`.
    pub allowed_origins: Vec<String>,
    /// When it was added.
    pub created: Timestamp,
    /// When it was last changed; a change makes every token of it verified again.
    pub updated: Timestamp,
}

impl SdkKey {
    /// What a token's checks need of it (the type is the key's that verified the token).
    pub fn policy(&self) -> TokenPolicy {
        TokenPolicy {
            kind: self
                .keys
                .first()
                .map_or(super::SdkKeyKind::Rsa, |key| key.kind),
            max_token_expiry_days: self.max_token_expiry_days,
            allowed_issuers: self.allowed_issuers.clone(),
        }
    }
}

/// A `POST /sdk-keys` body, or the fields a `PATCH` sends (each `None` when not sent).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SdkKeyInput {
    /// `name`: required to add a key.
    pub name: Option<String>,
    /// `publicKey` or `jwks`: one of them is required to add a key.
    pub public_key: Option<PublicKeyInput>,
    /// `maxTokenExpiryDays`, as sent ([`DEFAULT_MAX_TOKEN_EXPIRY_DAYS`] when a new key has
    /// none).
    pub max_token_expiry_days: Option<i64>,
    /// `allowedIssuers`; an empty list lets any issuer in.
    pub allowed_issuers: Option<Vec<String>>,
    /// `claimMappings`, claim → `attributes.<name>`; an empty map maps nothing.
    pub claim_mappings: Option<BTreeMap<String, String>>,
    /// `allowedOrigins`; an empty list lets no browser page in.
    pub allowed_origins: Option<Vec<String>>,
}

/// The fields of an [`SdkKeyInput`] once checked, each `None` when not sent (or invalid).
pub(super) struct CheckedFields {
    pub(super) days: Option<u32>,
    pub(super) issuers: Option<Vec<String>>,
    pub(super) mappings: Option<BTreeMap<String, String>>,
    pub(super) origins: Option<Vec<String>>,
}

/// Checks the fields sent (not the public key: that is the verifier's to read), adding every
/// problem to `errors`, and answers them normalised: the days as a number, issuers deduplicated
/// in their order, mapping targets as attribute names.
pub(super) fn check_fields(errors: &mut Vec<FieldError>, input: &SdkKeyInput) -> CheckedFields {
    if let Some(name) = &input.name {
        errors.extend(check_name(name));
    }
    let days = input
        .max_token_expiry_days
        .and_then(|days| check_days(errors, days));
    let issuers = input
        .allowed_issuers
        .as_ref()
        .map(|issuers| check_issuers(errors, issuers));
    let mappings = input
        .claim_mappings
        .as_ref()
        .map(|mappings| check_mappings(errors, mappings));
    let origins = input
        .allowed_origins
        .as_deref()
        .map(|origins| super::origins::check_origins(errors, origins));
    CheckedFields {
        days,
        issuers,
        mappings,
        origins,
    }
}

/// `maxTokenExpiryDays` as a number of days, 1 to [`MAX_TOKEN_EXPIRY_DAYS`].
fn check_days(errors: &mut Vec<FieldError>, days: i64) -> Option<u32> {
    match u32::try_from(days) {
        Ok(d) if (1..=MAX_TOKEN_EXPIRY_DAYS).contains(&d) => Some(d),
        _ => {
            errors.push(FieldError::new(
                "maxTokenExpiryDays",
                format!("must be a whole number of days from 1 to {MAX_TOKEN_EXPIRY_DAYS}"),
            ));
            None
        }
    }
}

/// `allowedIssuers` deduplicated in their order, without those that are not valid.
fn check_issuers(errors: &mut Vec<FieldError>, issuers: &[String]) -> Vec<String> {
    if issuers.len() > MAX_ALLOWED_ISSUERS {
        errors.push(FieldError::new(
            "allowedIssuers",
            format!("at most {MAX_ALLOWED_ISSUERS} issuers"),
        ));
    }
    let mut kept: Vec<String> = Vec::with_capacity(issuers.len());
    for (i, issuer) in issuers.iter().enumerate() {
        let length = issuer.chars().count();
        if length == 0 || length > ISSUER_MAX_CHARS || issuer.chars().any(char::is_control) {
            errors.push(FieldError::new(
                format!("allowedIssuers[{i}]"),
                format!(
                    "an issuer is 1 to {ISSUER_MAX_CHARS} characters without control \
                     characters"
                ),
            ));
        } else if !kept.contains(issuer) {
            kept.push(issuer.clone());
        }
    }
    kept
}

/// `claimMappings` with their targets as attribute names, without those that are not valid.
fn check_mappings(
    errors: &mut Vec<FieldError>,
    mappings: &BTreeMap<String, String>,
) -> BTreeMap<String, String> {
    if mappings.len() > MAX_CLAIM_MAPPINGS {
        errors.push(FieldError::new(
            "claimMappings",
            format!("at most {MAX_CLAIM_MAPPINGS} mappings"),
        ));
    }
    let mut kept = BTreeMap::new();
    for (claim, target) in mappings {
        let field = format!("claimMappings.{claim}");
        let length = claim.chars().count();
        if length == 0 || length > CLAIM_MAX_CHARS || claim.chars().any(char::is_control) {
            errors.push(FieldError::new(
                &field,
                format!("a claim is 1 to {CLAIM_MAX_CHARS} characters without control characters"),
            ));
            continue;
        }
        match target.strip_prefix(ATTRIBUTE_TARGET_PREFIX) {
            Some(attribute)
                if !attribute.is_empty()
                    && attribute.chars().count() <= ATTRIBUTE_NAME_MAX_CHARS =>
            {
                kept.insert(claim.clone(), attribute.to_owned());
            }
            _ => errors.push(FieldError::new(
                &field,
                format!(
                    "must be `attributes.<name>`, a name of 1 to {ATTRIBUTE_NAME_MAX_CHARS} \
                     characters"
                ),
            )),
        }
    }
    kept
}

/// A name tokens can carry as their `kid`: 1 to [`SDK_KEY_NAME_MAX_CHARS`] ASCII letters,
/// digits, `.`, `_` and `-`.
pub fn check_name(name: &str) -> Option<FieldError> {
    let ok = !name.is_empty()
        && name.len() <= SDK_KEY_NAME_MAX_CHARS
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
    (!ok).then(|| {
        FieldError::new(
            "name",
            format!(
                "must be 1 to {SDK_KEY_NAME_MAX_CHARS} letters, digits, `.`, `_` or `-` (tokens \
                 name the key by it as their `kid`)"
            ),
        )
    })
}

/// The days a new key allows when none are sent.
pub(super) const fn default_days() -> u32 {
    DEFAULT_MAX_TOKEN_EXPIRY_DAYS
}

/// Storage of SDK keys (a port). Every call is scoped to its environment.
#[cfg_attr(feature = "mock", mockall::automock)]
#[async_trait]
pub trait SdkKeyRepository: Send + Sync {
    /// Stores a new key. A name the environment already has must be a
    /// [`StorageError::UniqueViolation`] (answered `sdk_key_name_taken`), and an environment
    /// that does not exist a [`StorageError::ForeignKeyViolation`].
    async fn insert(&self, key: &SdkKey) -> Result<(), StorageError>;
    /// The key with this id in the environment, or `None`.
    async fn get(&self, environment_id: &str, id: &str) -> Result<Option<SdkKey>, StorageError>;
    /// The key with this name in the environment, or `None`: what a token's `kid` names.
    async fn find_by_name(
        &self,
        environment_id: &str,
        name: &str,
    ) -> Result<Option<SdkKey>, StorageError>;
    /// Every key of the environment, by name.
    async fn list(&self, environment_id: &str) -> Result<Vec<SdkKey>, StorageError>;
    /// Replaces the key's name, public keys, days, issuers, mappings, origins and `updated`
    /// (found by its environment and id). False when there is no such key; a name another key
    /// of the environment has is a [`StorageError::UniqueViolation`].
    async fn update(&self, key: &SdkKey) -> Result<bool, StorageError>;
    /// Deletes the key. False when there was no such key in the environment.
    async fn delete(&self, environment_id: &str, id: &str) -> Result<bool, StorageError>;
}
