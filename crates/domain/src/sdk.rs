//! End users signing in as themselves (contract §15): the rules a user token must pass before
//! it reaches that user's own routes. A customer's backend signs a JWT for its signed-in user
//! with its private key; the public half is stored as an SDK key of the environment. Checking
//! the signature is a crypto library's work, behind an adapter; everything decided about the
//! token — which algorithm its key allows, whose token it is, when it is valid, who issued
//! it — is decided here, as pure functions.
//!
//! ```
//! use workbench_domain::sdk::{check_claims, check_header, SdkKeyKind, TokenClaims,
//!     TokenHeader, TokenPolicy, TokenRefusal};
//!
//! let policy = TokenPolicy { kind: SdkKeyKind::EcP256, max_token_expiry_days: 7,
//!     allowed_issuers: vec![] };
//! // The algorithm is bound to the key's type: `none`, `HS256` or `RS256` never verify
//! // against an EC key.
//! assert_eq!(check_header(&TokenHeader::new("app", "ES256"), SdkKeyKind::EcP256), Ok(()));
//! assert_eq!(
//!     check_header(&TokenHeader::new("app", "HS256"), SdkKeyKind::EcP256),
//!     Err(TokenRefusal::Algorithm)
//! );
//! let now = 1_800_000_000;
//! let claims = TokenClaims { sub: Some("u1".into()), iat: Some(now - 60),
//!     exp: Some(now + 3_600), ..TokenClaims::default() };
//! assert_eq!(check_claims(&claims, &policy, "u1", now), Ok(()));
//! assert_eq!(check_claims(&claims, &policy, "u2", now), Err(TokenRefusal::OtherUser));
//! ```

pub use crate::error::TokenRefusal;

/// How long a token may live by default, `exp - iat` (`maxTokenExpiryDays`).
pub const DEFAULT_MAX_TOKEN_EXPIRY_DAYS: u32 = 7;
/// The longest a key may let its tokens live.
pub const MAX_TOKEN_EXPIRY_DAYS: u32 = 30;
/// How far clocks may disagree: `exp`, `nbf` and `iat` are checked with this much slack.
pub const LEEWAY_SECONDS: i64 = 60;
const DAY_SECONDS: i64 = 86_400;

/// The type of an SDK key's public key, which fixes the one algorithm its tokens may use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SdkKeyKind {
    /// RSA of 2048 to 4096 bits: tokens signed `RS256`.
    Rsa,
    /// EC on P-256: tokens signed `ES256`.
    EcP256,
}

crate::spelling::spelled!(SdkKeyKind {
    Rsa => "RSA",
    EcP256 => "EC",
});

impl SdkKeyKind {
    /// The JWT `alg` a token verified by a key of this type must name: `RS256` or `ES256`.
    pub const fn algorithm(self) -> &'static str {
        match self {
            SdkKeyKind::Rsa => "RS256",
            SdkKeyKind::EcP256 => "ES256",
        }
    }
}

/// What a token's checks need of the SDK key its `kid` names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenPolicy {
    /// The key's type, and so the algorithm its tokens use.
    pub kind: SdkKeyKind,
    /// `maxTokenExpiryDays`: the longest `exp - iat` may be, in days (1 to
    /// [`MAX_TOKEN_EXPIRY_DAYS`]).
    pub max_token_expiry_days: u32,
    /// `allowedIssuers`: when not empty, `iss` must be one of them.
    pub allowed_issuers: Vec<String>,
}

/// A token's header, as sent.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TokenHeader {
    /// `kid`: the name of the SDK key that verifies the token.
    pub kid: Option<String>,
    /// `alg`, as written (`RS256`, `ES256`, `none`, ...).
    pub alg: String,
}

impl TokenHeader {
    /// A header naming key `kid` and algorithm `alg`.
    pub fn new(kid: &str, alg: &str) -> Self {
        TokenHeader {
            kid: Some(kid.to_owned()),
            alg: alg.to_owned(),
        }
    }
}

