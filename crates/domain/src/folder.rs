//! Folders: a tree, per environment, that organises Action Flows (docs/api.md, Folders).
//!
//! Rules (pure functions in [`rules`], applied by [`FolderService`]):
//! - a name is 1–255 characters (Unicode scalar values) of letters, digits, hyphen, underscore
//!   and space, where "letter" and "digit" are Unicode's alphabetic and numeric characters; it
//!   must not start or end with a space (so that "Sales" and "Sales " cannot both exist);
//! - names are unique among siblings, by exact match (case and accents matter);
//! - a parent is a folder of the same environment; the tree is at most three levels deep;
//! - folders are renamed, never moved;
//! - a folder with sub-folders cannot be deleted; deleting a folder un-files the flows in it.

use std::sync::Arc;

use async_trait::async_trait;

pub mod rules;

pub use rules::validate_name;

use crate::id::{new_id, IdKind};
use crate::tenancy::{Permission, Principal};
use crate::{Clock, DomainError, Resource, StorageError, Timestamp};

pub const FOLDER_NAME_MAX_CHARS: usize = 255;
/// A root folder is level 1; its children level 2; theirs level 3, the deepest allowed.
pub const FOLDER_MAX_DEPTH: usize = 3;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Folder {
    pub id: String,
    pub name: String,
    pub environment_id: String,
    pub organisation_id: String,
    pub parent_id: Option<String>,
    pub created: Timestamp,
    pub updated: Timestamp,
}

/// Storage of folders. Every method is scoped to one environment: a folder of another
/// environment is invisible.
#[cfg_attr(feature = "mock", mockall::automock)]
#[async_trait]
pub trait FolderRepository: Send + Sync {
    /// Every folder of the environment, in no particular order.
    async fn list(&self, environment_id: &str) -> Result<Vec<Folder>, StorageError>;
    async fn get(
        &self,
        environment_id: &str,
        folder_id: &str,
    ) -> Result<Option<Folder>, StorageError>;
    /// Inserts a folder. A sibling with the same name is a `UniqueViolation`; a parent that no
    /// longer exists is a `ForeignKeyViolation`.
    async fn insert(&self, folder: &Folder) -> Result<(), StorageError>;
    /// Renames a folder. A sibling with the same name is a `UniqueViolation`. Returns the
    /// updated folder, or `None` when it does not exist (any more).
    async fn rename(
        &self,
        environment_id: &str,
        folder_id: &str,
        name: &str,
        updated: Timestamp,
    ) -> Result<Option<Folder>, StorageError>;
    async fn has_children(
        &self,
        environment_id: &str,
        folder_id: &str,
    ) -> Result<bool, StorageError>;
    /// In one transaction: clears the folder reference of every Action Flow filed in the
    /// folder (the flows stay), then deletes the folder. A folder that gained a child
    /// meanwhile is a `ForeignKeyViolation` and nothing changes. Returns false when there was
    /// no such folder.
    async fn delete_and_unfile_flows(
        &self,
        environment_id: &str,
        folder_id: &str,
    ) -> Result<bool, StorageError>;
}

/// A create request, as the caller sent it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CreateFolder {
    pub name: String,
    /// `None` or `Some("")` both mean a root folder.
    pub parent_id: Option<String>,
}

/// A rename request. `parent_id` is `Some` when the caller sent the field at all: folders
/// cannot move, so it must then name the current parent.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RenameFolder {
    pub name: String,
    pub parent_id: Option<Option<String>>,
}

pub struct FolderService {
    repo: Arc<dyn FolderRepository>,
    clock: Arc<dyn Clock>,
}

impl FolderService {
    pub fn new(repo: Arc<dyn FolderRepository>, clock: Arc<dyn Clock>) -> Self {
        Self { repo, clock }
    }

    /// Every folder of the environment, roots and sub-folders together, sorted by name
    /// (case-insensitively, then exactly, then by id, so the order is total and the same on
    /// every database).
    pub async fn list(&self, who: &Principal, env: &str) -> Result<Vec<Folder>, DomainError> {
        who.authorize(env, Permission::FoldersRead)?;
        let mut folders = self.repo.list(env).await?;
        folders.sort_by_cached_key(|f| (f.name.to_lowercase(), f.name.clone(), f.id.clone()));
        Ok(folders)
    }

