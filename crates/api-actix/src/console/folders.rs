//! The folder tree: create, rename and delete, with the API's messages in place.

use actix_web::http::StatusCode;
use actix_web::{web, HttpResponse};
use domain::folder::{CreateFolder, RenameFolder};
use domain::id::{EnvironmentId, FolderId};
use domain::{DomainError, Folder, Permission};
use maud::{html, Markup};
use serde::Deserialize;

use super::page::{self, Problems};
use super::session::{Posted, Refusal, Session};
use super::shell::{respond, see_other, ROOT};
use super::{framed, outcome};
use crate::AppState;

pub(super) fn configure(cfg: &mut web::ServiceConfig) {
    cfg.route("/console/{env}/folders", web::get().to(show))
        .route("/console/{env}/folders", web::post().to(create))
        .route("/console/{env}/folders/{id}/rename", web::post().to(rename))
        .route("/console/{env}/folders/{id}/delete", web::post().to(delete));
}

async fn show(
    state: web::Data<AppState>,
    session: Session,
    env: web::Path<EnvironmentId>,
    query: web::Query<page::Done>,
) -> Result<HttpResponse, Refusal> {
    let notice = match query.done.as_deref() {
        Some("created") => Some("The folder was created."),
        Some("renamed") => Some("The folder was renamed."),
        Some("deleted") => Some("The folder was deleted."),
        _ => None,
    };
    render(&state, &session, &env, StatusCode::OK, notice, None).await
}

/// Which form a problem belongs to, so that its messages show there.
enum Failed<'a> {
    Create(&'a CreateForm, Problems),
    Rename(&'a str, &'a str, Problems),
    Delete(&'a str, Problems),
}

async fn render(
    state: &AppState,
    session: &Session,
    env: &EnvironmentId,
    status: StatusCode,
    notice: Option<&str>,
    failed_change: Option<Failed<'_>>,
) -> Result<HttpResponse, Refusal> {
    let folders = match state.folders.list(&session.principal, env).await {
        Ok(folders) => folders,
        Err(err) => return page::unreadable(err, "Folders"),
    };
    let may_create = session.may(env, Permission::FoldersCreate);
    let (create_values, create_problems) = match &failed_change {
        Some(Failed::Create(form, p)) => (Some(*form), Some(p)),
        _ => (None, None),
    };
    let parent_errors = create_problems
        .map(|p| p.about("parentId", false))
        .unwrap_or_default();
    let content = html! {
        (page::notice(notice))
        @if let Some(Failed::Delete(_, p)) = &failed_change {
            div #delete-problem { (page::alert(Some(p), &[])) }
        }
        section.card aria-labelledby="tree-title" {
            h2 #tree-title { "The tree" }
            @if folders.is_empty() {
                p.muted { "No folder yet." }
            } @else {
                ul.tree { (branch(&folders, None, session, env, failed_change.as_ref())) }
            }
        }
        @if may_create {
            section.card aria-labelledby="create-title" {
                h2 #create-title { "New folder" }
                (page::alert(create_problems, &["name", "parentId"]))
                form method="post" action={ (ROOT) "/" (env) "/folders" } {
                    (page::csrf(session))
                    div.inline {
                        (page::text_field("folder-name", "Name", "name",
                            create_values.map_or("", |f| f.name.as_str()), "name", create_problems))
                        div.field {
                            label for="folder-parent" { "In" }
                            select #folder-parent name="parent_id"
                                aria-invalid=[(!parent_errors.is_empty()).then_some("true")]
                                aria-describedby=[(!parent_errors.is_empty())
                                    .then_some("folder-parent-errors")] {
                                option value="" { "(top level)" }
                                @for f in &folders {
                                    option value=(f.id)
                                        selected[create_values.is_some_and(|c| c.parent_id == f.id
                                            .as_str())] { (path_of(&folders, f)) }
                                }
                            }
                            (page::field_errors("folder-parent-errors", &parent_errors))
                        }
                        button type="submit" { "Create folder" }
                    }
                }
            }
        }
    };
    let body = framed(state, session, env, "folders", "Folders", content).await?;
    Ok(respond(status, body))
}

/// A folder's name with its parents', for choosing a parent.
fn path_of(folders: &[Folder], folder: &Folder) -> String {
    let mut names = vec![folder.name.as_str()];
    let mut parent = folder.parent_id.as_deref();
    // The domain bounds the depth; the walk is bounded too, should storage hold a cycle.
    for _ in 0..16 {
        let Some(p) = parent.and_then(|id| folders.iter().find(|f| f.id.as_str() == id)) else {
            break;
        };
        names.push(p.name.as_str());
        parent = p.parent_id.as_deref();
    }
    names.reverse();
    names.join(" / ")
}

fn branch(
    folders: &[Folder],
    parent: Option<&str>,
    session: &Session,
    env: &str,
    failed_change: Option<&Failed<'_>>,
) -> Markup {
    let may_rename = session.may(env, Permission::FoldersUpdate);
    let may_delete = session.may(env, Permission::FoldersDelete);
    html! {
        @for f in folders.iter().filter(|f| f.parent_id.as_deref() == parent) {
            li {
                @let problems = match failed_change {
                    Some(Failed::Rename(id, _, p)) if *id == f.id.as_str() => Some(p),
                    _ => None,
                };
                @let typed = match failed_change {
                    Some(Failed::Rename(id, typed, _)) if *id == f.id.as_str() => *typed,
                    _ => f.name.as_str(),
                };
                @let deleting = matches!(failed_change, Some(Failed::Delete(id,
                    _)) if *id == f.id.as_str());
                (page::alert(problems, &["name"]))
                div.actions {
                    strong { (f.name) }
                    a href={ (ROOT) "/" (env) "/folders/" (f.id) "/insights" }
                        aria-label={ "Insights of " (f.name) } { "Insights" }
                    @if may_rename {
                        form method="post" action={ (ROOT) "/" (env) "/folders/" (f.id) "/rename" }
                            {
                            (page::csrf(session))
                            div.inline {
                                (page::text_field(&format!("rename-{}", f.id),
                                    &format!("New name for {}", f.name),
                                    "name", typed, "name", problems))
                                button.secondary type="submit" { "Rename" }
                            }
                        }
                    }
                    @if may_delete {
                        form method="post" action={ (ROOT) "/" (env) "/folders/" (f.id) "/delete" }
                            {
                            (page::csrf(session))
                            button.danger type="submit" aria-label={ "Delete " (f.name) }
                                aria-describedby=[deleting.then_some("delete-problem")] { "Delete" }
                        }
                    }
                }
                @let children = folders.iter().any(|c| c.parent_id.as_deref() == Some(f.id
                    .as_str()));
                @if children {
                    ul { (branch(folders, Some(f.id.as_str()), session, env, failed_change)) }
                }
            }
        }
    }
}

/// A change's answer: back to the folders with the notice `done` names, or the page again
/// with the API's status and the problems at the form `failed` names.
async fn answer<'a, T>(
    state: &AppState,
    session: &Session,
    env: &EnvironmentId,
    result: Result<T, DomainError>,
    done: &str,
    failed: impl FnOnce(Problems) -> Failed<'a>,
) -> Result<HttpResponse, Refusal> {
    match outcome(result, |_| format!("{ROOT}/{env}/folders?done={done}")) {
        Ok(to) => Ok(see_other(&to)),
        Err(p) => {
            let status = p.status;
            render(state, session, env, status, None, Some(failed(p))).await
        }
    }
}

