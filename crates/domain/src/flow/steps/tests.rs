//! Validation of steps that wait and branch, through `config::validate` as publishing calls
//! it. The machine, the evaluator and the documented examples have their own child modules.

use chrono::Duration;
use serde_json::{json, Value};

use super::*;
use crate::flow::config::validate;

mod conditions;
mod docs_tests;
mod evaluator;
mod machine;
mod runs;

/// A valid configuration with every step type: a card, a listener on it, a timed wait, a
/// branch on the card's values and on variables, and a wait on a date variable.
pub(super) fn valid() -> Value {
    json!({
        "type": "card",
        "initialSteps": ["ask"],
        "variables": {
            "renewal": {"type": "date", "source": "event"},
            "plan": {"type": "string", "source": "event", "default": "basic"},
            "score": {"type": "number", "source": "event", "default": 0},
            "vip": {"type": "boolean", "source": "static", "default": false}
        },
        "steps": {
            "ask": {"id": "ask", "type": "create-card", "next": ["listen"],
                    "properties": {"cardTemplateId": "survey"}},
            "listen": {"id": "listen", "type": "wait-for-card",
                       "properties": {"cardStep": "ask", "timeout": "P1D",
                                      "on": {"submitted": ["route"], "timeout": ["pause"],
                                             "closed": ["thanks"]}}},
            "pause": {"id": "pause", "type": "wait", "next": ["remind"],
                      "properties": {"duration": "PT30M"}},
            "remind": {"id": "remind", "type": "create-card",
                       "properties": {"cardTemplateId": "survey"}},
            "route": {"id": "route", "type": "branch", "properties": {
                "conditions": [
                    {"if": {"variable": "steps.listen.values.rating", "op": "greaterOrEqual",
                            "value": 4},
                     "next": ["thanks"]},
                    {"if": {"all": [
                        {"variable": "plan", "op": "in", "value": ["gold", "silver"]},
                        {"not": {"variable": "vip", "op": "equals", "value": true}},
                        {"variable": "steps.listen.outcome", "op": "equals", "value": "submitted"}
                     ]},
                     "next": ["before"]}
                ],
                "otherwise": ["sorry"]
            }},
            "before": {"id": "before", "type": "wait", "next": ["sorry"],
                       "properties": {"untilVariable": "renewal", "offset": "-P1D"}},
            "thanks": {"id": "thanks", "type": "create-card",
                       "properties": {"cardTemplateId": "survey"}},
            "sorry": {"id": "sorry", "type": "create-card",
                      "properties": {"cardTemplateId": "survey"}}
        },
        "cardTemplates": {"survey": {"metadata": {"cardName": "Survey"}}}
    })
}

/// `valid()` with the value at a JSON pointer set (or, with `Value::Null`, removed).
pub(super) fn with(pointer: &str, value: Value) -> Value {
    let mut config = valid();
    set(&mut config, pointer, value);
    config
}

pub(super) fn set(config: &mut Value, pointer: &str, value: Value) {
    crate::testing::set_pointer(config, pointer, value);
}

pub(super) fn fields(config: &Value) -> Vec<String> {
    validate(config, "config")
        .into_iter()
        .map(|e| e.field)
        .collect()
}

pub(super) const IF0: &str = "/steps/route/properties/conditions/0/if";
pub(super) const P0: &str = "config.steps.route.properties.conditions[0].if";

#[test]
fn the_valid_configuration_passes_and_parses() {
    assert_eq!(validate(&valid(), "config"), vec![]);
    let program = Program::parse(&valid()).expect("program");
    assert_eq!(program.initial_steps, ["ask"]);
    assert_eq!(program.steps.len(), 8);
    assert_eq!(program.variables.get("renewal"), Some(&VariableType::Date));
    let Some(StepKind::Wait(before)) = program.step("before").map(|s| &s.kind) else {
        panic!("before is a wait");
    };
    assert_eq!(
        before.until,
        WaitUntil::Variable {
            name: "renewal".into(),
            offset: Duration::days(-1)
        }
    );
    let Some(StepKind::WaitForCard(listen)) = program.step("listen").map(|s| &s.kind) else {
        panic!("listen is a wait-for-card");
    };
    assert_eq!(listen.timeout, Duration::days(1));
    assert_eq!(listen.follows(Outcome::Submitted), ["route"]);
    assert_eq!(listen.follows(Outcome::Dismissed), ["thanks"]);
    assert_eq!(listen.follows(Outcome::Timeout), ["pause"]);
    let route = program.step("route").expect("route");
    assert_eq!(route.step_type(), StepType::Branch);
    assert_eq!(route.targets(), ["thanks", "before", "sorry"]);
}

