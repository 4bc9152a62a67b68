//! Invocations: one per flow element of a trigger, recorded durably (idempotent by
//! `flowInvocationId`), then executed in batches by the [`Engine`](super::engine::Engine); and
//! the port that stores them.

use std::collections::HashSet;
use std::sync::Arc;

use async_trait::async_trait;

use super::idempotency::{decide, Reuse, RunKey};
use super::Mode;
use crate::cancel::CancelTask;
use crate::card::{AnalyticsEvent, CardInstance};
use crate::json::JsonText;
use crate::{StorageError, Timestamp};

/// At most this many bulk-target invocations run at once per environment (contract §4).
pub const MAX_RUNNING_BULK: u64 = 5;
/// Users handled per saved batch.
pub const BATCH_USERS: u32 = 1_000;
/// Invocations one engine step claims at most (see [`Engine::step`]); its batches stay within
/// [`BATCH_USERS`]. Measured in docs/benchmarks.md: 64 against 16 (CSV rows +20%), then 256
/// against 64 once saves of one-user invocations were packed (CSV rows +20%, `/start` within
/// the spread).
pub const CLAIM_PER_STEP: u32 = 256;
/// How long a claimed invocation is a worker's before another may take it over (default).
pub const LEASE_SECONDS: i64 = 30;
/// Batches of one fan-out a step runs after its first, each read and built while the one
/// before is written (measured in docs/benchmarks.md, 2026-11-23, 385878e), before the step ends
/// and the invocation goes back to being claimed with the others.
pub const FOLLOW_BATCHES: u32 = 32;
/// An invocation with a live user target of at most this many users (a CSV row's limit) is
/// executed when it is recorded, in the same transaction: its audience needs no reading, and
/// claiming and saving it again would double the writes of a `/start` or a CSV row.
pub const INLINE_USERS: usize = 10;
/// A card's priority when neither the trigger nor the template sets one.
pub const DEFAULT_PRIORITY: u8 = 5;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InvocationStatus {
    Pending,
    Running,
    Completed,
    Failed,
    Cancelled,
}

impl InvocationStatus {
    pub const fn as_str(self) -> &'static str {
        match self {
            InvocationStatus::Pending => "pending",
            InvocationStatus::Running => "running",
            InvocationStatus::Completed => "completed",
            InvocationStatus::Failed => "failed",
            InvocationStatus::Cancelled => "cancelled",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        [
            Self::Pending,
            Self::Running,
            Self::Completed,
            Self::Failed,
            Self::Cancelled,
        ]
        .into_iter()
        .find(|x| x.as_str() == s)
    }
}

/// One flow element of a trigger request, as recorded and executed.
#[derive(Debug, Clone, PartialEq)]
pub struct Invocation {
    pub environment_id: String,
    pub id: String,
    pub flow_id: String,
    pub mode: Mode,
    pub flow_version: u32,
    pub fingerprint: String,
    /// As sent, JSON text.
    pub target: JsonText,
    pub payload: JsonText,
    pub strict_variables: bool,
    pub bulk: bool,
    pub status: InvocationStatus,
    pub users_targeted: u64,
    pub cards_created: u64,
    pub errors: Vec<String>,
    /// The last user handled; the next batch starts after it.
    pub cursor: Option<String>,
    pub created: Timestamp,
    pub updated: Timestamp,
}

/// What one executed batch saves, atomically.
#[derive(Debug, Clone, PartialEq)]
pub struct BatchResult {
    pub environment_id: String,
    pub invocation_id: String,
    /// The cursor the batch started from: the save applies only if it is still the stored one
    /// (a worker whose lease ran out and was overtaken saves nothing).
    pub from_cursor: Option<String>,
    pub cursor: Option<String>,
    pub status: InvocationStatus,
    pub users_targeted: u64,
    pub cards_created: u64,
    pub errors: Vec<String>,
    /// Shared with their events. A flow instance is the cards of one user made by one batch
    /// (they share its `flow_instance_id`); it is stored with them.
    pub cards: Vec<Arc<CardInstance>>,
    pub events: Vec<AnalyticsEvent>,
    pub updated: Timestamp,
    /// The claim after the save: `None` ends it (the next batch may be claimed by any worker
    /// at once); a time keeps it until then, for the worker that goes on with the next batch
    /// itself ([`Engine::step`]).
    pub lease_until: Option<Timestamp>,
}

