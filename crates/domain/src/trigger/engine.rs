//! Invocations: recorded durably by the trigger (one row per flow element, idempotent by
//! `flowInvocationId`), then executed by workers that claim them with a lease and fan the
//! audience out in batches. Each batch — its flow instances, cards, events and the invocation's
//! progress cursor — is saved in one transaction, so a crash resumes from the last saved
//! cursor without losing or duplicating a card.

use crate::trigger::FlowElement;
use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::Arc;

use async_trait::async_trait;
use chrono::Duration;
use serde_json::{json, Value};

use super::plan::{CardStep, FlowPlan};
use super::request::{CardOptions, Payload, Platforms, Target, TriggerRequest};
use super::variables::{render, resolve, Platform, ResolvedVariables};
use super::{fingerprint_of, Mode};
use crate::audience::{
    EndUserRepository, Filter, SegmentRepository, Stream, StreamRepository, UserQuery,
};
use crate::cancel::CancelTask;
use crate::card::{
    card_event, trigger_context, AnalyticsEvent, CardContent, CardInstance, CardStatus,
};
use crate::flow::{FlowRepository, VersionRef};
use crate::id::{new_id, IdKind};
use crate::json::JsonText;
use crate::page::{Page, PageRequest};
use crate::tenancy::{Permission, Principal};
use crate::unit::{self, Unexpected};
use crate::{Clock, ConflictKind, DomainError, FieldError, Resource, StorageError, Timestamp};

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
        self.flow_id == other.flow_id
            && self.mode == other.mode
            && self.fingerprint == other.fingerprint
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

/// What never changes once read (published configurations, default streams), kept in memory:
/// at most 10,000 entries, all forgotten when that is reached.
struct Kept<K, V>(std::sync::Mutex<HashMap<K, V>>);

impl<K: std::hash::Hash + Eq, V: Clone> Kept<K, V> {
    fn new() -> Self {
        Self(std::sync::Mutex::new(HashMap::new()))
    }

    fn get<Q>(&self, key: &Q) -> Option<V>
    where
        K: std::borrow::Borrow<Q>,
        Q: std::hash::Hash + Eq + ?Sized,
    {
        self.0.lock().ok()?.get(key).cloned()
    }

    fn keep(&self, key: K, value: V) {
        if let Ok(mut kept) = self.0.lock() {
            if kept.len() >= 10_000 {
                kept.clear();
            }
            kept.insert(key, value);
        }
    }
}

/// Records triggers; reads their progress.
pub struct TriggerService {
    /// Published configurations never change, so they are kept once read, with their plan:
    /// (flow id, version) → plan.
    published: Kept<(String, u32), Arc<FlowPlan>>,
    /// Each environment's default stream (`All cards`), which cannot be deleted: kept once
    /// read, for the cards of invocations run when recorded.
    default_streams: Kept<String, String>,
    flows: Arc<dyn FlowRepository>,
    invocations: Arc<dyn InvocationRepository>,
    segments: Arc<dyn SegmentRepository>,
    streams: Arc<dyn StreamRepository>,
    clock: Arc<dyn Clock>,
}

/// The answer to a trigger: the invocation ids, in request order.
pub type Triggered = Vec<String>;

/// Elements of a bulk task validated and built, not yet recorded: per element why it was
/// refused, and the valid ones' invocations with their runs.
#[derive(Debug)]
pub struct PreparedElements {
    outcome: Vec<Result<String, String>>,
    valid: Vec<(usize, Invocation, Option<BatchResult>)>,
}

impl TriggerService {
    pub fn new(
        flows: Arc<dyn FlowRepository>,
        invocations: Arc<dyn InvocationRepository>,
        segments: Arc<dyn SegmentRepository>,
        streams: Arc<dyn StreamRepository>,
        clock: Arc<dyn Clock>,
    ) -> Self {
        Self {
            published: Kept::new(),
            default_streams: Kept::new(),
            flows,
            invocations,
            segments,
            streams,
            clock,
        }
    }

