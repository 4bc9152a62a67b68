//! Property tests (proptest) of the steps that wait and branch (contract §21): the condition
//! evaluator is total over every JSON value and a comparison across types is false; the
//! validation of step documents never panics, on arbitrary JSON or on documents one mutation
//! away from valid; deadlines and transitions never panic, whatever the clock reads.
//!
//! As in properties.rs, failures are not persisted to files: proptest prints the minimal input
//! and its seed, and a case worth keeping becomes a plain `regression_*` test here.

use chrono::{DateTime, Duration};
use proptest::prelude::*;
use serde_json::{json, Map, Value};
use workbench_domain::flow::config;
use workbench_domain::flow::steps::{
    evaluate, transition, wait_deadline, CardClosure, ClosedCard, Comparison, Condition, Deadline,
    Event, Facts, Op, Outcome, Program, Start, StepData, StepError, StepState, Subject,
    VariableType, WaitUntil, MAX_WAIT,
};
use workbench_domain::time::{checked_after, latest};
use workbench_domain::Timestamp;

const CASES: u32 = 256;

fn config_with() -> ProptestConfig {
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(CASES);
    ProptestConfig {
        cases,
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

const LATEST_MS: i64 = 253_402_300_799_999;

// ---- JSON ----

fn arb_string() -> BoxedStrategy<String> {
    prop_oneof![
        3 => "[a-zA-Z0-9 _.:+-]{0,12}",
        2 => prop::collection::vec(any::<char>(), 0..12).prop_map(|c| c.into_iter().collect()),
        2 => prop::sample::select(vec![
            "", "true", "false", "12.5", " 12 ", "1e400", "-0", "NaN", "inf", "past", "capped",
            "submitted", "timeout", "2027-01-01T00:00:00Z", "9999-12-31T23:59:59.999Z",
            "1970-01-01T00:00:00Z", "1969-12-31T23:59:59Z", "2027-02-30T00:00:00Z", "P1D",
            "-P1D", "PT0S", "P365D", "P366D", "22/11/2026",
        ])
        .prop_map(str::to_owned),
    ]
    .boxed()
}

fn arb_number() -> BoxedStrategy<Value> {
    prop_oneof![
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        any::<f64>().prop_map(Value::from),
        (-10i64..=10).prop_map(Value::from),
        prop::sample::select(vec![
            0.0,
            -0.0,
            4.0,
            1e300,
            -1e300,
            f64::MAX,
            f64::MIN,
            5e-324
        ])
        .prop_map(Value::from),
    ]
    .boxed()
}

fn arb_scalar() -> BoxedStrategy<Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        arb_number(),
        arb_string().prop_map(Value::String),
    ]
    .boxed()
}

fn arb_json() -> BoxedStrategy<Value> {
    arb_scalar()
        .prop_recursive(6, 64, 6, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
                prop::collection::vec((arb_string(), inner), 0..6)
                    .prop_map(|entries| Value::Object(entries.into_iter().collect())),
            ]
        })
        .boxed()
}

// ---- conditions and facts ----

const NAMES: [&str; 5] = ["n", "s", "d", "b", "gone"];
const STEPS: [&str; 3] = ["ask", "pause", "ghost"];
const FIELDS: [&str; 3] = ["rating", "comment", "missing"];

fn arb_type() -> impl Strategy<Value = VariableType> {
    prop::sample::select(VariableType::ALL.to_vec())
}

fn arb_subject() -> BoxedStrategy<Subject> {
    let step = || prop::sample::select(STEPS.to_vec()).prop_map(str::to_owned);
    prop_oneof![
        (prop::sample::select(NAMES.to_vec()), arb_type()).prop_map(|(name, declared)| {
            Subject::Variable {
                name: name.to_owned(),
                declared,
            }
        }),
        step().prop_map(|step| Subject::Outcome { step }),
        (step(), prop::sample::select(FIELDS.to_vec())).prop_map(|(step, field)| {
            Subject::CardValue {
                step,
                field: field.to_owned(),
            }
        }),
    ]
    .boxed()
}

