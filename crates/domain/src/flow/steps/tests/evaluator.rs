//! The evaluator's rules, one comparison at a time.

use serde_json::{json, Map, Value};

use super::super::*;

fn var(name: &str, declared: VariableType, op: Op, value: Option<Value>) -> Condition {
    Condition::Compare(Comparison {
        subject: Subject::Variable {
            name: name.into(),
            declared,
        },
        op,
        value,
    })
}

fn card(field: &str, op: Op, value: Value) -> Condition {
    Condition::Compare(Comparison {
        subject: Subject::CardValue {
            step: "ask".into(),
            field: field.into(),
        },
        op,
        value: Some(value),
    })
}

fn facts(variables: Value) -> Facts {
    let variables: Map<String, Value> = variables.as_object().cloned().unwrap_or_default();
    Facts {
        variables,
        ..Facts::default()
    }
}

#[test]
fn numbers_compare_as_numbers() {
    use VariableType::Number;
    let f = facts(json!({"n": 12.5, "s": " 12.5 ", "big": u64::MAX, "neg": i64::MIN}));
    assert!(evaluate(
        &var("n", Number, Op::Equals, Some(json!(12.5))),
        &f
    ));
    assert!(evaluate(
        &var("s", Number, Op::Equals, Some(json!(12.5))),
        &f
    ));
    assert!(evaluate(
        &var("n", Number, Op::GreaterThan, Some(json!(12))),
        &f
    ));
    assert!(evaluate(
        &var("n", Number, Op::LessOrEqual, Some(json!("12.5"))),
        &f
    ));
    assert!(evaluate(
        &var("big", Number, Op::GreaterThan, Some(json!(i64::MAX))),
        &f
    ));
    assert!(evaluate(
        &var("neg", Number, Op::LessThan, Some(json!(u64::MAX))),
        &f
    ));
    assert!(evaluate(
        &var("big", Number, Op::LessThan, Some(json!(1e300))),
        &f
    ));
    assert!(evaluate(
        &var("n", Number, Op::NotEquals, Some(json!(3))),
        &f
    ));
    assert!(evaluate(
        &var("n", Number, Op::In, Some(json!([1, 12.5]))),
        &f
    ));
    assert!(!evaluate(
        &var("n", Number, Op::In, Some(json!([1, "x"]))),
        &f
    ));
}

#[test]
fn dates_compare_as_instants() {
    use VariableType::Date;
    let f = facts(json!({"d": "2027-01-01T01:00:00+01:00", "bad": "22/11/2026"}));
    let same = json!("2027-01-01T00:00:00.000Z");
    assert!(evaluate(
        &var("d", Date, Op::Equals, Some(same.clone())),
        &f
    ));
    assert!(evaluate(
        &var(
            "d",
            Date,
            Op::GreaterThan,
            Some(json!("2026-12-31T23:59:59Z"))
        ),
        &f
    ));
    // A value that is no instant is text, which an instant never equals.
    assert!(!evaluate(
        &var("bad", Date, Op::Equals, Some(same.clone())),
        &f
    ));
    assert!(!evaluate(&var("bad", Date, Op::NotEquals, Some(same)), &f));
}

#[test]
fn strings_and_booleans_by_equality() {
    use VariableType::{Boolean, String};
    let f = facts(json!({"s": "Gold", "b": "true", "t": true}));
    assert!(evaluate(
        &var("s", String, Op::Equals, Some(json!("Gold"))),
        &f
    ));
    assert!(!evaluate(
        &var("s", String, Op::Equals, Some(json!("gold"))),
        &f
    ));
    assert!(!evaluate(
        &var("s", String, Op::GreaterThan, Some(json!("A"))),
        &f
    ));
    assert!(evaluate(
        &var("b", Boolean, Op::Equals, Some(json!(true))),
        &f
    ));
    assert!(evaluate(
        &var("t", Boolean, Op::NotEquals, Some(json!(false))),
        &f
    ));
    assert!(!evaluate(
        &var("t", Boolean, Op::LessThan, Some(json!(true))),
        &f
    ));
}

#[test]
fn across_types_and_absent_values_are_false_and_not_negates_plainly() {
    use VariableType::String;
    let f = facts(json!({"s": "1", "null": null}));
    for op in Op::ALL.into_iter().filter(|op| *op != Op::Exists) {
        let value = if op == Op::In { json!([1]) } else { json!(1) };
        assert!(
            !evaluate(&var("s", String, op, Some(value.clone())), &f),
            "{op}"
        );
        assert!(
            !evaluate(&var("gone", String, op, Some(value.clone())), &f),
            "{op}"
        );
        assert!(!evaluate(&var("null", String, op, Some(value)), &f), "{op}");
    }
    assert!(evaluate(&var("s", String, Op::Exists, None), &f));
    assert!(!evaluate(&var("null", String, Op::Exists, None), &f));
    let absent = var("gone", String, Op::Equals, Some(json!("x")));
    // Plain negation: "not (gone equals x)" holds when `gone` is absent.
    assert!(evaluate(&Condition::Not(Box::new(absent)), &f));
}

#[test]
fn card_values_and_outcomes() {
    let mut f = Facts::default();
    f.values.insert(
        "ask".into(),
        json!({"rating": 4, "comment": "ok", "tags": ["a"]})
            .as_object()
            .cloned()
            .unwrap_or_default(),
    );
    f.outcomes.insert("pause".into(), Outcome::Capped);
    assert!(evaluate(&card("rating", Op::GreaterOrEqual, json!(4)), &f));
    assert!(!evaluate(
        &card("rating", Op::GreaterOrEqual, json!("4")),
        &f
    ));
    assert!(evaluate(&card("comment", Op::Equals, json!("ok")), &f));
    assert!(!evaluate(&card("tags", Op::Equals, json!(["a"])), &f));
    assert!(!evaluate(&card("missing", Op::Equals, json!(1)), &f));
    let outcome = |value: Value| {
        Condition::Compare(Comparison {
            subject: Subject::Outcome {
                step: "pause".into(),
            },
            op: Op::Equals,
            value: Some(value),
        })
    };
    assert!(evaluate(&outcome(json!("capped")), &f));
    assert!(!evaluate(&outcome(json!("past")), &f));
}

#[test]
fn all_any_and_depth() {
    use VariableType::Number;
    let f = facts(json!({"n": 1}));
    let yes = var("n", Number, Op::Equals, Some(json!(1)));
    let no = var("n", Number, Op::Equals, Some(json!(2)));
    assert!(evaluate(
        &Condition::All(vec![yes.clone(), yes.clone()]),
        &f
    ));
    assert!(!evaluate(
        &Condition::All(vec![yes.clone(), no.clone()]),
        &f
    ));
    assert!(evaluate(&Condition::Any(vec![no.clone(), yes.clone()]), &f));
    assert!(!evaluate(&Condition::Any(vec![no.clone()]), &f));
    let nested = Condition::Not(Box::new(Condition::All(vec![yes, no])));
    assert_eq!(nested.depth(), 3);
    assert!(evaluate(&nested, &f));
}

#[test]
fn a_comparison_without_its_value_is_false() {
    let f = facts(json!({"n": 1}));
    assert!(!evaluate(
        &var("n", VariableType::Number, Op::Equals, None),
        &f
    ));
    assert!(!evaluate(
        &var("n", VariableType::Number, Op::In, Some(json!(1))),
        &f
    ));
}
