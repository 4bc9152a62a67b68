//! The commands of the Action Flow state machine ([`machine::decide`]), each decided on the
//! flow as stored and saved with it: publishing, drafts and their approval, archiving.

use serde_json::Value;

use super::FlowService;
use crate::flow::machine::{self, Command, Context};
use crate::flow::{CancelOlder, Flow, FlowVersion, VersionChange, VersionRef};
use crate::id::{EnvironmentId, FlowId};
use crate::tenancy::{Permission, Principal};
use crate::{DomainError, StorageError};

impl FlowService {
    /// Publishes a new version from a configuration sent whole (docs/api.md, Action Flows:
    /// Publish), numbered from the flow's counter, and answers the flow and that version.
    ///
    /// Needs [`Permission::ActionFlowsWrite`]. Then, in order: approvals enabled in the
    /// environment is [`DomainError::ApprovalRequired`] (whether or not the flow exists); no
    /// such flow, [`DomainError::NotFound`]; an archived flow, a [`DomainError::Conflict`] of
    /// kind [`ConflictKind::FlowArchived`]; a flow with a draft, of kind
    /// [`ConflictKind::DraftExists`]; an invalid configuration, [`DomainError::InvalidConfig`]
    /// with every problem.
    ///
    /// [`ConflictKind::FlowArchived`]: crate::ConflictKind::FlowArchived
    /// [`ConflictKind::DraftExists`]: crate::ConflictKind::DraftExists
    pub async fn publish(
        &self,
        who: &Principal,
        env: &EnvironmentId,
        id: &FlowId,
        config: Value,
    ) -> Result<(Flow, FlowVersion), DomainError> {
        with_version(self.command(who, env, id, Command::Publish(config)).await?)
    }

    /// Saves the draft: replaces the current draft's configuration (which clears its
    /// approval), or starts a new draft version. The caller becomes the draft's `created_by`.
    /// Answers the flow and the draft.
    ///
    /// Needs [`Permission::ActionFlowsWrite`]. Then, in order: no such flow is
    /// [`DomainError::NotFound`]; an invalid configuration, [`DomainError::InvalidConfig`]
    /// with every problem; an archived flow, a [`DomainError::Conflict`] of kind
    /// [`ConflictKind::FlowArchived`].
    ///
    /// [`ConflictKind::FlowArchived`]: crate::ConflictKind::FlowArchived
    pub async fn save_draft(
        &self,
        who: &Principal,
        env: &EnvironmentId,
        id: &FlowId,
        config: Value,
    ) -> Result<(Flow, FlowVersion), DomainError> {
        with_version(
            self.command(who, env, id, Command::SaveDraft(config))
                .await?,
        )
    }

    /// Discards the draft. Its version number is not given again.
    ///
    /// Needs [`Permission::ActionFlowsWrite`]; fails with [`DomainError::NotFound`] of
    /// [`Resource::Flow`] when the environment has no such flow, then of [`Resource::Draft`]
    /// when it has no draft.
    ///
    /// [`Resource::Flow`]: crate::Resource::Flow
    /// [`Resource::Draft`]: crate::Resource::Draft
    pub async fn discard_draft(
        &self,
        who: &Principal,
        env: &EnvironmentId,
        id: &FlowId,
    ) -> Result<(), DomainError> {
        self.command(who, env, id, Command::DiscardDraft).await?;
        Ok(())
    }

    /// Approves the draft. The credential that saved it cannot approve it. Answers the flow
    /// and the approved draft.
    ///
    /// Needs [`Permission::ActionFlowsWrite`]. Then, in order: [`DomainError::NotFound`] of
    /// [`Resource::Flow`] when the environment has no such flow, of [`Resource::Draft`] when
    /// it has no draft; [`DomainError::Forbidden`] when the caller is the key that saved the
    /// draft.
    ///
    /// [`Resource::Flow`]: crate::Resource::Flow
    /// [`Resource::Draft`]: crate::Resource::Draft
    pub async fn approve_draft(
        &self,
        who: &Principal,
        env: &EnvironmentId,
        id: &FlowId,
    ) -> Result<(Flow, FlowVersion), DomainError> {
        with_version(self.command(who, env, id, Command::ApproveDraft).await?)
    }

    /// Publishes the draft. With approvals enabled, the draft must have been approved. The
    /// version keeps its number; answers the flow and the published version.
    ///
    /// Needs [`Permission::ActionFlowsWrite`]. Then, in order: [`DomainError::NotFound`] of
    /// [`Resource::Flow`] when the environment has no such flow; a [`DomainError::Conflict`]
    /// of kind [`ConflictKind::FlowArchived`] when it is archived; [`DomainError::NotFound`]
    /// of [`Resource::Draft`] when it has no draft; [`DomainError::ApprovalRequired`] when
    /// approvals are enabled and the draft is not approved; [`DomainError::InvalidConfig`]
    /// should its configuration no longer be valid.
    ///
    /// [`ConflictKind::FlowArchived`]: crate::ConflictKind::FlowArchived
    /// [`Resource::Flow`]: crate::Resource::Flow
    /// [`Resource::Draft`]: crate::Resource::Draft
    pub async fn publish_draft(
        &self,
        who: &Principal,
        env: &EnvironmentId,
        id: &FlowId,
    ) -> Result<(Flow, FlowVersion), DomainError> {
        with_version(self.command(who, env, id, Command::PublishDraft).await?)
    }

