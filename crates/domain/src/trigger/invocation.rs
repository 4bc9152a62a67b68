//! Invocations: one per flow element of a trigger, recorded durably (idempotent by
//! `flowInvocationId`), then executed in batches by the [`Engine`](super::engine::Engine); and
//! the port that stores them.

use crate::id::InvocationId;
use std::collections::HashSet;
use std::sync::Arc;

use async_trait::async_trait;

use super::idempotency::{decide, Reuse, RunKey};
use super::Mode;
use crate::cancel::CancelTask;
use crate::card::{AnalyticsEvent, CardInstance};
use crate::json::JsonText;
use crate::page::After;
use crate::{StorageError, Timestamp};

/// The bulk-task slots of an environment (docs/api.md, Bulk start from CSV): at most this
/// many segment, tag and filter invocations (pending or running) and CSV tasks (from their
/// first step until final) at once. A trigger that would take more is refused with 429; an
/// uploaded CSV task waits, queued.
pub const MAX_RUNNING_BULK: u64 = 5;
/// Users handled per saved batch.
pub const BATCH_USERS: u32 = 1_000;
/// Invocations one engine step claims at most (see [`Engine::step`](super::Engine::step));
/// its batches stay within [`BATCH_USERS`]. A/B measured against smaller claims: more CSV rows
/// a second, and more again once saves of one-user invocations were packed, with `/start`
/// within the spread (see the git history of docs/benchmarks.md).
pub const CLAIM_PER_STEP: u32 = 256;
/// How long a claimed invocation is a worker's before another may take it over (default).
pub use crate::unit::LEASE_SECONDS;
/// Batches of one fan-out a step runs after its first, each read and built while the one
/// before is written (a fan-out A/B measured faster that way), before the step ends and the
/// invocation goes back to being claimed with the others.
pub const FOLLOW_BATCHES: u32 = 32;
/// An invocation with a live user target of at most this many users (a CSV row's limit) is
/// executed when it is recorded, in the same transaction: its audience needs no reading, and
/// claiming and saving it again would double the writes of a `/start` or a CSV row.
pub const INLINE_USERS: usize = 10;
/// A card's priority when neither the trigger nor the template sets one.
pub const DEFAULT_PRIORITY: u8 = 5;

/// Where an invocation is: `status` of `GET .../invocations/{flowInvocationId}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InvocationStatus {
    /// Recorded; no worker has claimed it yet.
    Pending,
    /// Claimed by a worker, or between two batches of its fan-out.
    Running,
    /// Every targeted user had its batch. An invocation run when recorded is completed at once.
    Completed,
    /// Stopped by an error, which its `errors` give: its flow version or segment is gone, or a
    /// batch kept failing. The cards of the batches saved before stay.
    Failed,
    /// Stopped by a cancel that covers the whole invocation (docs/api.md, Cancel).
    Cancelled,
}

crate::spelling::spelled!(InvocationStatus {
    Pending => "pending",
    Running => "running",
    Completed => "completed",
    Failed => "failed",
    Cancelled => "cancelled",
});

impl InvocationStatus {
    /// Whether the invocation is over (completed, failed or cancelled): one pending or running
    /// still has users for the engine to reach.
    ///
    /// ```
    /// use workbench_domain::trigger::InvocationStatus;
    ///
    /// assert!(InvocationStatus::Completed.is_final());
    /// assert!(!InvocationStatus::Running.is_final());
    /// ```
    pub fn is_final(self) -> bool {
        !matches!(self, InvocationStatus::Pending | InvocationStatus::Running)
    }
}

/// Which of a flow's invocations a list keeps (`GET .../invocations?status=&mode=`): each
/// field given narrows it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct InvocationFilter {
    /// Only invocations where this is.
    pub status: Option<InvocationStatus>,
    /// Only live, or only test, invocations.
    pub mode: Option<Mode>,
}

/// One flow element of a trigger request, as recorded and executed (docs/api.md, Triggers).
#[derive(Debug, Clone, PartialEq)]
pub struct Invocation {
    /// The environment it was triggered in; its id is unique there.
    pub environment_id: String,
    /// `flowInvocationId`: the caller's, else a new `inv_…` (a CSV row's default is
    /// `csv-{task}-{row}`).
    pub id: InvocationId,
    /// The Action Flow triggered.
    pub flow_id: String,
    /// Live (`/start`) or test (`/test`).
    pub mode: Mode,
    /// The configuration version it runs (from 1), chosen when it was recorded
    /// (`flowConfigVersion`).
    pub flow_version: u32,
    /// The hash of its target and payload ([`fingerprint_of`](super::fingerprint_of)): with
    /// the flow and the mode, what a request reusing its id must match.
    pub fingerprint: String,
    /// The element's `target`, as sent, JSON text.
    pub target: JsonText,
    /// The element's `payload`, as sent, JSON text (`null` when it had none).
    pub payload: JsonText,
    /// `options.strictVariables` of its request: variables the flow does not define are
    /// refused instead of ignored (also when a batch is built).
    pub strict_variables: bool,
    /// A segment, tag or filter target: it holds a bulk-task slot while pending or running
    /// ([`MAX_RUNNING_BULK`]).
    pub bulk: bool,
    /// Where it is.
    pub status: InvocationStatus,
    /// Users its saved batches targeted (`usersTargeted`).
    pub users_targeted: u64,
    /// Cards its saved batches created (`cardsCreated`).
    pub cards_created: u64,
    /// Why it failed, for the caller.
    pub errors: Vec<String>,
    /// The last user handled; the next batch starts after it.
    pub cursor: Option<String>,
    /// When it was recorded: a cancel covers it only if accepted at or after this time.
    pub created: Timestamp,
    /// When it last changed.
    pub updated: Timestamp,
}

