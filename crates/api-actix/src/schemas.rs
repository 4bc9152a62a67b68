//! JSON Schemas of the bodies the domain validates as JSON rather than through typed structs:
//! an Action Flow configuration (`domain::flow::config::validate`) and a trigger request and
//! its elements (`domain::trigger::request::parse`). Their enums and limits are the domain's
//! constants, and their examples (`examples/`, the same as docs/flows.md) are checked against
//! the validators by the tests below, so the document and the code cannot drift apart.
//!
//! What a schema cannot say is in the descriptions: a step's `next` and `initialSteps` name
//! steps of the configuration, every step is reachable and the steps form no cycle, a step's
//! `cardTemplateId` names a template, and every `%{name}` names a variable.

mod actions;
mod audience;
mod fields;
mod folders;
mod keys;
mod push;

use domain::flow::config::{KNOWN_ELEMENTS, PRIORITIES, VARIABLE_SOURCES, VARIABLE_TYPES};
use domain::flow::steps::StepType;
use domain::trigger::request::{
    MAX_FLOW_ELEMENTS, MAX_INVOCATION_ID_CHARS, MAX_NOTIFICATION_DETAIL_BYTES, MAX_TARGET_USERS,
};
use serde_json::{json, Value};
use std::borrow::Cow;
use utoipa::openapi::{RefOr, Schema};
use utoipa::{PartialSchema, ToSchema};

use fields::{id_string, reference};

/// A one-step card flow: one card with a headline, a text and a button.
pub const ONE_STEP: &str = include_str!("examples/one-step.json");
/// A flow whose card uses variables (a string with a default and a date) and notifies.
pub const VARIABLES_AND_NOTIFICATION: &str =
    include_str!("examples/variables-and-notification.json");
/// A flow of two steps: a welcome card, then a survey card.
pub const TWO_STEPS: &str = include_str!("examples/two-steps.json");
/// A trigger of the one-step flow for two users, with an idempotency key.
pub const START_USERS: &str = include_str!("examples/start-users.json");
/// A trigger of the flow with variables: values, card options and a notification detail.
pub const START_VARIABLES: &str = include_str!("examples/start-variables.json");

/// The configuration examples, by name, as the document lists them.
pub fn config_examples() -> Vec<(&'static str, Value)> {
    [
        ("oneStep", ONE_STEP),
        ("variablesAndNotification", VARIABLES_AND_NOTIFICATION),
        ("twoSteps", TWO_STEPS),
    ]
    .into_iter()
    .filter_map(|(name, text)| serde_json::from_str(text).ok().map(|v| (name, v)))
    .collect()
}

/// The trigger examples, by name, with the configuration example each one starts.
pub fn trigger_examples() -> Vec<(&'static str, &'static str, Value)> {
    [
        ("users", "oneStep", START_USERS),
        ("variables", "variablesAndNotification", START_VARIABLES),
    ]
    .into_iter()
    .filter_map(|(name, flow, text)| serde_json::from_str(text).ok().map(|v| (name, flow, v)))
    .collect()
}

/// The request bodies read field by field (`crate::body`, the domain's parsers), by component
/// name: what the parsers check, from their constants.
fn bodies() -> Vec<(&'static str, Value)> {
    let mut all = audience::bodies();
    all.extend(folders::bodies());
    all.push(keys::credential());
    all.extend(push::bodies());
    all.extend(keys::sdk_keys());
    all.extend(actions::bodies());
    all
}