    /// The plan of a version: from the cache for a published version, else read.
    async fn plan(&self, flow_id: &str, version: u32) -> Result<Arc<FlowPlan>, DomainError> {
        let key = (flow_id.to_owned(), version);
        if let Some(plan) = self.published.get(&key) {
            return Ok(plan);
        }
        let stored = self
            .flows
            .get_version(flow_id, VersionRef::Number(version))
            .await?
            .ok_or(DomainError::NotFound(Resource::FlowVersion))?;
        let plan = Arc::new(FlowPlan::of(stored.config));
        if stored.status == crate::flow::VersionStatus::Published {
            self.published.keep(key, plan.clone());
        }
        Ok(plan)
    }

    /// A trigger request as sent (spec 4.3): parsed, checked against the flow and recorded.
    /// A request with problems is answered with all of them at once (contract §10): those of
    /// its shape and, for what could be read of each element, those against the flow
    /// (variables, streams, the segment).
    pub async fn trigger_body(
        &self,
        who: &Principal,
        env: &str,
        flow_id: &str,
        mode: Mode,
        body: &serde_json::Value,
    ) -> Result<Triggered, DomainError> {
        who.authorize(env, Permission::ActionFlowsTrigger)?;
        match super::request::parse_drafts(body) {
            Ok(request) => self.trigger(who, env, flow_id, mode, request).await,
            Err(rejected) => Err(self.all_problems(env, flow_id, mode, rejected).await?),
        }
    }

    /// A rejected request's problems, with those the flow finds in its drafts. Without a
    /// runnable flow, the problems of its shape alone.
    async fn all_problems(
        &self,
        env: &str,
        flow_id: &str,
        mode: Mode,
        rejected: super::request::Rejected,
    ) -> Result<DomainError, DomainError> {
        let super::request::Rejected {
            mut problems,
            drafts,
            strict_variables,
        } = rejected;
        let Ok((_, _, plan)) = self.runnable(env, flow_id, mode).await else {
            return Ok(DomainError::Validation(problems));
        };
        let known_streams = self
            .known_streams(env, drafts.iter().map(|d| &d.payload))
            .await?;
        let shape = problems.len();
        for (i, draft) in drafts.iter().enumerate() {
            let (found, _) = self
                .check_element(
                    env,
                    &plan,
                    (draft.target.as_ref(), &draft.payload),
                    strict_variables,
                    &format!("flows[{i}]"),
                    &known_streams,
                )
                .await?;
            // A field whose shape was wrong is not reported twice (a variable that did not
            // parse is also missing from the payload).
            let overlaps = |f: &FieldError| {
                problems[..shape]
                    .iter()
                    .any(|p| p.field.starts_with(&f.field) || f.field.starts_with(&p.field))
            };
            let found: Vec<FieldError> = found.into_iter().filter(|f| !overlaps(f)).collect();
            problems.extend(found);
        }
        // In the order of the elements, each element's shape first.
        problems.sort_by_key(|p| element_index(&p.field));
        Ok(DomainError::Validation(problems))
    }

