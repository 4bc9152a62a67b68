//! The whole sign-in path (contract §15) with real signatures: `SdkKeyService` over this
//! adapter, with a stored key, a user store and a clock standing still. Random and mutated
//! tokens never panic it and are never let in, also once the genuine token is remembered.

use std::sync::Arc;

use adapters_jwt::JwtVerifier;
use domain::chrono::{TimeZone, Utc};
use domain::mocks::{MockClock, MockEndUserRepository, MockSdkKeyRepository};
use domain::sdk::{PublicKeyInput, SdkKey, SdkKeyService, TokenVerifier};
use domain::DomainError;
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use proptest::prelude::*;
use serde_json::json;

const EC_PRIVATE: &str = include_str!("keys/p256-private.pem");
const EC_PUBLIC: &str = include_str!("keys/p256.pub");
const NOW: i64 = 1_800_000_000;

fn service() -> SdkKeyService {
    let verifier = JwtVerifier::default();
    let keys = verifier
        .read_keys(&PublicKeyInput::Pem(EC_PUBLIC.into()))
        .expect("the test key reads");
    let at = Utc.timestamp_opt(NOW, 0).single().expect("time");
    let key = SdkKey {
        id: "sdk_1".into(),
        environment_id: "env_1".into(),
        name: "app".into(),
        keys,
        max_token_expiry_days: 7,
        allowed_issuers: vec![],
        claim_mappings: Default::default(),
        allowed_origins: vec![],
        created: at,
        updated: at,
    };
    let mut repo = MockSdkKeyRepository::new();
    repo.expect_list()
        .returning(move |env| Ok((env == "env_1").then(|| key.clone()).into_iter().collect()));
    let mut users = MockEndUserRepository::new();
    users
        .expect_merge_attributes()
        .returning(|_, _, _, _| Ok(()));
    let mut clock = MockClock::new();
    clock.expect_now().returning(move || at);
    SdkKeyService::new(
        Arc::new(repo),
        Arc::new(users),
        Arc::new(verifier),
        Arc::new(clock),
    )
}

fn genuine() -> String {
    let mut header = Header::new(Algorithm::ES256);
    header.kid = Some("app".into());
    let key = EncodingKey::from_ec_pem(EC_PRIVATE.as_bytes()).expect("encoding key");
    jsonwebtoken::encode(
        &header,
        &json!({"sub": "u1", "iat": NOW - 60, "exp": NOW + 3_600}),
        &key,
    )
    .expect("signed")
}

fn sign_in(service: &SdkKeyService, token: &str) -> Result<(), DomainError> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("runtime");
    runtime
        .block_on(service.authenticate_user(&"env_1".into(), "u1", token))
        .map(|_| ())
}

#[test]
fn the_genuine_token_signs_in_before_and_after_it_is_remembered() {
    let service = service();
    sign_in(&service, &genuine()).expect("first");
    sign_in(&service, &genuine()).expect("remembered");
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Random text, as a bearer of the end-user routes, is refused and never panics.
    #[test]
    fn random_text_never_signs_in(token in ".{0,400}") {
        let service = service();
        prop_assert!(sign_in(&service, &token).is_err());
    }

    /// A genuine token changed anywhere is refused, whether or not the genuine one was
    /// remembered first: nothing it did not sign gets in.
    #[test]
    fn a_mutated_token_never_signs_in(at in any::<prop::sample::Index>(), with in any::<u8>(),
        remembered in any::<bool>()) {
        let service = service();
        let token = genuine();
        if remembered {
            sign_in(&service, &token).expect("genuine");
        }
        let mut bytes = token.clone().into_bytes();
        let i = at.index(bytes.len());
        bytes[i] = with;
        let mutated = String::from_utf8_lossy(&bytes).into_owned();
        let result = sign_in(&service, &mutated);
        if mutated != token {
            // base64url's last character of a part can carry bits no decoder reads: a change
            // there may leave what is signed intact, which is still the genuine token's claims.
            if result.is_ok() {
                let decoded = |t: &str| -> Vec<Vec<u8>> {
                    use base64::Engine;
                    t.split('.')
                        .map(|p| base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(p)
                            .unwrap_or_default())
                        .collect()
                };
                prop_assert_eq!(decoded(&mutated), decoded(&token));
            }
        } else {
            prop_assert!(result.is_ok());
        }
    }
}
