//! The console (contract §13): its security over plain HTTP on both backends, and its
//! journeys in a real headless Chromium (Debian's `chromium` and `chromium-driver`) on SQLite.
//!
//! Without chromedriver the browser journeys are skipped, unless `CI` is set: then they fail.
//! With `WORKBENCH_SCREENSHOTS=DIR` they save a PNG of each main page there (docs/console/).

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use fantoccini::{Client, ClientBuilder, Locator};
use hyper_util::client::legacy::connect::HttpConnector;
use serde_json::{json, Value};

use crate::support::{blackbox, call, Server};

/// A client that does not follow redirects and keeps no cookies: each test says what it sends.
pub(crate) fn plain() -> reqwest::Client {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .expect("client")
}

/// A key of this server's environment made by the admin command: (client id, secret).
fn key(s: &Server, args: &[&str]) -> (String, String) {
    let mut all = vec!["key", "create", "--env", s.env.as_str()];
    all.extend(args);
    let made = s.admin(&all).expect("key create");
    (
        made["clientId"].as_str().expect("id").to_owned(),
        made["clientSecret"].as_str().expect("secret").to_owned(),
    )
}

/// Signs in over HTTP: the `Set-Cookie` header of the answer.
pub(crate) async fn sign_in(s: &Server, client_id: &str, secret: &str) -> String {
    let reply = plain()
        .post(s.url("/console/sign-in"))
        .form(&[("client_id", client_id), ("client_secret", secret)])
        .send()
        .await
        .expect("sign in");
    assert_eq!(reply.status(), 303);
    assert_eq!(reply.headers()["location"], "/console/");
    reply
        .headers()
        .get("set-cookie")
        .expect("cookie")
        .to_str()
        .expect("text")
        .to_owned()
}

/// The `name=value` part of a `Set-Cookie` header.
pub(crate) fn pair(set_cookie: &str) -> String {
    set_cookie
        .split(';')
        .next()
        .expect("pair")
        .trim()
        .to_owned()
}

pub(crate) async fn get(s: &Server, cookie: &str, path: &str) -> (u16, String) {
    let reply = plain()
        .get(s.url(path))
        .header("cookie", cookie)
        .send()
        .await
        .expect("get");
    let status = reply.status().as_u16();
    (status, reply.text().await.expect("body"))
}

/// The form token a page carries.
pub(crate) fn csrf(page: &str) -> String {
    let at = page.find("name=\"csrf\" value=\"").expect("a form token") + 19;
    page[at..at + 32].to_owned()
}

async fn sessions_are_strict_cookies_for_the_console_only(s: Server) {
    // Signed out: every page leads to the sign-in page.
    let reply = plain()
        .get(s.url(&format!("/console/{}/flows", s.env)))
        .send()
        .await
        .expect("get");
    assert_eq!(reply.status(), 303);
    assert_eq!(reply.headers()["location"], "/console/sign-in");

    // A wrong secret: 401, the page says so, no cookie.
    let reply = plain()
        .post(s.url("/console/sign-in"))
        .form(&[
            ("client_id", s.admin_client_id.as_str()),
            ("client_secret", "wbs_wrong"),
        ])
        .send()
        .await
        .expect("sign in");
    assert_eq!(reply.status(), 401);
    assert!(reply.headers().get("set-cookie").is_none());
    assert!(reply.text().await.expect("body").contains("wrong"));

    let cookie = sign_in(&s, &s.admin_client_id, &s.admin_secret).await;
    for flag in [
        "HttpOnly",
        "SameSite=Strict",
        "Path=/console",
        "Max-Age=3600",
    ] {
        assert!(cookie.contains(flag), "{flag} in {cookie}");
    }
    assert!(!cookie.contains("Secure"), "plain HTTP: {cookie}");
    assert!(pair(&cookie).starts_with("workbench_console=wbt_"));

    // Pages are never cached, framed or allowed to load from elsewhere.
    let reply = plain()
        .get(s.url(&format!("/console/{}/flows", s.env)))
        .header("cookie", pair(&cookie))
        .send()
        .await
        .expect("get");
    assert_eq!(reply.status(), 200);
    assert_eq!(reply.headers()["cache-control"], "no-store");
    assert_eq!(reply.headers()["x-frame-options"], "DENY");
    let policy = reply.headers()["content-security-policy"]
        .to_str()
        .expect("csp");
    assert!(policy.contains("default-src 'none'") && policy.contains("frame-ancestors 'none'"));

    // Another environment: back to signing in, as the API answers 401.
    let other = s.other_env("elsewhere");
    let (status, _) = get(&s, &pair(&cookie), &format!("/console/{other}/flows")).await;
    assert_eq!(status, 200, "the bootstrap key may use every environment");
    let (limited_id, limited_secret) = key(&s, &["--role", "events"]);
    let limited = pair(&sign_in(&s, &limited_id, &limited_secret).await);
    let reply = plain()
        .get(s.url(&format!("/console/{other}/flows")))
        .header("cookie", &limited)
        .send()
        .await
        .expect("get");
    assert_eq!(reply.status(), 303);
}

