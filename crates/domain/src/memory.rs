//! In-memory stores of folders, flows and settings (feature `memory`), for tests and for
//! services that keep these in memory. It keeps no environments of its own: any environment
//! id names one (the database adapters refuse an id with no environment row). [`MemoryStore`]
//! implements [`FolderRepository`], [`FlowRepository`] and [`SettingsRepository`] over one lock, so
//! that deleting a folder un-files its flows atomically, as the ports require. It passes the same
//! port contract ([`contract`](crate::contract), feature `contract`) as the SQLite and PostgreSQL
//! adapters.
//!
//! ```
//! use std::sync::Arc;
//! use workbench_domain::memory::MemoryStore;
//! use workbench_domain::folder::CreateFolder;
//! use workbench_domain::prelude::*;
//!
//! # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
//! let store = Arc::new(MemoryStore::new());
//! let folders = FolderService::new(store.clone(), Arc::new(SystemClock));
//! let who = Principal::trusted("billing-service", "org_1", &["env_1"]);
//!
//! let create = |name: &str| CreateFolder { name: name.into(), parent_id: None };
//! let made = folders.create(&who, &"env_1".into(), create("Receipts")).await.unwrap();
//! assert_eq!(folders.list(&who, &"env_1".into()).await.unwrap(), vec![made]);
//! // The store refuses a sibling's name, which the service answers as a conflict.
//! let again = folders.create(&who, &"env_1".into(), create("Receipts")).await;
//! assert!(matches!(again, Err(DomainError::Conflict { .. })));
//! // Another environment sees none of it.
//! let elsewhere = Principal::trusted("billing-service", "org_1", &["env_2"]);
//! assert!(folders.list(&elsewhere, &"env_2".into()).await.unwrap().is_empty());
//! # });
//! ```

use std::collections::{BTreeMap, HashMap};
use std::sync::{Mutex, MutexGuard};

use async_trait::async_trait;

use crate::flow::{
    EnvironmentSettings, FlowFilter, FolderFilter, SettingsRepository, VersionChange, VersionRef,
};
use crate::folder::rules;
use crate::page::PageRequest;
use crate::{Flow, FlowRepository, FlowVersion, Folder, FolderRepository, StorageError, Timestamp};

/// Folders, flows with their versions, and environment settings, in memory. Every method is
/// scoped to its environment like the database adapters.
#[derive(Debug, Default)]
pub struct MemoryStore {
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    folders: Vec<Folder>,
    /// By environment, then flow id.
    flows: HashMap<String, BTreeMap<String, Flow>>,
    /// By flow id, then version number.
    versions: HashMap<String, BTreeMap<u32, FlowVersion>>,
    settings: HashMap<String, EnvironmentSettings>,
}

impl MemoryStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    fn state(&self) -> Result<MutexGuard<'_, State>, StorageError> {
        self.state
            .lock()
            .map_err(|_| StorageError::Internal("the in-memory store's lock is poisoned".into()))
    }
}

impl State {
    fn folder(&self, env: &str, id: &str) -> Option<&Folder> {
        self.folders
            .iter()
            .find(|f| f.environment_id == env && f.id == id)
    }

    fn siblings<'a>(
        &'a self,
        env: &'a str,
        parent: &'a Option<String>,
    ) -> impl Iterator<Item = &'a Folder> {
        self.folders
            .iter()
            .filter(move |f| f.environment_id == env && &f.parent_id == parent)
    }

    /// A flow may be filed only in a folder of its own environment.
    fn check_filed(&self, flow: &Flow) -> Result<(), StorageError> {
        match &flow.folder_id {
            Some(folder) if self.folder(&flow.environment_id, folder).is_none() => {
                Err(StorageError::ForeignKeyViolation(format!(
                    "no folder `{folder}` in the flow's environment"
                )))
            }
            _ => Ok(()),
        }
    }
}

fn name_taken(name: &str) -> StorageError {
    StorageError::UniqueViolation(format!("a sibling folder is named `{name}`"))
}

