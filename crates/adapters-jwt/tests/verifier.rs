//! The JWT adapter against real keys: the keys under tests/keys were made with OpenSSL for
//! these tests only (an RSA key of 2048 bits and an EC P-256 key with their private halves,
//! and the public halves of an RSA key of 1024 bits and an EC P-384 key, which are refused).

use adapters_jwt::JwtVerifier;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use domain::sdk::{
    PublicKeyInput, SdkKeyKind, TokenClaims, TokenRefusal, TokenVerifier, VerifyingKey,
};
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use proptest::prelude::*;
use serde_json::{json, Value};

const RSA_PRIVATE: &str = include_str!("keys/rsa2048-private.pem");
const RSA_PUBLIC: &str = include_str!("keys/rsa2048.pub");
const RSA_PKCS1_PUBLIC: &str = include_str!("keys/rsa2048.pkcs1.pub");
const RSA_SMALL_PUBLIC: &str = include_str!("keys/rsa1024.pub");
const EC_PRIVATE: &str = include_str!("keys/p256-private.pem");
const EC_PUBLIC: &str = include_str!("keys/p256.pub");
const P384_PUBLIC: &str = include_str!("keys/p384.pub");

fn key(pem: &str) -> VerifyingKey {
    let mut keys = JwtVerifier::default()
        .read_keys(&PublicKeyInput::Pem(pem.into()))
        .expect("a key");
    keys.remove(0)
}

fn claims() -> Value {
    json!({"sub": "u1", "iat": 1_800_000_000, "exp": 1_800_003_600,
        "iss": "https://auth.example.com"})
}

fn signed(alg: Algorithm, private: &str, claims: &Value) -> String {
    let key = match alg {
        Algorithm::RS256 => EncodingKey::from_rsa_pem(private.as_bytes()),
        Algorithm::ES256 => EncodingKey::from_ec_pem(private.as_bytes()),
        _ => Ok(EncodingKey::from_secret(private.as_bytes())),
    }
    .expect("encoding key");
    let mut header = Header::new(alg);
    header.kid = Some("app".into());
    jsonwebtoken::encode(&header, claims, &key).expect("signed")
}

fn expected() -> TokenClaims {
    TokenClaims {
        sub: Some("u1".into()),
        iat: Some(1_800_000_000),
        exp: Some(1_800_003_600),
        nbf: None,
        iss: Some("https://auth.example.com".into()),
        other: serde_json::Map::new(),
    }
}

#[test]
fn rsa_and_ec_p256_keys_are_read_from_pem_in_one_stored_form() {
    let rsa = key(RSA_PUBLIC);
    assert_eq!(rsa.kind, SdkKeyKind::Rsa);
    assert!(rsa.pem.starts_with("-----BEGIN PUBLIC KEY-----"));
    assert_eq!(key(RSA_PKCS1_PUBLIC), rsa, "PKCS#1 reads as the same key");
    assert_eq!(key(EC_PUBLIC).kind, SdkKeyKind::EcP256);
}

#[test]
fn small_rsa_other_curves_and_garbage_are_refused_naming_the_rule() {
    for (pem, says) in [
        (RSA_SMALL_PUBLIC, "1024 bits"),
        (P384_PUBLIC, "EC P-256"),
        ("not a key", "EC P-256"),
        (RSA_PRIVATE, "EC P-256"),
    ] {
        let refused = JwtVerifier::default()
            .read_keys(&PublicKeyInput::Pem(pem.into()))
            .expect_err("refused");
        assert!(refused.contains(says), "{refused}");
    }
}

#[test]
fn a_jwks_is_read_key_by_key() {
    let rsa = rsa::RsaPublicKey::from_public_key_pem(RSA_PUBLIC.trim()).expect("rsa");
    let ec = p256::PublicKey::from_public_key_pem(EC_PUBLIC.trim()).expect("ec");
    use p256::elliptic_curve::sec1::ToEncodedPoint;
    use rsa::pkcs8::DecodePublicKey;
    use rsa::traits::PublicKeyParts;
    let point = ec.to_encoded_point(false);
    let b64 = |bytes: &[u8]| URL_SAFE_NO_PAD.encode(bytes);
    let jwks = json!({"keys": [
        {"kty": "RSA", "n": b64(&rsa.n().to_bytes_be()), "e": b64(&rsa.e().to_bytes_be())},
        {"kty": "EC", "crv": "P-256", "x": b64(point.x().expect("x")),
            "y": b64(point.y().expect("y"))}
    ]});
    let keys = JwtVerifier::default()
        .read_keys(&PublicKeyInput::Jwks(jwks))
        .expect("keys");
    assert_eq!(keys, vec![key(RSA_PUBLIC), key(EC_PUBLIC)]);
    for (bad, says) in [
        (json!({"keys": []}), "1 to 5"),
        (
            json!({"keys": [{"kty": "oct", "k": "c2VjcmV0"}]}),
            "keys[0]",
        ),
        (
            json!({"keys": [{"kty": "EC", "crv": "P-384", "x": "AA", "y": "AA"}]}),
            "keys[0]",
        ),
        (
            json!({"keys": [{"kty": "RSA", "n": "AQAB", "e": "AQAB"}]}),
            "keys[0]",
        ),
        (json!([1, 2]), "Key Set"),
    ] {
        let refused = JwtVerifier::default()
            .read_keys(&PublicKeyInput::Jwks(bad))
            .expect_err("refused");
        assert!(refused.contains(says), "{refused}");
    }
}