fn arb_condition() -> BoxedStrategy<Condition> {
    let op = prop::sample::select(Op::ALL.to_vec());
    let comparison = (arb_subject(), op, prop::option::of(arb_json()))
        .prop_map(|(subject, op, value)| Condition::Compare(Comparison { subject, op, value }));
    comparison
        .prop_recursive(6, 32, 4, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..4).prop_map(Condition::All),
                prop::collection::vec(inner.clone(), 0..4).prop_map(Condition::Any),
                inner.prop_map(|c| Condition::Not(Box::new(c))),
            ]
        })
        .boxed()
}

fn arb_map(keys: &'static [&'static str]) -> BoxedStrategy<Map<String, Value>> {
    prop::collection::btree_map(prop::sample::select(keys.to_vec()), arb_json(), 0..4)
        .prop_map(|m| m.into_iter().map(|(k, v)| (k.to_owned(), v)).collect())
        .boxed()
}

fn arb_facts() -> BoxedStrategy<Facts> {
    let outcomes = prop::collection::btree_map(
        prop::sample::select(STEPS.to_vec()).prop_map(str::to_owned),
        prop::sample::select(Outcome::ALL.to_vec()),
        0..3,
    );
    let values = prop::collection::btree_map(
        prop::sample::select(STEPS.to_vec()).prop_map(str::to_owned),
        arb_map(&FIELDS),
        0..3,
    );
    (arb_map(&NAMES), outcomes, values)
        .prop_map(|(variables, outcomes, values)| Facts {
            variables,
            outcomes,
            values,
        })
        .boxed()
}

/// A left side of a declared type that reads as that type, and a right side that reads as
/// another.
fn across_types() -> BoxedStrategy<(VariableType, Value, Value)> {
    let number = prop_oneof![arb_number(), Just(json!(" 4.5 ")), Just(json!("-12"))];
    let date = prop::sample::select(vec!["2027-01-01T00:00:00Z", "1970-01-01T00:00:00.000Z"])
        .prop_map(Value::from);
    let boolean = prop_oneof![any::<bool>().prop_map(Value::Bool), Just(json!("true"))];
    // Text that no declared type reads as something else.
    let text = "[a-z]{0,8}"
        .prop_filter("plain text", |t| t != "true" && t != "false")
        .prop_map(Value::from);
    let compound = prop_oneof![Just(json!([1])), Just(json!({"a": 1})), Just(json!([]))];
    prop_oneof![
        (
            number.clone(),
            prop_oneof![boolean.clone(), text.clone(), date.clone()]
        )
            .prop_map(|(l, r)| (VariableType::Number, l, r)),
        (
            date.clone(),
            prop_oneof![arb_number(), boolean.clone(), text.clone()]
        )
            .prop_map(|(l, r)| (VariableType::Date, l, r)),
        (
            text.clone(),
            prop_oneof![arb_number(), any::<bool>().prop_map(Value::Bool)]
        )
            .prop_map(|(l, r)| (VariableType::String, l, r)),
        (boolean, prop_oneof![arb_number(), text, date]).prop_map(|(l, r)| (
            VariableType::Boolean,
            l,
            r
        )),
        (arb_type(), compound, arb_scalar()).prop_map(|(t, l, r)| (t, l, r)),
    ]
    .boxed()
}

fn compare(name: &str, declared: VariableType, op: Op, value: Value) -> Condition {
    let value = if op == Op::In { json!([value]) } else { value };
    Condition::Compare(Comparison {
        subject: Subject::Variable {
            name: name.to_owned(),
            declared,
        },
        op,
        value: Some(value),
    })
}

// ---- configurations ----

