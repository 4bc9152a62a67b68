//! Push notification platforms (contract §8): offline validation of FCM service accounts,
//! APNs certificates and .p8 signing keys behind the domain's [`CredentialValidator`] port.
//! (Encryption at rest is the storage adapter's `SecretBox`, shared with webhook secrets; the
//! FCM and APNs senders are not built yet.)
//!
//! [`CredentialValidator`]: domain::push::CredentialValidator

#[cfg(feature = "testing")]
pub mod testing;
mod validate;

pub use validate::OfflineValidator;
