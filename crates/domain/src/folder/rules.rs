//! The folder rules as pure functions over the folders given: names, depth, uniqueness among
//! siblings, what a rename may change and what a delete needs (docs/api.md, Folders).
//!
//! [`FolderService`](super::FolderService) decides with [`validate_name`], [`level_in`] (over
//! the ancestors it reads), [`parent_problem`], [`rename_problems`] and the refusals
//! [`name_taken`] and [`has_sub_folders`]; sibling uniqueness and sub-folders it leaves to its
//! store, which decides them atomically with the write. [`check_create`], [`name_is_free`]
//! and [`check_delete`] apply the same rules to a snapshot of folders: another service's own,
//! or the in-memory store's.
//!
//! ```
//! use workbench_domain::chrono::Utc;
//! use workbench_domain::folder::rules;
//! use workbench_domain::folder::{CreateFolder, Folder};
//!
//! let folder = |id: &str, name: &str, parent: Option<&str>| Folder {
//!     id: id.into(),
//!     name: name.into(),
//!     environment_id: "env_1".into(),
//!     organisation_id: "org_1".into(),
//!     parent_id: parent.map(Into::into),
//!     created: Utc::now(),
//!     updated: Utc::now(),
//! };
//! let folders = vec![
//!     folder("fld_a", "Onboarding", None),
//!     folder("fld_b", "Emails", Some("fld_a")),
//!     folder("fld_c", "Week 1", Some("fld_b")),
//! ];
//! let create = |name: &str, parent: Option<&str>| CreateFolder {
//!     name: name.into(),
//!     parent_id: parent.map(Into::into),
//! };
//!
//! assert_eq!(rules::level_in(&folders, "fld_c"), Some(3));
//! // A fresh name under an existing parent is accepted; the parent id comes back.
//! assert_eq!(rules::check_create(&folders, &create("Push", Some("fld_a"))).unwrap(),
//!            Some("fld_a".to_owned()));
//! // Names are unique among siblings only, by exact match.
//! assert!(rules::check_create(&folders, &create("Emails", Some("fld_a"))).is_err());
//! assert!(rules::check_create(&folders, &create("emails", Some("fld_a"))).is_ok());
//! assert!(rules::check_create(&folders, &create("Emails", None)).is_ok());
//! // The tree is three levels deep at most, and names have a shape.
//! assert!(rules::check_create(&folders, &create("Day 1", Some("fld_c"))).is_err());
//! assert_eq!(rules::validate_name("name", " Sales").len(), 1);
//! // A folder with sub-folders cannot be deleted.
//! assert!(rules::check_delete(&folders, "fld_b").is_err());
//! assert!(rules::check_delete(&folders, "fld_c").is_ok());
//! ```

use super::{CreateFolder, Folder, RenameFolder, FOLDER_MAX_DEPTH, FOLDER_NAME_MAX_CHARS};
use crate::{ConflictKind, DomainError, FieldError};

/// Checks a folder name: 1–255 characters (Unicode scalar values) of letters, digits,
/// hyphens, underscores and spaces ("letter" and "digit" as Unicode's alphabetic and numeric
/// characters), not starting or ending with a space. Every problem is reported, each under
/// `field`.
pub fn validate_name(field: &str, name: &str) -> Vec<FieldError> {
    let mut errors = Vec::new();
    let length = name.chars().count();
    if length == 0 {
        errors.push(FieldError::new(field, "must not be empty"));
        return errors;
    }
    if length > FOLDER_NAME_MAX_CHARS {
        errors.push(FieldError::new(
            field,
            format!("must be at most {FOLDER_NAME_MAX_CHARS} characters (got {length})"),
        ));
    }
    let mut bad: Vec<char> = name
        .chars()
        .filter(|c| !(c.is_alphanumeric() || matches!(c, '-' | '_' | ' ')))
        .collect();
    if !bad.is_empty() {
        bad.dedup();
        let shown: String = bad.iter().take(10).flat_map(|c| c.escape_debug()).collect();
        errors.push(FieldError::new(
            field,
            format!(
                "may contain only letters, digits, hyphens, underscores and spaces (found \
                    `{shown}`)"
            ),
        ));
    }
    if name.starts_with(' ') || name.ends_with(' ') {
        errors.push(FieldError::new(field, "must not start or end with a space"));
    }
    errors
}