    pub async fn trigger(
        &self,
        who: &Principal,
        env: &str,
        flow_id: &str,
        mode: Mode,
        mut request: TriggerRequest,
    ) -> Result<Triggered, DomainError> {
        who.authorize(env, Permission::ActionFlowsTrigger)?;
        let (flow, version, plan) = self.runnable(env, flow_id, mode).await?;
        let known_streams = self
            .known_streams(env, request.flows.iter().map(|f| &f.payload))
            .await?;
        let mut errors: Vec<FieldError> = Vec::new();
        let mut resolved = Vec::with_capacity(request.flows.len());
        for (i, element) in request.flows.iter().enumerate() {
            let path = format!("flows[{i}]");
            let (mut problems, variables) = self
                .check_element(
                    env,
                    &plan,
                    (Some(&element.target), &element.payload),
                    request.strict_variables,
                    &path,
                    &known_streams,
                )
                .await?;
            errors.append(&mut problems);
            resolved.push(variables);
        }
        if !errors.is_empty() {
            return Err(DomainError::Validation(errors));
        }
        let bulk = request.flows.iter().filter(|f| f.target.is_bulk()).count() as u64;
        if bulk > 0 && self.invocations.running_bulk(env).await? + bulk > MAX_RUNNING_BULK {
            return Err(DomainError::RateLimited {
                retry_after_seconds: 5,
                message: format!("at most {MAX_RUNNING_BULK} segment, tag, filter or CSV tasks run at once per environment; try again shortly"),
            });
        }

        let now = self.clock.now();
        let mut runs = Vec::with_capacity(request.flows.len());
        for (element, variables) in request.flows.iter_mut().zip(resolved) {
            let invocation = invocation_of(
                env,
                &flow.id,
                mode,
                version,
                element,
                request.strict_variables,
                now,
            );
            let run = match variables {
                Some(variables) => {
                    self.inline_run(&invocation, element, &plan, &variables)
                        .await?
                }
                None => None,
            };
            runs.push((invocation, run));
        }
        let ids: Vec<String> = runs.iter().map(|(i, _)| i.id.clone()).collect();
        let asked: Vec<Invocation> = runs.iter().map(|(i, _)| i.clone()).collect();
        let existing = self.invocations.record_run(runs).await?;
        for (i, (asked, stored)) in asked.iter().zip(&existing).enumerate() {
            if let Some(problem) = reuse_problem(
                asked,
                stored.as_ref(),
                &format!("flows[{i}].flowInvocationId"),
            ) {
                return Err(problem);
            }
        }
        Ok(ids)
    }

    /// The one batch of an invocation whose whole audience is known without reading: a live
    /// target of at most [`INLINE_USERS`] user ids. Recorded with its invocation, it is never
    /// claimed by a worker. `variables`: the element's, resolved when it was checked.
    async fn inline_run(
        &self,
        invocation: &Invocation,
        element: &FlowElement,
        plan: &FlowPlan,
        variables: &ResolvedVariables,
    ) -> Result<Option<BatchResult>, DomainError> {
        let Target::Users(ids) = &element.target else {
            return Ok(None);
        };
        if invocation.mode != Mode::Live || ids.len() > INLINE_USERS {
            return Ok(None);
        }
        let env = &invocation.environment_id;
        let stream = match self.default_streams.get(env) {
            Some(id) => id,
            None => {
                let id = default_stream_of(&*self.streams, env, invocation.created).await?;
                self.default_streams.keep(env.clone(), id.clone());
                id
            }
        };
        Ok(Some(batch_for(
            invocation,
            plan,
            &element.payload,
            variables,
            Audience {
                users: ids.clone(),
                next: None,
            },
            &stream,
            invocation.created,
        )))
    }

    /// For bulk tasks (CSV rows), with [`record_prepared`](Self::record_prepared): each element
    /// validated and recorded on its own; one bad element does not stop the others. This half
    /// does not write: each element validated, its invocation and its run (see
    /// [`INLINE_USERS`]) built. A bulk task prepares its next rows while the last ones are
    /// recorded.
    pub async fn prepare_elements(
        &self,
        env: &str,
        flow_id: &str,
        mode: Mode,
        elements: Vec<FlowElement>,
    ) -> Result<PreparedElements, DomainError> {
        let (flow, version, plan) = self.runnable(env, flow_id, mode).await?;
        let known_streams = self
            .known_streams(env, elements.iter().map(|f| &f.payload))
            .await?;
        let now = self.clock.now();
        let mut outcome: Vec<Result<String, String>> = Vec::with_capacity(elements.len());
        let mut valid: Vec<(usize, Invocation, Option<BatchResult>)> = Vec::new();
        for (i, mut element) in elements.into_iter().enumerate() {
            let (problems, variables) = self
                .check_element(
                    env,
                    &plan,
                    (Some(&element.target), &element.payload),
                    false,
                    "",
                    &known_streams,
                )
                .await?;
            match variables {
                Some(variables) if problems.is_empty() => {
                    let invocation =
                        invocation_of(env, &flow.id, mode, version, &mut element, false, now);
                    let run = self
                        .inline_run(&invocation, &element, &plan, &variables)
                        .await?;
                    valid.push((i, invocation, run));
                    outcome.push(Ok(String::new()));
                }
                _ => outcome.push(Err(describe(&problems))),
            }
        }
        Ok(PreparedElements { outcome, valid })
    }

