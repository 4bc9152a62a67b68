//! Offline credential checks per kind (spec 2.10): parse, consistency, expiry, issuer,
//! environment. Each failure names the field and the reason; no secret is ever echoed.

use std::collections::BTreeMap;

use domain::push::{provider_of, CredentialProblem, CredentialValidator, PlatformInput, Provider};
use domain::{FieldError, Timestamp};
use p256::pkcs8::{DecodePrivateKey, EncodePublicKey};
use rsa::pkcs1::DecodeRsaPrivateKey;
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};
use x509_parser::certificate::X509Certificate;
use x509_parser::pem::Pem;

/// Apple's push certificate extensions: development (sandbox) and production.
const OID_APNS_SANDBOX: &str = "1.2.840.113635.100.6.3.1";
const OID_APNS_PRODUCTION: &str = "1.2.840.113635.100.6.3.2";
const APPLE_ISSUER: &str = "Apple Worldwide Developer Relations";
const OID_UID: &str = "0.9.2342.19200300.100.1.1";
/// 2048 bits.
const MIN_RSA_BYTES: usize = 256;

/// Validates credentials without calling the providers: their form, keys and certificates
/// (the domain's `CredentialValidator` port).
#[derive(Debug, Default, Clone, Copy)]
pub struct OfflineValidator;

fn invalid(field: &str, message: impl Into<String>) -> CredentialProblem {
    CredentialProblem::Invalid(vec![FieldError::new(field, message)])
}

impl CredentialValidator for OfflineValidator {
    fn validate(
        &self,
        input: &PlatformInput,
        now: Timestamp,
    ) -> Result<BTreeMap<String, String>, CredentialProblem> {
        match provider_of(&input.platform) {
            Some(Provider::Fcm) => service_account(input),
            Some(Provider::Apns { sandbox }) => {
                let principal = input.principal.as_deref().unwrap_or_default();
                if certificate_based(principal) {
                    certificate(input, principal, sandbox, now)
                } else {
                    token_key(input, principal)
                }
            }
            None => Err(invalid(
                "platform",
                "must be GCM, FCM, APNS or APNS_SANDBOX",
            )),
        }
    }
}

/// The service-account JSON object of an FCM credential: the JSON itself, or that JSON encoded
/// as a JSON string (`jq @json` output, as SNS documents).
pub(crate) fn service_account_json(text: &str) -> Result<Map<String, Value>, CredentialProblem> {
    let field = "platformCredential";
    let text = text.trim();
    let mut value: Value = match serde_json::from_str(text) {
        Ok(v) => v,
        Err(_) if !text.starts_with('{') && !text.starts_with('"') => {
            return Err(CredentialProblem::LegacyFcmKey)
        }
        Err(e) => return Err(invalid(field, format!("is not valid JSON: {e}"))),
    };
    if let Value::String(inner) = &value {
        value = serde_json::from_str(inner).map_err(|e| {
            invalid(
                field,
                format!("holds a string that is not service-account JSON: {e}"),
            )
        })?;
    }
    match value {
        Value::Object(obj) => Ok(obj),
        _ => Err(invalid(field, "must be a service-account JSON object")),
    }
}

/// iOS platforms authenticate with a certificate when the principal is one (PEM), else with a
/// .p8 key whose id the principal is.
pub(crate) fn certificate_based(principal: &str) -> bool {
    principal.contains("-----BEGIN CERTIFICATE-----")
}