async fn a_secure_cookie_when_served_over_https(s: Server) {
    let mut s = s;
    s.restart_with(&[("WORKBENCH_PUBLIC_URL", Some("https://console.example"))]);
    let cookie = sign_in(&s, &s.admin_client_id, &s.admin_secret).await;
    assert!(cookie.contains("Secure"), "{cookie}");
}

async fn changes_need_the_form_token_and_this_origin(s: Server) {
    let cookie = pair(&sign_in(&s, &s.admin_client_id, &s.admin_secret).await);
    let (_, page) = get(&s, &cookie, &format!("/console/{}/folders", s.env)).await;
    let token = csrf(&page);
    let path = format!("/console/{}/folders", s.env);
    let post = |form: Vec<(&'static str, String)>, origin: Option<&'static str>| {
        let mut request = plain()
            .post(s.url(&path))
            .header("cookie", &cookie)
            .form(&form);
        if let Some(origin) = origin {
            request = request.header("origin", origin);
        }
        request.send()
    };
    // No token, a wrong token, another site's origin: refused, nothing made.
    for (form, origin) in [
        (vec![("name", "A".to_owned())], None),
        (
            vec![("name", "A".to_owned()), ("csrf", "0".repeat(32))],
            None,
        ),
        (
            vec![("name", "A".to_owned()), ("csrf", token.clone())],
            Some("https://evil.example"),
        ),
    ] {
        let reply = post(form, origin).await.expect("post");
        assert_eq!(reply.status(), 403);
    }
    let cross = plain()
        .post(s.url(&path))
        .header("cookie", &cookie)
        .header("sec-fetch-site", "cross-site")
        .form(&[("name", "A"), ("csrf", token.as_str())])
        .send()
        .await
        .expect("post");
    assert_eq!(cross.status(), 403);
    let folders = call(
        &s,
        "GET",
        &format!("/v1/{}/workbench-folder", s.env),
        Some(&s.admin_secret),
        None,
    )
    .await;
    assert_eq!(
        folders.body["data"].as_array().map(Vec::len),
        Some(0),
        "{}",
        folders.text
    );

    // Another session's token is not this one's, and does not pass for it.
    let other = pair(&sign_in(&s, &s.admin_client_id, &s.admin_secret).await);
    let (_, other_page) = get(&s, &other, &format!("/console/{}/folders", s.env)).await;
    assert_ne!(csrf(&other_page), token);
    let reply = post(
        vec![("name", "A".to_owned()), ("csrf", csrf(&other_page))],
        None,
    )
    .await
    .expect("post");
    assert_eq!(reply.status(), 403);

    // With the token, from this origin: made, and the API's refusal shows in place.
    let made = post(
        vec![("name", "Onboarding".to_owned()), ("csrf", token.clone())],
        None,
    )
    .await
    .expect("post");
    assert_eq!(made.status(), 303);
    let again = post(
        vec![("name", "Onboarding".to_owned()), ("csrf", token.clone())],
        None,
    )
    .await
    .expect("post");
    assert_eq!(again.status(), 409);
    let text = again.text().await.expect("body");
    assert!(
        text.contains("role=\"alert\"") || text.contains("class=\"errors\""),
        "{text}"
    );
    assert!(
        text.contains("value=\"Onboarding\""),
        "what was typed is kept: {text}"
    );
}

async fn a_key_without_a_permission_sees_the_page_read_only(s: Server) {
    let created = call(
        &s,
        "POST",
        &format!("/v1/{}/action-flow", s.env),
        Some(&s.admin_secret),
        Some(json!({"name": "Welcome", "config": serde_json::from_str::<Value>(ONE_STEP).expect("json")})),
    )
    .await;
    let flow = created.body["data"]["id"].as_str().expect("id").to_owned();
    let (id, secret) = key(&s, &["--scope", "action_flows:read"]);
    let cookie = pair(&sign_in(&s, &id, &secret).await);
    let (status, page) = get(&s, &cookie, &format!("/console/{}/flows/{flow}", s.env)).await;
    assert_eq!(status, 200);
    assert!(
        page.contains("Welcome aboard"),
        "the configuration is shown"
    );
    for action in ["<textarea", "Publish", "Archive", "Send test", "New flow"] {
        assert!(!page.contains(action), "{action} shown to a read-only key");
    }
    assert!(
        !page.contains("/folders\""),
        "no folders section without its scope"
    );
    // And a change it posts anyway is the service's to refuse.
    let reply = plain()
        .post(s.url(&format!("/console/{}/flows/{flow}/archive/archive", s.env)))
        .header("cookie", &cookie)
        .form(&[("csrf", csrf(&page))])
        .send()
        .await
        .expect("post");
    assert_eq!(reply.status(), 403);
}

async fn a_revoked_key_is_signed_out(s: Server) {
    let (id, secret) = key(&s, &["--role", "events"]);
    let cookie = pair(&sign_in(&s, &id, &secret).await);
    let (status, _) = get(&s, &cookie, &format!("/console/{}/flows", s.env)).await;
    assert_eq!(status, 200);
    let revoked = call(
        &s,
        "DELETE",
        &format!("/v1/{}/credentials/{id}", s.env),
        Some(&s.admin_secret),
        None,
    )
    .await;
    assert!(revoked.status < 300, "{}", revoked.text);
    let reply = plain()
        .get(s.url(&format!("/console/{}/flows", s.env)))
        .header("cookie", &cookie)
        .send()
        .await
        .expect("get");
    assert_eq!(reply.status(), 303);
    assert_eq!(reply.headers()["location"], "/console/sign-in?expired=1");
    let cleared = reply.headers()["set-cookie"].to_str().expect("cookie");
    assert!(cleared.starts_with("workbench_console=;"), "{cleared}");
}

async fn the_audience_finds_users_by_tag_shows_one_and_keeps_segments_and_streams(s: Server) {
    let admin = Some(s.admin_secret.as_str());
    for (id, tags) in [("ada", json!(["vip"])), ("bob", json!([]))] {
        let reply = call(
            &s,
            "PUT",
            &format!("/v1/{}/users/{id}", s.env),
            admin,
            Some(json!({"tags": tags, "attributes": {"country": "NZ", "plan": "gold"}})),
        )
        .await;
        assert_eq!(reply.status, 200, "{}", reply.text);
    }
    let device = call(
        &s,
        "PUT",
        &format!("/v1/{}/users/ada/devices/tok-ada-1", s.env),
        admin,
        Some(json!({"appId": "com.example.app", "platform": "APNS"})),
    )
    .await;
    assert_eq!(device.status, 200, "{}", device.text);
    let flow = crate::trigger::published_flow(&s, false).await;
    let started = call(
        &s,
        "POST",
        &format!("/v1/{}/action-flow/{flow}/start", s.env),
        admin,
        Some(json!({"flows": [{"target": {"type": "user", "targetUserIds": ["ada"]}}]})),
    )
    .await;
    assert_eq!(started.status, 200, "{}", started.text);

    let cookie = pair(&sign_in(&s, &s.admin_client_id, &s.admin_secret).await);
    let (status, page) = get(&s, &cookie, &format!("/console/{}/users?tag=vip", s.env)).await;
    assert_eq!(status, 200);
    assert!(page.contains(">ada<") && !page.contains(">bob<"), "{page}");
    let reply = plain()
        .get(s.url(&format!("/console/{}/users?id=ada", s.env)))
        .header("cookie", &cookie)
        .send()
        .await
        .expect("get");
    assert_eq!(reply.status(), 303);
    assert_eq!(
        reply.headers()["location"],
        format!("/console/{}/users/ada", s.env)
    );
    let mut page = String::new();
    for _ in 0..50 {
        page = get(&s, &cookie, &format!("/console/{}/users/ada", s.env))
            .await
            .1;
        if page.contains("card-row") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    for shown in [
        "&quot;plan&quot;: &quot;gold&quot;",
        "vip",
        "tok-ada-1",
        "card-row",
    ] {
        assert!(page.contains(shown), "{shown} on the user's page: {page}");
    }
    let (status, _) = get(&s, &cookie, &format!("/console/{}/users/nobody", s.env)).await;
    assert_eq!(status, 404);

    // A segment whose filter is refused shows why at the filter; a good one is listed.
    let (_, segments) = get(&s, &cookie, &format!("/console/{}/segments", s.env)).await;
    let token = csrf(&segments);
    let post = |path: String, form: Vec<(&'static str, String)>| {
        plain()
            .post(s.url(&path))
            .header("cookie", &cookie)
            .form(&form)
            .send()
    };
    let refused = post(
        format!("/console/{}/segments", s.env),
        vec![
            ("csrf", token.clone()),
            ("name", "Kiwis".into()),
            ("filter", r#"{"match": "most", "conditions": []}"#.into()),
        ],
    )
    .await
    .expect("post");
    assert_eq!(refused.status(), 400);
    let text = refused.text().await.expect("body");
    assert!(
        text.contains("segment-filter-errors") && text.contains("filter.match"),
        "{text}"
    );
    let made = post(
        format!("/console/{}/segments", s.env),
        vec![
            ("csrf", token.clone()),
            ("name", "Kiwis".into()),
            (
                "filter",
                r#"{"match": "all", "conditions": [{"field": "attributes.country", "op": "eq", "value": "NZ"}]}"#.into(),
            ),
        ],
    )
    .await
    .expect("post");
    assert_eq!(made.status(), 303);
    let (_, segments) = get(&s, &cookie, &format!("/console/{}/segments", s.env)).await;
    assert!(segments.contains("Kiwis"));
    let made = post(
        format!("/console/{}/streams", s.env),
        vec![("csrf", token.clone()), ("name", "Promotions".into())],
    )
    .await
    .expect("post");
    assert_eq!(made.status(), 303);
    let (_, streams) = get(&s, &cookie, &format!("/console/{}/streams", s.env)).await;
    assert!(streams.contains("Promotions"));
}

const ONE_STEP: &str = include_str!("../../crates/api-actix/src/examples/one-step.json");

blackbox!(
    sessions_are_strict_cookies_for_the_console_only,
    a_secure_cookie_when_served_over_https,
    changes_need_the_form_token_and_this_origin,
    a_key_without_a_permission_sees_the_page_read_only,
    a_revoked_key_is_signed_out,
    a_webhook_reader_sees_the_log_but_no_change_and_a_masked_secret,
    the_audience_finds_users_by_tag_shows_one_and_keeps_segments_and_streams,
    long_lists_page_through_with_next_links,
);

/// Headless Chromium driven through chromedriver, ended with the test.
pub(crate) struct Browser {
    driver: Child,
    client: Option<Client>,
    _profile: tempfile::TempDir,
}

impl Browser {
    /// `None` when chromedriver is not installed and `CI` is not set.
    pub(crate) async fn start() -> Option<Browser> {
        let driver =
            std::env::var("CHROMEDRIVER").unwrap_or_else(|_| "/usr/bin/chromedriver".into());
        let chromium = std::env::var("CHROMIUM").unwrap_or_else(|_| "/usr/bin/chromium".into());
        if !std::path::Path::new(&driver).exists() {
            assert!(
                std::env::var_os("CI").is_none(),
                "CI is set and {driver} is missing: .ci/run installs chromium-driver"
            );
            eprintln!("skipped: no {driver} (install chromium and chromium-driver)");
            return None;
        }
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        let child = Command::new(&driver)
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("chromedriver");
        let profile = tempfile::tempdir().expect("profile");
        let mut capabilities = serde_json::Map::new();
        capabilities.insert(
            "goog:chromeOptions".into(),
            json!({
                "binary": chromium,
                "args": [
                    "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                    "--disable-quic", "--no-first-run", "--disable-background-networking",
                    "--disable-component-update", "--disable-sync", "--window-size=1280,800",
                    format!("--user-data-dir={}", profile.path().display()),
                ]
            }),
        );
        let url = format!("http://127.0.0.1:{port}");
        let mut last = None;
        for _ in 0..100 {
            match ClientBuilder::new(HttpConnector::new())
                .capabilities(capabilities.clone())
                .connect(&url)
                .await
            {
                Ok(client) => {
                    return Some(Browser {
                        driver: child,
                        client: Some(client),
                        _profile: profile,
                    })
                }
                Err(e) => last = Some(e),
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!("chromedriver did not start: {last:?}");
    }

    pub(crate) fn c(&self) -> &Client {
        self.client.as_ref().expect("client")
    }

    pub(crate) async fn text(&self, css: &str) -> String {
        let found = self
            .c()
            .wait()
            .at_most(Duration::from_secs(10))
            .for_element(Locator::Css(css))
            .await;
        match found {
            Ok(element) => element.text().await.expect("text"),
            Err(e) => {
                let url = self.c().current_url().await.map(|u| u.to_string());
                let page = self.c().source().await.unwrap_or_default();
                panic!("{css}: {e}; at {url:?}:\n{page}")
            }
        }
    }

    /// Waits until the element `css` holds `needle` (a click's page may not have loaded yet).
    pub(crate) async fn until(&self, css: &str, needle: &str) -> String {
        let mut text = String::new();
        for _ in 0..100 {
            if let Ok(element) = self.c().find(Locator::Css(css)).await {
                text = element.text().await.unwrap_or_default();
                if text.contains(needle) {
                    return text;
                }
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let page = self.c().source().await.unwrap_or_default();
        panic!("{css} never held {needle:?} (last: {text:?}):\n{page}")
    }

    /// The element `css`, once the page has one.
    pub(crate) async fn element(&self, css: &str) -> fantoccini::elements::Element {
        self.c()
            .wait()
            .at_most(Duration::from_secs(10))
            .for_element(Locator::Css(css))
            .await
            .unwrap_or_else(|e| panic!("{css}: {e}"))
    }

    /// Types `text` (keys included) into whatever has the focus.
    async fn keys(&self, text: &str) {
        self.c()
            .active_element()
            .await
            .expect("focus")
            .send_keys(text)
            .await
            .expect("keys");
    }

    pub(crate) async fn fill(&self, css: &str, value: &str) {
        let field = self.element(css).await;
        field.clear().await.expect("clear");
        field.send_keys(value).await.expect("type");
    }

    pub(crate) async fn click(&self, css: &str) {
        self.element(css).await.click().await.expect("click");
    }

    /// Saves the page as `name`.png when `WORKBENCH_SCREENSHOTS` names a folder.
    pub(crate) async fn shot(&self, name: &str) {
        if let Some(dir) = std::env::var_os("WORKBENCH_SCREENSHOTS") {
            let png = self.c().screenshot().await.expect("screenshot");
            std::fs::write(std::path::Path::new(&dir).join(format!("{name}.png")), png)
                .expect("write screenshot");
        }
    }

    pub(crate) async fn end(mut self) {
        if let Some(client) = self.client.take() {
            let _ = client.close().await;
        }
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = self.driver.kill();
        let _ = self.driver.wait();
    }
}

/// Signs in through the form.
pub(crate) async fn browser_sign_in(b: &Browser, s: &Server, client_id: &str, secret: &str) {
    b.c().goto(&s.url("/console/")).await.expect("goto");
    b.text("#client_id").await;
    b.shot("sign-in").await;
    b.fill("#client_id", client_id).await;
    b.fill("#client_secret", secret).await;
    b.click("main button[type=submit]").await;
    b.until("main h1", "Flows").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_a_browser_a_flow_is_filed_fixed_published_and_tested() {
    let Some(b) = Browser::start().await else {
        return;
    };
    let s = Server::start(adapters_diesel::testing::TestDatabase::sqlite()).await;
    let tester = call(
        &s,
        "PUT",
        &format!("/v1/{}/users/tester", s.env),
        Some(&s.admin_secret),
        Some(json!({"testUser": true})),
    )
    .await;
    assert_eq!(tester.status, 200, "{}", tester.text);

    browser_sign_in(&b, &s, &s.admin_client_id, &s.admin_secret).await;
    b.until("main h1", "Flows").await;

    // A folder.
    b.click("nav a[href$='/folders']").await;
    b.until("main h1", "Folders").await;
    b.fill("#folder-name", "Onboarding").await;
    b.click("form[action$='/folders'] button[type=submit]")
        .await;
    b.until(".notice", "created").await;
    b.until(".tree", "Onboarding").await;
    b.shot("folders").await;

    // A flow in it, from the one-card example.
    b.click("nav a[href$='/flows']").await;
    b.fill("#flow-name", "Welcome").await;
    b.element("#flow-folder")
        .await
        .select_by_label("Onboarding")
        .await
        .expect("choose the folder");
    b.element("#flow-example")
        .await
        .select_by_value("oneStep")
        .await
        .expect("choose the example");
    b.click("form[action$='/flows'][method=post] button[type=submit]")
        .await;
    b.until("main h1", "Welcome").await;
    b.until(".notice", "created").await;

    // A mistake in the editor shows at its path; fixed, the flow publishes.
    let config = b
        .c()
        .find(Locator::Css("#config"))
        .await
        .expect("editor")
        .prop("value")
        .await
        .expect("value")
        .expect("text");
    let broken = config.replacen("\"create-card\"", "\"create-crad\"", 1);
    assert_ne!(broken, config);
    b.fill("#config", &broken).await;
    b.click("button[value=draft]").await;
    b.until("#config-errors", "steps.welcome.type").await;
    b.shot("flow-editor-error").await;
    b.fill("#config", &config).await;
    b.click("button[value=draft]").await;
    b.until(".notice", "saved").await;
    b.click("form[action$='/draft/publish'] button").await;
    b.until(".notice", "published").await;
    b.shot("flow").await;

    // A test trigger for the test user shows the card it made.
    b.fill("#test-users", "tester").await;
    b.click("form[action$='/test'] button[type=submit]").await;
    b.text("#invocation-status").await;
    let mut cards = String::new();
    for _ in 0..50 {
        cards = b.text("#main").await;
        if cards.contains("Welcome") && cards.contains("tester") && cards.contains("completed") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
        b.c().refresh().await.expect("refresh");
    }
    assert!(cards.contains("completed"), "{cards}");
    assert!(
        b.c().find(Locator::Css("tr.card-row")).await.is_ok(),
        "{cards}"
    );
    b.shot("invocation").await;

    // The flow list filters by folder.
    b.click("nav a[href$='/flows']").await;
    b.element("#filter-folder")
        .await
        .select_by_value("none")
        .await
        .expect("uncategorized");
    b.click("form[role=search] button[type=submit]").await;
    b.until("caption", "0 flows").await;
    b.click("nav a[href$='/flows']").await;
    b.until("table", "Welcome").await;
    b.shot("flows").await;
    b.end().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_a_browser_a_new_key_is_shown_once_and_revoking_it_signs_it_out() {
    let Some(b) = Browser::start().await else {
        return;
    };
    let s = Server::start(adapters_diesel::testing::TestDatabase::sqlite()).await;
    browser_sign_in(&b, &s, &s.admin_client_id, &s.admin_secret).await;
    b.click("nav a[href$='/credentials']").await;
    b.element("#role")
        .await
        .select_by_value("events")
        .await
        .expect("events");
    b.click("form[action$='/credentials'] button[type=submit]")
        .await;
    let id = b.text("#new-client-id").await;
    let secret = b.text("#new-secret").await;
    assert!(
        id.starts_with("key_") && secret.starts_with("wbs_"),
        "{id} {secret}"
    );
    b.shot("credentials").await;
    b.click("header form.signout button").await;
    b.text("#client_id").await;

    // Signed in with the new key, which may not read credentials: no such section.
    browser_sign_in(&b, &s, &id, &secret).await;
    b.until("main h1", "Flows").await;
    assert!(b
        .c()
        .find(Locator::Css("nav a[href$='/credentials']"))
        .await
        .is_err());

    // Revoked elsewhere: the next page is the sign-in page, saying why.
    let revoked = call(
        &s,
        "DELETE",
        &format!("/v1/{}/credentials/{id}", s.env),
        Some(&s.admin_secret),
        None,
    )
    .await;
    assert!(revoked.status < 300, "{}", revoked.text);
    b.c().refresh().await.expect("refresh");
    b.until(".notice", "signed out").await;
    b.text("#client_id").await;
    b.end().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_a_browser_a_webhook_is_subscribed_its_delivery_logged_and_resent() {
    let Some(b) = Browser::start().await else {
        return;
    };
    let s = Server::start(adapters_diesel::testing::TestDatabase::sqlite()).await;
    let receiver = crate::receiver::Receiver::start().await;
    browser_sign_in(&b, &s, &s.admin_client_id, &s.admin_secret).await;
    b.click("nav a[href$='/webhooks']").await;
    b.until("main h1", "Webhooks").await;

    // A URL the service refuses shows its message next to the field; fixed, it subscribes.
    b.fill("#new-url", "ftp://example.com/hook").await;
    b.click("input[name=types][value=card-published]").await;
    b.click("form[action$='/webhooks'] button[type=submit]")
        .await;
    b.until("#new-url-errors", "url").await;
    b.fill("#new-url", &receiver.url).await;
    b.fill("#new-description", "The CRM's receiver").await;
    b.click("form[action$='/webhooks'] button[type=submit]")
        .await;
    b.until(".notice", "created").await;

    // A card published: its delivery in the attempt log.
    let flow = crate::trigger::published_flow(&s, false).await;
    let started = call(
        &s,
        "POST",
        &format!("/v1/{}/action-flow/{flow}/start", s.env),
        Some(&s.admin_secret),
        Some(json!({"flows": [{"target": {"type": "user", "targetUserIds": ["ada"]}}]})),
    )
    .await;
    assert_eq!(started.status, 200, "{}", started.text);
    // The attempt is saved once the receiver has answered: wait until the API lists it.
    let hook = b
        .c()
        .current_url()
        .await
        .expect("url")
        .path()
        .rsplit('/')
        .next()
        .expect("id")
        .to_owned();
    let attempts = format!("/v1/{}/webhook/{hook}/deliveries", s.env);
    let mut listed = Value::Null;
    for _ in 0..100 {
        listed = call(&s, "GET", &attempts, Some(&s.admin_secret), None)
            .await
            .body;
        if listed["data"].as_array().is_some_and(|a| !a.is_empty()) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(receiver.len(), 1, "{listed}");
    b.c().refresh().await.expect("refresh");
    b.until("tr.attempt-row", "card-published").await;

    // Resent from the log: a new delivery of the same event reaches the receiver.
    b.click("tr.attempt-row button").await;
    b.until(".notice", "queued again").await;
    for _ in 0..100 {
        if receiver.len() >= 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let got = receiver.received();
    assert_eq!(got.len(), 2, "the event and its resend");
    assert_eq!(got[0].header("webhook-id"), got[1].header("webhook-id"));

    // A test event: the receiver's answer on the page.
    b.click("form[action$='/do/test'] button").await;
    b.until("#test-result", "200").await;
    b.until("section[aria-labelledby=attempts]", "webhook-test")
        .await;
    b.shot("webhook").await;

    // Disabled and enabled again.
    b.click("form[action$='/do/disable'] button").await;
    b.until(".notice", "disabled").await;
    b.click("form[action$='/do/enable'] button").await;
    b.until(".notice", "enabled").await;
    b.end().await;
}

async fn a_webhook_reader_sees_the_log_but_no_change_and_a_masked_secret(s: Server) {
    let subscribed = call(
        &s,
        "POST",
        &format!("/v1/{}/webhook", s.env),
        Some(&s.admin_secret),
        Some(json!({"url": "http://127.0.0.1:9/hook", "types": ["card-published"]})),
    )
    .await;
    assert_eq!(subscribed.status, 201, "{}", subscribed.text);
    let id = subscribed.body["data"]["id"]
        .as_str()
        .expect("id")
        .to_owned();
    let secret = subscribed.body["data"]["secret"]
        .as_str()
        .expect("secret")
        .to_owned();
    // An attempt in the log (the test event; nothing answers at its URL).
    let tested = call(
        &s,
        "POST",
        &format!("/v1/{}/webhook/{id}/test", s.env),
        Some(&s.admin_secret),
        None,
    )
    .await;
    assert!(tested.status < 300, "{}", tested.text);
    let (client, reader_secret) = key(&s, &["--scope", "webhooks:read"]);
    let cookie = pair(&sign_in(&s, &client, &reader_secret).await);
    let (status, page) = get(&s, &cookie, &format!("/console/{}/webhooks/{id}", s.env)).await;
    assert_eq!(status, 200);
    assert!(
        page.contains("attempt-row") && page.contains("webhook-test"),
        "{page}"
    );
    assert!(
        !page.contains(&secret),
        "the whole secret shown to a reader"
    );
    for action in [
        "Disable",
        "Rotate secret",
        "Send test",
        "Recover",
        "Resend",
        "Save",
    ] {
        assert!(!page.contains(action), "{action} shown to a reader");
    }
    // The one form a reader has is signing out.
    assert_eq!(page.matches("method=\"post\"").count(), 1, "{page}");
    assert!(page.contains("action=\"/console/sign-out\""));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_a_browser_a_csv_is_uploaded_its_task_completes_and_a_cancel_ends_the_cards() {
    let Some(b) = Browser::start().await else {
        return;
    };
    let s = Server::start(adapters_diesel::testing::TestDatabase::sqlite()).await;
    let flow = crate::trigger::published_flow(&s, false).await;
    let users: Vec<Value> = (0..10).map(|i| json!({"id": format!("u{i}")})).collect();
    crate::trigger::users(&s, Value::Array(users)).await;
    let dir = tempfile::tempdir().expect("dir");
    let file = dir.path().join("welcome.csv");
    let mut csv = String::from("target.attributes.id,payload.variables.firstName\n");
    for i in 0..10 {
        csv.push_str(&format!("u{i},Name{i}\n"));
    }
    std::fs::write(&file, csv).expect("csv");

    browser_sign_in(&b, &s, &s.admin_client_id, &s.admin_secret).await;
    b.c()
        .goto(&s.url(&format!("/console/{}/flows/{flow}", s.env)))
        .await
        .expect("goto");
    b.click("a[href$='/runs']").await;
    b.until("main h1", "Runs of").await;
    b.click("form[action$='/csv'] button[type=submit]").await;
    b.element("#csv-file")
        .await
        .send_keys(&file.display().to_string())
        .await
        .expect("choose the file");
    b.click("#upload button[type=submit]").await;
    b.until("#task-status", "completed").await;
    b.until("#live", "10 of 10 rows").await;
    b.shot("csv-task").await;

    // The cards are made; a cancel of every instance ends them, its progress on its page.
    for _ in 0..100 {
        let listed = call(
            &s,
            "GET",
            &format!("/v1/{}/users/u9/cards", s.env),
            Some(&s.admin_secret),
            None,
        )
        .await;
        if listed.body["data"]
            .as_array()
            .is_some_and(|c| !c.is_empty())
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    b.click("a[href$='/runs']").await;
    b.until("#tasks", "Tasks").await;
    b.until("section[aria-labelledby=tasks]", "completed").await;
    b.click("form[action$='/cancel'] button[type=submit]").await;
    b.until("#task-status", "completed").await;
    b.until("#live", "10 cards").await;
    let listed = call(
        &s,
        "GET",
        &format!("/v1/{}/users/u9/cards", s.env),
        Some(&s.admin_secret),
        None,
    )
    .await;
    assert_eq!(
        listed.body["data"].as_array().map(Vec::len),
        Some(0),
        "{}",
        listed.text
    );
    b.click("a[href$='/runs']").await;
    b.until("section[aria-labelledby=tasks]", "Cancel").await;
    b.shot("runs").await;
    b.end().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_a_browser_a_bad_push_credential_is_refused_with_its_message() {
    let Some(b) = Browser::start().await else {
        return;
    };
    let s = Server::start(adapters_diesel::testing::TestDatabase::sqlite()).await;
    browser_sign_in(&b, &s, &s.admin_client_id, &s.admin_secret).await;
    b.click("nav a[href$='/push']").await;
    b.until("main h1", "Push platforms").await;
    b.fill("#app-id", "com.example.android").await;
    b.element("#platform")
        .await
        .select_by_value("GCM")
        .await
        .expect("GCM");
    b.fill("#credential", "{\"type\": \"service_account\"}")
        .await;
    b.click("form[action$='/push'] button[type=submit]").await;
    let message = b.until("#credential-errors", "platformCredential").await;
    assert!(message.len() > "platformCredential: ".len(), "{message}");
    let kept = b
        .element("#app-id")
        .await
        .prop("value")
        .await
        .expect("value")
        .expect("text");
    assert_eq!(kept, "com.example.android", "what was typed is kept");
    b.shot("push").await;

    // A valid service account is taken, its facts shown, and it can be disabled.
    let account = adapters_push::testing::service_account("console-project");
    b.fill("#credential", &account).await;
    b.click("form[action$='/push'] button[type=submit]").await;
    b.until(".notice", "created").await;
    b.until("tr.platform-row", "com.example.android").await;
    b.click("tr.platform-row form[action$='/push/enabled'] button")
        .await;
    b.until(".notice", "disabled").await;
    b.until("tr.platform-row", "disabled").await;
    b.end().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_a_browser_the_console_works_by_keyboard_and_fits_a_phone() {
    use fantoccini::key::Key;
    let Some(b) = Browser::start().await else {
        return;
    };
    let s = Server::start(adapters_diesel::testing::TestDatabase::sqlite()).await;
    b.c().goto(&s.url("/console/sign-in")).await.expect("goto");
    b.text("#client_id").await;
    // From the page's start, Tab reaches the client id, then the secret; Enter sends the form.
    b.keys(&Key::Tab.to_string()).await;
    b.keys(&format!("{}{}", s.admin_client_id, Key::Tab)).await;
    b.keys(&format!("{}{}", s.admin_secret, Key::Enter)).await;
    b.until("main h1", "Flows").await;
    // The first Tab on a page of the console reaches the link that skips to its content.
    b.keys(&Key::Tab.to_string()).await;
    let focused = b
        .c()
        .active_element()
        .await
        .expect("focus")
        .text()
        .await
        .expect("text");
    assert_eq!(focused, "Skip to the content");

    // At a phone's width nothing is wider than the screen: wide tables scroll in their box.
    b.c().set_window_size(390, 844).await.expect("resize");
    b.c()
        .goto(&s.url(&format!("/console/{}/flows", s.env)))
        .await
        .expect("goto");
    b.until("main h1", "Flows").await;
    let fits = b
        .c()
        .execute(
            "return document.documentElement.scrollWidth <= window.innerWidth;",
            vec![],
        )
        .await
        .expect("measure");
    if fits != Value::Bool(true) {
        let wide = b
            .c()
            .execute(
                "return Array.from(document.querySelectorAll('body *')).filter(e => e.getBoundingClientRect().right > window.innerWidth + 1).map(e => e.tagName + '#' + e.id + '.' + e.className + ' ' + Math.round(e.getBoundingClientRect().right)).slice(0, 20);",
                vec![],
            )
            .await
            .expect("measure");
        panic!("wider than the screen: {wide}");
    }
    b.shot("phone").await;
    b.end().await;
}

async fn long_lists_page_through_with_next_links(s: Server) {
    for n in 0..101 {
        let made = call(
            &s,
            "POST",
            &format!("/v1/{}/action-flow", s.env),
            Some(&s.admin_secret),
            Some(json!({"name": format!("Flow {n:03}")})),
        )
        .await;
        assert_eq!(made.status, 201, "{}", made.text);
    }
    let cookie = pair(&sign_in(&s, &s.admin_client_id, &s.admin_secret).await);
    let (status, first) = get(&s, &cookie, &format!("/console/{}/flows?name=flow", s.env)).await;
    assert_eq!(status, 200);
    assert!(first.contains("100 flows"), "{first}");
    let at = first.find("rel=\"next\" href=\"").expect("a next page") + 17;
    let end = first[at..].find('"').expect("end") + at;
    let next = first[at..end].replace("&amp;", "&");
    assert!(
        next.contains("name=flow") && next.contains("after="),
        "{next}"
    );
    let (status, second) = get(&s, &cookie, &next).await;
    assert_eq!(status, 200);
    assert!(second.contains("1 flows"), "{second}");
    assert!(!second.contains("rel=\"next\""));
    assert!(second.contains(">First page<"));
    let names = |page: &str| -> Vec<String> {
        page.split("Flow ")
            .skip(1)
            .filter_map(|rest| rest.get(..3).map(str::to_owned))
            .filter(|n| n.chars().all(|c| c.is_ascii_digit()))
            .collect()
    };
    let mut all = names(&first);
    all.extend(names(&second));
    all.sort();
    all.dedup();
    assert_eq!(all.len(), 101, "every flow on one page or the other");
    // A list's query with a control character is refused, as the API refuses it, on both
    // backends (PostgreSQL takes no NUL in text).
    for path in [
        format!("/console/{}/flows?folder=%00", s.env),
        format!("/console/{}/flows?name=a%01b", s.env),
        format!("/console/{}/flows?after=%00", s.env),
        format!("/console/{}/users?tag=%00", s.env),
        format!("/console/{}/credentials?after=%00", s.env),
    ] {
        let (status, _) = get(&s, &cookie, &path).await;
        assert_eq!(status, 400, "{path}");
    }
}
