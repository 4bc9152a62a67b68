//! JSON Schemas of the bodies the domain validates as JSON rather than through typed structs:
//! an Action Flow configuration (`domain::flow::config::validate`) and a trigger request and
//! its elements (`domain::trigger::request::parse`). Their enums and limits are the domain's
//! constants, and their examples (`examples/`, the same as docs/flows.md) are checked against
//! the validators by the tests below, so the document and the code cannot drift apart.
//!
//! What a schema cannot say is in the descriptions: a step's `next` and `initialSteps` name
//! steps of the configuration, every step is reachable and the steps form no cycle, a step's
//! `cardTemplateId` names a template, and every `%{name}` names a variable.

use domain::flow::config::{KNOWN_ELEMENTS, PRIORITIES, VARIABLE_SOURCES, VARIABLE_TYPES};
use domain::flow::steps::StepType;
use domain::trigger::request::{
    MAX_FLOW_ELEMENTS, MAX_INVOCATION_ID_CHARS, MAX_NOTIFICATION_DETAIL_BYTES, MAX_TARGET_USERS,
};
use serde_json::{json, Value};
use std::borrow::Cow;
use utoipa::openapi::{RefOr, Schema};
use utoipa::{PartialSchema, ToSchema};

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

fn reference(name: &str) -> Value {
    json!({"$ref": format!("#/components/schemas/{name}")})
}

/// A string of 1 or more characters, none of them a control character.
fn id_string(description: &str) -> Value {
    json!({"type": "string", "minLength": 1, "pattern": "^[^\\u0000-\\u001f\\u007f-\\u009f]+$",
           "description": description})
}

/// Characters no name may hold: control characters (`char::is_control`) and bidirectional
/// controls (`domain::name::is_bidi_control`), as ranges of a regular expression class.
const NOT_IN_NAMES: &str =
    "\\u0000-\\u001f\\u007f-\\u009f\\u061c\\u200e\\u200f\\u202a-\\u202e\\u2066-\\u2069";

/// Characters that show nothing (`domain::name::is_invisible`), as ranges of a class: white
/// space, then the zero-width, blank and filler characters, then the tag characters (written
/// as themselves: they lie beyond `\\uFFFF`).
const INVISIBLE: &str =
    "\\u0009-\\u000d\\u0020\\u0085\\u00a0\\u1680\\u2000-\\u200a\\u2028\\u2029\\u202f\\u205f\
        \\u3000\\u00ad\\u034f\\u115f\\u1160\\u180e\\u200b-\\u200f\\u2060-\\u2064\\u2800\\u3164\\ufe\
            ff\\uffa0\u{e0000}-\u{e007f}";

/// A name by `domain::name`: 1 to `max` characters, no control or bidirectional control
/// character, at least one visible one.
pub fn name_schema(max: usize) -> Value {
    json!({"type": "string", "minLength": 1, "maxLength": max,
           "pattern": format!("^[^{NOT_IN_NAMES}]*[^{NOT_IN_NAMES}{INVISIBLE}][^{NOT_IN_NAMES}]*$"),
           "description": format!("1 to {max} characters with at least one visible one; no \
               control or bidirectional control characters")})
}

/// A folder name by `domain::folder::rules::validate_name`.
fn folder_name() -> Value {
    json!({"type": "string", "minLength": 1, "maxLength": domain::folder::FOLDER_NAME_MAX_CHARS,
           "pattern": "^[\\w-]([\\w -]*[\\w-])?$",
           "description": "Letters and digits of any script, hyphens, underscores and spaces; \
               not starting or ending with a space; unique among the folders of its parent"})
}

/// One of the four push platforms (`domain::push::provider_of`).
fn platform() -> Value {
    json!({"type": "string", "enum": domain::push::PLATFORMS})
}

/// An app id (`domain::push`): 1 to 256 ASCII letters, digits, dots, hyphens and underscores.
fn app_id() -> Value {
    json!({"type": "string", "pattern": "^[A-Za-z0-9_.-]{1,256}$"})
}

/// A string without control characters, of `min` to `max` characters.
fn text(min: usize, max: usize) -> Value {
    json!({"type": "string", "minLength": min, "maxLength": max,
           "pattern": "^[^\\u0000-\\u001f\\u007f-\\u009f]*$"})
}

/// An example SDK public key: EC P-256, as `openssl ec -pubout` writes it.
pub(crate) const EXAMPLE_SDK_PUBLIC_KEY: &str = "-----BEGIN PUBLIC KEY-----\n\
MFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAE8OtcUnoij4n/wypVTaSTYSsaXR8i\n\
W0AXSJ8liEnVBLgZTCu9DJfHbYvkHCVWEzg6AHC5ZpQXKrp4V5yP8nHE8Q==\n\
-----END PUBLIC KEY-----\n";