/// Android, FCM HTTP v1: a service-account JSON (or that JSON encoded as a JSON string).
fn service_account(input: &PlatformInput) -> Result<BTreeMap<String, String>, CredentialProblem> {
    let field = "platformCredential";
    let obj = service_account_json(&input.credential)?;
    let mut errors = Vec::new();
    let text_of = |key: &str| {
        obj.get(key)
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
    };
    if text_of("type") != Some("service_account") {
        errors.push(FieldError::new(field, "`type` must be \"service_account\""));
    }
    for key in ["project_id", "client_email", "private_key", "token_uri"] {
        if text_of(key).is_none() {
            errors.push(FieldError::new(field, format!("`{key}` is missing")));
        }
    }
    if let Some(email) = text_of("client_email") {
        if !email.contains('@') {
            errors.push(FieldError::new(
                field,
                "`client_email` is not an e-mail address",
            ));
        }
    }
    if let Some(uri) = text_of("token_uri") {
        if !(uri.starts_with("https://") || uri.starts_with("http://")) {
            errors.push(FieldError::new(field, "`token_uri` is not an http(s) URL"));
        }
    }
    if let Some(key) = text_of("private_key") {
        match rsa::RsaPrivateKey::from_pkcs8_pem(key)
            .or_else(|_| rsa::RsaPrivateKey::from_pkcs1_pem(key))
        {
            Err(_) => errors.push(FieldError::new(
                field,
                "`private_key` is not an RSA private key in PEM",
            )),
            // Google issues 2048-bit keys; RS256 signers refuse smaller ones.
            Ok(k) if rsa::traits::PublicKeyParts::size(&k) < MIN_RSA_BYTES => errors.push(
                FieldError::new(field, "`private_key` is shorter than 2048 bits"),
            ),
            Ok(_) => {}
        }
    }
    if input.principal.as_deref().is_some_and(|p| !p.is_empty()) {
        errors.push(FieldError::new(
            "platformPrincipal",
            "must be empty for FCM HTTP v1 (the service account carries everything)",
        ));
    }
    if !errors.is_empty() {
        return Err(CredentialProblem::Invalid(errors));
    }
    let mut facts = BTreeMap::new();
    for (key, name) in [
        ("project_id", "ProjectId"),
        ("client_email", "ClientEmail"),
        ("private_key_id", "PrivateKeyId"),
    ] {
        if let Some(v) = text_of(key) {
            facts.insert(name.to_owned(), v.to_owned());
        }
    }
    Ok(facts)
}

/// The SubjectPublicKeyInfo (DER) of a private key in PEM: RSA (PKCS#1 or #8) or EC P-256.
fn public_key_of(pem: &str) -> Result<Vec<u8>, String> {
    if pem.contains("ENCRYPTED") {
        return Err(
            "is an encrypted private key; export it without a passphrase (openssl pkcs12 -nodes)"
                .into(),
        );
    }
    if let Ok(k) =
        rsa::RsaPrivateKey::from_pkcs8_pem(pem).or_else(|_| rsa::RsaPrivateKey::from_pkcs1_pem(pem))
    {
        return rsa::pkcs8::EncodePublicKey::to_public_key_der(&k.to_public_key())
            .map(|d| d.as_bytes().to_vec())
            .map_err(|e| e.to_string());
    }
    if let Ok(k) =
        p256::SecretKey::from_pkcs8_pem(pem).or_else(|_| p256::SecretKey::from_sec1_pem(pem))
    {
        return k
            .public_key()
            .to_public_key_der()
            .map(|d| d.as_bytes().to_vec())
            .map_err(|e| e.to_string());
    }
    Err("is not an unencrypted RSA or EC private key in PEM".into())
}

/// iOS, certificate based: the principal is the certificate, the credential its private key.
/// Every problem found is named, in the order of the checks.
fn certificate(
    input: &PlatformInput,
    principal: &str,
    sandbox: bool,
    now: Timestamp,
) -> Result<BTreeMap<String, String>, CredentialProblem> {
    let (_, pem) = x509_parser::pem::parse_x509_pem(principal.trim().as_bytes())
        .map_err(|_| invalid("platformPrincipal", "is not a PEM certificate"))?;
    let cert = pem
        .parse_x509()
        .map_err(|_| invalid("platformPrincipal", "is not a valid X.509 certificate"))?;
    let errors: Vec<FieldError> = [
        validity_problem(&cert, now),
        issuer_problem(&cert),
        environment_problem(&cert, sandbox),
        key_problem(&cert, &input.credential),
    ]
    .into_iter()
    .flatten()
    .collect();
    if !errors.is_empty() {
        return Err(CredentialProblem::Invalid(errors));
    }
    Ok(certificate_facts(&cert, &pem))
}

