//! Action Flows: the list with its filters ([`list`]), a flow's page with its step graph
//! ([`page`]), its cards previewed ([`preview`]), the editor and the version actions
//! ([`edit`]), and a test trigger ([`test`]) whose invocation's page (`instances`) says what
//! happened.

mod edit;
mod json_text;
mod list;
mod page;
mod preview;
mod quick;
mod quick_form;
mod test;

use actix_web::web;
use domain::id::EnvironmentId;
use domain::DomainError;
use domain::{Flow, Folder};
use maud::{html, Markup};
use serde::Deserialize;
use serde_json::{json, Value};

use super::session::Session;
use crate::AppState;

pub(super) fn configure(cfg: &mut web::ServiceConfig) {
    list::configure(cfg);
    page::configure(cfg);
    preview::configure(cfg);
    quick::configure(cfg);
    edit::configure(cfg);
    test::configure(cfg);
}

pub(super) fn numbered(v: Option<u32>) -> Markup {
    html! { @match v { Some(v) => { "v" (v) }, None => { span.muted { "–" } } } }
}

pub(super) fn folder_name<'a>(folders: &'a [Folder], flow: &Flow) -> &'a str {
    flow.folder_id
        .as_deref()
        .and_then(|id| folders.iter().find(|f| f.id.as_str() == id))
        .map_or("Uncategorized", |f| f.name.as_str())
}

/// The environment's folders, for names and filters (none when the key may not read them).
pub(super) async fn folders(
    state: &AppState,
    session: &Session,
    env: &EnvironmentId,
) -> Vec<Folder> {
    state
        .folders
        .list(&session.principal, env)
        .await
        .unwrap_or_default()
}

#[derive(Deserialize)]
pub(super) struct TestForm {
    #[serde(default)]
    pub(super) users: String,
    pub(super) all: Option<String>,
    #[serde(default)]
    pub(super) variables: String,
}

impl TestForm {
    /// The trigger request the form stands for, as the API would be sent it; the service
    /// validates it. Variables that are not a JSON object are refused here.
    fn request(&self) -> Result<Value, DomainError> {
        let target = if self.all.is_some() {
            json!({"type": "allTestUsers"})
        } else {
            let users: Vec<&str> = self
                .users
                .split(',')
                .map(str::trim)
                .filter(|u| !u.is_empty())
                .collect();
            json!({"type": "user", "targetUserIds": users})
        };
        let variables = match self.variables.trim() {
            "" => json!({}),
            text => serde_json::from_str::<Value>(text)
                .ok()
                .filter(Value::is_object)
                .ok_or_else(|| {
                    DomainError::invalid("flows[0].payload.variables", "must be a JSON object")
                })?,
        };
        Ok(json!({"flows": [{"target": target, "payload": {"variables": variables}}]}))
    }
}
