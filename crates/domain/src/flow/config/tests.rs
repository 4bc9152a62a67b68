use serde_json::{json, Value};

use super::*;
use crate::flow::values::matches_pattern;

/// A valid configuration: two steps, two templates, flow and template variables.
fn valid() -> Value {
    json!({
        "type": "card",
        "version": "1",
        "initialSteps": ["s1"],
        "variables": {
            "firstName": {"type": "string", "source": "event", "default": "there",
                "required": true},
            "due": {"type": "date", "source": "event", "default": "2026-12-01T00:00:00Z"}
        },
        "steps": {
            "s1": {"id": "s1", "type": "create-card", "next": ["s2"],
                   "properties": {"cardTemplateId": "welcome", "output": {"type": "default"}}},
            "s2": {"id": "s2", "type": "create-card", "next": [],
                   "properties": {"cardTemplateId": "reminder"}}
        },
        "cardTemplates": {
            "welcome": {
                "metadata": {"cardName": "Welcome", "cardDescription": "Hi",
                    "delivery": {"priority": 5}},
                "variables": {"amount": {"type": "number", "source": "static", "default": 10}},
                "defaultView": {
                    "content": [
                        {"key": "h1", "type": "headline",
                            "attributes": {"text": "Hello %{firstName}"}},
                        {"key": "img", "type": "image", "attributes": {"src": "%{assetv1:logo}",
                            "label": "Logo"}},
                        {"key": "t1", "type": "text",
                            "attributes": {"text": "You owe %{amount} by %{due}"}},
                        {"key": "x1", "type": "futureElement", "attributes": {"anything": true}}
                    ],
                    "actions": [{"key": "go", "type": "submitButton", "attributes": {"text": "OK",
                        "values": {}}}]
                },
                "subviews": {"more": {"content": [{"key": "h1", "type": "headline",
                    "attributes": {"text": "More"}}]}},
                "notification": {"attributes": {"body": "Hi %{firstName}"}}
            },
            "reminder": {"metadata": {"cardName": "Reminder"}}
        },
        "somethingNew": {"kept": true}
    })
}

/// Sets (or with `Value::Null`, removes) the value at a JSON pointer.
fn with(pointer: &str, value: Value) -> Value {
    let mut config = valid();
    crate::testing::set_pointer(&mut config, pointer, value);
    config
}

fn fields(config: &Value) -> Vec<String> {
    validate(config, "config")
        .into_iter()
        .map(|e| e.field)
        .collect()
}

#[test]
fn the_valid_configuration_passes() {
    assert_eq!(validate(&valid(), "config"), vec![]);
}

