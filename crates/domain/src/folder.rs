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

use crate::id::{EnvironmentId, FolderId};
use std::sync::Arc;

use async_trait::async_trait;

pub mod rules;

pub use rules::validate_name;

use crate::id::{new_id, IdKind};
use crate::tenancy::{Permission, Principal};
use crate::{Clock, DomainError, Resource, StorageError, Timestamp};

/// The longest folder name, in characters (Unicode scalar values).
pub const FOLDER_NAME_MAX_CHARS: usize = 255;
/// A root folder is level 1; its children level 2; theirs level 3, the deepest allowed.
pub const FOLDER_MAX_DEPTH: usize = 3;

/// A folder of an environment, in which Action Flows are filed (docs/api.md, Folders).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Folder {
    /// `fld_…`, given at creation.
    pub id: FolderId,
    /// Unique among its siblings by exact match; see [`validate_name`] for its shape.
    pub name: String,
    /// The environment it belongs to; every read and change is scoped to it.
    pub environment_id: String,
    /// The organisation of that environment.
    pub organisation_id: String,
    /// The folder it is in, of the same environment; `None` for a root folder. It never
    /// changes: folders are renamed, never moved.
    pub parent_id: Option<String>,
    /// When it was created.
    pub created: Timestamp,
    /// When it was last renamed (its creation time until then).
    pub updated: Timestamp,
}

/// Storage of folders, the port behind [`FolderService`]. Every method is scoped to one
/// environment: a folder of another environment is invisible, and is not a valid parent.
///
/// The store settles what a race could break, atomically: names unique among siblings
/// (roots are siblings too), parents of the same environment, no delete of a folder with
/// sub-folders. The executable cases of the `contract` module (feature `contract`) hold
/// implementations to all of this; the SQLite, PostgreSQL and in-memory stores pass them.
#[cfg_attr(feature = "mock", mockall::automock)]
#[async_trait]
pub trait FolderRepository: Send + Sync {
    /// Every folder of the environment, in no particular order.
    async fn list(&self, environment_id: &str) -> Result<Vec<Folder>, StorageError>;
    /// The folder with this id in the environment; `None` when there is none (a folder of
    /// another environment included).
    async fn get(
        &self,
        environment_id: &str,
        folder_id: &str,
    ) -> Result<Option<Folder>, StorageError>;
    /// Inserts a folder. A sibling with the same name, by exact match (case and accents
    /// matter), is a [`StorageError::UniqueViolation`]; a parent that is not a folder of the
    /// folder's environment (it no longer exists, or is another environment's) is a
    /// [`StorageError::ForeignKeyViolation`]. Either way nothing is inserted.
    async fn insert(&self, folder: &Folder) -> Result<(), StorageError>;
    /// Renames a folder, changing only its name and `updated`. A sibling with the same name
    /// is a [`StorageError::UniqueViolation`]. Returns the updated folder, or `None` when it
    /// does not exist (any more) in the environment.
    async fn rename(
        &self,
        environment_id: &str,
        folder_id: &str,
        name: &str,
        updated: Timestamp,
    ) -> Result<Option<Folder>, StorageError>;
    /// Whether the folder has sub-folders in the environment; false for a folder the
    /// environment does not have.
    async fn has_children(
        &self,
        environment_id: &str,
        folder_id: &str,
    ) -> Result<bool, StorageError>;
    /// In one transaction: clears the folder reference of every Action Flow filed in the
    /// folder (the flows stay), then deletes the folder. A folder that gained a child
    /// meanwhile is a [`StorageError::ForeignKeyViolation`] and nothing changes. Returns false
    /// when there was no such folder in the environment.
    async fn delete_and_unfile_flows(
        &self,
        environment_id: &str,
        folder_id: &str,
    ) -> Result<bool, StorageError>;
}

/// A create request, as the caller sent it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CreateFolder {
    /// The new folder's name ([`validate_name`]).
    pub name: String,
    /// `None` or `Some("")` both mean a root folder.
    pub parent_id: Option<String>,
}

