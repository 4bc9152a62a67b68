//! Storage adapter: the domain's repository ports on diesel 2, over SQLite (the embedded
//! default) and PostgreSQL, in one binary.
//!
//! - [`db::AnyConnection`] is a `#[derive(diesel::MultiConnection)]` enum; queries are written
//!   once against it. Where diesel's common subset is not enough, code matches on the variant.
//! - [`db::Database`] owns an r2d2 pool, applies the embedded per-backend migrations at start
//!   (under an advisory lock on PostgreSQL) and runs every blocking call on its own threads
//!   (at most the pool's size), never on the caller's (actix worker) thread.
//! - diesel errors become [`domain::StorageError`]s: unique and foreign-key violations are
//!   named, pool time-outs are `Unavailable`, nothing panics.

#![deny(missing_docs)]

mod audience;
mod bulk;
mod cancel;
mod cards;
mod columns;
mod counts;
pub mod crypto;
pub mod db;
mod editor_texts;
mod error;
#[cfg(feature = "testing")]
pub mod faults;
mod feed;
mod flows;
mod folders;
mod health;
mod instances;
mod invocations;
mod markers;
mod millis;
mod outbox;
mod packed;
mod page;
mod prune;
mod push;
mod push_jobs;
mod recorder;
mod rows;
mod schema;
mod sdk_keys;
mod stats;
mod stream_tickets;
mod tenancy;
#[cfg(feature = "testing")]
pub mod testing;
mod totals;
#[cfg(test)]
mod waits_tests;
mod webhooks;
mod writes;

pub use audience::{DieselEndUserRepository, DieselSegmentRepository, DieselStreamRepository};
pub use bulk::DieselBulkRepository;
pub use cancel::DieselCancelRepository;
pub use crypto::{KeyError, SecretBox};
pub mod clock;
pub use cards::DieselCardRepository;
pub use clock::DatabaseClock;
pub use db::notices::Work;
pub use db::{
    apply_migrations, schema_status, Backend, Database, DatabaseError, DatabaseUrl, SchemaStatus,
    Synchronous, Waits, WAL_LIMIT_BYTES,
};
pub use editor_texts::DieselEditorTextRepository;
pub use feed::{listen as listen_for_feed, DieselFeedRepository, CHANNEL as FEED_CHANNEL};
pub use flows::{DieselFlowRepository, DieselSettingsRepository};
pub use folders::DieselFolderRepository;
pub use health::DieselHealthProbe;
pub use instances::DieselInstanceRepository;
pub use invocations::DieselInvocationRepository;
pub use prune::DieselPruneRepository;
pub use push::{DieselDeviceRepository, DieselPushPlatformRepository};
pub use push_jobs::DieselPushJobRepository;
pub use sdk_keys::DieselSdkKeyRepository;
pub use stats::DieselStatsRepository;
pub use stream_tickets::DieselStreamTicketRepository;
pub use tenancy::DieselTenancyRepository;
pub use webhooks::DieselWebhookRepository;