fn valid() -> Value {
    json!({
        "type": "card", "initialSteps": ["ask"],
        "variables": {"renewal": {"type": "date"}, "score": {"type": "number"},
                      "plan": {"type": "string", "default": "basic"}},
        "steps": {
            "ask": {"id": "ask", "type": "create-card", "next": ["listen"],
                    "properties": {"cardTemplateId": "t"}},
            "listen": {"id": "listen", "type": "wait-for-card",
                       "properties": {"cardStep": "ask", "timeout": "P1D",
                                      "on": {"submitted": ["route"], "timeout": ["pause"]}}},
            "pause": {"id": "pause", "type": "wait", "next": ["done"],
                      "properties": {"duration": "PT30M"}},
            "route": {"id": "route", "type": "branch", "properties": {
                "conditions": [
                    {"if": {"variable": "steps.listen.values.rating", "op": "greaterOrEqual",
                            "value": 4}, "next": ["done"]},
                    {"if": {"any": [{"variable": "plan", "op": "in", "value": ["gold"]},
                                    {"not": {"variable": "score", "op": "exists"}}]},
                     "next": ["before"]}
                ],
                "otherwise": []
            }},
            "before": {"id": "before", "type": "wait", "next": ["done"],
                       "properties": {"untilVariable": "renewal", "offset": "-P1D"}},
            "done": {"id": "done", "type": "create-card", "properties": {"cardTemplateId": "t"}}
        },
        "cardTemplates": {"t": {"metadata": {"cardName": "T"}}}
    })
}

const POINTERS: [&str; 22] = [
    "/steps/pause/properties/duration",
    "/steps/pause/properties/until",
    "/steps/pause/properties/offset",
    "/steps/pause/properties",
    "/steps/pause/type",
    "/steps/pause/next",
    "/steps/before/properties/untilVariable",
    "/steps/before/properties/offset",
    "/steps/listen/properties/cardStep",
    "/steps/listen/properties/timeout",
    "/steps/listen/properties/on",
    "/steps/listen/properties/on/submitted",
    "/steps/listen/next",
    "/steps/route/properties/conditions",
    "/steps/route/properties/conditions/0/if",
    "/steps/route/properties/conditions/1/if",
    "/steps/route/properties/conditions/1/next",
    "/steps/route/properties/otherwise",
    "/steps/route/type",
    "/steps/extra",
    "/variables/renewal/type",
    "/initialSteps",
];

/// A value close to what the pointed-at field takes: step ids, durations, timestamps, types,
/// condition trees (deeper than allowed, too), or anything.
fn near_value() -> BoxedStrategy<Value> {
    let ids = prop::sample::select(vec![
        "ask", "listen", "pause", "route", "before", "done", "x",
    ]);
    prop_oneof![
        2 => ids.clone().prop_map(Value::from),
        2 => prop::collection::vec(ids, 0..3).prop_map(|v| json!(v)),
        2 => arb_string().prop_map(Value::from),
        1 => prop::sample::select(vec!["create-card", "wait", "wait-for-card", "branch"])
            .prop_map(Value::from),
        3 => near_condition(),
        1 => arb_json(),
    ]
    .boxed()
}

fn near_condition() -> BoxedStrategy<Value> {
    let names = prop::sample::select(vec![
        "plan",
        "score",
        "renewal",
        "steps.listen.outcome",
        "steps.listen.values.rating",
        "steps.pause.outcome",
        "steps.ask.outcome",
        "steps.ghost.values.x",
        "steps.",
        "",
    ]);
    let ops = prop::sample::select(
        Op::ALL
            .iter()
            .map(|o| o.as_str())
            .chain(["matches", ""])
            .collect::<Vec<_>>(),
    );
    let leaf = (names, ops, prop::option::of(arb_json())).prop_map(|(name, op, value)| {
        let mut map = Map::new();
        map.insert("variable".into(), json!(name));
        map.insert("op".into(), json!(op));
        if let Some(value) = value {
            map.insert("value".into(), value);
        }
        Value::Object(map)
    });
    leaf.prop_recursive(8, 48, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(|v| json!({"all": v})),
            prop::collection::vec(inner.clone(), 0..4).prop_map(|v| json!({"any": v})),
            inner.prop_map(|c| json!({"not": c})),
        ]
    })
    .boxed()
}

