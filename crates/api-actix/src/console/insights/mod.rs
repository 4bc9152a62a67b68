//! Insights (contract §14): a flow's or a folder's daily totals over 7, 30 or 90 days, as a
//! chart drawn here ([`chart`]) with the same numbers in a table beside it; a flow's by version.

mod chart;

use std::collections::BTreeMap;

use actix_web::http::StatusCode;
use actix_web::{web, HttpResponse};
use chrono::{Duration, NaiveDate};
use domain::id::{EnvironmentId, FlowId, FolderId};
use domain::stats::{event_metric, Stats, StatsQuery, CARD_METRICS};
use maud::{html, Markup, PreEscaped};
use serde::Deserialize;

use super::framed;
use super::page;
use super::session::{Refusal, Session};
use super::shell::{respond, ROOT};
use crate::AppState;
use chart::Day;

/// The ranges offered, in days.
const RANGES: [i64; 3] = [7, 30, 90];

pub(super) fn configure(cfg: &mut web::ServiceConfig) {
    cfg.route("/console/{env}/flows/{id}/insights", web::get().to(flow))
        .route(
            "/console/{env}/folders/{id}/insights",
            web::get().to(folder),
        );
}

#[derive(Deserialize, Default)]
struct InsightsQuery {
    days: Option<i64>,
    version: Option<String>,
    mode: Option<String>,
}

impl InsightsQuery {
    fn days(&self) -> i64 {
        self.days.filter(|d| RANGES.contains(d)).unwrap_or(30)
    }

    fn test(&self) -> bool {
        self.mode.as_deref() == Some("test")
    }

    /// The statistics query of the range that ends `today`.
    fn stats(&self, today: NaiveDate) -> StatsQuery {
        let from = today
            .checked_sub_signed(Duration::days(self.days() - 1))
            .unwrap_or(today);
        StatsQuery {
            from: Some(from.format("%Y-%m-%d").to_string()),
            to: Some(today.format("%Y-%m-%d").to_string()),
            version: self.version.clone().filter(|v| !v.is_empty()),
            mode: self.test().then(|| "test".to_owned()),
        }
    }
}

/// Every day of the range, versions added up, a day with nothing at zero.
fn every_day(stats: &Stats) -> Vec<Day> {
    let mut by_date: BTreeMap<NaiveDate, Day> = BTreeMap::new();
    let mut d = stats.from;
    while d <= stats.to {
        let zero = Day {
            date: d,
            published: 0,
            completed: 0,
            dismissed: 0,
        };
        by_date.insert(d, zero);
        match d.succ_opt() {
            Some(next) => d = next,
            None => break,
        }
    }
    let (published, completed, dismissed) = (
        event_metric("card-published"),
        event_metric("card-completed"),
        event_metric("card-dismissed"),
    );
    for day in &stats.days {
        if let Some(entry) = by_date.get_mut(&day.date) {
            entry.published = entry.published.saturating_add(day.count(&published));
            entry.completed = entry.completed.saturating_add(day.count(&completed));
            entry.dismissed = entry.dismissed.saturating_add(day.count(&dismissed));
        }
    }
    by_date.into_values().collect()
}

