//! The editor and the version actions: save a draft, publish, approve, discard, archive.

use actix_web::{web, HttpResponse};
use domain::flow::texts::SaveOutcome;
use domain::id::{EnvironmentId, FlowId};
use domain::DomainError;
use serde::Deserialize;

use super::page::{refused, Shown};
use crate::console::session::{Posted, Refusal, Session};
use crate::console::shell::{see_other, ROOT};
use crate::AppState;

pub(super) fn configure(cfg: &mut web::ServiceConfig) {
    cfg.route("/console/{env}/flows/{id}/config", web::post().to(save))
        .route(
            "/console/{env}/flows/{id}/draft/{action}",
            web::post().to(draft),
        )
        // Apart from the other draft actions: it goes on below the low-disk guard.
        .route("/console/{env}/flows/{id}/discard", web::post().to(discard))
        .route(
            "/console/{env}/flows/{id}/archive/{action}",
            web::post().to(archive),
        );
}

#[derive(Deserialize)]
struct ConfigForm {
    config: String,
    action: String,
}

/// The editor: its text saved as the draft, or published as its user means it, and kept so
/// that the editor shows it again as written ([`domain::flow::texts::EditorService`]).
async fn save(
    state: web::Data<AppState>,
    path: web::Path<(EnvironmentId, FlowId)>,
    posted: Posted<ConfigForm>,
) -> Result<HttpResponse, Refusal> {
    let (env, id) = path.into_inner();
    let Posted { session, form } = posted;
    let publish = match form.action.as_str() {
        "publish" => true,
        "draft" => false,
        _ => {
            return Err(Refusal::BadForm(
                "`action` must be `draft` or `publish`".into(),
            ))
        }
    };
    let result = state
        .editor
        .save_text(&session.principal, &env, &id, &form.config, publish)
        .await
        .map(|saved| {
            let done = match saved.outcome {
                SaveOutcome::Draft => "saved",
                SaveOutcome::Published => "published",
                SaveOutcome::AwaitingApproval => "awaiting",
            };
            let kept = if saved.text_kept { "" } else { "&text=lost" };
            format!("{done}{kept}")
        });
    match result {
        Ok(done) => Ok(see_other(&format!("{ROOT}/{env}/flows/{id}?done={done}"))),
        Err(err) => {
            let place = |p| Shown {
                editor: Some((&form.config, p)),
                ..Shown::default()
            };
            refused(&state, &session, &env, &id, err, place).await
        }
    }
}

#[derive(Deserialize)]
struct ActionForm {}

/// Approve, publish or discard the draft.
async fn draft(
    state: web::Data<AppState>,
    path: web::Path<(EnvironmentId, FlowId, String)>,
    posted: Posted<ActionForm>,
) -> Result<HttpResponse, Refusal> {
    let (env, id, action) = path.into_inner();
    let who = &posted.session.principal;
    let result = match action.as_str() {
        "approve" => state
            .flows
            .approve_draft(who, &env, &id)
            .await
            .map(|_| "approved"),
        "publish" => state
            .flows
            .publish_draft(who, &env, &id)
            .await
            .map(|_| "published"),
        _ => return Err(Refusal::NotFound),
    };
    action_outcome(&state, &posted.session, &env, &id, result).await
}

/// Discard the draft.
async fn discard(
    state: web::Data<AppState>,
    path: web::Path<(EnvironmentId, FlowId)>,
    posted: Posted<ActionForm>,
) -> Result<HttpResponse, Refusal> {
    let (env, id) = path.into_inner();
    let result = state
        .flows
        .discard_draft(&posted.session.principal, &env, &id)
        .await
        .map(|()| "discarded");
    action_outcome(&state, &posted.session, &env, &id, result).await
}

/// Archive or unarchive.
async fn archive(
    state: web::Data<AppState>,
    path: web::Path<(EnvironmentId, FlowId, String)>,
    posted: Posted<ActionForm>,
) -> Result<HttpResponse, Refusal> {
    let (env, id, action) = path.into_inner();
    let archived = match action.as_str() {
        "archive" => true,
        "unarchive" => false,
        _ => return Err(Refusal::NotFound),
    };
    let result = state
        .flows
        .set_archived(&posted.session.principal, &env, &id, archived)
        .await
        .map(|_| if archived { "archived" } else { "unarchived" });
    action_outcome(&state, &posted.session, &env, &id, result).await
}

async fn action_outcome(
    state: &AppState,
    session: &Session,
    env: &EnvironmentId,
    id: &FlowId,
    result: Result<&'static str, DomainError>,
) -> Result<HttpResponse, Refusal> {
    match result {
        Ok(done) => Ok(see_other(&format!("{ROOT}/{env}/flows/{id}?done={done}"))),
        Err(err) => {
            let place = |p| Shown {
                action: Some(p),
                ..Shown::default()
            };
            refused(state, session, env, id, err, place).await
        }
    }
}
