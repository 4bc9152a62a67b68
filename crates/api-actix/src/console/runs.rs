//! A flow's runs: its invocations (each with the cards it gave the users it names) and tasks
//! with their progress read again in place, a CSV uploaded from the browser with a progress
//! bar, and a cancel with its progress.

use actix_web::http::StatusCode;
use actix_web::{web, HttpResponse};
use domain::bulk::{BulkStatus, BulkTask};
use domain::cancel::{CancelStatus, CancelTask};
use domain::id::{EnvironmentId, FlowId, TaskId};
use domain::tasks::{FlowTask, TaskFilter};
use domain::trigger::invocation::InvocationFilter;
use domain::trigger::Invocation;
use domain::trigger::Mode;
use domain::{DomainError, PageRequest, Permission};
use maud::{html, Markup};
use serde::Deserialize;
use serde_json::{json, Map, Value};

use super::framed;
use super::page::{self, Problems};
use super::session::{Posted, Refusal, Session};
use super::shell::{respond, see_other, ROOT};
use crate::AppState;

pub(super) fn configure(cfg: &mut web::ServiceConfig) {
    cfg.route("/console/{env}/flows/{id}/runs", web::get().to(runs))
        .route("/console/{env}/flows/{id}/csv", web::post().to(create_csv))
        .route(
            "/console/{env}/flows/{id}/csv/{task}",
            web::get().to(csv_task),
        )
        .route("/console/{env}/flows/{id}/cancel", web::post().to(cancel))
        .route(
            "/console/{env}/flows/{id}/cancel/{task}",
            web::get().to(cancel_task),
        );
}

/// How many of each the runs page lists (the newest).
const LISTED: u32 = 50;

/// Where each list of the runs page starts: after these keys (its "Next page" links).
#[derive(Deserialize, Default)]
struct RunsQuery {
    invocations: Option<String>,
    tasks: Option<String>,
}

async fn runs(
    state: web::Data<AppState>,
    session: Session,
    path: web::Path<(EnvironmentId, FlowId)>,
    query: web::Query<RunsQuery>,
) -> Result<HttpResponse, Refusal> {
    let (env, id) = path.into_inner();
    runs_page(
        &state,
        &session,
        &env,
        &id,
        StatusCode::OK,
        None,
        "",
        &query,
    )
    .await
}

#[allow(clippy::too_many_arguments)]
async fn runs_page(
    state: &AppState,
    session: &Session,
    env: &EnvironmentId,
    id: &FlowId,
    status: StatusCode,
    problems: Option<&Problems>,
    // The cancel's version as typed, shown again after a refusal.
    typed_version: &str,
    from: &RunsQuery,
) -> Result<HttpResponse, Refusal> {
    let who = &session.principal;
    let flow = match state.flows.get(who, env, id).await {
        Ok(flow) => flow,
        Err(err) => return page::unreadable(err, "Runs"),
    };
    let invocations_after = page::query_value(from.invocations.as_deref(), "invocations")?;
    let tasks_after = page::query_value(from.tasks.as_deref(), "tasks")?;
    let runs = match list_runs(state, session, env, id, invocations_after, tasks_after).await {
        Ok(runs) => runs,
        Err(err) => return page::unreadable(err, "Runs"),
    };
    // A later page is not read again as it runs: the first pages are, where new runs appear.
    let paged = from.invocations.is_some() || from.tasks.is_some();
    let running = runs.running();
    let may_trigger = session.may(env, Permission::ActionFlowsTrigger);
    let title = format!("Runs of {}", flow.name);
    let base = format!("{ROOT}/{env}/flows/{id}");
    let here = format!("{base}/runs");
    let content = html! {
        p {
            a href=(base) { "Back to the flow" }
            @if running { " · " a href=(here) { "Refresh" } }
        }
        (page::alert(problems, &["flowConfigVersion"]))
        div #live data-poll=[(running && !paged).then_some("1000")] data-poll-url=(here) {
            p.muted aria-live="polite" { @if running { "Runs in progress; this list follows them."
                } @else { "Nothing runs now." } }
            (invocations_section(&base, &here, from, &runs))
            (tasks_section(&base, &here, from, &runs))
        }
        @if may_trigger { (start_and_cancel(session, &base, typed_version, problems)) }
    };
    let body = framed(state, session, env, "flows", &title, content).await?;
    Ok(respond(status, body))
}

/// A page of a flow's invocations and a page of its tasks, each with the key of its next page.
struct Runs {
    invocations: Vec<Invocation>,
    next_invocations: Option<String>,
    tasks: Vec<FlowTask>,
    next_tasks: Option<String>,
}

