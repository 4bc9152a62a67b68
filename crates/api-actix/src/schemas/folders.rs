//! The bodies that create and rename folders.

use serde_json::{json, Value};

/// A folder name by `domain::folder::rules::validate_name`.
fn folder_name() -> Value {
    json!({"type": "string", "minLength": 1, "maxLength": domain::folder::FOLDER_NAME_MAX_CHARS,
           "pattern": "^[\\w-]([\\w -]*[\\w-])?$",
           "description": "Letters and digits of any script, hyphens, underscores and spaces; \
               not starting or ending with a space; unique among the folders of its parent"})
}

/// The folders' bodies, by component name.
pub(super) fn bodies() -> [(&'static str, Value); 2] {
    [
        (
            "CreateFolderRequest",
            json!({
                "type": "object", "required": ["name"],
                "properties": {"name": folder_name(),
                    "parentId": {"type": ["string", "null"],
                        "description":
                            "The parent folder; omitted, null or \"\" for a root folder"}},
                "example": {"name": "Q4 campaigns", "parentId": null},
            }),
        ),
        (
            "RenameFolderRequest",
            json!({
                "type": "object", "required": ["name"],
                "properties": {"name": folder_name(),
                    "parentId": {"type": ["string", "null"],
                        "description": "The current parent, if sent: folders cannot be moved"}},
                "example": {"name": "Q1 campaigns"},
            }),
        ),
    ]
}
