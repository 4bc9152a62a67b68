//! The text a configuration was written as in the console's editor, kept so that the editor
//! shows the user's own key order and formatting again (a configuration is stored as its JSON
//! value, whose keys have no order).
//!
//! A text is kept per version, beside the version rather than in its transaction: it only
//! helps the editor. It is shown only while it still reads as the version's configuration, so
//! a text left from an earlier save of a draft, or from before an edit in the form, is never
//! shown for a configuration it does not say.

use std::sync::Arc;

use async_trait::async_trait;
use serde_json::Value;

use super::editor::Edited;
use super::{FlowService, FlowVersion};
use crate::id::{EnvironmentId, FlowId};
use crate::tenancy::{Permission, Principal};
use crate::{DomainError, StorageError};

/// The longest text kept, in bytes: the API's largest request body.
pub const MAX_TEXT_BYTES: usize = 1024 * 1024;

/// Storage of editor texts (a port), by environment, flow and version.
#[cfg_attr(feature = "mock", mockall::automock)]
#[async_trait]
pub trait EditorTextRepository: Send + Sync {
    /// Keeps `text` for the version, replacing any kept before.
    async fn put(
        &self,
        environment_id: &str,
        flow_id: &str,
        version: u32,
        text: String,
    ) -> Result<(), StorageError>;
    /// The text kept for the version, if any.
    async fn get(
        &self,
        environment_id: &str,
        flow_id: &str,
        version: u32,
    ) -> Result<Option<String>, StorageError>;
}

/// What a save from the editor came to.
#[derive(Debug, Clone, PartialEq)]
pub struct Saved {
    /// Saved as the draft, published, or kept waiting for approval.
    pub outcome: SaveOutcome,
    /// The version saved: the draft, or the version published.
    pub version: FlowVersion,
    /// Whether the text itself was kept for the editor (the configuration is saved either
    /// way; when not, the editor shows it in reading order).
    pub text_kept: bool,
}

/// How a save from the editor ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SaveOutcome {
    /// Saved as the draft.
    Draft,
    /// Published ([`Edited::Published`]).
    Published,
    /// Saved as the draft for another key to approve ([`Edited::AwaitingApproval`]).
    AwaitingApproval,
}

/// The console's editor: a configuration saved from its text, and that text read back.
pub struct EditorService {
    flows: Arc<FlowService>,
    texts: Arc<dyn EditorTextRepository>,
}

impl EditorService {
    /// An editor over the flows and the texts' storage.
    pub fn new(flows: Arc<FlowService>, texts: Arc<dyn EditorTextRepository>) -> Self {
        Self { flows, texts }
    }

    /// Saves `text` as the draft, or publishes it (`publish`, as
    /// [`FlowService::publish_edited`]), then keeps the text for the version saved.
    ///
    /// Text over [`MAX_TEXT_BYTES`] or not JSON is [`DomainError::Validation`] at `""` with
    /// the parser's message; then it fails as the save or publish would. A failure to keep the
    /// text after the save is no error: [`Saved::text_kept`] is false.
    pub async fn save_text(
        &self,
        who: &Principal,
        env: &EnvironmentId,
        id: &FlowId,
        text: &str,
        publish: bool,
    ) -> Result<Saved, DomainError> {
        who.authorize(env, Permission::ActionFlowsWrite)?;
        if text.len() > MAX_TEXT_BYTES {
            let message = format!("is longer than {MAX_TEXT_BYTES} bytes");
            return Err(DomainError::invalid("", message));
        }
        let config: Value = serde_json::from_str(text)
            .map_err(|e| DomainError::invalid("", format!("is not JSON: {e}")))?;
        let (outcome, version) = if publish {
            match self.flows.publish_edited(who, env, id, config).await? {
                Edited::Published { version, .. } => (SaveOutcome::Published, version),
                Edited::AwaitingApproval { draft, .. } => (SaveOutcome::AwaitingApproval, draft),
            }
        } else {
            let (_, draft) = self.flows.save_draft(who, env, id, config).await?;
            (SaveOutcome::Draft, draft)
        };
        let text_kept = self
            .texts
            .put(env, id, version.version, text.to_owned())
            .await
            .is_ok();
        Ok(Saved {
            outcome,
            version,
            text_kept,
        })
    }