#[test]
fn an_invalid_configuration_has_no_program() {
    let errors = Program::parse(&with("/steps/pause/properties/duration", json!("P2Y")));
    assert_eq!(
        errors.map(|_| ()).map_err(|e| e.len()),
        Err(1),
        "one problem, no program"
    );
}

#[test]
fn table_of_invalid_waits() {
    let cases: Vec<(&str, Value, &[&str])> = vec![
        (
            "no deadline",
            with("/steps/pause/properties", json!({})),
            &["config.steps.pause.properties"],
        ),
        (
            "two deadlines",
            with(
                "/steps/pause/properties/until",
                json!("2027-01-01T00:00:00Z"),
            ),
            &["config.steps.pause.properties"],
        ),
        (
            "duration under a second",
            with("/steps/pause/properties/duration", json!("PT0.5S")),
            &["config.steps.pause.properties.duration"],
        ),
        (
            "duration over a year",
            with("/steps/pause/properties/duration", json!("P366D")),
            &["config.steps.pause.properties.duration"],
        ),
        (
            "duration not ISO 8601",
            with("/steps/pause/properties/duration", json!(30)),
            &["config.steps.pause.properties.duration"],
        ),
        (
            "until not a timestamp",
            with("/steps/pause/properties", json!({"until": "next tuesday"})),
            &["config.steps.pause.properties.until"],
        ),
        (
            "offset without untilVariable",
            with("/steps/pause/properties/offset", json!("P1D")),
            &["config.steps.pause.properties.offset"],
        ),
        (
            "untilVariable unknown",
            with("/steps/before/properties/untilVariable", json!("birthday")),
            &["config.steps.before.properties.untilVariable"],
        ),
        (
            "untilVariable not a date",
            with("/steps/before/properties/untilVariable", json!("plan")),
            &["config.steps.before.properties.untilVariable"],
        ),
        (
            "offset beyond a year",
            with("/steps/before/properties/offset", json!("-P366D")),
            &["config.steps.before.properties.offset"],
        ),
        (
            "offset unsigned garbage",
            with("/steps/before/properties/offset", json!("--P1D")),
            &["config.steps.before.properties.offset"],
        ),
        (
            "date default only in a pattern",
            with(
                "/variables/renewal",
                json!({"type": "date", "default": "22/11/2026",
                       "defaultFormatterOption": "dd/MM/yyyy"}),
            ),
            &["config.steps.before.properties.untilVariable"],
        ),
        (
            "properties missing",
            with("/steps/pause/properties", Value::Null),
            &["config.steps.pause.properties"],
        ),
    ];
    check_table(cases);
}

#[test]
fn table_of_invalid_card_listeners() {
    let cases: Vec<(&str, Value, &[&str])> = vec![
        (
            "next on wait-for-card",
            with("/steps/listen/next", json!(["thanks"])),
            &["config.steps.listen.next"],
        ),
        (
            "cardStep missing",
            with("/steps/listen/properties/cardStep", Value::Null),
            &["config.steps.listen.properties.cardStep"],
        ),
        (
            "cardStep names no step",
            with("/steps/listen/properties/cardStep", json!("ghost")),
            &["config.steps.listen.properties.cardStep"],
        ),
        (
            "cardStep names a wait",
            with("/steps/listen/properties/cardStep", json!("pause")),
            &["config.steps.listen.properties.cardStep"],
        ),
        (
            "cardStep a descendant",
            with("/steps/listen/properties/cardStep", json!("remind")),
            &["config.steps.listen.properties.cardStep"],
        ),
        (
            "timeout missing",
            with("/steps/listen/properties/timeout", Value::Null),
            &["config.steps.listen.properties.timeout"],
        ),
        (
            "timeout over a year",
            with("/steps/listen/properties/timeout", json!("P400D")),
            &["config.steps.listen.properties.timeout"],
        ),
        (
            "unknown outcome",
            with("/steps/listen/properties/on/clicked", json!(["thanks"])),
            &["config.steps.listen.properties.on.clicked"],
        ),
        (
            "outcome target names no step",
            with(
                "/steps/listen/properties/on/submitted",
                json!(["route", "ghost"]),
            ),
            &["config.steps.listen.properties.on.submitted[1]"],
        ),
        (
            "on not an object",
            with("/steps/listen/properties/on", json!(["route"])),
            &[
                "config.steps.before",
                "config.steps.listen.properties.on",
                "config.steps.pause",
                "config.steps.remind",
                "config.steps.route",
                "config.steps.sorry",
                "config.steps.thanks",
            ],
        ),
    ];
    check_table(cases);
}

