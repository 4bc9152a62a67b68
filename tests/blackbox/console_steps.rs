//! The console's pages for flows that wait and branch (contract §21) and for what a flow did,
//! over plain HTTP on both backends: the step graph with its counts, one user's path, the
//! insights chart, card previews, test sends that say why they missed a user, and the one
//! "Publish" of the editor. Their journeys in Chromium are in `console_journeys`.

use std::time::Duration;

use serde_json::{json, Value};

use crate::console::{csrf, get, pair, plain, sign_in};
use crate::steps::{card_step, program};
use crate::support::{blackbox, call, Server};
use crate::trigger::{fire, flow_publishing, invocation_id};

/// `survey` makes a card; `ask` waits a day for it; `route` thanks a rating of 4 or more; a
/// card not answered in time waits an hour (`pause`) before `sorry`.
pub(crate) fn rating_flow() -> Value {
    let mut config = program(
        &["survey"],
        json!({
            "survey": card_step("survey", &["ask"]),
            "ask": {"type": "wait-for-card", "properties": {"cardStep": "survey",
                "timeout": "P1D", "on": {"submitted": ["route"], "timeout": ["pause"]}}},
            "pause": {"type": "wait", "properties": {"duration": "PT1H"}, "next": ["sorry"]},
            "route": {"type": "branch", "properties": {"conditions": [
                {"if": {"variable": "steps.ask.values.rating", "op": "greaterOrEqual",
                        "value": 4}, "next": ["thanks"]}], "otherwise": ["sorry"]}},
            "thanks": card_step("thanks", &[]),
            "sorry": card_step("sorry", &[]),
        }),
        &["survey", "thanks", "sorry"],
        json!({"firstName": {"type": "string", "source": "event", "default": "there"}}),
    );
    config["cardTemplates"]["survey"]["defaultView"]["content"][0]["attributes"]["text"] =
        json!("Hi %{firstName}, rate us");
    config
}

