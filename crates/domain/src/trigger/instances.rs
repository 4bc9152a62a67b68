//! Flow instances stored as they go (contract §21): one per user an invocation of a flow that
//! waits or branches reaches, with a record per step it reached, and when to look at it again.
//! Their port; [`super::waits::Waits`] runs them on.

use std::collections::BTreeMap;
use std::sync::Arc;

use async_trait::async_trait;
use chrono::Duration;

use crate::card::{AnalyticsEvent, CardInstance};
use crate::flow::steps::run::Records;
use crate::flow::steps::{ClosedCard, InstanceState};
use crate::trigger::Mode;
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
    /// Its records and state as they were read, for its invocation's counts.
    pub before: (Records, InstanceState),
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

    /// Saves each instance run on, with its cards, in one transaction (all in one, or in
    /// several, each instance whole in one; an error may then come after some were saved):
    /// each only while its stored revision is the one it was read at, and with the cancels of
    /// its flow accepted since its invocation was created applied (a covered instance is stored
    /// cancelled, and its cards are not made). Answers how many were stale (not saved).
    async fn advance(&self, advances: Vec<InstanceAdvance>) -> Result<u64, StorageError>;

    /// The instance of this user in this invocation of the environment.
    async fn get(
        &self,
        environment_id: &str,
        invocation_id: &str,
        user_id: &str,
    ) -> Result<Option<FlowInstance>, StorageError>;

    /// What the invocation's instances did: `(step id, metric, count)`, the step id empty for
    /// the instances' states; per step the steps `waiting`, `cancelled`, `failed` and
    /// `outcome.<name>` (the metrics of [`crate::flow::steps::run::tally`] but `reached` and
    /// `done`, which follow from those); none for an invocation of a flow that neither waits
    /// nor branches.
    async fn counts(
        &self,
        environment_id: &str,
        invocation_id: &str,
    ) -> Result<Vec<(String, String, i64)>, StorageError>;

    /// How many instances wait at each step now, over every invocation of this version of the
    /// flow in `mode`: `(step id, count)`, steps no instance waits at left out.
    async fn waiting(
        &self,
        environment_id: &str,
        flow_id: &str,
        flow_version: u32,
        mode: Mode,
    ) -> Result<Vec<(String, u64)>, StorageError>;
}

/// What one step of an invocation's instances did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StepCounts {
    /// Instances that reached it.
    pub reached: u64,
    /// Of those, instances waiting at it now.
    pub waiting: u64,
    /// Of those, instances for which it is done.
    pub done: u64,
    /// The done ones by outcome.
    pub outcomes: BTreeMap<String, u64>,
}

/// What an invocation's instances did (contract §21): how many are in each state, and per
/// step.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct InstanceCounts {
    /// By state: `active`, `completed`, `cancelled`, `failed` (each present, 0 or more).
    pub instances: BTreeMap<String, u64>,
    /// By step id.
    pub steps: BTreeMap<String, StepCounts>,
}

impl InstanceCounts {
    /// The counts of stored `(step id, metric, n)` rows; none when there are none.
    pub fn of(rows: Vec<(String, String, i64)>) -> Option<Self> {
        if rows.is_empty() {
            return None;
        }
        let mut counts = InstanceCounts::default();
        for state in InstanceState::ALL {
            counts.instances.insert(state.as_str().to_owned(), 0);
        }
        for (step, metric, n) in rows {
            let n = u64::try_from(n).unwrap_or(0);
            if step.is_empty() {
                counts.instances.insert(metric, n);
                continue;
            }
            let entry = counts.steps.entry(step).or_default();
            // Stored: the steps waiting, cancelled, failed and done by outcome; reached and done
            // follow.
            match metric.as_str() {
                "waiting" => {
                    entry.waiting = n;
                    entry.reached += n;
                }
                "cancelled" | "failed" => entry.reached += n,
                other => {
                    if let Some(outcome) = other.strip_prefix("outcome.") {
                        entry.done += n;
                        entry.reached += n;
                        if n > 0 {
                            entry.outcomes.insert(outcome.to_owned(), n);
                        }
                    }
                }
            }
        }
        Some(counts)
    }

    /// Instances with a step still waiting.
    pub fn active(&self) -> u64 {
        self.instances.get("active").copied().unwrap_or(0)
    }
}
