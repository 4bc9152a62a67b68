//! The worker side of triggers: the [`Engine`] claims invocations with a lease and fans their
//! audience out in batches. Each batch (its flow instances, cards, events and the invocation's
//! progress cursor) is saved in one transaction, so a crash resumes from the last saved cursor
//! without losing or duplicating a card.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use chrono::Duration;
use futures_util::stream::{FuturesOrdered, StreamExt};

use super::batch::{batch_for, default_stream_of, empty_batch, inputs_of, Audience};
use super::invocation::{
    BatchResult, Invocation, InvocationRepository, InvocationStatus, SaveTurn, BATCH_USERS,
    CLAIM_PER_STEP, FOLLOW_BATCHES, LEASE_SECONDS,
};
use super::plan::FlowPlan;
use super::request::Target;
use super::Mode;
use crate::audience::{EndUserRepository, Filter, SegmentRepository, StreamRepository, UserQuery};
use crate::flow::{FlowRepository, VersionRef};
use crate::page::{Page, PageRequest};
use crate::unit::{self, Unexpected};
use crate::{Clock, DomainError, Resource, StorageError, Timestamp};

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
        let mut configs = HashMap::new();
        let mut streams = HashMap::new();
        let mut users = 0u64;
        let mut batches = Vec::with_capacity(claimed.len());
        for invocation in &claimed {
            if users >= u64::from(BATCH_USERS) {
                batches.push(empty_batch(invocation, now));
                continue;
            }
            let run = self
                .run_guarded(invocation, now, &mut configs, &mut streams)
                .await;
            let batch = settled(run, invocation, now)?;
            users += batch.users_targeted.max(1);
            batches.push(batch);
        }
        // A fan-out with users left goes on here, keeping its claim: each of its next batches
        // is read and built while the one before is written, and needs no claim of its own.
        // (Not one released unchanged above: its cursor did not move.)
        let follow = batches.iter().position(|b| {
            b.status == InvocationStatus::Running && b.cursor.is_some() && b.cursor != b.from_cursor
        });
        let Some(i) = follow else {
            self.save(batches, &claimed, &mut configs, &mut streams)
                .await?;
            return Ok(true);
        };
        let mut invocation = claimed[i].clone();
        invocation.status = InvocationStatus::Running;
        invocation.cursor = batches[i].cursor.clone();
        batches[i].lease_until = Some(now + self.lease);
        // The saves under way, oldest first. Each next one waits for the turn of the one
        // before it to write its progress, and at most `saves_in_flight` are under way.
        let mut turn = SaveTurn::default();
        let mut saving = FuturesOrdered::new();
        saving.push_back(Self::follow_save(
            self.invocations.save_batches(batches),
            turn.clone(),
            claimed,
            1,
        ));
        let mut round = 1;
        loop {
            let now = self.clock.now();
            let build = self.run_guarded(&invocation, now, &mut configs, &mut streams);
            let (next, saved) = build_while_saving(build, &mut saving).await;
            let next = settled(next, &invocation, now);
            if !self
                .settle(saved, &mut saving, &mut configs, &mut streams)
                .await?
            {
                return Ok(true);
            }
            let mut next = match next {
                Ok(next) => next,
                Err(e) => {
                    self.drain(&mut saving, false).await;
                    return Err(e);
                }
            };
            let more = round < FOLLOW_BATCHES
                && next.status == InvocationStatus::Running
                && next.cursor.is_some();
            if !more {
                let rest = saving.by_ref().collect().await;
                if self
                    .settle(rest, &mut saving, &mut configs, &mut streams)
                    .await?
                {
                    self.save(
                        vec![next],
                        std::slice::from_ref(&invocation),
                        &mut configs,
                        &mut streams,
                    )
                    .await?;
                }
                return Ok(true);
            }
            next.lease_until = Some(now + self.lease);
            let from = invocation.clone();
            invocation.cursor = next.cursor.clone();
            round += 1;
            while saving.len() >= self.saves_in_flight {
                let oldest = saving.next().await.into_iter().collect();
                if !self
                    .settle(oldest, &mut saving, &mut configs, &mut streams)
                    .await?
                {
                    return Ok(true);
                }
            }
            let after = std::mem::take(&mut turn);
            saving.push_back(Self::follow_save(
                self.invocations.save_after(next, after),
                turn.clone(),
                vec![from],
                round,
            ));
        }
    }

    /// A save of a followed fan-out's batches: its outcome, once `save` has ended, and `turn`
    /// with it; `turn` also ends when this is dropped, polled or not.
    fn follow_save(
        save: SaveFuture<'_>,
        turn: SaveTurn,
        from: Vec<Invocation>,
        round: u32,
    ) -> impl Future<Output = FollowSaved> + Send + '_ {
        struct Ends(SaveTurn);
        impl Drop for Ends {
            fn drop(&mut self) {
                self.0.end();
            }
        }
        let ends = Ends(turn);
        async move {
            let outcome = refused(unit::catch(save).await);
            drop(ends);
            FollowSaved {
                outcome,
                from,
                round,
            }
        }
    }

    /// Takes in the outcomes of a followed fan-out's saves, oldest first: false when the
    /// fan-out is to stop, with every save still under way ended first. A save that failed
    /// unexpectedly is run and saved again invocation by invocation from where it started
    /// ([`Engine::one_by_one`]): the ones after it were refused, their batch before not saved.
    /// A batch after the first found stale means the invocation was taken over (its lease had
    /// run out): the next batch would start from a cursor that is no longer its. An error
    /// that waiting cures (an unreachable database) ends the step with it, once the saves
    /// under way have ended.
    async fn settle(
        &self,
        saved: Vec<FollowSaved>,
        saving: &mut FuturesOrdered<impl Future<Output = FollowSaved>>,
        configs: &mut HashMap<(String, u32), Arc<FlowPlan>>,
        streams: &mut HashMap<String, String>,
    ) -> Result<bool, StorageError> {
        let mut saved = saved.into_iter();
        while let Some(one) = saved.next() {
            match one.outcome {
                Ok(Ok(stale)) => {
                    self.stale.add(stale);
                    if stale > 0 && one.round > 1 {
                        self.later(saved, true);
                        self.drain(saving, true).await;
                        return Ok(false);
                    }
                }
                Ok(Err(cause)) => {
                    self.later(saved, false);
                    self.drain(saving, false).await;
                    self.one_by_one(&one.from, cause, configs, streams).await?;
                    return Ok(false);
                }
                Err(e) => {
                    self.later(saved, false);
                    self.drain(saving, false).await;
                    return Err(e);
                }
            }
        }
        Ok(true)
    }

    /// Takes in the outcomes of saves given after the one that stopped a followed fan-out:
    /// those found stale are counted with `count` (the fan-out was taken over), not after a
    /// save before them failed (they were refused for that); a failure is logged, since no
    /// one runs their batches again but the invocation's next claim.
    fn later(&self, saved: impl IntoIterator<Item = FollowSaved>, count: bool) {
        for later in saved {
            match later.outcome {
                Ok(Ok(stale)) if count => self.stale.add(stale),
                Ok(Ok(_)) => {}
                Ok(Err(cause)) => {
                    tracing::warn!(round = later.round, cause = %cause,
                        "a fan-out's save given after one that stopped it failed; its batch waits \
                            for the next claim")
                }
                Err(e) => {
                    tracing::warn!(round = later.round, error = %e,
                        "a fan-out's save given after one that stopped it failed; its batch waits \
                            for the next claim")
                }
            }
        }
    }

    /// Waits for the saves still under way to end, so that none outlives the step, and takes
    /// in their outcomes ([`Engine::later`]).
    async fn drain(
        &self,
        saving: &mut FuturesOrdered<impl Future<Output = FollowSaved>>,
        count: bool,
    ) {
        while let Some(later) = saving.next().await {
            self.later([later], count);
        }
    }

    /// [`Engine::run_batch`], with a panic or an unexpected storage error caught
    /// (docs/operations.md, When one unit of work fails): tried up to [`unit::ATTEMPTS`]
    /// times, then the invocation fails alone, with an `errorId` in its errors and in the log.
    async fn run_guarded(
        &self,
        invocation: &Invocation,
        now: Timestamp,
        configs: &mut HashMap<(String, u32), Arc<FlowPlan>>,
        streams: &mut HashMap<String, String>,
    ) -> Result<BatchResult, DomainError> {
        let mut cause = String::new();
        for attempt in 1..=unit::ATTEMPTS {
            cause = match unit::catch(self.run_batch(invocation, now, configs, streams)).await {
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
        configs: &mut HashMap<(String, u32), Arc<FlowPlan>>,
        streams: &mut HashMap<String, String>,
    ) -> Result<(), StorageError> {
        match refused(unit::catch(self.invocations.save_batches(batches)).await)? {
            Ok(stale) => {
                self.stale.add(stale);
                Ok(())
            }
            Err(cause) => self.one_by_one(claimed, cause, configs, streams).await,
        }
    }

    /// After a save of `invocations`' batches failed unexpectedly with `together` (the first
    /// attempt): each is run and saved again on its own, and one that fails
    /// [`unit::ATTEMPTS`] times in all is saved failed.
    async fn one_by_one(
        &self,
        invocations: &[Invocation],
        together: String,
        configs: &mut HashMap<(String, u32), Arc<FlowPlan>>,
        streams: &mut HashMap<String, String>,
    ) -> Result<(), StorageError> {
        tracing::warn!(invocations = invocations.len(), cause = %together,
            "an engine step could not be saved; saving its invocations one by one");
        for invocation in invocations {
            let mut cause = together.clone();
            let mut saved = false;
            // The save of all of them together was the first attempt.
            for _ in 1..unit::ATTEMPTS {
                let now = self.clock.now();
                let run = self.run_guarded(invocation, now, configs, streams).await;
                let batch = settled(run, invocation, now)?;
                cause =
                    match refused(unit::catch(self.invocations.save_batches(vec![batch])).await)? {
                        Ok(stale) => {
                            self.stale.add(stale);
                            saved = true;
                            break;
                        }
                        Err(cause) => cause,
                    };
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

    /// One batch of `invocation`. `configs` and `streams` keep what one step has read: the
    /// configuration of each flow version (they never change) and each environment's default
    /// stream.
    async fn run_batch(
        &self,
        invocation: &Invocation,
        now: Timestamp,
        configs: &mut HashMap<(String, u32), Arc<FlowPlan>>,
        streams: &mut HashMap<String, String>,
    ) -> Result<BatchResult, DomainError> {
        let env = &invocation.environment_id;
        let key = (invocation.flow_id.clone(), invocation.flow_version);
        let plan = match configs.get(&key) {
            Some(plan) => plan.clone(),
            None => {
                let version = self
                    .flows
                    .get_version(
                        &invocation.flow_id,
                        VersionRef::Number(invocation.flow_version),
                    )
                    .await?
                    .ok_or(DomainError::NotFound(Resource::FlowVersion))?;
                let plan = Arc::new(FlowPlan::of(version.config));
                configs.insert(key, plan.clone());
                plan
            }
        };
        let (element, variables) = inputs_of(invocation, &plan)?;
        let audience = self.audience(invocation, &element.target).await?;
        let default_stream = match streams.get(env) {
            Some(id) => id.clone(),
            None => {
                let id = default_stream_of(&*self.streams, env, now).await?;
                streams.insert(env.clone(), id.clone());
                id
            }
        };
        Ok(batch_for(
            invocation,
            &plan,
            &element.payload,
            &variables,
            audience,
            &default_stream,
            now,
        ))
    }
    /// The next batch of users after the invocation's cursor. Test mode keeps test users only.
    async fn audience(
        &self,
        invocation: &Invocation,
        target: &Target,
    ) -> Result<Audience, DomainError> {
        let env = &invocation.environment_id;
        let test_only = invocation.mode == Mode::Test;
        let after = invocation.cursor.clone();
        let page = PageRequest {
            limit: BATCH_USERS,
            after: after.clone(),
        };
        let query = |tag: Option<String>| UserQuery {
            tag,
            test_user: test_only.then_some(true),
        };
        match target {
            Target::Users(ids) => {
                let start = after
                    .as_ref()
                    .map(|a| ids.partition_point(|id| id <= a))
                    .unwrap_or(0);
                let slice: Vec<String> = ids
                    .iter()
                    .skip(start)
                    .take(BATCH_USERS as usize)
                    .cloned()
                    .collect();
                let next = (start + slice.len() < ids.len())
                    .then(|| slice.last().cloned())
                    .flatten();
                let users = if test_only {
                    let mut test_users = Vec::new();
                    for id in &slice {
                        if self.users.get(env, id).await?.is_some_and(|u| u.test_user) {
                            test_users.push(id.clone());
                        }
                    }
                    test_users
                } else {
                    slice
                };
                Ok(Audience { users, next })
            }
            Target::Tag(tag) => {
                self.page_of(env, &query(Some(tag.clone())), page, None)
                    .await
            }
            Target::AllTestUsers => {
                self.page_of(
                    env,
                    &UserQuery {
                        tag: None,
                        test_user: Some(true),
                    },
                    page,
                    None,
                )
                .await
            }
            Target::Filters(filter) => self.page_of(env, &query(None), page, Some(filter)).await,
            Target::Segment(id) => {
                let segment = self
                    .segments
                    .get(env, id)
                    .await?
                    .ok_or(DomainError::NotFound(Resource::Segment))?;
                self.page_of(env, &query(None), page, Some(&segment.filter))
                    .await
            }
        }
    }

    async fn page_of(
        &self,
        env: &str,
        query: &UserQuery,
        page: PageRequest,
        filter: Option<&Filter>,
    ) -> Result<Audience, DomainError> {
        let Some(filter) = filter else {
            let ids = self.users.ids(env, query, &page).await?;
            let Page { items, next_after } = Page::from_overfetch(ids, page.limit, String::clone);
            return Ok(Audience {
                users: items,
                next: next_after,
            });
        };
        let users = self.users.list(env, query, &page).await?;
        let Page { items, next_after } =
            Page::from_overfetch(users, page.limit, |u| u.id.clone().into());
        let users = items
            .into_iter()
            .filter(|u| filter.matches(u))
            .map(|u| u.id.into_string())
            .collect();
        Ok(Audience {
            users,
            next: next_after,
        })
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

/// The most saves of one fan-out under way at once ([`Engine::with_saves_in_flight`]).
pub const MAX_SAVES_IN_FLIGHT: usize = 4;

/// A save, as the repository's port gives it.
type SaveFuture<'a> = Pin<Box<dyn Future<Output = Result<u64, StorageError>> + Send + 'a>>;

/// The outcome of one save of a followed fan-out ([`Engine::step`]), with what it saved as it
/// was before (to be run again should the save fail) and its round (1 for the step's first).
struct FollowSaved {
    outcome: Result<Result<u64, String>, StorageError>,
    from: Vec<Invocation>,
    round: u32,
}

/// Runs `build` to its end while the saves under way go on (so that each one's turn ends as
/// soon as it does): its output, and the outcomes of the saves that ended meanwhile, oldest
/// first.
async fn build_while_saving<T, S>(
    build: impl Future<Output = T>,
    saving: &mut FuturesOrdered<S>,
) -> (T, Vec<S::Output>)
where
    S: Future,
{
    let mut build = std::pin::pin!(build);
    let mut saved = Vec::new();
    loop {
        match futures_util::future::select(build.as_mut(), saving.next()).await {
            futures_util::future::Either::Left((built, _)) => return (built, saved),
            futures_util::future::Either::Right((Some(done), _)) => saved.push(done),
            futures_util::future::Either::Right((None, _)) => return (build.await, saved),
        }
    }
}