/// Reads `path` until its page holds `needle` (the engine works in the background).
pub(crate) async fn page_until(s: &Server, cookie: &str, path: &str, needle: &str) -> String {
    let mut page = String::new();
    for _ in 0..100 {
        let (status, text) = get(s, cookie, path).await;
        assert_eq!(status, 200, "{path}: {text}");
        if text.contains(needle) {
            return text;
        }
        page = text;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("{path} never held {needle:?}:\n{page}")
}

async fn a_flows_graph_counts_its_runs_and_draws_one_users_path(s: Server) {
    let flow = flow_publishing(&s, "Ratings", rating_flow()).await;
    let reply = fire(
        &s,
        &flow,
        "start",
        json!({"flows": [{"target": {"type": "user", "targetUserIds": ["u1"]}}]}),
    )
    .await;
    let invocation = invocation_id(&reply);
    let cookie = pair(&sign_in(&s, &s.admin_client_id, &s.admin_secret).await);
    let base = format!("/console/{}/flows/{flow}", s.env);

    // The flow's page draws each step with what it did: u1 waits at `ask`.
    let page = page_until(&s, &cookie, &base, "1 reached · 1 waiting").await;
    for text in [
        "<svg",
        "Wait for card · ask",
        "Branch · route",
        "if rating of ask",
        "Wait · pause",
        "for 1 hour",
        "0 reached · 0 waiting",
    ] {
        assert!(page.contains(text), "{text}");
    }
    assert!(page.contains("The steps as a table"));
    let test_counts = page_until(
        &s,
        &cookie,
        &format!("{base}?counts=test"),
        "Counts of test",
    )
    .await;
    assert!(
        !test_counts.contains("1 reached · 1 waiting"),
        "no test run yet"
    );

    // The invocation: running while u1 waits, its instances by state, a link to u1's path.
    let inv_page = format!("{base}/invocations/{invocation}");
    let page = page_until(&s, &cookie, &inv_page, "instance-states").await;
    assert!(page.contains(">running<"), "an instance waits");
    let path = format!("{inv_page}/users/u1");
    assert!(page.contains(&format!("href=\"{path}\"")), "{page}");
    let page = page_until(&s, &cookie, &path, "instance-state").await;
    assert!(page.contains("step listen waiting"), "{page}");
    assert!(page.contains("step card reached"));
    assert_eq!(
        page.matches(" unreached\"").count(),
        4,
        "route, pause, thanks, sorry"
    );
    assert!(page.contains("waiting until "));
    let (status, _) = get(&s, &cookie, &format!("{inv_page}/users/nobody")).await;
    assert_eq!(status, 404);

    // Insights: today's card, and a week of totals put in as the engine writes them.
    let today = chrono::Utc::now().date_naive();
    for back in 1..=6 {
        let day = today - chrono::Duration::days(back);
        for (metric, n) in [
            ("events.card-published", 10),
            ("events.card-completed", back),
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
    let page = page_until(
        &s,
        &cookie,
        &format!("{base}/insights?days=7"),
        "Over 7 days",
    )
    .await;
    assert!(
        page.contains("Over 7 days: 61 published, 21 completed, 0 dismissed"),
        "{page}"
    );
    assert_eq!(
        page.matches("<polyline").count(),
        3 + 3,
        "three lines and the legend's"
    );
    assert!(
        page.contains("insights-table") && page.contains("<td>60%</td>"),
        "{page}"
    );
    let (status, page) = get(&s, &cookie, &format!("{base}/insights?days=90&version=1")).await;
    assert_eq!(status, 200);
    assert!(page.contains("Over 90 days"));
    let (status, _) = get(&s, &cookie, &format!("{base}/insights?version=x")).await;
    assert_eq!(status, 400, "a version that is not one");

    // The preview renders the cards with the samples typed.
    let page = page_until(
        &s,
        &cookie,
        &format!("{base}/preview?version=1&v.firstName=Ada"),
        "Hi",
    )
    .await;
    assert!(page.contains("Hi Ada, rate us"), "{page}");
    assert!(page.contains("value=\"Ada\""));
    let page = page_until(&s, &cookie, &format!("{base}/preview"), "Hi").await;
    assert!(page.contains("Hi there, rate us"), "the default");
}

async fn a_test_send_says_why_it_missed_a_user_until_they_are_one(s: Server) {
    let flow = flow_publishing(&s, "Welcome", serde_json::from_str(ONE_STEP).expect("json")).await;
    let put = call(
        &s,
        "PUT",
        &format!("/v1/{}/users/u7", s.env),
        Some(&s.admin_secret),
        Some(json!({"tags": ["beta"]})),
    )
    .await;
    assert_eq!(put.status, 200, "{}", put.text);
    let cookie = pair(&sign_in(&s, &s.admin_client_id, &s.admin_secret).await);
    let user_page = format!("/console/{}/users/u7", s.env);
    let (_, page) = get(&s, &cookie, &user_page).await;
    assert!(page.contains("Send a test to this user") && page.contains("Mark as a test user"));
    let token = csrf(&page);
    let post = |path: String, form: Vec<(&'static str, String)>| {
        plain()
            .post(s.url(&path))
            .header("cookie", &cookie)
            .form(&form)
            .send()
    };
    let send = || {
        post(
            format!("{user_page}/send-test"),
            vec![("csrf", token.clone()), ("flow_id", flow.clone())],
        )
    };
    let sent = send().await.expect("send");
    assert_eq!(sent.status(), 303);
    let invocation = sent.headers()["location"]
        .to_str()
        .expect("location")
        .to_owned();
    let page = page_until(&s, &cookie, &invocation, "test sends only reach test users").await;
    assert!(page.contains("u7 is not a test user"), "{page}");

    // Marked a test user, the same send reaches u7.
    let marked = post(
        format!("{user_page}/test-user"),
        vec![("csrf", token.clone()), ("test_user", "on".into())],
    )
    .await
    .expect("mark");
    assert_eq!(marked.status(), 303);
    let (_, page) = get(&s, &cookie, &user_page).await;
    assert!(page.contains("<span id=\"test-user\">yes</span>"), "{page}");
    assert!(page.contains("Unmark as a test user"));
    let stored = call(
        &s,
        "GET",
        &format!("/v1/{}/users/u7", s.env),
        Some(&s.admin_secret),
        None,
    )
    .await;
    assert_eq!(
        stored.body["data"]["tags"],
        json!(["beta"]),
        "the tags are kept"
    );
    let sent = send().await.expect("send");
    let invocation = sent.headers()["location"]
        .to_str()
        .expect("location")
        .to_owned();
    let page = page_until(&s, &cookie, &invocation, "cards created 1").await;
    assert!(!page.contains("id=\"missed\""), "{page}");

    // A flow that is not one: the user's page says so, nothing is sent.
    let refused = post(
        format!("{user_page}/send-test"),
        vec![("csrf", token.clone()), ("flow_id", "flw_nothing".into())],
    )
    .await
    .expect("send");
    assert_eq!(refused.status(), 404);
    assert!(refused.text().await.expect("body").contains("End user u7"));
}

async fn publish_does_what_the_editor_means(s: Server) {
    let cookie = pair(&sign_in(&s, &s.admin_client_id, &s.admin_secret).await);
    let (_, page) = get(&s, &cookie, &format!("/console/{}/flows", s.env)).await;
    let token = csrf(&page);
    let post = |path: String, form: Vec<(&'static str, String)>| {
        plain()
            .post(s.url(&path))
            .header("cookie", &cookie)
            .form(&form)
            .send()
    };
    let made = post(
        format!("/console/{}/flows", s.env),
        vec![
            ("csrf", token.clone()),
            ("name", "From an example".into()),
            ("example", "oneStep".into()),
        ],
    )
    .await
    .expect("create");
    assert_eq!(made.status(), 303);
    let location = made.headers()["location"]
        .to_str()
        .expect("location")
        .to_owned();
    let flow_page = location.split('?').next().expect("path").to_owned();
    let (_, page) = get(&s, &cookie, &flow_page).await;
    assert!(
        page.contains("draft"),
        "a new flow from an example holds a draft"
    );
    let publish = || {
        post(
            format!("{flow_page}/config"),
            vec![
                ("csrf", token.clone()),
                ("action", "publish".into()),
                ("config", ONE_STEP.into()),
            ],
        )
    };
    let published = publish().await.expect("publish");
    assert_eq!(published.status(), 303);
    assert!(published.headers()["location"]
        .to_str()
        .expect("l")
        .ends_with("done=published"));
    let (_, page) = get(&s, &cookie, &flow_page).await;
    assert!(
        page.contains("<span class=\"status\">active</span>"),
        "{page}"
    );

    // Approvals on: the text is kept as the draft, and the page says who must approve it.
    let on = call(
        &s,
        "PUT",
        &format!("/v1/{}/settings", s.env),
        Some(&s.admin_secret),
        Some(json!({"approvalsEnabled": true})),
    )
    .await;
    assert_eq!(on.status, 200, "{}", on.text);
    let kept = publish().await.expect("publish");
    assert_eq!(kept.status(), 303);
    let location = kept.headers()["location"].to_str().expect("l").to_owned();
    assert!(location.ends_with("done=awaiting"), "{location}");
    let (_, page) = get(&s, &cookie, &location).await;
    assert!(page.contains("must approve it"), "{page}");
    assert!(
        page.contains(&s.admin_client_id),
        "names the key that may not approve: {page}"
    );
}

async fn the_form_edits_a_flow_without_json(s: Server) {
    let flow = flow_publishing(&s, "Ratings", rating_flow()).await;
    let cookie = pair(&sign_in(&s, &s.admin_client_id, &s.admin_secret).await);
    let base = format!("/console/{}/flows/{flow}", s.env);
    let (_, page) = get(&s, &cookie, &base).await;
    assert!(page.contains("Edit in a form"), "{page}");
    // Each outcome's row shows where it leads now, so saving it unchanged changes nothing.
    let row = |page: &str, id: &str| {
        let at = page.find(&format!("id=\"{id}\"")).expect(id);
        page[at..at + page[at..].find("</select>").expect("end")].to_owned()
    };
    assert!(row(&page, "o-ask-timeout").contains("value=\"pause\" selected"));
    assert!(row(&page, "o-ask-dismissed").contains("value=\"\" selected"));
    let token = csrf(&page);
    let edit = |kind: &'static str, form: Vec<(&'static str, &'static str)>| {
        let mut form: Vec<(&str, String)> =
            form.into_iter().map(|(k, v)| (k, v.to_owned())).collect();
        form.push(("csrf", token.clone()));
        plain()
            .post(s.url(&format!("{base}/edit/{kind}")))
            .header("cookie", &cookie)
            .form(&form)
            .send()
    };
    let saved = edit(
        "add",
        vec![
            ("after", "survey"),
            ("kind", "wait"),
            ("id", "breather"),
            ("amount", "2"),
            ("unit", "hours"),
        ],
    )
    .await
    .expect("add");
    assert_eq!(saved.status(), 303);
    let saved = edit(
        "template",
        vec![
            ("template", "survey"),
            ("headline", "Rate us now"),
            ("text", "One to five"),
            ("button", "Send"),
        ],
    )
    .await
    .expect("words");
    assert_eq!(saved.status(), 303);
    let saved = edit(
        "outcome",
        vec![
            ("step", "ask"),
            ("outcome", "dismissed"),
            ("target", "sorry"),
        ],
    )
    .await
    .expect("outcome");
    assert_eq!(saved.status(), 303);
    let (_, page) = get(&s, &cookie, &base).await;
    for text in ["Wait · breather", "for 2 hours", ">dismissed<", "v2, DRAFT"] {
        assert!(page.contains(text), "{text}: {page}");
    }
    let draft = call(
        &s,
        "GET",
        &format!("/v1/{}/action-flow/{flow}/config/2", s.env),
        Some(&s.admin_secret),
        None,
    )
    .await;
    let config = &draft.body["data"]["config"];
    assert_eq!(
        config["steps"]["survey"]["next"],
        json!(["breather"]),
        "{}",
        draft.text
    );
    assert_eq!(config["steps"]["breather"]["next"], json!(["ask"]));
    assert_eq!(
        config["cardTemplates"]["survey"]["defaultView"]["content"][0]["attributes"]["text"],
        "Rate us now"
    );

    // An edit that does not fit says why, at the top of the page.
    let refused = edit("add", vec![("after", "ask"), ("kind", "card"), ("id", "x")])
        .await
        .expect("add");
    assert_eq!(refused.status(), 400);
    let text = refused.text().await.expect("body");
    assert!(
        text.contains("a step can be added after a card or a wait"),
        "{text}"
    );
    let refused = edit(
        "wait",
        vec![("step", "breather"), ("amount", "lots"), ("unit", "days")],
    )
    .await
    .expect("wait");
    assert_eq!(refused.status(), 400);
    assert!(refused
        .text()
        .await
        .expect("body")
        .contains("must be a whole number"));
}

/// The editor's text on a flow's page, unescaped.
fn editor_text(page: &str) -> String {
    let start = page.find("<textarea id=\"config\"").expect("the editor");
    let open = start + page[start..].find('>').expect("tag") + 1;
    let end = open + page[open..].find("</textarea>").expect("end");
    page[open..end]
        .replace("&quot;", "\"")
        .replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&amp;", "&")
}

async fn the_editor_shows_the_users_own_text_until_the_form_changes_it(s: Server) {
    let flow = flow_publishing(&s, "Kept", serde_json::from_str(ONE_STEP).expect("json")).await;
    let cookie = pair(&sign_in(&s, &s.admin_client_id, &s.admin_secret).await);
    let base = format!("/console/{}/flows/{flow}", s.env);
    let (_, page) = get(&s, &cookie, &base).await;
    let token = csrf(&page);
    // Sent through the API: shown in reading order, not by key name.
    let shown = editor_text(&page);
    let at = |text: &str, needle: &str| text.find(needle).expect(needle);
    assert!(at(&shown, "\"type\"") < at(&shown, "\"steps\""), "{shown}");
    assert!(
        at(&shown, "\"steps\"") < at(&shown, "\"cardTemplates\""),
        "{shown}"
    );
    // Written in the user's own order and spacing: shown again as written.
    let config: Value = serde_json::from_str(ONE_STEP).expect("json");
    let mut own = String::from("{\n    \"cardTemplates\": ");
    own.push_str(&serde_json::to_string(&config["cardTemplates"]).expect("text"));
    own.push_str(",\n    \"steps\": ");
    own.push_str(&serde_json::to_string(&config["steps"]).expect("text"));
    own.push_str(",\n    \"initialSteps\": [\"welcome\"],\n    \"type\": \"card\"\n}");
    let own_config: Value = serde_json::from_str(&own).expect("own");
    assert_eq!(own_config["initialSteps"], config["initialSteps"], "{own}");
    let saved = plain()
        .post(s.url(&format!("{base}/config")))
        .header("cookie", &cookie)
        .form(&[
            ("csrf", token.as_str()),
            ("action", "draft"),
            ("config", own.as_str()),
        ])
        .send()
        .await
        .expect("save");
    assert_eq!(saved.status(), 303);
    let (_, page) = get(&s, &cookie, &base).await;
    assert_eq!(editor_text(&page), own);
    // Changed by the form, the text no longer says the draft: reading order again.
    let words = plain()
        .post(s.url(&format!("{base}/edit/template")))
        .header("cookie", &cookie)
        .form(&[
            ("csrf", token.as_str()),
            ("template", "welcome-card"),
            ("headline", "Hello"),
            ("text", ""),
            ("button", ""),
        ])
        .send()
        .await
        .expect("edit");
    assert_eq!(words.status(), 303);
    let (_, page) = get(&s, &cookie, &base).await;
    let shown = editor_text(&page);
    assert_ne!(shown, own);
    assert!(
        at(&shown, "\"type\"") < at(&shown, "\"cardTemplates\""),
        "{shown}"
    );
    assert!(shown.contains("\"Hello\""));
}

const ONE_STEP: &str = include_str!("../../crates/api-actix/src/examples/one-step.json");

blackbox!(
    a_flows_graph_counts_its_runs_and_draws_one_users_path,
    a_test_send_says_why_it_missed_a_user_until_they_are_one,
    publish_does_what_the_editor_means,
    the_form_edits_a_flow_without_json,
    the_editor_shows_the_users_own_text_until_the_form_changes_it,
);