#[test]
fn a_card_step_on_only_some_paths_is_not_an_ancestor() {
    // `listen` is reached from `ask` and directly from the start: on that path, no card.
    let config = with("/initialSteps", json!(["ask", "listen"]));
    assert_eq!(
        fields(&config),
        [
            "config.steps.listen.properties.cardStep",
            // `route` reads `listen`'s values, and `listen` is on every path to `route`.
        ]
    );
    // A diamond above the listener keeps the card step on every path.
    let mut diamond = with("/steps/ask/next", json!(["left", "right"]));
    for side in ["left", "right"] {
        set(
            &mut diamond,
            &format!("/steps/{side}"),
            json!({"id": side, "type": "wait", "next": ["listen"],
                   "properties": {"duration": "PT1M"}}),
        );
    }
    assert_eq!(validate(&diamond, "config"), vec![]);
}

#[test]
fn table_of_invalid_branches() {
    let eleven: Vec<Value> = (0..11)
        .map(|_| json!({"if": {"variable": "vip", "op": "exists"}, "next": []}))
        .collect();
    let cases: Vec<(&str, Value, &[&str])> = vec![
        (
            "next on branch",
            with("/steps/route/next", json!(["thanks"])),
            &["config.steps.route.next"],
        ),
        (
            "no conditions",
            with("/steps/route/properties/conditions", json!([])),
            &[
                "config.steps.before",
                "config.steps.route.properties.conditions",
            ],
        ),
        (
            "eleven conditions",
            with("/steps/route/properties/conditions", json!(eleven)),
            &[
                "config.steps.before",
                "config.steps.route.properties.conditions",
            ],
        ),
        (
            "conditions missing",
            with("/steps/route/properties/conditions", Value::Null),
            &[
                "config.steps.before",
                "config.steps.route.properties.conditions",
            ],
        ),
        (
            "rule without if",
            with(IF0, Value::Null),
            &["config.steps.route.properties.conditions[0].if"],
        ),
        (
            "rule without next",
            with("/steps/route/properties/conditions/0/next", Value::Null),
            &["config.steps.route.properties.conditions[0].next"],
        ),
        (
            "rule next names no step",
            with(
                "/steps/route/properties/conditions/0/next",
                json!(["ghost"]),
            ),
            &["config.steps.route.properties.conditions[0].next[0]"],
        ),
        (
            "otherwise names no step",
            with("/steps/route/properties/otherwise", json!(["ghost"])),
            &["config.steps.route.properties.otherwise[0]"],
        ),
    ];
    check_table(cases);
}

#[test]
fn graph_rules_cover_every_kind_of_target() {
    let cycle = with("/steps/route/properties/conditions/0/next", json!(["ask"]));
    assert_eq!(
        fields(&cycle),
        ["config.steps.route.properties.conditions[0].next"]
    );
    let through_on = with("/steps/remind/next", json!(["listen"]));
    assert_eq!(fields(&through_on), ["config.steps.remind.next"]);
    let through_otherwise = with("/steps/route/properties/otherwise", json!(["route"]));
    assert_eq!(
        fields(&through_otherwise),
        ["config.steps.route.properties.otherwise"]
    );
    let listener_cut = with("/steps/listen/properties/on", json!({}));
    assert_eq!(
        fields(&listener_cut),
        [
            "config.steps.before",
            "config.steps.pause",
            "config.steps.remind",
            "config.steps.route",
            "config.steps.sorry",
            "config.steps.thanks",
        ]
    );
}