/// A token's registered claims, as sent. A time claim that is not a whole number of seconds
/// within `i64` is read as absent by the adapter; the checks below then refuse the token as
/// malformed where the claim is required.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TokenClaims {
    /// `sub`: the end user the token is for.
    pub sub: Option<String>,
    /// `exp`: when it stops being valid, in seconds since the epoch. Required.
    pub exp: Option<i64>,
    /// `iat`: when it was issued. Required: the lifetime is `exp - iat`.
    pub iat: Option<i64>,
    /// `nbf`: when it starts being valid, if it says.
    pub nbf: Option<i64>,
    /// `iss`: who issued it.
    pub iss: Option<String>,
    /// Every other claim, as sent: what an SDK key's `claimMappings` read.
    pub other: serde_json::Map<String, serde_json::Value>,
}

/// Checks a token's header against the type of the key its `kid` named: the algorithm must be
/// exactly the one that type allows. A missing `kid` is [`TokenRefusal::Malformed`].
pub fn check_header(header: &TokenHeader, kind: SdkKeyKind) -> Result<(), TokenRefusal> {
    if header.kid.as_deref().is_none_or(str::is_empty) {
        return Err(TokenRefusal::Malformed);
    }
    if header.alg != kind.algorithm() {
        return Err(TokenRefusal::Algorithm);
    }
    Ok(())
}

/// Checks a token's claims, its signature already verified, for the end user `path_user` at
/// `now` (seconds since the epoch): `sub`, `exp` and `iat` present; `iss` among the allowed
/// issuers when the key names some; `exp` not passed and `nbf` come, with
/// [`LEEWAY_SECONDS`]; `iat` not in the future; `exp - iat` within the key's maximum; and
/// `sub` the path's user. Every sum saturates: no claim value can overflow the arithmetic.
pub fn check_claims(
    claims: &TokenClaims,
    policy: &TokenPolicy,
    path_user: &str,
    now: i64,
) -> Result<(), TokenRefusal> {
    let (Some(sub), Some(exp), Some(iat)) = (claims.sub.as_deref(), claims.exp, claims.iat) else {
        return Err(TokenRefusal::Malformed);
    };
    if !policy.allowed_issuers.is_empty()
        && !claims
            .iss
            .as_deref()
            .is_some_and(|iss| policy.allowed_issuers.iter().any(|a| a == iss))
    {
        return Err(TokenRefusal::Issuer);
    }
    if now > exp.saturating_add(LEEWAY_SECONDS)
        || claims
            .nbf
            .is_some_and(|nbf| now.saturating_add(LEEWAY_SECONDS) < nbf)
    {
        return Err(TokenRefusal::Expired);
    }
    let max = i64::from(policy.max_token_expiry_days.min(MAX_TOKEN_EXPIRY_DAYS))
        .saturating_mul(DAY_SECONDS);
    if iat > now.saturating_add(LEEWAY_SECONDS) || exp.saturating_sub(iat) > max {
        return Err(TokenRefusal::Lifetime);
    }
    if sub != path_user {
        return Err(TokenRefusal::OtherUser);
    }
    Ok(())
}

/// An SDK key's public key as uploaded: a PEM public key, or a JWKS (`{"keys": [...]}`).
#[derive(Debug, Clone, PartialEq)]
pub enum PublicKeyInput {
    /// `publicKey`: a PEM `PUBLIC KEY` (SubjectPublicKeyInfo), or an RSA `RSA PUBLIC KEY`.
    Pem(String),
    /// `jwks`: a JSON Web Key Set.
    Jwks(serde_json::Value),
}

/// The most keys a JWKS may hold.
pub const MAX_JWKS_KEYS: usize = 5;

/// One public key ready to verify tokens: its type and its SubjectPublicKeyInfo in PEM, the
/// one form stored whatever form was uploaded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VerifyingKey {
    /// RSA (2048 to 4096 bits) or EC P-256.
    pub kind: SdkKeyKind,
    /// The key as a PEM `PUBLIC KEY`.
    pub pem: String,
}

