//! The Action Flow state machine, as a pure function: a flow (with its draft, when it has
//! one) and a [`Command`] in, the next state and the version row it touches out, or the
//! refusal (docs/api.md, Action Flows).
//!
//! [`FlowService`](super::FlowService) decides every draft, approval, publish and archive
//! change with [`decide`] and saves the result with a compare-and-swap on the flow's
//! `revision`; another service with flows of its own can drive the same rules without any
//! store.
//!
//! ```
//! use workbench_domain::chrono::Utc;
//! use workbench_domain::flow::machine::{decide, Command, Context};
//! use workbench_domain::flow::{Flow, FlowStatus, VersionChange};
//! use workbench_domain::serde_json::json;
//!
//! let now = Utc::now();
//! let flow = Flow::new("flw_1", "env_1", "org_1", "Welcome", now);
//! let by_alice = Context { by: "key_alice", approvals_enabled: true, now };
//!
//! // An invalid configuration is refused with every problem it has.
//! let invalid = decide(&flow, None, &Command::SaveDraft(json!({"type": "card"})), &by_alice);
//! assert!(matches!(invalid, Err(workbench_domain::DomainError::InvalidConfig(_))));
//!
//! let config = json!({
//!     "type": "card", "version": "1", "initialSteps": ["hello"],
//!     "steps": {"hello": {"id": "hello", "type": "create-card", "next": [],
//!                         "properties": {"cardTemplateId": "hello"}}},
//!     "cardTemplates": {"hello": {"metadata": {"cardName": "Hello"}}}
//! });
//! // Saving a draft inserts version 1 as a draft.
//! let saved = decide(&flow, None, &Command::SaveDraft(config), &by_alice).unwrap();
//! assert_eq!(saved.flow.draft_version, Some(1));
//! let draft = saved.version.clone().unwrap();
//! assert!(matches!(saved.change, VersionChange::Insert(_)));
//!
//! // With approvals on, the draft cannot be published before someone else approves it.
//! let refused = decide(&saved.flow, Some(&draft), &Command::PublishDraft, &by_alice);
//! assert!(refused.is_err());
//! assert!(decide(&saved.flow, Some(&draft), &Command::ApproveDraft, &by_alice).is_err());
//!
//! let by_bob = Context { by: "key_bob", ..by_alice };
//! let approved = decide(&saved.flow, Some(&draft), &Command::ApproveDraft, &by_bob).unwrap();
//! let draft = approved.version.unwrap();
//! let published = decide(&approved.flow, Some(&draft), &Command::PublishDraft, &by_alice);
//! let published = published.unwrap();
//! assert_eq!(published.flow.status(), FlowStatus::Published);
//! assert_eq!(published.flow.published_version, Some(1));
//! assert_eq!(published.flow.draft_version, None);
//! ```

use serde_json::{Map, Value};

use super::config;
use super::{Flow, FlowVersion, VersionChange, VersionStatus};
use crate::{ConflictKind, DomainError, FieldError, Resource, StorageError, Timestamp};

/// A change of a flow's versions or archived state.
#[derive(Debug, Clone, PartialEq)]
pub enum Command {
    /// Publish this configuration as a new version at once. Refused while approvals are
    /// enabled, while the flow is archived or has a draft, and when the configuration is
    /// invalid.
    Publish(Value),
    /// Replace the draft's configuration (which clears its approval), or start a new draft
    /// version when there is none. Refused when the configuration is invalid or the flow is
    /// archived.
    SaveDraft(Value),
    /// Discard the draft; its version number is never given again.
    DiscardDraft,
    /// Approve the draft, by a caller other than the one that saved it.
    ApproveDraft,
    /// Publish the draft (approved first, when approvals are enabled).
    PublishDraft,
    /// Archive (`true`) or unarchive (`false`) the flow; a no-op when it already is.
    SetArchived(bool),
}

impl Command {
    /// Whether [`decide`] needs the flow's current draft version for this command.
    pub fn reads_draft(&self) -> bool {
        matches!(
            self,
            Command::SaveDraft(_) | Command::ApproveDraft | Command::PublishDraft
        )
    }

    /// Whether [`decide`] consults [`Context::approvals_enabled`] for this command.
    pub fn needs_approval_setting(&self) -> bool {
        matches!(self, Command::Publish(_) | Command::PublishDraft)
    }
}