/// The level of `folder_id` among `folders` (1 for a root), or `None` when it is not one of
/// them. An ancestor missing from `folders` ends the count (as a root would). Counting stops
/// past [`FOLDER_MAX_DEPTH`], so a cycle in bad data cannot loop.
pub fn level_in(folders: &[Folder], folder_id: &str) -> Option<usize> {
    let mut level = 0;
    let mut next = Some(folder_id);
    while let Some(id) = next {
        let Some(folder) = folders.iter().find(|f| f.id == id) else {
            return (level > 0).then_some(level);
        };
        level += 1;
        if level > FOLDER_MAX_DEPTH {
            break;
        }
        next = folder.parent_id.as_deref();
    }
    Some(level)
}

/// What is wrong with filing a new folder under `parent_id`, given the parent's level
/// (`None`: it is not a folder of the environment): reported under `parentId`.
pub fn parent_problem(parent_id: &str, parent_level: Option<usize>) -> Option<FieldError> {
    match parent_level {
        None => Some(FieldError::new(
            "parentId",
            format!("`{parent_id}` is not a folder of this environment"),
        )),
        Some(level) if level >= FOLDER_MAX_DEPTH => Some(FieldError::new(
            "parentId",
            format!(
                "folders nest at most {FOLDER_MAX_DEPTH} levels deep; this parent is at level \
                    {level}"
            ),
        )),
        Some(_) => None,
    }
}

/// Whether `name` is free among `siblings` (the folders with the same parent), by exact match
/// (case and accents matter). `renamed` is the folder being renamed, which may keep its name.
pub fn name_is_free<'a>(
    name: &str,
    siblings: impl IntoIterator<Item = &'a Folder>,
    renamed: Option<&str>,
) -> bool {
    siblings
        .into_iter()
        .all(|f| f.name != name || Some(f.id.as_str()) == renamed)
}

/// All the rules for a new folder among the environment's `folders`: its name, its parent
/// (`None` or `""` for a root), the depth, and a name free among its siblings. Returns the
/// parent id to store.
pub fn check_create(
    folders: &[Folder],
    request: &CreateFolder,
) -> Result<Option<String>, DomainError> {
    let mut errors = validate_name("name", &request.name);
    let parent_id = request.parent_id.clone().filter(|p| !p.is_empty());
    if let Some(parent) = &parent_id {
        errors.extend(parent_problem(parent, level_in(folders, parent)));
    }
    if !errors.is_empty() {
        return Err(DomainError::Validation(errors));
    }
    let siblings = folders.iter().filter(|f| f.parent_id == parent_id);
    if !name_is_free(&request.name, siblings, None) {
        return Err(name_taken(&request.name));
    }
    Ok(parent_id)
}

/// What is wrong with a rename of `current`: the name's problems, and a `parentId` other
/// than the current parent (folders are renamed, never moved).
pub fn rename_problems(current: &Folder, request: &RenameFolder) -> Vec<FieldError> {
    let mut errors = validate_name("name", &request.name);
    if let Some(requested) = &request.parent_id {
        if requested.clone().filter(|p| !p.is_empty()) != current.parent_id {
            errors.push(FieldError::new(
                "parentId",
                "folders cannot be moved; delete the folder and create it under the new parent",
            ));
        }
    }
    errors
}

/// Whether the folder `folder_id` may be deleted from `folders`: not while it has
/// sub-folders. (Deleting it un-files the flows in it; they stay.)
pub fn check_delete(folders: &[Folder], folder_id: &str) -> Result<(), DomainError> {
    if folders
        .iter()
        .any(|f| f.parent_id.as_deref() == Some(folder_id))
    {
        Err(has_sub_folders())
    } else {
        Ok(())
    }
}

/// The refusal of a name a sibling has (409 `folder_name_taken`).
pub fn name_taken(name: &str) -> DomainError {
    DomainError::conflict(
        ConflictKind::FolderNameTaken,
        format!("a folder named `{name}` already exists under the same parent"),
    )
}

/// The refusal to delete a folder with sub-folders (409 `folder_has_children`).
pub fn has_sub_folders() -> DomainError {
    DomainError::conflict(
        ConflictKind::FolderHasChildren,
        "the folder has sub-folders; delete them first",
    )
}
