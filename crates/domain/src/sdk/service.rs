//! [`SdkKeyService`]: the SDK keys of an environment, and end users signed in with their tokens
//! (contract §15).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use chrono::Duration;
use serde_json::{Map, Value};

use super::keys::{
    check_fields, default_days, CheckedFields, SdkKey, SdkKeyInput, SdkKeyRepository,
};
use super::keys::{MAX_SDK_KEYS, SDK_KEY_NAME_MAX_CHARS};
use super::{verify_token, PublicKeyInput, TokenClaims, TokenRefusal, TokenVerifier};
use crate::audience::{validate_user_id, EndUserRepository, ATTRIBUTE_VALUE_MAX_CHARS};
use crate::id::{EnvironmentId, SdkKeyId};
use crate::secret::SecretHash;
use crate::{
    Clock, ConflictKind, DomainError, FieldError, Permission, Principal, Resource, StorageError,
    Timestamp,
};

/// How long a key read from storage is used before it is read again: a key deleted or changed
/// through another process stops verifying within this (contract §15: within 1 s). One
/// deleted or changed through this process stops at once.
pub const KEY_TTL_MS: i64 = 500;
/// Keys (and names that are no key) remembered at most; past it the memory starts afresh.
const KEY_CACHE_MAX: usize = 10_000;
/// The locks the reads of environments' keys take (see `SdkKeyService::refreshing`).
const READ_LOCKS: usize = 64;
/// Verified tokens remembered at most; past it the memory starts afresh.
const TOKEN_CACHE_MAX: usize = 100_000;

/// An environment's keys as remembered (at most [`super::MAX_SDK_KEYS`]), and until when they
/// are used without reading storage again: a token naming a key the environment lacks costs no
/// read either.
type KnownKeys = (Arc<Vec<Arc<SdkKey>>>, Timestamp);

/// A token whose signature and claims passed: for whom, under which version of which key, and
/// until when. A request presenting it again costs a hash and two lookups, not a signature
/// check, and does not touch its user again.
#[derive(Debug, Clone)]
struct Verified {
    environment_id: String,
    end_user: String,
    /// The key's name (the token's `kid`), id and version.
    kid: String,
    key_id: SdkKeyId,
    key_updated: Timestamp,
    /// `exp`, in seconds since the epoch.
    expires: i64,
}

/// What a ticket keeps of the user token it was minted with, so that the stream it opens ends
/// when that token would no longer sign in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TicketGrant {
    /// The SDK key's name (the token's `kid`).
    pub kid: String,
    /// The SDK key's id.
    pub key_id: SdkKeyId,
    /// The version of the key that verified the token.
    pub key_updated: Timestamp,
    /// The token's `exp`, in seconds since the epoch.
    pub token_expires: i64,
}

/// SDK keys: added, listed, changed and deleted by keys with `sdk_keys:read` /
/// `sdk_keys:write` (role `workbench`), and the tokens they verify turned into the end user
/// they are for ([`SdkKeyService::authenticate_user`]).
///
/// Share one per process: it remembers keys for [`KEY_TTL_MS`] and verified tokens until
/// they expire, and a change through it forgets them at once.
pub struct SdkKeyService {
    keys: Arc<dyn SdkKeyRepository>,
    users: Arc<dyn EndUserRepository>,
    verifier: Arc<dyn TokenVerifier>,
    clock: Arc<dyn Clock>,
    known: Mutex<HashMap<String, KnownKeys>>,
    /// Bumped by every change through this service: a read of storage that began before it
    /// does not put what it read back in memory.
    changes: std::sync::atomic::AtomicU64,
    verified: Mutex<HashMap<SecretHash, Verified>>,
    /// Held while the keys of an environment are read again, so that when they go stale the
    /// requests and streams that need them wait for one read instead of each making its own
    /// (a thousand streams checking their tokens at once were a thousand reads). One lock of
    /// [`READ_LOCKS`] per environment, by its hash: the reads of one environment do not wait
    /// for another's, but for the few that share its lock.
    refreshing: Vec<futures_util::lock::Mutex<()>>,
}

