use chrono::Duration;
use serde_json::{json, Value};

use super::request::{parse_duration, MAX_FLOW_ELEMENTS, MAX_TARGET_USERS};
use super::variables::{render, resolve, Platform};
use super::*;

fn fields(body: Value) -> Vec<String> {
    match parse(&body) {
        Ok(_) => Vec::new(),
        Err(errors) => errors.into_iter().map(|e| e.field).collect(),
    }
}

fn one(target: Value, payload: Value) -> Value {
    json!({"flows": [{"target": target, "payload": payload}]})
}

#[test]
fn table_of_invalid_requests() {
    let user = json!({"type": "user", "targetUserIds": ["u1"]});
    let cases: Vec<(&str, Value, &[&str])> = vec![
        ("not an object", json!([]), &[""]),
        ("no flows", json!({}), &["flows"]),
        ("empty flows", json!({"flows": []}), &["flows"]),
        (
            "too many flows",
            json!({"flows": vec![json!({"target": user}); MAX_FLOW_ELEMENTS + 1]}),
            &["flows"],
        ),
        (
            "element not an object",
            json!({"flows": [3]}),
            &["flows[0]"],
        ),
        ("no target", json!({"flows": [{}]}), &["flows[0].target"]),
        (
            "unknown target type",
            one(json!({"type": "everyone"}), Value::Null),
            &["flows[0].target.type"],
        ),
        (
            "user without ids",
            one(json!({"type": "user"}), Value::Null),
            &["flows[0].target.targetUserIds"],
        ),
        (
            "user ids empty",
            one(json!({"type": "user", "targetUserIds": []}), Value::Null),
            &["flows[0].target.targetUserIds"],
        ),
        (
            "too many user ids",
            one(
                json!({"type": "user", "targetUserIds": vec!["u"; MAX_TARGET_USERS + 1]}),
                Value::Null,
            ),
            &["flows[0].target.targetUserIds"],
        ),
        (
            "user id not a string",
            one(
                json!({"type": "user", "targetUserIds": ["u1", 2, ""]}),
                Value::Null,
            ),
            &[
                "flows[0].target.targetUserIds[1]",
                "flows[0].target.targetUserIds[2]",
            ],
        ),
        (
            "segment without id",
            one(json!({"type": "segment"}), Value::Null),
            &["flows[0].target.targetSegmentId"],
        ),
        (
            "tag without name",
            one(json!({"type": "tag"}), Value::Null),
            &["flows[0].target.tagName"],
        ),
        (
            "tag name not a string",
            one(json!({"type": "tag", "tag": 5}), Value::Null),
            &["flows[0].target.tag"],
        ),
        (
            "filters without filter",
            one(json!({"type": "filters"}), Value::Null),
            &["flows[0].target.filter"],
        ),
        (
            "filters with a bad filter",
            one(
                json!({"type": "filters", "filter": {"conditions": [{"field": "x", "op": "eq"}]}}),
                Value::Null,
            ),
            &["flows[0].target.filter.conditions[0].field"],
        ),
        (
            "payload not an object",
            one(user.clone(), json!("x")),
            &["flows[0].payload"],
        ),
        (
            "variable of a bad kind",
            one(user.clone(), json!({"variables": {"a": [1]}})),
            &["flows[0].payload.variables.a"],
        ),
        (
            "variable object without value",
            one(user.clone(), json!({"variables": {"a": {"valueIos": "x"}}})),
            &["flows[0].payload.variables.a.value"],
        ),
        (
            "priority 0",
            one(user.clone(), json!({"cardOptions": {"priority": 0}})),
            &["flows[0].payload.cardOptions.priority"],
        ),
        (
            "priority 11",
            one(user.clone(), json!({"cardOptions": {"priority": 11}})),
            &["flows[0].payload.cardOptions.priority"],
        ),
        (
            "expires not a timestamp",
            one(
                user.clone(),
                json!({"cardOptions": {"expires": "tomorrow"}}),
            ),
            &["flows[0].payload.cardOptions.expires"],
        ),
        (
            "embargo not a timestamp",
            one(user.clone(), json!({"cardOptions": {"embargo": 5}})),
            &["flows[0].payload.cardOptions.embargo"],
        ),
        (
            "expires before embargo",
            one(
                user.clone(),
                json!({"cardOptions": {"embargo": "2027-01-02T00:00:00Z",
                    "expires": "2027-01-01T00:00:00Z"}}),
            ),
            &["flows[0].payload.cardOptions.expires"],
        ),
        (
            "bad interval",
            one(
                user.clone(),
                json!({"cardOptions": {"expiresInterval": "30 minutes"}}),
            ),
            &["flows[0].payload.cardOptions.expiresInterval"],
        ),
        (
            "streams not an array",
            one(
                user.clone(),
                json!({"cardOptions": {"targetStreamIds": "s"}}),
            ),
            &["flows[0].payload.cardOptions.targetStreamIds"],
        ),
        (
            "unknown platform",
            one(
                user.clone(),
                json!({"cardOptions": {"targetPlatforms": {"Web": true, "Windows": true}}}),
            ),
            &["flows[0].payload.cardOptions.targetPlatforms.Windows"],
        ),
        (
            "platform not a boolean",
            one(
                user.clone(),
                json!({"cardOptions": {"targetPlatforms": {"iOS": "yes"}}}),
            ),
            &["flows[0].payload.cardOptions.targetPlatforms.iOS"],
        ),
        (
            "unknown card option",
            one(user.clone(), json!({"cardOptions": {"colour": "red"}})),
            &["flows[0].payload.cardOptions.colour"],
        ),
        (
            "notification detail too big",
            one(
                user.clone(),
                json!({"notificationDetail": {"x": "y".repeat(2100)}}),
            ),
            &["flows[0].payload.notificationDetail"],
        ),
        (
            "metadata not an object",
            one(user.clone(), json!({"metadata": [1]})),
            &["flows[0].payload.metadata"],
        ),
        (
            "invocation id not a string",
            json!({"flows": [{"target": user, "flowInvocationId": 7}]}),
            &["flows[0].flowInvocationId"],
        ),
        (
            "invocation id twice",
            json!({"flows": [{"target": user, "flowInvocationId": "a"}, {"target": user,
                "flowInvocationId": "a"}]}),
            &["flows[1].flowInvocationId"],
        ),
        (
            "strictVariables not a boolean",
            json!({"flows": [{"target": user}], "options": {"strictVariables": "yes"}}),
            &["options.strictVariables"],
        ),
    ];
    assert!(cases.len() >= 25);
    for (name, body, expected) in cases {
        assert_eq!(fields(body), expected, "{name}");
    }
}

#[test]
fn payload_parts_beside_the_payload_are_refused_with_where_they_belong() {
    let body = json!({"flows": [{
        "target": {"type": "user", "targetUserIds": ["u1"]},
        "cardOptions": {"priority": 9},
        "variables": {"name": "Ada"},
        "metadata": {"m": "1"},
        "payload": {}
    }]});
    let errors = parse(&body).expect_err("refused");
    let fields: Vec<&str> = errors.iter().map(|e| e.field.as_str()).collect();
    assert_eq!(
        fields,
        [
            "flows[0].cardOptions",
            "flows[0].variables",
            "flows[0].metadata"
        ]
    );
    assert!(
        errors[0].message.contains("flows[0].payload.cardOptions"),
        "{}",
        errors[0].message
    );
}

#[test]
fn every_problem_of_every_element_is_reported() {
    let body = json!({"flows": [
        {"target": {"type": "tag"}, "payload": {"cardOptions": {"priority": 20}}},
        {"target": {"type": "user", "targetUserIds": ["ok"]},
            "payload": {"cardOptions": {"embargo": "x"}}}
    ]});
    assert_eq!(
        fields(body),
        [
            "flows[0].target.tagName",
            "flows[0].payload.cardOptions.priority",
            "flows[1].payload.cardOptions.embargo"
        ]
    );
}

