//! The worker side of triggers: the [`Engine`] claims invocations with a lease and fans their
//! audience out in batches. Each batch (its flow instances, cards, events and the invocation's
//! progress cursor) is saved in one transaction, so a crash resumes from the last saved cursor
//! without losing or duplicating a card.

mod audience;
mod follow;

use std::collections::HashMap;
use std::sync::Arc;

use chrono::Duration;

use super::batch::empty_batch;
use super::invocation::{
    BatchResult, Invocation, InvocationRepository, InvocationStatus, BATCH_USERS, CLAIM_PER_STEP,
    LEASE_SECONDS,
};
use super::plan::FlowPlan;
use crate::audience::{EndUserRepository, SegmentRepository, StreamRepository};
use crate::flow::FlowRepository;
use crate::unit::{self, Unexpected};
use crate::{Clock, DomainError, StorageError, Timestamp};

/// Executes invocations, one batch of users at a time (docs/architecture.md, The engine):
/// claimed with a lease, each batch saved with the invocation's progress in one transaction
/// and fenced by the cursor it started from.
pub struct Engine {
    lease: Duration,
    flows: Arc<dyn FlowRepository>,
    invocations: Arc<dyn InvocationRepository>,
    users: Arc<dyn EndUserRepository>,
    segments: Arc<dyn SegmentRepository>,
    streams: Arc<dyn StreamRepository>,
    clock: Arc<dyn Clock>,
    stale: crate::health::Stale,
    saves_in_flight: usize,
}

impl Engine {
    /// An engine over these ports, with a lease of [`LEASE_SECONDS`] on each claimed
    /// invocation. `users` and `segments` give each batch's audience (test mode keeps test
    /// users only); `streams` each environment's default stream, which every card is in.
    pub fn new(
        flows: Arc<dyn FlowRepository>,
        invocations: Arc<dyn InvocationRepository>,
        users: Arc<dyn EndUserRepository>,
        segments: Arc<dyn SegmentRepository>,
        streams: Arc<dyn StreamRepository>,
        clock: Arc<dyn Clock>,
    ) -> Self {
        Self {
            lease: Duration::seconds(i64::from(LEASE_SECONDS)),
            flows,
            invocations,
            users,
            segments,
            streams,
            clock,
            stale: crate::health::Stale::default(),
            saves_in_flight: 1,
        }
    }

    /// Batches not saved since the last call because their invocation's claim had passed to
    /// another holder, which saved first (docs/architecture.md, Time, leases and fencing).
    pub fn take_stale(&self) -> u64 {
        self.stale.take()
    }

    /// How long a claim lasts without progress before another worker may resume it.
    pub fn with_lease(mut self, lease: Duration) -> Self {
        self.lease = lease;
        self
    }

    /// How many saves of one followed fan-out may be under way at once (1 unless set; at most
    /// [`MAX_SAVES_IN_FLIGHT`]). With 2, a batch is written while the save of the batch before
    /// it is still under way, and writes its progress once that one has ended
    /// ([`InvocationRepository::save_after`]): for a database that writes transactions side by
    /// side (PostgreSQL), not one that takes one writer at a time (SQLite).
    pub fn with_saves_in_flight(mut self, saves: usize) -> Self {
        self.saves_in_flight = saves.clamp(1, MAX_SAVES_IN_FLIGHT);
        self
    }