impl SdkKeyService {
    /// A service storing keys in `keys`, creating end users in `users`, checking keys and
    /// signatures with `verifier`, and reading the time from `clock`.
    pub fn new(
        keys: Arc<dyn SdkKeyRepository>,
        users: Arc<dyn EndUserRepository>,
        verifier: Arc<dyn TokenVerifier>,
        clock: Arc<dyn Clock>,
    ) -> Self {
        Self {
            keys,
            users,
            verifier,
            clock,
            known: Mutex::new(HashMap::new()),
            changes: std::sync::atomic::AtomicU64::new(0),
            verified: Mutex::new(HashMap::new()),
            refreshing: (0..READ_LOCKS)
                .map(|_| futures_util::lock::Mutex::new(()))
                .collect(),
        }
    }

    /// Adds an SDK key. Needs `sdk_keys:write`. Every problem of the fields and of the public
    /// key comes back at once as [`DomainError::Validation`] (a key that is not RSA of 2048
    /// bits or more or EC P-256 names the problem at `publicKey` or `jwks`); a name the
    /// environment has is a `sdk_key_name_taken` conflict, and an environment holding
    /// [`MAX_SDK_KEYS`] keys a `sdk_key_limit_reached` one.
    pub async fn create(
        &self,
        who: &Principal,
        env: &EnvironmentId,
        input: SdkKeyInput,
    ) -> Result<SdkKey, DomainError> {
        who.authorize(env, Permission::SdkKeysWrite)?;
        let mut errors = Vec::new();
        if input.name.is_none() {
            errors.push(FieldError::new("name", "is required"));
        }
        if input.public_key.is_none() {
            errors.push(FieldError::new(
                "publicKey",
                "send `publicKey` (a PEM public key) or `jwks` (a JSON Web Key Set)",
            ));
        }
        let (
            CheckedFields {
                days,
                issuers,
                mappings,
                origins,
            },
            keys,
        ) = self.checked(errors, &input)?;
        if self.keys.list(env).await?.len() >= MAX_SDK_KEYS {
            return Err(DomainError::conflict(
                ConflictKind::SdkKeyLimit,
                format!("an environment holds at most {MAX_SDK_KEYS} SDK keys"),
            ));
        }
        let now = self.clock.now();
        let key = SdkKey {
            id: SdkKeyId::mint(),
            environment_id: env.to_string(),
            name: input.name.unwrap_or_default(),
            keys: keys.unwrap_or_default(),
            max_token_expiry_days: days.unwrap_or(default_days()),
            allowed_issuers: issuers.unwrap_or_default(),
            claim_mappings: mappings.unwrap_or_default(),
            allowed_origins: origins.unwrap_or_default(),
            created: now,
            updated: now,
        };
        match self.keys.insert(&key).await {
            Ok(()) => {}
            Err(StorageError::UniqueViolation(_)) => return Err(name_taken(&key.name)),
            Err(e) => return Err(e.into()),
        }
        self.forget(env);
        Ok(key)
    }

    /// The environment's SDK keys, by name. Needs `sdk_keys:read`.
    pub async fn list(
        &self,
        who: &Principal,
        env: &EnvironmentId,
    ) -> Result<Vec<SdkKey>, DomainError> {
        who.authorize(env, Permission::SdkKeysRead)?;
        Ok(self.keys.list(env).await?)
    }

    /// One SDK key. Needs `sdk_keys:read`; [`DomainError::NotFound`] when the environment has
    /// no such key.
    pub async fn get(
        &self,
        who: &Principal,
        env: &EnvironmentId,
        id: &SdkKeyId,
    ) -> Result<SdkKey, DomainError> {
        who.authorize(env, Permission::SdkKeysRead)?;
        self.keys
            .get(env, id)
            .await?
            .ok_or(DomainError::NotFound(Resource::SdkKey))
    }