/// A certificate expired, or not valid yet, at `now`.
fn validity_problem(cert: &X509Certificate<'_>, now: Timestamp) -> Option<FieldError> {
    let message = if cert.validity().not_after.timestamp() <= now.timestamp() {
        "is an expired certificate"
    } else if cert.validity().not_before.timestamp() > now.timestamp() {
        "is a certificate not valid yet"
    } else {
        return None;
    };
    Some(FieldError::new("platformPrincipal", message))
}

/// A certificate that Apple did not issue.
fn issuer_problem(cert: &X509Certificate<'_>) -> Option<FieldError> {
    if cert.issuer().to_string().contains(APPLE_ISSUER) {
        return None;
    }
    Some(FieldError::new(
        "platformPrincipal",
        "is not an Apple-issued certificate (issuer must be Apple Worldwide Developer \
            Relations)",
    ))
}

/// A push certificate for the other environment than the platform's (APNS_SANDBOX needs a
/// development one, APNS a production one).
fn environment_problem(cert: &X509Certificate<'_>, sandbox: bool) -> Option<FieldError> {
    let has = |oid: &str| {
        cert.extensions()
            .iter()
            .any(|e| e.oid.to_id_string() == oid)
    };
    let message = match (sandbox, has(OID_APNS_SANDBOX), has(OID_APNS_PRODUCTION)) {
        (true, false, _) => {
            "is not a development (sandbox) push certificate, as APNS_SANDBOX needs"
        }
        (false, _, false) => "is not a production push certificate, as APNS needs",
        _ => return None,
    };
    Some(FieldError::new("platformPrincipal", message))
}

/// A credential that is not the certificate's private key.
fn key_problem(cert: &X509Certificate<'_>, credential: &str) -> Option<FieldError> {
    match public_key_of(credential) {
        Ok(public) if public == cert.public_key().raw => None,
        Ok(_) => Some(FieldError::new(
            "platformCredential",
            "is not the private key of this certificate",
        )),
        Err(why) => Some(FieldError::new("platformCredential", why)),
    }
}

/// What the platform shows of a valid certificate: its expiry, its fingerprint (SHA-256 of
/// its DER) and, when its subject names one, the app's bundle id.
fn certificate_facts(cert: &X509Certificate<'_>, pem: &Pem) -> BTreeMap<String, String> {
    let not_after = cert.validity().not_after.timestamp();
    let expires = chrono::DateTime::from_timestamp(not_after, 0).unwrap_or_default();
    let mut facts = BTreeMap::from([
        (
            "AppleCertificateExpirationDate".to_owned(),
            expires.format("%Y-%m-%dT%H:%M:%SZ").to_string(),
        ),
        (
            "CertificateFingerprint".to_owned(),
            Sha256::digest(pem.contents.as_slice())
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect(),
        ),
    ]);
    let uid = cert
        .subject()
        .iter_attributes()
        .find(|a| a.attr_type().to_id_string() == OID_UID)
        .and_then(|a| a.as_str().ok());
    if let Some(bundle) = uid {
        facts.insert("BundleId".into(), bundle.to_owned());
    }
    facts
}

fn apple_id(s: &str) -> bool {
    s.len() == 10
        && s.chars()
            .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit())
}

fn reverse_dns(s: &str) -> bool {
    let parts: Vec<&str> = s.split('.').collect();
    parts.len() >= 2
        && parts
            .iter()
            .all(|p| !p.is_empty() && p.chars().all(|c| c.is_ascii_alphanumeric() || c == '-'))
}

