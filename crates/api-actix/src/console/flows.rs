//! Action Flows: the list with its filters, a flow's page (versions, the configuration editor
//! with validation problems at their paths, drafts, approvals, publishing, archiving), and a
//! test trigger whose cards the invocation's page (`runs`) shows.

use actix_web::http::StatusCode;
use actix_web::{web, HttpResponse};
use domain::flow::{CreateFlow, FlowFilter, FlowStatus, FolderFilter, VersionRef};
use domain::id::{EnvironmentId, FlowId};
use domain::trigger::Mode;
use domain::{DomainError, Flow, Folder, PageRequest, Permission};
use maud::{html, Markup};
use serde::Deserialize;
use serde_json::{json, Value};

use super::page::{self, Frame, Problems};
use super::session::{Posted, Refusal, Session};
use super::shell::{respond, see_other, ROOT};
use super::{environments, failed};
use crate::AppState;

pub(super) fn configure(cfg: &mut web::ServiceConfig) {
    cfg.route("/console/{env}/flows", web::get().to(list))
        .route("/console/{env}/flows", web::post().to(create))
        .route("/console/{env}/flows/{id}", web::get().to(show))
        .route("/console/{env}/flows/{id}/config", web::post().to(save))
        .route(
            "/console/{env}/flows/{id}/draft/{action}",
            web::post().to(draft),
        )
        // Apart from the other draft actions: it goes on below the low-disk guard.
        .route("/console/{env}/flows/{id}/discard", web::post().to(discard))
        .route(
            "/console/{env}/flows/{id}/archive/{action}",
            web::post().to(archive),
        )
        .route("/console/{env}/flows/{id}/test", web::post().to(test));
}

/// Flows a page of the list shows.
const LISTED: u32 = 100;