/// What one executed batch saves, atomically: its flow instances, cards and events, and the
/// invocation's progress ([`InvocationRepository::save_batches`]).
#[derive(Debug, Clone, PartialEq)]
pub struct BatchResult {
    /// The environment of the invocation.
    pub environment_id: String,
    /// The invocation the batch belongs to.
    pub invocation_id: String,
    /// The cursor the batch started from: the save applies only if it is still the stored one
    /// (a worker whose lease ran out and was overtaken saves nothing).
    pub from_cursor: Option<String>,
    /// The cursor after the batch: its last user when more users follow, else the one it
    /// started from.
    pub cursor: Option<String>,
    /// The invocation's status after the batch: running while users are left, completed after
    /// its last batch; failed or cancelled when it stops.
    pub status: InvocationStatus,
    /// Users this batch targeted, added to the invocation's count.
    pub users_targeted: u64,
    /// Cards in `cards`, added to the invocation's count.
    pub cards_created: u64,
    /// The invocation's errors after the batch: they replace the stored ones.
    pub errors: Vec<String>,
    /// Shared with their events. A flow instance is the cards of one user made by one batch
    /// (they share its `flow_instance_id`); it is stored with them.
    pub cards: Vec<Arc<CardInstance>>,
    /// One event per card, the first of its life (`card-published`, or `card-embargoed` for
    /// an embargoed card).
    pub events: Vec<AnalyticsEvent>,
    /// For a flow that waits or branches: each user's flow instance, as its first run left it
    /// (contract §21). Empty for a flow of `create-card` steps only.
    pub instances: Vec<super::instances::FlowInstance>,
    /// When the batch was built: the invocation's `updated` once it is saved.
    pub updated: Timestamp,
    /// The claim after the save: `None` ends it (the next batch may be claimed by any worker
    /// at once); a time keeps it until then, for the worker that goes on with the next batch
    /// itself ([`Engine::step`](super::Engine::step)).
    pub lease_until: Option<Timestamp>,
}