#[test]
fn valid_requests_parse_into_targets_and_options() {
    let body = json!({
        "flows": [
            {"target": {"type": "user", "targetUserIds": ["b", "a", "b"]},
                "flowInvocationId": "inv-1",
             "payload": {"variables": {"name": "Ann", "amount": {"value": "5", "valueIos": "6"}},
                         "cardOptions": {"priority": 7, "expires": "2027-01-01T00:00:00Z",
                             "expiresInterval": "PT30M",
                                         "targetStreamIds": ["str_1"],
                                             "targetPlatforms": {"Web": true, "iOS": false}},
                         "metadata": {"campaign": "x"},
                             "notificationDetail": {"deepLink": "app://x"}}},
            {"target": {"type": "tag", "tag": "vip"}},
            {"target": {"type": "segment", "targetSegmentId": "seg_1"}},
            {"target": {"type": "allTestUsers"}},
            {"target": {"type": "filters", "filter": {"conditions": [{"field": "testUser",
                "op": "eq", "value": true}]}}}
        ],
        "options": {"strictVariables": true}
    });
    let request = parse(&body).expect("valid");
    assert!(request.strict_variables);
    assert_eq!(
        request.flows[0].target,
        Target::Users(vec!["a".into(), "b".into()])
    );
    let options = &request.flows[0].payload.card_options;
    assert_eq!(options.priority, Some(7));
    assert_eq!(options.expires_interval, Some(Duration::minutes(30)));
    assert_eq!(
        options.target_platforms,
        Some(Platforms {
            web: true,
            ios: false,
            android: false
        })
    );
    assert_eq!(request.flows[1].target, Target::Tag("vip".into()));
    assert!(
        request.flows[1].target.is_bulk()
            && request.flows[2].target.is_bulk()
            && request.flows[4].target.is_bulk()
    );
    assert!(!request.flows[0].target.is_bulk() && !request.flows[3].target.is_bulk());
    assert_eq!(Platforms::default().names(), ["Web", "iOS", "Android"]);
}

#[test]
fn iso_8601_durations() {
    assert_eq!(parse_duration("PT30M"), Some(Duration::minutes(30)));
    assert_eq!(parse_duration("P1DT12H"), Some(Duration::hours(36)));
    assert_eq!(parse_duration("P2W"), Some(Duration::days(14)));
    assert_eq!(parse_duration("PT1.5S"), Some(Duration::milliseconds(1500)));
    assert_eq!(parse_duration("P1Y"), Some(Duration::days(365)));
    for bad in [
        "", "P", "PT", "30M", "P1H", "PT1D", "P1.5D", "PM1", "PT30M5H",
    ] {
        assert_eq!(parse_duration(bad), None, "{bad}");
    }
}

fn config() -> Value {
    json!({
        "type": "card", "initialSteps": ["s1"],
        "variables": {
            "name": {"type": "string", "default": "there"},
            "due": {"type": "date", "required": true},
            "score": {"type": "number", "source": "script"}
        },
        "steps": {"s1": {"id": "s1", "type": "create-card", "properties": {"cardTemplateId": "t"}}},
        "cardTemplates": {"t": {
            "metadata": {"cardName": "T"},
            "variables": {"amount": {"type": "number", "default": 10}},
            "defaultView": {"content": [{"key": "h", "type": "headline",
                "attributes": {"text": "Hi %{name}, pay %{amount} by %{due} %{assetv1:logo}"}}]},
            "notification": {"attributes": {"body": "Hello %{name}"}}
        }}
    })
}

fn payload(variables: Value) -> Payload {
    parse(&one(
        json!({"type": "allTestUsers"}),
        json!({"variables": variables}),
    ))
    .expect("valid")
    .flows
    .remove(0)
    .payload
}

#[test]
fn table_of_variable_resolution() {
    let cases: Vec<(&str, Value, bool, &[&str])> = vec![
        (
            "required sent",
            json!({"due": "2027-01-01T00:00:00Z"}),
            false,
            &[],
        ),
        (
            "required missing",
            json!({}),
            false,
            &["flows[0].payload.variables.due"],
        ),
        (
            "wrong type",
            json!({"due": "2027-01-01T00:00:00Z", "amount": "ten"}),
            false,
            &["flows[0].payload.variables.amount"],
        ),
        (
            "wrong type on iOS",
            json!({"due": "2027-01-01T00:00:00Z", "amount": {"value": "1", "valueIos": "x"}}),
            false,
            &["flows[0].payload.variables.amount.valueIos"],
        ),
        (
            "script variable",
            json!({"due": "2027-01-01T00:00:00Z", "score": "5"}),
            false,
            &["flows[0].payload.variables.score"],
        ),
        (
            "unknown, lenient",
            json!({"due": "2027-01-01T00:00:00Z", "nope": "x"}),
            false,
            &[],
        ),
        (
            "unknown, strict",
            json!({"due": "2027-01-01T00:00:00Z", "nope": "x"}),
            true,
            &["flows[0].payload.variables.nope"],
        ),
        (
            "template variable sent",
            json!({"due": "2027-01-01T00:00:00Z", "amount": 12}),
            true,
            &[],
        ),
    ];
    for (name, vars, strict, expected) in cases {
        let got: Vec<String> = match resolve(&config(), &payload(vars), strict, "flows[0].payload")
        {
            Ok(_) => Vec::new(),
            Err(errors) => errors.into_iter().map(|e| e.field).collect(),
        };
        assert_eq!(got, expected, "{name}");
    }
}

#[test]
fn rendering_uses_request_then_flow_default_then_template_default_per_platform() {
    let vars = resolve(
        &config(),
        &payload(json!({"due": {"value": "2027-01-01T00:00:00Z",
        "valueAndroid": "2027-02-01T00:00:00Z"}})),
        false,
        "p",
    )
    .expect("ok");
    let web = render(&config()["cardTemplates"]["t"], &vars, Platform::Web);
    assert_eq!(
        web["defaultView"]["content"][0]["attributes"]["text"],
        "Hi there, pay 10 by 2027-01-01T00:00:00Z %{assetv1:logo}"
    );
    assert_eq!(web["notification"]["attributes"]["body"], "Hello there");
    let android = render(&config()["cardTemplates"]["t"], &vars, Platform::Android);
    assert_eq!(
        android["defaultView"]["content"][0]["attributes"]["text"],
        "Hi there, pay 10 by 2027-02-01T00:00:00Z %{assetv1:logo}"
    );
    let sent = resolve(
        &config(),
        &payload(json!({"due": "2027-01-01T00:00:00Z", "name": "Ann", "amount": 3})),
        false,
        "p",
    )
    .expect("ok");
    let ios = render(&config()["cardTemplates"]["t"], &sent, Platform::Ios);
    assert_eq!(
        ios["defaultView"]["content"][0]["attributes"]["text"],
        "Hi Ann, pay 3 by 2027-01-01T00:00:00Z %{assetv1:logo}"
    );
}

#[test]
fn a_compiled_view_renders_the_text_serde_json_writes_of_the_rendered_view() {
    use super::variables::ViewTemplate;
    let config = json!({
        "variables": {"name": {"type": "string"}, "n": {"type": "number"}},
        "cardTemplates": {}
    });
    let templates = [
        config_template(),
        json!({"variables": {"gone": {"default": "d\"q"}},
            "defaultView": {"z": [1, 2.5, -3, true, null, "%{gone}", {"k\n\"": "%{ name }!"}],
                "a": "no vars"},
            "subviews": {"s": {"content": ["%{name}%{name}", "%{unknown}", "%{assetv1:x}%{name}",
                "tail %{unclosed", "%{", "}%{}"]}},
            "notification": {"attributes": {"body": "\u{1}%{n}\t"}},
            "metadata": {"cardName": "not rendered"}}),
        json!({"metadata": {}}),
        json!({"defaultView": "%{name}"}),
    ];
    let values = [
        json!({"name": "Ann", "n": 3}),
        json!({"name": {"value": "q\"\\\n\u{7}é😀", "valueIos": "iOS", "valueAndroid": ""}}),
        json!({}),
    ];
    for template in &templates {
        let view = ViewTemplate::compile(template);
        assert_eq!(view.notifies(), template.get("notification").is_some());
        for sent in &values {
            let vars = resolve(&config, &payload(sent.clone()), false, "p").expect("resolves");
            for platform in [Platform::Web, Platform::Ios, Platform::Android] {
                let expected = render(template, &vars, platform).to_string();
                assert_eq!(
                    view.render(&vars, platform),
                    expected,
                    "{template} {sent} {platform:?}"
                );
            }
            let alike = [Platform::Ios, Platform::Android]
                .iter()
                .all(|p| view.render(&vars, *p) == view.render(&vars, Platform::Web));
            if view.same_on_every_platform(&vars) {
                assert!(alike, "{template} {sent}");
            }
        }
    }
}

fn config_template() -> Value {
    config()["cardTemplates"]["t"].clone()
}

