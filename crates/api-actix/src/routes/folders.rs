//! Folders (spec 4.1). Fine-grained keys only: `workbench_folders:read|create|update|delete`.

use actix_web::web;
use domain::folder::{CreateFolder, RenameFolder};
use domain::id::{EnvironmentId, FolderId};
use domain::{Folder, Permission};
use serde::Serialize;
use utoipa::ToSchema;

use super::shape::{created, listed, no_content, ok, Body, Call, Reply};
use super::timestamp;
use crate::body::Fields;
use crate::problem::Problem;

/// A folder of Action Flows.
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct FolderDto {
    #[schema(example = "fld_01jd3m5y6q8k9r2t4v6w8x0z1a")]
    pub id: String,
    #[schema(example = "Onboarding")]
    pub name: String,
    pub environment_id: String,
    pub organisation_id: String,
    /// Null for a root folder.
    pub parent_id: Option<String>,
    #[schema(format = DateTime, example = "2026-11-22T10:00:00.000Z")]
    pub created: String,
    #[schema(format = DateTime, example = "2026-11-22T10:00:00.000Z")]
    pub updated: String,
}

impl From<Folder> for FolderDto {
    fn from(f: Folder) -> Self {
        FolderDto {
            created: timestamp(&f.created),
            updated: timestamp(&f.updated),
            id: f.id.into(),
            name: f.name,
            environment_id: f.environment_id,
            organisation_id: f.organisation_id,
            parent_id: f.parent_id,
        }
    }
}

#[derive(Serialize, ToSchema)]
pub struct FolderResponse {
    pub data: FolderDto,
}

#[derive(Serialize, ToSchema)]
pub struct FolderListResponse {
    pub data: Vec<FolderDto>,
}

/// The answer showing `folder`.
fn found(folder: Folder) -> FolderResponse {
    FolderResponse {
        data: folder.into(),
    }
}

/// List every folder of the environment (roots and sub-folders), sorted by name.
#[utoipa::path(
    get, path = "/v1/{environmentId}/workbench-folder", tag = "folders",
        operation_id = "listFolders",
    params(("environmentId" = String, Path, description = "Environment id")),
    responses(
        (status = 200, description = "Every folder, sorted by name", body = FolderListResponse),
    ),
    security(("bearer" = ["workbench_folders:read"]))
)]
pub async fn list(call: Call<EnvironmentId>) -> Reply {
    let folders = call.state.folders.list(&call.caller, &call.path).await?;
    ok(FolderListResponse {
        data: listed(folders),
    })
}

/// Create a folder, at the root or under a parent (at most three levels deep).
#[utoipa::path(
    post, path = "/v1/{environmentId}/workbench-folder", tag = "folders",
        operation_id = "createFolder",
    params(("environmentId" = String, Path, description = "Environment id")),
    request_body = crate::schemas::CreateFolderRequest,
    responses(
        (status = 201, description = "The folder", body = FolderResponse,
            headers(("Location" = String, description = "Address of the new folder"))),
        (status = 400,
            description = "Invalid name or parentId (`validation_failed`), or malformed JSON \
                (`malformed_json`)", body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "A sibling has this name (`folder_name_taken`)",
            body = Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = ["workbench_folders:create"]))
)]
pub async fn create(call: Call<EnvironmentId>, body: Body) -> Reply {
    let object = call.read(Permission::FoldersCreate, &body)?;
    let mut fields = Fields::new(&object);
    let name = fields.string("name");
    let parent_id = fields.nullable_id("parentId").flatten();
    fields.finish()?;
    let request = CreateFolder {
        name: name.unwrap_or_default(),
        parent_id,
    };
    let folders = &call.state.folders;
    let folder = folders.create(&call.caller, &call.path, request).await?;
    let location = format!(
        "/v1/{}/workbench-folder/{}",
        folder.environment_id, folder.id
    );
    created(location, found(folder))
}

/// Get one folder.
#[utoipa::path(
    get, path = "/v1/{environmentId}/workbench-folder/{folderId}", tag = "folders",
        operation_id = "getFolder",
    params(("environmentId" = String, Path, description = "Environment id"), ("folderId" = String,
        Path, description = "Folder id")),
    responses(
        (status = 200, description = "The folder", body = FolderResponse),
        (status = 404, response = crate::problem::NotFound),
    ),
    security(("bearer" = ["workbench_folders:read"]))
)]
pub async fn get(call: Call<(EnvironmentId, FolderId)>) -> Reply {
    let (env, id) = &call.path;
    ok(found(call.state.folders.get(&call.caller, env, id).await?))
}

/// Rename a folder. Folders cannot move: a `parentId` other than the current one is refused.
#[utoipa::path(
    put, path = "/v1/{environmentId}/workbench-folder/{folderId}", tag = "folders",
        operation_id = "renameFolder",
    params(("environmentId" = String, Path, description = "Environment id"), ("folderId" = String,
        Path, description = "Folder id")),
    request_body = crate::schemas::RenameFolderRequest,
    responses(
        (status = 200, description = "The renamed folder", body = FolderResponse),
        (status = 400,
            description = "Invalid name (`validation_failed`), or malformed JSON \
                (`malformed_json`)", body = Problem, content_type = "application/problem+json"),
        (status = 404, response = crate::problem::NotFound),
        (status = 409, description = "A sibling has this name (`folder_name_taken`)",
            body = Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = ["workbench_folders:update"]))
)]
pub async fn rename(call: Call<(EnvironmentId, FolderId)>, body: Body) -> Reply {
    let object = call.read(Permission::FoldersUpdate, &body)?;
    let mut fields = Fields::new(&object);
    let name = fields.string("name");
    let parent_id = fields.nullable_string("parentId");
    fields.finish()?;
    let request = RenameFolder {
        name: name.unwrap_or_default(),
        parent_id,
    };
    let (env, id) = &call.path;
    let folders = &call.state.folders;
    ok(found(folders.rename(&call.caller, env, id, request).await?))
}

/// Delete a folder without sub-folders; Action Flows filed in it become uncategorised.
#[utoipa::path(
    delete, path = "/v1/{environmentId}/workbench-folder/{folderId}", tag = "folders",
        operation_id = "deleteFolder",
    params(("environmentId" = String, Path, description = "Environment id"), ("folderId" = String,
        Path, description = "Folder id")),
    responses(
        (status = 204, description = "Deleted"),
        (status = 404, response = crate::problem::NotFound),
        (status = 409,
            description = "The folder has sub-folders (`folder_has_children`): delete them first",
                body = Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = ["workbench_folders:delete"]))
)]
pub async fn delete(call: Call<(EnvironmentId, FolderId)>) -> Reply {
    let (env, id) = &call.path;
    call.state.folders.delete(&call.caller, env, id).await?;
    no_content()
}

pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.service(
        web::resource("/v1/{environmentId}/workbench-folder")
            .route(web::get().to(list))
            .route(web::post().to(create)),
    )
    .service(
        web::resource("/v1/{environmentId}/workbench-folder/{folderId}")
            .route(web::get().to(get))
            .route(web::put().to(rename))
            .route(web::delete().to(delete)),
    );
}