    /// Changes the fields sent of an SDK key (a new `publicKey` or `jwks` replaces its public
    /// keys). Needs `sdk_keys:write`. Tokens verified under the key as it was are verified
    /// again under the key as it is, at once in this process and within [`KEY_TTL_MS`] in the
    /// others; a new name changes the `kid` its tokens must carry.
    pub async fn update(
        &self,
        who: &Principal,
        env: &EnvironmentId,
        id: &SdkKeyId,
        input: SdkKeyInput,
    ) -> Result<SdkKey, DomainError> {
        who.authorize(env, Permission::SdkKeysWrite)?;
        let (
            CheckedFields {
                days,
                issuers,
                mappings,
                origins,
            },
            keys,
        ) = self.checked(Vec::new(), &input)?;
        let mut key = self
            .keys
            .get(env, id)
            .await?
            .ok_or(DomainError::NotFound(Resource::SdkKey))?;
        if let Some(name) = input.name {
            key.name = name;
        }
        if let Some(keys) = keys {
            key.keys = keys;
        }
        if let Some(days) = days {
            key.max_token_expiry_days = days;
        }
        if let Some(issuers) = issuers {
            key.allowed_issuers = issuers;
        }
        if let Some(mappings) = mappings {
            key.claim_mappings = mappings;
        }
        if let Some(origins) = origins {
            key.allowed_origins = origins;
        }
        // Later than the version it replaces, even within one millisecond: a token verified
        // under that version must not pass as verified under this one.
        key.updated = self.clock.now().max(
            key.updated
                .checked_add_signed(Duration::milliseconds(1))
                .unwrap_or(key.updated),
        );
        let updated = match self.keys.update(&key).await {
            Ok(updated) => updated,
            Err(StorageError::UniqueViolation(_)) => return Err(name_taken(&key.name)),
            Err(e) => return Err(e.into()),
        };
        self.forget(env);
        if !updated {
            return Err(DomainError::NotFound(Resource::SdkKey));
        }
        Ok(key)
    }

    /// Deletes an SDK key. Needs `sdk_keys:write`. Its tokens fail at once in this process,
    /// and within [`KEY_TTL_MS`] in the others.
    pub async fn delete(
        &self,
        who: &Principal,
        env: &EnvironmentId,
        id: &SdkKeyId,
    ) -> Result<(), DomainError> {
        who.authorize(env, Permission::SdkKeysWrite)?;
        let deleted = self.keys.delete(env, id).await?;
        self.forget(env);
        if deleted {
            Ok(())
        } else {
            Err(DomainError::NotFound(Resource::SdkKey))
        }
    }

    /// The end user a request to `end_user`'s own routes of `env` signed in as, from its
    /// token (contract §15). The token must name an SDK key of the environment as its `kid`,
    /// be signed with it under the one algorithm of its type, and pass
    /// [`check_claims`](super::check_claims) for `end_user` now. Each refusal is a
    /// [`DomainError::TokenRefused`] with its reason.
    ///
    /// A token verified once is remembered until it expires, so that presenting it again
    /// reads no key and checks no signature, as long as its key is unchanged. The first time
    /// this process sees a token, the end user is created if the environment has no user of
    /// that id, and the claims the key maps are set as its attributes.
    pub async fn authenticate_user(
        &self,
        env: &EnvironmentId,
        end_user: &str,
        token: &str,
    ) -> Result<Principal, DomainError> {
        let seen = self.verified(env, end_user, token).await?;
        Ok(Principal::end_user(&seen.key_id, env, end_user))
    }

    /// What a stream ticket minted with `token` holds on to ([`TicketGrant`]): the token is
    /// checked as [`authenticate_user`](Self::authenticate_user) checks it, with the same
    /// answers.
    pub async fn grant(
        &self,
        env: &EnvironmentId,
        end_user: &str,
        token: &str,
    ) -> Result<TicketGrant, DomainError> {
        let seen = self.verified(env, end_user, token).await?;
        Ok(TicketGrant {
            kid: seen.kid,
            key_id: seen.key_id,
            key_updated: seen.key_updated,
            token_expires: seen.expires,
        })
    }

    /// Whether the token behind `grant` would still sign its user in: not expired, and its
    /// SDK key in the environment unchanged (read again at most every [`KEY_TTL_MS`]).
    pub async fn grant_holds(
        &self,
        env: &EnvironmentId,
        grant: &TicketGrant,
    ) -> Result<bool, DomainError> {
        let now = self.clock.now();
        if grant.token_expires < now.timestamp().saturating_sub(super::LEEWAY_SECONDS) {
            return Ok(false);
        }
        let current = self.key(env, &grant.kid, now).await?;
        Ok(current.is_some_and(|key| key.id == grant.key_id && key.updated == grant.key_updated))
    }

    /// Whether a key of `env` lists `origin` in its `allowedOrigins` (read again at most every
    /// [`KEY_TTL_MS`]): a browser page of that origin may then call its end users' routes.
    pub async fn allows_origin(
        &self,
        env: &EnvironmentId,
        origin: &str,
    ) -> Result<bool, DomainError> {
        let keys = self.keys_of(env, self.clock.now()).await?;
        Ok(keys
            .iter()
            .any(|key| key.allowed_origins.iter().any(|o| o == origin)))
    }