    /// Claims up to [`CLAIM_PER_STEP`] invocations and runs one batch of each, smallest first,
    /// until [`BATCH_USERS`] users are reached; saves them in one transaction. The ones left
    /// over are released unchanged, for the next step. Returns false when there was nothing to
    /// do.
    ///
    /// Small invocations (CSV rows, one-user `/start` calls) are most of the traffic: one
    /// claim and one save for dozens of them instead of two transactions each.
    ///
    /// A fan-out with users left after its batch is then followed, for up to
    /// [`FOLLOW_BATCHES`] more batches: its claim is kept by each save (`lease_until`), and
    /// each next batch is read and built while the one before is being written (and written
    /// while it is, with [`with_saves_in_flight`](Self::with_saves_in_flight)).
    ///
    /// A batch that fails for its invocation's own reasons (its flow version or segment gone)
    /// fails the invocation; one that panics or fails unexpectedly is tried again, then fails
    /// it alone (docs/operations.md, When one unit of work fails). Fails with a storage error
    /// that waiting cures (an unreachable database), with what was not saved left to be
    /// claimed again when its lease runs out. Batches refused because their invocation was
    /// taken over are counted ([`take_stale`](Self::take_stale)).
    ///
    /// [`FOLLOW_BATCHES`]: super::invocation::FOLLOW_BATCHES
    pub async fn step(&self) -> Result<bool, StorageError> {
        let now = self.clock.now();
        let mut claimed = self
            .invocations
            .claim(now, now + self.lease, CLAIM_PER_STEP)
            .await?;
        if claimed.is_empty() {
            return Ok(false);
        }
        // Smallest first: a large fan-out's batch never holds back small invocations.
        claimed.sort_by_cached_key(estimated_users);
        let mut reads = StepReads::default();
        let mut batches = self.first_batches(&claimed, now, &mut reads).await?;
        // A fan-out with users left goes on here, keeping its claim: each of its next batches
        // is read and built while the one before is written, and needs no claim of its own.
        // (Not one released unchanged above: its cursor did not move.)
        let follow = batches.iter().position(|b| {
            b.status == InvocationStatus::Running && b.cursor.is_some() && b.cursor != b.from_cursor
        });
        let Some(i) = follow else {
            self.save(batches, &claimed, &mut reads).await?;
            return Ok(true);
        };
        let mut invocation = claimed[i].clone();
        invocation.status = InvocationStatus::Running;
        invocation.cursor = batches[i].cursor.clone();
        batches[i].lease_until = Some(now + self.lease);
        self.follow(invocation, batches, claimed, &mut reads).await
    }

    /// One batch of each claimed invocation, in order, until [`BATCH_USERS`] users are
    /// reached; those after that get an empty batch, which releases them unchanged.
    async fn first_batches(
        &self,
        claimed: &[Invocation],
        now: Timestamp,
        reads: &mut StepReads,
    ) -> Result<Vec<BatchResult>, StorageError> {
        let mut users = 0u64;
        let mut batches = Vec::with_capacity(claimed.len());
        for invocation in claimed {
            if users >= u64::from(BATCH_USERS) {
                batches.push(empty_batch(invocation, now));
                continue;
            }
            let run = self.run_guarded(invocation, now, reads).await;
            let batch = settled(run, invocation, now)?;
            users += batch.users_targeted.max(1);
            batches.push(batch);
        }
        Ok(batches)
    }

    /// [`Engine::run_batch`], with a panic or an unexpected storage error caught
    /// (docs/operations.md, When one unit of work fails): tried up to [`unit::ATTEMPTS`]
    /// times, then the invocation fails alone, with an `errorId` in its errors and in the log.
    async fn run_guarded(
        &self,
        invocation: &Invocation,
        now: Timestamp,
        reads: &mut StepReads,
    ) -> Result<BatchResult, DomainError> {
        let mut cause = String::new();
        for attempt in 1..=unit::ATTEMPTS {
            cause = match unit::catch(self.run_batch(invocation, now, reads)).await {
                Ok(Err(DomainError::Storage(e))) if e.is_unexpected() => e.to_string(),
                Ok(run) => return run,
                Err(panic) => format!("panic: {panic}"),
            };
            tracing::warn!(unit = "invocation", id = %invocation.id, attempt, cause = %cause,
                "an invocation's batch failed; trying it again");
        }
        Ok(failed_batch(
            invocation,
            &unit::Failure::new("invocation", &invocation.id, cause),
            now,
        ))
    }

    /// Saves a step's batches in one transaction. When that fails unexpectedly (not an
    /// unreachable database: a row the database refuses, a bug), each invocation is run and
    /// saved again on its own, so that one bad invocation fails alone and the others are
    /// saved; one that fails [`unit::ATTEMPTS`] times in all is saved failed.
    async fn save(
        &self,
        batches: Vec<BatchResult>,
        claimed: &[Invocation],
        reads: &mut StepReads,
    ) -> Result<(), StorageError> {
        match self.save_counted(batches).await? {
            Ok(()) => Ok(()),
            Err(cause) => self.one_by_one(claimed, cause, reads).await,
        }
    }

