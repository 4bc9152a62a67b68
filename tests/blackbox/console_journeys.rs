//! The console's journeys for flows that wait and branch, in a real headless Chromium (as in
//! `console`): a flow made from an example, edited in the form and published with one click;
//! its graph with live counts, one user's path, its insights and a card preview; a test send
//! that explains itself; and axe-core's accessibility check of every console page, which
//! must find no serious or critical violation.
//!
//! axe-core comes from the npm registry (`npm ci --prefix tests/a11y`, which `.ci/run` runs);
//! without it the check is skipped, unless `CI` is set. With `WORKBENCH_SCREENSHOTS=DIR` each
//! journey saves its pages at a laptop's and a phone's width (docs/console/).

use std::time::Duration;

use fantoccini::Locator;
use serde_json::{json, Value};

use crate::console::{browser_sign_in, Browser};
use crate::console_steps::rating_flow;
use crate::support::{call, Server};
use crate::trigger::{fire, flow_publishing, invocation_id};

/// Saves the page as `name` (laptop) and `name-phone`, each as tall as needed, then puts the
/// window back.
async fn shots(b: &Browser, name: &str) {
    if std::env::var_os("WORKBENCH_SCREENSHOTS").is_none() {
        return;
    }
    for (suffix, width) in [("", 1280), ("-phone", 390)] {
        b.c().set_window_size(width, 800).await.expect("resize");
        let height = b
            .c()
            .execute("return document.documentElement.scrollHeight;", vec![])
            .await
            .ok()
            .and_then(|h| h.as_u64())
            .unwrap_or(800)
            .clamp(600, 2400);
        b.c()
            .set_window_size(width, u32::try_from(height).unwrap_or(2400))
            .await
            .expect("resize");
        b.shot(&format!("{name}{suffix}")).await;
    }
    b.c().set_window_size(1280, 800).await.expect("resize");
}

async fn goto(b: &Browser, s: &Server, path: &str) {
    b.c().goto(&s.url(path)).await.expect("goto");
}