#[async_trait]
impl FolderRepository for MemoryStore {
    async fn list(&self, environment_id: &str) -> Result<Vec<Folder>, StorageError> {
        let state = self.state()?;
        Ok(state
            .folders
            .iter()
            .filter(|f| f.environment_id == environment_id)
            .cloned()
            .collect())
    }

    async fn get(
        &self,
        environment_id: &str,
        folder_id: &str,
    ) -> Result<Option<Folder>, StorageError> {
        Ok(self.state()?.folder(environment_id, folder_id).cloned())
    }

    async fn insert(&self, folder: &Folder) -> Result<(), StorageError> {
        let mut state = self.state()?;
        let env = &folder.environment_id;
        if let Some(parent) = &folder.parent_id {
            if state.folder(env, parent).is_none() {
                return Err(StorageError::ForeignKeyViolation(format!(
                    "no folder `{parent}` in the environment"
                )));
            }
        }
        if state.folders.iter().any(|f| f.id == folder.id) {
            return Err(StorageError::UniqueViolation(format!(
                "folder id `{}`",
                folder.id
            )));
        }
        if !rules::name_is_free(&folder.name, state.siblings(env, &folder.parent_id), None) {
            return Err(name_taken(&folder.name));
        }
        state.folders.push(folder.clone());
        Ok(())
    }

    async fn rename(
        &self,
        environment_id: &str,
        folder_id: &str,
        name: &str,
        updated: Timestamp,
    ) -> Result<Option<Folder>, StorageError> {
        let mut state = self.state()?;
        let Some(current) = state.folder(environment_id, folder_id).cloned() else {
            return Ok(None);
        };
        let siblings = state.siblings(environment_id, &current.parent_id);
        if !rules::name_is_free(name, siblings, Some(folder_id)) {
            return Err(name_taken(name));
        }
        let renamed = Folder {
            name: name.to_owned(),
            updated,
            ..current
        };
        for folder in &mut state.folders {
            if folder.environment_id == environment_id && folder.id == folder_id {
                *folder = renamed.clone();
            }
        }
        Ok(Some(renamed))
    }

    async fn has_children(
        &self,
        environment_id: &str,
        folder_id: &str,
    ) -> Result<bool, StorageError> {
        let state = self.state()?;
        Ok(state.folders.iter().any(|f| {
            f.environment_id == environment_id && f.parent_id.as_deref() == Some(folder_id)
        }))
    }

    async fn delete_and_unfile_flows(
        &self,
        environment_id: &str,
        folder_id: &str,
    ) -> Result<bool, StorageError> {
        let mut state = self.state()?;
        if state.folder(environment_id, folder_id).is_none() {
            return Ok(false);
        }
        let in_env: Vec<Folder> = state
            .folders
            .iter()
            .filter(|f| f.environment_id == environment_id)
            .cloned()
            .collect();
        if rules::check_delete(&in_env, folder_id).is_err() {
            return Err(StorageError::ForeignKeyViolation(format!(
                "folder `{folder_id}` has sub-folders"
            )));
        }
        if let Some(flows) = state.flows.get_mut(environment_id) {
            for flow in flows.values_mut() {
                if flow.folder_id.as_deref() == Some(folder_id) {
                    flow.folder_id = None;
                }
            }
        }
        state
            .folders
            .retain(|f| !(f.environment_id == environment_id && f.id == folder_id));
        Ok(true)
    }
}

#[async_trait]
impl FlowRepository for MemoryStore {
    async fn insert(&self, flow: &Flow, first: Option<FlowVersion>) -> Result<(), StorageError> {
        let mut state = self.state()?;
        state.check_filed(flow)?;
        if state
            .flows
            .values()
            .any(|flows| flows.contains_key(flow.id.as_str()))
        {
            return Err(StorageError::UniqueViolation(format!(
                "flow id `{}`",
                flow.id
            )));
        }
        state
            .flows
            .entry(flow.environment_id.clone())
            .or_default()
            .insert(flow.id.clone().into(), flow.clone());
        if let Some(version) = first {
            state
                .versions
                .entry(flow.id.clone().into())
                .or_default()
                .insert(version.version, version);
        }
        Ok(())
    }