/// The body of `POST /sdk-keys` (`create`), one of its two forms (`branch`: the key form it
/// requires), or the body of its `PATCH`: every field optional in a patch, where `publicKey`
/// and `jwks` each replace the public keys.
fn sdk_key(create: bool, branch: Option<&str>) -> Value {
    use domain::audience::ATTRIBUTE_NAME_MAX_CHARS;
    use domain::sdk::{
        CLAIM_MAX_CHARS, ISSUER_MAX_CHARS, MAX_ALLOWED_ISSUERS, MAX_ALLOWED_ORIGINS,
        MAX_CLAIM_MAPPINGS, MAX_JWKS_KEYS, MAX_TOKEN_EXPIRY_DAYS, ORIGIN_MAX_CHARS,
        SDK_KEY_NAME_MAX_CHARS,
    };
    let mut schema = json!({
        "type": "object",
        "properties": {
            "name": {"type": "string",
                "pattern": format!("^[A-Za-z0-9._-]{{1,{SDK_KEY_NAME_MAX_CHARS}}}$"),
                "description":
                    "What tokens name as their header's `kid`; unique in the environment"},
            "publicKey": {"type": "string", "minLength": 1, "maxLength": 16_384,
                "description":
                    "A PEM public key (`PUBLIC KEY`, or `RSA PUBLIC KEY`): RSA of 2048 to 4096 \
                        bits, or EC P-256"},
            "jwks": {"type": "object", "required": ["keys"],
                "description":
                    "A JSON Web Key Set of RSA (2048 to 4096 bits) or EC P-256 keys, instead of \
                        `publicKey`",
                "properties": {"keys": {"type": "array", "minItems": 1, "maxItems": MAX_JWKS_KEYS,
                    "items": {"type": "object", "required": ["kty"]}}}},
            "maxTokenExpiryDays": {"type": "integer", "minimum": 1,
                "maximum": MAX_TOKEN_EXPIRY_DAYS,
                "description":
                    "The longest a token may live, `exp - iat`; 7 when a new key has none"},
            "allowedIssuers": {"type": ["array", "null"], "maxItems": MAX_ALLOWED_ISSUERS,
                "items": text(1, ISSUER_MAX_CHARS),
                "description":
                    "When not empty, a token's `iss` must be one of them; null or [] for any"},
            "claimMappings": {"type": ["object", "null"], "maxProperties": MAX_CLAIM_MAPPINGS,
                "propertyNames": text(1, CLAIM_MAX_CHARS),
                "additionalProperties": {"type": "string",
                    "pattern": format!("^attributes\\.[\\s\\S]{{1,{ATTRIBUTE_NAME_MAX_CHARS}}}$")},
                "description":
                    "A claim → `attributes.<name>`: set on the user when a token is first seen"},
            "allowedOrigins": {"type": ["array", "null"], "maxItems": MAX_ALLOWED_ORIGINS,
                "items": {"type": "string", "minLength": 1, "maxLength": ORIGIN_MAX_CHARS,
                    "pattern": "^https?://[^/?#@*]+$"},
                "description":
                    "Web origins whose pages may call this key's end users' routes from a \
                        browser (CORS), each exactly as a browser sends `Origin` \
                        (`https://app.example.com`, `http://localhost:3000`); null or [] for \
                        none"},
        },
    });
    if let Some(form) = branch {
        schema["required"] = json!(["name", form]);
        schema["description"] = json!(format!("A new key with `{form}`"));
    } else if create {
        // One of the two key forms, never both: an object with both matches both branches.
        // Each is a component of its own: generators handle a union of references.
        schema = json!({
            "oneOf": [reference("SdkKeyWithPublicKey"), reference("SdkKeyWithJwks")],
            "description": "A name and one public key form: `publicKey` or `jwks`, not both",
            "example": {"name": "ios-app", "publicKey": EXAMPLE_SDK_PUBLIC_KEY,
                "maxTokenExpiryDays": 7, "allowedIssuers": ["https://auth.example.com"],
                "claimMappings": {"email": "attributes.email"}},
        });
    } else {
        schema["description"] = json!(
            "Any of the fields of a new key; a new `publicKey` or \
            `jwks` (not both) replaces its public keys"
        );
        schema["example"] = json!({"maxTokenExpiryDays": 1, "allowedIssuers": []});
    }
    schema
}