/// A week of daily totals for `flow`, written as the engine writes them.
fn a_week_of_totals(s: &Server, flow: &str) {
    let today = chrono::Utc::now().date_naive();
    for back in 1..=6i64 {
        let day = today - chrono::Duration::days(back);
        for (metric, n) in [
            ("events.card-published", 20 + back * 3),
            ("events.card-completed", 8 + back * 2),
            ("events.card-dismissed", back),
        ] {
            adapters_diesel::testing::raw_execute(
                s.database_url(),
                &format!(
                    "INSERT INTO flow_totals (environment_id, flow_id, day, flow_version, \
                     folder_id, mode, metric, shard, n) VALUES ('{}', '{flow}', '{day}', 1, '', \
                     'live', '{metric}', 0, {n})",
                    s.env
                ),
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_a_browser_a_flow_from_an_example_is_edited_in_the_form_and_published_in_one_click() {
    let Some(b) = Browser::start().await else {
        return;
    };
    let s = Server::start(adapters_diesel::testing::TestDatabase::sqlite()).await;
    browser_sign_in(&b, &s, &s.admin_client_id, &s.admin_secret).await;
    b.fill("#flow-name", "Feedback").await;
    b.element("#flow-example")
        .await
        .select_by_value("twoSteps")
        .await
        .expect("example");
    b.click("form[action$='/flows'][method=post] button[type=submit]")
        .await;
    b.until(".notice", "created").await;
    b.until("#steps", "Steps").await;
    // The form changes the first card's words, and adds a wait after it.
    let headline = b
        .element("form[action$='/edit/template'] input[name=headline]")
        .await;
    headline.clear().await.expect("clear");
    headline
        .send_keys("Tell us how it went")
        .await
        .expect("type");
    b.click("form[action$='/edit/template'] button").await;
    b.until(".notice", "saved").await;
    b.fill("#add-id", "pause").await;
    b.element("#add-kind")
        .await
        .select_by_value("wait")
        .await
        .expect("kind");
    b.fill("#add-amount", "3").await;
    b.click("form[action$='/edit/add'] button").await;
    b.until(".notice", "saved").await;
    b.until("figure.graph", "Wait · pause").await;
    shots(&b, "flow-form").await;
    // One click publishes the draft the form saved.
    b.click("button[value=publish]").await;
    b.until(".notice", "published").await;
    b.until("section[aria-labelledby=about]", "active").await;
    let text = b.text("#config").await;
    let config: Value = serde_json::from_str(
        &b.element("#config")
            .await
            .prop("value")
            .await
            .expect("value")
            .unwrap_or(text),
    )
    .expect("json");
    assert_eq!(config["steps"]["pause"]["properties"]["duration"], "P3D");
    b.end().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_a_browser_a_graph_shows_live_counts_a_path_insights_and_a_preview() {
    let Some(b) = Browser::start().await else {
        return;
    };
    let s = Server::start(adapters_diesel::testing::TestDatabase::sqlite()).await;
    let flow = flow_publishing(&s, "Ratings", rating_flow()).await;
    let reply = fire(
        &s,
        &flow,
        "start",
        json!({"flows": [{"target": {"type": "user", "targetUserIds": ["u1", "u2", "u3"]}}]}),
    )
    .await;
    let invocation = invocation_id(&reply);
    a_week_of_totals(&s, &flow);
    browser_sign_in(&b, &s, &s.admin_client_id, &s.admin_secret).await;
    let base = format!("/console/{}/flows/{flow}", s.env);
    for _ in 0..50 {
        goto(&b, &s, &base).await;
        if b.text("figure.graph")
            .await
            .contains("3 reached · 3 waiting")
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    b.until("figure.graph", "3 reached · 3 waiting").await;
    shots(&b, "graph").await;

    goto(&b, &s, &format!("{base}/invocations/{invocation}")).await;
    b.until("#instance-states", "active").await;
    b.click("a[href$='/users/u2']").await;
    b.until("#instance-state", "active").await;
    b.until("figure.graph", "not reached").await;
    shots(&b, "path").await;

    goto(&b, &s, &format!("{base}/insights?days=7")).await;
    b.until("#insights-table", "Each day's totals").await;
    let rows = b
        .c()
        .find_all(Locator::Css("#insights-table tbody tr"))
        .await
        .expect("rows");
    assert_eq!(rows.len(), 7, "a row a day");
    shots(&b, "insights").await;

    goto(&b, &s, &format!("{base}/preview")).await;
    b.until(".previews", "Hi there, rate us").await;
    b.fill("#sample-firstName", "Ada").await;
    b.click("form[action$='/preview'] button").await;
    b.until(".previews", "Hi Ada, rate us").await;
    shots(&b, "preview").await;
    b.end().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_a_browser_a_test_send_explains_itself_then_arrives() {
    let Some(b) = Browser::start().await else {
        return;
    };
    let s = Server::start(adapters_diesel::testing::TestDatabase::sqlite()).await;
    let one_step = include_str!("../../crates/api-actix/src/examples/one-step.json");
    flow_publishing(&s, "Welcome", serde_json::from_str(one_step).expect("json")).await;
    let put = call(
        &s,
        "PUT",
        &format!("/v1/{}/users/user-7", s.env),
        Some(&s.admin_secret),
        Some(json!({})),
    )
    .await;
    assert_eq!(put.status, 200, "{}", put.text);
    browser_sign_in(&b, &s, &s.admin_client_id, &s.admin_secret).await;
    let user = format!("/console/{}/users/user-7", s.env);
    goto(&b, &s, &user).await;
    b.click("form[action$='/send-test'] button").await;
    b.until(
        "#missed",
        "user-7 is not a test user: test sends only reach test users",
    )
    .await;
    shots(&b, "test-send").await;
    goto(&b, &s, &user).await;
    b.click("form[action$='/test-user'] button").await;
    b.until("#test-user", "yes").await;
    b.click("form[action$='/send-test'] button").await;
    b.text("#invocation-status").await;
    for _ in 0..50 {
        if b.text("section[aria-labelledby=progress]")
            .await
            .contains("cards created 1")
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
        b.c().refresh().await.expect("refresh");
    }
    b.until("section[aria-labelledby=progress]", "cards created 1")
        .await;
    assert!(b.c().find(Locator::Css("#missed")).await.is_err());
    b.end().await;
}

/// axe-core's source, or none (then the check skips, unless `CI` is set).
fn axe() -> Option<String> {
    let path = std::env::var("AXE_CORE").unwrap_or_else(|_| {
        concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../tests/a11y/node_modules/axe-core/axe.min.js"
        )
        .to_owned()
    });
    match std::fs::read_to_string(&path) {
        Ok(source) => Some(source),
        Err(_) => {
            assert!(
                std::env::var_os("CI").is_none(),
                "CI is set and {path} is missing: run npm ci --prefix tests/a11y"
            );
            eprintln!("skipped: no {path} (npm ci --prefix tests/a11y)");
            None
        }
    }
}

/// The serious and critical violations axe-core finds on the page shown.
async fn violations(b: &Browser, axe: &str) -> Vec<String> {
    b.c().execute(axe, vec![]).await.expect("axe loads");
    let found = b
        .c()
        .execute_async(
            "const done = arguments[arguments.length - 1];\
             axe.run(document, {resultTypes: ['violations']}).then(r => done(r.violations\
               .filter(v => v.impact === 'serious' || v.impact === 'critical')\
               .map(v => v.id + ' (' + v.impact + '): ' + v.nodes.slice(0, 3)\
                 .map(n => n.target.join(' ')).join(', '))));",
            vec![],
        )
        .await
        .expect("axe runs");
    // Anything but a list of strings is axe failing, not a page passing.
    serde_json::from_value(found.clone()).unwrap_or_else(|e| panic!("axe answered {found}: {e}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_a_browser_axe_finds_no_serious_violation_on_any_console_page() {
    let Some(axe) = axe() else {
        return;
    };
    let Some(b) = Browser::start().await else {
        return;
    };
    let s = Server::start(adapters_diesel::testing::TestDatabase::sqlite()).await;
    let admin = Some(s.admin_secret.as_str());
    let flow = flow_publishing(&s, "Ratings", rating_flow()).await;
    let invocation = invocation_id(
        &fire(
            &s,
            &flow,
            "start",
            json!({"flows": [{"target": {"type": "user", "targetUserIds": ["u1"]}}]}),
        )
        .await,
    );
    a_week_of_totals(&s, &flow);
    let folder = call(
        &s,
        "POST",
        &format!("/v1/{}/workbench-folder", s.env),
        admin,
        Some(json!({"name": "Onboarding"})),
    )
    .await;
    let folder = folder.body["data"]["id"]
        .as_str()
        .expect("folder")
        .to_owned();
    b.c().goto(&s.url("/console/sign-in")).await.expect("goto");
    let mut found = Vec::new();
    for v in violations(&b, &axe).await {
        found.push(format!("/console/sign-in: {v}"));
    }
    browser_sign_in(&b, &s, &s.admin_client_id, &s.admin_secret).await;
    let env = &s.env;
    let base = format!("/console/{env}/flows/{flow}");
    // Read once so that u1's instance is there to show.
    page_until_browser(
        &b,
        &s,
        &format!("{base}/invocations/{invocation}"),
        "instance-states",
    )
    .await;
    let pages = [
        format!("/console/{env}/flows"),
        base.clone(),
        format!("{base}?counts=test"),
        format!("{base}/runs"),
        format!("{base}/invocations/{invocation}"),
        format!("{base}/invocations/{invocation}/users/u1"),
        format!("{base}/insights"),
        format!("{base}/preview"),
        format!("/console/{env}/folders"),
        format!("/console/{env}/folders/{folder}/insights"),
        format!("/console/{env}/users"),
        format!("/console/{env}/users/u1"),
        format!("/console/{env}/segments"),
        format!("/console/{env}/streams"),
        format!("/console/{env}/webhooks"),
        format!("/console/{env}/push"),
        format!("/console/{env}/credentials"),
    ];
    for page in &pages {
        goto(&b, &s, page).await;
        b.text("main h1").await;
        for v in violations(&b, &axe).await {
            found.push(format!("{page}: {v}"));
        }
    }
    assert!(
        found.is_empty(),
        "serious or critical violations:\n{}",
        found.join("\n")
    );
    b.end().await;
}

/// Opens `path` until its page holds `needle`.
async fn page_until_browser(b: &Browser, s: &Server, path: &str, needle: &str) {
    for _ in 0..50 {
        goto(b, s, path).await;
        let source = b.c().source().await.unwrap_or_default();
        if source.contains(needle) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    panic!("{path} never held {needle}");
}