/// The range, mode (and for a flow, version) choices, the chart and its table.
fn insights(
    base: &str,
    query: &InsightsQuery,
    versions: u32,
    stats: &Stats,
    title: &str,
) -> Markup {
    let days = every_day(stats);
    let link = |days: i64, test: bool| {
        let version = query.version.as_deref().unwrap_or("");
        let mode = if test { "test" } else { "live" };
        format!("{base}?days={days}&mode={mode}&version={version}")
    };
    html! {
        nav aria-label="Range" { ul.actions.links {
            @for d in RANGES { li { a href=(link(d, query.test()))
                aria-current=[(d == query.days()).then_some("page")] { (d) " days" } } }
            li { a href=(link(query.days(), !query.test())) {
                @if query.test() { "Show live runs" } @else { "Show test runs" } } }
        } }
        @if versions > 0 {
            form.inline method="get" action=(base) aria-label="Version" {
                input type="hidden" name="days" value=(query.days());
                input type="hidden" name="mode" value=(if query.test() { "test" } else { "live" });
                div.field {
                    label for="insights-version" { "Version" }
                    select #insights-version name="version" {
                        option value="" { "All versions" }
                        @for v in (1..=versions).rev() {
                            option value=(v) selected[query.version.as_deref()
                                == Some(v.to_string().as_str())] { "v" (v) }
                        }
                    }
                }
                button.secondary type="submit" { "Show" }
            }
        }
        section.card aria-labelledby="chart" {
            h2 #chart { (if query.test() { "Test" } else { "Live" }) " runs, "
                (stats.from) " to " (stats.to) }
            div.insights {
                figure.chart {
                    div.scroll tabindex="0" role="region" aria-label="The chart" {
                        (PreEscaped(chart::draw(title, &days))) }
                    figcaption { (PreEscaped(chart::legend())) }
                }
                div.scroll.numbers tabindex="0" role="region" aria-label="Each day's totals" {
                    table #insights-table {
                    caption { "Each day's totals" }
                    thead { tr { th scope="col" { "Day" } th scope="col" { "Published" }
                        th scope="col" { "Completed" } th scope="col" { "Dismissed" }
                        th scope="col" { "Completion rate" } } }
                    tbody { @for d in days.iter().rev() { tr {
                        th scope="row" { (d.date) }
                        td { (d.published) } td { (d.completed) } td { (d.dismissed) }
                        td { @match d.rate() { Some(r) => { (format!("{:.0}%", r * 100.0)) },
                            None => { span.muted { "–" } } } }
                    } } }
                } }
            }
        }
    }
}

async fn flow(
    state: web::Data<AppState>,
    session: Session,
    path: web::Path<(EnvironmentId, FlowId)>,
    query: web::Query<InsightsQuery>,
) -> Result<HttpResponse, Refusal> {
    let (env, id) = path.into_inner();
    let who = &session.principal;
    let flow = match state.flows.get(who, &env, &id).await {
        Ok(f) => f,
        Err(err) => return page::unreadable(err, "Insights"),
    };
    let stats = match state
        .stats
        .flow_metrics(
            who,
            &env,
            &id,
            &query.stats(state.stats.today()),
            Some(&CARD_METRICS),
        )
        .await
    {
        Ok(s) => s,
        Err(err) => return page::unreadable(err, "Insights"),
    };
    let title = format!("Insights: {}", flow.name);
    let back = format!("{ROOT}/{env}/flows/{id}");
    let content = html! {
        p { a href=(back) { "Back to the flow" } }
        (insights(&format!("{back}/insights"), &query, flow.latest_version, &stats, &title))
    };
    let body = framed(&state, &session, &env, "flows", &title, content).await?;
    Ok(respond(StatusCode::OK, body))
}

async fn folder(
    state: web::Data<AppState>,
    session: Session,
    path: web::Path<(EnvironmentId, FolderId)>,
    query: web::Query<InsightsQuery>,
) -> Result<HttpResponse, Refusal> {
    let (env, id) = path.into_inner();
    let who = &session.principal;
    let query = InsightsQuery {
        version: None,
        ..query.into_inner()
    };
    let stats = match state
        .stats
        .folder_metrics(
            who,
            &env,
            &id,
            &query.stats(state.stats.today()),
            Some(&CARD_METRICS),
        )
        .await
    {
        Ok(s) => s,
        Err(err) => return page::unreadable(err, "Insights"),
    };
    let name = state
        .folders
        .list(who, &env)
        .await
        .ok()
        .and_then(|all| all.into_iter().find(|f| f.id == id))
        .map_or_else(|| id.as_str().to_owned(), |f| f.name);
    let title = format!("Insights: {name} (folder)");
    let base = format!("{ROOT}/{env}/folders/{id}/insights");
    let content = html! {
        p { a href={ (ROOT) "/" (env) "/folders" } { "Back to the folders" } }
        p.muted { "The flows in this folder and its subfolders when their instances started." }
        (insights(&base, &query, 0, &stats, &title))
    };
    let body = framed(&state, &session, &env, "folders", &title, content).await?;
    Ok(respond(StatusCode::OK, body))
}