#[test]
fn table_of_invalid_configurations() {
    let cases: Vec<(&str, Value, &[&str])> = vec![
        ("not an object", json!([1]), &["config"]),
        ("type missing", with("/type", Value::Null), &["config.type"]),
        (
            "type not card",
            with("/type", json!("email")),
            &["config.type"],
        ),
        (
            "version not a string",
            with("/version", json!(2)),
            &["config.version"],
        ),
        (
            "steps missing",
            with("/steps", Value::Null),
            &["config.steps"],
        ),
        (
            "initialSteps missing",
            with("/initialSteps", Value::Null),
            &["config.initialSteps"],
        ),
        (
            "initialSteps empty",
            with("/initialSteps", json!([])),
            &["config.initialSteps"],
        ),
        (
            "initialSteps names no step",
            with("/initialSteps", json!(["s1", "nope"])),
            &["config.initialSteps[1]"],
        ),
        (
            "initialSteps not strings",
            with("/initialSteps", json!(["s1", 3])),
            &["config.initialSteps[1]"],
        ),
        (
            "step id differs from key",
            with("/steps/s2/id", json!("other")),
            &["config.steps.s2.id"],
        ),
        (
            "step id missing",
            with("/steps/s2/id", Value::Null),
            &["config.steps.s2.id"],
        ),
        (
            "unknown step type",
            with("/steps/s2/type", json!("send-email")),
            &["config.steps.s2.type"],
        ),
        (
            "next names no step",
            with("/steps/s1/next", json!(["s2", "ghost"])),
            &["config.steps.s1.next[1]"],
        ),
        (
            "unreachable step",
            with("/steps/s1/next", json!([])),
            &["config.steps.s2"],
        ),
        (
            "cycle",
            with("/steps/s2/next", json!(["s1"])),
            &["config.steps.s2.next"],
        ),
        (
            "self loop",
            with("/steps/s1/next", json!(["s1", "s2"])),
            &["config.steps.s1.next"],
        ),
        (
            "create-card without properties",
            with("/steps/s2/properties", Value::Null),
            &["config.steps.s2.properties"],
        ),
        (
            "create-card names no template",
            with("/steps/s2/properties/cardTemplateId", json!("gone")),
            &["config.steps.s2.properties.cardTemplateId"],
        ),
        (
            "create-card template id missing",
            with("/steps/s2/properties/cardTemplateId", Value::Null),
            &["config.steps.s2.properties.cardTemplateId"],
        ),
        (
            "cardName empty",
            with("/cardTemplates/reminder/metadata/cardName", json!(" ")),
            &["config.cardTemplates.reminder.metadata.cardName"],
        ),
        (
            "metadata missing",
            with("/cardTemplates/reminder/metadata", Value::Null),
            &["config.cardTemplates.reminder.metadata"],
        ),
        (
            "priority 0",
            with(
                "/cardTemplates/welcome/metadata/delivery/priority",
                json!(0),
            ),
            &["config.cardTemplates.welcome.metadata.delivery.priority"],
        ),
        (
            "priority 11",
            with(
                "/cardTemplates/welcome/metadata/delivery/priority",
                json!(11),
            ),
            &["config.cardTemplates.welcome.metadata.delivery.priority"],
        ),
        (
            "priority fractional",
            with(
                "/cardTemplates/welcome/metadata/delivery/priority",
                json!(2.5),
            ),
            &["config.cardTemplates.welcome.metadata.delivery.priority"],
        ),
        (
            "duplicate element key in a view",
            with(
                "/cardTemplates/welcome/defaultView/actions/0/key",
                json!("h1"),
            ),
            &["config.cardTemplates.welcome.defaultView.content[0].key"],
        ),
        (
            "headline without text",
            with(
                "/cardTemplates/welcome/defaultView/content/0/attributes",
                json!({}),
            ),
            &["config.cardTemplates.welcome.defaultView.content[0].attributes.text"],
        ),
        (
            "image without src",
            with(
                "/cardTemplates/welcome/defaultView/content/1/attributes/src",
                Value::Null,
            ),
            &["config.cardTemplates.welcome.defaultView.content[1].attributes.src"],
        ),
        (
            "submitButton without text",
            with(
                "/cardTemplates/welcome/defaultView/actions/0/attributes/text",
                json!(""),
            ),
            &["config.cardTemplates.welcome.defaultView.actions[0].attributes.text"],
        ),
        (
            "element type missing",
            with(
                "/cardTemplates/welcome/defaultView/content/3/type",
                Value::Null,
            ),
            &["config.cardTemplates.welcome.defaultView.content[3].type"],
        ),
        (
            "unknown variable reference",
            with(
                "/cardTemplates/welcome/defaultView/content/2/attributes/text",
                json!("%{nobody}"),
            ),
            &["config.cardTemplates.welcome.defaultView.content[2].attributes.text"],
        ),
        (
            "unclosed reference",
            with(
                "/cardTemplates/welcome/defaultView/content/2/attributes/text",
                json!("%{amount"),
            ),
            &["config.cardTemplates.welcome.defaultView.content[2].attributes.text"],
        ),
        (
            "reference in notification",
            with(
                "/cardTemplates/welcome/notification/attributes/body",
                json!("%{ghost}"),
            ),
            &["config.cardTemplates.welcome.notification.attributes.body"],
        ),
        (
            "template variable of another template",
            with(
                "/cardTemplates/reminder/defaultView",
                json!({"content": [{"key": "t", "type": "text",
                    "attributes": {"text": "%{amount}"}}]}),
            ),
            &["config.cardTemplates.reminder.defaultView.content[0].attributes.text"],
        ),
        (
            "unknown variable type",
            with("/variables/firstName/type", json!("text")),
            &["config.variables.firstName.type"],
        ),
        (
            "unknown variable source",
            with("/variables/firstName/source", json!("crm")),
            &["config.variables.firstName.source"],
        ),
        (
            "default of the wrong type",
            with(
                "/cardTemplates/welcome/variables/amount/default",
                json!("ten"),
            ),
            &["config.cardTemplates.welcome.variables.amount.default"],
        ),
        (
            "date default not a date",
            with("/variables/due/default", json!("next week")),
            &["config.variables.due.default"],
        ),
        (
            "required not a boolean",
            with("/variables/firstName/required", json!("yes")),
            &["config.variables.firstName.required"],
        ),
    ];
    assert!(cases.len() >= 25);
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
fn table_of_valid_variations() {
    let cases: Vec<(&str, Value)> = vec![
        (
            "unknown top-level and step fields are kept",
            with("/steps/s1/extra", json!({"x": 1})),
        ),
        (
            "unknown element type passes",
            with(
                "/cardTemplates/welcome/defaultView/content/3/type",
                json!("carousel"),
            ),
        ),
        (
            "boolean variable",
            with(
                "/variables/flag",
                json!({"type": "boolean", "source": "static", "default": false}),
            ),
        ),
        (
            "date default matching its pattern",
            with(
                "/variables/due",
                json!({"type": "date", "default": "22/11/2026", "defaultFormatter": "date",
                    "defaultFormatterOption": "dd/MM/yyyy"}),
            ),
        ),
        (
            "number default given as a numeric string",
            with(
                "/cardTemplates/welcome/variables/amount/default",
                json!("12.5"),
            ),
        ),
        ("no next at all", with("/steps/s2/next", Value::Null)),
        (
            "two initial steps",
            with("/initialSteps", json!(["s1", "s2"])),
        ),
        (
            "same key in different views",
            with(
                "/cardTemplates/welcome/subviews/more/content/0/key",
                json!("h1"),
            ),
        ),
        (
            "priority omitted",
            with("/cardTemplates/welcome/metadata/delivery", json!({})),
        ),
        (
            "script variable",
            with(
                "/variables/score",
                json!({"type": "number", "source": "script"}),
            ),
        ),
    ];
    for (name, config) in cases {
        assert_eq!(validate(&config, "config"), vec![], "{name}");
    }
}

#[test]
fn every_problem_is_reported_at_once() {
    let mut config = with("/type", json!("sms"));
    config["steps"]["s2"]["type"] = json!("send-email");
    config["cardTemplates"]["reminder"]["metadata"]["cardName"] = json!("");
    config["variables"]["due"]["default"] = json!(3);
    assert_eq!(
        fields(&config),
        [
            "config.cardTemplates.reminder.metadata.cardName",
            "config.steps.s2.type",
            "config.type",
            "config.variables.due.default",
        ]
    );
}

#[test]
fn diamond_shapes_are_not_cycles() {
    let config = json!({
        "type": "card", "initialSteps": ["a"],
        "steps": {
            "a": {"id": "a", "type": "create-card", "next": ["b", "c"],
                "properties": {"cardTemplateId": "t"}},
            "b": {"id": "b", "type": "create-card", "next": ["d"],
                "properties": {"cardTemplateId": "t"}},
            "c": {"id": "c", "type": "create-card", "next": ["d"],
                "properties": {"cardTemplateId": "t"}},
            "d": {"id": "d", "type": "create-card", "properties": {"cardTemplateId": "t"}}
        },
        "cardTemplates": {"t": {"metadata": {"cardName": "T"}}}
    });
    assert_eq!(validate(&config, "config"), vec![]);
}

#[test]
fn keys_that_are_not_identifiers_are_quoted_in_paths() {
    let config = with("/steps/s2/properties/cardTemplateId", json!("a b"));
    let mut config = config;
    config["cardTemplates"]["a b"] = json!({"metadata": {"cardName": ""}});
    assert_eq!(
        fields(&config),
        ["config.cardTemplates[\"a b\"].metadata.cardName"]
    );
}

#[test]
fn date_patterns() {
    assert!(matches_pattern("2026-11-22", "yyyy-MM-dd"));
    assert!(matches_pattern("22/11/2026 09:05", "dd/MM/yyyy HH:mm"));
    assert!(matches_pattern("1/2/2026", "d/M/yyyy"));
    assert!(matches_pattern("07:30 PM", "hh:mm a"));
    assert!(!matches_pattern("2026-11-2", "yyyy-MM-dd"));
    assert!(!matches_pattern("2026/11/22", "yyyy-MM-dd"));
    assert!(!matches_pattern("2026-11-22x", "yyyy-MM-dd"));
    assert!(check_value("date", &json!("2026-11-22T10:00:00.000Z"), None).is_ok());
    assert!(check_value("date", &json!("2026-11-22"), None).is_err());
}

#[test]
fn a_view_list_that_is_null_is_refused_not_read_as_absent() {
    // The document says `content` and `actions` are arrays; null was let through as absent.
    let mut config = valid();
    config["cardTemplates"]["welcome"]["subviews"]["more"]["content"] = Value::Null;
    config["cardTemplates"]["welcome"]["defaultView"]["actions"] = Value::Null;
    assert_eq!(
        fields(&config),
        vec![
            "config.cardTemplates.welcome.defaultView.actions",
            "config.cardTemplates.welcome.subviews.more.content",
        ]
    );
}

#[test]
fn a_notification_title_or_body_that_is_not_text_is_refused() {
    let mut config = valid();
    config["cardTemplates"]["welcome"]["notification"]["attributes"]["title"] = json!({});
    config["cardTemplates"]["welcome"]["notification"]["attributes"]["body"] = json!(3);
    assert_eq!(
        fields(&config),
        vec![
            "config.cardTemplates.welcome.notification.attributes.body",
            "config.cardTemplates.welcome.notification.attributes.title",
        ]
    );
    let attributes_not_an_object = with(
        "/cardTemplates/welcome/notification/attributes",
        json!("Hi"),
    );
    assert_eq!(
        fields(&attributes_not_an_object),
        vec!["config.cardTemplates.welcome.notification.attributes"]
    );
}