#[test]
fn fingerprints_ignore_key_order_but_not_content() {
    let a = parse(
        &json!({"flows": [{"target": {"type": "tag", "tagName": "x"},
        "payload": {"metadata": {"a": 1, "b": 2}}}]}),
    )
    .expect("a");
    let b = parse(
        &json!({"flows": [{"payload": {"metadata": {"b": 2, "a": 1}},
        "target": {"tagName": "x", "type": "tag"}}]}),
    )
    .expect("b");
    let c = parse(
        &json!({"flows": [{"target": {"type": "tag", "tagName": "x"},
        "payload": {"metadata": {"a": 1, "b": 3}}}]}),
    )
    .expect("c");
    let empty =
        parse(&json!({"flows": [{"target": {"type": "tag", "tagName": "x"}, "payload": {}}]}))
            .expect("empty");
    let absent =
        parse(&json!({"flows": [{"target": {"type": "tag", "tagName": "x"}}]})).expect("absent");
    assert_eq!(fingerprint(&a.flows[0]), fingerprint(&b.flows[0]));
    assert_ne!(fingerprint(&a.flows[0]), fingerprint(&c.flows[0]));
    assert_eq!(fingerprint(&empty.flows[0]), fingerprint(&absent.flows[0]));
    assert_eq!(fingerprint(&a.flows[0]).len(), 32);
    // Stored with each invocation: the first 128 bits of the SHA-256 of the text of both as
    // one JSON object.
    let stored_as = |e: &FlowElement| {
        use sha2::{Digest, Sha256};
        let payload = match &e.raw_payload {
            Value::Null => json!({}),
            p => p.clone(),
        };
        let text = json!({"target": e.raw_target, "payload": payload}).to_string();
        Sha256::digest(text.as_bytes())[..16]
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect::<String>()
    };
    for e in [&a, &c, &empty, &absent] {
        assert_eq!(fingerprint(&e.flows[0]), stored_as(&e.flows[0]));
    }
}

#[test]
fn the_whole_push_payload_must_fit_in_2_kb() {
    let config = config();
    let plan = super::plan::FlowPlan::of(config.clone());
    let check = |name_len: usize, detail_len: usize, platforms: Value| {
        let p = parse(&one(
            json!({"type": "allTestUsers"}),
            json!({
                "variables": {"name": "n".repeat(name_len), "due": "2027-01-01T00:00:00Z"},
                "notificationDetail": {"d": "d".repeat(detail_len)},
                "cardOptions": platforms,
            }),
        ))
        .expect("valid")
        .flows
        .remove(0)
        .payload;
        let variables = resolve(&config, &p, false, "flows[0].payload").expect("resolves");
        service::checks::push_payload_problems(&plan, &p, &variables, "flows[0].payload")
    };
    // Each part fits alone; together they do not.
    assert!(check(900, 900, json!({})).is_empty());
    let problems = check(1_100, 1_000, json!({}));
    assert_eq!(problems.len(), 2, "iOS and Android: {problems:?}");
    assert!(problems.iter().all(|e| e.field == "flows[0].payload"));
    assert!(problems[0].message.contains("card template `t` on iOS"));
    assert!(problems[0].message.contains("limit is 2048"));
    // Web-only cards are never pushed.
    assert!(check(
        1_100,
        1_000,
        json!({"targetPlatforms": {"Web": true, "iOS": false, "Android": false}})
    )
    .is_empty());
}

/// The time of the mock-based tests below.
pub(crate) use crate::testing::t0 as now;

/// Version 1 of flow `flw`, published: one `create-card` step of card template `t`.
pub(crate) fn published(template: Value) -> crate::flow::FlowVersion {
    crate::flow::FlowVersion {
        flow_id: "flw".into(),
        version: 1,
        status: crate::flow::VersionStatus::Published,
        config: json!({"type": "card", "initialSteps": ["s1"],
            "steps": {"s1": {"id": "s1", "type": "create-card",
                "properties": {"cardTemplateId": "t"}}},
            "cardTemplates": {"t": template}}),
        created_by: "key".into(),
        approved_by: None,
        approved: None,
        published: Some(now()),
        created: now(),
        updated: now(),
    }
}

/// The default stream of `env`.
pub(crate) fn default_stream(env: &str) -> crate::audience::Stream {
    crate::audience::Stream {
        id: "str_all".into(),
        environment_id: env.into(),
        name: "All cards".into(),
        is_default: true,
        created: now(),
    }
}

/// Flows over a mock: any id is a flow with version 1 published and a draft 2, version 1 with
/// one card step whose headline names the flow variable `name` (default `you`).
pub(crate) fn card_flows() -> crate::flow::MockFlowRepository {
    let mut flows = crate::flow::MockFlowRepository::new();
    flows.expect_get().returning(|env, id| {
        Ok(Some(crate::flow::Flow {
            id: id.into(),
            environment_id: env.into(),
            organisation_id: "org".into(),
            name: "F".into(),
            description: String::new(),
            folder_id: None,
            archived: false,
            latest_version: 2,
            published_version: Some(1),
            draft_version: Some(2),
            variables: Default::default(),
            revision: 0,
            created: now(),
            updated: now(),
        }))
    });
    flows.expect_get_version().returning(|_, _| {
        let mut version = published(json!({"metadata": {"cardName": "T"},
            "defaultView": {"content": [{"key": "h", "type": "headline",
                "attributes": {"text": "Hi %{name}"}}]}}));
        version.config["variables"] = json!({"name": {"type": "string", "default": "you"}});
        Ok(Some(version))
    });
    flows
}

mod engine_steps {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::{Arc, Mutex};

    use super::{default_stream, now, published};

    use serde_json::json;

    use crate::audience::{MockEndUserRepository, MockSegmentRepository, MockStreamRepository};
    use crate::flow::MockFlowRepository;
    use crate::page::After;
    use crate::trigger::engine::Engine;
    use crate::trigger::invocation::{
        BatchResult, Invocation, InvocationFilter, InvocationRepository, InvocationStatus,
        MockInvocationRepository, SaveTurn, BATCH_USERS, CLAIM_PER_STEP, FOLLOW_BATCHES,
        LEASE_SECONDS,
    };
    use crate::trigger::Mode;
    use crate::{StorageError, Timestamp};

    fn invocation(id: &str, target: serde_json::Value) -> Invocation {
        Invocation {
            environment_id: "env".into(),
            id: id.into(),
            flow_id: "flw".into(),
            mode: Mode::Live,
            flow_version: 1,
            fingerprint: id.into(),
            target: target.into(),
            payload: json!({}).into(),
            strict_variables: false,
            bulk: false,
            status: InvocationStatus::Running,
            users_targeted: 0,
            cards_created: 0,
            errors: Vec::new(),
            cursor: None,
            created: now(),
            updated: now(),
        }
    }

    fn users(ids: std::ops::Range<u32>) -> Vec<String> {
        ids.map(|i| format!("u{i:05}")).collect()
    }

    /// What each save was given, in order.
    type Saves = Arc<Mutex<Vec<Vec<BatchResult>>>>;

    /// An engine over mocks: `claimed` is what the one claim answers (later claims find
    /// nothing); the batches of each save are kept.
    fn engine(claimed: Vec<Invocation>, tagged: u32) -> (Engine, Saves) {
        engine_with(claimed, tagged, |_| 0)
    }

    /// [`engine`], with the save numbered `n` (from 0) answering `stale(n)` batches stale.
    fn engine_with(
        claimed: Vec<Invocation>,
        tagged: u32,
        stale: fn(usize) -> u64,
    ) -> (Engine, Saves) {
        let (engine, saves, _) = engine_of(claimed, tagged, 1, stale, |_| None);
        (engine, saves)
    }

    /// What [`Overlapping`] saw of the saves.
    #[derive(Default)]
    struct Watched {
        /// Saves under way now.
        now: Arc<AtomicUsize>,
        /// The most that were under way at once.
        most: Arc<AtomicUsize>,
        /// For each followed batch's save, in order: whether the turn it was given had ended
        /// when it reached the repository, and when it ended.
        turns: Arc<Mutex<Vec<(bool, bool)>>>,
    }

    /// An invocation repository whose saves reach `inner` when first polled (in the order they
    /// were given), then stay under way for a few polls more and end in the order given,
    /// counting how many are under way at once.
    struct Overlapping {
        inner: MockInvocationRepository,
        now: Arc<AtomicUsize>,
        most: Arc<AtomicUsize>,
        turns: Arc<Mutex<Vec<(bool, bool)>>>,
        /// Saves given so far, and saves ended.
        given: AtomicUsize,
        ended: AtomicUsize,
    }

    impl Overlapping {
        async fn under_way<T>(
            &self,
            save: impl std::future::Future<Output = T>,
            after: Option<&SaveTurn>,
        ) -> T {
            let ended = || after.is_none_or(|a| a.wait(std::time::Duration::ZERO));
            let at_first = ended();
            let ticket = self.given.fetch_add(1, Ordering::SeqCst);
            let now = self.now.fetch_add(1, Ordering::SeqCst) + 1;
            self.most.fetch_max(now, Ordering::SeqCst);
            let saved = save.await;
            // A few polls under way, then ended in the order given, as a database's commits
            // of one fan-out end.
            for _ in 0..3 {
                tokio::task::yield_now().await;
            }
            while self.ended.load(Ordering::SeqCst) != ticket {
                tokio::task::yield_now().await;
            }
            if after.is_some() {
                self.turns.lock().expect("turns").push((at_first, ended()));
            }
            self.now.fetch_sub(1, Ordering::SeqCst);
            self.ended.fetch_add(1, Ordering::SeqCst);
            saved
        }
    }