impl BatchResult {
    /// Applies the flow's cancel `markers` accepted meanwhile (docs/api.md, Cancel: work
    /// queued before a cancel creates nothing it covers): drops the flow instances they cover
    /// (their cards and events), and stops the invocation (cancelled, no cursor) when one
    /// covers all of it. `flow_version` and `invocation_created` are the invocation's.
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
        self.instances.retain(|i| !covered(&i.user_id));
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
    /// it and refuses anything else (docs/api.md, Triggers: Idempotency).
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

/// Storage of invocations and of what their batches make (a port; docs/architecture.md, The
/// engine).
///
/// An invocation is known by (environment, id): nothing of another environment is found or
/// changed. A batch is saved with its invocation's progress in one transaction, fenced by the
/// cursor it started from (docs/architecture.md, Time, leases and fencing), and each save
/// applies the cancel markers of its flow in that same transaction (docs/api.md, Cancel).
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
    ///
    /// Answers, per invocation in order, None when it was inserted (an id given twice in one
    /// call is inserted once, and both answer None), else the one stored with its id, whether
    /// it matches or not: the caller decides ([`Invocation::same_run`]). What was inserted is
    /// durable when this returns.
    async fn record_run(
        &self,
        runs: Vec<(Invocation, Option<BatchResult>)>,
    ) -> Result<Vec<Option<Invocation>>, StorageError>;
    /// The invocation with this id in the environment (of any flow: the service checks the
    /// flow); None when there is none.
    async fn get(&self, environment_id: &str, id: &str)
        -> Result<Option<Invocation>, StorageError>;
    /// Up to `limit` invocations of the flow `flow_id` in the environment that match every
    /// field of `filter`, newest first: by `created`, then by id, both descending. With
    /// `after`, only those after it in that order. Invocations of another flow or environment
    /// are never answered; an empty answer when none is left.
    async fn list(
        &self,
        environment_id: &str,
        flow_id: &str,
        filter: InvocationFilter,
        after: Option<After<String>>,
        limit: u32,
    ) -> Result<Vec<Invocation>, StorageError>;
    /// The environment's bulk-task slots held (docs/api.md, Bulk start from CSV): bulk-target
    /// invocations pending or running, and CSV tasks processing and not queued.
    async fn running_bulk(&self, environment_id: &str) -> Result<u64, StorageError>;
    /// Takes the oldest pending invocations, or running ones whose lease has expired, at most
    /// `limit`, oldest first: marks them running with a lease until `lease_until`. Never gives
    /// one invocation to two workers at once (`FOR UPDATE SKIP LOCKED` on PostgreSQL).
    ///
    /// Of any environment. The invocations are answered as stored after the claim (running,
    /// at their last saved cursor); an empty answer when none is due. Taking over an expired
    /// lease does not stop the previous holder, whose saves the cursor then refuses.
    async fn claim(
        &self,
        now: Timestamp,
        lease_until: Timestamp,
        limit: u32,
    ) -> Result<Vec<Invocation>, StorageError>;
    /// Saves batches in one transaction: for each, its instances, cards and events, the
    /// progress (the batch's counts are added to the invocation's), cursor and status; and
    /// releases the claim unless the batch's `lease_until` keeps it, so that the next batch
    /// can be claimed at once (by any worker: batches of concurrent invocations take turns).
    ///
    /// A batch whose invocation is no longer at the batch's starting cursor (another worker
    /// took it over and saved first) is skipped, nothing of it written: its claim had passed
    /// to another holder (docs/architecture.md, Time, leases and fencing). So is one whose
    /// invocation is no longer pending or running. Returns how many were skipped.
    ///
    /// In the same transaction, before anything is written, the cancel markers of each
    /// batch's flow are read and applied ([`BatchResult::apply_cancels`]). A batch's errors
    /// replace the invocation's.
    async fn save_batches(&self, batches: Vec<BatchResult>) -> Result<u64, StorageError>;
    /// Saves one batch of a fan-out the engine follows (a batch that starts at a cursor) as
    /// [`save_batches`](Self::save_batches) would, while the save of the batch before it may
    /// still be under way ([`Engine::with_saves_in_flight`](super::Engine::with_saves_in_flight)):
    /// its cards, events and outbox rows are written first; then it waits for `after` (that
    /// save's turn) to end, an error when it has not within the call's wait for the database;
    /// then the cancel markers of its flow are read and applied (the batch written again when
    /// one applies), and its progress saved, fenced by its starting cursor like every batch's.
    /// When the batch before was not saved, or its invocation was taken over, nothing of it is
    /// written and 1 is returned, else 0. Cards refused by the unique card key count so only
    /// when the invocation has moved on from the batch's cursor (another worker saved them);
    /// while it is still there the refusal is the error ([`StorageError::UniqueViolation`]).
    async fn save_after(&self, batch: BatchResult, after: SaveTurn) -> Result<u64, StorageError>;
}

/// The turn of one save of a fan-out's batch, which the save of its next batch waits for
/// before writing its progress ([`InvocationRepository::save_after`]). The engine ends it
/// once it has the save's answer, whether it committed or not, or once it drops the save;
/// clones share it. The wait orders the saves, each batch's cursor fences them: should a
/// transaction outlive its call (its answer a timeout), the next batch's save cannot save a
/// batch whose batch before was not saved.
///
/// ```
/// use std::time::Duration;
/// use workbench_domain::trigger::SaveTurn;
///
/// let turn = SaveTurn::default();
/// assert!(!turn.wait(Duration::from_millis(1)), "still under way");
/// let ending = turn.clone();
/// std::thread::spawn(move || ending.end());
/// assert!(turn.wait(Duration::from_secs(30)));
/// assert!(SaveTurn::ended().wait(Duration::ZERO));
/// ```
#[derive(Clone, Debug, Default)]
pub struct SaveTurn(Arc<(std::sync::Mutex<bool>, std::sync::Condvar)>);

impl SaveTurn {
    /// A turn that has ended: for a save that waits for none.
    pub fn ended() -> Self {
        let turn = SaveTurn::default();
        turn.end();
        turn
    }

    /// Ends the turn, waking whoever waits for it. Ending it again changes nothing.
    pub fn end(&self) {
        let (ended, waiting) = &*self.0;
        *ended
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = true;
        waiting.notify_all();
    }

    /// Blocks the calling thread (one of its own, never an async runtime's) until the turn
    /// has ended, at most `timeout`: whether it has.
    pub fn wait(&self, timeout: std::time::Duration) -> bool {
        let (ended, waiting) = &*self.0;
        let guard = ended
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let (guard, _) = waiting
            .wait_timeout_while(guard, timeout, |ended| !*ended)
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        *guard
    }
}
