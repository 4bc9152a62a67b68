//! Flow instances stored as they go (contract §21): one per user an invocation of a flow that
//! waits or branches reaches, with a record per step it reached, and when to look at it again.
//! Their port; [`super::waits::Waits`] runs them on.

use std::sync::Arc;

use async_trait::async_trait;
use chrono::Duration;

use crate::card::{AnalyticsEvent, CardInstance};
use crate::flow::steps::run::Records;
use crate::flow::steps::{ClosedCard, InstanceState};
use crate::{StorageError, Timestamp};

/// How many due instances one claim takes, oldest deadline first.
pub const CLAIM_INSTANCES: usize = 500;
/// How long a claim on due instances lasts before another worker may take them.
pub const INSTANCE_LEASE_SECONDS: i64 = 30;

/// One flow instance as stored.
#[derive(Debug, Clone, PartialEq)]
pub struct FlowInstance {
    /// Its environment.
    pub environment_id: String,
    /// Its id, which its cards carry as their `flow_instance_id`.
    pub id: String,
    /// The invocation that started it.
    pub invocation_id: String,
    /// Its flow.
    pub flow_id: String,
    /// The version it runs to its end.
    pub flow_version: u32,
    /// Its user.
    pub user_id: String,
    /// Active while a step waits; then completed, cancelled or failed.
    pub state: InstanceState,
    /// A record per step it reached.
    pub records: Records,
    /// When to look at it again: its earliest deadline, or at once when a card it listens to
    /// closed. `None` once nothing waits.
    pub due: Option<Timestamp>,
    /// Changed by every claim, every save and every card closing that concerns it: a save
    /// applies only while it is the one its holder read.
    pub revision: i64,
    /// When it started.
    pub created: Timestamp,
    /// When it last changed.
    pub updated: Timestamp,
}

/// An instance run on: its new state (with the revision it was read at) and the cards, with
/// their events, that its steps made.
#[derive(Debug, Clone)]
pub struct InstanceAdvance {
    /// The instance as it is to be stored; its `revision` is the one it was read at.
    pub instance: FlowInstance,
    /// When its invocation was created: the cancels of its flow accepted since then apply.
    pub invocation_created: Timestamp,
    /// The cards its steps made, shared with their events.
    pub cards: Vec<Arc<CardInstance>>,
    /// One event per card.
    pub events: Vec<AnalyticsEvent>,
}

/// Storage of flow instances (a port; docs/architecture.md, The engine: waits).
///
/// An instance is written first with the batch that starts it
/// ([`super::InvocationRepository::save_batches`]); this port claims due ones, and saves each
/// one run on with its cards, events and outbox rows in one transaction, fenced by its revision.
/// A card that closes changes the revision of the instance that made it and makes it due at once
/// (in the card's own transaction, [`crate::card::CardRepository::transition`]), so a save that
/// read the card still open changes nothing, and the instance is run again.
#[cfg_attr(feature = "mock", mockall::automock)]
#[async_trait]
pub trait InstanceRepository: Send + Sync {
    /// Up to `limit` active instances due at `now` (the database's clock) and not claimed by
    /// another holder, oldest due first, each claimed until `lease` after `now` (its revision
    /// changed).
    async fn claim_due(
        &self,
        now: Timestamp,
        lease: Duration,
        limit: usize,
    ) -> Result<Vec<FlowInstance>, StorageError>;

    /// Of these cards of the environment, those that have closed, with how (and the values a
    /// submitted one was submitted with).
    async fn closed_cards(
        &self,
        environment_id: &str,
        card_ids: Vec<String>,
    ) -> Result<Vec<(String, ClosedCard)>, StorageError>;

    /// Saves each instance run on, with its cards, in one transaction: each only while its
    /// stored revision is the one it was read at, and with the cancels of its flow accepted
    /// since its invocation was created applied (a covered instance is stored cancelled, and
    /// its cards are not made). Answers how many were stale (not saved).
    async fn advance(&self, advances: Vec<InstanceAdvance>) -> Result<u64, StorageError>;

    /// The instance of this user in this invocation of the environment.
    async fn get(
        &self,
        environment_id: &str,
        invocation_id: &str,
        user_id: &str,
    ) -> Result<Option<FlowInstance>, StorageError>;

    /// Up to `limit` instances of the invocation, in user order after `after_user`.
    async fn of_invocation(
        &self,
        environment_id: &str,
        invocation_id: &str,
        after_user: Option<String>,
        limit: usize,
    ) -> Result<Vec<FlowInstance>, StorageError>;
}