    /// The text `version` was saved as in the editor, while it still reads as the version's
    /// configuration; none otherwise (never kept, or since changed). Needs
    /// [`Permission::ActionFlowsRead`].
    pub async fn text(
        &self,
        who: &Principal,
        env: &EnvironmentId,
        version: &FlowVersion,
    ) -> Result<Option<String>, DomainError> {
        who.authorize(env, Permission::ActionFlowsRead)?;
        let kept = self
            .texts
            .get(env, &version.flow_id, version.version)
            .await?;
        Ok(kept.filter(|text| {
            serde_json::from_str::<Value>(text).is_ok_and(|parsed| parsed == version.config)
        }))
    }
}

#[cfg(all(test, feature = "mock"))]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::flow::{MockFlowRepository, MockSettingsRepository, VersionStatus};
    use crate::folder::MockFolderRepository;
    use crate::tenancy::{KeyAccess, Scope};
    use crate::testing::{caller, clock, t0};

    fn version(config: Value) -> FlowVersion {
        FlowVersion {
            flow_id: "flw".into(),
            version: 3,
            status: VersionStatus::Draft,
            config,
            created_by: "key_1".into(),
            approved_by: None,
            approved: None,
            published: None,
            created: t0(),
            updated: t0(),
        }
    }

    fn editor(kept: Option<&'static str>) -> EditorService {
        let flows = FlowService::new(
            Arc::new(MockFlowRepository::new()),
            Arc::new(MockFolderRepository::new()),
            Arc::new(MockSettingsRepository::new()),
            clock(),
        );
        let mut texts = MockEditorTextRepository::new();
        texts
            .expect_get()
            .withf(|env, flow, v| (env, flow, *v) == ("env", "flw", 3))
            .returning(move |_, _, _| Ok(kept.map(str::to_owned)));
        EditorService::new(Arc::new(flows), Arc::new(texts))
    }

    fn reader() -> Principal {
        caller("env", KeyAccess::Scopes(vec![Scope::ActionFlowsRead]))
    }

    #[tokio::test]
    async fn a_kept_text_is_shown_only_while_it_says_the_configuration() {
        let text = "{\n  \"type\": \"card\",\n  \"b\": 1,\n  \"a\": 2\n}";
        let config = json!({"a": 2, "b": 1, "type": "card"});
        let shown = editor(Some(text))
            .text(&reader(), &"env".into(), &version(config))
            .await
            .expect("read");
        assert_eq!(shown.as_deref(), Some(text), "the user's order and spacing");
        let changed = json!({"a": 3, "b": 1, "type": "card"});
        let stale = editor(Some(text))
            .text(&reader(), &"env".into(), &version(changed))
            .await
            .expect("read");
        assert_eq!(stale, None, "a text that no longer says the configuration");
        let none = editor(None)
            .text(&reader(), &"env".into(), &version(json!({})))
            .await
            .expect("read");
        assert_eq!(none, None);
    }

    #[tokio::test]
    async fn text_that_is_not_json_or_too_long_is_refused_before_anything_is_saved() {
        let writer = caller(
            "env",
            KeyAccess::Scopes(vec![Scope::ActionFlowsRead, Scope::ActionFlowsWrite]),
        );
        let e = editor(None);
        for text in ["{\"type\": ", &"x".repeat(MAX_TEXT_BYTES + 1)] {
            let refused = e
                .save_text(&writer, &"env".into(), &"flw".into(), text, false)
                .await;
            assert!(
                matches!(refused, Err(DomainError::Validation(_))),
                "{refused:?}"
            );
        }
        let refused = e
            .save_text(&reader(), &"env".into(), &"flw".into(), "{}", false)
            .await;
        assert!(matches!(refused, Err(DomainError::Forbidden(_))));
    }
}