    /// Records what [`prepare_elements`](Self::prepare_elements) built. Per element, its
    /// invocation id or why it was refused.
    pub async fn record_prepared(
        &self,
        prepared: PreparedElements,
    ) -> Result<Vec<Result<String, String>>, DomainError> {
        let PreparedElements {
            mut outcome,
            mut valid,
        } = prepared;
        // A reused id that does not match refuses the whole record call: drop such elements
        // and record the rest again.
        for _ in 0..2 {
            // The runs are moved, not copied: after a refusal (rare) the rest are recorded
            // again without them, for the workers to run.
            let asked: Vec<(Invocation, Option<BatchResult>)> = valid
                .iter_mut()
                .map(|(_, inv, run)| (inv.clone(), run.take()))
                .collect();
            let stored = self.invocations.record_run(asked).await?;
            let mut refused = Vec::new();
            for ((i, inv, _), stored) in valid.iter().zip(&stored) {
                if let Some(problem) = reuse_problem(inv, stored.as_ref(), "flowInvocationId") {
                    refused.push(*i);
                    outcome[*i] = Err(problem.to_string());
                }
            }
            if refused.is_empty() {
                for (i, inv, _) in &valid {
                    outcome[*i] = Ok(inv.id.clone());
                }
                return Ok(outcome);
            }
            valid.retain(|(i, _, _)| !refused.contains(i));
        }
        Err(DomainError::Storage(StorageError::Unavailable(
            "invocation ids kept being reused concurrently".into(),
        )))
    }

    /// The flow, the version `mode` runs, and its plan.
    async fn runnable(
        &self,
        env: &str,
        flow_id: &str,
        mode: Mode,
    ) -> Result<(crate::Flow, u32, Arc<FlowPlan>), DomainError> {
        let flow = self
            .flows
            .get(env, flow_id)
            .await?
            .ok_or(DomainError::NotFound(Resource::Flow))?;
        let version = match mode {
            Mode::Live => {
                if flow.archived {
                    return Err(DomainError::conflict(
                        ConflictKind::FlowArchived,
                        "the flow is archived and cannot be started",
                    ));
                }
                flow.published_version
            }
            Mode::Test => flow.draft_version.or(flow.published_version),
        }
        .ok_or(DomainError::NotFound(Resource::FlowVersion))?;
        let plan = self.plan(&flow.id, version).await?;
        Ok((flow, version, plan))
    }

    /// The environment's stream ids, read only when an element names some (listing them may
    /// create the default stream, which is a write).
    async fn known_streams(
        &self,
        env: &str,
        mut payloads: impl Iterator<Item = &Payload>,
    ) -> Result<BTreeSet<String>, DomainError> {
        let names_streams = payloads.any(|p| p.card_options.target_stream_ids.is_some());
        if !names_streams {
            return Ok(BTreeSet::new());
        }
        Ok(self
            .streams
            .list(env, Stream::default_for(env, self.clock.now()))
            .await?
            .into_iter()
            .map(|s| s.id)
            .collect())
    }

    /// What is wrong with one element beyond its shape (variables, streams, the segment), and
    /// its variables when they resolve.
    async fn check_element(
        &self,
        env: &str,
        plan: &FlowPlan,
        (target, payload): (Option<&Target>, &Payload),
        strict: bool,
        path: &str,
        known_streams: &BTreeSet<String>,
    ) -> Result<(Vec<FieldError>, Option<ResolvedVariables>), DomainError> {
        let at = |rest: &str| {
            if path.is_empty() {
                rest.to_owned()
            } else {
                format!("{path}.{rest}")
            }
        };
        let mut errors = Vec::new();
        let resolved = match resolve(&plan.config, payload, strict, &at("payload")) {
            Err(mut e) => {
                errors.append(&mut e);
                None
            }
            Ok(variables) => {
                errors.extend(push_payload_problems(
                    plan,
                    payload,
                    &variables,
                    &at("payload"),
                ));
                Some(variables)
            }
        };
        if let Some(ids) = &payload.card_options.target_stream_ids {
            for (j, id) in ids.iter().enumerate() {
                if !known_streams.contains(id) {
                    errors.push(FieldError::new(
                        at(&format!("payload.cardOptions.targetStreamIds[{j}]")),
                        format!("`{id}` is not a stream of this environment"),
                    ));
                }
            }
        }
        if let Some(Target::Segment(segment)) = target {
            if self.segments.get(env, segment).await?.is_none() {
                errors.push(FieldError::new(
                    at("target.targetSegmentId"),
                    format!("`{segment}` is not a segment of this environment"),
                ));
            }
        }
        Ok((errors, resolved))
    }