/// Reads SDK keys and checks token signatures: an adapter over a JWT and crypto library (no
/// signature code is written here). Its answers are decided by [`check_header`] and
/// [`check_claims`]; it only reads and verifies.
#[cfg_attr(feature = "mock", mockall::automock)]
pub trait TokenVerifier: Send + Sync {
    /// The keys of an upload, each RSA of 2048 to 4096 bits or EC P-256 (at most
    /// [`MAX_JWKS_KEYS`] in a JWKS); anything else is `Err` with a sentence naming the
    /// problem, for a 400.
    fn read_keys(&self, input: &PublicKeyInput) -> Result<Vec<VerifyingKey>, String>;

    /// The token's header, read without verifying anything;
    /// [`TokenRefusal::Malformed`] when it is not a JWT.
    fn header(&self, token: &str) -> Result<TokenHeader, TokenRefusal>;

    /// The token's claims if its signature verifies with `key` under `key.kind`'s one
    /// algorithm ([`SdkKeyKind::algorithm`]); [`TokenRefusal::Signature`] when it does not,
    /// [`TokenRefusal::Malformed`] when the claims are not a JSON object.
    fn verify(&self, token: &str, key: &VerifyingKey) -> Result<TokenClaims, TokenRefusal>;
}

/// Verifies `token` for the end user `path_user` at `now` (seconds since the epoch):
/// reads its header, finds the keys of the SDK key its `kid` names through `keys` (none:
/// [`TokenRefusal::UnknownKey`]), checks the algorithm against each key's type before using
/// it, verifies the signature with the first key that accepts it, and checks the claims
/// under `policy_of` the key's type. Answers the verified claims.
pub fn verify_token(
    verifier: &dyn TokenVerifier,
    token: &str,
    keys: impl FnOnce(&str) -> Option<(Vec<VerifyingKey>, TokenPolicy)>,
    path_user: &str,
    now: i64,
) -> Result<TokenClaims, TokenRefusal> {
    let header = verifier.header(token)?;
    let kid = header
        .kid
        .as_deref()
        .filter(|k| !k.is_empty())
        .ok_or(TokenRefusal::Malformed)?;
    let (keys, policy) = keys(kid).ok_or(TokenRefusal::UnknownKey)?;
    let mut refusal = TokenRefusal::Algorithm;
    for key in keys.iter() {
        if let Err(why) = check_header(&header, key.kind) {
            refusal = why;
            continue;
        }
        match verifier.verify(token, key) {
            Ok(claims) => {
                let policy = TokenPolicy {
                    kind: key.kind,
                    ..policy
                };
                check_claims(&claims, &policy, path_user, now)?;
                return Ok(claims);
            }
            Err(why) => refusal = why,
        }
    }
    Err(refusal)
}

mod keys;
mod origins;
mod service;
mod tickets;

#[cfg(feature = "mock")]
pub use keys::MockSdkKeyRepository;
pub use keys::{
    check_name, SdkKey, SdkKeyInput, SdkKeyRepository, ATTRIBUTE_TARGET_PREFIX, CLAIM_MAX_CHARS,
    ISSUER_MAX_CHARS, MAX_ALLOWED_ISSUERS, MAX_CLAIM_MAPPINGS, MAX_SDK_KEYS,
    SDK_KEY_NAME_MAX_CHARS,
};
pub use origins::{origin_problem, MAX_ALLOWED_ORIGINS, ORIGIN_MAX_CHARS};
pub use service::{mapped_attributes, SdkKeyService, TicketGrant, KEY_TTL_MS};
#[cfg(feature = "mock")]
pub use tickets::MockStreamTicketRepository;
pub use tickets::{
    StreamTicket, StreamTicketRepository, StreamTicketService, STREAM_TICKET_SECONDS,
};

#[cfg(test)]
mod tests;
