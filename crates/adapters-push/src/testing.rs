//! Credentials generated for tests (never keys of real accounts): Apple-like push
//! certificates signed by a throw-away "Apple Worldwide Developer Relations" CA, .p8 keys, and
//! FCM service-account JSON with a fresh RSA key.

#![allow(clippy::unwrap_used)] // test helpers: a failure here is a broken test setup

use rcgen::{
    date_time_ymd, BasicConstraints, CertificateParams, CustomExtension, DistinguishedName, DnType,
    IsCa, KeyPair,
};
use rsa::pkcs8::{EncodePrivateKey, LineEnding};

/// A push certificate (PEM) and its private key (PKCS#8 PEM).
pub struct PushCertificate {
    /// The certificate.
    pub certificate: String,
    /// Its private key.
    pub private_key: String,
}

/// Options of a generated certificate.
pub struct CertificateSpec {
    /// Issued by a CA named as Apple's push CA.
    pub apple_issuer: bool,
    /// With Apple's development (sandbox) push extension.
    pub sandbox: bool,
    /// With Apple's production push extension.
    pub production: bool,
    /// Year of `notAfter` (2099 by default; a past year makes it expired).
    pub expires_year: i32,
    /// The app's bundle id, in the subject's UID.
    pub bundle_id: &'static str,
}

impl Default for CertificateSpec {
    fn default() -> Self {
        CertificateSpec {
            apple_issuer: true,
            sandbox: true,
            production: true,
            expires_year: 2099,
            bundle_id: "com.example.app",
        }
    }
}

/// A push certificate of `spec`, signed by a CA generated for it.
pub fn push_certificate(spec: CertificateSpec) -> PushCertificate {
    let ca_key = KeyPair::generate().unwrap();
    let mut ca = CertificateParams::new(Vec::<String>::new()).unwrap();
    let mut ca_name = DistinguishedName::new();
    let issuer = if spec.apple_issuer {
        "Apple Worldwide Developer Relations Certification Authority"
    } else {
        "Some Other CA"
    };
    ca_name.push(DnType::CommonName, issuer);
    ca.distinguished_name = ca_name;
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca_cert = ca.self_signed(&ca_key).unwrap();

    let key = KeyPair::generate().unwrap();
    let mut leaf = CertificateParams::new(Vec::<String>::new()).unwrap();
    let mut name = DistinguishedName::new();
    name.push(
        DnType::CommonName,
        format!("Apple Push Services: {}", spec.bundle_id),
    );
    name.push(
        DnType::CustomDnType(vec![0, 9, 2342, 19200300, 100, 1, 1]),
        spec.bundle_id,
    );
    leaf.distinguished_name = name;
    if spec.sandbox {
        leaf.custom_extensions
            .push(CustomExtension::from_oid_content(
                &[1, 2, 840, 113635, 100, 6, 3, 1],
                vec![0x05, 0x00],
            ));
    }
    if spec.production {
        leaf.custom_extensions
            .push(CustomExtension::from_oid_content(
                &[1, 2, 840, 113635, 100, 6, 3, 2],
                vec![0x05, 0x00],
            ));
    }
    leaf.not_before = date_time_ymd(2000, 1, 1);
    leaf.not_after = date_time_ymd(spec.expires_year, 1, 1);
    let cert = leaf.signed_by(&key, &ca_cert, &ca_key).unwrap();
    PushCertificate {
        certificate: cert.pem(),
        private_key: key.serialize_pem(),
    }
}

/// A .p8 signing key: EC P-256, PKCS#8 PEM.
pub fn p8_key() -> String {
    KeyPair::generate().unwrap().serialize_pem()
}

/// FCM service-account JSON with a fresh 2048-bit RSA key (the smallest Google issues and the
/// smallest the signer accepts).
pub fn service_account(project: &str) -> String {
    let key = rsa::RsaPrivateKey::new(&mut rand::thread_rng(), 2048).unwrap();
    let pem = key.to_pkcs8_pem(LineEnding::LF).unwrap().to_string();
    serde_json::json!({
        "type": "service_account",
        "project_id": project,
        "private_key_id": "0123456789abcdef",
        "private_key": pem,
        "client_email": format!("push@{project}.iam.gserviceaccount.com"),
        "client_id": "1",
        "token_uri": "https://oauth2.googleapis.com/token",
    })
    .to_string()
}