    async fn get(&self, environment_id: &str, flow_id: &str) -> Result<Option<Flow>, StorageError> {
        let state = self.state()?;
        Ok(state
            .flows
            .get(environment_id)
            .and_then(|flows| flows.get(flow_id))
            .cloned())
    }

    async fn list(
        &self,
        environment_id: &str,
        filter: &FlowFilter,
        page: &PageRequest,
    ) -> Result<Vec<Flow>, StorageError> {
        let state = self.state()?;
        let Some(flows) = state.flows.get(environment_id) else {
            return Ok(Vec::new());
        };
        let matches = |flow: &Flow| {
            filter
                .name_contains
                .as_ref()
                .is_none_or(|n| flow.name.to_lowercase().contains(n.as_str()))
                && filter.status.is_none_or(|s| flow.status() == s)
                && match &filter.folder {
                    None => true,
                    Some(FolderFilter::In(id)) => flow.folder_id.as_ref() == Some(id),
                    Some(FolderFilter::Uncategorized) => flow.folder_id.is_none(),
                }
        };
        let limit = usize::try_from(page.limit)
            .unwrap_or(usize::MAX)
            .saturating_add(1);
        Ok(flows
            .values()
            .rev()
            .filter(|f| {
                page.after
                    .as_ref()
                    .is_none_or(|after| f.id.as_str() < after.as_str())
            })
            .filter(|f| matches(f))
            .take(limit)
            .cloned()
            .collect())
    }

    async fn get_version(
        &self,
        flow_id: &str,
        version: VersionRef,
    ) -> Result<Option<FlowVersion>, StorageError> {
        let state = self.state()?;
        let Some(versions) = state.versions.get(flow_id) else {
            return Ok(None);
        };
        Ok(match version {
            VersionRef::Latest => versions.values().next_back().cloned(),
            VersionRef::Number(n) => versions.get(&n).cloned(),
        })
    }

    async fn save(
        &self,
        flow: &Flow,
        expected_revision: i64,
        change: VersionChange,
    ) -> Result<(), StorageError> {
        if matches!(change, VersionChange::Cancelling(..)) {
            // Refused before anything changes: a publish's cancel would be lost here.
            return Err(StorageError::Internal(
                "the in-memory store keeps no cancel tasks".into(),
            ));
        }
        let mut state = self.state()?;
        let stored = state
            .flows
            .get(&flow.environment_id)
            .and_then(|flows| flows.get(flow.id.as_str()));
        if stored.is_none_or(|s| s.revision != expected_revision) {
            return Err(StorageError::StaleRevision);
        }
        state.check_filed(flow)?;
        let versions = state.versions.entry(flow.id.clone().into()).or_default();
        match change {
            VersionChange::None => {}
            VersionChange::Insert(version) => {
                if versions.contains_key(&version.version) {
                    return Err(StorageError::UniqueViolation(format!(
                        "version {} of `{}`",
                        version.version, flow.id
                    )));
                }
                versions.insert(version.version, version);
            }
            VersionChange::Update(version) => {
                // As in the databases: an update of a version not stored changes nothing.
                if let Some(stored) = versions.get_mut(&version.version) {
                    *stored = version;
                }
            }
            VersionChange::Delete(number) => {
                versions.remove(&number);
            }
            VersionChange::Cancelling(..) => {}
        }
        let saved = Flow {
            revision: expected_revision.saturating_add(1),
            ..flow.clone()
        };
        state
            .flows
            .entry(flow.environment_id.clone())
            .or_default()
            .insert(flow.id.clone().into(), saved);
        Ok(())
    }
}

#[async_trait]
impl SettingsRepository for MemoryStore {
    async fn get(&self, environment_id: &str) -> Result<EnvironmentSettings, StorageError> {
        Ok(self
            .state()?
            .settings
            .get(environment_id)
            .copied()
            .unwrap_or_default())
    }

    async fn put(
        &self,
        environment_id: &str,
        settings: EnvironmentSettings,
        _at: Timestamp,
    ) -> Result<(), StorageError> {
        self.state()?
            .settings
            .insert(environment_id.to_owned(), settings);
        Ok(())
    }
}
