//! Bearer secrets: generated from the OS's random source, stored only as SHA-256 hashes,
//! compared in constant time.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use rand::RngCore;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

/// `bytes` as lowercase hex, two digits each (every request hashes its bearer: no formatter
/// and no allocation per byte).
pub(crate) fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        out.push(char::from(DIGITS[usize::from(b >> 4)]));
        out.push(char::from(DIGITS[usize::from(b & 15)]));
    }
    out
}

/// The SHA-256 of a secret, as lowercase hex. This is all the database ever holds.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct SecretHash(String);

impl SecretHash {
    /// The hash of `secret`.
    pub fn of(secret: &str) -> Self {
        SecretHash(hex(&Sha256::digest(secret.as_bytes())))
    }

    /// Rebuilds a hash read back from storage.
    pub fn from_stored(hex: String) -> Self {
        SecretHash(hex)
    }

    /// The 64 lowercase hex digits, as stored.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Constant-time check that `secret` hashes to this value.
    pub fn verify(&self, secret: &str) -> bool {
        SecretHash::of(secret)
            .0
            .as_bytes()
            .ct_eq(self.0.as_bytes())
            .into()
    }
}

impl std::fmt::Debug for SecretHash {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SecretHash(..)")
    }
}

/// A freshly generated secret: its prefix (`wbs_`, `wbt_`) + base64url of 32 random bytes. The
/// plaintext is handed to the caller once; `Debug` never prints it.
pub struct NewSecret {
    /// The secret in clear: the prefix and 43 base64url characters.
    pub plaintext: String,
    /// Its hash, what is stored.
    pub hash: SecretHash,
}

impl std::fmt::Debug for NewSecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("NewSecret(..)")
    }
}

/// Prefix of API key secrets (`Authorization: Bearer wbs_...`).
pub const KEY_SECRET_PREFIX: &str = "wbs_";
/// Prefix of OAuth access tokens issued by `POST /oauth/token`.
pub const ACCESS_TOKEN_PREFIX: &str = "wbt_";

/// A new secret: `prefix` ([`KEY_SECRET_PREFIX`], [`ACCESS_TOKEN_PREFIX`]) followed by
/// base64url, without padding, of 32 bytes from the OS's random source; and its hash
/// (docs/api.md, Credentials).
///
/// # Panics
///
/// When the OS's random source fails.
pub fn generate(prefix: &str) -> NewSecret {
    let mut bytes = [0u8; 32];
    rand::rngs::OsRng.fill_bytes(&mut bytes);
    let plaintext = format!("{prefix}{}", URL_SAFE_NO_PAD.encode(bytes));
    let hash = SecretHash::of(&plaintext);
    NewSecret { plaintext, hash }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_secrets_are_unique_and_verify_against_their_hash() {
        let a = generate(KEY_SECRET_PREFIX);
        let b = generate(KEY_SECRET_PREFIX);
        assert_ne!(a.plaintext, b.plaintext);
        assert!(a.plaintext.starts_with("wbs_"));
        assert_eq!(a.plaintext.len(), 4 + 43);
        assert!(a.hash.verify(&a.plaintext));
        assert!(!a.hash.verify(&b.plaintext));
        assert_eq!(a.hash.as_str().len(), 64);
    }

    #[test]
    fn hex_is_two_lowercase_digits_a_byte() {
        assert_eq!(hex(&[]), "");
        assert_eq!(hex(&[0x00, 0x0f, 0xa0, 0xff]), "000fa0ff");
        for b in 0..=u8::MAX {
            assert_eq!(hex(&[b]), format!("{b:02x}"));
        }
    }

    #[test]
    fn hash_matches_known_sha256_vector() {
        assert_eq!(
            SecretHash::of("abc").as_str(),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }

    #[test]
    fn debug_never_prints_the_secret() {
        let s = generate(ACCESS_TOKEN_PREFIX);
        assert!(!format!("{s:?}").contains(&s.plaintext));
        assert!(!format!("{:?}", s.hash).contains(s.hash.as_str()));
    }
}
