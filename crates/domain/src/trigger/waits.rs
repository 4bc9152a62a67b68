//! The worker that runs waiting flow instances on (contract §21): it claims the instances that
//! are due on the database's clock (a deadline reached, or a card they listen to closed), runs
//! each one forward through the steps that can go on ([`crate::flow::steps::run::resume`]), and
//! saves them with the cards they made, fenced by their revision.

use std::collections::HashMap;
use std::sync::Arc;

use chrono::Duration;
use serde_json::{Map, Value};

use super::batch::{default_stream_of, flow_variables, inputs_of, instance_cards, program_of};
use super::instances::{
    FlowInstance, InstanceAdvance, InstanceRepository, CLAIM_INSTANCES, INSTANCE_LEASE_SECONDS,
};
use super::invocation::{Invocation, InvocationRepository};
use super::plan::FlowPlan;
use super::request::FlowElement;
use super::variables::ResolvedVariables;
use crate::audience::StreamRepository;
use crate::flow::steps::machine::{StepError, StepState};
use crate::flow::steps::run::{self, Records};
use crate::flow::steps::{ClosedCard, InstanceState, StepKind};
use crate::flow::{FlowRepository, VersionRef};
use crate::id::{new_id, IdKind};
use crate::unit::Unexpected;
use crate::{Clock, DomainError, Resource, StorageError, Timestamp};

/// Runs due flow instances on: claimed with a lease, each saved with its cards in one
/// transaction and fenced by its revision.
pub struct Waits {
    flows: Arc<dyn FlowRepository>,
    invocations: Arc<dyn InvocationRepository>,
    instances: Arc<dyn InstanceRepository>,
    streams: Arc<dyn StreamRepository>,
    clock: Arc<dyn Clock>,
    lease: Duration,
}

/// What one step of [`Waits`] did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WaitsStep {
    /// Instances claimed.
    pub claimed: usize,
    /// Of those, instances not saved because another holder or a card's closing changed them
    /// since they were read (they are run again).
    pub stale: u64,
}

impl Waits {
    /// A worker over these ports, with a lease of [`INSTANCE_LEASE_SECONDS`].
    pub fn new(
        flows: Arc<dyn FlowRepository>,
        invocations: Arc<dyn InvocationRepository>,
        instances: Arc<dyn InstanceRepository>,
        streams: Arc<dyn StreamRepository>,
        clock: Arc<dyn Clock>,
    ) -> Self {
        Self {
            flows,
            invocations,
            instances,
            streams,
            clock,
            lease: Duration::seconds(INSTANCE_LEASE_SECONDS),
        }
    }

    /// Claims up to [`CLAIM_INSTANCES`] due instances, oldest due first, runs each on and saves
    /// them. An instance that cannot run on for its own reasons (its invocation or flow version
    /// gone) is stored failed, with the reason in its step's record; a storage error that
    /// waiting cures fails the step, and what it claimed and did not save is claimed again once
    /// the lease ends.
    pub async fn step(&self) -> Result<WaitsStep, StorageError> {
        let claimed = self
            .instances
            .claim_due(self.clock.now(), self.lease, CLAIM_INSTANCES)
            .await?;
        if claimed.is_empty() {
            return Ok(WaitsStep::default());
        }
        let count = claimed.len();
        let mut cache = Cache::default();
        let mut advances = Vec::with_capacity(count);
        for instance in claimed {
            match self.run_on(&instance, &mut cache).await {
                Ok(Some(advance)) => advances.push(advance),
                Ok(None) => {}
                Err(DomainError::Storage(e)) if !e.is_unexpected() => return Err(e),
                Err(e) => advances.push(failed(instance, &e.to_string(), self.clock.now())),
            }
        }
        let stale = self.instances.advance(advances).await?;
        Ok(WaitsStep {
            claimed: count,
            stale,
        })
    }

    /// What the instances of one invocation share, read and worked out once per step.
    async fn inputs(
        &self,
        instance: &FlowInstance,
        plans: &mut HashMap<(String, u32), Arc<FlowPlan>>,
    ) -> Result<Arc<Inputs>, DomainError> {
        let env = &instance.environment_id;
        let invocation = self
            .invocations
            .get(env, &instance.invocation_id)
            .await?
            .ok_or(DomainError::NotFound(Resource::Invocation))?;
        let key = (instance.flow_id.clone(), instance.flow_version);
        let plan = match plans.get(&key) {
            Some(plan) => plan.clone(),
            None => {
                let version = self
                    .flows
                    .get_version(&instance.flow_id, VersionRef::Number(instance.flow_version))
                    .await?
                    .ok_or(DomainError::NotFound(Resource::FlowVersion))?;
                let plan = Arc::new(FlowPlan::of(version.config));
                plans.insert(key, plan.clone());
                plan
            }
        };
        if program_of(&plan).is_none() {
            return Err(DomainError::Storage(StorageError::Internal(
                "an instance of a flow version that neither waits nor branches".into(),
            )));
        }
        let (element, variables) = inputs_of(&invocation, &plan)?;
        Ok(Arc::new(Inputs {
            flow_variables: flow_variables(&variables),
            invocation,
            plan,
            element,
            variables,
        }))
    }

