//! The audience: end users (found by id or by tag; a user's attributes, tags, devices and open
//! cards), segments (saved filters) and streams.

mod user;

use actix_web::http::StatusCode;
use actix_web::{web, HttpResponse};
use domain::audience::UserQuery;
use domain::id::{EnvironmentId, SegmentId, StreamId};
use domain::{DomainError, PageRequest, Permission};
use maud::{html, Markup};
use serde::Deserialize;
use serde_json::Value;

use super::framed;
use super::page::{self, Problems, TextArea};
use super::session::{Posted, Refusal, Session};
use super::shell::{respond, see_other, ROOT};
use crate::AppState;

pub(super) fn configure(cfg: &mut web::ServiceConfig) {
    user::configure(cfg);
    cfg.route("/console/{env}/users", web::get().to(users))
        .route("/console/{env}/segments", web::get().to(segments))
        .route("/console/{env}/segments", web::post().to(create_segment))
        .route(
            "/console/{env}/segments/{id}/delete",
            web::post().to(delete_segment),
        )
        .route("/console/{env}/streams", web::get().to(streams))
        .route("/console/{env}/streams", web::post().to(create_stream))
        .route(
            "/console/{env}/streams/{id}/delete",
            web::post().to(delete_stream),
        );
}

/// The audience's own navigation: users, segments, streams.
pub(super) fn tabs(env: &str, current: &str) -> Markup {
    html! {
        nav aria-label="Audience" {
            ul.actions {
                @for (path, name) in [("users", "End users"), ("segments", "Segments"), ("streams",
                    "Streams")] {
                    li { a href={ (ROOT) "/" (env) "/" (path) }
                        aria-current=[(path == current).then_some("page")] { (name) } }
                }
            }
        }
    }
}

#[derive(Deserialize)]
struct UsersQuery {
    id: Option<String>,
    tag: Option<String>,
    /// Only the users a segment's filter matches (a segment's link).
    segment: Option<String>,
    /// The key of the previous page's last user.
    after: Option<String>,
}

/// Users by tag (or all, the first page); a user id goes straight to that user.
async fn users(
    state: web::Data<AppState>,
    session: Session,
    env: web::Path<EnvironmentId>,
    query: web::Query<UsersQuery>,
) -> Result<HttpResponse, Refusal> {
    if let Some(id) = query.id.as_deref().map(str::trim).filter(|i| !i.is_empty()) {
        let encoded: String = page::url_path(id);
        return Ok(see_other(&format!("{ROOT}/{env}/users/{encoded}")));
    }
    let tag = page::query_value(query.tag.as_deref(), "tag")?;
    let segment = page::query_value(query.segment.as_deref(), "segment")?;
    let filter = UserQuery {
        tag: tag.clone(),
        test_user: None,
    };
    let page_request = PageRequest {
        limit: 100,
        after: page::query_value(query.after.as_deref(), "after")?,
    };
    let found = match state
        .audience
        .list_users(&session.principal, &env, filter, segment, page_request)
        .await
    {
        Ok(page) => page,
        Err(err) => return page::unreadable(err, "End users"),
    };
    let content = html! {
        (tabs(&env, "users"))
        form.inline method="get" action={ (ROOT) "/" (env) "/users" } role="search"
            aria-label="Find end users" {
            div.field {
                label for="user-id" { "User id" }
                input #user-id type="text" name="id";
            }
            div.field {
                label for="user-tag" { "or tag" }
                input #user-tag type="text" name="tag" value=(tag.as_deref().unwrap_or(""));
            }
            button type="submit" { "Find" }
        }
        div.scroll { table {
            caption.muted { (found.items.len()) " users" }
            thead { tr { th scope="col" { "Id" } th scope="col" { "Test user" } th scope="col" {
                "Tags" } } }
            tbody { @for u in &found.items { tr {
                td { a href={ (ROOT) "/" (env) "/users/" (page::url_path(&u.id)) } { (u.id) } }
                td { @if u.test_user { "yes" } }
                td { (u.tags.join(", ")) }
            } } }
        } }
        (page::pages(&format!("{ROOT}/{env}/users"), &[
            ("tag", tag.as_deref().unwrap_or("")),
            ("segment", query.segment.as_deref().unwrap_or("")),
        ], "after", query.after.as_deref(), found.next_after.as_deref()))
    };
    let body = framed(&state, &session, &env, "users", "End users", content).await?;
    Ok(respond(StatusCode::OK, body))
}

