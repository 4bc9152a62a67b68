use super::*;

const NOW: i64 = 1_800_000_000;

fn policy() -> TokenPolicy {
    TokenPolicy {
        kind: SdkKeyKind::Rsa,
        max_token_expiry_days: 7,
        allowed_issuers: vec![],
    }
}

/// A token for `u1`, issued a minute ago, valid for an hour.
fn claims() -> TokenClaims {
    TokenClaims {
        sub: Some("u1".into()),
        iat: Some(NOW - 60),
        exp: Some(NOW + 3_600),
        ..TokenClaims::default()
    }
}

fn check(claims: &TokenClaims) -> Result<(), TokenRefusal> {
    check_claims(claims, &policy(), "u1", NOW)
}

#[test]
fn the_algorithm_is_the_one_the_key_type_allows() {
    for (kind, alg) in [(SdkKeyKind::Rsa, "RS256"), (SdkKeyKind::EcP256, "ES256")] {
        assert_eq!(check_header(&TokenHeader::new("app", alg), kind), Ok(()));
    }
    // Algorithm confusion: `none`, an HMAC (whose secret could be the public key itself),
    // the other key type's algorithm, other strengths and other spellings are all refused
    // before the key is used.
    for (kind, alg) in [
        (SdkKeyKind::Rsa, "none"),
        (SdkKeyKind::Rsa, "HS256"),
        (SdkKeyKind::Rsa, "HS512"),
        (SdkKeyKind::Rsa, "ES256"),
        (SdkKeyKind::Rsa, "PS256"),
        (SdkKeyKind::Rsa, "RS512"),
        (SdkKeyKind::Rsa, "rs256"),
        (SdkKeyKind::Rsa, ""),
        (SdkKeyKind::EcP256, "none"),
        (SdkKeyKind::EcP256, "HS256"),
        (SdkKeyKind::EcP256, "RS256"),
        (SdkKeyKind::EcP256, "ES384"),
    ] {
        assert_eq!(
            check_header(&TokenHeader::new("app", alg), kind),
            Err(TokenRefusal::Algorithm),
            "{alg} on {kind}"
        );
    }
}

#[test]
fn a_header_without_a_key_name_is_malformed() {
    for kid in [None, Some(String::new())] {
        let header = TokenHeader {
            kid,
            alg: "RS256".into(),
        };
        assert_eq!(
            check_header(&header, SdkKeyKind::Rsa),
            Err(TokenRefusal::Malformed)
        );
    }
}

#[test]
fn a_good_token_passes_and_names_its_user() {
    assert_eq!(check(&claims()), Ok(()));
    assert_eq!(
        check_claims(&claims(), &policy(), "u2", NOW),
        Err(TokenRefusal::OtherUser)
    );
}

#[test]
fn sub_exp_and_iat_are_required() {
    for strip in [
        |c: &mut TokenClaims| c.sub = None,
        |c: &mut TokenClaims| c.exp = None,
        |c: &mut TokenClaims| c.iat = None,
    ] {
        let mut c = claims();
        strip(&mut c);
        assert_eq!(check(&c), Err(TokenRefusal::Malformed), "{c:?}");
    }
}

#[test]
fn expiry_has_a_minute_of_leeway_to_the_second() {
    let at = |exp: i64| TokenClaims {
        exp: Some(exp),
        iat: Some(exp - 3_600),
        ..claims()
    };
    assert_eq!(check(&at(NOW - LEEWAY_SECONDS)), Ok(()));
    assert_eq!(
        check(&at(NOW - LEEWAY_SECONDS - 1)),
        Err(TokenRefusal::Expired)
    );
}

#[test]
fn not_before_has_a_minute_of_leeway_to_the_second() {
    let from = |nbf: i64| TokenClaims {
        nbf: Some(nbf),
        ..claims()
    };
    assert_eq!(check(&from(NOW + LEEWAY_SECONDS)), Ok(()));
    assert_eq!(
        check(&from(NOW + LEEWAY_SECONDS + 1)),
        Err(TokenRefusal::Expired)
    );
    assert_eq!(check(&from(NOW - 3_600)), Ok(()));
}

