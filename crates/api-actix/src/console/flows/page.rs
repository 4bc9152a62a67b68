//! A flow's page: what it is, its versions, its steps drawn with what they did, the editor,
//! and the test trigger's form.

use actix_web::http::StatusCode;
use actix_web::{web, HttpResponse};
use domain::flow::steps::Program;
use domain::flow::{FlowVersion, VersionRef, VersionStatus};
use domain::id::{EnvironmentId, FlowId};
use domain::trigger::Mode;
use domain::{DomainError, Flow, Folder, Permission};
use maud::{html, Markup};
use serde::Deserialize;

use super::{folder_name, folders, numbered, TestForm};
use crate::console::framed;
use crate::console::graph::{Marks, StepGraph};
use crate::console::page::{self, Problems};
use crate::console::session::{Refusal, Session};
use crate::console::shell::{respond, ROOT};
use crate::AppState;

pub(super) fn configure(cfg: &mut web::ServiceConfig) {
    cfg.route("/console/{env}/flows/{id}", web::get().to(show));
}

#[derive(Deserialize)]
struct ShowQuery {
    version: Option<u32>,
    done: Option<String>,
    /// `test`: the graph counts test runs rather than live ones.
    counts: Option<String>,
    /// `lost`: the editor's text could not be kept.
    text: Option<String>,
}

/// What the flow's page shows again after a refused change.
#[derive(Default)]
pub(super) struct Shown<'a> {
    /// The editor's text as sent, with the problems found in it.
    pub(super) editor: Option<(&'a str, Problems)>,
    /// A refused action (approve, publish, archive, test), with its problems.
    pub(super) action: Option<Problems>,
    /// The test trigger's form as sent.
    pub(super) test: Option<&'a TestForm>,
    /// The graph counts test runs.
    pub(super) test_counts: bool,
    /// The editor's text was saved as the draft because approvals are on.
    pub(super) awaiting_approval: bool,
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
        Some("saved") if query.text.is_some() => {
            Some("The draft was saved; its text could not be kept, so it shows in reading order.")
        }
        Some("saved") => Some("The draft was saved."),
        Some("published") => Some("The configuration was published."),
        Some("approved") => Some("The draft was approved."),
        Some("discarded") => Some("The draft was discarded."),
        Some("archived") => Some("The flow was archived."),
        Some("unarchived") => Some("The flow was unarchived."),
        _ => None,
    };
    let shown = Shown {
        test_counts: query.counts.as_deref() == Some("test"),
        awaiting_approval: query.done.as_deref() == Some("awaiting"),
        ..Shown::default()
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
        shown,
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
    let base = format!("{ROOT}/{env}/flows/{id}");
    let kept = match &config {
        Some(v) => state
            .editor
            .text(&session.principal, env, v)
            .await
            .ok()
            .flatten(),
        None => None,
    };
    let steps = match &config {
        Some(v) => steps_section(state, session, env, v, &base, shown.test_counts).await,
        None => html! {},
    };
    let may_write = session.may(env, Permission::ActionFlowsWrite) && !flow.archived;
    let latest = config.as_ref().filter(|v| v.version == flow.latest_version);
    let title = flow.name.clone();
    let content = html! {
        (page::notice(notice))
        @if shown.awaiting_approval { (awaiting(config.as_ref())) }
        (page::alert(shown.action.as_ref(), &["flows[0].target", "flows[0].payload"]))
        (about(session, env, &flow, &folders, config.as_ref(), &base))
        (steps)
        // The form edits the latest configuration: it is shown with that one only.
        @if let Some(v) = latest.filter(|_| may_write) {
            (super::quick_form::forms(session, &base, &v.config))
        }
        (editor(session, env, &flow, config.as_ref(), kept.as_deref(), &shown, &base))
        @if session.may(env, Permission::ActionFlowsTrigger) {
            (test_form(session, &base, shown.test, shown.action.as_ref()))
        }
    };
    let body = framed(state, session, env, "flows", &title, content).await?;
    Ok(respond(status, body))
}