    /// The token checked, from memory when this process verified it under the key as it is.
    /// The end user a request to `end_user`'s own routes of `env` signed in as, from its
    /// token (contract §15). The token must name an SDK key of the environment as its `kid`,
    /// be signed with it under the one algorithm of its type, and pass
    /// [`check_claims`](super::check_claims) for `end_user` now. Each refusal is a
    /// [`DomainError::TokenRefused`] with its reason.
    ///
    /// A token verified once is remembered until it expires, so that presenting it again
    /// reads no key and checks no signature, as long as its key is unchanged. The first time
    /// this process sees a token, the end user is created if the environment has no user of
    /// that id, and the claims the key maps are set as its attributes.
    async fn verified(
        &self,
        env: &EnvironmentId,
        end_user: &str,
        token: &str,
    ) -> Result<Verified, DomainError> {
        let now = self.clock.now();
        let seconds = now.timestamp();
        let hash = SecretHash::of(token);
        if let Some(seen) = self.remembered(&hash) {
            let fresh = seen.expires >= seconds.saturating_sub(super::LEEWAY_SECONDS);
            if seen.environment_id == env.as_str() && fresh {
                if seen.end_user != end_user {
                    return Err(DomainError::TokenRefused(TokenRefusal::OtherUser));
                }
                // The key as it is now (read again at most every KEY_TTL_MS): deleted or
                // changed since, the token is verified again.
                let current = self.key(env, &seen.kid, now).await?;
                if current
                    .is_some_and(|key| key.id == seen.key_id && key.updated == seen.key_updated)
                {
                    return Ok(seen);
                }
            }
        }
        let header = self
            .verifier
            .header(token)
            .map_err(DomainError::TokenRefused)?;
        let kid = header.kid.clone().unwrap_or_default();
        let key = if kid.is_empty() || kid.len() > SDK_KEY_NAME_MAX_CHARS {
            None
        } else {
            self.key(env, &kid, now).await?
        };
        let claims = verify_token(
            self.verifier.as_ref(),
            token,
            |_| key.as_ref().map(|k| (k.keys.clone(), k.policy())),
            end_user,
            seconds,
        )
        .map_err(DomainError::TokenRefused)?;
        let Some(key) = key else {
            return Err(DomainError::TokenRefused(TokenRefusal::UnknownKey));
        };
        self.first_seen(env, end_user, &key, &claims, now).await?;
        let seen = Verified {
            environment_id: env.to_string(),
            end_user: end_user.to_owned(),
            kid: key.name.clone(),
            key_id: key.id.clone(),
            key_updated: key.updated,
            expires: claims.exp.unwrap_or(seconds),
        };
        self.remember(hash, seen.clone());
        Ok(seen)
    }

    /// A token seen for the first time by this process: its end user is created if missing,
    /// and the claims its key maps are set as the user's attributes.
    async fn first_seen(
        &self,
        env: &EnvironmentId,
        end_user: &str,
        key: &SdkKey,
        claims: &TokenClaims,
        now: Timestamp,
    ) -> Result<(), DomainError> {
        let mut problems = Vec::new();
        validate_user_id(&mut problems, "sub", end_user);
        if !problems.is_empty() {
            return Err(DomainError::TokenRefused(TokenRefusal::Malformed));
        }
        let attributes = mapped_attributes(key, &claims.other);
        self.users
            .merge_attributes(env, end_user, attributes, now)
            .await?;
        Ok(())
    }

    /// The fields sent, checked, and the public keys read: every problem, with those already
    /// found in `errors`, as one [`DomainError::Validation`].
    fn checked(
        &self,
        mut errors: Vec<FieldError>,
        input: &SdkKeyInput,
    ) -> Result<(CheckedFields, Option<Vec<super::VerifyingKey>>), DomainError> {
        let fields = check_fields(&mut errors, input);
        let keys = self.read_keys(&mut errors, input.public_key.as_ref());
        if errors.is_empty() {
            Ok((fields, keys))
        } else {
            Err(DomainError::Validation(errors))
        }
    }

    fn read_keys(
        &self,
        errors: &mut Vec<FieldError>,
        input: Option<&PublicKeyInput>,
    ) -> Option<Vec<super::VerifyingKey>> {
        let input = input?;
        match self.verifier.read_keys(input) {
            Ok(keys) => Some(keys),
            Err(why) => {
                let field = match input {
                    PublicKeyInput::Pem(_) => "publicKey",
                    PublicKeyInput::Jwks(_) => "jwks",
                };
                errors.push(FieldError::new(field, why));
                None
            }
        }
    }