/// A flow's tasks as a union of named members, each a status object and its `kind`: derived,
/// the members were inline `allOf`s, which client generators cannot resolve inside a union.
/// The JSON on the wire is the same.
fn tasks() -> [(&'static str, Value); 3] {
    let member = |status: &str, kind: &str| {
        json!({"allOf": [reference(status), {"type": "object", "required": ["kind"],
            "properties": {"kind": {"type": "string", "enum": [kind]}}}]})
    };
    [
        ("CsvTaskItem", member("BulkStatus", "csv")),
        ("CancelTaskItem", member("CancelTaskDto", "cancel")),
        (
            "TaskDto",
            json!({"oneOf": [reference("CsvTaskItem"), reference("CancelTaskItem")],
                "description": "One task of a flow, in the shape its status endpoint answers, \
                    plus `kind`: `csv` (a bulk start from a CSV file) or `cancel`"}),
        ),
    ]
}

/// Every schema of this module, by component name.
pub fn schemas() -> Vec<(&'static str, Value)> {
    let step_types: Vec<&str> = StepType::ALL.iter().map(|t| t.as_str()).collect();
    let known: Vec<String> = KNOWN_ELEMENTS
        .iter()
        .map(|(element, attribute)| format!("`{element}` (`attributes.{attribute}`)"))
        .collect();
    let priority =
        json!({"type": "integer", "minimum": PRIORITIES.start(), "maximum": PRIORITIES.end()});
    let examples: Vec<Value> = config_examples().into_iter().map(|(_, v)| v).collect();
    let trigger_examples: Vec<Value> = trigger_examples().into_iter().map(|(_, _, v)| v).collect();
    let mut all = bodies();
    all.extend(tasks());
    all.push((
        "VersionRef",
        json!({"description": "A version number or `latest`",
               "oneOf": [{"type": "integer", "minimum": 1, "maximum": u32::MAX},
                         {"type": "string", "enum": ["latest"]}]}),
    ));
    all.extend([
        (
            "FlowConfig",
            json!({
                "type": "object",
                "description": "An Action Flow configuration (docs/flows.md). Besides what the \
                    schema says: every id in `initialSteps` and in a step's `next` names a step \
                    of `steps`, every step is reachable from `initialSteps`, the steps form no \
                    cycle, and every `%{name}` in a template names a variable of the template or \
                    of the flow. Members the service does not know are kept as they are.",
                "required": ["type", "steps", "initialSteps"],
                "properties": {
                    "type": {"type": "string", "enum": ["card"]},
                    "version": {"type": "string"},
                    "initialSteps": {"type": "array", "minItems": 1, "items": {"type": "string"},
                                     "description": "The steps that run first"},
                    "steps": {"type": "object", "additionalProperties": reference("FlowStep"),
                              "description": "Steps by id"},
                    "cardTemplates": {"type": "object",
                        "additionalProperties": reference("CardTemplate"),
                                      "description": "Card templates by id"},
                    "variables": {"type": "object",
                        "additionalProperties": reference("VariableDefinition"),
                                  "description": "Variables every template may use, by name"},
                },
                "examples": examples,
            }),
        ),
        (
            "FlowStep",
            json!({
                "type": "object",
                "required": ["id", "type", "properties"],
                "properties": {
                    "id": {"type": "string", "description": "The step's key in `steps`"},
                    "type": {"type": "string", "enum": step_types,
                             "description": "`wait`, `wait-for-card` and `branch` are checked \
                                 by every rule of contract §21 (docs/flows.md), but a flow is \
                                 stored with `create-card` steps only until the service runs them"},
                    "next": {"type": "array", "items": {"type": "string"},
                             "description": "Steps that run after this one"},
                    "properties": {
                        "type": "object",
                        "required": ["cardTemplateId"],
                        "properties": {
                            "cardTemplateId": {"type": "string",
                                "description": "A key of `cardTemplates`"},
                            "output": {"type": "object",
                                "properties": {"type": {"type": "string"}}},
                        },
                    },
                },
            }),
        ),
        (
            "CardTemplate",
            json!({
                "type": "object",
                "required": ["metadata"],
                "properties": {
                    "metadata": {
                        "type": "object",
                        "required": ["cardName"],
                        "properties": {
                            "cardName": {"type": "string", "pattern": "\\S"},
                            "cardDescription": {"type": "string"},
                            "delivery": {"type": "object", "properties": {"priority": priority}},
                        },
                    },
                    "defaultView": reference("CardView"),
                    "subviews": {"type": "object", "additionalProperties": reference("CardView")},
                    "notification": {
                        "type": "object",
                        "description": "Present, with a non-empty `attributes.body`, when the card \
                            is pushed to the user's devices",
                        "properties": {"attributes": {"type": "object", "properties": {
                            "title": {"type": "string"}, "body": {"type": "string"}}}},
                    },
                    "variables": {"type": "object",
                        "additionalProperties": reference("VariableDefinition"),
                                  "description": "Variables of this template only, by name"},
                },
            }),
        ),
        (
            "CardView",
            json!({
                "type": "object",
                "description": "Elements of a view; keys are unique within the view",
                "properties": {
                    "content": {"type": "array", "items": reference("CardElement")},
                    "actions": {"type": "array", "items": reference("CardElement")},
                },
            }),
        ),
        (
            "CardElement",
            json!({
                "type": "object",
                "description": format!(
                    "One element of a view. Known types and the attribute each requires, a \
                     non-empty string: {}; other types pass unchecked (the SDKs render them).",
                    known.join(", ")
                ),
                "required": ["key", "type"],
                "properties": {
                    "key": {"type": "string", "minLength": 1},
                    "type": {"type": "string"},
                    "attributes": {"type": "object"},
                },
            }),
        ),
        (
            "VariableDefinition",
            json!({
                "type": "object",
                "required": ["type"],
                "properties": {
                    "type": {"type": "string", "enum": VARIABLE_TYPES},
                    "source": {"type": "string", "enum": VARIABLE_SOURCES},
                    "required": {"type": "boolean"},
                    "default": {"type": ["string", "number", "boolean", "null"],
                        "description": "A value of the variable's type; a date is RFC 3339 \
                        or matches `defaultFormatterOption`"},
                    "defaultFormatter": {"type": "string"},
                    "defaultFormatterOption": {"type": ["string", "null"],
                        "description": "A date pattern such as `dd/MM/yyyy`"},
                },
            }),
        ),
        (
            "TriggerRequestBody",
            json!({
                "type": "object",
                "description":
                    "Every element starts one invocation; every problem of every element \
                    is reported at once.",
                "required": ["flows"],
                "properties": {
                    "flows": {"type": "array", "minItems": 1, "maxItems": MAX_FLOW_ELEMENTS,
                              "items": reference("TriggerElement")},
                    "options": {"type": ["object", "null"], "properties": {
                        "strictVariables": {"type": ["boolean", "null"],
                            "description":
                                "Refuse variables the flow does not define (default false)"}}},
                },
                "examples": trigger_examples,
            }),
        ),
        (
            "TriggerElement",
            json!({
                "type": "object",
                "required": ["target"],
                "properties": {
                    "target": reference("TriggerTarget"),
                    "payload": {
                        "type": ["object", "null"],
                        "properties": {
                            "variables": {"type": ["object", "null"], "additionalProperties": {
                                "description": "The value for every platform, or an object with \
                                    `value` and the iOS and Android values",
                                "oneOf": [
                                    {"type": ["string", "number", "boolean"]},
                                    {"type": "object", "required": ["value"], "properties": {
                                        "value": {"type": ["string", "number", "boolean"]},
                                        "valueIos": {"type": ["string", "number", "boolean",
                                            "null"]},
                                        "valueAndroid": {"type": ["string", "number", "boolean",
                                            "null"]}}}
                                ]}},
                            "cardOptions": {"type": ["object", "null"], "properties": {
                                "priority": {"type": ["integer", "null"],
                                    "minimum": PRIORITIES.start(),
                                             "maximum": PRIORITIES.end()},
                                "expires": {"type": ["string", "null"], "format": "date-time"},
                                "expiresInterval": {"type": ["string", "null"],
                                    "format": "duration",
                                    "description": "Positive, at most 100 years (P36525D)"},
                                "embargo": {"type": ["string", "null"], "format": "date-time"},
                                "targetStreamIds": {"type": ["array", "null"],
                                    "items": {"type": "string"}},
                                "targetPlatforms": {"type": ["object", "null"], "properties": {
                                    "Web": {"type": "boolean"}, "iOS": {"type": "boolean"},
                                    "Android": {"type": "boolean"}}},
                            }},
                            "notificationDetail": {"type": ["object", "null"],
                                "description":
                                    format!("At most {MAX_NOTIFICATION_DETAIL_BYTES} bytes as \
                                        JSON")},
                            "metadata": {"type": ["object", "null"]},
                        },
                    },
                    "flowInvocationId": {
                        "type": ["string", "null"], "minLength": 1,
                            "maxLength": MAX_INVOCATION_ID_CHARS,
                        "pattern": "^[^\\u0000-\\u001f\\u007f-\\u009f]*\\S[^\\u0000-\\u001f\\u007f-\
                            \\u009f]*$",
                        "description":
                            "The idempotency key, unique within the request; generated when absent",
                    },
                },
            }),
        ),
        (
            "TriggerTarget",
            json!({
                "description": "Who gets the cards",
                "oneOf": [
                    {"type": "object", "required": ["type", "targetUserIds"], "properties": {
                        "type": {"type": "string", "enum": ["user"]},
                        "targetUserIds": {"type": "array", "minItems": 1,
                            "maxItems": MAX_TARGET_USERS,
                            "items": {"type": "string", "minLength": 1,
                                      "maxLength": domain::audience::USER_ID_MAX_CHARS,
                                      "pattern": "^[^\\u0000-\\u001f\\u007f-\\u009f]+$"}}}},
                    {"type": "object", "required": ["type", "targetSegmentId"], "properties": {
                        "type": {"type": "string", "enum": ["segment"]},
                        "targetSegmentId": id_string("A segment of the environment")}},
                    {"type": "object", "required": ["type", "tagName"], "properties": {
                        "type": {"type": "string", "enum": ["tag"]},
                        "tagName": id_string("Users with this tag")}},
                    {"type": "object", "required": ["type"], "properties": {
                        "type": {"type": "string", "enum": ["allTestUsers"]}}},
                    {"type": "object", "required": ["type", "filter"], "properties": {
                        "type": {"type": "string", "enum": ["filters"]},
                        "filter": reference("SegmentFilter")}},
                ],
            }),
        ),
    ]);
    all
}

/// The schema named `name` of [`schemas`], as the document model holds it.
fn named(name: &str) -> RefOr<Schema> {
    schemas()
        .into_iter()
        .find(|(n, _)| *n == name)
        .and_then(|(_, schema)| serde_json::from_value(schema).ok())
        .unwrap_or_else(|| RefOr::T(Schema::default()))
}

/// Names a schema of this module for the handlers' annotations (`request_body = ...`).
macro_rules! component {
    ($type:ident) => {
        #[doc = concat!("The `", stringify!($type), "` schema, for annotations.")]
        pub struct $type;

        impl PartialSchema for $type {
            fn schema() -> RefOr<Schema> {
                named(stringify!($type))
            }
        }

        impl ToSchema for $type {
            fn name() -> Cow<'static, str> {
                Cow::Borrowed(stringify!($type))
            }
        }
    };
}