/// The configurations a new flow can start from (the API document's examples).
fn examples() -> [(&'static str, &'static str, &'static str); 3] {
    [
        ("oneStep", "One card", crate::schemas::ONE_STEP),
        (
            "variablesAndNotification",
            "A card with variables and a push notification",
            crate::schemas::VARIABLES_AND_NOTIFICATION,
        ),
        ("twoSteps", "Two steps", crate::schemas::TWO_STEPS),
    ]
}

#[derive(Deserialize, Default)]
struct ListQuery {
    name: Option<String>,
    status: Option<String>,
    folder: Option<String>,
    /// The key of the previous page's last flow (a page's "Next page" link).
    after: Option<String>,
}

async fn list(
    state: web::Data<AppState>,
    session: Session,
    env: web::Path<EnvironmentId>,
    query: web::Query<ListQuery>,
) -> Result<HttpResponse, Refusal> {
    list_page(&state, &session, &env, &query, StatusCode::OK, None).await
}

async fn list_page(
    state: &AppState,
    session: &Session,
    env: &EnvironmentId,
    query: &ListQuery,
    status: StatusCode,
    failed_create: Option<(&CreateForm, Problems)>,
) -> Result<HttpResponse, Refusal> {
    let filter = FlowFilter {
        name_contains: page::query_value(query.name.as_deref(), "name")?,
        status: query.status.as_deref().and_then(FlowStatus::parse),
        folder: match page::query_value(query.folder.as_deref(), "folder")?.as_deref() {
            None => None,
            Some("none") => Some(FolderFilter::Uncategorized),
            Some(id) => Some(FolderFilter::In(id.to_owned())),
        },
    };
    let page_request = PageRequest {
        limit: LISTED,
        after: page::query_value(query.after.as_deref(), "after")?,
    };
    let flows = match state
        .flows
        .list(&session.principal, env, filter, page_request)
        .await
    {
        Ok(page) => page,
        Err(err) => return page::unreadable(err, "Flows"),
    };
    let folders = folders(state, session, env).await;
    let environments = environments(state, session).await?;
    let frame = Frame {
        title: "Flows",
        section: "flows",
        env,
        environments: &environments,
        session,
    };
    let (values, problems) = match &failed_create {
        Some((form, p)) => (Some(*form), Some(p)),
        None => (None, None),
    };
    let folder_errors = problems
        .map(|p| p.about("folderId", false))
        .unwrap_or_default();
    let content = html! {
        form.inline method="get" action={ (ROOT) "/" (env) "/flows" } role="search"
            aria-label="Filter flows" {
            div.field {
                label for="filter-name" { "Name contains" }
                input #filter-name type="text" name="name"
                    value=(query.name.as_deref().unwrap_or(""));
            }
            div.field {
                label for="filter-status" { "Status" }
                select #filter-status name="status" {
                    option value="" { "Any" }
                    @for s in [FlowStatus::Draft, FlowStatus::Published, FlowStatus::Archived] {
                        option value=(s.as_str())
                            selected[query.status.as_deref() == Some(s.as_str())] { (s.as_str()) }
                    }
                }
            }
            div.field {
                label for="filter-folder" { "Folder" }
                select #filter-folder name="folder" {
                    option value="" { "Any" }
                    option value="none" selected[query.folder.as_deref() == Some("none")] {
                        "Uncategorized" }
                    @for f in &folders {
                        option value=(f.id)
                            selected[query.folder.as_deref() == Some(f.id.as_str())] { (f.name) }
                    }
                }
            }
            button type="submit" { "Filter" }
        }
        div.scroll {
            table {
                caption.muted { (flows.items.len()) " flows" }
                thead { tr { th scope="col" { "Name" } th scope="col" { "Status" } th scope="col" {
                    "Folder" } th scope="col" { "Published" } th scope="col" { "Draft" } } }
                tbody {
                    @for f in &flows.items {
                        tr {
                            td { a href={ (ROOT) "/" (env) "/flows/" (f.id) } { (f.name) } }
                            td { span.status { (f.status().as_str()) } }
                            td { (folder_name(&folders, f)) }
                            td { (numbered(f.published_version)) }
                            td { (numbered(f.draft_version)) }
                        }
                    }
                }
            }
        }
        (page::pages(&format!("{ROOT}/{env}/flows"), &[
            ("name", query.name.as_deref().unwrap_or("")),
            ("status", query.status.as_deref().unwrap_or("")),
            ("folder", query.folder.as_deref().unwrap_or("")),
        ], "after", query.after.as_deref(), flows.next_after.as_deref()))
        @if session.may(env, Permission::ActionFlowsWrite) {
            section.card aria-labelledby="new-flow" {
                h2 #new-flow { "New flow" }
                (page::alert(problems, &["name", "folderId"]))
                form method="post" action={ (ROOT) "/" (env) "/flows" } {
                    (page::csrf(session))
                    (page::text_field("flow-name", "Name", "name", values.map_or("",
                        |v| v.name.as_str()), "name", problems))
                    div.field {
                        label for="flow-folder" { "Folder" }
                        select #flow-folder name="folder_id"
                            aria-invalid=[(!folder_errors.is_empty()).then_some("true")]
                            aria-describedby=[(!folder_errors.is_empty())
                                .then_some("flow-folder-errors")] {
                            option value="" { "Uncategorized" }
                            @for f in &folders {
                                option value=(f.id)
                                    selected[values.is_some_and(|v| v.folder_id == f.id.as_str())]
                                        { (f.name) }
                            }
                        }
                        (page::field_errors("flow-folder-errors", &folder_errors))
                    }
                    div.field {
                        label for="flow-example" { "Start from" }
                        select #flow-example name="example" {
                            option value="" { "An empty flow" }
                            @for (key, name, _) in examples() {
                                option value=(key)
                                    selected[values.is_some_and(|v| v.example == key)] { (name) }
                            }
                        }
                    }
                    button type="submit" { "Create flow" }
                }
            }
        }
    };
    Ok(respond(status, page::frame(&frame, content)))
}

fn numbered(v: Option<u32>) -> Markup {
    html! { @match v { Some(v) => { "v" (v) }, None => { span.muted { "–" } } } }
}

fn folder_name<'a>(folders: &'a [Folder], flow: &Flow) -> &'a str {
    flow.folder_id
        .as_deref()
        .and_then(|id| folders.iter().find(|f| f.id.as_str() == id))
        .map_or("Uncategorized", |f| f.name.as_str())
}