impl Runs {
    /// Whether any invocation or task listed is still under way.
    fn running(&self) -> bool {
        self.invocations.iter().any(|i| !i.status.is_final())
            || self.tasks.iter().any(|t| match t {
                FlowTask::Csv(task) => csv_running(task),
                FlowTask::Cancel(task) => task.status == CancelStatus::Processing,
            })
    }
}

/// The flow's invocations and tasks, each list from after the key of the page before.
async fn list_runs(
    state: &AppState,
    session: &Session,
    env: &EnvironmentId,
    id: &FlowId,
    invocations_after: Option<String>,
    tasks_after: Option<String>,
) -> Result<Runs, DomainError> {
    let who = &session.principal;
    let page_request = |after: Option<String>| PageRequest {
        limit: LISTED,
        after,
    };
    let invocations = state
        .triggers
        .invocations(
            who,
            env,
            id,
            InvocationFilter::default(),
            page_request(invocations_after),
        )
        .await?;
    let tasks = state
        .tasks
        .list(
            who,
            env,
            id,
            TaskFilter::default(),
            page_request(tasks_after),
        )
        .await?;
    Ok(Runs {
        invocations: invocations.items,
        next_invocations: invocations.next_after,
        tasks: tasks.items,
        next_tasks: tasks.next_after,
    })
}

/// The invocations listed, with the links between their pages (the tasks' page kept).
fn invocations_section(base: &str, here: &str, from: &RunsQuery, runs: &Runs) -> Markup {
    html! {
        section.card aria-labelledby="invocations" {
            h2 #invocations { "Invocations" }
            @if runs.invocations.is_empty() { p.muted { "None yet." } } @else {
                div.scroll { table {
                    thead { tr { th scope="col" { "Invocation" } th scope="col" { "Mode" } th
                        scope="col" { "Status" } th scope="col" { "Users" } th scope="col" {
                            "Cards" } th scope="col" { "Started" } } }
                    tbody { @for i in &runs.invocations { tr {
                        td { a href={ (base) "/invocations/" (page::url_path(&i.id)) } { code {
                            (i.id) } } }
                        td { (i.mode.as_str()) }
                        td { span.status { (i.status.as_str()) } }
                        td { (i.users_targeted) }
                        td { (i.cards_created) }
                        td { (i.created.format("%Y-%m-%d %H:%M:%S")) }
                    } } }
                } }
            }
            (page::pages(here, &[("tasks", from.tasks.as_deref().unwrap_or(""))],
                "invocations",
                from.invocations.as_deref(), runs.next_invocations.as_deref()))
        }
    }
}

/// The CSV and cancel tasks listed, with the links between their pages (the invocations' page
/// kept).
fn tasks_section(base: &str, here: &str, from: &RunsQuery, runs: &Runs) -> Markup {
    html! {
        section.card aria-labelledby="tasks" {
            h2 #tasks { "Tasks" }
            @if runs.tasks.is_empty() { p.muted { "None yet." } } @else {
                div.scroll { table {
                    thead { tr { th scope="col" { "Task" } th scope="col" { "Status" } th
                        scope="col" { "Progress" } th scope="col" { "Started" } } }
                    tbody { @for t in &runs.tasks { tr.task-row {
                        @match t {
                            FlowTask::Csv(task) => {
                                td { a href={ (base) "/csv/" (task.id) } { "CSV " (task.id) }
                                    " (" (task.mode.as_str()) ")" }
                                td { span.status { (task.public_status().as_str()) } }
                                td { (csv_progress(task)) }
                                td { (task.created.format("%Y-%m-%d %H:%M:%S")) }
                            }
                            FlowTask::Cancel(task) => {
                                td { a href={ (base) "/cancel/" (task.id) } { "Cancel "
                                    (task.id) } }
                                td { span.status { (task.status.as_str()) } }
                                td { (cancel_progress(task)) }
                                td { (task.created.format("%Y-%m-%d %H:%M:%S")) }
                            }
                        }
                    } } }
                } }
            }
            (page::pages(here, &[("invocations", from.invocations.as_deref().unwrap_or(""))],
                "tasks",
                from.tasks.as_deref(), runs.next_tasks.as_deref()))
        }
    }
}