    #[async_trait::async_trait]
    impl InvocationRepository for Overlapping {
        async fn record_run(
            &self,
            runs: Vec<(Invocation, Option<BatchResult>)>,
        ) -> Result<Vec<Option<Invocation>>, StorageError> {
            self.inner.record_run(runs).await
        }
        async fn get(&self, env: &str, id: &str) -> Result<Option<Invocation>, StorageError> {
            self.inner.get(env, id).await
        }
        async fn list(
            &self,
            env: &str,
            flow: &str,
            filter: InvocationFilter,
            after: Option<After<String>>,
            limit: u32,
        ) -> Result<Vec<Invocation>, StorageError> {
            self.inner.list(env, flow, filter, after, limit).await
        }
        async fn running_bulk(&self, env: &str) -> Result<u64, StorageError> {
            self.inner.running_bulk(env).await
        }
        async fn claim(
            &self,
            now: Timestamp,
            lease_until: Timestamp,
            limit: u32,
        ) -> Result<Vec<Invocation>, StorageError> {
            self.inner.claim(now, lease_until, limit).await
        }
        async fn save_batches(&self, batches: Vec<BatchResult>) -> Result<u64, StorageError> {
            self.under_way(self.inner.save_batches(batches), None).await
        }
        async fn save_after(
            &self,
            batch: BatchResult,
            after: SaveTurn,
        ) -> Result<u64, StorageError> {
            let save = self.inner.save_after(batch, after.clone());
            self.under_way(save, Some(&after)).await
        }
    }

    /// A tag fan-out of more batches than one step follows, saved two at a time.
    fn long_fan_out_two_in_flight(
        stale: fn(usize) -> u64,
        fails: fn(usize) -> Option<StorageError>,
    ) -> (Engine, Saves, Watched) {
        let tag = invocation("inv_tag", json!({"type": "tag", "tagName": "vip"}));
        engine_of(vec![tag], (FOLLOW_BATCHES + 3) * 1_000, 2, stale, fails)
    }

    /// [`engine_with`], with up to `in_flight` saves under way at once, and the save numbered
    /// `n` failing with `fails(n)` when that is some error. The repository's saves are
    /// watched ([`Overlapping`]).
    fn engine_of(
        claimed: Vec<Invocation>,
        tagged: u32,
        in_flight: usize,
        stale: fn(usize) -> u64,
        fails: fn(usize) -> Option<StorageError>,
    ) -> (Engine, Saves, Watched) {
        let mut flows = MockFlowRepository::new();
        // One read per flow version and step, however many invocations share it.
        flows
            .expect_get_version()
            .times(1)
            .returning(|_, _| Ok(Some(published(json!({"metadata": {"cardName": "T"}})))));
        let mut streams = MockStreamRepository::new();
        streams
            .expect_list()
            .times(1)
            .returning(|env, _| Ok(vec![default_stream(env)]));
        let mut end_users = MockEndUserRepository::new();
        end_users.expect_ids().returning(move |_, query, page| {
            assert_eq!(query.tag.as_deref(), Some("vip"));
            Ok(users(0..tagged)
                .into_iter()
                .filter(|id| page.after.as_ref().is_none_or(|a| id > a))
                .take(page.limit as usize + 1)
                .collect())
        });
        let saved = Arc::new(Mutex::new(Vec::new()));
        let mut invocations = MockInvocationRepository::new();
        let mut claims = Some(claimed);
        invocations
            .expect_claim()
            .times(1)
            .withf(|_, _, limit| *limit == CLAIM_PER_STEP)
            .returning(move |_, _, _| Ok(claims.take().unwrap_or_default()));
        let answer = move |saves: &mut Vec<Vec<BatchResult>>, batches| {
            saves.push(batches);
            let n = saves.len() - 1;
            match fails(n) {
                Some(e) => Err(e),
                None => Ok(stale(n)),
            }
        };
        let sink = saved.clone();
        invocations
            .expect_save_batches()
            .returning(move |batches| answer(&mut sink.lock().expect("saved"), batches));
        // A followed fan-out's next batches.
        let sink = saved.clone();
        invocations
            .expect_save_after()
            .returning(move |batch, _| answer(&mut sink.lock().expect("saved"), vec![batch]));
        let watched = Watched::default();
        let invocations = Overlapping {
            inner: invocations,
            now: watched.now.clone(),
            most: watched.most.clone(),
            turns: watched.turns.clone(),
            given: AtomicUsize::new(0),
            ended: AtomicUsize::new(0),
        };
        let mut clock = crate::time::MockClock::new();
        clock.expect_now().returning(now);
        let engine = Engine::new(
            Arc::new(flows),
            Arc::new(invocations),
            Arc::new(end_users),
            Arc::new(MockSegmentRepository::new()),
            Arc::new(streams),
            Arc::new(clock),
        )
        .with_saves_in_flight(in_flight);
        (engine, saved, watched)
    }

    /// An engine over mocks for failures: reading the users of a tag panics, and a save of a
    /// batch of `bad` fails as a database refusing a row would.
    fn failing_engine(claimed: Vec<Invocation>, bad: &'static str) -> (Engine, Saves) {
        let mut flows = MockFlowRepository::new();
        flows
            .expect_get_version()
            .returning(|_, _| Ok(Some(published(json!({"metadata": {"cardName": "T"}})))));
        let mut streams = MockStreamRepository::new();
        streams
            .expect_list()
            .returning(|env, _| Ok(vec![default_stream(env)]));
        let mut end_users = MockEndUserRepository::new();
        end_users
            .expect_ids()
            .returning(|_, _, _| panic!("injected: a tag's users cannot be read"));
        let saved = Arc::new(Mutex::new(Vec::new()));
        let mut invocations = MockInvocationRepository::new();
        let mut claims = Some(claimed);
        invocations
            .expect_claim()
            .returning(move |_, _, _| Ok(claims.take().unwrap_or_default()));
        let sink = saved.clone();
        invocations
            .expect_save_batches()
            .returning(move |batches: Vec<BatchResult>| {
                let refused = batches
                    .iter()
                    .any(|b| b.invocation_id == bad && b.status != InvocationStatus::Failed);
                if refused {
                    return Err(crate::StorageError::Internal(
                        "injected: row refused".into(),
                    ));
                }
                sink.lock().expect("saved").push(batches);
                Ok(0)
            });
        let mut clock = crate::time::MockClock::new();
        clock.expect_now().returning(now);
        let engine = Engine::new(
            Arc::new(flows),
            Arc::new(invocations),
            Arc::new(end_users),
            Arc::new(MockSegmentRepository::new()),
            Arc::new(streams),
            Arc::new(clock),
        );
        (engine, saved)
    }

    fn error_id(batch: &BatchResult) -> &str {
        let error = batch.errors.first().map(String::as_str).unwrap_or("");
        let at = error.find("errorId err_").map_or(error.len(), |i| i + 8);
        &error[at..error.len().saturating_sub(1).max(at)]
    }

    #[tokio::test]
    async fn an_invocation_that_panics_fails_alone_with_an_error_id_and_the_others_complete() {
        let tag = invocation("inv_tag", json!({"type": "tag", "tagName": "vip"}));
        let one = invocation("inv_one", json!({"type": "user", "targetUserIds": ["a"]}));
        let (engine, saves) = failing_engine(vec![tag, one], "none");
        assert!(engine.step().await.expect("the step goes on"));
        {
            let saves = saves.lock().expect("saved");
            let saved = &saves[0];
            let by_id = |id: &str| saved.iter().find(|b| b.invocation_id == id).expect(id);
            assert_eq!(by_id("inv_one").status, InvocationStatus::Completed);
            assert_eq!(by_id("inv_one").cards.len(), 1);
            let failed = by_id("inv_tag");
            assert_eq!(failed.status, InvocationStatus::Failed);
            assert!(failed.cards.is_empty());
            assert!(error_id(failed).starts_with("err_"), "{:?}", failed.errors);
            assert!(!failed.errors[0].contains("injected"), "no internals shown");
        }
        // Nothing is left for the next step.
        assert!(!engine.step().await.expect("step"));
    }

    /// The statuses `id`'s batches were saved with, in order.
    fn statuses(saved: &[&BatchResult], id: &str) -> Vec<InvocationStatus> {
        saved
            .iter()
            .filter(|b| b.invocation_id == id)
            .map(|b| b.status)
            .collect()
    }

