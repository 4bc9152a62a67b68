//! The request path of a trigger: [`TriggerService`] checks each flow element against the
//! flow, records its invocation (running it at once when its audience is a few known users)
//! and reads invocations back.

pub(crate) mod reads;

use crate::id::{EnvironmentId, FlowId, InvocationId};
use crate::trigger::FlowElement;
use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

use serde_json::Value;

use super::batch::{batch_for, default_stream_of, Audience};
use super::idempotency::decide;
use super::invocation::{
    BatchResult, Invocation, InvocationRepository, InvocationStatus, INLINE_USERS, MAX_RUNNING_BULK,
};
use super::plan::FlowPlan;
use super::request::{Payload, Target, TriggerRequest};
use super::variables::{render, resolve, Platform, ResolvedVariables};
use super::{fingerprint_of, Mode};
use crate::audience::{SegmentRepository, Stream, StreamRepository};
use crate::flow::{FlowRepository, VersionRef};
use crate::id::IdKind;
use crate::json::JsonText;
use crate::tenancy::{Permission, Principal};
use crate::{Clock, ConflictKind, DomainError, FieldError, Resource, StorageError, Timestamp};

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

/// Records triggers; reads their progress (docs/api.md, Triggers).
///
/// Each element of a request is checked against the flow and recorded durably as an
/// invocation before the answer; a live element of at most [`INLINE_USERS`] user ids is run
/// in the same transaction, the others by the [`Engine`](super::Engine) (docs/architecture.md,
/// The engine).
///
/// ```
/// use std::sync::{Arc, Mutex};
///
/// use workbench_domain::flow::VersionStatus;
/// use workbench_domain::mocks::{
///     MockClock, MockFlowRepository, MockInvocationRepository, MockSegmentRepository,
///     MockStreamRepository,
/// };
/// use workbench_domain::serde_json::json;
/// use workbench_domain::trigger::{InvocationStatus, Mode, TriggerService};
/// use workbench_domain::{DomainError, Flow, FlowVersion, Principal};
///
/// # let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
/// # rt.block_on(async {
/// let now = workbench_domain::chrono::Utc::now();
/// # let flow = Flow { latest_version: 1, published_version: Some(1), revision: 1,
/// #     ..Flow::new("flw_1", "env_1", "org_1", "Welcome", now) };
/// # let version = FlowVersion {
/// #     flow_id: "flw_1".into(),
/// #     version: 1,
/// #     status: VersionStatus::Published,
/// #     config: json!({
/// #         "type": "card",
/// #         "initialSteps": ["s1"],
/// #         "steps": {"s1": {"id": "s1", "type": "create-card",
/// #                          "properties": {"cardTemplateId": "hello"}}},
/// #         "variables": {"name": {"type": "string", "default": "there"}},
/// #         "cardTemplates": {"hello": {"metadata": {"cardName": "Hello"}, "defaultView": {
/// #             "content": [{"key": "h", "type": "headline",
/// #                          "attributes": {"text": "Hello %{name}"}}]}}},
/// #     }),
/// #     created_by: "key_1".into(),
/// #     approved_by: None,
/// #     approved: None,
/// #     published: Some(now),
/// #     created: now,
/// #     updated: now,
/// # };
/// // `flow` is the Action Flow `flw_1` of `env_1`; its published version 1 (`version`) has
/// // one `create-card` step, whose headline greets the string variable `name`.
/// let mut flows = MockFlowRepository::new();
/// flows.expect_get().returning(move |_, _| Ok(Some(flow.clone())));
/// flows.expect_get_version().returning(move |_, _| Ok(Some(version.clone())));
/// // The environment's streams: `All cards` alone, stored on first use.
/// let mut streams = MockStreamRepository::new();
/// streams.expect_list().returning(|_, default| Ok(vec![default]));
/// // Every id is new: recorded, and kept here.
/// let recorded = Arc::new(Mutex::new(Vec::new()));
/// let sink = recorded.clone();
/// let mut invocations = MockInvocationRepository::new();
/// invocations.expect_record_run().times(1).returning(move |runs| {
///     let answers = vec![None; runs.len()];
///     sink.lock().unwrap().extend(runs);
///     Ok(answers)
/// });
/// let mut clock = MockClock::new();
/// clock.expect_now().return_const(now);
/// let triggers = TriggerService::new(
///     Arc::new(flows),
///     Arc::new(invocations),
///     Arc::new(MockSegmentRepository::new()),
///     Arc::new(streams),
///     Arc::new(clock),
/// );
/// let who = Principal::trusted("crm", "org_1", &["env_1"]);
///
/// let body = json!({"flows": [{
///     "flowInvocationId": "welcome-u1",
///     "target": {"type": "user", "targetUserIds": ["u1"]},
///     "payload": {"variables": {"name": "Ann"}},
/// }]});
/// let ids = triggers.trigger_body(&who, &"env_1".into(), &"flw_1".into(), Mode::Live,
///     &body).await?;
/// assert_eq!(ids, ["welcome-u1"]);
/// {
///     // A live trigger of one user is recorded with its run: its card exists at once.
///     let recorded = recorded.lock().unwrap();
///     let (invocation, run) = &recorded[0];
///     assert_eq!((invocation.id.as_str(), invocation.flow_version), ("welcome-u1", 1));
///     let run = run.as_ref().expect("run when recorded");
///     assert_eq!(run.status, InvocationStatus::Completed);
///     assert_eq!((run.users_targeted, run.cards_created), (1, 1));
///     let card = &run.cards[0];
///     assert_eq!((card.user_id.as_str(), card.priority), ("u1", 5));
///     let views = card.content.views(&card.platforms);
///     assert_eq!(views["Web"]["defaultView"]["content"][0]["attributes"]["text"], "Hello Ann");
/// }
///
/// // Every problem at once, with its path; nothing is recorded.
/// let bad = json!({"flows": [{
///     "target": {"type": "user", "targetUserIds": ["u2"]},
///     "payload": {"variables": {"name": 7}, "cardOptions": {"priority": 11}},
/// }]});
/// let refused = triggers.trigger_body(&who, &"env_1".into(), &"flw_1".into(), Mode::Live,
///     &bad).await;
/// let Err(DomainError::Validation(problems)) = refused else { panic!("{refused:?}") };
/// let fields: Vec<&str> = problems.iter().map(|p| p.field.as_str()).collect();
/// assert!(fields.contains(&"flows[0].payload.cardOptions.priority"), "{fields:?}");
/// assert!(fields.contains(&"flows[0].payload.variables.name"), "{fields:?}");
/// # Ok::<(), DomainError>(())
/// # }).unwrap();
/// ```
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
    /// A service over these ports. `streams` gives each environment's default stream (read
    /// once, created when missing) and checks `targetStreamIds`; `segments` checks segment
    /// targets; `clock` stamps the invocations (their `created`, which cancels are compared
    /// with).
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

    /// A trigger request as sent (docs/api.md, Triggers): parsed, checked against the flow and
    /// recorded as [`trigger`](Self::trigger) does.
    ///
    /// A request with problems is answered with all of them at once (docs/api.md, Bounded
    /// values), as [`DomainError::Validation`] in element order: those of its shape and, for
    /// what could be read of each element, those against the flow (variables, streams, the
    /// segment). When the flow cannot run, a request with problems of shape gets those alone.
    pub async fn trigger_body(
        &self,
        who: &Principal,
        env: &EnvironmentId,
        flow_id: &FlowId,
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

    /// Records a parsed request (see [`parse`](super::parse)). Every element is checked
    /// against the version `mode` runs (variables, streams, the segment, the size of the push
    /// payload), then all are recorded in one call to
    /// [`InvocationRepository::record_run`], a live element of at most
    /// [`INLINE_USERS`] user ids with its run. Answers the invocation ids in request order,
    /// generated (`inv_…`) for elements without one. An id recorded before for the same run
    /// answers its id and runs nothing again.
    ///
    /// Needs `action_flows:trigger`. Fails, recording nothing, with:
    /// - [`DomainError::NotFound`] of [`Resource::Flow`] when the environment has no such
    ///   flow, and of [`Resource::FlowVersion`] when it has nothing `mode` runs (live: never
    ///   published; test: no draft and never published);
    /// - a [`DomainError::Conflict`] of kind [`ConflictKind::FlowArchived`] for a live trigger
    ///   of an archived flow;
    /// - [`DomainError::Validation`] with every problem the flow finds in the elements;
    /// - [`DomainError::RateLimited`] (retry after 5 seconds) when its segment, tag and filter
    ///   elements would take more than [`MAX_RUNNING_BULK`] bulk-task slots of the
    ///   environment;
    /// - a [`DomainError::Conflict`] of kind [`ConflictKind::InvocationConflict`] (409) when an
    ///   id was recorded with another target or payload, and
    ///   [`DomainError::InvocationMismatch`] (422) when with another flow or mode.
    pub async fn trigger(
        &self,
        who: &Principal,
        env: &EnvironmentId,
        flow_id: &FlowId,
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
                message: format!(
                    "at most {MAX_RUNNING_BULK} segment, tag, filter or CSV tasks run \
                    at once per environment; try again shortly"
                ),
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
        let ids: Vec<String> = runs.iter().map(|(i, _)| i.id.as_str().to_owned()).collect();
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
    ///
    /// No caller is checked: the task's creator was. Fails for the whole call, as
    /// [`trigger`](Self::trigger) does, when the flow cannot run in `mode` (not found, nothing
    /// to run, archived), and on a storage error; an element's problems are its own, kept in
    /// the answer as one line (`path: message; ...`).
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

    /// Records what [`prepare_elements`](Self::prepare_elements) built. Per element, in order,
    /// its invocation id or why it was refused: its problems, or its `flowInvocationId` reused
    /// with another run (the others are recorded all the same).
    ///
    /// Fails with a storage error, and with [`StorageError::Unavailable`] when ids were still
    /// being reused for other runs meanwhile after the refused ones were left out.
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
                    outcome[*i] = Ok(inv.id.clone().into());
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
            .map(|s| s.id.into_string())
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
            .map_or_else(InvocationId::mint, InvocationId::from),
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
    let stored = stored?.run_key();
    decide(&asked.run_key(), Some(&stored)).problem(&asked.id, &stored, path)
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

/// The push payload (the notification as rendered for iOS and Android, the trigger's
/// `notificationDetail` and the ids the SDKs need) must fit in 2 KB (docs/api.md, Triggers,
/// and its Sending pushes). Checked at
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
                        "the push notification of card template `{template_id}` on {name} would be \
                            {size} bytes (its rendered text and notificationDetail); the limit is \
                                {} bytes",
                        crate::push::MAX_PUSH_PAYLOAD_BYTES
                    ),
                ));
            }
        }
    }
    errors
}