#[test]
fn the_lifetime_is_capped_by_the_key_and_by_the_largest_allowed() {
    let lasting = |seconds: i64| TokenClaims {
        iat: Some(NOW),
        exp: Some(NOW + seconds),
        ..claims()
    };
    let week = 7 * 86_400;
    assert_eq!(check(&lasting(week)), Ok(()));
    assert_eq!(check(&lasting(week + 1)), Err(TokenRefusal::Lifetime));
    // A key can never allow more than MAX_TOKEN_EXPIRY_DAYS.
    let generous = TokenPolicy {
        max_token_expiry_days: u32::MAX,
        ..policy()
    };
    let month = i64::from(MAX_TOKEN_EXPIRY_DAYS) * 86_400;
    assert_eq!(check_claims(&lasting(month), &generous, "u1", NOW), Ok(()));
    assert_eq!(
        check_claims(&lasting(month + 1), &generous, "u1", NOW),
        Err(TokenRefusal::Lifetime)
    );
}

#[test]
fn a_token_issued_in_the_future_is_refused_so_its_lifetime_cannot_be_stretched() {
    let issued = |iat: i64| TokenClaims {
        iat: Some(iat),
        exp: Some(iat + 3_600),
        ..claims()
    };
    assert_eq!(check(&issued(NOW + LEEWAY_SECONDS)), Ok(()));
    assert_eq!(
        check(&issued(NOW + LEEWAY_SECONDS + 1)),
        Err(TokenRefusal::Lifetime)
    );
    assert_eq!(
        check(&issued(NOW + 365 * 86_400)),
        Err(TokenRefusal::Lifetime)
    );
}

#[test]
fn issuers_are_checked_only_when_the_key_names_some() {
    let from = |iss: Option<&str>| TokenClaims {
        iss: iss.map(str::to_owned),
        ..claims()
    };
    assert_eq!(check(&from(None)), Ok(()));
    assert_eq!(check(&from(Some("anyone"))), Ok(()));
    let strict = TokenPolicy {
        allowed_issuers: vec!["https://auth.example.com".into()],
        ..policy()
    };
    let checked = |c: &TokenClaims| check_claims(c, &strict, "u1", NOW);
    assert_eq!(checked(&from(Some("https://auth.example.com"))), Ok(()));
    assert_eq!(
        checked(&from(Some("https://auth.example.com/"))),
        Err(TokenRefusal::Issuer)
    );
    assert_eq!(checked(&from(None)), Err(TokenRefusal::Issuer));
}

#[test]
fn extreme_claim_values_neither_overflow_nor_pass() {
    for (iat, exp) in [
        (i64::MIN, i64::MAX),
        (i64::MIN, NOW),
        (NOW, i64::MAX),
        (i64::MAX, i64::MAX),
        (i64::MIN, i64::MIN),
    ] {
        let c = TokenClaims {
            iat: Some(iat),
            exp: Some(exp),
            nbf: Some(i64::MIN),
            ..claims()
        };
        assert!(check(&c).is_err(), "iat {iat} exp {exp}");
    }
}

#[test]
fn every_refusal_has_its_problem_code() {
    let codes = [
        (TokenRefusal::Malformed, "token_malformed"),
        (TokenRefusal::UnknownKey, "token_unknown_key"),
        (TokenRefusal::Algorithm, "token_signature"),
        (TokenRefusal::Signature, "token_signature"),
        (TokenRefusal::Expired, "token_expired"),
        (TokenRefusal::Lifetime, "token_lifetime"),
        (TokenRefusal::Issuer, "token_issuer"),
        (TokenRefusal::OtherUser, "forbidden"),
    ];
    for (refusal, code) in codes {
        assert_eq!(refusal.code(), code);
    }
}

mod verify {
    use super::*;

    fn rsa_key() -> VerifyingKey {
        VerifyingKey {
            kind: SdkKeyKind::Rsa,
            pem: "rsa".into(),
        }
    }