    /// Saves `batches` in one transaction and counts those found stale: the cause when the
    /// save failed unexpectedly or panicked, for the caller to isolate.
    async fn save_counted(
        &self,
        batches: Vec<BatchResult>,
    ) -> Result<Result<(), String>, StorageError> {
        let saved = refused(unit::catch(self.invocations.save_batches(batches)).await)?;
        Ok(saved.map(|stale| self.stale.add(stale)))
    }

    /// After a save of `invocations`' batches failed unexpectedly with `together` (the first
    /// attempt): each is run and saved again on its own, and one that fails
    /// [`unit::ATTEMPTS`] times in all is saved failed.
    async fn one_by_one(
        &self,
        invocations: &[Invocation],
        together: String,
        reads: &mut StepReads,
    ) -> Result<(), StorageError> {
        tracing::warn!(invocations = invocations.len(), cause = %together,
            "an engine step could not be saved; saving its invocations one by one");
        for invocation in invocations {
            let mut cause = together.clone();
            let mut saved = false;
            // The save of all of them together was the first attempt.
            for _ in 1..unit::ATTEMPTS {
                let now = self.clock.now();
                let run = self.run_guarded(invocation, now, reads).await;
                let batch = settled(run, invocation, now)?;
                match self.save_counted(vec![batch]).await? {
                    Ok(()) => {
                        saved = true;
                        break;
                    }
                    Err(again) => cause = again,
                }
            }
            if !saved {
                let failure = unit::Failure::new("invocation", &invocation.id, cause);
                let failed = failed_batch(invocation, &failure, self.clock.now());
                let stale = self.invocations.save_batches(vec![failed]).await?;
                self.stale.add(stale);
            }
        }
        Ok(())
    }
}

/// How many users an invocation's next batch has: the ids of a user target, else a full
/// batch (tags, segments, filters and test users are paged through).
fn estimated_users(invocation: &Invocation) -> u64 {
    /// The ids counted, not read.
    #[derive(serde::Deserialize)]
    struct UserIds {
        #[serde(rename = "targetUserIds")]
        ids: Option<Vec<serde::de::IgnoredAny>>,
    }
    serde_json::from_str::<UserIds>(invocation.target.text())
        .ok()
        .and_then(|t| t.ids)
        .map_or(u64::from(BATCH_USERS), |ids| {
            (ids.len() as u64).min(u64::from(BATCH_USERS))
        })
}

/// The batch an engine step saves for `invocation`: a storage error stops the step (nothing is
/// saved, the claim runs out), any other error fails the invocation with it.
fn settled(
    run: Result<BatchResult, DomainError>,
    invocation: &Invocation,
    now: Timestamp,
) -> Result<BatchResult, StorageError> {
    match run {
        Ok(batch) => Ok(batch),
        Err(DomainError::Storage(e)) => Err(e),
        Err(other) => Ok(BatchResult {
            status: InvocationStatus::Failed,
            errors: vec![other.to_string()],
            ..empty_batch(invocation, now)
        }),
    }
}

/// What a save that may have panicked came to: how many of its batches were stale when it was
/// saved, the cause when it failed unexpectedly (the unit's to isolate), an expected error (an
/// unreachable database) as is.
fn refused(
    saved: Result<Result<u64, StorageError>, String>,
) -> Result<Result<u64, String>, StorageError> {
    match saved {
        Ok(Ok(stale)) => Ok(Ok(stale)),
        Ok(Err(e)) if !e.is_unexpected() => Err(e),
        Ok(Err(e)) => Ok(Err(e.to_string())),
        Err(panic) => Ok(Err(format!("panic: {panic}"))),
    }
}

/// A batch that fails `invocation` for `failure`.
fn failed_batch(invocation: &Invocation, failure: &unit::Failure, now: Timestamp) -> BatchResult {
    BatchResult {
        status: InvocationStatus::Failed,
        errors: vec![failure.message()],
        ..empty_batch(invocation, now)
    }
}

/// What one step has read, kept for its next batches: the plan of each flow version (flow
/// id, version), which never changes, and each environment's default stream.
#[derive(Default)]
struct StepReads {
    plans: HashMap<(String, u32), Arc<FlowPlan>>,
    streams: HashMap<String, String>,
}

/// The most saves of one fan-out under way at once ([`Engine::with_saves_in_flight`]).
pub const MAX_SAVES_IN_FLIGHT: usize = 4;