/// iOS, token based: the credential is the .p8 key, the principal its key id.
fn token_key(
    input: &PlatformInput,
    key_id: &str,
) -> Result<BTreeMap<String, String>, CredentialProblem> {
    let mut errors = Vec::new();
    if !apple_id(key_id) {
        errors.push(FieldError::new(
            "platformPrincipal",
            "must be the 10-character key id of the .p8 signing key (or, for certificate \
                authentication, a PEM certificate)",
        ));
    }
    let team = input.property("teamId").unwrap_or_default();
    if !apple_id(team) {
        errors.push(FieldError::new(
            "platformProperties.teamId",
            "is required: the 10-character Apple team id",
        ));
    }
    let bundle = input.property("bundleId").unwrap_or_default();
    if !reverse_dns(bundle) {
        errors.push(FieldError::new(
            "platformProperties.bundleId",
            "is required: the app's bundle id in reverse-DNS form (com.example.app)",
        ));
    }
    if input.credential.contains("ENCRYPTED") {
        errors.push(FieldError::new(
            "platformCredential",
            "is an encrypted key; send the .p8 file as Apple issued it",
        ));
    } else if p256::SecretKey::from_pkcs8_pem(input.credential.trim()).is_err() {
        errors.push(FieldError::new(
            "platformCredential",
            "is not a .p8 signing key (an EC P-256 private key in PKCS#8 PEM)",
        ));
    }
    if !errors.is_empty() {
        return Err(CredentialProblem::Invalid(errors));
    }
    Ok(BTreeMap::from([
        ("KeyId".to_owned(), key_id.to_owned()),
        ("ApplePlatformTeamID".to_owned(), team.to_owned()),
        ("ApplePlatformBundleID".to_owned(), bundle.to_owned()),
    ]))
}

#[cfg(test)]
mod tests {
    use chrono::TimeZone;
    use serde_json::{json, Map};

    use super::*;
    use crate::testing::{p8_key, push_certificate, service_account, CertificateSpec};

    fn now() -> Timestamp {
        chrono::Utc
            .with_ymd_and_hms(2026, 11, 22, 10, 0, 0)
            .single()
            .expect("time")
    }

    fn input(
        platform: &str,
        credential: &str,
        principal: Option<&str>,
        properties: Value,
    ) -> PlatformInput {
        PlatformInput {
            app_id: "app".into(),
            platform: platform.into(),
            credential: credential.into(),
            principal: principal.map(Into::into),
            properties: properties.as_object().cloned().unwrap_or_else(Map::new),
        }
    }

    fn fields(r: Result<BTreeMap<String, String>, CredentialProblem>) -> Vec<String> {
        match r {
            Ok(_) => Vec::new(),
            Err(CredentialProblem::Invalid(e)) => e
                .into_iter()
                .map(|e| format!("{}: {}", e.field, e.message))
                .collect(),
            Err(CredentialProblem::LegacyFcmKey) => vec!["legacy".into()],
        }
    }

    #[test]
    fn fcm_service_accounts() {
        let v = OfflineValidator;
        let sa = service_account("demo-project");
        let facts = v
            .validate(&input("GCM", &sa, Some(""), json!({})), now())
            .expect("valid");
        assert_eq!(facts["ProjectId"], "demo-project");
        assert_eq!(
            facts["ClientEmail"],
            "push@demo-project.iam.gserviceaccount.com"
        );
        // Double-encoded JSON, and FCM as an alias.
        let encoded = serde_json::to_string(&sa).expect("string");
        assert!(v
            .validate(&input("FCM", &encoded, None, json!({})), now())
            .is_ok());
        assert_eq!(
            fields(v.validate(
                &input("GCM", "AAAAxyz:APA91bHPRgkF3JUik", None, json!({})),
                now()
            )),
            ["legacy"]
        );
        let mut broken: Value = serde_json::from_str(&sa).expect("json");
        broken["private_key"] =
            json!("-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n");
        broken.as_object_mut().expect("obj").remove("client_email");
        let problems = fields(v.validate(
            &input("GCM", &broken.to_string(), Some("x"), json!({})),
            now(),
        ));
        assert_eq!(problems.len(), 3, "{problems:?}");
        assert!(problems.iter().any(|p| p.contains("client_email")));
        assert!(problems.iter().any(|p| p.contains("private_key")));
        assert!(problems.iter().any(|p| p.starts_with("platformPrincipal")));
        assert!(!fields(v.validate(&input("GCM", "{not json", None, json!({})), now())).is_empty());
        let small = rsa::RsaPrivateKey::new(&mut rand::thread_rng(), 1024).expect("key");
        let mut weak: Value = serde_json::from_str(&sa).expect("json");
        weak["private_key"] = json!(rsa::pkcs8::EncodePrivateKey::to_pkcs8_pem(
            &small,
            rsa::pkcs8::LineEnding::LF
        )
        .expect("pem")
        .to_string());
        assert_eq!(
            fields(v.validate(&input("GCM", &weak.to_string(), None, json!({})), now())),
            ["platformCredential: `private_key` is shorter than 2048 bits"]
        );
    }