/// The forms of a key that may trigger: a new CSV task, and a cancel (its version as typed
/// again after a refusal).
fn start_and_cancel(
    session: &Session,
    base: &str,
    typed_version: &str,
    problems: Option<&Problems>,
) -> Markup {
    html! {
        section.card aria-labelledby="csv" {
            h2 #csv { "Start from a CSV file" }
            p.muted {
                "A header row naming where each column goes in a flow element (for example "
                code { "target.attributes.id" } " and " code { "payload.variables.firstName" }
                "), then one row per element. The next page takes the file."
            }
            form.inline method="post" action={ (base) "/csv" } {
                (page::csrf(session))
                div.field {
                    label for="csv-mode" { "Mode" }
                    select #csv-mode name="mode" {
                        option value="live" { "Live (the published version)" }
                        option value="test" { "Test (the draft, test users only)" }
                    }
                }
                button type="submit" { "New CSV task" }
            }
        }
        section.card aria-labelledby="cancel" {
            h2 #cancel { "Cancel" }
            p.muted { "Ends the flow's instances (all, or those of one version) and, unless \
                unticked, their cards." }
            form.inline method="post" action={ (base) "/cancel" } {
                (page::csrf(session))
                (page::text_field("cancel-version", "Version (empty: every version)",
                    "version", typed_version, "flowConfigVersion", problems))
                div.field {
                    label { input type="checkbox" name="cards" value="on" checked;
                        " Cancel their cards" }
                }
                button.danger type="submit" { "Cancel instances" }
            }
        }
    }
}

/// Whether a CSV task is receiving its file or handing its rows on. A task still waiting for
/// its file is not: nothing changes until someone uploads it, and its URL expires.
fn csv_running(task: &BulkTask) -> bool {
    matches!(task.status, BulkStatus::Uploading | BulkStatus::Processing)
}

fn csv_progress(task: &BulkTask) -> Markup {
    html! {
        progress max=(task.rows_total.max(1)) value=(task.rows_processed)
            aria-label="Rows handed to the engine" {}
        " " (task.rows_processed) " of " (task.rows_total) " rows"
        @if task.rows_failed > 0 { ", " (task.rows_failed) " refused" }
    }
}

fn cancel_progress(task: &CancelTask) -> Markup {
    html! {
        (task.actual) " instances"
        @if let Some(expected) = task.expected { " of " (expected) }
        ", " (task.cards_actual) " cards"
        @if let Some(expected) = task.cards_expected { " of " (expected) }
    }
}

#[derive(Deserialize)]
struct CsvForm {
    mode: String,
}

/// A new CSV task; the answer is the page that uploads its file (the upload URL is shown on
/// this answer only, as the API gives it once).
async fn create_csv(
    state: web::Data<AppState>,
    path: web::Path<(EnvironmentId, FlowId)>,
    posted: Posted<CsvForm>,
) -> Result<HttpResponse, Refusal> {
    let (env, id) = path.into_inner();
    let Posted { session, form } = posted;
    let mode = match form.mode.as_str() {
        "live" => Mode::Live,
        "test" => Mode::Test,
        _ => return Err(Refusal::BadForm("`mode` must be `live` or `test`".into())),
    };
    let (task, token) = match state.bulk.create(&session.principal, &env, &id, mode).await {
        Ok(made) => made,
        Err(err) => return refused(&state, &session, &env, &id, err, "").await,
    };
    let task_page = format!("{ROOT}/{env}/flows/{id}/csv/{}", task.id);
    let content = html! {
        p { "Task " (task.id) " (" (task.mode.as_str())
            ") waits for its file: choose it within five minutes." }
        section.card aria-labelledby="file" {
            h2 #file { "The file" }
            form #upload data-upload=(format!("/uploads/csv/{token}")) data-then=(task_page) {
                div.field {
                    label for="csv-file" { "CSV file (at most 32 MiB)" }
                    input #csv-file type="file" name="file" accept=".csv,text/csv" required;
                }
                button type="submit" { "Upload" }
                div.field {
                    label for="upload-progress" { "Sent" }
                    progress #upload-progress max="100" value="0" {}
                }
                p #upload-result role="status" {}
            }
            noscript { p.alert {
                "Uploading a file from this page needs the console's script. The API takes it too: \
                    PUT the file to the task's upload URL." } }
        }
        p { a href=(task_page) { "The task's progress" } }
    };
    let body = framed(
        &state,
        &session,
        &env,
        "flows",
        "Upload a CSV file",
        content,
    )
    .await?;
    Ok(respond(StatusCode::CREATED, body))
}

