//! Conditions of a branch: names, operators and values checked against what each name holds.

use serde_json::{json, Value};

use super::{fields, set, valid, with, IF0, P0};
use crate::flow::config::validate;

fn condition(c: Value) -> Value {
    with(IF0, c)
}

fn check(cases: Vec<(&str, Value, String)>) {
    for (name, config, expected) in cases {
        let got = fields(&config);
        assert_eq!(got, [expected], "{name}: {:?}", validate(&config, "config"));
    }
}

#[test]
fn names_and_operators() {
    check(vec![
        (
            "unknown variable",
            condition(json!({"variable": "age", "op": "exists"})),
            format!("{P0}.variable"),
        ),
        (
            "unknown step reference",
            condition(json!({"variable": "steps.ghost.outcome", "op": "exists"})),
            format!("{P0}.variable"),
        ),
        (
            "outcome of a create-card step",
            condition(json!({"variable": "steps.ask.outcome", "op": "exists"})),
            format!("{P0}.variable"),
        ),
        (
            "values of a wait step",
            condition(json!({"variable": "steps.pause.values.x", "op": "exists"})),
            format!("{P0}.variable"),
        ),
        (
            "unknown op",
            condition(json!({"variable": "score", "op": "matches", "value": 1})),
            format!("{P0}.op"),
        ),
        (
            "op missing",
            condition(json!({"variable": "score", "value": 1})),
            format!("{P0}.op"),
        ),
    ]);
}

#[test]
fn values_against_the_declared_types() {
    check(vec![
        (
            "number compared with text",
            condition(json!({"variable": "score", "op": "equals", "value": "high"})),
            format!("{P0}.value"),
        ),
        (
            "date compared with a non-date",
            condition(json!({"variable": "renewal", "op": "lessThan", "value": "soon"})),
            format!("{P0}.value"),
        ),
        (
            "boolean compared with a number",
            condition(json!({"variable": "vip", "op": "equals", "value": 1})),
            format!("{P0}.value"),
        ),
        (
            "string ordered",
            condition(json!({"variable": "plan", "op": "greaterThan", "value": "a"})),
            format!("{P0}.op"),
        ),
    ]);
}

#[test]
fn values_against_outcomes_and_card_values() {
    check(vec![
        (
            "outcome ordered",
            condition(json!({"variable": "steps.listen.outcome", "op": "lessThan",
                             "value": "timeout"})),
            format!("{P0}.op"),
        ),
        (
            "outcome the step cannot have",
            condition(json!({"variable": "steps.listen.outcome", "op": "equals",
                             "value": "past"})),
            format!("{P0}.value"),
        ),
        (
            "one item of in wrong",
            condition(json!({"variable": "steps.pause.outcome", "op": "in",
                             "value": ["past", "submitted"]})),
            format!("{P0}.value[1]"),
        ),
        (
            "in without a list",
            condition(json!({"variable": "plan", "op": "in", "value": "gold"})),
            format!("{P0}.value"),
        ),
        (
            "in with an empty list",
            condition(json!({"variable": "plan", "op": "in", "value": []})),
            format!("{P0}.value"),
        ),
        (
            "exists with a value",
            condition(json!({"variable": "plan", "op": "exists", "value": "x"})),
            format!("{P0}.value"),
        ),
        (
            "value missing",
            condition(json!({"variable": "plan", "op": "equals"})),
            format!("{P0}.value"),
        ),
        (
            "null value",
            condition(json!({"variable": "plan", "op": "equals", "value": null})),
            format!("{P0}.value"),
        ),
        (
            "card value ordered with text",
            condition(
                json!({"variable": "steps.listen.values.rating", "op": "greaterThan",
                             "value": "4"}),
            ),
            format!("{P0}.value"),
        ),
        (
            "card value compared with an object",
            condition(
                json!({"variable": "steps.listen.values.rating", "op": "equals",
                             "value": {}}),
            ),
            format!("{P0}.value"),
        ),
    ]);
}

#[test]
fn forms_and_nesting() {
    let deep =
        json!({"not": {"not": {"not": {"not": {"not": {"variable": "vip", "op": "exists"}}}}}});
    check(vec![
        (
            "two forms at once",
            condition(json!({"variable": "plan", "op": "exists", "all": []})),
            P0.to_owned(),
        ),
        ("no form", condition(json!({"op": "exists"})), P0.to_owned()),
        (
            "all empty",
            condition(json!({"all": []})),
            format!("{P0}.all"),
        ),
        (
            "any not a list",
            condition(json!({"any": {"variable": "plan", "op": "exists"}})),
            format!("{P0}.any"),
        ),
        (
            "nested in all",
            condition(json!({"all": [{"variable": "plan", "op": "exists"},
                                     {"variable": "x", "op": "exists"}]})),
            format!("{P0}.all[1].variable"),
        ),
        (
            "six deep",
            condition(deep),
            format!("{P0}.not.not.not.not.not"),
        ),
    ]);
}

#[test]
fn five_deep_is_allowed_and_paths_match_the_contract() {
    let five = json!({"not": {"not": {"not": {"not": {"variable": "vip", "op": "exists"}}}}});
    assert_eq!(validate(&condition(five), "config"), vec![]);
    let mut config = valid();
    set(
        &mut config,
        "/steps/route/properties/conditions/1/if",
        json!({"variable": "score", "op": "equals", "value": "x"}),
    );
    assert_eq!(
        fields(&config),
        ["config.steps.route.properties.conditions[1].if.value"]
    );
}

#[test]
fn card_values_need_the_listener_on_every_path() {
    // `route` becomes reachable straight from `ask`, around `listen`.
    let config = with("/steps/ask/next", json!(["listen", "route"]));
    assert_eq!(fields(&config), [format!("{P0}.variable")]);
    // An outcome may be read wherever the step is: absent, it compares false.
    let mut outcome = config.clone();
    set(
        &mut outcome,
        IF0,
        json!({"variable": "steps.listen.outcome", "op": "equals", "value": "timeout"}),
    );
    assert_eq!(validate(&outcome, "config"), vec![]);
}