    #[tokio::test]
    async fn a_batch_the_database_refuses_fails_alone_and_the_others_are_saved() {
        let one = invocation("inv_one", json!({"type": "user", "targetUserIds": ["a"]}));
        let bad = invocation("inv_bad", json!({"type": "user", "targetUserIds": ["b"]}));
        let two = invocation("inv_two", json!({"type": "user", "targetUserIds": ["c"]}));
        let (engine, saves) = failing_engine(vec![one, bad, two], "inv_bad");
        assert!(engine.step().await.expect("the step goes on"));
        let saves = saves.lock().expect("saved");
        let all: Vec<&BatchResult> = saves.iter().flatten().collect();
        let status = |id: &str| statuses(&all, id);
        assert_eq!(status("inv_one"), [InvocationStatus::Completed]);
        assert_eq!(status("inv_two"), [InvocationStatus::Completed]);
        assert_eq!(status("inv_bad"), [InvocationStatus::Failed]);
        let failed = all
            .iter()
            .find(|b| b.invocation_id == "inv_bad")
            .expect("bad");
        assert!(error_id(failed).starts_with("err_"), "{:?}", failed.errors);
    }

    #[tokio::test]
    async fn a_fan_out_whose_save_is_refused_fails_alone_and_its_step_goes_on() {
        // 1,500 users: a batch of 1,000 and a follow-up, so the step takes the fan-out path.
        let ids: Vec<String> = (0..1_500).map(|n| format!("u{n:05}")).collect();
        let big = invocation("inv_big", json!({"type": "user", "targetUserIds": ids}));
        let one = invocation("inv_one", json!({"type": "user", "targetUserIds": ["a"]}));
        let (engine, saves) = failing_engine(vec![big, one], "inv_big");
        assert!(engine.step().await.expect("the step goes on"));
        let saves = saves.lock().expect("saved");
        let all: Vec<&BatchResult> = saves.iter().flatten().collect();
        let status = |id: &str| statuses(&all, id);
        assert_eq!(status("inv_one"), [InvocationStatus::Completed]);
        assert_eq!(status("inv_big"), [InvocationStatus::Failed]);
    }

    #[tokio::test]
    async fn a_step_runs_small_invocations_first_and_saves_them_together() {
        let tag = invocation("inv_tag", json!({"type": "tag", "tagName": "vip"}));
        let one = invocation("inv_one", json!({"type": "user", "targetUserIds": ["a"]}));
        let two = invocation(
            "inv_two",
            json!({"type": "user", "targetUserIds": ["b", "c"]}),
        );
        let (engine, saves) = engine(vec![tag, one, two], 1_500);
        assert!(engine.step().await.expect("step"));
        let saves = saves.lock().expect("saved");
        let saved = &saves[0];
        let order: Vec<&str> = saved.iter().map(|b| b.invocation_id.as_str()).collect();
        assert_eq!(order, ["inv_one", "inv_two", "inv_tag"], "smallest first");
        let cards: Vec<usize> = saved.iter().map(|b| b.cards.len()).collect();
        assert_eq!(cards, [1, 2, BATCH_USERS as usize]);
        assert_eq!(saved[0].status, InvocationStatus::Completed);
        assert_eq!(saved[2].status, InvocationStatus::Running);
        assert_eq!(saved[2].cursor.as_deref(), Some("u00999"));
        assert!(saved
            .iter()
            .all(|b| b.cards.iter().all(|c| c.stream_ids == ["str_all"])));
    }

    #[tokio::test]
    async fn invocations_past_the_users_of_a_batch_are_released_unchanged() {
        // Two full batches claimed together: the second waits for the next step.
        let first = invocation("inv_a", json!({"type": "tag", "tagName": "vip"}));
        let second = invocation("inv_b", json!({"type": "tag", "tagName": "vip"}));
        let (engine, saves) = engine(vec![first, second], 2_000);
        assert!(engine.step().await.expect("step"));
        let saves = saves.lock().expect("saved");
        let saved = &saves[0];
        assert_eq!(saved.len(), 2);
        assert_eq!(saved[0].cards.len(), BATCH_USERS as usize);
        let released = &saved[1];
        assert_eq!(released.invocation_id, "inv_b");
        assert!(released.cards.is_empty() && released.events.is_empty());
        assert_eq!(
            (released.from_cursor.clone(), released.cursor.clone()),
            (None, None)
        );
        assert_eq!(released.status, InvocationStatus::Running);
        assert_eq!(released.users_targeted, 0);
        assert_eq!(released.lease_until, None, "its claim ends");
        // inv_a's next batch followed in the same step; the released one did not.
        assert_eq!(saves.len(), 2);
        assert_eq!(saves[1].len(), 1);
        assert_eq!(saves[1][0].invocation_id, "inv_a");
    }

    #[tokio::test]
    async fn an_invocation_released_unchanged_is_not_followed() {
        // inv_a completes in this step's batch; inv_b, half done, is past the step's users.
        let first = invocation("inv_a", json!({"type": "tag", "tagName": "vip"}));
        let second = Invocation {
            cursor: Some("u00499".into()),
            ..invocation("inv_b", json!({"type": "tag", "tagName": "vip"}))
        };
        let (engine, saves) = engine(vec![first, second], 1_000);
        assert!(engine.step().await.expect("step"));
        let saves = saves.lock().expect("saved");
        assert_eq!(saves.len(), 1, "nothing followed");
        let released = &saves[0][1];
        assert_eq!(released.invocation_id, "inv_b");
        assert_eq!(released.cursor.as_deref(), Some("u00499"));
        assert_eq!(released.lease_until, None);
        assert_eq!(saves[0][0].status, InvocationStatus::Completed);
    }

    #[tokio::test]
    async fn a_fan_out_goes_on_with_its_next_batches_keeping_its_claim() {
        let tag = invocation("inv_tag", json!({"type": "tag", "tagName": "vip"}));
        let (engine, saves) = engine(vec![tag], 3_500);
        assert!(engine.step().await.expect("step"));
        let saves = saves.lock().expect("saved");
        let batches: Vec<&BatchResult> = saves
            .iter()
            .map(|save| {
                assert_eq!(save.len(), 1, "one batch per save");
                &save[0]
            })
            .collect();
        let cursors: Vec<(Option<&str>, Option<&str>)> = batches
            .iter()
            .map(|b| (b.from_cursor.as_deref(), b.cursor.as_deref()))
            .collect();
        assert_eq!(
            cursors,
            [
                (None, Some("u00999")),
                (Some("u00999"), Some("u01999")),
                (Some("u01999"), Some("u02999")),
                (Some("u02999"), Some("u02999")),
            ],
            "each from the cursor of the one before (the last keeps it)"
        );
        let users: Vec<u64> = batches.iter().map(|b| b.users_targeted).collect();
        assert_eq!(users, [1_000, 1_000, 1_000, 500]);
        let kept = Some(now() + chrono::Duration::seconds(i64::from(LEASE_SECONDS)));
        let leases: Vec<_> = batches.iter().map(|b| b.lease_until).collect();
        assert_eq!(
            leases,
            [kept, kept, kept, None],
            "the claim ends with the last"
        );
        assert_eq!(batches[3].status, InvocationStatus::Completed);
    }

    #[tokio::test]
    async fn a_step_follows_a_fan_out_for_a_bounded_number_of_batches() {
        let tag = invocation("inv_tag", json!({"type": "tag", "tagName": "vip"}));
        let (engine, saves) = engine(vec![tag], (FOLLOW_BATCHES + 3) * 1_000);
        assert!(engine.step().await.expect("step"));
        let saves = saves.lock().expect("saved");
        assert_eq!(saves.len(), 1 + FOLLOW_BATCHES as usize);
        let last = &saves[saves.len() - 1][0];
        assert_eq!(last.status, InvocationStatus::Running, "users are left");
        assert_eq!(
            last.cursor,
            Some(format!("u{:05}", (FOLLOW_BATCHES + 1) * 1_000 - 1))
        );
        assert_eq!(last.lease_until, None, "released for the next claim");
    }

    #[tokio::test]
    async fn a_followed_fan_out_taken_over_by_another_holder_is_left_to_it_and_counted() {
        let tag = invocation("inv_tag", json!({"type": "tag", "tagName": "vip"}));
        // The second save finds the invocation at another cursor: another worker claimed it
        // after this one's lease ran out, and saved first.
        let (engine, saves) = engine_with(vec![tag], (FOLLOW_BATCHES + 3) * 1_000, |n| {
            u64::from(n == 1)
        });
        assert!(engine.step().await.expect("step"));
        assert_eq!(saves.lock().expect("saved").len(), 2, "no batch after it");
        assert_eq!(engine.take_stale(), 1);
    }

    /// The (starting, next) cursor of each batch saved, in order.
    fn cursors(saves: &Saves) -> Vec<(Option<String>, Option<String>)> {
        saves
            .lock()
            .expect("saved")
            .iter()
            .flatten()
            .map(|b| (b.from_cursor.clone(), b.cursor.clone()))
            .collect()
    }

    /// One step of `engine`, which must end within ten seconds.
    async fn step_of(engine: &Engine) -> Result<bool, StorageError> {
        tokio::time::timeout(std::time::Duration::from_secs(10), engine.step())
            .await
            .expect("the step ends")
    }