/// A rename request. `parent_id` is `Some` when the caller sent the field at all: folders
/// cannot move, so it must then name the current parent.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RenameFolder {
    /// The new name ([`validate_name`]).
    pub name: String,
    /// `parentId` as sent: `None` when absent; `Some(None)` or `Some(Some(""))` for a root.
    pub parent_id: Option<Option<String>>,
}

/// The folder use cases: list, get, create, rename and delete (docs/api.md, Folders).
///
/// Every method first checks that the caller may use the environment (else
/// [`DomainError::Unauthenticated`]) and holds the permission it names (else
/// [`DomainError::Forbidden`]). The service checks the rules first, for a clear answer; the
/// store's constraints settle races. A failure of storage that a method does not translate
/// is a [`DomainError::Storage`].
///
/// ```
/// use std::sync::Arc;
/// use workbench_domain::folder::{CreateFolder, RenameFolder};
/// use workbench_domain::memory::MemoryStore;
/// use workbench_domain::prelude::*;
///
/// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
/// let folders = FolderService::new(Arc::new(MemoryStore::new()), Arc::new(SystemClock));
/// let who = Principal::trusted("content-team", "org_1", &["env_1"]);
/// let create = |name: &str, parent: Option<&str>| CreateFolder {
///     name: name.into(),
///     parent_id: parent.map(Into::into),
/// };
///
/// let top = folders.create(&who, &"env_1".into(), create("Onboarding", None)).await.unwrap();
/// let mid = folders.create(&who, &"env_1".into(), create("Emails", Some(&top.id))).await.unwrap();
/// let low = folders.create(&who, &"env_1".into(), create("Week 1", Some(&mid.id))).await.unwrap();
/// // The tree is three levels deep at most: a fourth is refused on `parentId`.
/// let fourth = folders.create(&who, &"env_1".into(), create("Day 1", Some(&low.id))).await;
/// let Err(DomainError::Validation(problems)) = fourth else { panic!("{fourth:?}") };
/// assert_eq!(problems[0].field, "parentId");
///
/// // A rename changes the name only; a folder cannot move to another parent.
/// let rename = RenameFolder { name: "Welcome".into(), parent_id: None };
/// let renamed = folders.rename(&who, &"env_1".into(), &top.id, rename).await.unwrap();
/// assert_eq!((renamed.name.as_str(), renamed.created), ("Welcome", top.created));
/// let to_root = RenameFolder { name: "Emails".into(), parent_id: Some(None) };
/// let moved = folders.rename(&who, &"env_1".into(), &mid.id, to_root).await;
/// assert!(matches!(moved, Err(DomainError::Validation(_))));
///
/// // A folder with sub-folders is deleted only once they are.
/// let early = folders.delete(&who, &"env_1".into(), &mid.id).await;
/// assert!(matches!(
///     early,
///     Err(DomainError::Conflict { kind: ConflictKind::FolderHasChildren, .. })
/// ));
/// folders.delete(&who, &"env_1".into(), &low.id).await.unwrap();
/// folders.delete(&who, &"env_1".into(), &mid.id).await.unwrap();
/// assert_eq!(folders.list(&who, &"env_1".into()).await.unwrap(), vec![renamed]);
/// # });
/// ```
pub struct FolderService {
    repo: Arc<dyn FolderRepository>,
    clock: Arc<dyn Clock>,
}

impl FolderService {
    /// A service over the folder store; `clock` stamps `created` and `updated`.
    pub fn new(repo: Arc<dyn FolderRepository>, clock: Arc<dyn Clock>) -> Self {
        Self { repo, clock }
    }

    /// Every folder of the environment, roots and sub-folders together, sorted by name
    /// (case-insensitively, then exactly, then by id, so the order is total and the same on
    /// every database). Needs [`Permission::FoldersRead`].
    pub async fn list(
        &self,
        who: &Principal,
        env: &EnvironmentId,
    ) -> Result<Vec<Folder>, DomainError> {
        who.authorize(env, Permission::FoldersRead)?;
        let mut folders = self.repo.list(env).await?;
        folders.sort_by_cached_key(|f| (f.name.to_lowercase(), f.name.clone(), f.id.clone()));
        Ok(folders)
    }

