//! Standard Webhooks v1: `v1,` + base64 of HMAC-SHA256 over `{id}.{timestamp}.{body}`, keyed by
//! the bytes of the secret after `whsec_`.

use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use hmac::{Hmac, Mac};
use sha2::Sha256;

/// The `webhook-signature` value: one `v1,<sig>` per secret, space-separated.
pub fn signature_header(
    secrets: &[String],
    message_id: &str,
    timestamp: i64,
    body: &str,
) -> String {
    secrets
        .iter()
        .filter_map(|s| sign(s, message_id, timestamp, body))
        .collect::<Vec<_>>()
        .join(" ")
}

/// One signature, or None for a secret that is not `whsec_` + base64 (never stored by us).
pub fn sign(secret: &str, message_id: &str, timestamp: i64, body: &str) -> Option<String> {
    let key = STANDARD.decode(secret.strip_prefix("whsec_")?).ok()?;
    let mut mac = Hmac::<Sha256>::new_from_slice(&key).ok()?;
    mac.update(message_id.as_bytes());
    mac.update(b".");
    mac.update(timestamp.to_string().as_bytes());
    mac.update(b".");
    mac.update(body.as_bytes());
    Some(format!(
        "v1,{}",
        STANDARD.encode(mac.finalize().into_bytes())
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The published test vector of the Standard Webhooks / Svix libraries.
    #[test]
    fn matches_the_published_vector() {
        let sig = sign(
            "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
            "msg_p5jXN8AQM9LWM0D4loKWxJek",
            1614265330,
            r#"{"test": 2432232314}"#,
        );
        assert_eq!(
            sig.as_deref(),
            Some("v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=")
        );
    }

    #[test]
    fn verifies_with_the_standardwebhooks_crate_for_every_secret() {
        let secrets = vec![domain::webhook::new_secret(), domain::webhook::new_secret()];
        let body = r#"{"data":{"analyticsEvent":"card-completed"}}"#;
        let ts = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .expect("time")
            .as_secs() as i64;
        let header = signature_header(&secrets, "evt_1", ts, body);
        assert_eq!(header.split(' ').count(), 2);
        for secret in &secrets {
            let mut headers = http::HeaderMap::new();
            headers.insert("webhook-id", "evt_1".parse().expect("h"));
            headers.insert("webhook-timestamp", ts.to_string().parse().expect("h"));
            headers.insert("webhook-signature", header.parse().expect("h"));
            standardwebhooks::Webhook::new(secret)
                .expect("secret")
                .verify(body.as_bytes(), &headers)
                .expect("verifies");
        }
        let mut tampered = http::HeaderMap::new();
        tampered.insert("webhook-id", "evt_2".parse().expect("h"));
        tampered.insert("webhook-timestamp", ts.to_string().parse().expect("h"));
        tampered.insert("webhook-signature", header.parse().expect("h"));
        assert!(standardwebhooks::Webhook::new(&secrets[0])
            .expect("secret")
            .verify(body.as_bytes(), &tampered)
            .is_err());
    }

    #[test]
    fn malformed_secrets_sign_nothing() {
        assert_eq!(sign("nope", "m", 1, "b"), None);
        assert_eq!(sign("whsec_!!!", "m", 1, "b"), None);
    }
}