#[test]
fn tokens_verify_with_their_own_key_only() {
    let rsa_token = signed(Algorithm::RS256, RSA_PRIVATE, &claims());
    let ec_token = signed(Algorithm::ES256, EC_PRIVATE, &claims());
    assert_eq!(
        JwtVerifier::default().verify(&rsa_token, &key(RSA_PUBLIC)),
        Ok(expected())
    );
    assert_eq!(
        JwtVerifier::default().verify(&ec_token, &key(EC_PUBLIC)),
        Ok(expected())
    );
    let header = JwtVerifier::default().header(&ec_token).expect("header");
    assert_eq!(
        (header.kid.as_deref(), header.alg.as_str()),
        (Some("app"), "ES256")
    );
    // Under the other key type's algorithm, or another key, nothing verifies.
    assert!(JwtVerifier::default()
        .verify(&rsa_token, &key(EC_PUBLIC))
        .is_err());
    assert!(JwtVerifier::default()
        .verify(&ec_token, &key(RSA_PUBLIC))
        .is_err());
}

#[test]
fn an_hmac_keyed_with_the_public_key_never_verifies() {
    for public in [RSA_PUBLIC, EC_PUBLIC] {
        let forged = signed(Algorithm::HS256, public, &claims());
        assert_eq!(
            JwtVerifier::default().header(&forged).expect("header").alg,
            "HS256"
        );
        assert_eq!(
            JwtVerifier::default().verify(&forged, &key(public)),
            Err(TokenRefusal::Algorithm)
        );
    }
    // `alg: none` with no signature at all.
    let b64 = |v: Value| URL_SAFE_NO_PAD.encode(v.to_string());
    let unsigned = format!(
        "{}.{}.",
        b64(json!({"alg": "none", "kid": "app"})),
        b64(claims())
    );
    assert_eq!(
        JwtVerifier::default()
            .header(&unsigned)
            .expect("header")
            .alg,
        "none"
    );
    assert!(JwtVerifier::default()
        .verify(&unsigned, &key(RSA_PUBLIC))
        .is_err());
}

#[test]
fn claims_read_as_whole_seconds_or_not_at_all() {
    let mut odd = claims();
    odd["exp"] = json!(1.8e9);
    odd["iat"] = json!(1_800_000_000.5);
    odd["nbf"] = json!("soon");
    let token = signed(Algorithm::ES256, EC_PRIVATE, &odd);
    let read = JwtVerifier::default()
        .verify(&token, &key(EC_PUBLIC))
        .expect("verified");
    assert_eq!(
        (read.exp, read.iat, read.nbf),
        (Some(1_800_000_000), None, None)
    );
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Random text is never a token, and never panics.
    #[test]
    fn random_text_is_refused(token in ".{0,300}") {
        prop_assert!(JwtVerifier::default().verify(&token, &key(EC_PUBLIC)).is_err());
        let _ = JwtVerifier::default().header(&token);
    }

    /// A signed token changed anywhere either fails or still says exactly what was signed:
    /// nothing unsigned is ever accepted.
    #[test]
    fn a_mutated_token_never_verifies_other_claims(at in any::<prop::sample::Index>(),
        with in any::<u8>()) {
        let token = signed(Algorithm::ES256, EC_PRIVATE, &claims());
        let mut bytes = token.into_bytes();
        let i = at.index(bytes.len());
        bytes[i] = with;
        let mutated = String::from_utf8_lossy(&bytes).into_owned();
        if let Ok(read) = JwtVerifier::default().verify(&mutated, &key(EC_PUBLIC)) {
            prop_assert_eq!(read, expected());
        }
        let _ = JwtVerifier::default().header(&mutated);
    }
}
