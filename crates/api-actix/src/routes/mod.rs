//! Route handlers: each translates HTTP to a domain call and the answer back. No rules here.

pub mod audience;
pub mod bulk;
pub mod configs;
pub mod credentials;
pub mod environments;
pub mod feed;
pub mod flows;
pub mod folders;
pub mod instances;
pub mod oauth;
pub mod ops;
pub mod publish;
pub mod push;
pub mod query;
pub mod sdk_keys;
pub mod settings;
mod shape;
pub mod stats;
pub mod tasks;
pub mod trigger;
pub mod webhooks;

use domain::Timestamp;

/// The API's timestamp format: RFC 3339, UTC, milliseconds (`2026-11-22T10:00:00.000Z`).
pub(crate) fn timestamp(t: &Timestamp) -> String {
    domain::time::format_timestamp(t)
}
