//! The request path of a trigger: [`TriggerService`] checks each flow element against the
//! flow, records its invocation (running it at once when its audience is a few known users)
//! and reads invocations back.

mod bulk;
pub(super) mod checks;
mod kept;
pub(crate) mod reads;

use crate::id::{EnvironmentId, FlowId, InvocationId};
use crate::trigger::FlowElement;
use std::collections::BTreeSet;
use std::sync::Arc;

use super::batch::{batch_for, default_stream_of, Audience};
use super::idempotency::decide;
use super::invocation::{
    BatchResult, Invocation, InvocationRepository, InvocationStatus, INLINE_USERS, MAX_RUNNING_BULK,
};
use super::plan::FlowPlan;
use super::request::{Payload, Target, TriggerRequest};
use super::variables::ResolvedVariables;
use super::{fingerprint_of, Mode};
use crate::audience::{SegmentRepository, Stream, StreamRepository};
use crate::flow::{FlowRepository, VersionRef};
use crate::json::JsonText;
use crate::tenancy::{Permission, Principal};
use crate::{Clock, ConflictKind, DomainError, FieldError, Resource, Timestamp};
use kept::Kept;

pub use bulk::PreparedElements;

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
