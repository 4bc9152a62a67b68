//! Push notification platforms (contract §8): offline validation of FCM service accounts,
//! APNs certificates and .p8 keys, AES-256-GCM encryption of credentials at rest, and the
//! FCM HTTP v1 and APNs HTTP/2 senders, behind the domain's ports.
//!
//! Nothing of it exists yet: the push notification platforms issue builds it. The crate is
//! part of the workspace now so that the dependency rule (adapters depend on `domain` only)
//! is fixed from the start.