    pub async fn invocation(
        &self,
        who: &Principal,
        env: &str,
        flow_id: &str,
        id: &str,
    ) -> Result<Invocation, DomainError> {
        who.authorize(env, Permission::ActionFlowsRead)?;
        self.invocations
            .get(env, id)
            .await?
            .filter(|i| i.flow_id == flow_id)
            .ok_or(DomainError::NotFound(Resource::Invocation))
    }
}

/// Executes invocations, one batch of users at a time.
pub struct Engine {
    lease: Duration,
    flows: Arc<dyn FlowRepository>,
    invocations: Arc<dyn InvocationRepository>,
    users: Arc<dyn EndUserRepository>,
    segments: Arc<dyn SegmentRepository>,
    streams: Arc<dyn StreamRepository>,
    clock: Arc<dyn Clock>,
    stale: crate::health::Stale,
}

/// The users of one batch, and where the next batch starts.
struct Audience {
    users: Vec<String>,
    next: Option<String>,
}

impl Engine {
    pub fn new(
        flows: Arc<dyn FlowRepository>,
        invocations: Arc<dyn InvocationRepository>,
        users: Arc<dyn EndUserRepository>,
        segments: Arc<dyn SegmentRepository>,
        streams: Arc<dyn StreamRepository>,
        clock: Arc<dyn Clock>,
    ) -> Self {
        Self {
            lease: Duration::seconds(LEASE_SECONDS),
            flows,
            invocations,
            users,
            segments,
            streams,
            clock,
            stale: crate::health::Stale::default(),
        }
    }

    /// Batches not saved since the last call because their invocation's claim had passed to
    /// another holder, which saved first (contract §19).
    pub fn take_stale(&self) -> u64 {
        self.stale.take()
    }

    /// How long a claim lasts without progress before another worker may resume it.
    pub fn with_lease(mut self, lease: Duration) -> Self {
        self.lease = lease;
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
    /// each next batch is read and built while the one before is being written.
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
        let mut saving = self.invocations.save_batches(batches);
        // The followed invocation as the batch being saved found it (after the first round).
        let mut before = invocation.clone();
        let mut round = 1;
        loop {
            let now = self.clock.now();
            let (saved, next) = futures_util::future::join(
                unit::catch(saving),
                self.run_guarded(&invocation, now, &mut configs, &mut streams),
            )
            .await;
            let stale = match refused(saved)? {
                Ok(stale) => stale,
                Err(cause) => {
                    // Saved one by one from where the failed save started, so that one bad
                    // invocation fails alone (see [`Engine::save`]).
                    let from = if round == 1 {
                        &claimed[..]
                    } else {
                        std::slice::from_ref(&before)
                    };
                    self.one_by_one(from, cause, &mut configs, &mut streams)
                        .await?;
                    return Ok(true);
                }
            };
            self.stale.add(stale);
            if stale > 0 && round > 1 {
                // The followed invocation was taken over (its lease had run out): the next
                // batch would start from a cursor that is no longer its.
                return Ok(true);
            }
            let mut next = settled(next, &invocation, now)?;
            let more = round < FOLLOW_BATCHES
                && next.status == InvocationStatus::Running
                && next.cursor.is_some();
            if !more {
                self.save(
                    vec![next],
                    std::slice::from_ref(&invocation),
                    &mut configs,
                    &mut streams,
                )
                .await?;
                return Ok(true);
            }
            next.lease_until = Some(now + self.lease);
            before = invocation.clone();
            invocation.cursor = next.cursor.clone();
            saving = self.invocations.save_batches(vec![next]);
            round += 1;
        }
    }

