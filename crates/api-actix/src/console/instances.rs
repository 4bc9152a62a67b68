//! One invocation of a flow: its progress, its instances by state with the step graph marked
//! with what they did, the cards it gave the users it names, and why a test send missed a
//! user; and one user's instance, its path drawn on the graph.

use std::collections::BTreeMap;

use actix_web::http::StatusCode;
use actix_web::{web, HttpResponse};
use domain::audience::test_users::{why_none_reached, why_not_reached};
use domain::flow::steps::Program;
use domain::flow::VersionRef;
use domain::id::{EndUserId, EnvironmentId, FlowId, InvocationId};
use domain::stats::steps::StepTotals;
use domain::trigger::instances::InstanceCounts;
use domain::trigger::views::InvocationView;
use domain::trigger::Mode;
use domain::Permission;
use maud::{html, Markup};
use serde_json::Value;

use super::framed;
use super::graph::{Marks, StepGraph};
use super::page;
use super::session::{Refusal, Session};
use super::shell::{respond, ROOT};
use crate::AppState;

/// The named users whose cards and test status the page reads, at most.
const NAMED: usize = 20;

pub(super) fn configure(cfg: &mut web::ServiceConfig) {
    cfg.route(
        "/console/{env}/flows/{id}/invocations/{invocation}",
        web::get().to(invocation),
    )
    .route(
        "/console/{env}/flows/{id}/invocations/{invocation}/users/{user}",
        web::get().to(instance),
    );
}

/// The users an invocation's target names (a `user` target's ids).
fn named_users(view: &InvocationView) -> Vec<String> {
    serde_json::from_str::<Value>(view.invocation.target.text())
        .ok()
        .and_then(|t| t.get("targetUserIds").cloned())
        .and_then(|u| serde_json::from_value(u).ok())
        .unwrap_or_default()
}

/// The graph of version `version` of the flow, when it can be read and drawn.
async fn graph_of(
    state: &AppState,
    session: &Session,
    env: &EnvironmentId,
    flow_id: &FlowId,
    version: u32,
) -> Option<StepGraph> {
    let (_, v) = state
        .flows
        .get_config(
            &session.principal,
            env,
            flow_id,
            VersionRef::Number(version),
        )
        .await
        .ok()?;
    let program = Program::parse(&v.config).ok()?;
    Some(StepGraph::of(&program, &v.config))
}

/// An invocation's instance counts as the graph marks steps.
fn step_totals(counts: &InstanceCounts) -> BTreeMap<String, StepTotals> {
    counts
        .steps
        .iter()
        .map(|(id, c)| {
            let totals = StepTotals {
                reached: c.reached,
                waiting: c.waiting,
                outcomes: c.outcomes.clone(),
            };
            (id.clone(), totals)
        })
        .collect()
}

/// Why a test invocation missed the users it named, read from their records; none for a live
/// one, or for a key that may not read users.
async fn missed(
    state: &AppState,
    session: &Session,
    env: &EnvironmentId,
    view: &InvocationView,
    users: &[String],
) -> Vec<String> {
    let inv = &view.invocation;
    if inv.mode != Mode::Test || !session.may(env, Permission::UsersRead) {
        return Vec::new();
    }
    if users.is_empty() {
        return why_none_reached(view).into_iter().collect();
    }
    let mut reasons = Vec::new();
    for user in users.iter().take(NAMED) {
        let id = EndUserId::from(user.clone());
        let found = state
            .audience
            .get_user(&session.principal, env, &id)
            .await
            .ok();
        reasons.extend(why_not_reached(user, found.as_ref()));
    }
    reasons
}