    /// The key named `name` in `env` (or `None`), from the environment's keys.
    async fn key(
        &self,
        env: &EnvironmentId,
        name: &str,
        now: Timestamp,
    ) -> Result<Option<Arc<SdkKey>>, DomainError> {
        let keys = self.keys_of(env, now).await?;
        Ok(keys.iter().find(|k| k.name == name).cloned())
    }

    /// The keys of `env`, in memory while fresh, else read again from storage (all of them, so
    /// that unknown names cost nothing).
    async fn keys_of(
        &self,
        env: &EnvironmentId,
        now: Timestamp,
    ) -> Result<Arc<Vec<Arc<SdkKey>>>, DomainError> {
        use std::sync::atomic::Ordering;
        let remembered = || {
            self.known
                .lock()
                .ok()
                .and_then(|k| k.get(env.as_str()).cloned())
                .filter(|(_, until)| *until > now)
        };
        if let Some((keys, _)) = remembered() {
            return Ok(keys);
        }
        // One read of an environment at a time; whoever waited finds what the read before it
        // remembered.
        let lock = {
            use std::hash::{Hash, Hasher};
            let mut hasher = std::collections::hash_map::DefaultHasher::new();
            env.as_str().hash(&mut hasher);
            let at = usize::try_from(hasher.finish() % READ_LOCKS as u64).unwrap_or(0);
            self.refreshing.get(at)
        };
        let _reading = match lock {
            Some(lock) => Some(lock.lock().await),
            None => None,
        };
        let keys = match remembered() {
            Some((keys, _)) => keys,
            None => {
                let before = self.changes.load(Ordering::Acquire);
                let keys: Arc<Vec<Arc<SdkKey>>> = Arc::new(
                    self.keys
                        .list(env)
                        .await?
                        .into_iter()
                        .map(Arc::new)
                        .collect(),
                );
                if let Ok(mut known) = self.known.lock() {
                    if self.changes.load(Ordering::Acquire) == before {
                        if known.len() >= KEY_CACHE_MAX {
                            known.clear();
                        }
                        // At the calendar's edge the keys are not remembered (contract §10).
                        if let Some(until) =
                            now.checked_add_signed(Duration::milliseconds(KEY_TTL_MS))
                        {
                            known.insert(env.to_string(), (keys.clone(), until));
                        }
                    }
                }
                keys
            }
        };
        Ok(keys)
    }

    fn remembered(&self, hash: &SecretHash) -> Option<Verified> {
        self.verified.lock().ok()?.get(hash).cloned()
    }

    fn remember(&self, hash: SecretHash, seen: Verified) {
        if let Ok(mut verified) = self.verified.lock() {
            if verified.len() >= TOKEN_CACHE_MAX {
                verified.clear();
            }
            verified.insert(hash, seen);
        }
    }

    /// Forgets the keys of `env`, and so every token they verified: read again at the next
    /// token.
    fn forget(&self, env: &EnvironmentId) {
        self.changes
            .fetch_add(1, std::sync::atomic::Ordering::AcqRel);
        if let Ok(mut known) = self.known.lock() {
            known.remove(env.as_str());
        }
    }
}

fn name_taken(name: &str) -> DomainError {
    DomainError::conflict(
        ConflictKind::SdkKeyNameTaken,
        format!("the environment has an SDK key named `{name}`"),
    )
}

/// The attributes a token's claims set through its key's mappings: each mapped claim that is
/// a string (of at most [`ATTRIBUTE_VALUE_MAX_CHARS`] characters), a number or a boolean;
/// other claims are left out.
pub fn mapped_attributes(key: &SdkKey, claims: &Map<String, Value>) -> Map<String, Value> {
    key.claim_mappings
        .iter()
        .filter_map(|(claim, attribute)| {
            let value = claims.get(claim)?;
            let keep = match value {
                Value::String(s) => s.chars().count() <= ATTRIBUTE_VALUE_MAX_CHARS,
                Value::Number(_) | Value::Bool(_) => true,
                _ => false,
            };
            keep.then(|| (attribute.clone(), value.clone()))
        })
        .collect()
}

#[cfg(test)]
mod tests;