/// The request bodies read field by field (`crate::body`, the domain's parsers), by component
/// name: what the parsers check, from their constants.
fn bodies() -> Vec<(&'static str, Value)> {
    use domain::audience::{
        ATTRIBUTE_NAME_MAX_CHARS, MAX_ATTRIBUTES_PER_USER, MAX_BATCH_USERS, MAX_TAGS_PER_USER,
        NAME_MAX_CHARS, TAG_MAX_CHARS, USER_ID_MAX_CHARS,
    };
    let user_id = text(1, USER_ID_MAX_CHARS);
    let user_fields = json!({
        "testUser": {"type": ["boolean", "null"]},
        "tags": {"type": ["array", "null"], "maxItems": MAX_TAGS_PER_USER, "items": text(1,
            TAG_MAX_CHARS)},
        "attributes": {"type": ["object", "null"], "maxProperties": MAX_ATTRIBUTES_PER_USER,
            "propertyNames": {"type": "string", "minLength": 1,
                "maxLength": ATTRIBUTE_NAME_MAX_CHARS},
            "additionalProperties": {"type": ["string", "number", "boolean"],
                "maxLength": domain::audience::ATTRIBUTE_VALUE_MAX_CHARS},
            "description": "String, number or boolean values"},
    });
    let mut batch_user = user_fields.clone();
    batch_user["id"] = user_id;
    let filter = json!({
        "type": "object",
        "description": "Users matching `all` (default) or `any` of the conditions. A condition's \
            `value` depends on its `field` and `op`: `testUser` takes `eq`/`neq` and a boolean; \
            `tags` takes `eq`, `neq`, `contains` (a tag), `in` (tags) or `exists`; `id` and \
            `attributes.<name>` take `eq`/`neq` (a scalar), `in` (a non-empty array of \
            scalars), `contains` (a string), `gt`/`lt` (a number or a string), `exists` (a \
            boolean or nothing)",
        "required": ["conditions"],
        "properties": {
            "match": {"oneOf": [{"type": "string", "enum": ["all", "any"]}, {"type": "null"}]},
            "conditions": {"type": "array", "minItems": 1,
                "maxItems": domain::audience::filter::MAX_CONDITIONS,
                "items": {"type": "object", "required": ["field", "op"], "properties": {
                    "field": {"type": "string",
                        "pattern": "^(id|testUser|tags|attributes\\.[\\s\\S]+)$"},
                    "op": {"type": "string", "enum": ["eq", "neq", "in", "contains", "exists",
                        "gt", "lt"]},
                    "value": {"type": ["string", "number", "boolean", "array", "null"],
                        "items": {"type": ["string", "number", "boolean"]}}}}},
        },
    });
    vec![
        (
            "PutUserRequest",
            json!({
                "type": "object",
                    "description": "The whole user: omitted fields take their defaults",
                "properties": user_fields,
                "example": {"testUser": false, "tags": ["vip"], "attributes": {"country": "NZ"}},
            }),
        ),
        (
            "BatchRequest",
            json!({
                "type": "object", "required": ["users"],
                "properties": {"users": {"type": "array", "minItems": 1,
                    "maxItems": MAX_BATCH_USERS,
                    "items": {"type": "object", "required": ["id"], "properties": batch_user}}},
                "example": {"users": [{"id": "user-1", "tags": ["vip"]}, {"id": "user-2",
                    "testUser": true}]},
            }),
        ),
        ("SegmentFilter", filter),
        (
            "SegmentRequest",
            json!({
                "type": "object", "required": ["name", "filter"],
                "properties": {"name": name_schema(NAME_MAX_CHARS),
                    "filter": reference("SegmentFilter")},
                "example": {"name": "NZ VIPs", "filter": {"match": "all", "conditions": [
                    {"field": "attributes.country", "op": "eq", "value": "NZ"},
                    {"field": "tags", "op": "contains", "value": "vip"}]}},
            }),
        ),
        (
            "StreamRequest",
            json!({
                "type": "object", "required": ["name"],
                "properties": {"name": name_schema(NAME_MAX_CHARS)},
                "example": {"name": "Promotions"},
            }),
        ),
        (
            "CreateFolderRequest",
            json!({
                "type": "object", "required": ["name"],
                "properties": {"name": folder_name(),
                    "parentId": {"type": ["string", "null"],
                        "description":
                            "The parent folder; omitted, null or \"\" for a root folder"}},
                "example": {"name": "Q4 campaigns", "parentId": null},
            }),
        ),
        (
            "RenameFolderRequest",
            json!({
                "type": "object", "required": ["name"],
                "properties": {"name": folder_name(),
                    "parentId": {"type": ["string", "null"],
                        "description": "The current parent, if sent: folders cannot be moved"}},
                "example": {"name": "Q1 campaigns"},
            }),
        ),
        (
            "CreateCredentialRequest",
            json!({
                "type": "object", "required": ["role"],
                "properties": {"role": {"type": "string", "enum": ["events", "workbench"]}},
                "example": {"role": "events"},
            }),
        ),
        (
            "PlatformRequest",
            json!({
                "type": "object", "required": ["appId", "platform", "platformCredential"],
                "description": "The credential is checked offline: a service account (GCM, FCM), a \
                    certificate's private key, or a .p8 signing key (APNS, APNS_SANDBOX)",
                "properties": {
                    "appId": app_id(), "platform": platform(),
                    "platformCredential": {"type": "string", "maxLength": 16384, "pattern": "\\S",
                        "description":
                            "Service-account JSON (GCM/FCM), the certificate's private key \
                            (iOS certificate), or the .p8 signing key (iOS token)"},
                    "platformPrincipal": {"type": ["string", "null"], "maxLength": 16384,
                        "description": "Empty (GCM/FCM), the PEM certificate (iOS certificate), or \
                            the key id (iOS token)"},
                    "platformProperties": {"type": ["object", "null"],
                        "propertyNames": {"type": "string", "enum": ["channelId",
                            "restrictedPackageName", "teamId", "bundleId"]},
                        "additionalProperties": {"type": "string"}},
                },
                // A .p8 key made for this example only: Apple never issued it, so pushes with it
                // are refused by APNs, but it passes the offline checks.
                "example": {"appId": "com.example.app", "platform": "APNS",
                    "platformCredential": EXAMPLE_P8_KEY, "platformPrincipal": "ABC123DEFG",
                    "platformProperties": {"teamId": "DEF123GHIJ", "bundleId": "com.example.app"}},
            }),
        ),
        (
            "PlatformKey",
            json!({
                "type": "object", "required": ["appId", "platform"],
                "properties": {"appId": {"type": "string", "minLength": 1}, "platform": platform()},
                "example": {"appId": "com.example.app", "platform": "FCM"},
            }),
        ),
        (
            "PlatformEnabledRequest",
            json!({
                "type": "object", "required": ["id", "enabled"],
                "properties": {"id": {"type": "string", "minLength": 1,
                    "description": "The platform's id"},
                               "enabled": {"type": "boolean"}},
            }),
        ),
        (
            "DeviceRequest",
            json!({
                "type": "object", "required": ["appId", "platform"],
                "properties": {"appId": app_id(), "platform": platform()},
                "example": {"appId": "com.example.app", "platform": "FCM"},
            }),
        ),
        ("SdkKeyRequest", sdk_key(true, None)),
        ("SdkKeyWithPublicKey", sdk_key(true, Some("publicKey"))),
        ("SdkKeyWithJwks", sdk_key(true, Some("jwks"))),
        ("SdkKeyPatch", sdk_key(false, None)),
        (
            "CancelRequest",
            json!({
                "type": "object",
                "properties": {
                    "endUserId": {"type": ["string", "null"], "minLength": 1, "maxLength": 255},
                    "flowInvocationId": {"type": ["string", "null"], "minLength": 1,
                        "maxLength": 255},
                    "flowConfigVersion": {"type": ["integer", "null"], "minimum": 1,
                                          "maximum": domain::flow::MAX_FLOW_VERSION},
                    "cancelCards": {"type": ["boolean", "null"],
                        "description":
                            "Default true; false stops the instances and leaves their cards"},
                },
                "example": {"endUserId": "user-1", "cancelCards": true},
            }),
        ),
        (
            "CardActionRequest",
            json!({
                "type": "object", "required": ["action"],
                "description": "`snoozeUntil` is required with `snooze` and must be in the future",
                "properties": {
                    "action": {"type": "string", "enum": ["submit", "dismiss", "snooze"]},
                    "values": {"type": ["object", "null"],
                        "description":
                            "With `submit`: the user's input, passed to `card-completed`"},
                    "snoozeUntil": {"type": ["string", "null"], "format": "date-time"},
                },
                "example": {"action": "submit", "values": {"answer": "yes"}},
            }),
        ),
        (
            "RecoverRequest",
            json!({
                "type": "object", "required": ["since"],
                "properties": {"since": {"type": "string", "format": "date-time",
                    "description": "Failed deliveries of events since then are queued again"}},
                "example": {"since": "2026-11-21T00:00:00Z"},
            }),
        ),
    ]
}

/// The signing key of the push platform example.
const EXAMPLE_P8_KEY: &str = "-----BEGIN PRIVATE \
        KEY-----\nMIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQgUWvlIdjjdauOF75L\nH03I5BU0kPRpccE\
            1fppfh9hxoEOhRANCAAS6lW6Xe7o9v7VcwiD1e52FRX14kkoX\ndJBDgAWtKqTH7pu1J4NUfo/5bmmgWrtns7Ye\
                cvzGJi2eBl/TbnfQtkao\n-----END PRIVATE KEY-----";

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