fn set(config: &mut Value, pointer: &str, value: Value) {
    let Some((parent, key)) = pointer.rsplit_once('/') else {
        return;
    };
    match config.pointer_mut(parent) {
        Some(Value::Object(map)) => {
            map.insert(key.to_owned(), value);
        }
        Some(Value::Array(items)) => {
            if let Some(slot) = key.parse::<usize>().ok().and_then(|i| items.get_mut(i)) {
                *slot = value;
            }
        }
        _ => {}
    }
}

fn mutated() -> BoxedStrategy<Value> {
    let mutation = (prop::sample::select(POINTERS.to_vec()), near_value());
    prop::collection::vec(mutation, 1..4)
        .prop_map(|mutations| {
            let mut config = valid();
            for (pointer, value) in mutations {
                set(&mut config, pointer, value);
            }
            config
        })
        .boxed()
}

fn check_config(value: &Value) -> Result<(), TestCaseError> {
    let problems = config::validate(value, "config");
    for p in &problems {
        prop_assert!(p.field.starts_with("config"), "{p:?}");
        prop_assert!(!p.message.is_empty(), "{p:?}");
    }
    prop_assert!(problems.windows(2).all(|w| w[0].field <= w[1].field));
    let program = Program::parse(value);
    prop_assert_eq!(
        program.is_ok(),
        problems.is_empty(),
        "a program iff no problem"
    );
    if let Ok(program) = program {
        for step in program.steps.values() {
            for target in step.targets() {
                prop_assert!(program.steps.contains_key(target), "{target}");
            }
        }
    }
    Ok(())
}

// ---- time ----

fn arb_instant() -> BoxedStrategy<Timestamp> {
    prop_oneof![
        4 => (0i64..=LATEST_MS).prop_filter_map("ms", DateTime::from_timestamp_millis),
        1 => Just(DateTime::UNIX_EPOCH),
        1 => Just(latest()),
    ]
    .boxed()
}

fn arb_delta() -> BoxedStrategy<Duration> {
    prop_oneof![
        any::<i64>().prop_map(|ms| Duration::try_milliseconds(ms).unwrap_or(Duration::MIN)),
        (-400_000_000_000i64..=400_000_000_000).prop_map(Duration::milliseconds),
        prop::sample::select(vec![
            Duration::MAX,
            Duration::MIN,
            Duration::zero(),
            MAX_WAIT
        ]),
    ]
    .boxed()
}

fn arb_until() -> BoxedStrategy<WaitUntil> {
    prop_oneof![
        arb_delta().prop_map(WaitUntil::After),
        arb_instant().prop_map(WaitUntil::At),
        (prop::sample::select(NAMES.to_vec()), arb_delta()).prop_map(|(name, offset)| {
            WaitUntil::Variable {
                name: name.to_owned(),
                offset,
            }
        }),
    ]
    .boxed()
}

fn arb_state() -> BoxedStrategy<StepState> {
    prop_oneof![
        Just(StepState::Pending),
        Just(StepState::Running),
        arb_instant().prop_map(|deadline| StepState::Waiting { deadline }),
        prop::sample::select(Outcome::ALL.to_vec()).prop_map(|outcome| StepState::Done {
            outcome,
            data: StepData::None
        }),
        Just(StepState::Cancelled),
        Just(StepState::Failed {
            error: StepError::Engine("x".into())
        }),
    ]
    .boxed()
}

fn arb_closed() -> BoxedStrategy<ClosedCard> {
    let closure = prop::sample::select(CardClosure::ALL.to_vec());
    (closure, arb_map(&FIELDS))
        .prop_map(|(closure, values)| ClosedCard { closure, values })
        .boxed()
}

