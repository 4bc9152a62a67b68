//! What "Publish" means to someone editing a configuration (the console's one button): the
//! text published now when nothing stands in the way, through the draft when there is one,
//! and kept as the draft, waiting for another key's approval, when approvals are on.

use serde_json::Value;

use super::{Flow, FlowService, FlowVersion};
use crate::id::{EnvironmentId, FlowId};
use crate::tenancy::Principal;
use crate::DomainError;

/// What a publish from the editor came to.
#[derive(Debug, Clone, PartialEq)]
pub enum Edited {
    /// The configuration is the flow's published version.
    Published {
        /// The flow after the publish.
        flow: Flow,
        /// The version published.
        version: FlowVersion,
    },
    /// Approvals are on: the configuration is saved as the draft, which another key must
    /// approve (its `created_by` may not) before it is published.
    AwaitingApproval {
        /// The flow after the save.
        flow: Flow,
        /// The draft saved.
        draft: FlowVersion,
    },
}

impl FlowService {
    /// Publishes `config` as a user of an editor means it: with approvals on in the
    /// environment, saves it as the draft ([`Edited::AwaitingApproval`]); else with a draft,
    /// saves it into the draft and publishes that; else publishes it as a new version.
    ///
    /// Needs what [`save_draft`](Self::save_draft) and [`publish`](Self::publish) need, and
    /// fails as they do. A save that holds while its publish fails keeps the text as the
    /// draft, so the user's work is not lost.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use workbench_domain::flow::editor::Edited;
    /// use workbench_domain::flow::{CreateFlow, EnvironmentSettings};
    /// use workbench_domain::memory::MemoryStore;
    /// use workbench_domain::prelude::*;
    /// use workbench_domain::serde_json::json;
    ///
    /// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
    /// let store = Arc::new(MemoryStore::new());
    /// let flows = FlowService::new(store.clone(), store.clone(), store, Arc::new(SystemClock));
    /// let env = EnvironmentId::from("env_1");
    /// let alice = Principal::trusted("alice", "org_1", &["env_1"]);
    /// let config = json!({
    ///     "type": "card", "version": "1", "initialSteps": ["hello"],
    ///     "steps": {"hello": {"id": "hello", "type": "create-card", "next": [],
    ///                         "properties": {"cardTemplateId": "hello"}}},
    ///     "cardTemplates": {"hello": {"metadata": {"cardName": "Hello"}}}
    /// });
    /// // A new flow from an example holds its configuration as a draft: it is published.
    /// let create = CreateFlow { name: "Welcome".into(), config: Some(config.clone()),
    ///     ..Default::default() };
    /// let flow = flows.create(&alice, &env, create).await.unwrap();
    /// let edited = flows.publish_edited(&alice, &env, &flow.id, config.clone()).await;
    /// let published = matches!(edited, Ok(Edited::Published { ref version, .. })
    ///     if version.version == 1);
    /// assert!(published);
    ///
    /// // With approvals on, the text waits as the draft.
    /// let on = EnvironmentSettings { approvals_enabled: true };
    /// flows.put_settings(&alice, &env, on).await.unwrap();
    /// let edited = flows.publish_edited(&alice, &env, &flow.id, config).await.unwrap();
    /// assert!(matches!(edited, Edited::AwaitingApproval { ref draft, .. } if draft.version == 2));
    /// # });
    /// ```
    pub async fn publish_edited(
        &self,
        who: &Principal,
        env: &EnvironmentId,
        id: &FlowId,
        config: Value,
    ) -> Result<Edited, DomainError> {
        if self.settings(who, env).await?.approvals_enabled {
            let (flow, draft) = self.save_draft(who, env, id, config).await?;
            return Ok(Edited::AwaitingApproval { flow, draft });
        }
        let (flow, version) = if self.get(who, env, id).await?.draft_version.is_some() {
            self.save_draft(who, env, id, config).await?;
            self.publish_draft(who, env, id).await?
        } else {
            self.publish(who, env, id, config).await?
        };
        Ok(Edited::Published { flow, version })
    }
}
