//! The `TokenVerifier` port (contract §15): SDK public keys read from a PEM or a JWKS and
//! checked (RSA of 2048 to 4096 bits, or EC P-256), and end-user tokens' signatures checked
//! by `jsonwebtoken` under the one algorithm of their key's type. What a token must say is
//! decided by the domain (`domain::sdk`); this crate only reads and verifies.

#![deny(missing_docs)]

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use domain::sdk::{
    PublicKeyInput, SdkKeyKind, TokenClaims, TokenHeader, TokenRefusal, TokenVerifier,
    VerifyingKey, MAX_JWKS_KEYS,
};
use jsonwebtoken::errors::ErrorKind;
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use rsa::pkcs1::DecodeRsaPublicKey;
use rsa::pkcs8::{DecodePublicKey, EncodePublicKey, LineEnding};
use rsa::traits::PublicKeyParts;
use serde_json::{Map, Value};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// The smallest RSA modulus accepted, in bits.
pub const MIN_RSA_BITS: usize = 2048;
/// The longest PEM or JWKS read, in bytes.
pub const MAX_KEY_BYTES: usize = 16_384;
/// The longest token read, in bytes: longer ones are malformed before any decoding.
pub const MAX_TOKEN_BYTES: usize = 8_192;

const KEY_RULE: &str = "must be an RSA public key of 2048 to 4096 bits, or an EC P-256 public key";

/// Decoded keys kept at most; past it the memory starts afresh.
const DECODED_MAX: usize = 1_000;

/// SDK keys and token signatures with `jsonwebtoken` and the RustCrypto key types. Each stored
/// key is decoded from its PEM once, then kept: a signature check does not parse the key.
#[derive(Default)]
pub struct JwtVerifier {
    decoded: Mutex<HashMap<(SdkKeyKind, String), Arc<DecodingKey>>>,
}

impl JwtVerifier {
    /// `key` decoded, from memory when it was decoded before. A stored key that no longer
    /// reads verifies nothing.
    fn decoding(&self, key: &VerifyingKey) -> Result<Arc<DecodingKey>, TokenRefusal> {
        let slot = (key.kind, key.pem.clone());
        if let Some(decoded) = self.decoded.lock().ok().and_then(|d| d.get(&slot).cloned()) {
            return Ok(decoded);
        }
        let decoded = match key.kind {
            SdkKeyKind::Rsa => DecodingKey::from_rsa_pem(key.pem.as_bytes()),
            SdkKeyKind::EcP256 => DecodingKey::from_ec_pem(key.pem.as_bytes()),
        }
        .map(Arc::new)
        .map_err(|_| TokenRefusal::Signature)?;
        if let Ok(mut memory) = self.decoded.lock() {
            if memory.len() >= DECODED_MAX {
                memory.clear();
            }
            memory.insert(slot, Arc::clone(&decoded));
        }
        Ok(decoded)
    }
}

impl TokenVerifier for JwtVerifier {
    fn read_keys(&self, input: &PublicKeyInput) -> Result<Vec<VerifyingKey>, String> {
        match input {
            PublicKeyInput::Pem(pem) => read_pem(pem).map(|key| vec![key]),
            PublicKeyInput::Jwks(jwks) => read_jwks(jwks),
        }
    }

    fn header(&self, token: &str) -> Result<TokenHeader, TokenRefusal> {
        if token.len() > MAX_TOKEN_BYTES {
            return Err(TokenRefusal::Malformed);
        }
        let mut parts = token.split('.');
        let (Some(header), Some(_), Some(_), None) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return Err(TokenRefusal::Malformed);
        };
        let bytes = URL_SAFE_NO_PAD
            .decode(header)
            .map_err(|_| TokenRefusal::Malformed)?;
        let Ok(Value::Object(fields)) = serde_json::from_slice::<Value>(&bytes) else {
            return Err(TokenRefusal::Malformed);
        };
        let text = |name: &str| fields.get(name).and_then(Value::as_str).map(str::to_owned);
        Ok(TokenHeader {
            kid: text("kid"),
            alg: text("alg").ok_or(TokenRefusal::Malformed)?,
        })
    }

    fn verify(&self, token: &str, key: &VerifyingKey) -> Result<TokenClaims, TokenRefusal> {
        if token.len() > MAX_TOKEN_BYTES {
            return Err(TokenRefusal::Malformed);
        }
        let algorithm = match key.kind {
            SdkKeyKind::Rsa => Algorithm::RS256,
            SdkKeyKind::EcP256 => Algorithm::ES256,
        };
        let decoding = self.decoding(key)?;
        // Only the signature and the algorithm here: every claim is the domain's to check.
        let mut validation = Validation::new(algorithm);
        validation.required_spec_claims.clear();
        validation.validate_exp = false;
        validation.validate_nbf = false;
        validation.validate_aud = false;
        validation.leeway = 0;
        let data = jsonwebtoken::decode::<Map<String, Value>>(token, &decoding, &validation)
            .map_err(|e| match e.kind() {
                ErrorKind::InvalidSignature => TokenRefusal::Signature,
                ErrorKind::InvalidAlgorithm | ErrorKind::InvalidAlgorithmName => {
                    TokenRefusal::Algorithm
                }
                _ => TokenRefusal::Malformed,
            })?;
        let mut other = data.claims;
        let text = |name: &str| other.get(name).and_then(Value::as_str).map(str::to_owned);
        let claims = TokenClaims {
            sub: text("sub"),
            exp: seconds(other.get("exp")),
            iat: seconds(other.get("iat")),
            nbf: seconds(other.get("nbf")),
            iss: text("iss"),
            other: Map::new(),
        };
        for registered in ["sub", "exp", "iat", "nbf", "iss"] {
            other.remove(registered);
        }
        Ok(TokenClaims { other, ..claims })
    }
}