/// An invocation's progress and, for users named in its target, the cards it gave them, read
/// again in place each second (by the console's script) until the invocation ends.
async fn invocation(
    state: web::Data<AppState>,
    session: Session,
    path: web::Path<(EnvironmentId, FlowId, InvocationId)>,
) -> Result<HttpResponse, Refusal> {
    let (env, flow_id, id) = path.into_inner();
    let who = &session.principal;
    let view = match state.instances.invocation(who, &env, &flow_id, &id).await {
        Ok(v) => v,
        Err(err) => return page::unreadable(err, "Invocation"),
    };
    let users = named_users(&view);
    let cards = named_cards(&state, &session, &env, &view, &users).await;
    let reasons = missed(&state, &session, &env, &view, &users).await;
    let graph = match &view.instances {
        Some(_) => {
            graph_of(
                &state,
                &session,
                &env,
                &flow_id,
                view.invocation.flow_version,
            )
            .await
        }
        None => None,
    };
    let running = !view.status().is_final();
    let title = format!("Invocation {id}");
    let flow_page = format!("{ROOT}/{env}/flows/{flow_id}");
    let here = format!("{flow_page}/invocations/{}", page::url_path(&id));
    let content = html! {
        p {
            a href=(flow_page) { "Back to the flow" }
            // Without the script, the page is read again by hand; with it, the progress and
            // the cards are read again each second in place (nothing else on the page moves).
            @if running { " · " a href=(here) { "Refresh" } }
        }
        div #live data-poll=[running.then_some("1000")] data-poll-url=(here) {
        (progress(&view, &reasons))
        @if let Some(counts) = &view.instances {
            (instances_section(counts, graph.as_ref(), &users, &here))
        }
        (cards_section(&cards))
        }
    };
    let body = framed(&state, &session, &env, "flows", &title, content).await?;
    Ok(respond(StatusCode::OK, body))
}

/// The cards the invocation gave the users its target names (the first [`NAMED`]), for a key
/// that may read cards.
async fn named_cards(
    state: &AppState,
    session: &Session,
    env: &EnvironmentId,
    view: &InvocationView,
    users: &[String],
) -> Vec<domain::card::CardInstance> {
    let mut cards = Vec::new();
    if !session.may(env, Permission::CardsWrite) {
        return cards;
    }
    for user in users.iter().take(NAMED) {
        let user_id = EndUserId::from(user.clone());
        if let Ok(feed) = state
            .cards
            .feed(&session.principal, env, &user_id, None)
            .await
        {
            let of_it = feed
                .into_iter()
                .filter(|c| c.invocation_id == view.invocation.id.as_str());
            cards.extend(of_it);
        }
    }
    cards
}

/// The invocation's status and totals, and why it missed users.
fn progress(view: &InvocationView, reasons: &[String]) -> Markup {
    let inv = &view.invocation;
    html! {
    section.card aria-labelledby="progress" {
        h2 #progress { "Progress" }
        p aria-live="polite" {
            "Status " span.status #invocation-status { (view.status().as_str()) }
            " · " (inv.mode.as_str()) " · v" (inv.flow_version)
            " · users targeted " (inv.users_targeted)
            " · cards created " (inv.cards_created)
        }
        @if !reasons.is_empty() {
            div.alert #missed role="status" {
                p { "Not every user was reached:" }
                ul { @for r in reasons { li { (r) } } }
            }
        }
        @if !inv.errors.is_empty() {
            ul.errors { @for e in &inv.errors { li { (e) } } }
        }
    }
    }
}

/// The invocation's instances by state, its graph with their counts, and links to the named
/// users' instances.
fn instances_section(
    counts: &InstanceCounts,
    graph: Option<&StepGraph>,
    users: &[String],
    here: &str,
) -> Markup {
    let totals = step_totals(counts);
    html! {
        section.card aria-labelledby="instances" {
            h2 #instances { "Instances" }
            div.scroll { table #instance-states {
                caption.muted { "Instances by state" }
                thead { tr { @for state in counts.instances.keys() {
                    th scope="col" { (state) } } } }
                tbody { tr { @for n in counts.instances.values() { td { (n) } } } }
            } }
            @if let Some(g) = graph {
                (g.draw("The steps of this invocation", &Marks::Counts(&totals)))
            }
            @if !users.is_empty() {
                h3 { "One user's path" }
                ul.actions.links { @for u in users.iter().take(NAMED) {
                    li { a href={ (here) "/users/" (page::url_path(u)) } { (u) } }
                } }
            }
        }
    }
}

