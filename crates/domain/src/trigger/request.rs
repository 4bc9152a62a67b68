//! The trigger request (`POST .../test` and `.../start`; docs/api.md, Triggers), parsed and
//! validated: every problem at once, each with its JSON path
//! (`flows[0].payload.cardOptions.priority`). Limits: 1 to 1,000 flow elements, 1 to 10,000
//! `targetUserIds` per element.
//!
//! This is the request's shape only; the checks against the flow (variables and their types,
//! streams, the segment) follow in the trigger service, with [`super::variables::resolve`].

mod card_options;
mod payload;
mod problem;
mod target;

use std::collections::HashSet;

use serde_json::{Map, Value};

use crate::FieldError;
use payload::payload;
use problem::err;
use target::target;

pub use card_options::{CardOptions, Platforms, CARD_OPTIONS};
pub use payload::{Payload, VariableValue, MAX_NOTIFICATION_DETAIL_BYTES};
pub use target::{Target, MAX_TARGET_USERS};

/// The most elements `flows` may have.
pub const MAX_FLOW_ELEMENTS: usize = 1_000;
/// The longest `flowInvocationId`, in characters.
pub const MAX_INVOCATION_ID_CHARS: usize = 255;

/// One element of `flows`: one target, its payload, its idempotency key.
#[derive(Debug, Clone, PartialEq)]
pub struct FlowElement {
    /// Who gets the cards.
    pub target: Target,
    /// What the cards are made with.
    pub payload: Payload,
    /// `flowInvocationId`: 1 to [`MAX_INVOCATION_ID_CHARS`] characters, not blank, no
    /// control characters, unique within the request. None: the service generates an id.
    pub invocation_id: Option<String>,
    /// The target as sent, for the idempotency hash and the record.
    pub raw_target: Value,
    /// The payload as sent, likewise; `Null` when the element had none.
    pub raw_payload: Value,
}

/// A trigger request whose shape is valid.
#[derive(Debug, Clone, PartialEq)]
pub struct TriggerRequest {
    /// The elements, in request order: each becomes one invocation.
    pub flows: Vec<FlowElement>,
    /// `options.strictVariables` (default false): variables the flow does not define are
    /// refused instead of ignored.
    pub strict_variables: bool,
}

/// What could be read of an element with problems: its target if that parsed, and its payload
/// as far as it parsed, so that the checks against the flow (variables, streams, the segment)
/// report their problems in the same answer (docs/api.md, Bounded values).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Draft {
    /// The target, when it parsed.
    pub target: Option<Target>,
    /// The payload, without the parts that did not parse.
    pub payload: Payload,
}

/// A trigger request with problems: every problem of its shape, and a draft of each element
/// (in order; an element that is not an object has an empty one).
#[derive(Debug, Clone, PartialEq)]
pub struct Rejected {
    /// Every problem of the request's shape, each at its path.
    pub problems: Vec<FieldError>,
    /// One per element of `flows`; none when `flows` is not an array of 1 to
    /// [`MAX_FLOW_ELEMENTS`] elements.
    pub drafts: Vec<Draft>,
    /// `options.strictVariables`, when it could be read (else false).
    pub strict_variables: bool,
}

/// The request, or every problem of its shape.
///
/// Each problem is a [`FieldError`] whose field is a path into the body; the body as a whole
/// is the empty path.
///
/// ```
/// use serde_json::json;
/// use workbench_domain::trigger::request::{parse, Target};
///
/// let request = parse(&json!({"flows": [{
///     "target": {"type": "user", "targetUserIds": ["u2", "u1", "u2"]},
///     "payload": {"variables": {"name": "Ada"}, "cardOptions": {"priority": 8}},
///     "flowInvocationId": "order-1234"
/// }]}))
/// .expect("a valid request");
/// let element = &request.flows[0];
/// assert_eq!(element.target, Target::Users(vec!["u1".into(), "u2".into()]));
/// assert_eq!(element.payload.card_options.priority, Some(8));
/// assert_eq!(element.invocation_id.as_deref(), Some("order-1234"));
///
/// // Every problem at once, each at its path.
/// let problems = parse(&json!({"flows": [
///     {"target": {"type": "segment"}},
///     {"target": {"type": "tag", "tag": "vip"},
///      "payload": {"cardOptions": {"priority": 11, "color": "red"}}}
/// ]}))
/// .expect_err("two invalid elements");
/// let fields: Vec<&str> = problems.iter().map(|p| p.field.as_str()).collect();
/// assert_eq!(
///     fields,
///     [
///         "flows[0].target.targetSegmentId",
///         "flows[1].payload.cardOptions.priority",
///         "flows[1].payload.cardOptions.color",
///     ]
/// );
/// assert!(parse(&json!({"flows": []})).is_err());
/// ```
pub fn parse(body: &Value) -> Result<TriggerRequest, Vec<FieldError>> {
    parse_drafts(body).map_err(|r| r.problems)
}

/// The request, or every problem of its shape with what could be read of each element.
///
/// The same checks as [`parse`]; the trigger service uses the drafts to report the problems
/// the flow finds in the same answer.
pub fn parse_drafts(body: &Value) -> Result<TriggerRequest, Rejected> {
    let mut errors = Vec::new();
    let Some(body) = body.as_object() else {
        return Err(Rejected {
            problems: vec![FieldError::new(
                "",
                "the request body must be a JSON object",
            )],
            drafts: Vec::new(),
            strict_variables: false,
        });
    };
    let strict_variables = strict_variables(&mut errors, body.get("options"));
    let flows = elements(&mut errors, body.get("flows"));
    if errors.is_empty() {
        Ok(TriggerRequest {
            flows: flows.into_iter().flatten().collect(),
            strict_variables,
        })
    } else {
        Err(Rejected {
            problems: errors,
            drafts: flows.into_iter().map(draft_of).collect(),
            strict_variables,
        })
    }
}