/// The flow's latest version again after a refused change: the API's status for `err`, its
/// problems where `place` puts them (the editor, or the summary of an action), and what was
/// sent.
pub(super) async fn refused<'a>(
    state: &AppState,
    session: &Session,
    env: &EnvironmentId,
    id: &FlowId,
    err: DomainError,
    place: impl FnOnce(Problems) -> Shown<'a>,
) -> Result<HttpResponse, Refusal> {
    let problems = Problems::of(err);
    let status = problems.status;
    let shown = place(problems);
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

/// Says who must approve the draft the editor's text was saved as.
fn awaiting(draft: Option<&FlowVersion>) -> Markup {
    let author = draft.map_or("", |d| d.created_by.as_str());
    html! {
        div.notice role="status" {
            p { "Saved as the draft"
                @if let Some(d) = draft { " (v" (d.version) ")" }
                ". Approvals are on in this environment: a key other than " code { (author) }
                " with permission to write flows must approve it (Approve draft); then Publish \
                draft publishes it." }
        }
    }
}

/// What the flow is, its versions, and the actions on its draft.
fn about(
    session: &Session,
    env: &str,
    flow: &Flow,
    folders: &[Folder],
    config: Option<&FlowVersion>,
    base: &str,
) -> Markup {
    html! {
        section.card aria-labelledby="about" {
            h2 #about { "About" }
            p {
                "Status " span.status { (shown_status(flow)) }
                " · folder " (folder_name(folders, flow))
                " · published " (numbered(flow.published_version))
                " · draft " (numbered(flow.draft_version))
            }
            ul.actions.links {
                li { a href={ (base) "/runs" } { "Runs: invocations, CSV tasks and cancels" } }
                li { a href={ (base) "/insights" } { "Insights: what it did, day by day" } }
                @if let Some(v) = config {
                    li { a href={ (base) "/preview?version=" (v.version) } { "Preview its cards" } }
                }
            }
            @if flow.latest_version > 0 {
                nav aria-label="Versions" {
                    "Versions: "
                    @for n in (1..=flow.latest_version).rev() {
                        a href={ (base) "?version=" (n) }
                          aria-current=[config.is_some_and(|c| c.version == n)
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
    }
}

/// A flow's status as the API's summary spells it (`active` rather than `PUBLISHED`).
pub(super) fn shown_status(flow: &Flow) -> &'static str {
    flow.status().summary()
}

/// The version's steps drawn; a version that ran shows what its instances did, live or test.
async fn steps_section(
    state: &AppState,
    session: &Session,
    env: &EnvironmentId,
    version: &FlowVersion,
    base: &str,
    test_counts: bool,
) -> Markup {
    let Ok(program) = Program::parse(&version.config) else {
        return html! {};
    };
    let graph = StepGraph::of(&program, &version.config);
    // A published version runs live and in tests; a draft in tests only.
    let draft = version.status == VersionStatus::Draft;
    let test_counts = test_counts || draft;
    let mode = if test_counts { Mode::Test } else { Mode::Live };
    let flow_id = FlowId::from(version.flow_id.as_str());
    let counts = state
        .stats
        .steps(&session.principal, env, &flow_id, version.version, mode)
        .await
        .ok();
    let marks = counts.as_ref().map_or(Marks::Nothing, Marks::Counts);
    let here = format!("{base}?version={}", version.version);
    html! {
        section.card aria-labelledby="steps" {
            h2 #steps { "Steps" }
            p {
                "Counts of " @if test_counts { "test" } @else { "live" } " runs of v"
                (version.version) " since the flow was created: how many reached each step, \
                how many wait there now, and how each ended. "
                @if draft { "A draft runs in test sends only." }
                @else if test_counts { a href=(here) { "Show live runs" } }
                @else { a href={ (here) "&counts=test" } { "Show test runs" } }
            }
            (graph.draw(&format!("The steps of v{}", version.version), &marks))
        }
    }
}

/// The configuration: the editor for a key that may write, else the text.
#[allow(clippy::too_many_arguments)]
fn editor(
    session: &Session,
    env: &str,
    flow: &Flow,
    config: Option<&FlowVersion>,
    kept: Option<&str>,
    shown: &Shown<'_>,
    base: &str,
) -> Markup {
    let may_write = session.may(env, Permission::ActionFlowsWrite) && !flow.archived;
    // What was sent again after a refusal; else the text the version was saved as; else
    // the configuration in reading order.
    let editor_text = match (&shown.editor, kept, config) {
        (Some((text, _)), _, _) => (*text).to_owned(),
        (None, Some(text), _) => text.to_owned(),
        (None, None, Some(v)) => super::json_text::reading_order(&v.config),
        (None, None, None) => String::new(),
    };
    let editor_problems = shown.editor.as_ref().map(|(_, p)| p);
    html! {
        section.card aria-labelledby="configuration" {
            h2 #configuration {
                "Configuration"
                @if let Some(v) = config { " (v" (v.version) ", " (v.status.as_str()) @if
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
                        button.secondary type="submit" name="action" value="draft" {
                            "Save draft" }
                        button type="submit" name="action" value="publish" { "Publish" }
                    }
                    p.muted { "Publish publishes this text, through the draft when there is \
                        one; with approvals on it saves the draft for another key to approve." }
                }
            } @else {
                (page::pre(&editor_text))
            }
        }
    }
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