fn cards_section(cards: &[domain::card::CardInstance]) -> Markup {
    html! {
        section.card aria-labelledby="cards" {
            h2 #cards { "Cards" }
            @if cards.is_empty() {
                p.muted { "No card in the named users' feeds from this invocation." }
            } @else {
                div.scroll { table {
                    thead { tr { th scope="col" { "User" } th scope="col" { "Card" } th scope="col"
                        { "Status" } th scope="col" { "Content" } } }
                    tbody { @for c in cards { tr.card-row {
                        td { (c.user_id) }
                        td { (c.template_name) }
                        td { span.status { (c.status.as_str()) } }
                        td { code { (c.content.text()) } }
                    } } }
                } }
            }
        }
    }
}

/// One user's instance: its state, its path on the graph, and each step it reached in order.
async fn instance(
    state: web::Data<AppState>,
    session: Session,
    path: web::Path<(EnvironmentId, FlowId, InvocationId, String)>,
) -> Result<HttpResponse, Refusal> {
    let (env, flow_id, id, user) = path.into_inner();
    let who = &session.principal;
    let found = match state
        .instances
        .instance(who, &env, &flow_id, &id, &user)
        .await
    {
        Ok(i) => i,
        Err(err) => return page::unreadable(err, "Instance"),
    };
    let graph = graph_of(&state, &session, &env, &flow_id, found.flow_version).await;
    let title = format!("{user}'s path");
    let back = format!(
        "{ROOT}/{env}/flows/{flow_id}/invocations/{}",
        page::url_path(&id)
    );
    let mut steps: Vec<_> = found.records.iter().collect();
    steps.sort_by_key(|(_, r)| r.order);
    let when = |t: &domain::Timestamp| t.format("%Y-%m-%d %H:%M:%S UTC").to_string();
    let content = html! {
        p { a href=(back) { "Back to the invocation" } }
        section.card aria-labelledby="state" {
            h2 #state { "Instance" }
            p { "State " span.status #instance-state { (found.state.as_str()) }
                " · v" (found.flow_version) " · started " (when(&found.created))
                @if let Some(due) = &found.due { " · next deadline " (when(due)) } }
            @if let Some(g) = &graph { (g.draw(&title, &Marks::Path(&found.records))) }
        }
        section.card aria-labelledby="path" {
            h2 #path { "Steps reached, in order" }
            div.scroll { table #path-steps {
                thead { tr { th scope="col" { "Step" } th scope="col" { "State" }
                    th scope="col" { "Started" } th scope="col" { "Ended" }
                    th scope="col" { "Card" } } }
                tbody { @for (step, r) in &steps { tr {
                    th scope="row" { code { (step) } }
                    td { (step_state(&r.state)) }
                    td { (when(&r.started)) }
                    td { (r.finished.as_ref().map(when).unwrap_or_default()) }
                    td { @if let Some(card) = &r.card { code { (card) } } }
                } } }
            } }
        }
    };
    let body = framed(&state, &session, &env, "flows", &title, content).await?;
    Ok(respond(StatusCode::OK, body))
}

/// A step's state in words: "waiting until …", "done: submitted", "failed: why".
fn step_state(state: &domain::flow::steps::StepState) -> String {
    use domain::flow::steps::StepState;
    match state {
        StepState::Waiting { deadline } => {
            format!("waiting until {}", deadline.format("%Y-%m-%d %H:%M:%S UTC"))
        }
        StepState::Done { outcome, .. } => format!("done: {}", outcome.as_str()),
        StepState::Failed { error } => format!("failed: {error}"),
        other => other.status().as_str().to_owned(),
    }
}