/// The environment's folders, for names and filters (none when the key may not read them).
async fn folders(state: &AppState, session: &Session, env: &EnvironmentId) -> Vec<Folder> {
    state
        .folders
        .list(&session.principal, env)
        .await
        .unwrap_or_default()
}

#[derive(Deserialize)]
struct CreateForm {
    name: String,
    #[serde(default)]
    folder_id: String,
    #[serde(default)]
    example: String,
}

async fn create(
    state: web::Data<AppState>,
    env: web::Path<EnvironmentId>,
    posted: Posted<CreateForm>,
) -> Result<HttpResponse, Refusal> {
    let Posted { session, form } = posted;
    let config = examples()
        .into_iter()
        .find(|(key, _, _)| *key == form.example)
        .and_then(|(_, _, text)| serde_json::from_str(text).ok());
    let request = CreateFlow {
        name: form.name.clone(),
        description: None,
        folder_id: Some(form.folder_id.clone()),
        config,
    };
    match state.flows.create(&session.principal, &env, request).await {
        Ok(flow) => Ok(see_other(&format!(
            "{ROOT}/{env}/flows/{}?done=created",
            flow.id
        ))),
        Err(err) => {
            let problems = Problems::of(err);
            let status = problems.status;
            let query = ListQuery::default();
            list_page(
                &state,
                &session,
                &env,
                &query,
                status,
                Some((&form, problems)),
            )
            .await
        }
    }
}

#[derive(Deserialize)]
struct ShowQuery {
    version: Option<u32>,
    done: Option<String>,
}

/// What the flow's page shows again after a refused change.
#[derive(Default)]
struct Shown<'a> {
    /// The editor's text as sent, with the problems found in it.
    editor: Option<(&'a str, Problems)>,
    /// A refused action (approve, publish, archive, test), with its problems.
    action: Option<Problems>,
    /// The test trigger's form as sent.
    test: Option<&'a TestForm>,
}

async fn show(
    state: web::Data<AppState>,
    session: Session,
    path: web::Path<(EnvironmentId, FlowId)>,
    query: web::Query<ShowQuery>,
) -> Result<HttpResponse, Refusal> {
    let (env, id) = path.into_inner();
    let notice = match query.done.as_deref() {
        Some("created") => Some("The flow was created."),
        Some("saved") => Some("The draft was saved."),
        Some("published") => Some("The configuration was published."),
        Some("approved") => Some("The draft was approved."),
        Some("discarded") => Some("The draft was discarded."),
        Some("archived") => Some("The flow was archived."),
        Some("unarchived") => Some("The flow was unarchived."),
        _ => None,
    };
    let version = query.version.map_or(VersionRef::Latest, VersionRef::Number);
    flow_page(
        &state,
        &session,
        &env,
        &id,
        version,
        StatusCode::OK,
        notice,
        Shown::default(),
    )
    .await
}