#[derive(Deserialize, Default)]
struct SegmentForm {
    #[serde(default)]
    name: String,
    #[serde(default)]
    filter: String,
}

async fn segments(
    state: web::Data<AppState>,
    session: Session,
    env: web::Path<EnvironmentId>,
) -> Result<HttpResponse, Refusal> {
    segments_page(&state, &session, &env, StatusCode::OK, None, None).await
}

async fn segments_page(
    state: &AppState,
    session: &Session,
    env: &EnvironmentId,
    status: StatusCode,
    sent: Option<&SegmentForm>,
    problems: Option<&Problems>,
) -> Result<HttpResponse, Refusal> {
    let list = match state.audience.list_segments(&session.principal, env).await {
        Ok(s) => s,
        Err(err) => return page::unreadable(err, "Segments"),
    };
    let may_write = session.may(env, Permission::UsersWrite);
    let empty = SegmentForm::default();
    let form = sent.unwrap_or(&empty);
    let filter_errors = problems
        .map(|p| p.about("filter", true))
        .unwrap_or_default();
    let content = html! {
        (tabs(env, "segments"))
        div.scroll { table {
            thead { tr { th scope="col" { "Name" } th scope="col" { "Filter" } @if may_write { th
                scope="col" { span.muted { "Actions" } } } } }
            tbody { @for s in &list { tr {
                td { a href={ (ROOT) "/" (env) "/users?segment=" (s.id) } { (s.name) } }
                td { code { (s.filter.source.to_string()) } }
                @if may_write { td {
                    form method="post" action={ (ROOT) "/" (env) "/segments/" (s.id) "/delete" } {
                        (page::csrf(session))
                        button.danger type="submit" aria-label={ "Delete " (s.name) } { "Delete" }
                    }
                } }
            } } }
        } }
        @if may_write {
            section.card aria-labelledby="new-segment" {
                h2 #new-segment { "New segment" }
                (page::alert(problems, &["name", "filter"]))
                form method="post" action={ (ROOT) "/" (env) "/segments" } {
                    (page::csrf(session))
                    (page::text_field("segment-name", "Name", "name", &form.name, "name", problems))
                    (page::text_area(&TextArea {
                        id: "segment-filter",
                        name: "filter",
                        label: "Filter (JSON)",
                        rows: "5",
                        value: &form.filter,
                        errors: &filter_errors,
                    }))
                    button type="submit" { "Create segment" }
                }
            }
        }
    };
    let body = framed(state, session, env, "users", "Segments", content).await?;
    Ok(respond(status, body))
}

async fn create_segment(
    state: web::Data<AppState>,
    env: web::Path<EnvironmentId>,
    posted: Posted<SegmentForm>,
) -> Result<HttpResponse, Refusal> {
    let Posted { session, form } = posted;
    let result = match serde_json::from_str::<Value>(&form.filter) {
        Ok(filter) => {
            state
                .audience
                .create_segment(&session.principal, &env, form.name.clone(), filter)
                .await
        }
        Err(e) => Err(DomainError::invalid("filter", format!("is not JSON: {e}"))),
    };
    match result {
        Ok(_) => Ok(see_other(&format!("{ROOT}/{env}/segments"))),
        Err(err) => {
            let problems = Problems::of(err);
            let status = problems.status;
            segments_page(&state, &session, &env, status, Some(&form), Some(&problems)).await
        }
    }
}

#[derive(Deserialize)]
struct Empty {}