component!(FlowConfig);
component!(TriggerRequestBody);
component!(VersionRef);
component!(PutUserRequest);
component!(BatchRequest);
component!(SegmentRequest);
component!(StreamRequest);
component!(CreateFolderRequest);
component!(RenameFolderRequest);
component!(CreateCredentialRequest);
component!(PlatformRequest);
component!(PlatformKey);
component!(PlatformEnabledRequest);
component!(DeviceRequest);
component!(CancelRequest);
component!(CardActionRequest);
component!(RecoverRequest);
component!(SdkKeyRequest);
component!(SdkKeyPatch);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_schema_survives_the_document_model() {
        for (name, schema) in schemas() {
            let parsed: RefOr<Schema> =
                serde_json::from_value(schema.clone()).unwrap_or_else(|e| panic!("{name}: {e}"));
            let back = serde_json::to_value(parsed).expect("serialised");
            assert_eq!(back, schema, "{name} lost something in the document model");
        }
    }

    #[test]
    fn every_configuration_example_is_valid() {
        let examples = config_examples();
        assert_eq!(examples.len(), 3, "every example parses");
        for (name, config) in examples {
            let problems = domain::flow::config::validate(&config, "config");
            assert!(problems.is_empty(), "{name}: {problems:?}");
        }
    }

    #[test]
    fn every_trigger_example_is_valid() {
        let examples = trigger_examples();
        assert_eq!(examples.len(), 2, "every example parses");
        for (name, _, body) in examples {
            let parsed = domain::trigger::request::parse(&body);
            assert!(parsed.is_ok(), "{name}: {parsed:?}");
        }
    }

    #[test]
    fn the_documented_enums_and_limits_are_the_validators() {
        let all = schemas();
        let get = |name: &str| {
            all.iter()
                .find(|(n, _)| *n == name)
                .map(|(_, s)| s.clone())
                .expect("schema")
        };
        let step = get("FlowStep");
        assert_eq!(
            step["properties"]["type"]["enum"],
            json!(["create-card", "wait", "wait-for-card", "branch"])
        );
        let variable = get("VariableDefinition");
        assert_eq!(
            variable["properties"]["type"]["enum"],
            json!(VARIABLE_TYPES)
        );
        assert_eq!(
            variable["properties"]["source"]["enum"],
            json!(VARIABLE_SOURCES)
        );
        // The limits the schema states are where the validator draws its lines.
        let one = |priority: u8| {
            json!({"flows": [{"target": {"type": "allTestUsers"},
                              "payload": {"cardOptions": {"priority": priority}}}]})
        };
        let request = get("TriggerElement");
        let range = &request["properties"]["payload"]["properties"]["cardOptions"]["properties"]
            ["priority"];
        let (min, max) = (range["minimum"].as_u64(), range["maximum"].as_u64());
        assert_eq!((min, max), (Some(1), Some(10)));
        assert!(domain::trigger::request::parse(&one(1)).is_ok());
        assert!(domain::trigger::request::parse(&one(10)).is_ok());
        assert!(domain::trigger::request::parse(&one(0)).is_err());
        assert!(domain::trigger::request::parse(&one(11)).is_err());
        let body = get("TriggerRequestBody");
        assert_eq!(body["properties"]["flows"]["minItems"], 1);
        assert!(domain::trigger::request::parse(&json!({"flows": []})).is_err());
        let id = "x".repeat(MAX_INVOCATION_ID_CHARS + 1);
        let too_long =
            json!({"flows": [{"target": {"type": "allTestUsers"}, "flowInvocationId": id}]});
        assert!(domain::trigger::request::parse(&too_long).is_err());
    }

    #[test]
    fn docs_flows_md_shows_every_example() {
        let text = include_str!("../../../docs/flows.md");
        let blocks: Vec<Value> = text
            .split("```json")
            .skip(1)
            .filter_map(|block| block.split("```").next())
            .filter_map(|block| serde_json::from_str(block).ok())
            .collect();
        for (name, example) in config_examples() {
            assert!(
                blocks.contains(&example),
                "docs/flows.md lacks the example {name}"
            );
        }
        for (name, _, example) in trigger_examples() {
            assert!(
                blocks.contains(&example),
                "docs/flows.md lacks the trigger {name}"
            );
        }
    }
}