#[derive(Deserialize)]
struct CreateForm {
    name: String,
    #[serde(default)]
    parent_id: String,
}

async fn create(
    state: web::Data<AppState>,
    env: web::Path<EnvironmentId>,
    posted: Posted<CreateForm>,
) -> Result<HttpResponse, Refusal> {
    let Posted { session, form } = posted;
    let request = CreateFolder {
        name: form.name.clone(),
        parent_id: Some(form.parent_id.clone()),
    };
    let result = state
        .folders
        .create(&session.principal, &env, request)
        .await;
    answer(&state, &session, &env, result, "created", |p| {
        Failed::Create(&form, p)
    })
    .await
}

#[derive(Deserialize)]
struct RenameForm {
    name: String,
}

async fn rename(
    state: web::Data<AppState>,
    path: web::Path<(EnvironmentId, FolderId)>,
    posted: Posted<RenameForm>,
) -> Result<HttpResponse, Refusal> {
    let (env, id) = path.into_inner();
    let Posted { session, form } = posted;
    let request = RenameFolder {
        name: form.name.clone(),
        parent_id: None,
    };
    let result = state
        .folders
        .rename(&session.principal, &env, &id, request)
        .await;
    answer(&state, &session, &env, result, "renamed", |p| {
        Failed::Rename(id.as_str(), &form.name, p)
    })
    .await
}

#[derive(Deserialize)]
struct DeleteForm {}

async fn delete(
    state: web::Data<AppState>,
    path: web::Path<(EnvironmentId, FolderId)>,
    posted: Posted<DeleteForm>,
) -> Result<HttpResponse, Refusal> {
    let (env, id) = path.into_inner();
    let session = posted.session;
    let result = state.folders.delete(&session.principal, &env, &id).await;
    answer(&state, &session, &env, result, "deleted", |p| {
        Failed::Delete(id.as_str(), p)
    })
    .await
}