    #[test]
    fn apple_certificates() {
        let v = OfflineValidator;
        let ok = push_certificate(CertificateSpec::default());
        let facts = v
            .validate(
                &input("APNS", &ok.private_key, Some(&ok.certificate), json!({})),
                now(),
            )
            .expect("valid");
        assert_eq!(
            facts["AppleCertificateExpirationDate"],
            "2099-01-01T00:00:00Z"
        );
        assert_eq!(facts["BundleId"], "com.example.app");
        assert_eq!(facts["CertificateFingerprint"].len(), 64);
        let other_key = push_certificate(CertificateSpec::default()).private_key;
        let cases: Vec<(&str, CertificateSpec, Option<String>, &str)> = vec![
            (
                "expired",
                CertificateSpec {
                    expires_year: 2020,
                    ..Default::default()
                },
                None,
                "expired",
            ),
            (
                "not apple",
                CertificateSpec {
                    apple_issuer: false,
                    ..Default::default()
                },
                None,
                "Apple-issued",
            ),
            (
                "production only, for sandbox",
                CertificateSpec {
                    sandbox: false,
                    ..Default::default()
                },
                None,
                "sandbox",
            ),
            (
                "wrong key",
                CertificateSpec::default(),
                Some(other_key),
                "not the private key",
            ),
            (
                "encrypted key",
                CertificateSpec::default(),
                Some(
                    "-----BEGIN ENCRYPTED PRIVATE KEY-----\nAA\n-----END ENCRYPTED PRIVATE \
                    KEY-----"
                        .into(),
                ),
                "passphrase",
            ),
        ];
        for (name, spec, key, needle) in cases {
            let cert = push_certificate(spec);
            let key = key.unwrap_or(cert.private_key);
            let problems = fields(v.validate(
                &input("APNS_SANDBOX", &key, Some(&cert.certificate), json!({})),
                now(),
            ));
            assert!(
                problems.iter().any(|p| p.contains(needle)),
                "{name}: {problems:?}"
            );
        }
        let dev_only = push_certificate(CertificateSpec {
            production: false,
            ..Default::default()
        });
        let problems = fields(v.validate(
            &input(
                "APNS",
                &dev_only.private_key,
                Some(&dev_only.certificate),
                json!({}),
            ),
            now(),
        ));
        assert!(
            problems.iter().any(|p| p.contains("production")),
            "{problems:?}"
        );
        let garbage = fields(v.validate(
            &input(
                "APNS",
                "x",
                Some("-----BEGIN CERTIFICATE-----\nnope\n-----END CERTIFICATE-----"),
                json!({}),
            ),
            now(),
        ));
        assert!(!garbage.is_empty());
    }

    #[test]
    fn apple_token_keys() {
        let v = OfflineValidator;
        let key = p8_key();
        let props = json!({"teamId": "ABCDE12345", "bundleId": "com.example.app"});
        let facts = v
            .validate(
                &input("APNS", &key, Some("KEY1234567"), props.clone()),
                now(),
            )
            .expect("valid");
        assert_eq!(facts["KeyId"], "KEY1234567");
        assert_eq!(facts["ApplePlatformTeamID"], "ABCDE12345");
        let problems = fields(v.validate(
            &input(
                "APNS",
                "not a key",
                Some("short"),
                json!({"teamId": "x", "bundleId": "app"}),
            ),
            now(),
        ));
        assert_eq!(problems.len(), 4, "{problems:?}");
    }
}