#[allow(clippy::too_many_arguments)]
async fn flow_page(
    state: &AppState,
    session: &Session,
    env: &EnvironmentId,
    id: &FlowId,
    version: VersionRef,
    status: StatusCode,
    notice: Option<&str>,
    shown: Shown<'_>,
) -> Result<HttpResponse, Refusal> {
    let flow = match state.flows.get(&session.principal, env, id).await {
        Ok(flow) => flow,
        Err(err) => return page::unreadable(err, "Flow"),
    };
    let config = if flow.latest_version == 0 {
        None
    } else {
        match state
            .flows
            .get_config(&session.principal, env, id, version)
            .await
        {
            Ok((_, v)) => Some(v),
            Err(err) => return page::unreadable(err, "Flow"),
        }
    };
    let folders = folders(state, session, env).await;
    let environments = environments(state, session).await?;
    let may_write = session.may(env, Permission::ActionFlowsWrite) && !flow.archived;
    let may_trigger = session.may(env, Permission::ActionFlowsTrigger);
    let editor_text = match (&shown.editor, &config) {
        (Some((text, _)), _) => (*text).to_owned(),
        (None, Some(v)) => serde_json::to_string_pretty(&v.config).unwrap_or_default(),
        (None, None) => String::new(),
    };
    let editor_problems = shown.editor.as_ref().map(|(_, p)| p);
    let base = format!("{ROOT}/{env}/flows/{id}");
    let title = flow.name.clone();
    let frame = Frame {
        title: &title,
        section: "flows",
        env,
        environments: &environments,
        session,
    };
    let content = html! {
        (page::notice(notice))
        (page::alert(shown.action.as_ref(), &["flows[0].target", "flows[0].payload"]))
        section.card aria-labelledby="about" {
            h2 #about { "About" }
            p {
                "Status " span.status { (flow.status().as_str()) }
                " · folder " (folder_name(&folders, &flow))
                " · published " (numbered(flow.published_version))
                " · draft " (numbered(flow.draft_version))
            }
            p { a href={ (base) "/runs" } { "Runs: invocations, CSV tasks and cancels" } }
            @if flow.latest_version > 0 {
                nav aria-label="Versions" {
                    "Versions: "
                    @for n in (1..=flow.latest_version).rev() {
                        a href={ (base) "?version=" (n) }
                          aria-current=[config.as_ref().is_some_and(|c| c.version == n)
                              .then_some("page")] { "v" (n) }
                        " "
                    }
                }
            }
            @if session.may(env, Permission::ActionFlowsWrite) {
                div.actions {
                    @if flow.archived {
                        form method="post" action={ (base) "/archive/unarchive" } {
                            (page::csrf(session)) button.secondary type="submit" { "Unarchive" } }
                    } @else {
                        form method="post" action={ (base) "/archive/archive" } {
                            (page::csrf(session)) button.secondary type="submit" { "Archive" } }
                    }
                    @if flow.draft_version.is_some() && !flow.archived {
                        form method="post" action={ (base) "/draft/approve" } {
                            (page::csrf(session)) button.secondary type="submit" { "Approve draft"
                                } }
                        form method="post" action={ (base) "/draft/publish" } {
                            (page::csrf(session)) button type="submit" { "Publish draft" } }
                        form method="post" action={ (base) "/discard" } { (page::csrf(session))
                            button.danger type="submit" { "Discard draft" } }
                    }
                }
            }
        }
        section.card aria-labelledby="configuration" {
            h2 #configuration {
                "Configuration"
                @if let Some(v) = &config { " (v" (v.version) ", " (v.status.as_str()) @if
                    v.approved_by.is_some() { ", approved" } ")" }
            }
            @if may_write {
                (page::alert(editor_problems, &[""]))
                form method="post" action={ (base) "/config" } {
                    (page::csrf(session))
                    @let errors = editor_problems.map(|p| p.about("", true)).unwrap_or_default();
                    div.field.wide {
                        label for="config" { "JSON" }
                        // The problems above the editor, each at its path, where they are seen.
                        (page::field_errors("config-errors", &errors))
                        textarea #config name="config" spellcheck="false"
                            aria-invalid=[(!errors.is_empty()).then_some("true")]
                            aria-describedby=[(!errors.is_empty()).then_some("config-errors")] {
                                (editor_text) }
                    }
                    div.actions {
                        button.secondary type="button" data-format="config" hidden { "Format" }
                        button type="submit" name="action" value="draft" { "Save draft" }
                        button type="submit" name="action" value="publish" { "Publish" }
                    }
                }
            } @else {
                (page::pre(&editor_text))
            }
        }
        @if may_trigger {
            (test_form(session, &base, shown.test, shown.action.as_ref()))
        }
    };
    Ok(respond(status, page::frame(&frame, content)))
}