/// Who decides, under which setting, and when.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Context<'a> {
    /// The caller making the change (a key id here): recorded as the author of a saved or
    /// published configuration and as the approver of a draft.
    pub by: &'a str,
    /// The environment's approval setting; only [`Command::Publish`] and
    /// [`Command::PublishDraft`] consult it.
    pub approvals_enabled: bool,
    /// The time of the change, written to `updated`, `published` and `approved`.
    pub now: Timestamp,
}

/// The outcome of an accepted command.
#[derive(Debug, Clone, PartialEq)]
pub struct Transition {
    /// The flow after the change, with the same `revision` as before: the store writes it
    /// with `revision + 1` only if the stored revision is still the one decided from.
    pub flow: Flow,
    /// The version row to write together with the flow.
    pub change: VersionChange,
    /// The version the command produced or changed, if any.
    pub version: Option<FlowVersion>,
}

/// Decides `command` on `flow`. `draft` is the flow's current draft version, needed when
/// [`Command::reads_draft`] says so (it is ignored otherwise); a flow whose `draft_version`
/// is set but whose draft is not given is an internal error.
pub fn decide(
    flow: &Flow,
    draft: Option<&FlowVersion>,
    command: &Command,
    context: &Context<'_>,
) -> Result<Transition, DomainError> {
    let mut next = flow.clone();
    next.updated = context.now;
    match command {
        Command::Publish(config) => publish(flow, next, config, context),
        Command::SaveDraft(config) => save_draft(flow, next, draft, config, context),
        Command::DiscardDraft => discard_draft(flow, next),
        Command::ApproveDraft => approve_draft(flow, next, draft, context),
        Command::PublishDraft => publish_draft(flow, next, draft, context),
        Command::SetArchived(archived) => Ok(set_archived(flow, next, *archived)),
    }
}

/// [`Command::Publish`]: a new published version, unless approvals are on, the flow is
/// archived or has a draft, or the configuration is invalid.
fn publish(
    flow: &Flow,
    mut next: Flow,
    config: &Value,
    context: &Context<'_>,
) -> Result<Transition, DomainError> {
    if context.approvals_enabled {
        return Err(publish_needs_approval());
    }
    refuse_archived(flow)?;
    if let Some(draft) = flow.draft_version {
        return Err(DomainError::conflict(
            ConflictKind::DraftExists,
            format!(
                "version {draft} is a draft: publish it (config/draft/publish) or \
                discard it before publishing a new configuration"
            ),
        ));
    }
    check_config(config)?;
    let version = new_version(flow, VersionStatus::Published, config, context);
    next.latest_version = version.version;
    next.published_version = Some(version.version);
    next.variables = variables_of(&version.config);
    Ok(inserted(next, version))
}

/// The flow's next version, numbered from its counter, saved by `context.by` with `config`.
fn new_version(
    flow: &Flow,
    status: VersionStatus,
    config: &Value,
    context: &Context<'_>,
) -> FlowVersion {
    let now = context.now;
    FlowVersion {
        flow_id: flow.id.clone().into(),
        version: flow.latest_version + 1,
        status,
        config: config.clone(),
        created_by: context.by.to_owned(),
        approved_by: None,
        approved: None,
        published: (status == VersionStatus::Published).then_some(now),
        created: now,
        updated: now,
    }
}

/// [`Command::SaveDraft`]: the draft's configuration replaced (its approval cleared), or a
/// new draft version.
fn save_draft(
    flow: &Flow,
    mut next: Flow,
    draft: Option<&FlowVersion>,
    config: &Value,
    context: &Context<'_>,
) -> Result<Transition, DomainError> {
    check_config(config)?;
    refuse_archived(flow)?;
    let (version, change) = match flow.draft_version {
        Some(_) => {
            let current = current_draft(flow, draft)?;
            let version = FlowVersion {
                config: config.clone(),
                created_by: context.by.to_owned(),
                approved_by: None,
                approved: None,
                updated: context.now,
                ..current.clone()
            };
            (version.clone(), VersionChange::Update(version))
        }
        None => {
            let version = new_version(flow, VersionStatus::Draft, config, context);
            (version.clone(), VersionChange::Insert(version))
        }
    };
    next.latest_version = next.latest_version.max(version.version);
    next.draft_version = Some(version.version);
    if next.published_version.is_none() {
        next.variables = variables_of(&version.config);
    }
    Ok(Transition {
        flow: next,
        change,
        version: Some(version),
    })
}

