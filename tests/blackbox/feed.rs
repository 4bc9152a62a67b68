//! The end-user feed in real time (contract §12), over HTTP: the card count, and the event
//! stream with publish, snooze and complete arriving in order, resumed after `Last-Event-ID`,
//! read with a user's own token, ended by a revoked key and by SIGTERM, and fed across two
//! processes on PostgreSQL.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use serde_json::{json, Value};

use crate::sdk::{add_key, claims, Signer};
use crate::support::{blackbox, call, Server};
use crate::trigger::{finished, fire, flow_publishing, invocation_id};

/// One server-sent event: its id, name and data (`None` for a comment or `retry:`).
#[derive(Debug, Clone)]
pub(crate) struct Event {
    pub(crate) id: String,
    pub(crate) name: String,
    pub(crate) data: Value,
}

/// An open stream, read frame by frame.
pub(crate) struct Feed {
    body: std::pin::Pin<
        Box<dyn futures_util::Stream<Item = reqwest::Result<actix_web::web::Bytes>> + Send>,
    >,
    buffer: String,
    events: VecDeque<Event>,
    ended: bool,
}

impl Feed {
    async fn open(s: &Server, user: &str, bearer: &str, last: Option<&str>) -> Feed {
        Feed::open_with(s, user, bearer, last, "").await
    }

    async fn open_with(
        s: &Server,
        user: &str,
        bearer: &str,
        last: Option<&str>,
        query: &str,
    ) -> Feed {
        let mut request = s
            .client
            .get(s.url(&format!("/v1/{}/users/{user}/cards/stream{query}", s.env)))
            .bearer_auth(bearer);
        if let Some(last) = last {
            request = request.header("Last-Event-ID", last);
        }
        Feed::read(request.send().await.expect("stream"))
    }

    /// The stream `response` opened, which must be one.
    pub(crate) fn read(response: reqwest::Response) -> Feed {
        assert_eq!(response.status(), 200);
        assert_eq!(
            response
                .headers()
                .get("content-type")
                .and_then(|v| v.to_str().ok()),
            Some("text/event-stream")
        );
        Feed {
            body: Box::pin(response.bytes_stream()),
            buffer: String::new(),
            events: VecDeque::new(),
            ended: false,
        }
    }

    /// The next event within `limit`; `None` when none came or the stream ended.
    pub(crate) async fn next(&mut self, limit: Duration) -> Option<Event> {
        let until = Instant::now() + limit;
        loop {
            if let Some(event) = self.events.pop_front() {
                return Some(event);
            }
            if self.ended {
                return None;
            }
            let left = until.checked_duration_since(Instant::now())?;
            match tokio::time::timeout(left, self.body.next()).await {
                Err(_) => return None,
                Ok(None) | Ok(Some(Err(_))) => self.ended = true,
                Ok(Some(Ok(bytes))) => {
                    self.buffer.push_str(&String::from_utf8_lossy(&bytes));
                    while let Some(end) = self.buffer.find("\n\n") {
                        let frame: String = self.buffer.drain(..end + 2).collect();
                        self.parse(&frame);
                    }
                }
            }
        }
    }

    fn parse(&mut self, frame: &str) {
        let (mut id, mut name, mut data) = (None, None, None);
        for line in frame.lines() {
            if let Some(v) = line.strip_prefix("id: ") {
                id = Some(v.to_owned());
            } else if let Some(v) = line.strip_prefix("event: ") {
                name = Some(v.to_owned());
            } else if let Some(v) = line.strip_prefix("data: ") {
                data = serde_json::from_str(v).ok();
            }
        }
        if let (Some(id), Some(name), Some(data)) = (id, name, data) {
            self.events.push_back(Event { id, name, data });
        }
    }

    /// Whether the stream ends (the server closes it) within `limit`.
    async fn ends_within(&mut self, limit: Duration) -> bool {
        let until = Instant::now() + limit;
        while !self.ended {
            let Some(left) = until.checked_duration_since(Instant::now()) else {
                return false;
            };
            match tokio::time::timeout(left, self.body.next()).await {
                Err(_) => return false,
                Ok(None) | Ok(Some(Err(_))) => self.ended = true,
                Ok(Some(Ok(_))) => {}
            }
        }
        true
    }
}

