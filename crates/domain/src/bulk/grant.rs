//! Signed upload URLs: what one grants, and how it is signed and checked.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use hmac::{Hmac, Mac};
use sha2::Sha256;

use super::UPLOAD_URL_MINUTES;

use crate::trigger::Mode;
use crate::Timestamp;

/// What an upload URL grants: one upload for one task, until `expires` (unix seconds).
///
/// The URL carries it signed ([`sign`](Self::sign)), so it needs no credential of its own; the
/// upload checks it with [`verify`](Self::verify) (docs/api.md, Bulk start from CSV).
///
/// ```
/// use workbench_domain::bulk::{GrantError, UploadGrant};
/// use workbench_domain::chrono::{Duration, Utc};
/// use workbench_domain::trigger::Mode;
///
/// let now = Utc::now();
/// let grant = UploadGrant {
///     environment_id: "env_1".into(),
///     flow_id: "flw_1".into(),
///     task_id: 42,
///     mode: Mode::Live,
///     expires: (now + Duration::minutes(5)).timestamp(),
/// };
/// let token = grant.sign(b"upload key");
/// assert_eq!(UploadGrant::verify(&token, b"upload key", now), Ok(grant));
///
/// // Another key, an altered token, or a token past its time is refused.
/// assert_eq!(UploadGrant::verify(&token, b"other key", now), Err(GrantError::Tampered));
/// let altered = format!("x{token}");
/// assert_eq!(UploadGrant::verify(&altered, b"upload key", now), Err(GrantError::Tampered));
/// let later = now + Duration::minutes(5);
/// assert_eq!(UploadGrant::verify(&token, b"upload key", later), Err(GrantError::Expired));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UploadGrant {
    /// The environment of the task.
    pub environment_id: String,
    /// The Action Flow of the task.
    pub flow_id: String,
    /// The task the upload is for ([`BulkTask::id`](super::BulkTask::id)).
    pub task_id: i64,
    /// The task's mode.
    pub mode: Mode,
    /// Unix seconds from which the grant is refused as expired.
    pub expires: i64,
}

/// Why an upload URL's token is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GrantError {
    /// Not a token signed with this key: malformed, altered, or signed with another key (a
    /// rotated `WORKBENCH_SECRET_KEY` included). 403 `upload_url_invalid`.
    #[error("the upload URL is not valid (malformed or tampered with)")]
    Tampered,
    /// A genuine token whose time has passed (see [`UPLOAD_URL_MINUTES`]). 403
    /// `upload_url_expired`.
    #[error("the upload URL has expired (it is valid for {UPLOAD_URL_MINUTES} minutes)")]
    Expired,
}

impl UploadGrant {
    /// The token of the upload URL:
    /// `base64url(payload).base64url(HMAC-SHA256(key, payload))`, unpadded, the payload being
    /// `environment|flow|task|mode|expires`. Only [`verify`](Self::verify) with the same `key`
    /// accepts it.
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

    /// Checks a token against `key` as of `now`, and answers the grant it carries.
    ///
    /// Fails with [`GrantError::Tampered`] when the token is not of the form
    /// [`sign`](Self::sign) makes or its tag is not that of its payload under `key` (compared
    /// in constant time), and with [`GrantError::Expired`] when it is genuine but `now` is at
    /// or after its `expires`.
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
