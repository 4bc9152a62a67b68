//! Signed upload URLs: what one grants, and how it is signed and checked.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use hmac::{Hmac, Mac};
use sha2::Sha256;

use super::UPLOAD_URL_MINUTES;

use crate::trigger::Mode;
use crate::Timestamp;

/// What an upload URL grants: one upload for one task, until `expires` (unix seconds).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UploadGrant {
    pub environment_id: String,
    pub flow_id: String,
    pub task_id: i64,
    pub mode: Mode,
    pub expires: i64,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GrantError {
    #[error("the upload URL is not valid (malformed or tampered with)")]
    Tampered,
    #[error("the upload URL has expired (it is valid for {UPLOAD_URL_MINUTES} minutes)")]
    Expired,
}

impl UploadGrant {
    /// `base64url(payload).base64url(HMAC-SHA256(key, payload))`.
    pub fn sign(&self, key: &[u8]) -> String {
        let payload = format!(
            "{}|{}|{}|{}|{}",
            self.environment_id,
            self.flow_id,
            self.task_id,
            self.mode.as_str(),
            self.expires
        );
        let tag = mac(key, payload.as_bytes());
        format!(
            "{}.{}",
            URL_SAFE_NO_PAD.encode(payload),
            URL_SAFE_NO_PAD.encode(tag)
        )
    }

    pub fn verify(token: &str, key: &[u8], now: Timestamp) -> Result<UploadGrant, GrantError> {
        let (payload, tag) = token.split_once('.').ok_or(GrantError::Tampered)?;
        let payload = URL_SAFE_NO_PAD
            .decode(payload)
            .map_err(|_| GrantError::Tampered)?;
        let tag = URL_SAFE_NO_PAD
            .decode(tag)
            .map_err(|_| GrantError::Tampered)?;
        let mut check = Hmac::<Sha256>::new_from_slice(key).map_err(|_| GrantError::Tampered)?;
        check.update(&payload);
        check.verify_slice(&tag).map_err(|_| GrantError::Tampered)?;
        let text = String::from_utf8(payload).map_err(|_| GrantError::Tampered)?;
        let parts: Vec<&str> = text.split('|').collect();
        let [env, flow, task, mode, expires] = parts.as_slice() else {
            return Err(GrantError::Tampered);
        };
        let grant = UploadGrant {
            environment_id: (*env).to_owned(),
            flow_id: (*flow).to_owned(),
            task_id: task.parse().map_err(|_| GrantError::Tampered)?,
            mode: match *mode {
                "live" => Mode::Live,
                "test" => Mode::Test,
                _ => return Err(GrantError::Tampered),
            },
            expires: expires.parse().map_err(|_| GrantError::Tampered)?,
        };
        if now.timestamp() >= grant.expires {
            return Err(GrantError::Expired);
        }
        Ok(grant)
    }
}

fn mac(key: &[u8], data: &[u8]) -> Vec<u8> {
    // HMAC takes keys of any length.
    let mut m = match Hmac::<Sha256>::new_from_slice(key) {
        Ok(m) => m,
        Err(_) => return Vec::new(),
    };
    m.update(data);
    m.finalize().into_bytes().to_vec()
}