async fn delete_segment(
    state: web::Data<AppState>,
    path: web::Path<(EnvironmentId, SegmentId)>,
    posted: Posted<Empty>,
) -> Result<HttpResponse, Refusal> {
    let (env, id) = path.into_inner();
    let session = posted.session;
    match state
        .audience
        .delete_segment(&session.principal, &env, &id)
        .await
    {
        Ok(()) => Ok(see_other(&format!("{ROOT}/{env}/segments"))),
        Err(err) => {
            let problems = Problems::of(err);
            let status = problems.status;
            segments_page(&state, &session, &env, status, None, Some(&problems)).await
        }
    }
}

#[derive(Deserialize, Default)]
struct StreamForm {
    #[serde(default)]
    name: String,
}

async fn streams(
    state: web::Data<AppState>,
    session: Session,
    env: web::Path<EnvironmentId>,
) -> Result<HttpResponse, Refusal> {
    streams_page(&state, &session, &env, StatusCode::OK, None, None).await
}

async fn streams_page(
    state: &AppState,
    session: &Session,
    env: &EnvironmentId,
    status: StatusCode,
    sent: Option<&StreamForm>,
    problems: Option<&Problems>,
) -> Result<HttpResponse, Refusal> {
    let list = match state.audience.list_streams(&session.principal, env).await {
        Ok(s) => s,
        Err(err) => return page::unreadable(err, "Streams"),
    };
    let may_write = session.may(env, Permission::UsersWrite);
    let content = html! {
        (tabs(env, "streams"))
        (page::alert(problems, &["name"]))
        div.scroll { table {
            thead { tr { th scope="col" { "Name" } th scope="col" { "Id" } @if may_write { th
                scope="col" { span.muted { "Actions" } } } } }
            tbody { @for s in &list { tr {
                td { (s.name) @if s.is_default { " " span.status { "default" } } }
                td { code { (s.id) } }
                @if may_write { td { @if !s.is_default {
                    form method="post" action={ (ROOT) "/" (env) "/streams/" (s.id) "/delete" } {
                        (page::csrf(session))
                        button.danger type="submit" aria-label={ "Delete " (s.name) } { "Delete" }
                    }
                } } }
            } } }
        } }
        @if may_write {
            section.card aria-labelledby="new-stream" {
                h2 #new-stream { "New stream" }
                form.inline method="post" action={ (ROOT) "/" (env) "/streams" } {
                    (page::csrf(session))
                    (page::text_field("stream-name", "Name", "name", sent.map_or("",
                        |s| s.name.as_str()), "name", problems))
                    button type="submit" { "Create stream" }
                }
            }
        }
    };
    let body = framed(state, session, env, "users", "Streams", content).await?;
    Ok(respond(status, body))
}

async fn create_stream(
    state: web::Data<AppState>,
    env: web::Path<EnvironmentId>,
    posted: Posted<StreamForm>,
) -> Result<HttpResponse, Refusal> {
    let Posted { session, form } = posted;
    match state
        .audience
        .create_stream(&session.principal, &env, form.name.clone())
        .await
    {
        Ok(_) => Ok(see_other(&format!("{ROOT}/{env}/streams"))),
        Err(err) => {
            let problems = Problems::of(err);
            let status = problems.status;
            streams_page(&state, &session, &env, status, Some(&form), Some(&problems)).await
        }
    }
}

async fn delete_stream(
    state: web::Data<AppState>,
    path: web::Path<(EnvironmentId, StreamId)>,
    posted: Posted<Empty>,
) -> Result<HttpResponse, Refusal> {
    let (env, id) = path.into_inner();
    let session = posted.session;
    match state
        .audience
        .delete_stream(&session.principal, &env, &id)
        .await
    {
        Ok(()) => Ok(see_other(&format!("{ROOT}/{env}/streams"))),
        Err(err) => {
            let problems = Problems::of(err);
            let status = problems.status;
            streams_page(&state, &session, &env, status, None, Some(&problems)).await
        }
    }
}