#[test]
fn at_most_fifty_steps() {
    let mut config = valid();
    let ids: Vec<String> = (0..43).map(|i| format!("extra{i}")).collect();
    set(&mut config, "/steps/thanks/next", json!([ids[0]]));
    for (i, id) in ids.iter().enumerate() {
        let next: Vec<&String> = ids.get(i + 1).into_iter().collect();
        set(
            &mut config,
            &format!("/steps/{id}"),
            json!({"id": id, "type": "create-card", "next": next,
                   "properties": {"cardTemplateId": "survey"}}),
        );
    }
    assert_eq!(fields(&config), ["config.steps"], "51 steps");
    let trimmed = {
        let mut c = config.clone();
        set(&mut c, "/steps/extra42", Value::Null);
        set(&mut c, "/steps/extra41/next", json!([]));
        c
    };
    assert_eq!(validate(&trimmed, "config"), vec![], "50 steps");
}

#[test]
fn every_problem_of_the_new_types_is_reported_at_once() {
    let mut config = with("/steps/pause/properties/duration", json!("P2Y"));
    set(&mut config, "/steps/listen/next", json!(["thanks"]));
    set(&mut config, &format!("{IF0}/op"), json!("about"));
    set(
        &mut config,
        "/steps/before/properties/offset",
        json!("P1Y1D"),
    );
    assert_eq!(
        fields(&config),
        [
            "config.steps.before.properties.offset",
            "config.steps.listen.next",
            "config.steps.pause.properties.duration",
            &format!("{P0}.op"),
        ]
    );
}

fn check_table(cases: Vec<(&str, Value, &[&str])>) {
    for (name, config, expected) in cases {
        assert_eq!(
            fields(&config),
            expected,
            "{name}: {:?}",
            validate(&config, "config")
        );
    }
}

#[test]
fn wait_variables_are_listed_and_a_trigger_without_them_is_refused() {
    let config = valid();
    let needed = wait_variables(&config);
    assert_eq!(needed.get("renewal"), Some(&vec!["before".to_owned()]));
    assert_eq!(needed.len(), 1);
    let missing = missing_wait_variables(&config, &|_| false, "flows[0].payload");
    let fields: Vec<&str> = missing.iter().map(|e| e.field.as_str()).collect();
    assert_eq!(fields, ["flows[0].payload.variables.renewal"]);
    assert!(missing[0].message.contains("`before`"), "{missing:?}");
    assert!(missing_wait_variables(&config, &|n| n == "renewal", "flows[0].payload").is_empty());
    let with_default = with("/variables/renewal/default", json!("2027-01-01T00:00:00Z"));
    assert!(missing_wait_variables(&with_default, &|_| false, "p").is_empty());
    assert!(wait_variables(&json!([1])).is_empty());
}

#[test]
fn a_wait_date_that_is_no_instant_is_refused_at_its_path() {
    let config = valid();
    let value = |v: &'static str| move |n: &str| (n == "renewal").then(|| v.to_owned());
    for bad in ["22/11/2026", "next tuesday", "", "2027-13-01T00:00:00Z"] {
        let found = unreadable_wait_dates(&config, &value(bad), "flows[0].payload");
        let fields: Vec<&str> = found.iter().map(|e| e.field.as_str()).collect();
        assert_eq!(fields, ["flows[0].payload.variables.renewal"], "{bad}");
    }
    for good in ["2027-01-01T00:00:00Z", "2027-01-01T00:00:00.123+02:00"] {
        assert!(
            unreadable_wait_dates(&config, &value(good), "p").is_empty(),
            "{good}"
        );
    }
    assert!(
        unreadable_wait_dates(&config, &|_| None, "p").is_empty(),
        "absent: not this rule's"
    );
}

#[test]
fn spellings_round_trip() {
    for ty in StepType::ALL {
        assert_eq!(StepType::parse(ty.as_str()), Some(ty));
    }
    for outcome in Outcome::ALL {
        assert_eq!(Outcome::parse(outcome.as_str()), Some(outcome));
    }
    for op in Op::ALL {
        assert_eq!(Op::parse(op.as_str()), Some(op));
    }
    assert_eq!(Outcome::possible(StepType::Wait), WAIT_OUTCOMES);
    assert!(Outcome::possible(StepType::Branch).is_empty());
}