    #[tokio::test]
    async fn with_one_save_in_flight_each_next_batch_is_saved_once_the_save_before_ended() {
        let tag = invocation("inv_tag", json!({"type": "tag", "tagName": "vip"}));
        let (engine, saves, watched) = engine_of(vec![tag], 5_500, 1, |_| 0, |_| None);
        assert!(step_of(&engine).await.expect("step"));
        assert_eq!(saves.lock().expect("saved").len(), 6);
        assert_eq!(watched.most.load(Ordering::SeqCst), 1);
        assert_eq!(*watched.turns.lock().expect("turns"), [(true, true); 4]);
    }

    #[tokio::test]
    async fn with_two_saves_in_flight_a_batch_is_saved_while_the_one_before_is() {
        let tag = invocation("inv_tag", json!({"type": "tag", "tagName": "vip"}));
        let (engine, saves, watched) = engine_of(vec![tag], 5_500, 2, |_| 0, |_| None);
        assert!(step_of(&engine).await.expect("step"));
        assert_eq!(watched.most.load(Ordering::SeqCst), 2);
        // Each was given the turn of the save before it: under way when it came, ended by the
        // time it ended.
        assert_eq!(*watched.turns.lock().expect("turns"), [(false, true); 4]);
        let u = |n: u32| Some(format!("u{n:05}"));
        let mut expected = vec![(None, u(999))];
        for i in 1..5 {
            expected.push((u(i * 1_000 - 1), u(i * 1_000 + 999)));
        }
        expected.push((u(4_999), u(4_999)));
        assert_eq!(
            cursors(&saves),
            expected,
            "each from the cursor of the one before"
        );
        assert_eq!(engine.take_stale(), 0);
    }

    #[tokio::test]
    async fn with_two_saves_in_flight_a_failed_save_is_run_again_from_where_it_started() {
        // The second save fails; the third, given before that was known, finds its batch
        // before not saved (stale, as its fence answers).
        let (engine, saves, _) = long_fan_out_two_in_flight(
            |n| u64::from(n == 2),
            |n| (n == 1).then(|| StorageError::Internal("injected: row refused".into())),
        );
        assert!(step_of(&engine).await.expect("step"));
        let cursors = cursors(&saves);
        assert_eq!(cursors.len(), 4, "{cursors:?}");
        let again = &cursors[3];
        assert_eq!(
            again, &cursors[1],
            "the failed batch, run again from its cursor"
        );
        assert_eq!(
            engine.take_stale(),
            0,
            "a batch after a failed save is not stale"
        );
    }

    #[tokio::test]
    async fn with_two_saves_in_flight_an_unreachable_database_ends_the_step_after_both() {
        let (engine, saves, watched) = long_fan_out_two_in_flight(
            |n| u64::from(n == 2),
            |n| (n == 1).then(|| StorageError::Unavailable("injected: unreachable".into())),
        );
        assert!(step_of(&engine).await.is_err());
        assert_eq!(saves.lock().expect("saved").len(), 3);
        assert_eq!(
            watched.now.load(Ordering::SeqCst),
            0,
            "no save outlives the step"
        );
        assert_eq!(engine.take_stale(), 0);
    }

    #[tokio::test]
    async fn with_two_saves_in_flight_a_fan_out_taken_over_stops_and_counts_both() {
        let (engine, saves, _) = long_fan_out_two_in_flight(|n| u64::from(n >= 1), |_| None);
        assert!(step_of(&engine).await.expect("step"));
        assert_eq!(saves.lock().expect("saved").len(), 3, "no batch after them");
        assert_eq!(engine.take_stale(), 2);
    }
}

mod cancels_in_a_batch {
    use std::sync::Arc;

    use chrono::TimeZone;

    use crate::cancel::{CancelFilter, CancelTask};
    use crate::card::{card_event, CardInstance, CardStatus};
    use crate::trigger::invocation::{BatchResult, InvocationStatus};
    use crate::Timestamp;

    fn t(seconds: i64) -> Timestamp {
        chrono::Utc
            .timestamp_opt(1_700_000_000 + seconds, 0)
            .unwrap()
    }

    /// A batch of a two-step flow: each user's instance has two cards.
    fn batch(users: &[&str]) -> BatchResult {
        let mut b = BatchResult {
            environment_id: "env_a".into(),
            invocation_id: "inv_1".into(),
            from_cursor: None,
            cursor: Some("u9".into()),
            status: InvocationStatus::Running,
            users_targeted: users.len() as u64,
            cards_created: 2 * users.len() as u64,
            errors: Vec::new(),
            cards: Vec::new(),
            events: Vec::new(),
            instances: Vec::new(),
            updated: t(5),
            lease_until: None,
        };
        for user in users {
            for step in ["s1", "s2"] {
                let card = Arc::new(CardInstance {
                    user_id: (*user).into(),
                    flow_instance_id: format!("fin_{user}"),
                    step_id: step.into(),
                    ..crate::card::test_card(
                        &format!("crd_{user}_{step}"),
                        CardStatus::Active,
                        t(5),
                    )
                });
                b.events.push(card_event(card.clone(), None, None, t(5)));
                b.cards.push(card);
            }
        }
        b
    }

    fn marker(filter: CancelFilter, created: i64) -> CancelTask {
        CancelTask::new(
            "00000000-0000-4000-8000-000000000000".into(),
            "env_a",
            "flw_1",
            filter,
            t(created),
        )
    }

    #[test]
    fn a_marker_for_one_user_drops_that_users_instance_card_and_event_only() {
        let mut b = batch(&["u1", "u2"]);
        let one = CancelFilter {
            end_user_id: Some("u1".into()),
            ..CancelFilter::default()
        };
        b.apply_cancels(&[marker(one, 3)], 2, t(1));
        assert_eq!(
            b.cards
                .iter()
                .map(|c| (c.user_id.as_str(), c.step_id.as_str()))
                .collect::<Vec<_>>(),
            [("u2", "s1"), ("u2", "s2")]
        );
        assert_eq!(
            b.events.iter().map(|e| e.user_id()).collect::<Vec<_>>(),
            ["u2", "u2"]
        );
        assert_eq!(b.cards_created, 2);
        assert_eq!(b.status, InvocationStatus::Running, "the rest goes on");
        assert_eq!(b.cursor.as_deref(), Some("u9"));
    }

    #[test]
    fn a_marker_for_the_whole_flow_stops_the_invocation() {
        let mut b = batch(&["u1", "u2"]);
        b.apply_cancels(&[marker(CancelFilter::default(), 3)], 2, t(1));
        assert!(b.cards.is_empty() && b.events.is_empty());
        assert_eq!(b.cards_created, 0);
        assert_eq!(b.status, InvocationStatus::Cancelled);
        assert_eq!(b.cursor, None);
    }

    #[test]
    fn markers_older_than_the_invocation_or_of_another_version_change_nothing() {
        let untouched = batch(&["u1"]);
        let mut b = untouched.clone();
        let other_version = CancelFilter {
            flow_version: Some(1),
            ..CancelFilter::default()
        };
        // Accepted before the invocation was recorded (at 1), and for version 1 (it is 2).
        b.apply_cancels(
            &[marker(CancelFilter::default(), 0), marker(other_version, 3)],
            2,
            t(1),
        );
        assert_eq!(b, untouched);
    }
}

mod runs_at_record_time {
    use std::sync::{Arc, Mutex};

    use super::{default_stream, now};

    use serde_json::json;

    use crate::audience::{MockSegmentRepository, MockStreamRepository};
    use crate::tenancy::{KeyAccess, Principal, Role};
    use crate::trigger::invocation::{
        BatchResult, Invocation, InvocationStatus, MockInvocationRepository, INLINE_USERS,
    };
    use crate::trigger::TriggerService;
    use crate::trigger::{parse, Mode};

    type Recorded = Arc<Mutex<Vec<(Invocation, Option<BatchResult>)>>>;

    /// A trigger service over mocks of a published flow with one card step and a draft; what
    /// `record_run` is given is kept.
    fn service() -> (TriggerService, Recorded) {
        let flows = super::card_flows();
        let mut streams = MockStreamRepository::new();
        // Read once: the default stream is kept for later triggers.
        streams
            .expect_list()
            .times(1)
            .returning(|env, _| Ok(vec![default_stream(env)]));
        let recorded: Recorded = Arc::default();
        let sink = recorded.clone();
        let mut invocations = MockInvocationRepository::new();
        invocations.expect_running_bulk().returning(|_| Ok(0));
        invocations.expect_record_run().returning(move |runs| {
            let answer = vec![None; runs.len()];
            sink.lock().expect("recorded").extend(runs);
            Ok(answer)
        });
        let mut clock = crate::time::MockClock::new();
        clock.expect_now().returning(now);
        let service = TriggerService::new(
            Arc::new(flows),
            Arc::new(invocations),
            Arc::new(MockSegmentRepository::new()),
            Arc::new(streams),
            Arc::new(clock),
        );
        (service, recorded)
    }

