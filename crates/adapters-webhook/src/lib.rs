//! Outbound webhook delivery (contract §7): the domain's [`domain::webhook::WebhookTransport`]
//! port on reqwest.
//!
//! - [`signing`]: Standard Webhooks v1 signatures (`webhook-id`, `webhook-timestamp`,
//!   `webhook-signature`), several when a rotated secret is still valid.
//! - [`ssrf`]: which addresses may be called, and a resolver that refuses a name if any of its
//!   addresses is forbidden. reqwest connects only to the addresses the resolver returned, so
//!   the checked address is the one called (no DNS rebinding between check and connect).
//! - [`HttpTransport`]: 15 s timeout, no redirects, no proxy, connection reuse, the first
//!   20 KB of each answer kept for the attempt log.

#![deny(missing_docs)]

pub mod signing;
pub mod ssrf;
mod transport;

pub use ssrf::{AddressPolicy, PolicyError};
pub use transport::{HttpTransport, TransportConfig, MAX_LOGGED_BODY_BYTES};