/// `options.strictVariables`: false unless given, and false when it is not a boolean.
fn strict_variables(errors: &mut Vec<FieldError>, options: Option<&Value>) -> bool {
    match options {
        None | Some(Value::Null) => false,
        Some(Value::Object(options)) => match options.get("strictVariables") {
            None | Some(Value::Null) => false,
            Some(Value::Bool(b)) => *b,
            Some(_) => {
                err(errors, "options.strictVariables", "must be true or false");
                false
            }
        },
        Some(_) => {
            err(errors, "options", "must be an object");
            false
        }
    }
}

/// Each element of `flows`, or what could be read of it; none when `flows` is not an array of
/// 1 to [`MAX_FLOW_ELEMENTS`] elements. A `flowInvocationId` may be used once per request.
fn elements(
    errors: &mut Vec<FieldError>,
    flows: Option<&Value>,
) -> Vec<Result<FlowElement, Box<Draft>>> {
    let mut elements = Vec::new();
    match flows {
        Some(Value::Array(items)) if !items.is_empty() && items.len() <= MAX_FLOW_ELEMENTS => {
            let mut ids = HashSet::new();
            for (i, item) in items.iter().enumerate() {
                let element = element(errors, item.clone(), &format!("flows[{i}]"));
                if let Ok(FlowElement {
                    invocation_id: Some(id),
                    ..
                }) = &element
                {
                    if !ids.insert(id.clone()) {
                        err(
                            errors,
                            format!("flows[{i}].flowInvocationId"),
                            "is used by another element of this request",
                        );
                    }
                }
                elements.push(element);
            }
        }
        Some(Value::Array(items)) if items.len() > MAX_FLOW_ELEMENTS => err(
            errors,
            "flows",
            format!("at most {MAX_FLOW_ELEMENTS} elements per request"),
        ),
        _ => err(
            errors,
            "flows",
            format!("must be an array of 1 to {MAX_FLOW_ELEMENTS} elements"),
        ),
    }
    elements
}

/// What the checks against the flow get of an element of a rejected request.
fn draft_of(element: Result<FlowElement, Box<Draft>>) -> Draft {
    match element {
        Ok(e) => Draft {
            target: Some(e.target),
            payload: e.payload,
        },
        Err(draft) => *draft,
    }
}

/// One element of `flows` on its own, as [`parse`] checks each (its problems' paths start
/// with `flows[0]`): for a CSV row's element, which is built to be parsed, so taken, not copied.
pub fn parse_element(item: Value) -> Result<FlowElement, Vec<FieldError>> {
    let mut errors = Vec::new();
    match element(&mut errors, item, "flows[0]") {
        Ok(element) if errors.is_empty() => Ok(element),
        _ => Err(errors),
    }
}

/// The element, or (with its problems in `errors`) what could be read of it.
fn element(
    errors: &mut Vec<FieldError>,
    item: Value,
    path: &str,
) -> Result<FlowElement, Box<Draft>> {
    let Value::Object(mut item) = item else {
        err(errors, path, "must be an object with a `target`");
        return Err(Box::default());
    };
    let before = errors.len();
    let raw_target = item.remove("target").unwrap_or(Value::Null);
    let target = target(errors, &raw_target, &format!("{path}.target"));
    let raw_payload = item.remove("payload").unwrap_or(Value::Null);
    let payload = payload(errors, &raw_payload, &format!("{path}.payload"));
    misplaced(errors, &item, path);
    let invocation_id = match item.get("flowInvocationId") {
        None | Some(Value::Null) => None,
        Some(Value::String(id))
            if !id.trim().is_empty()
                && id.chars().count() <= MAX_INVOCATION_ID_CHARS
                && !id.chars().any(char::is_control) =>
        {
            Some(id.clone())
        }
        Some(_) => {
            err(
                errors,
                format!("{path}.flowInvocationId"),
                format!("must be a string of 1 to {MAX_INVOCATION_ID_CHARS} characters"),
            );
            None
        }
    };
    match (target, errors.len() == before) {
        (Some(target), true) => Ok(FlowElement {
            target,
            payload,
            invocation_id,
            raw_target,
            raw_payload,
        }),
        (target, _) => Err(Box::new(Draft { target, payload })),
    }
}

/// The parts of a payload that belong under `payload`: sent beside it, they would be
/// ignored, and the cards would silently lose their expiry, priority or values.
const PAYLOAD_PARTS: [&str; 4] = ["cardOptions", "variables", "metadata", "notificationDetail"];

/// Refuses each part of a payload placed on the element itself, naming where it belongs.
fn misplaced(errors: &mut Vec<FieldError>, item: &Map<String, Value>, path: &str) {
    for part in PAYLOAD_PARTS {
        if item.contains_key(part) {
            err(
                errors,
                format!("{path}.{part}"),
                format!("belongs under `payload`: send it as `{path}.payload.{part}`"),
            );
        }
    }
}

/// ISO 8601 durations are read by [`crate::time`]; re-exported where triggers always had them.
pub use crate::time::{parse_duration, parse_signed_duration};