impl BatchResult {
    /// Applies the flow's cancel `markers` accepted meanwhile (contract §6: they take
    /// precedence): drops the flow instances they cover (their cards and events), and stops the
    /// invocation when one covers all of it.
    pub fn apply_cancels(
        &mut self,
        markers: &[CancelTask],
        flow_version: u32,
        invocation_created: Timestamp,
    ) {
        if markers.is_empty() {
            return;
        }
        let invocation = self.invocation_id.clone();
        if markers
            .iter()
            .any(|m| m.covers_invocation(&invocation, flow_version, invocation_created))
        {
            self.status = InvocationStatus::Cancelled;
            self.cursor = None;
        }
        let covered = |user: &str| {
            markers
                .iter()
                .any(|m| m.covers(&invocation, flow_version, invocation_created, user))
        };
        let dropped: HashSet<String> = self
            .cards
            .iter()
            .filter(|c| covered(&c.user_id))
            .map(|c| c.flow_instance_id.clone())
            .collect();
        if dropped.is_empty() {
            return;
        }
        self.cards
            .retain(|c| !dropped.contains(&c.flow_instance_id));
        self.events
            .retain(|e| !dropped.contains(&e.card.flow_instance_id));
        self.cards_created = self.cards.len() as u64;
    }
}

impl Invocation {
    /// Whether `other` asks for the same run as this one: the same flow, mode and
    /// fingerprint (target, payload, options). An id recorded for one run answers replays of
    /// it and refuses anything else (rule 5 of spec 4.3).
    pub fn same_run(&self, other: &Invocation) -> bool {
        decide(&other.run_key(), Some(&self.run_key())) == Reuse::Replay
    }

    /// What identifies this invocation's run, for the idempotency decision.
    pub fn run_key(&self) -> RunKey<'_> {
        RunKey {
            flow_id: &self.flow_id,
            mode: self.mode,
            fingerprint: &self.fingerprint,
        }
    }
}

#[cfg_attr(feature = "mock", mockall::automock)]
#[async_trait]
pub trait InvocationRepository: Send + Sync {
    /// In one transaction, for each invocation: insert it when its id is new in its
    /// environment, else return the stored one in its place. When a stored one differs from
    /// its request in flow, mode or fingerprint, nothing at all is inserted. Ids kept at least
    /// 30 days.
    ///
    /// An invocation given a run (its whole audience, executed at once: see
    /// [`INLINE_USERS`]) is saved with it when it is inserted, in the same transaction, as
    /// [`save_batches`](Self::save_batches) would save it (cancel markers applied): its
    /// instances, cards and events, and its final progress. The run of a replayed or refused
    /// invocation is dropped.
    async fn record_run(
        &self,
        runs: Vec<(Invocation, Option<BatchResult>)>,
    ) -> Result<Vec<Option<Invocation>>, StorageError>;
    async fn get(&self, environment_id: &str, id: &str)
        -> Result<Option<Invocation>, StorageError>;
    /// The environment's bulk-task slots held (contract §10): bulk-target invocations pending
    /// or running, and CSV tasks processing and not queued.
    async fn running_bulk(&self, environment_id: &str) -> Result<u64, StorageError>;
    /// Takes the oldest pending invocations, or running ones whose lease has expired, at most
    /// `limit`, oldest first: marks them running with a lease until `lease_until`. Never gives
    /// one invocation to two workers at once (`FOR UPDATE SKIP LOCKED` on PostgreSQL).
    async fn claim(
        &self,
        now: Timestamp,
        lease_until: Timestamp,
        limit: u32,
    ) -> Result<Vec<Invocation>, StorageError>;
    /// Saves batches in one transaction: for each, its instances, cards and events, the
    /// progress (the batch's counts are added to the invocation's), cursor and status; and
    /// releases the claim, so that the next batch can be claimed at once (by any worker:
    /// batches of concurrent invocations take turns). A batch whose invocation is no longer at
    /// the batch's starting cursor (another worker took it over and saved first) is skipped:
    /// its claim had passed to another holder (contract §19). Returns how many were skipped.
    async fn save_batches(&self, batches: Vec<BatchResult>) -> Result<u64, StorageError>;
}