/// A NumericDate claim as whole seconds: an integer, or a number with no fraction within
/// `i64`; anything else reads as absent.
fn seconds(value: Option<&Value>) -> Option<i64> {
    let number = value?.as_number()?;
    if let Some(n) = number.as_i64() {
        return Some(n);
    }
    let f = number.as_f64()?;
    // Within ±2^53 a float is exact; beyond, a NumericDate means nothing.
    const EXACT: f64 = 9_007_199_254_740_992.0;
    (f.is_finite() && f.fract() == 0.0 && f.abs() <= EXACT).then_some(f as i64)
}

fn read_pem(pem: &str) -> Result<VerifyingKey, String> {
    if pem.len() > MAX_KEY_BYTES {
        return Err(format!("must be at most {MAX_KEY_BYTES} bytes"));
    }
    let pem = pem.trim();
    if let Ok(key) = rsa::RsaPublicKey::from_public_key_pem(pem) {
        return rsa_key(&key);
    }
    if let Ok(key) = rsa::RsaPublicKey::from_pkcs1_pem(pem) {
        return rsa_key(&key);
    }
    if let Ok(key) = p256::PublicKey::from_public_key_pem(pem) {
        return ec_key(&key);
    }
    Err(KEY_RULE.into())
}

fn rsa_key(key: &rsa::RsaPublicKey) -> Result<VerifyingKey, String> {
    let bits = key.n().bits();
    if bits < MIN_RSA_BITS {
        return Err(format!("is an RSA key of {bits} bits; {KEY_RULE}"));
    }
    let pem = key
        .to_public_key_pem(LineEnding::LF)
        .map_err(|_| KEY_RULE.to_owned())?;
    Ok(VerifyingKey {
        kind: SdkKeyKind::Rsa,
        pem,
    })
}

fn ec_key(key: &p256::PublicKey) -> Result<VerifyingKey, String> {
    let pem = key
        .to_public_key_pem(p256::pkcs8::LineEnding::LF)
        .map_err(|_| KEY_RULE.to_owned())?;
    Ok(VerifyingKey {
        kind: SdkKeyKind::EcP256,
        pem,
    })
}

fn read_jwks(jwks: &Value) -> Result<Vec<VerifyingKey>, String> {
    if jwks.to_string().len() > MAX_KEY_BYTES {
        return Err(format!("must be at most {MAX_KEY_BYTES} bytes"));
    }
    let Some(keys) = jwks.get("keys").and_then(Value::as_array) else {
        return Err("must be a JSON Web Key Set: {\"keys\": [...]}".into());
    };
    if keys.is_empty() || keys.len() > MAX_JWKS_KEYS {
        return Err(format!("must hold 1 to {MAX_JWKS_KEYS} keys"));
    }
    keys.iter()
        .enumerate()
        .map(|(i, jwk)| read_jwk(jwk).map_err(|why| format!("keys[{i}] {why}")))
        .collect()
}

fn read_jwk(jwk: &Value) -> Result<VerifyingKey, String> {
    let field = |name: &str| -> Result<Vec<u8>, String> {
        let text = jwk
            .get(name)
            .and_then(Value::as_str)
            .ok_or_else(|| format!("needs `{name}`"))?;
        URL_SAFE_NO_PAD
            .decode(text.trim_end_matches('='))
            .map_err(|_| format!("`{name}` is not base64url"))
    };
    match jwk.get("kty").and_then(Value::as_str) {
        Some("RSA") => {
            let n = rsa::BigUint::from_bytes_be(&field("n")?);
            let e = rsa::BigUint::from_bytes_be(&field("e")?);
            let key = rsa::RsaPublicKey::new(n, e).map_err(|_| KEY_RULE.to_owned())?;
            rsa_key(&key)
        }
        Some("EC") => {
            if jwk.get("crv").and_then(Value::as_str) != Some("P-256") {
                return Err(KEY_RULE.into());
            }
            let (x, y) = (field("x")?, field("y")?);
            if x.len() != 32 || y.len() != 32 {
                return Err(KEY_RULE.into());
            }
            let mut point = Vec::with_capacity(65);
            point.push(4);
            point.extend_from_slice(&x);
            point.extend_from_slice(&y);
            let key = p256::PublicKey::from_sec1_bytes(&point).map_err(|_| KEY_RULE.to_owned())?;
            ec_key(&key)
        }
        _ => Err(KEY_RULE.into()),
    }
}