fn test_form(
    session: &Session,
    base: &str,
    sent: Option<&TestForm>,
    problems: Option<&Problems>,
) -> Markup {
    let users_errors = problems
        .map(|p| p.about("flows[0].target", true))
        .unwrap_or_default();
    let variable_errors = problems
        .map(|p| p.about("flows[0].payload", true))
        .unwrap_or_default();
    html! {
        section.card aria-labelledby="test" {
            h2 #test { "Test trigger" }
            p.muted { "Sends the draft (or the latest published version) to test users only; other \
                users are left out." }
            form method="post" action={ (base) "/test" } {
                (page::csrf(session))
                div.field {
                    label for="test-users" { "Test users (ids, separated by commas)" }
                    input #test-users type="text" name="users" value=(sent.map_or("",
                        |s| s.users.as_str()))
                        aria-invalid=[(!users_errors.is_empty()).then_some("true")]
                        aria-describedby=[(!users_errors.is_empty())
                            .then_some("test-users-errors")];
                    (page::field_errors("test-users-errors", &users_errors))
                }
                div.field {
                    label {
                        input type="checkbox" name="all" value="on"
                            checked[sent.is_some_and(|s| s.all.is_some())];
                        " All test users"
                    }
                }
                div.field.wide {
                    label for="test-variables" { "Variables (a JSON object)" }
                    textarea #test-variables name="variables" rows="4" spellcheck="false"
                        aria-invalid=[(!variable_errors.is_empty()).then_some("true")]
                        aria-describedby=[(!variable_errors.is_empty())
                            .then_some("test-variables-errors")] {
                        (sent.map_or("{}", |s| s.variables.as_str()))
                    }
                    (page::field_errors("test-variables-errors", &variable_errors))
                }
                button type="submit" { "Send test" }
            }
        }
    }
}

#[derive(Deserialize)]
struct ConfigForm {
    config: String,
    action: String,
}

/// The editor: saved as the draft, or published. Text that is not JSON is refused here with
/// the parser's message; everything else is the service's to judge.
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
    let result = match serde_json::from_str::<Value>(&form.config) {
        Err(e) => Err(DomainError::invalid("", format!("is not JSON: {e}"))),
        Ok(config) if publish => state
            .flows
            .publish(&session.principal, &env, &id, config)
            .await
            .map(|_| "published"),
        Ok(config) => state
            .flows
            .save_draft(&session.principal, &env, &id, config)
            .await
            .map(|_| "saved"),
    };
    match result {
        Ok(done) => Ok(see_other(&format!("{ROOT}/{env}/flows/{id}?done={done}"))),
        Err(err) => {
            let problems = Problems::of(err);
            let status = problems.status;
            let shown = Shown {
                editor: Some((&form.config, problems)),
                ..Shown::default()
            };
            flow_page(
                &state,
                &session,
                &env,
                &id,
                VersionRef::Latest,
                status,
                None,
                shown,
            )
            .await
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
            let problems = Problems::of(err);
            let status = problems.status;
            let shown = Shown {
                action: Some(problems),
                ..Shown::default()
            };
            flow_page(
                state,
                session,
                env,
                id,
                VersionRef::Latest,
                status,
                None,
                shown,
            )
            .await
        }
    }
}

#[derive(Deserialize)]
struct TestForm {
    #[serde(default)]
    users: String,
    all: Option<String>,
    #[serde(default)]
    variables: String,
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

async fn test(
    state: web::Data<AppState>,
    path: web::Path<(EnvironmentId, FlowId)>,
    posted: Posted<TestForm>,
) -> Result<HttpResponse, Refusal> {
    let (env, id) = path.into_inner();
    let Posted { session, form } = posted;
    let result = match form.request() {
        Ok(body) => {
            state
                .triggers
                .trigger_body(&session.principal, &env, &id, Mode::Test, &body)
                .await
        }
        Err(err) => Err(err),
    };
    match result {
        Ok(ids) => match ids.first() {
            Some(invocation) => Ok(see_other(&format!(
                "{ROOT}/{env}/flows/{id}/invocations/{}",
                page::url_path(invocation)
            ))),
            None => Err(failed(&DomainError::invalid("flows", "no invocation"))),
        },
        Err(err) => {
            let problems = Problems::of(err);
            let status = problems.status;
            let shown = Shown {
                action: Some(problems),
                test: Some(&form),
                ..Shown::default()
            };
            flow_page(
                &state,
                &session,
                &env,
                &id,
                VersionRef::Latest,
                status,
                None,
                shown,
            )
            .await
        }
    }
}