    /// Publishes `config` as a new version ([`publish`](Self::publish)), or the draft when
    /// `config` is `None` ([`publish_draft`](Self::publish_draft)), and in the same transaction
    /// accepts a cancel task of the flow's active instances of older versions (contract §21,
    /// `cancelActiveInstances`). Answers the flow, the version and the task's id.
    ///
    /// Needs [`Permission::ActionFlowsWrite`] and, for the cancel,
    /// [`Permission::ActionFlowsTrigger`]; then fails as the publish would.
    pub async fn publish_cancelling(
        &self,
        who: &Principal,
        env: &EnvironmentId,
        id: &FlowId,
        config: Option<Value>,
    ) -> Result<(Flow, FlowVersion, String), DomainError> {
        who.authorize(env, Permission::ActionFlowsTrigger)?;
        let command = match config {
            Some(config) => Command::Publish(config),
            None => Command::PublishDraft,
        };
        let task_id = crate::id::new_uuid();
        let transition = self
            .command_cancelling(who, env, id, command, Some(&task_id))
            .await?;
        let (flow, version) = with_version(transition)?;
        Ok((flow, version, task_id))
    }

    /// Archives (`true`) or unarchives (`false`) the flow, and answers it. A flow already so
    /// keeps its `updated` time. Versions stay as they are; they show `ARCHIVED` while the
    /// flow is archived ([`FlowVersion::shown_status`]).
    ///
    /// Needs [`Permission::ActionFlowsWrite`]; fails with [`DomainError::NotFound`] when the
    /// environment has no such flow.
    pub async fn set_archived(
        &self,
        who: &Principal,
        env: &EnvironmentId,
        id: &FlowId,
        archived: bool,
    ) -> Result<Flow, DomainError> {
        let transition = self
            .command(who, env, id, Command::SetArchived(archived))
            .await?;
        Ok(transition.flow)
    }

    /// Decides `command` with the state machine ([`machine::decide`]) on the flow as stored,
    /// with its draft when the command reads it, and saves the outcome.
    async fn command(
        &self,
        who: &Principal,
        env: &str,
        id: &str,
        command: Command,
    ) -> Result<machine::Transition, DomainError> {
        self.command_cancelling(who, env, id, command, None).await
    }

    /// [`command`](Self::command); with `cancel_task`, a publish also writes a cancel task of
    /// that id for the instances of older versions, in the same transaction.
    async fn command_cancelling(
        &self,
        who: &Principal,
        env: &str,
        id: &str,
        command: Command,
        cancel_task: Option<&str>,
    ) -> Result<machine::Transition, DomainError> {
        // Every command of the state machine changes the flow.
        who.authorize(env, Permission::ActionFlowsWrite)?;
        let approvals_enabled =
            command.needs_approval_setting() && self.settings.get(env).await?.approvals_enabled;
        if approvals_enabled && matches!(command, Command::Publish(_)) {
            // Refused before the flow is read, whether or not it exists.
            return Err(machine::publish_needs_approval());
        }
        let command = &command;
        self.change_async(env, id, move |flow: Flow, now| async move {
            let draft = match (command.reads_draft(), flow.draft_version) {
                (true, Some(number)) => {
                    self.flows
                        .get_version(&flow.id, VersionRef::Number(number))
                        .await?
                }
                _ => None,
            };
            let context = Context {
                by: &who.key_id,
                approvals_enabled,
                now,
            };
            let transition = machine::decide(&flow, draft.as_ref(), command, &context)?;
            let change = match (cancel_task, &transition.version) {
                (Some(task_id), Some(version)) => VersionChange::Cancelling(
                    Box::new(transition.change.clone()),
                    CancelOlder {
                        task_id: task_id.to_owned(),
                        before_version: version.version,
                        at: now,
                    },
                ),
                _ => transition.change.clone(),
            };
            Ok((transition.flow.clone(), change, transition))
        })
        .await
    }
}

/// The flow and version of a transition that produced a version.
fn with_version(transition: machine::Transition) -> Result<(Flow, FlowVersion), DomainError> {
    let version = transition.version.ok_or_else(|| {
        DomainError::Storage(StorageError::Internal(
            "a versioned change produced no version".into(),
        ))
    })?;
    Ok((transition.flow, version))
}