/// [`Command::DiscardDraft`]: the draft deleted; a flow never published loses its variables.
fn discard_draft(flow: &Flow, mut next: Flow) -> Result<Transition, DomainError> {
    let draft = flow
        .draft_version
        .ok_or(DomainError::NotFound(Resource::Draft))?;
    next.draft_version = None;
    if next.published_version.is_none() {
        next.variables = Map::new();
    }
    Ok(Transition {
        flow: next,
        change: VersionChange::Delete(draft),
        version: None,
    })
}

/// [`Command::ApproveDraft`]: approved by a credential other than the one that saved it.
fn approve_draft(
    flow: &Flow,
    next: Flow,
    draft: Option<&FlowVersion>,
    context: &Context<'_>,
) -> Result<Transition, DomainError> {
    let draft = current_draft(flow, draft)?;
    if draft.created_by == context.by {
        return Err(DomainError::Forbidden(
            "a draft must be approved by a credential other than the one that saved it".into(),
        ));
    }
    let version = FlowVersion {
        approved_by: Some(context.by.to_owned()),
        approved: Some(context.now),
        ..draft.clone()
    };
    Ok(updated(next, version))
}

/// [`Command::PublishDraft`]: the draft published under its own number, approved first when
/// approvals are on.
fn publish_draft(
    flow: &Flow,
    mut next: Flow,
    draft: Option<&FlowVersion>,
    context: &Context<'_>,
) -> Result<Transition, DomainError> {
    refuse_archived(flow)?;
    let draft = current_draft(flow, draft)?;
    if context.approvals_enabled && draft.approved_by.is_none() {
        return Err(DomainError::ApprovalRequired(
            "approvals are enabled for this environment: the draft must be approved by \
                another credential first"
                .into(),
        ));
    }
    check_config(&draft.config)?;
    let version = FlowVersion {
        status: VersionStatus::Published,
        published: Some(context.now),
        updated: context.now,
        ..draft.clone()
    };
    next.published_version = Some(version.version);
    next.draft_version = None;
    next.variables = variables_of(&version.config);
    Ok(updated(next, version))
}

/// [`Command::SetArchived`]: a flow already so keeps its `updated` time.
fn set_archived(flow: &Flow, mut next: Flow, archived: bool) -> Transition {
    if flow.archived == archived {
        next.updated = flow.updated;
    }
    next.archived = archived;
    Transition {
        flow: next,
        change: VersionChange::None,
        version: None,
    }
}

/// The refusal of a direct publish while approvals are enabled.
pub fn publish_needs_approval() -> DomainError {
    DomainError::ApprovalRequired(
        "approvals are enabled for this environment: save a draft, have it approved by another \
            credential, then publish the draft"
            .into(),
    )
}

/// The variable definitions a configuration declares.
pub(super) fn variables_of(config: &Value) -> Map<String, Value> {
    config
        .get("variables")
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default()
}

fn inserted(flow: Flow, version: FlowVersion) -> Transition {
    Transition {
        flow,
        change: VersionChange::Insert(version.clone()),
        version: Some(version),
    }
}

fn updated(flow: Flow, version: FlowVersion) -> Transition {
    Transition {
        flow,
        change: VersionChange::Update(version.clone()),
        version: Some(version),
    }
}

fn check_config(config: &Value) -> Result<(), DomainError> {
    let errors: Vec<FieldError> = config::validate(config, "config");
    if errors.is_empty() {
        Ok(())
    } else {
        Err(DomainError::InvalidConfig(errors))
    }
}

fn refuse_archived(flow: &Flow) -> Result<(), DomainError> {
    if flow.archived {
        Err(DomainError::conflict(
            ConflictKind::FlowArchived,
            "the flow is archived; unarchive it first",
        ))
    } else {
        Ok(())
    }
}

/// The flow's draft: `NotFound(Draft)` when it has none. A draft the flow names but that was
/// not given was read after the flow changed (discarded or published meanwhile): a stale
/// read, which the caller decides again on the flow as it is now.
fn current_draft<'a>(
    flow: &Flow,
    draft: Option<&'a FlowVersion>,
) -> Result<&'a FlowVersion, DomainError> {
    let number = flow
        .draft_version
        .ok_or(DomainError::NotFound(Resource::Draft))?;
    draft
        .filter(|d| d.version == number)
        .ok_or(DomainError::Storage(StorageError::StaleRevision))
}