pub(crate) fn config() -> Value {
    json!({"type": "card", "initialSteps": ["s1"],
        "steps": {"s1": {"id": "s1", "type": "create-card", "properties": {"cardTemplateId": "t1"}}},
        "cardTemplates": {"t1": {"metadata": {"cardName": "Live"},
            "defaultView": {"content": [{"key": "h", "type": "headline", "attributes": {"text": "Hi"}}],
                "actions": [{"key": "ok", "type": "submitButton", "attributes": {"text": "OK"}}]}}}})
}

/// Gives `user` one card through `s`; answers nothing (the stream tells).
pub(crate) async fn card_for(s: &Server, flow: &str, user: &str) {
    let fired = fire(
        s,
        flow,
        "start",
        json!({"flows": [{"target": {"type": "user", "targetUserIds": [user]}}]}),
    )
    .await;
    finished(s, flow, &invocation_id(&fired)).await;
}

async fn count(s: &Server, user: &str, bearer: &str, query: &str) -> u64 {
    let reply = call(
        s,
        "GET",
        &format!("/v1/{}/users/{user}/cards/count{query}", s.env),
        Some(bearer),
        None,
    )
    .await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    reply.body["data"]["total"].as_u64().expect("total")
}

async fn act(s: &Server, user: &str, card: &str, body: Value) {
    let reply = call(
        s,
        "POST",
        &format!("/v1/{}/users/{user}/cards/{card}/actions", s.env),
        Some(&s.admin_secret),
        Some(body),
    )
    .await;
    assert_eq!(reply.status, 200, "{}", reply.text);
}

const SOON: Duration = Duration::from_secs(3);

async fn the_stream_tells_each_change_in_order_and_resumes_after_the_last_seen(s: Server) {
    let flow = flow_publishing(&s, "Live", config()).await;
    let admin = s.admin_secret.clone();
    assert_eq!(count(&s, "u1", &admin, "").await, 0);
    let mut feed = Feed::open(&s, "u1", &admin, None).await;

    card_for(&s, &flow, "u1").await;
    let published = feed.next(SOON).await.expect("card-published");
    assert_eq!(published.name, "card-published");
    assert!(published.id.starts_with("evt_"), "{}", published.id);
    assert_eq!(published.data["count"], 1);
    let first = published.data["card"]["id"]
        .as_str()
        .expect("card")
        .to_owned();
    assert_eq!(published.data["card"]["status"], "active");

    card_for(&s, &flow, "u1").await;
    let second_published = feed.next(SOON).await.expect("second card");
    assert_eq!(second_published.data["count"], 2);
    let second = second_published.data["card"]["id"]
        .as_str()
        .expect("card")
        .to_owned();
    assert_eq!(count(&s, "u1", &admin, "").await, 2);

    let until = (chrono::Utc::now() + chrono::Duration::hours(1)).to_rfc3339();
    act(
        &s,
        "u1",
        &first,
        json!({"action": "snooze", "snoozeUntil": until}),
    )
    .await;
    let snoozed = feed.next(SOON).await.expect("card-snoozed");
    assert_eq!(snoozed.name, "card-snoozed");
    assert_eq!(
        snoozed.data,
        json!({"cardId": first, "card": null, "count": 1})
    );

    act(
        &s,
        "u1",
        &second,
        json!({"action": "submit", "values": {"ok": true}}),
    )
    .await;
    let completed = feed.next(SOON).await.expect("card-completed");
    assert_eq!(completed.name, "card-completed");
    assert_eq!(
        completed.data,
        json!({"cardId": second, "card": null, "count": 0})
    );
    // Another user's changes are not this stream's.
    card_for(&s, &flow, "u2").await;
    assert!(feed.next(Duration::from_millis(700)).await.is_none());

    // Resumed after the first event: the three after it come first, in order.
    drop(feed);
    let mut resumed = Feed::open(&s, "u1", &admin, Some(&published.id)).await;
    let mut names = Vec::new();
    for _ in 0..3 {
        let event = resumed.next(SOON).await.expect("resumed event");
        names.push((event.id, event.name));
    }
    assert_eq!(
        names,
        [
            (second_published.id.clone(), "card-published".to_owned()),
            (snoozed.id.clone(), "card-snoozed".to_owned()),
            (completed.id.clone(), "card-completed".to_owned()),
        ]
    );
    assert!(
        resumed.next(Duration::from_millis(500)).await.is_none(),
        "nothing twice"
    );
    // Resumed after the last: nothing to send, and the stream is live.
    let mut live = Feed::open(&s, "u1", &admin, Some(&completed.id)).await;
    assert!(live.next(Duration::from_millis(500)).await.is_none());
    card_for(&s, &flow, "u1").await;
    assert_eq!(live.next(SOON).await.expect("live").name, "card-published");
}