    pub async fn get(&self, who: &Principal, env: &str, id: &str) -> Result<Folder, DomainError> {
        who.authorize(env, Permission::FoldersRead)?;
        self.repo
            .get(env, id)
            .await?
            .ok_or(DomainError::NotFound(Resource::Folder))
    }

    pub async fn create(
        &self,
        who: &Principal,
        env: &str,
        request: CreateFolder,
    ) -> Result<Folder, DomainError> {
        who.authorize(env, Permission::FoldersCreate)?;
        let mut errors = validate_name("name", &request.name);
        let parent_id = request.parent_id.filter(|p| !p.is_empty());
        if let Some(parent_id) = &parent_id {
            let level = self.depth_of(env, parent_id).await?;
            errors.extend(rules::parent_problem(parent_id, level));
        }
        if !errors.is_empty() {
            return Err(DomainError::Validation(errors));
        }
        let now = self.clock.now();
        let folder = Folder {
            id: new_id(IdKind::Folder),
            name: request.name,
            environment_id: env.to_owned(),
            organisation_id: who.organisation_id.clone(),
            parent_id,
            created: now,
            updated: now,
        };
        match self.repo.insert(&folder).await {
            Ok(()) => Ok(folder),
            Err(StorageError::UniqueViolation(_)) => Err(rules::name_taken(&folder.name)),
            // The parent was deleted between our check and the insert.
            Err(StorageError::ForeignKeyViolation(_)) => Err(DomainError::invalid(
                "parentId",
                "is not a folder of this environment (it was just deleted)",
            )),
            Err(e) => Err(e.into()),
        }
    }

    pub async fn rename(
        &self,
        who: &Principal,
        env: &str,
        id: &str,
        request: RenameFolder,
    ) -> Result<Folder, DomainError> {
        who.authorize(env, Permission::FoldersUpdate)?;
        let current = self
            .repo
            .get(env, id)
            .await?
            .ok_or(DomainError::NotFound(Resource::Folder))?;
        let errors = rules::rename_problems(&current, &request);
        if !errors.is_empty() {
            return Err(DomainError::Validation(errors));
        }
        if request.name == current.name {
            return Ok(current);
        }
        match self
            .repo
            .rename(env, id, &request.name, self.clock.now())
            .await
        {
            Ok(Some(folder)) => Ok(folder),
            Ok(None) => Err(DomainError::NotFound(Resource::Folder)),
            Err(StorageError::UniqueViolation(_)) => Err(rules::name_taken(&request.name)),
            Err(e) => Err(e.into()),
        }
    }

    pub async fn delete(&self, who: &Principal, env: &str, id: &str) -> Result<(), DomainError> {
        who.authorize(env, Permission::FoldersDelete)?;
        if self.repo.get(env, id).await?.is_none() {
            return Err(DomainError::NotFound(Resource::Folder));
        }
        if self.repo.has_children(env, id).await? {
            return Err(rules::has_sub_folders());
        }
        match self.repo.delete_and_unfile_flows(env, id).await {
            Ok(true) => Ok(()),
            Ok(false) => Err(DomainError::NotFound(Resource::Folder)),
            // A sub-folder was created between our check and the delete.
            Err(StorageError::ForeignKeyViolation(_)) => Err(rules::has_sub_folders()),
            Err(e) => Err(e.into()),
        }
    }

    /// The level of a folder (1 for a root), or `None` when it is not in the environment.
    async fn depth_of(&self, env: &str, folder_id: &str) -> Result<Option<usize>, DomainError> {
        let mut depth = 0;
        let mut next = Some(folder_id.to_owned());
        while let Some(id) = next {
            let Some(folder) = self.repo.get(env, &id).await? else {
                // A dangling ancestor cannot exist (foreign keys); the first lookup can miss.
                return Ok((depth > 0).then_some(depth));
            };
            depth += 1;
            if depth > FOLDER_MAX_DEPTH {
                break;
            }
            next = folder.parent_id;
        }
        Ok(Some(depth))
    }
}

#[cfg(test)]
mod tests;
