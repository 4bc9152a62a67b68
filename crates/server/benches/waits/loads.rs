//! The parts of the waits benchmark that run beside a load: waits falling due while `/start`
//! runs open-loop, and submits that resume `wait-for-card` steps.

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use super::{
    card, cards_made, common, count, flow_of, lateness, number, settled, spread, start_tag,
    support, waiting_flow, Gap,
};

type Make = Arc<dyn Fn(u64) -> reqwest::RequestBuilder + Send + Sync>;

/// Open-loop `POST /start` of one user each, `prefix` then a number, to `flow`.
fn starts_of(server: &support::Server, flow: &str, prefix: &str) -> Make {
    let (client, secret, prefix) = (
        server.client.clone(),
        server.admin_secret.clone(),
        prefix.to_owned(),
    );
    let url = server.url(&format!("/v1/{}/action-flow/{flow}/start", server.env));
    Arc::new(move |n| {
        client
            .post(&url)
            .bearer_auth(&secret)
            .json(&json!({"flows": [{"target": {"type": "user",
                "targetUserIds": [format!("{prefix}{n}")]}}]}))
    })
}

/// BENCH_DUE_RATE (2,000) waits a second falling due for [`common::RUN`], while `/start` of a
/// one-card flow runs open-loop at 2,000/s: its p99 against the same load with no wait due (run
/// before and after: A/B in the same minutes), and how late each second card is. Ledger: every
/// `/start` completed with its card, every waiting user has its second card once.
pub async fn beside(server: &support::Server) {
    let rate = common::setting("BENCH_DUE_RATE", 2_000).max(1);
    let seconds = common::RUN.as_secs();
    let users = rate * seconds;
    let wait_s = 30;
    let tag = format!("'due' || ((n - 1) / {rate})");
    common::seed_tagged(server.database_url(), &server.env, "w", &tag, users);
    let one = flow_of(server, "Beside", "s1", json!({"s1": card("s1", &[])}), None).await;
    let waits = waiting_flow(server, "Due beside", &format!("PT{wait_s}S")).await;
    let alone = common::open_loop(starts_of(server, &one, "alone1-"), 2_000).await;
    settled(server, &one, "alone1-", false).await;
    // A group of `rate` users a second: their waits fall due `wait_s` later, a second apart.
    let t0 = Instant::now();
    for i in 0..seconds {
        let at = t0 + Duration::from_secs(i);
        tokio::time::sleep_until(at.into()).await;
        start_tag(server, &waits, &format!("due{i}")).await;
    }
    tokio::time::sleep_until((t0 + Duration::from_secs(wait_s)).into()).await;
    let with = common::open_loop(starts_of(server, &one, "beside-"), 2_000).await;
    cards_made(server, &waits, "s2", users, Duration::from_secs(120)).await;
    settled(server, &one, "beside-", false).await;
    let again = common::open_loop(starts_of(server, &one, "alone2-"), 2_000).await;
    settled(server, &one, "alone2-", false).await;
    let theirs = format!("flow_id = '{waits}' AND step_id = 's2'");
    let url = server.database_url();
    assert_eq!(
        count(url, "card_instances", &theirs),
        users,
        "one second card each"
    );
    let distinct = number(
        url,
        &format!(
            "SELECT CAST(COUNT(DISTINCT user_id) AS TEXT) AS v FROM card_instances WHERE {theirs}"
        ),
    );
    assert_eq!(distinct as u64, users, "each user's second card once");
    let late = lateness(url, &waits, Gap::Created("s1"), wait_s * 1000);
    assert_eq!(late.len() as u64, users, "ledger: a second card per first");
    let (_, p50, p99, max) = spread(late);
    let base = (alone.2 + again.2) / 2.0;
    println!(
        "  /start at 2,000/s: p99 {:.2} ms alone before, {:.2} after; {:.2} ms with {rate} \
         waits/s falling due ({:+.1}% of their mean); {} + {} + {} sent",
        alone.2,
        again.2,
        with.2,
        (with.2 / base - 1.0) * 100.0,
        alone.0,
        with.0,
        again.0
    );
    println!(
        "  {users} waits due at {rate}/s beside it: second card after its deadline p50 {p50:.0} \
         ms, p99 {p99:.0} ms, max {max:.0} ms; ledger: {users} second cards, one per user"
    );
}