async fn counts_and_streams_follow_the_stream_filter_and_the_feed_permission(s: Server) {
    let flow = flow_publishing(&s, "Live", config()).await;
    let admin = s.admin_secret.clone();
    let promos = call(
        &s,
        "POST",
        &format!("/v1/{}/streams", s.env),
        Some(&admin),
        Some(json!({"name": "Promotions"})),
    )
    .await;
    let promos = promos.body["data"]["id"]
        .as_str()
        .expect("stream")
        .to_owned();
    let mut filtered =
        Feed::open_with(&s, "u1", &admin, None, &format!("?streamId={promos}")).await;
    card_for(&s, &flow, "u1").await;
    assert!(
        filtered.next(Duration::from_millis(700)).await.is_none(),
        "not in Promotions"
    );
    let fired = fire(
        &s,
        &flow,
        "start",
        json!({"flows": [{"target": {"type": "user", "targetUserIds": ["u1"]},
        "payload": {"cardOptions": {"targetStreamIds": [promos]}}}]}),
    )
    .await;
    assert_eq!(fired.status, 200, "{}", fired.text);
    finished(&s, &flow, &invocation_id(&fired)).await;
    let event = filtered.next(SOON).await.expect("in Promotions");
    assert_eq!(event.data["count"], 1, "the count of the stream");
    assert_eq!(count(&s, "u1", &admin, "").await, 2);
    assert_eq!(
        count(&s, "u1", &admin, &format!("?streamId={promos}")).await,
        1
    );

    // The feed's permission: `cards:write` (or `events`); `webhooks`-only keys are refused.
    let workbench = s.key(&["--role", "workbench"]);
    for path in ["count", "stream"] {
        call(
            &s,
            "GET",
            &format!("/v1/{}/users/u1/cards/{path}", s.env),
            Some(&workbench),
            None,
        )
        .await
        .problem(403, "forbidden");
    }
}

async fn a_revoked_key_ends_its_stream(s: Server) {
    let flow = flow_publishing(&s, "Live", config()).await;
    let key = s
        .admin(&["key", "create", "--env", &s.env, "--scope", "cards:write"])
        .expect("key");
    let (id, secret) = (
        key["clientId"].as_str().expect("id").to_owned(),
        key["clientSecret"].as_str().expect("secret").to_owned(),
    );
    let mut feed = Feed::open(&s, "u1", &secret, None).await;
    card_for(&s, &flow, "u1").await;
    assert!(feed.next(SOON).await.is_some(), "a live key is told");
    s.admin(&["key", "revoke", &id]).expect("revoke");
    // The serving process reads the key again after a second; the next change finds it
    // revoked: no event, the stream ends.
    tokio::time::sleep(Duration::from_millis(1_100)).await;
    card_for(&s, &flow, "u1").await;
    assert!(feed.next(SOON).await.is_none(), "a revoked key was told");
    assert!(feed.ends_within(SOON).await, "the stream outlived its key");
}

async fn a_quiet_stream_of_a_revoked_key_ends_at_its_keep_alive(s: Server) {
    let key = s
        .admin(&["key", "create", "--env", &s.env, "--scope", "cards:write"])
        .expect("key");
    let (id, secret) = (
        key["clientId"].as_str().expect("id").to_owned(),
        key["clientSecret"].as_str().expect("secret").to_owned(),
    );
    let mut feed = Feed::open(&s, "u1", &secret, None).await;
    s.admin(&["key", "revoke", &id]).expect("revoke");
    // Nothing changes for the user: the credential is checked with the keep-alive (15 s).
    assert!(
        feed.ends_within(Duration::from_secs(18)).await,
        "the stream outlived its key"
    );
}