    fn who() -> Principal {
        Principal {
            key_id: "key".into(),
            organisation_id: "org".into(),
            access: KeyAccess::Roles(vec![Role::Events]),
            environment_ids: vec!["env".into()],
            end_user: None,
        }
    }

    #[tokio::test]
    async fn a_trigger_reports_every_problem_of_every_element_at_once() {
        let (service, recorded) = service();
        let body = json!({"flows": [
            {"target": {"type": "user", "targetUserIds": ["a"]},
             "payload": {"variables": {"name": 5},
                         "cardOptions": {"priority": 11, "expiresInterval": "P290000Y"}}},
            {"target": {"type": "nobody"}, "payload": {"variables": {"name": true}}},
            {"target": {"type": "user", "targetUserIds": ["b"]},
             "payload": {"cardOptions": {"embargo": "10000-01-01T00:00:00Z",
                                         "expires": "9999-12-31T23:59:59-01:00"}}},
        ]});
        let err = service
            .trigger_body(&who(), &"env".into(), &"flw".into(), Mode::Live, &body)
            .await
            .expect_err("invalid");
        let crate::DomainError::Validation(problems) = err else {
            panic!("{err:?}");
        };
        let fields: Vec<&str> = problems.iter().map(|p| p.field.as_str()).collect();
        for expected in [
            "flows[0].payload.cardOptions.priority",
            "flows[0].payload.cardOptions.expiresInterval",
            "flows[0].payload.variables.name",
            "flows[1].target.type",
            "flows[1].payload.variables.name",
            "flows[2].payload.cardOptions.embargo",
            "flows[2].payload.cardOptions.expires",
        ] {
            assert!(fields.contains(&expected), "{expected} in {fields:?}");
        }
        let elements: Vec<&str> = fields.iter().map(|f| &f[..9]).collect();
        let mut sorted = elements.clone();
        sorted.sort();
        assert_eq!(elements, sorted, "in the order of the elements");
        assert!(recorded.lock().expect("recorded").is_empty());
        // The next, valid, trigger is recorded.
        let valid = json!({"flows": [{"target": {"type": "user", "targetUserIds": ["a"]},
            "payload": {"cardOptions": {"expiresInterval": "P100Y"}}}]});
        service
            .trigger_body(&who(), &"env".into(), &"flw".into(), Mode::Live, &valid)
            .await
            .expect("valid");
        assert_eq!(recorded.lock().expect("recorded").len(), 1);
    }

    #[tokio::test]
    async fn live_user_targets_up_to_the_limit_run_when_recorded_and_others_wait_for_workers() {
        let (service, recorded) = service();
        let many: Vec<String> = (0..=INLINE_USERS).map(|i| format!("m{i:02}")).collect();
        let request = parse(&json!({"flows": [
            {"target": {"type": "user", "targetUserIds": ["b", "a"]},
             "payload": {"variables": {"name": "Ann"}}},
            {"target": {"type": "tag", "tagName": "vip"}},
            {"target": {"type": "user", "targetUserIds": many}},
        ]}))
        .expect("request");
        service
            .trigger(
                &who(),
                &"env".into(),
                &"flw".into(),
                Mode::Live,
                request.clone(),
            )
            .await
            .expect("live");
        service
            .trigger(&who(), &"env".into(), &"flw".into(), Mode::Test, request)
            .await
            .expect("test");
        let recorded = recorded.lock().expect("recorded");
        let runs: Vec<(Mode, bool)> = recorded
            .iter()
            .map(|(i, run)| (i.mode, run.is_some()))
            .collect();
        assert_eq!(
            runs,
            [
                (Mode::Live, true),
                (Mode::Live, false),
                (Mode::Live, false),
                (Mode::Test, false),
                (Mode::Test, false),
                (Mode::Test, false),
            ],
            "live user targets of at most {INLINE_USERS} users only"
        );
        let (invocation, run) = &recorded[0];
        let run = run.as_ref().expect("run");
        assert_eq!(run.invocation_id, invocation.id);
        assert_eq!(
            (run.from_cursor.clone(), run.cursor.clone(), run.status),
            (None, None, InvocationStatus::Completed)
        );
        assert_eq!((run.users_targeted, run.cards_created), (2, 2));
        let users: Vec<&str> = run.cards.iter().map(|c| c.user_id.as_str()).collect();
        assert_eq!(users, ["a", "b"]);
        assert_eq!(run.events.len(), 2);
        assert_ne!(run.cards[0].flow_instance_id, run.cards[1].flow_instance_id);
        for card in &run.cards {
            assert!(card.flow_instance_id.starts_with("fin_"));
            assert_eq!(card.invocation_id, invocation.id);
            assert_eq!(card.stream_ids, ["str_all"]);
            assert_eq!(
                card.content.views(&card.platforms)["Web"]["defaultView"]["content"][0]
                    ["attributes"]["text"],
                "Hi Ann"
            );
        }
    }
}

/// `TriggerService::invocations`: the permission first, then the cursor and the flow, then one
/// page read from storage, one more than asked.
mod lists {
    use std::sync::Arc;

    use chrono::Duration;

    use crate::audience::{MockSegmentRepository, MockStreamRepository};
    use crate::flow::MockFlowRepository;
    use crate::page::{newest_first_key, After, PageRequest};
    use crate::tenancy::{KeyAccess, Scope};
    use crate::testing::{caller, clock, t0};
    use crate::trigger::invocation::{
        Invocation, InvocationFilter, InvocationStatus, MockInvocationRepository,
    };
    use crate::trigger::{Mode, TriggerService};
    use crate::{DomainError, Resource};

    fn service(flows: MockFlowRepository, invocations: MockInvocationRepository) -> TriggerService {
        TriggerService::new(
            Arc::new(flows),
            Arc::new(invocations),
            Arc::new(MockSegmentRepository::new()),
            Arc::new(MockStreamRepository::new()),
            clock(),
        )
    }

    /// Flows over a mock: `flw` is a flow of `env`, nothing else is.
    fn flows() -> MockFlowRepository {
        let mut flows = MockFlowRepository::new();
        flows.expect_get().returning(|env, id| {
            Ok((env == "env" && id == "flw")
                .then(|| crate::Flow::new("flw", "env", "org_1", "F", t0())))
        });
        flows
    }

    fn reader() -> crate::Principal {
        caller("env", KeyAccess::Scopes(vec![Scope::ActionFlowsRead]))
    }

    fn invocation(id: &str, seconds: i64) -> Invocation {
        let at = t0() + Duration::seconds(seconds);
        Invocation {
            environment_id: "env".into(),
            id: id.into(),
            flow_id: "flw".into(),
            mode: Mode::Live,
            flow_version: 1,
            fingerprint: "fp".into(),
            target: serde_json::json!({"type": "allTestUsers"}).into(),
            payload: serde_json::Value::Null.into(),
            strict_variables: false,
            bulk: false,
            status: InvocationStatus::Completed,
            users_targeted: 1,
            cards_created: 1,
            errors: Vec::new(),
            cursor: None,
            created: at,
            updated: at,
        }
    }

    #[tokio::test]
    async fn the_key_is_checked_before_anything_is_read() {
        // Mocks without expectations: any read fails the test.
        let service = service(MockFlowRepository::new(), MockInvocationRepository::new());
        let page = || PageRequest::new(None, Some("not a cursor".into())).expect("page");
        let trigger_only = caller("env", KeyAccess::Scopes(vec![Scope::ActionFlowsTrigger]));
        let denied = service
            .invocations(
                &trigger_only,
                &"env".into(),
                &"flw".into(),
                InvocationFilter::default(),
                page(),
            )
            .await;
        assert!(
            matches!(denied, Err(DomainError::Forbidden(_))),
            "{denied:?}"
        );
        let elsewhere = service
            .invocations(
                &reader(),
                &"env_2".into(),
                &"flw".into(),
                InvocationFilter::default(),
                page(),
            )
            .await;
        assert!(
            matches!(elsewhere, Err(DomainError::Unauthenticated)),
            "{elsewhere:?}"
        );
    }

    #[tokio::test]
    async fn a_cursor_no_page_handed_out_is_refused_and_an_unknown_flow_not_found() {
        let service = service(flows(), MockInvocationRepository::new());
        for bad in ["inv_1", "yesterday|inv_1", "1969-01-01T00:00:00Z|inv_1"] {
            let page = PageRequest::new(None, Some(bad.into())).expect("page");
            let refused = service
                .invocations(
                    &reader(),
                    &"env".into(),
                    &"flw".into(),
                    InvocationFilter::default(),
                    page,
                )
                .await;
            let Err(DomainError::Validation(problems)) = refused else {
                panic!("{bad}: {refused:?}")
            };
            assert_eq!(problems[0].field, "cursor");
        }
        // A flow of another environment is not found, and its invocations are not read.
        let missing = service
            .invocations(
                &reader(),
                &"env".into(),
                &"flw_other".into(),
                InvocationFilter::default(),
                PageRequest::default(),
            )
            .await;
        assert!(
            matches!(missing, Err(DomainError::NotFound(Resource::Flow))),
            "{missing:?}"
        );
    }

