//! Push notification platforms (contract §8): offline validation of FCM service accounts,
//! APNs certificates and .p8 signing keys behind the domain's [`CredentialValidator`] port,
//! and the [`PushSender`] port over FCM HTTP v1 and APNs HTTP/2 ([`HttpPushSender`]).
//! Encryption at rest is the storage adapter's `SecretBox`, shared with webhook secrets.
//! With the `testing` feature: generated credentials and a fake FCM/APNs (module `fake`).
//!
//! [`CredentialValidator`]: domain::push::CredentialValidator
//! [`PushSender`]: domain::push::PushSender

#![deny(missing_docs)]

#[cfg(feature = "testing")]
pub mod fake;
mod send;
#[cfg(feature = "testing")]
pub mod testing;
mod validate;

pub use send::{HttpPushSender, ProviderUrls, SenderError};
pub use validate::OfflineValidator;