    /// [`Engine::run_batch`], with a panic or an unexpected storage error caught (contract
    /// §10): tried up to [`unit::ATTEMPTS`] times, then the invocation fails alone, with an
    /// `errorId` in its errors and in the log.
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
            tracing::warn!(unit = "invocation", id = %invocation.id, attempt, cause = %cause, "an invocation's batch failed; trying it again");
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
        tracing::warn!(invocations = invocations.len(), cause = %together, "an engine step could not be saved; saving its invocations one by one");
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
        let element = super::request::parse_element(
            json!({"target": invocation.target.value(), "payload": invocation.payload.value()}),
        )
        .map_err(DomainError::Validation)?;
        let variables = resolve(
            &plan.config,
            &element.payload,
            invocation.strict_variables,
            "payload",
        )
        .map_err(DomainError::Validation)?;
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
        let Page { items, next_after } = Page::from_overfetch(users, page.limit, |u| u.id.clone());
        let users = items
            .into_iter()
            .filter(|u| filter.matches(u))
            .map(|u| u.id)
            .collect();
        Ok(Audience {
            users,
            next: next_after,
        })
    }
}

/// The invocation `element` asks for. Its raw target and payload are taken (left null), not
/// copied: the element is not recorded again.
fn invocation_of(
    env: &str,
    flow_id: &str,
    mode: Mode,
    version: u32,
    element: &mut FlowElement,
    strict_variables: bool,
    now: Timestamp,
) -> Invocation {
    // The texts recorded, and hashed for the fingerprint: each value written once.
    let target = JsonText::of(&std::mem::take(&mut element.raw_target));
    let payload = JsonText::of(&std::mem::take(&mut element.raw_payload));
    let fingerprint = fingerprint_of(target.text(), payload.text());
    Invocation {
        environment_id: env.to_owned(),
        id: element
            .invocation_id
            .clone()
            .unwrap_or_else(|| new_id(IdKind::Invocation)),
        flow_id: flow_id.to_owned(),
        mode,
        flow_version: version,
        fingerprint,
        target,
        payload,
        strict_variables,
        bulk: element.target.is_bulk(),
        status: InvocationStatus::Pending,
        users_targeted: 0,
        cards_created: 0,
        errors: Vec::new(),
        cursor: None,
        created: now,
        updated: now,
    }
}

/// Why a stored invocation with the asked id refuses the request (422 or 409), if it does.
fn reuse_problem(
    asked: &Invocation,
    stored: Option<&Invocation>,
    path: &str,
) -> Option<DomainError> {
    let stored = stored?;
    if stored.same_run(asked) {
        return None;
    }
    if stored.flow_id != asked.flow_id || stored.mode != asked.mode {
        return Some(DomainError::InvocationMismatch(format!(
            "{path} `{}` was used with {} in {} mode; an invocation id belongs to one flow and one mode",
            asked.id, stored.flow_id, stored.mode.as_str()
        )));
    }
    Some(DomainError::conflict(
        ConflictKind::InvocationConflict,
        format!(
            "{path} `{}` was used with another target or payload",
            asked.id
        ),
    ))
}

/// The element a problem's path names (`flows[3].payload...` is 3); the request's own
/// fields come first.
fn element_index(path: &str) -> Option<usize> {
    let rest = path.strip_prefix("flows[")?;
    rest[..rest.find(']')?].parse().ok()
}

