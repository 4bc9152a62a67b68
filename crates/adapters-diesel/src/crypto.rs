//! Encryption of secrets at rest (contract §9): AES-256-GCM, a fresh random 96-bit nonce per
//! write, and the record and field as associated data, so a sealed value copied into another
//! row or column does not open. One implementation for every table that stores secrets.
//!
//! Sealed text: `v1.<key id>.<base64(nonce ‖ ciphertext ‖ tag)>`. The key id (8 hex digits of
//! the key's SHA-256) lets a rotated-out key still open old values until they are rewritten.

use aes_gcm::aead::{Aead, KeyInit, Payload};
use aes_gcm::{Aes256Gcm, Nonce};
use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use rand::RngCore;
use sha2::{Digest, Sha256};

use domain::StorageError;

/// Why a key could not be used.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum KeyError {
    /// Not base64.
    #[error("the secret key is not valid base64")]
    NotBase64,
    /// Not 32 bytes once decoded.
    #[error("the secret key must be 32 bytes (base64 of 32 random bytes); this one is {0} bytes")]
    WrongLength(usize),
}

struct Key {
    id: String,
    bytes: Vec<u8>,
    cipher: Aes256Gcm,
}

impl Key {
    fn parse(base64: &str) -> Result<Self, KeyError> {
        let bytes = STANDARD
            .decode(base64.trim())
            .map_err(|_| KeyError::NotBase64)?;
        if bytes.len() != 32 {
            return Err(KeyError::WrongLength(bytes.len()));
        }
        let digest = Sha256::digest(&bytes);
        let id = digest[..4].iter().map(|b| format!("{b:02x}")).collect();
        let cipher = Aes256Gcm::new_from_slice(&bytes).map_err(|_| KeyError::WrongLength(0))?;
        Ok(Key { id, bytes, cipher })
    }
}

/// Seals and opens secrets. Cheap to share behind an `Arc`.
pub struct SecretBox {
    current: Key,
    previous: Vec<Key>,
}

impl std::fmt::Debug for SecretBox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "SecretBox(key {})", self.current.id)
    }
}

impl SecretBox {
    /// `current` seals; `previous` keys (being rotated out) still open.
    pub fn new(current: &str, previous: &[String]) -> Result<Self, KeyError> {
        Ok(SecretBox {
            current: Key::parse(current)?,
            previous: previous
                .iter()
                .map(|k| Key::parse(k))
                .collect::<Result<_, _>>()?,
        })
    }

    /// A new random key, base64.
    pub fn generate_key() -> String {
        let mut bytes = [0u8; 32];
        rand::rngs::OsRng.fill_bytes(&mut bytes);
        STANDARD.encode(bytes)
    }

    /// A key for another purpose (signing upload URLs, ...), derived from the current key:
    /// HMAC-SHA256(key, purpose). Rotating the key changes it.
    pub fn derive_key(&self, purpose: &str) -> [u8; 32] {
        use hmac::Mac;
        let mut mac = match <hmac::Hmac<Sha256> as Mac>::new_from_slice(&self.current.bytes) {
            Ok(m) => m,
            Err(_) => return [0; 32],
        };
        mac.update(purpose.as_bytes());
        mac.finalize().into_bytes().into()
    }

    /// The id of the sealing key (safe to log).
    pub fn key_id(&self) -> &str {
        &self.current.id
    }

    /// Seals `plaintext` for the field `context` (e.g. `webhook_subscriptions.secret:whk_…`).
    pub fn seal(&self, plaintext: &str, context: &str) -> Result<String, StorageError> {
        let mut nonce = [0u8; 12];
        rand::rngs::OsRng.fill_bytes(&mut nonce);
        let sealed = self
            .current
            .cipher
            .encrypt(
                Nonce::from_slice(&nonce),
                Payload {
                    msg: plaintext.as_bytes(),
                    aad: context.as_bytes(),
                },
            )
            .map_err(|_| StorageError::Internal("encryption failed".into()))?;
        let mut out = Vec::with_capacity(12 + sealed.len());
        out.extend_from_slice(&nonce);
        out.extend_from_slice(&sealed);
        Ok(format!("v1.{}.{}", self.current.id, STANDARD.encode(out)))
    }

    /// Opens a value sealed for the same `context` by the current or a previous key.
    pub fn open(&self, sealed: &str, context: &str) -> Result<String, StorageError> {
        let fail =
            |why: &str| StorageError::Internal(format!("cannot open a sealed secret: {why}"));
        let mut parts = sealed.splitn(3, '.');
        let (Some("v1"), Some(key_id), Some(body)) = (parts.next(), parts.next(), parts.next())
        else {
            return Err(fail("not in the v1 format"));
        };
        let key = std::iter::once(&self.current)
            .chain(&self.previous)
            .find(|k| k.id == key_id)
            .ok_or_else(|| fail("sealed by a key that is not configured"))?;
        let bytes = STANDARD.decode(body).map_err(|_| fail("not base64"))?;
        if bytes.len() < 12 + 16 {
            return Err(fail("too short"));
        }
        let (nonce, ciphertext) = bytes.split_at(12);
        let plain = key
            .cipher
            .decrypt(
                Nonce::from_slice(nonce),
                Payload {
                    msg: ciphertext,
                    aad: context.as_bytes(),
                },
            )
            .map_err(|_| fail("authentication failed (wrong key, record or field)"))?;
        String::from_utf8(plain).map_err(|_| fail("not UTF-8"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seals_with_fresh_nonces_and_binds_the_context() {
        let b = SecretBox::new(&SecretBox::generate_key(), &[]).expect("key");
        let one = b.seal("whsec_abc", "t.secret:whk_1").expect("sealed");
        let two = b.seal("whsec_abc", "t.secret:whk_1").expect("sealed");
        assert_ne!(one, two, "a fresh nonce per write");
        assert!(!one.contains("whsec_abc"));
        assert_eq!(b.open(&one, "t.secret:whk_1").expect("opens"), "whsec_abc");
        assert!(b.open(&one, "t.secret:whk_2").is_err(), "another record");
        assert!(
            b.open(&one, "t.previous_secret:whk_1").is_err(),
            "another field"
        );
        let mut tampered = one.clone();
        tampered.pop();
        tampered.push(if one.ends_with('A') { 'B' } else { 'A' });
        assert!(b.open(&tampered, "t.secret:whk_1").is_err());
    }

    #[test]
    fn a_rotated_out_key_still_opens() {
        let (old, new) = (SecretBox::generate_key(), SecretBox::generate_key());
        let sealed = SecretBox::new(&old, &[])
            .expect("key")
            .seal("s", "c")
            .expect("sealed");
        let rotated = SecretBox::new(&new, std::slice::from_ref(&old)).expect("keys");
        assert_eq!(rotated.open(&sealed, "c").expect("opens"), "s");
        assert!(SecretBox::new(&new, &[])
            .expect("key")
            .open(&sealed, "c")
            .is_err());
    }

    #[test]
    fn malformed_keys_are_refused() {
        assert_eq!(
            SecretBox::new("not base64!", &[]).err(),
            Some(KeyError::NotBase64)
        );
        assert_eq!(
            SecretBox::new(&STANDARD.encode([0u8; 16]), &[]).err(),
            Some(KeyError::WrongLength(16))
        );
    }
}
