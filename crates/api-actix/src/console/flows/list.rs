//! The list of flows, its filters, and a new flow from an example.

use actix_web::http::StatusCode;
use actix_web::{web, HttpResponse};
use domain::flow::{CreateFlow, FlowFilter, FlowStatus, FolderFilter};
use domain::id::EnvironmentId;
use domain::{Flow, Folder, Page, PageRequest, Permission};
use maud::{html, Markup};
use serde::Deserialize;

use super::{folder_name, folders, numbered};
use crate::console::framed;
use crate::console::page::{self, Problems};
use crate::console::session::{Posted, Refusal, Session};
use crate::console::shell::{respond, see_other, ROOT};
use crate::AppState;

pub(super) fn configure(cfg: &mut web::ServiceConfig) {
    cfg.route("/console/{env}/flows", web::get().to(list))
        .route("/console/{env}/flows", web::post().to(create));
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
    let content = html! {
        (filter_form(env, query, &folders))
        (flows_table(env, query, &folders, &flows))
        @if session.may(env, Permission::ActionFlowsWrite) {
            (new_flow_form(session, env, &folders, failed_create.as_ref()))
        }
    };
    let body = framed(state, session, env, "flows", "Flows", content).await?;
    Ok(respond(status, body))
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

/// The list's filters: a name, a status, a folder.
fn filter_form(env: &str, query: &ListQuery, folders: &[Folder]) -> Markup {
    html! {
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
                            selected[query.status.as_deref() == Some(s.as_str())] {
                                (s.summary()) }
                    }
                }
            }
            div.field {
                label for="filter-folder" { "Folder" }
                select #filter-folder name="folder" {
                    option value="" { "Any" }
                    option value="none" selected[query.folder.as_deref() == Some("none")] {
                        "Uncategorized" }
                    @for f in folders {
                        option value=(f.id)
                            selected[query.folder.as_deref() == Some(f.id.as_str())] { (f.name) }
                    }
                }
            }
            button type="submit" { "Filter" }
        }
    }
}

/// A page of flows, with its "Next page" link.
fn flows_table(env: &str, query: &ListQuery, folders: &[Folder], flows: &Page<Flow>) -> Markup {
    html! {
        div.scroll {
            table {
                caption.muted { (flows.items.len()) " flows" }
                thead { tr { th scope="col" { "Name" } th scope="col" { "Status" } th scope="col" {
                    "Folder" } th scope="col" { "Published" } th scope="col" { "Draft" } } }
                tbody {
                    @for f in &flows.items {
                        tr {
                            td { a href={ (ROOT) "/" (env) "/flows/" (f.id) } { (f.name) } }
                            td { span.status { (f.status().summary()) } }
                            td { (folder_name(folders, f)) }
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
    }
}

/// A new flow: its name, its folder, the example it starts from.
fn new_flow_form(
    session: &Session,
    env: &str,
    folders: &[Folder],
    failed: Option<&(&CreateForm, Problems)>,
) -> Markup {
    let (values, problems) = match failed {
        Some((form, p)) => (Some(*form), Some(p)),
        None => (None, None),
    };
    let folder_errors = problems
        .map(|p| p.about("folderId", false))
        .unwrap_or_default();
    html! {
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
                    @for f in folders {
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
}