    #[tokio::test]
    async fn pages_go_on_after_the_last_time_and_id_with_the_filter_kept() {
        let filter = InvocationFilter {
            status: Some(InvocationStatus::Completed),
            mode: Some(Mode::Live),
        };
        let mut invocations = MockInvocationRepository::new();
        // The first page: two asked, three read, so a next page exists.
        invocations
            .expect_list()
            .withf(move |env, flow, f, after, limit| {
                env == "env" && flow == "flw" && *f == filter && after.is_none() && *limit == 3
            })
            .times(1)
            .returning(|_, _, _, _, _| {
                Ok(vec![
                    invocation("b", 3),
                    invocation("a", 3),
                    invocation("z", 2),
                ])
            });
        // The next: after `a` at its instant; the last one read.
        invocations
            .expect_list()
            .withf(move |_, _, f, after, limit| {
                *f == filter
                    && *limit == 3
                    && *after
                        == Some(After::Item {
                            created: t0() + Duration::seconds(3),
                            id: "a".into(),
                        })
            })
            .times(1)
            .returning(|_, _, _, _, _| Ok(vec![invocation("z", 2)]));
        let service = service(flows(), invocations);
        let first = service
            .invocations(
                &reader(),
                &"env".into(),
                &"flw".into(),
                filter,
                PageRequest::new(Some(2), None).expect("page"),
            )
            .await
            .expect("first page");
        let ids: Vec<&str> = first.items.iter().map(|i| i.id.as_str()).collect();
        assert_eq!(ids, ["b", "a"]);
        let next = first.next_after.expect("more follow");
        assert_eq!(next, newest_first_key(&(t0() + Duration::seconds(3)), "a"));
        let last = service
            .invocations(
                &reader(),
                &"env".into(),
                &"flw".into(),
                filter,
                PageRequest::new(Some(2), Some(next)).expect("page"),
            )
            .await
            .expect("last page");
        assert_eq!(last.items.len(), 1);
        assert_eq!(last.next_after, None);
    }
}

#[test]
fn a_fingerprint_keeps_128_bits_and_a_whole_hash_recorded_before_still_replays() {
    use crate::trigger::idempotency::{decide, Reuse, RunKey};
    use sha2::{Digest, Sha256};

    let print = fingerprint_of(r#"{"targetUserIds":["u1"]}"#, "null");
    assert_eq!(print.len(), 32);
    // The whole hash, as invocations recorded before kept it.
    let whole = crate::secret::hex(&Sha256::digest(
        br#"{"payload":{},"target":{"targetUserIds":["u1"]}}"#,
    ));
    assert!(whole.starts_with(&print));
    let asked = RunKey {
        flow_id: "flw_1",
        mode: Mode::Live,
        fingerprint: &print,
    };
    let legacy = RunKey {
        fingerprint: &whole,
        ..asked
    };
    assert_eq!(decide(&asked, Some(&legacy)), Reuse::Replay);
    // Another request is not taken for it because the lengths differ.
    let other = fingerprint_of(r#"{"targetUserIds":["u2"]}"#, "null");
    let asked_other = RunKey {
        fingerprint: &other,
        ..asked
    };
    assert_eq!(decide(&asked_other, Some(&legacy)), Reuse::Conflict);
    let truncated = RunKey {
        fingerprint: &whole[..40],
        ..asked
    };
    assert_eq!(decide(&asked, Some(&truncated)), Reuse::Conflict);
}

/// The worker of waiting instances over mocks: a due instance runs on and is saved with the
/// cards its steps made; one whose invocation is gone fails alone.
mod waits_steps {
    use std::sync::{Arc, Mutex};

    use chrono::Duration;
    use serde_json::{json, Map};

    use super::{default_stream, now, published};
    use crate::audience::MockStreamRepository;
    use crate::flow::steps::run;
    use crate::flow::steps::{InstanceState, Program, StepState};
    use crate::flow::MockFlowRepository;
    use crate::trigger::instances::{FlowInstance, InstanceAdvance, MockInstanceRepository};
    use crate::trigger::invocation::{Invocation, InvocationStatus, MockInvocationRepository};
    use crate::trigger::waits::Waits;
    use crate::trigger::Mode;

    fn config() -> serde_json::Value {
        json!({"type": "card", "initialSteps": ["s1"],
            "steps": {
                "s1": {"id": "s1", "type": "create-card", "next": ["pause"],
                       "properties": {"cardTemplateId": "t"}},
                "pause": {"id": "pause", "type": "wait", "next": ["s2"],
                          "properties": {"duration": "PT1M"}},
                "s2": {"id": "s2", "type": "create-card", "properties": {"cardTemplateId": "t"}}
            },
            "cardTemplates": {"t": {"metadata": {"cardName": "T"}}}})
    }

    fn instance(id: &str, invocation: &str) -> FlowInstance {
        let program = Program::parse(&config()).expect("valid");
        let first = run::start(&program, &Map::new(), now(), &mut || "crd_1".to_owned());
        FlowInstance {
            environment_id: "env".into(),
            id: id.into(),
            invocation_id: invocation.into(),
            flow_id: "flw".into(),
            flow_version: 1,
            user_id: "u1".into(),
            state: first.state,
            records: first.records,
            due: first.due,
            revision: 7,
            created: now(),
            updated: now(),
        }
    }

    fn invocation(id: &str) -> Invocation {
        Invocation {
            environment_id: "env".into(),
            id: id.into(),
            flow_id: "flw".into(),
            mode: Mode::Live,
            flow_version: 1,
            fingerprint: id.into(),
            target: json!({"type": "user", "targetUserIds": ["u1"]}).into(),
            payload: json!({}).into(),
            strict_variables: false,
            bulk: false,
            status: InvocationStatus::Completed,
            users_targeted: 1,
            cards_created: 1,
            errors: Vec::new(),
            cursor: None,
            created: now(),
            updated: now(),
        }
    }

    #[tokio::test]
    async fn a_due_wait_makes_the_next_card_and_a_missing_invocation_fails_alone() {
        let mut flows = MockFlowRepository::new();
        flows.expect_get_version().times(1).returning(|_, _| {
            let mut version = published(json!({}));
            version.config = config();
            Ok(Some(version))
        });
        let mut invocations = MockInvocationRepository::new();
        invocations
            .expect_get()
            .returning(|_, id| Ok((id == "inv_1").then(|| invocation(id))));
        let mut streams = MockStreamRepository::new();
        streams
            .expect_list()
            .returning(|env, _| Ok(vec![default_stream(env)]));
        let mut instances = MockInstanceRepository::new();
        instances
            .expect_claim_due()
            .times(1)
            .returning(|_, lease, limit| {
                assert_eq!(lease, Duration::seconds(30));
                assert!(limit > 0);
                Ok(vec![
                    instance("fin_1", "inv_1"),
                    instance("fin_2", "inv_gone"),
                ])
            });
        let saved: Arc<Mutex<Vec<InstanceAdvance>>> = Arc::default();
        let keep = saved.clone();
        instances
            .expect_advance()
            .times(1)
            .returning(move |advances| {
                keep.lock().expect("saves").extend(advances);
                Ok(0)
            });
        let mut clock = crate::time::MockClock::new();
        clock
            .expect_now()
            .returning(|| now() + Duration::seconds(61));
        let waits = Waits::new(
            Arc::new(flows),
            Arc::new(invocations),
            Arc::new(instances),
            Arc::new(streams),
            Arc::new(clock),
        );
        let step = waits.step().await.expect("a step");
        assert_eq!((step.claimed, step.stale), (2, 0));
        let saved = saved.lock().expect("saves");
        let [ran, failed] = &saved[..] else {
            panic!("two saves: {saved:?}");
        };
        assert_eq!(
            ran.instance.revision, 7,
            "fenced by the revision it was read at"
        );
        assert_eq!(ran.instance.state, InstanceState::Completed);
        assert_eq!(ran.cards.len(), 1);
        assert_eq!(ran.cards[0].step_id, "s2");
        assert_eq!(ran.cards[0].flow_instance_id, "fin_1");
        assert_eq!(ran.events.len(), 1);
        assert_eq!(failed.instance.state, InstanceState::Failed);
        assert!(failed.cards.is_empty());
        assert!(matches!(
            failed.instance.records["pause"].state,
            StepState::Failed { .. }
        ));
    }
}