async fn a_user_token_streams_its_own_feed_only(s: Server) {
    let flow = flow_publishing(&s, "Live", config()).await;
    let ec = Signer::ec();
    let added = add_key(&s, json!({"name": "app", "publicKey": ec.public_pem})).await;
    let key = added.body["data"]["id"].as_str().expect("id").to_owned();
    let token = ec.sign("app", &claims("u1"));
    assert_eq!(count(&s, "u1", &token, "").await, 0);
    let mut feed = Feed::open(&s, "u1", &token, None).await;
    card_for(&s, &flow, "u1").await;
    assert_eq!(feed.next(SOON).await.expect("event").data["count"], 1);
    for path in ["count", "stream"] {
        call(
            &s,
            "GET",
            &format!("/v1/{}/users/u2/cards/{path}", s.env),
            Some(&token),
            None,
        )
        .await
        .problem(403, "forbidden");
    }
    // Deleting the key ends the stream: the next change is not told.
    let deleted = call(
        &s,
        "DELETE",
        &format!("/v1/{}/sdk-keys/{key}", s.env),
        Some(&s.admin_secret),
        None,
    )
    .await;
    assert_eq!(deleted.status, 204);
    tokio::time::sleep(Duration::from_millis(1_100)).await;
    card_for(&s, &flow, "u1").await;
    assert!(
        feed.next(SOON).await.is_none(),
        "a deleted key's token was told"
    );
    assert!(feed.ends_within(SOON).await, "the stream outlived its key");
}

async fn sigterm_ends_open_streams_at_once(mut s: Server) {
    let mut feed = Feed::open(&s, "u1", &s.admin_secret.clone(), None).await;
    let terminated = std::process::Command::new("kill")
        .args(["-TERM", &s.pid().to_string()])
        .status()
        .expect("kill");
    assert!(terminated.success());
    // Well before the drain (5 s) ends.
    assert!(
        feed.ends_within(Duration::from_secs(2)).await,
        "the stream held the shutdown"
    );
    assert!(s.wait_exit(Duration::from_secs(20)).is_some());
}

blackbox!(
    the_stream_tells_each_change_in_order_and_resumes_after_the_last_seen,
    counts_and_streams_follow_the_stream_filter_and_the_feed_permission,
    a_revoked_key_ends_its_stream,
    a_quiet_stream_of_a_revoked_key_ends_at_its_keep_alive,
    a_user_token_streams_its_own_feed_only,
    sigterm_ends_open_streams_at_once,
);

/// Two processes on one PostgreSQL: a trigger through one reaches a stream held by the other
/// within a second.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_change_through_one_process_reaches_a_stream_on_another_within_a_second() {
    let Some(db) = adapters_diesel::testing::TestDatabase::postgres() else {
        return;
    };
    let a = Server::start(db).await;
    let b = a.replica(&[]);
    let flow = flow_publishing(&a, "Live", config()).await;
    let admin = a.admin_secret.clone();
    let mut feed = Feed::open(&b, "u1", &admin, None).await;
    for round in 0..3 {
        let sent = Instant::now();
        let fired = fire(
            &a,
            &flow,
            "start",
            json!({"flows": [{"target": {"type": "user", "targetUserIds": ["u1"]}}]}),
        )
        .await;
        assert_eq!(fired.status, 200, "{}", fired.text);
        let event = feed
            .next(Duration::from_secs(5))
            .await
            .expect("event from the other process");
        assert_eq!(event.name, "card-published");
        assert_eq!(event.data["count"], round + 1);
        let took = sent.elapsed();
        assert!(took < Duration::from_secs(1), "round {round}: {took:?}");
    }
    // A card action is written by the process that answers it: through the other one's
    // notifications, whichever process runs the engine.
    let card = call(
        &a,
        "GET",
        &format!("/v1/{}/users/u1/cards", a.env),
        Some(&admin),
        None,
    )
    .await
    .body["data"][0]["id"]
        .as_str()
        .expect("card")
        .to_owned();
    let sent = Instant::now();
    act(&a, "u1", &card, json!({"action": "dismiss"})).await;
    let event = feed.next(Duration::from_secs(5)).await.expect("dismissal");
    assert_eq!(event.name, "card-dismissed");
    assert!(
        sent.elapsed() < Duration::from_secs(1),
        "{:?}",
        sent.elapsed()
    );
}