async fn csv_task(
    state: web::Data<AppState>,
    session: Session,
    path: web::Path<(EnvironmentId, FlowId, TaskId)>,
) -> Result<HttpResponse, Refusal> {
    let (env, id, task_id) = path.into_inner();
    let task = match state
        .bulk
        .status(&session.principal, &env, &id, &task_id)
        .await
    {
        Ok(task) => task,
        Err(err) => return page::unreadable(err, "CSV task"),
    };
    let running = csv_running(&task);
    let title = format!("CSV task {}", task.id);
    let here = format!("{ROOT}/{env}/flows/{id}/csv/{}", task.id);
    let progress = html! {
        p aria-live="polite" { "Status " span.status #task-status {
            (task.public_status().as_str()) } " · " (task.mode.as_str()) }
        p { (csv_progress(&task)) }
        @if !task.errors.is_empty() {
            h3 { "Refused rows" }
            ul.errors { @for e in task.errors.iter().take(100) {
                li { @if e.row == 0 { "The file: " } @else { "Row " (e.row) ": " }
                    (e.message) }
            } }
        }
    };
    let content = task_page(&env, &id, &here, running, progress);
    let body = framed(&state, &session, &env, "flows", &title, content).await?;
    Ok(respond(StatusCode::OK, body))
}

#[derive(Deserialize)]
struct CancelForm {
    #[serde(default)]
    version: String,
    cards: Option<String>,
}

async fn cancel(
    state: web::Data<AppState>,
    path: web::Path<(EnvironmentId, FlowId)>,
    posted: Posted<CancelForm>,
) -> Result<HttpResponse, Refusal> {
    let (env, id) = path.into_inner();
    let Posted { session, form } = posted;
    // The body the API would be sent; the service validates it.
    let mut body = Map::new();
    body.insert("cancelCards".into(), json!(form.cards.is_some()));
    let version = form.version.trim();
    if !version.is_empty() {
        let value = version
            .parse::<u64>()
            .map_or_else(|_| json!(version), |n| json!(n));
        body.insert("flowConfigVersion".into(), value);
    }
    let body = Value::Object(body);
    match state
        .cancels
        .start(&session.principal, &env, &id, Some(&body))
        .await
    {
        Ok(task) => Ok(see_other(&format!(
            "{ROOT}/{env}/flows/{id}/cancel/{}",
            task.id
        ))),
        Err(err) => refused(&state, &session, &env, &id, err, &form.version).await,
    }
}

async fn cancel_task(
    state: web::Data<AppState>,
    session: Session,
    path: web::Path<(EnvironmentId, FlowId, TaskId)>,
) -> Result<HttpResponse, Refusal> {
    let (env, id, task_id) = path.into_inner();
    let task = match state
        .cancels
        .status(&session.principal, &env, &id, &task_id)
        .await
    {
        Ok(task) => task,
        Err(err) => return page::unreadable(err, "Cancel"),
    };
    let running = task.status == CancelStatus::Processing;
    let title = format!("Cancel {}", task.id);
    let here = format!("{ROOT}/{env}/flows/{id}/cancel/{}", task.id);
    let progress = html! {
        p aria-live="polite" { "Status " span.status #task-status { (task.status.as_str()) } }
        p { (cancel_progress(&task)) }
    };
    let content = task_page(&env, &id, &here, running, progress);
    let body = framed(&state, &session, &env, "flows", &title, content).await?;
    Ok(respond(StatusCode::OK, body))
}

/// The runs page again after a refused CSV task or cancel, with the API's status and messages
/// (and the cancel's version as typed).
async fn refused(
    state: &AppState,
    session: &Session,
    env: &EnvironmentId,
    id: &FlowId,
    err: DomainError,
    typed_version: &str,
) -> Result<HttpResponse, Refusal> {
    let problems = Problems::of(err);
    let status = problems.status;
    let from = RunsQuery::default();
    runs_page(
        state,
        session,
        env,
        id,
        status,
        Some(&problems),
        typed_version,
        &from,
    )
    .await
}

/// A task's page: back to the flow's runs, and the task's `progress`, which the script reads
/// again each second in place while the task runs (without it, the page is read again by hand).
fn task_page(
    env: &EnvironmentId,
    id: &FlowId,
    here: &str,
    running: bool,
    progress: Markup,
) -> Markup {
    html! {
        p { a href={ (ROOT) "/" (env) "/flows/" (id) "/runs" } { "All runs" } @if running { " · " a
            href=(here) { "Refresh" } } }
        div #live data-poll=[running.then_some("1000")] data-poll-url=(here) {
            section.card aria-labelledby="progress" {
                h2 #progress { "Progress" }
                (progress)
            }
        }
    }
}