/// Field problems as one line: `path: message; ...`.
fn describe(problems: &[FieldError]) -> String {
    problems
        .iter()
        .map(|e| {
            if e.field.is_empty() {
                e.message.clone()
            } else {
                format!("{}: {}", e.field, e.message)
            }
        })
        .collect::<Vec<_>>()
        .join("; ")
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

/// The environment's default stream, created if it has none yet.
async fn default_stream_of(
    streams: &dyn StreamRepository,
    env: &str,
    now: Timestamp,
) -> Result<String, StorageError> {
    streams
        .list(env, Stream::default_for(env, now))
        .await?
        .into_iter()
        .find(|s| s.is_default)
        .map(|s| s.id)
        .ok_or_else(|| StorageError::Internal("no default stream".into()))
}

/// One batch of `invocation` for `audience`: a flow instance per user, with a card and its
/// event per `create-card` step.
fn batch_for(
    invocation: &Invocation,
    plan: &FlowPlan,
    payload: &Payload,
    variables: &ResolvedVariables,
    audience: Audience,
    default_stream: &str,
    now: Timestamp,
) -> BatchResult {
    let mut batch = empty_batch(invocation, now);
    // Everything but the ids and the user is the same for every card of a step: rendered
    // once per batch, shared by the cards.
    let mut prototypes: Vec<CardInstance> = plan
        .cards
        .iter()
        .map(|step| card_prototype(invocation, step, payload, variables, default_stream, now))
        .collect();
    let users = audience.users.len();
    batch.cards.reserve(users * prototypes.len());
    batch.events.reserve(users * prototypes.len());
    for (n, user) in audience.users.iter().enumerate() {
        // The user's flow instance: its cards, which carry its id.
        let instance = new_id(IdKind::FlowInstance);
        // The last user's cards take the prototypes (a CSV row's one user: a copy fewer).
        let cards = if n + 1 == users {
            std::mem::take(&mut prototypes)
        } else {
            prototypes.clone()
        };
        for prototype in cards {
            let card = Arc::new(CardInstance {
                id: new_id(IdKind::Card),
                user_id: user.clone(),
                flow_instance_id: instance.clone(),
                ..prototype
            });
            batch.events.push(card_event(card.clone(), None, None, now));
            batch.cards.push(card);
        }
    }
    batch.users_targeted = audience.users.len() as u64;
    batch.cards_created = batch.cards.len() as u64;
    batch.cursor = audience.next.clone().or(invocation.cursor.clone());
    batch.status = if audience.next.is_some() {
        InvocationStatus::Running
    } else {
        InvocationStatus::Completed
    };
    batch
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

/// A batch that changes nothing but ends the claim.
fn empty_batch(invocation: &Invocation, now: Timestamp) -> BatchResult {
    BatchResult {
        environment_id: invocation.environment_id.clone(),
        invocation_id: invocation.id.clone(),
        from_cursor: invocation.cursor.clone(),
        cursor: invocation.cursor.clone(),
        status: invocation.status,
        users_targeted: 0,
        cards_created: 0,
        errors: Vec::new(),
        cards: Vec::new(),
        events: Vec::new(),
        updated: now,
        lease_until: None,
    }
}

/// Spec 8: the push payload (the notification as rendered for iOS and Android, the
/// trigger's `notificationDetail` and the ids the SDKs need) must fit in 2 KB. Checked at
/// trigger time with ids of their longest form, so a card never fails to push for its size.
pub(crate) fn push_payload_problems(
    plan: &FlowPlan,
    payload: &Payload,
    variables: &ResolvedVariables,
    path: &str,
) -> Vec<FieldError> {
    let templates = plan.notifying_templates();
    if templates.is_empty() {
        return Vec::new();
    }
    let platforms = payload.card_options.target_platforms.unwrap_or_default();
    let detail = payload
        .notification_detail
        .clone()
        .map(Value::Object)
        .unwrap_or(Value::Null);
    let longest_id = format!("{}_{}", IdKind::Stream.prefix(), "0".repeat(26));
    let mut errors = Vec::new();
    for (template_id, template) in templates {
        for (name, platform, on) in [
            ("iOS", Platform::Ios, platforms.ios),
            ("Android", Platform::Android, platforms.android),
        ] {
            let rendered = render(template, variables, platform);
            let message = rendered.get("notification").and_then(|n| {
                crate::push::PushMessage::new(n, &longest_id, &longest_id, &detail, None)
            });
            let size = message.map_or(0, |m| m.payload_bytes());
            if on && size > crate::push::MAX_PUSH_PAYLOAD_BYTES {
                errors.push(FieldError::new(
                    path,
                    format!(
                        "the push notification of card template `{template_id}` on {name} would be {size} bytes (its rendered text and notificationDetail); the limit is {} bytes",
                        crate::push::MAX_PUSH_PAYLOAD_BYTES
                    ),
                ));
            }
        }
    }
    errors
}

/// The card of one step of `invocation`, without its id, user and flow instance (empty).
fn card_prototype(
    invocation: &Invocation,
    step: &CardStep,
    payload: &Payload,
    variables: &ResolvedVariables,
    default_stream: &str,
    now: Timestamp,
) -> CardInstance {
    let options: &CardOptions = &payload.card_options;
    let platforms = options.target_platforms.unwrap_or_default();
    let priority = options
        .priority
        .or(step.priority)
        .unwrap_or(DEFAULT_PRIORITY);
    let embargo = options.embargo.filter(|e| *e > now);
    // Bounded when accepted; held in range all the same (contract §10: no arithmetic on
    // outside values may panic).
    let expires_at = options.expires.or_else(|| {
        options
            .expires_interval
            .map(|d| crate::time::saturating_after(embargo.unwrap_or(now), d))
    });
    let status = if embargo.is_some() {
        CardStatus::Embargoed
    } else {
        CardStatus::Active
    };
    let stream_ids = match &options.target_stream_ids {
        Some(ids) if !ids.is_empty() => {
            // Every card is in `All cards` too.
            let mut ids = ids.clone();
            if !ids.iter().any(|i| i == default_stream) {
                ids.insert(0, default_stream.to_owned());
            }
            ids
        }
        _ => vec![default_stream.to_owned()],
    };
    CardInstance {
        id: String::new(),
        environment_id: invocation.environment_id.clone(),
        user_id: String::new(),
        flow_instance_id: String::new(),
        invocation_id: invocation.id.clone(),
        flow_id: invocation.flow_id.clone(),
        flow_version: invocation.flow_version,
        step_id: step.step_id.clone(),
        template_id: step.template_id.clone(),
        template_name: step.template_name.clone(),
        status,
        priority,
        stream_ids,
        platforms: Platforms::names(&platforms)
            .into_iter()
            .map(str::to_owned)
            .collect(),
        content: content_of(step, &platforms, variables),
        context: trigger_context(
            invocation.mode == Mode::Test,
            variables.values.iter().map(|(k, v)| (k, &v.web)),
            payload.metadata.as_ref(),
            payload.notification_detail.as_ref(),
        ),
        embargo_until: embargo,
        expires_at,
        snoozed_until: None,
        published_at: (status == CardStatus::Active).then_some(now),
        created: now,
        updated: now,
    }
}

/// The card content of `step` on each of `platforms`: one view for all when it renders alike
/// on each (see [`CardContent`]).
fn content_of(
    step: &CardStep,
    platforms: &Platforms,
    variables: &ResolvedVariables,
) -> CardContent {
    let on: Vec<(&str, Platform)> = [
        ("Web", Platform::Web, platforms.web),
        ("iOS", Platform::Ios, platforms.ios),
        ("Android", Platform::Android, platforms.android),
    ]
    .into_iter()
    .filter(|(_, _, on)| *on)
    .map(|(name, platform, _)| (name, platform))
    .collect();
    let Some((_, first)) = on.first() else {
        return CardContent::default();
    };
    let notifies = step.view.notifies();
    if step.view.same_on_every_platform(variables) {
        return CardContent::shared(&step.view.render(variables, *first), notifies);
    }
    let views: Vec<(&str, String)> = on
        .iter()
        .map(|(name, platform)| (*name, step.view.render(variables, *platform)))
        .collect();
    if views.iter().all(|(_, v)| *v == views[0].1) {
        return CardContent::shared(&views[0].1, notifies);
    }
    let views: Vec<(&str, &str)> = views.iter().map(|(n, v)| (*n, v.as_str())).collect();
    CardContent::per_platform(&views, notifies)
}