proptest! {
    #![proptest_config(config_with())]

    #[test]
    fn the_evaluator_is_total_and_not_negates(c in arb_condition(), facts in arb_facts()) {
        let holds = evaluate(&c, &facts);
        prop_assert_eq!(evaluate(&Condition::Not(Box::new(c.clone())), &facts), !holds);
        prop_assert_eq!(evaluate(&Condition::All(vec![c.clone()]), &facts), holds);
        prop_assert_eq!(evaluate(&Condition::Any(vec![c]), &facts), holds);
    }

    #[test]
    fn a_comparison_across_types_is_false((declared, left, right) in across_types()) {
        let facts = Facts {
            variables: Map::from_iter([("x".to_owned(), left)]),
            ..Facts::default()
        };
        for op in Op::ALL.into_iter().filter(|op| *op != Op::Exists) {
            let c = compare("x", declared, op, right.clone());
            prop_assert!(!evaluate(&c, &facts), "{op} {declared}: {facts:?} {right}");
        }
    }

    #[test]
    fn a_comparison_with_an_absent_value_is_false(
        declared in arb_type(),
        right in arb_json(),
        absent in prop_oneof![Just(None), Just(Some(Value::Null))],
    ) {
        let facts = Facts {
            variables: absent.into_iter().map(|v| ("x".to_owned(), v)).collect(),
            ..Facts::default()
        };
        for op in Op::ALL {
            prop_assert!(!evaluate(&compare("x", declared, op, right.clone()), &facts), "{op}");
        }
    }

    #[test]
    fn validation_of_arbitrary_steps_never_panics(
        steps in arb_json(),
        initial in arb_json(),
        variables in arb_json(),
    ) {
        let config = json!({"type": "card", "steps": steps, "initialSteps": initial,
                            "variables": variables});
        check_config(&config)?;
    }

    #[test]
    fn validation_of_almost_valid_steps_never_panics(config in mutated()) {
        check_config(&config)?;
    }

    #[test]
    fn deadlines_never_panic_and_stay_in_bounds(
        until in arb_until(),
        at in arb_instant(),
        facts in arb_facts(),
        date in prop::option::of(arb_instant()),
    ) {
        let mut facts = facts;
        if let Some(date) = date {
            let text = workbench_domain::time::format_timestamp(&date);
            facts.variables.insert("d".into(), Value::from(text));
        }
        if let Ok(Deadline::At(deadline)) = wait_deadline(&until, at, &facts) {
            prop_assert!(deadline > at);
            let limit = checked_after(at, MAX_WAIT);
            prop_assert!(limit.is_none_or(|limit| deadline <= limit));
        }
    }

    #[test]
    fn transitions_never_panic_and_final_states_stay(
        state in arb_state(),
        at in arb_instant(),
        facts in arb_facts(),
        card in arb_closed(),
        early in any::<bool>(),
        which in 0usize..6,
    ) {
        let program = Program::parse(&valid()).expect("valid");
        for step in program.steps.values() {
            let event = match which {
                0 => Event::Started(Start { at, facts: &facts, card: early.then_some(&card) }),
                1 => Event::CardCreated,
                2 => Event::DeadlineReached { at },
                3 => Event::CardClosed(&card),
                4 => Event::Failed(StepError::Engine("e".into())),
                _ => Event::Cancel,
            };
            let next = transition(step, &state, event);
            if state.is_final() {
                prop_assert!(!next.changed);
                prop_assert_eq!(&next.state, &state);
            }
            if !next.changed {
                prop_assert!(next.follow.is_empty());
            }
            for id in &next.follow {
                prop_assert!(program.steps.contains_key(id), "{id}");
            }
        }
    }
}

#[test]
fn regression_huge_integers_compare_without_overflow() {
    let facts = Facts {
        variables: Map::from_iter([("n".to_owned(), json!(u64::MAX))]),
        ..Facts::default()
    };
    let c = compare("n", VariableType::Number, Op::GreaterThan, json!(i64::MIN));
    assert!(evaluate(&c, &facts));
}