    /// The folder `id` of the environment. Needs [`Permission::FoldersRead`]; fails with
    /// [`DomainError::NotFound`] when the environment has no such folder.
    pub async fn get(
        &self,
        who: &Principal,
        env: &EnvironmentId,
        id: &FolderId,
    ) -> Result<Folder, DomainError> {
        who.authorize(env, Permission::FoldersRead)?;
        self.repo
            .get(env, id)
            .await?
            .ok_or(DomainError::NotFound(Resource::Folder))
    }

    /// Creates a folder with a new `fld_…` id, under `request.parent_id` (none, or `""`, for
    /// a root), and answers it.
    ///
    /// Needs [`Permission::FoldersCreate`]. Then every problem of the name
    /// ([`validate_name`]) and of the parent (not a folder of the environment, or already at
    /// level [`FOLDER_MAX_DEPTH`]) is reported at once as [`DomainError::Validation`]. A
    /// sibling with the name is a [`DomainError::Conflict`] of kind
    /// [`ConflictKind::FolderNameTaken`](crate::ConflictKind::FolderNameTaken); a parent
    /// deleted meanwhile, a [`DomainError::Validation`] on `parentId`.
    pub async fn create(
        &self,
        who: &Principal,
        env: &EnvironmentId,
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
            id: new_id(IdKind::Folder).into(),
            name: request.name,
            environment_id: env.as_str().to_owned(),
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

    /// Renames the folder `id` and answers it. Renaming to the current name changes nothing,
    /// not even `updated`.
    ///
    /// Needs [`Permission::FoldersUpdate`]. Then, in order: [`DomainError::NotFound`] when
    /// the environment has no such folder; [`DomainError::Validation`] with every problem of
    /// the name ([`validate_name`]) and a `parentId` other than the current parent (folders
    /// cannot move); a [`DomainError::Conflict`] of kind
    /// [`ConflictKind::FolderNameTaken`](crate::ConflictKind::FolderNameTaken) when a sibling
    /// has the name; [`DomainError::NotFound`] when the folder was deleted meanwhile.
    pub async fn rename(
        &self,
        who: &Principal,
        env: &EnvironmentId,
        id: &FolderId,
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

    /// Deletes the folder `id` and, in the same transaction, un-files the Action Flows filed
    /// in it (the flows stay).
    ///
    /// Needs [`Permission::FoldersDelete`]. Then, in order: [`DomainError::NotFound`] when
    /// the environment has no such folder; a [`DomainError::Conflict`] of kind
    /// [`ConflictKind::FolderHasChildren`](crate::ConflictKind::FolderHasChildren) while it
    /// has sub-folders (also when one was created meanwhile); [`DomainError::NotFound`] when
    /// it was deleted meanwhile.
    pub async fn delete(
        &self,
        who: &Principal,
        env: &EnvironmentId,
        id: &FolderId,
    ) -> Result<(), DomainError> {
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

    /// The level of a folder (1 for a root), or `None` when it is not in the environment:
    /// its ancestors read one by one (at most one more than the deepest level), then counted
    /// by [`rules::level_in`].
    async fn depth_of(&self, env: &str, folder_id: &str) -> Result<Option<usize>, DomainError> {
        let mut chain = Vec::new();
        let mut next = Some(folder_id.to_owned());
        while let Some(id) = next {
            if chain.len() > FOLDER_MAX_DEPTH {
                break;
            }
            // A dangling ancestor cannot exist (foreign keys); the first lookup can miss.
            let Some(folder) = self.repo.get(env, &id).await? else {
                break;
            };
            next = folder.parent_id.clone();
            chain.push(folder);
        }
        Ok(rules::level_in(&chain, folder_id))
    }
}

#[cfg(test)]
mod tests;