    fn ec_key() -> VerifyingKey {
        VerifyingKey {
            kind: SdkKeyKind::EcP256,
            pem: "ec".into(),
        }
    }

    fn reading(header: TokenHeader) -> MockTokenVerifier {
        let mut v = MockTokenVerifier::new();
        v.expect_header().returning(move |_| Ok(header.clone()));
        v
    }

    fn keys(
        of: Vec<VerifyingKey>,
    ) -> impl FnOnce(&str) -> Option<(Vec<VerifyingKey>, TokenPolicy)> {
        move |kid| (kid == "app").then(|| (of, policy()))
    }

    #[test]
    fn a_token_signed_by_its_key_for_its_user_is_verified() {
        let mut v = reading(TokenHeader::new("app", "RS256"));
        v.expect_verify()
            .withf(|token, key| token == "t" && key.pem == "rsa")
            .times(1)
            .returning(|_, _| Ok(claims()));
        assert_eq!(
            verify_token(&v, "t", keys(vec![rsa_key()]), "u1", NOW),
            Ok(claims())
        );
    }

    #[test]
    fn an_unknown_or_missing_key_name_is_refused_before_any_signature_check() {
        let mut v = reading(TokenHeader::new("other", "RS256"));
        v.expect_verify().never();
        assert_eq!(
            verify_token(&v, "t", keys(vec![rsa_key()]), "u1", NOW),
            Err(TokenRefusal::UnknownKey)
        );
        let mut v = reading(TokenHeader {
            kid: None,
            alg: "RS256".into(),
        });
        v.expect_verify().never();
        assert_eq!(
            verify_token(&v, "t", keys(vec![rsa_key()]), "u1", NOW),
            Err(TokenRefusal::Malformed)
        );
    }

    #[test]
    fn algorithm_confusion_never_reaches_the_key() {
        // `none`, HS256 (an HMAC keyed with the public key's text) and an RSA key presented
        // as EC: the key is never used, whatever the token says.
        for (alg, key) in [
            ("none", rsa_key()),
            ("HS256", rsa_key()),
            ("HS256", ec_key()),
            ("ES256", rsa_key()),
            ("RS256", ec_key()),
        ] {
            let mut v = reading(TokenHeader::new("app", alg));
            v.expect_verify().never();
            assert_eq!(
                verify_token(&v, "t", keys(vec![key.clone()]), "u1", NOW),
                Err(TokenRefusal::Algorithm),
                "{alg} with {:?}",
                key.kind
            );
        }
    }

    #[test]
    fn a_bad_signature_or_bad_claims_are_refused() {
        let mut v = reading(TokenHeader::new("app", "ES256"));
        v.expect_verify()
            .returning(|_, _| Err(TokenRefusal::Signature));
        assert_eq!(
            verify_token(&v, "t", keys(vec![ec_key()]), "u1", NOW),
            Err(TokenRefusal::Signature)
        );
        let mut v = reading(TokenHeader::new("app", "ES256"));
        v.expect_verify().returning(|_, _| Ok(claims()));
        assert_eq!(
            verify_token(&v, "t", keys(vec![ec_key()]), "u2", NOW),
            Err(TokenRefusal::OtherUser)
        );
    }

    #[test]
    fn a_key_set_tries_each_key_of_the_token_s_algorithm() {
        let mut v = reading(TokenHeader::new("app", "ES256"));
        let second = VerifyingKey {
            pem: "ec2".into(),
            ..ec_key()
        };
        v.expect_verify()
            .withf(|_, key| key.pem == "ec")
            .times(1)
            .returning(|_, _| Err(TokenRefusal::Signature));
        v.expect_verify()
            .withf(|_, key| key.pem == "ec2")
            .times(1)
            .returning(|_, _| Ok(claims()));
        assert_eq!(
            verify_token(&v, "t", keys(vec![rsa_key(), ec_key(), second]), "u1", NOW),
            Ok(claims())
        );
    }
}
