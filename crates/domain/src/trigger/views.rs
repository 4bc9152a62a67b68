//! What the API reads of an invocation of a flow that waits or branches: the invocation with
//! its instances' counts, and one user's instance.

use std::sync::Arc;

use super::instances::{FlowInstance, InstanceCounts, InstanceRepository};
use super::invocation::{Invocation, InvocationRepository, InvocationStatus};
use crate::flow::steps::InstanceState;
use crate::id::{EnvironmentId, FlowId, InvocationId};
use crate::tenancy::{Permission, Principal};
use crate::{DomainError, Resource};

/// An invocation with what its instances did, for a flow that waits or branches.
#[derive(Debug, Clone, PartialEq)]
pub struct InvocationView {
    /// The invocation as stored.
    pub invocation: Invocation,
    /// Its instances' counts; none for a flow that neither waits nor branches.
    pub instances: Option<InstanceCounts>,
}

impl InvocationView {
    /// Its status as users see it: `running` while an instance of it still waits, even once
    /// every user had its batch.
    pub fn status(&self) -> InvocationStatus {
        match (&self.instances, self.invocation.status) {
            (Some(counts), InvocationStatus::Completed) if counts.active() > 0 => {
                InvocationStatus::Running
            }
            (_, status) => status,
        }
    }
}

/// Reads of flow instances for the API: an invocation with its instances' counts, and one
/// user's instance.
pub struct InstanceService {
    invocations: Arc<dyn InvocationRepository>,
    instances: Arc<dyn InstanceRepository>,
}

impl InstanceService {
    /// Reads through these ports.
    pub fn new(
        invocations: Arc<dyn InvocationRepository>,
        instances: Arc<dyn InstanceRepository>,
    ) -> Self {
        Self {
            invocations,
            instances,
        }
    }

    /// The invocation `id` of the flow, with its instances' counts. Needs `action_flows:read`
    /// ([`Permission::ActionFlowsRead`]); another
    /// flow's invocation is [`DomainError::NotFound`].
    pub async fn invocation(
        &self,
        who: &Principal,
        env: &EnvironmentId,
        flow_id: &FlowId,
        id: &InvocationId,
    ) -> Result<InvocationView, DomainError> {
        let invocation = flow_invocation(&*self.invocations, who, env, flow_id, id).await?;
        let instances = InstanceCounts::of(self.instances.counts(env, id).await?);
        Ok(InvocationView {
            invocation,
            instances,
        })
    }

    /// The instance of `user` in the invocation `id` of the flow. Needs `action_flows:read`.
    /// An invocation of another flow, or a user it did not reach with a stored instance, is
    /// [`DomainError::NotFound`].
    pub async fn instance(
        &self,
        who: &Principal,
        env: &EnvironmentId,
        flow_id: &FlowId,
        id: &InvocationId,
        user: &str,
    ) -> Result<FlowInstance, DomainError> {
        flow_invocation(&*self.invocations, who, env, flow_id, id).await?;
        let mut instance = self
            .instances
            .get(env, id, user)
            .await?
            .ok_or(DomainError::NotFound(Resource::FlowInstance))?;
        if instance.state == InstanceState::Cancelled {
            // A cancel stops an instance in one statement; its steps read as it left them.
            crate::flow::steps::run::cancel(&mut instance.records, instance.updated);
        }
        Ok(instance)
    }
}

/// The invocation `id` of the flow, read through `invocations` for `who`: needs
/// `action_flows:read`; another flow's, or none, is [`DomainError::NotFound`] of
/// [`Resource::Invocation`].
pub(crate) async fn flow_invocation(
    invocations: &dyn InvocationRepository,
    who: &Principal,
    env: &EnvironmentId,
    flow_id: &FlowId,
    id: &InvocationId,
) -> Result<Invocation, DomainError> {
    who.authorize(env, Permission::ActionFlowsRead)?;
    invocations
        .get(env, id)
        .await?
        .filter(|i| i.flow_id == flow_id)
        .ok_or(DomainError::NotFound(Resource::Invocation))
}