/// A template with a submit button.
fn answerable() -> Value {
    json!({"metadata": {"cardName": "Ask"},
        "defaultView": {"content": [
            {"key": "h", "type": "headline", "attributes": {"text": "Well?"}}],
            "actions": [{"key": "ok", "type": "submitButton", "attributes": {"text": "OK"}}]}})
}

/// BENCH_SUBMITS (500) submits a second for [`common::RUN`], each of a card a `wait-for-card`
/// step listens to: how long from the submit (the card's completion, on the database's times)
/// to the next step's card, and the submits' own answers. Ledger: every card submitted, every
/// user its next card once.
pub async fn submits(server: &support::Server) {
    let rate = common::setting("BENCH_SUBMITS", 500).max(1);
    // A second's more than the open loop sends (it may send one or two past its time).
    let users = rate * (common::RUN.as_secs() + 1);
    common::seed_tagged(server.database_url(), &server.env, "k", "'ask0'", users);
    let steps = json!({"s1": card("s1", &["listen"]),
        "listen": {"id": "listen", "type": "wait-for-card", "properties": {"cardStep": "s1",
            "timeout": "P1D", "on": {"submitted": ["s2"]}}},
        "s2": card("s2", &[])});
    let flow = flow_of(server, "Submits", "s1", steps, Some(answerable())).await;
    start_tag(server, &flow, "ask0").await;
    cards_made(server, &flow, "s1", users, Duration::from_secs(60)).await;
    common::drained(server).await;
    let url = server.database_url();
    let cards: Vec<(String, String)> = adapters_diesel::testing::raw_texts(
        url,
        &format!(
            "SELECT user_id || ' ' || id AS v FROM card_instances \
             WHERE flow_id = '{flow}' AND step_id = 's1' ORDER BY id"
        ),
    )
    .iter()
    .filter_map(|v| v.split_once(' '))
    .map(|(u, c)| (u.to_owned(), c.to_owned()))
    .collect();
    assert_eq!(cards.len() as u64, users, "a first card each");
    let cards = Arc::new(cards);
    let (client, secret) = (server.client.clone(), server.admin_secret.clone());
    let base = server.url(&format!("/v1/{}/users", server.env));
    let submit: Make = Arc::new(move |n| {
        let (user, card) = &cards[(n.saturating_sub(1_000_000) as usize) % cards.len()];
        client
            .post(format!("{base}/{user}/cards/{card}/actions"))
            .bearer_auth(&secret)
            .json(&json!({"action": "submit", "values": {"ok": true}}))
    });
    let (sent, s50, s99, _) = common::open_loop(submit, rate).await;
    let sent = sent as u64;
    assert!(sent <= users, "{sent} submits, one a card");
    cards_made(server, &flow, "s2", sent, Duration::from_secs(120)).await;
    let done = format!("flow_id = '{flow}' AND step_id = 's1' AND status = 'completed'");
    assert_eq!(
        count(url, "card_instances", &done),
        sent,
        "every card sent submitted"
    );
    let gaps = lateness(url, &flow, Gap::Updated("s1"), 0);
    assert_eq!(gaps.len() as u64, sent, "ledger: a next card per submit");
    let (_, p50, p99, max) = spread(gaps);
    println!(
        "  {sent} submits at {rate}/s (answered p50 {s50:.2} ms, p99 {s99:.2} ms): submit to the \
         next step's card p50 {p50:.0} ms, p99 {p99:.0} ms, max {max:.0} ms; ledger: {sent} \
         cards submitted, {sent} next cards"
    );
}