    async fn run_on(
        &self,
        instance: &FlowInstance,
        cache: &mut Cache,
    ) -> Result<Option<InstanceAdvance>, DomainError> {
        let env = &instance.environment_id;
        let key = (env.clone(), instance.invocation_id.clone());
        let inputs = match cache.inputs.get(&key) {
            Some(inputs) => inputs.clone(),
            None => {
                let inputs = self.inputs(instance, &mut cache.plans).await?;
                cache.inputs.insert(key, inputs.clone());
                inputs
            }
        };
        let Some(program) = program_of(&inputs.plan) else {
            return Ok(None);
        };
        let listened = listened_cards(program, &instance.records);
        let closed: HashMap<String, ClosedCard> = if listened.is_empty() {
            HashMap::new()
        } else {
            self.instances
                .closed_cards(env, listened)
                .await?
                .into_iter()
                .collect()
        };
        let now = self.clock.now();
        let advance = run::resume(
            program,
            &inputs.flow_variables,
            instance.records.clone(),
            now,
            &|card| closed.get(card).cloned(),
            &mut || new_id(IdKind::Card),
        );
        let mut next = instance.clone();
        next.records = advance.records;
        next.state = advance.state;
        next.due = advance.due;
        next.updated = now;
        let invocation_created = inputs.invocation.created;
        if !advance.changed {
            // Claimed before its time (a card closing that concerned none of its waits): stored
            // again as it was, due at its deadline.
            return Ok(Some(InstanceAdvance {
                before: (instance.records.clone(), instance.state),
                instance: next,
                invocation_created,
                cards: Vec::new(),
                events: Vec::new(),
            }));
        }
        let stream = match cache.streams.get(env) {
            Some(id) => id.clone(),
            None => {
                let id = default_stream_of(&*self.streams, env, now).await?;
                cache.streams.insert(env.clone(), id.clone());
                id
            }
        };
        let (cards, events) = instance_cards(
            &inputs.invocation,
            &inputs.plan,
            &inputs.element.payload,
            &inputs.variables,
            &stream,
            &next,
            &advance.cards,
            now,
        );
        Ok(Some(InstanceAdvance {
            before: (instance.records.clone(), instance.state),
            instance: next,
            invocation_created,
            cards,
            events,
        }))
    }
}

/// What the instances of one invocation share.
struct Inputs {
    invocation: Invocation,
    plan: Arc<FlowPlan>,
    element: FlowElement,
    variables: ResolvedVariables,
    flow_variables: Map<String, Value>,
}

/// What one step has read: flow versions' plans, invocations' inputs, default streams.
#[derive(Default)]
struct Cache {
    plans: HashMap<(String, u32), Arc<FlowPlan>>,
    inputs: HashMap<(String, String), Arc<Inputs>>,
    streams: HashMap<String, String>,
}

/// The cards the waiting `wait-for-card` steps of an instance listen to, and those that a step
/// still to start could: every card the instance made.
fn listened_cards(program: &crate::flow::steps::Program, records: &Records) -> Vec<String> {
    let listens = program
        .steps
        .values()
        .any(|s| matches!(s.kind, StepKind::WaitForCard(_)));
    if !listens {
        return Vec::new();
    }
    records.values().filter_map(|r| r.card.clone()).collect()
}

/// An instance stored failed: its waiting steps failed with `error`.
fn failed(instance: FlowInstance, error: &str, now: Timestamp) -> InstanceAdvance {
    let before = (instance.records.clone(), instance.state);
    let mut next = instance;
    for record in next.records.values_mut() {
        if !record.state.is_final() {
            record.state = StepState::Failed {
                error: StepError::Engine(error.to_owned()),
            };
            record.finished = Some(now);
        }
    }
    next.state = InstanceState::Failed;
    next.due = None;
    next.updated = now;
    InstanceAdvance {
        before,
        invocation_created: next.created,
        instance: next,
        cards: Vec::new(),
        events: Vec::new(),
    }
}
