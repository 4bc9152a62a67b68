//! The trigger request (`POST .../test` and `.../start`; docs/api.md, Triggers), parsed and
//! validated: every problem at once, each with its JSON path
//! (`flows[0].payload.cardOptions.priority`). Limits: 1 to 1,000 flow elements, 1 to 10,000
//! `targetUserIds` per element.
//!
//! This is the request's shape only; the checks against the flow (variables and their types,
//! streams, the segment) follow in the trigger service, with [`super::variables::resolve`].

use chrono::Duration;
use serde_json::{Map, Value};

use crate::audience::filter::Filter;
use crate::audience::validate_user_id;
use crate::{FieldError, Timestamp};

/// The most elements `flows` may have.
pub const MAX_FLOW_ELEMENTS: usize = 1_000;
/// The most `targetUserIds` one `user` target may have.
pub const MAX_TARGET_USERS: usize = 10_000;
/// The longest `flowInvocationId`, in characters.
pub const MAX_INVOCATION_ID_CHARS: usize = 255;
/// The push payload limit (docs/api.md, Sending pushes), which `notificationDetail` must fit
/// in, as JSON text.
pub const MAX_NOTIFICATION_DETAIL_BYTES: usize = 2_048;

/// Who an element targets, its `target`. In test mode only test users of it get cards.
#[derive(Debug, Clone, PartialEq)]
pub enum Target {
    /// `user`: these end users (`targetUserIds`), sorted, without duplicates. A user need not
    /// exist.
    Users(Vec<String>),
    /// `segment`: the users the segment (`targetSegmentId`) matches when the invocation runs.
    Segment(String),
    /// `tag`: the users with this tag (`tagName`, or `tag`).
    Tag(String),
    /// `allTestUsers`: every test user of the environment.
    AllTestUsers,
    /// `filters`: the users the filter (`filter`) matches when the invocation runs.
    Filters(Filter),
}

impl Target {
    /// Segment, tag and filter targets are "bulk targets" (docs/api.md, Triggers): at most
    /// five run at once per environment.
    pub fn is_bulk(&self) -> bool {
        matches!(
            self,
            Target::Segment(_) | Target::Tag(_) | Target::Filters(_)
        )
    }
}

/// A variable value: for every platform, or with iOS and Android overrides.
#[derive(Debug, Clone, PartialEq)]
pub struct VariableValue {
    /// The value (`value`, or the variable's value sent plain): a string, a number or a
    /// boolean.
    pub value: Value,
    /// `valueIos`: the value on iOS, when it differs.
    pub ios: Option<Value>,
    /// `valueAndroid`: the value on Android, when it differs.
    pub android: Option<Value>,
}

/// The platforms cards are for (`cardOptions.targetPlatforms`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Platforms {
    /// `Web`.
    pub web: bool,
    /// `iOS`.
    pub ios: bool,
    /// `Android`.
    pub android: bool,
}

impl Default for Platforms {
    /// With no platforms given, cards go to Web, iOS and Android (docs/api.md, Triggers).
    fn default() -> Self {
        Platforms {
            web: true,
            ios: true,
            android: true,
        }
    }
}

impl Platforms {
    /// The names of the platforms chosen, in the order `Web`, `iOS`, `Android`: what a card's
    /// `platforms` hold.
    pub fn names(&self) -> Vec<&'static str> {
        let mut names = Vec::new();
        if self.web {
            names.push("Web");
        }
        if self.ios {
            names.push("iOS");
        }
        if self.android {
            names.push("Android");
        }
        names
    }
}

/// An element's `payload.cardOptions`: how its cards are made. Every timestamp is within the
/// bounds of docs/api.md, Bounded values.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CardOptions {
    /// `priority`, 1 to 10; without it, the template's `metadata.delivery.priority`, else 5.
    pub priority: Option<u8>,
    /// `expires`: when the cards expire; after `embargo` when both are given. Wins over
    /// `expires_interval`.
    pub expires: Option<Timestamp>,
    /// `expiresInterval`: positive, at most 100 years; the cards expire this long after a
    /// future embargo ends, else this long after they are made.
    pub expires_interval: Option<Duration>,
    /// `embargo`: when in the future, the cards are embargoed until then.
    pub embargo: Option<Timestamp>,
    /// `targetStreamIds`: streams the cards are in besides `All cards` (the trigger service
    /// checks that they exist).
    pub target_stream_ids: Option<Vec<String>>,
    /// `targetPlatforms`: the platforms named `true`; every platform when not given.
    pub target_platforms: Option<Platforms>,
}

/// An element's `payload`, as far as it is the request's to check.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Payload {
    /// `variables`: (name, value) pairs; checked against the flow's definitions by
    /// [`super::variables::resolve`].
    pub variables: Vec<(String, VariableValue)>,
    /// `cardOptions`.
    pub card_options: CardOptions,
    /// `notificationDetail`: any object of at most [`MAX_NOTIFICATION_DETAIL_BYTES`] as JSON,
    /// passed to the SDKs with the push.
    pub notification_detail: Option<Map<String, Value>>,
    /// `metadata`: any object, carried to the cards' analytics events.
    pub metadata: Option<Map<String, Value>>,
}

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

fn err(errors: &mut Vec<FieldError>, path: impl Into<String>, message: impl Into<String>) {
    errors.push(FieldError::new(path, message));
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
    let strict_variables = match body.get("options") {
        None | Some(Value::Null) => false,
        Some(Value::Object(options)) => match options.get("strictVariables") {
            None | Some(Value::Null) => false,
            Some(Value::Bool(b)) => *b,
            Some(_) => {
                err(
                    &mut errors,
                    "options.strictVariables",
                    "must be true or false",
                );
                false
            }
        },
        Some(_) => {
            err(&mut errors, "options", "must be an object");
            false
        }
    };
    let mut flows: Vec<Result<FlowElement, Box<Draft>>> = Vec::new();
    match body.get("flows") {
        Some(Value::Array(items)) if !items.is_empty() && items.len() <= MAX_FLOW_ELEMENTS => {
            let mut ids = std::collections::HashSet::new();
            for (i, item) in items.iter().enumerate() {
                let element = element(&mut errors, item.clone(), &format!("flows[{i}]"));
                if let Ok(FlowElement {
                    invocation_id: Some(id),
                    ..
                }) = &element
                {
                    if !ids.insert(id.clone()) {
                        err(
                            &mut errors,
                            format!("flows[{i}].flowInvocationId"),
                            "is used by another element of this request",
                        );
                    }
                }
                flows.push(element);
            }
        }
        Some(Value::Array(items)) if items.len() > MAX_FLOW_ELEMENTS => err(
            &mut errors,
            "flows",
            format!("at most {MAX_FLOW_ELEMENTS} elements per request"),
        ),
        _ => err(
            &mut errors,
            "flows",
            format!("must be an array of 1 to {MAX_FLOW_ELEMENTS} elements"),
        ),
    }
    if errors.is_empty() {
        Ok(TriggerRequest {
            flows: flows.into_iter().flatten().collect(),
            strict_variables,
        })
    } else {
        Err(Rejected {
            problems: errors,
            drafts: flows
                .into_iter()
                .map(|f| match f {
                    Ok(e) => Draft {
                        target: Some(e.target),
                        payload: e.payload,
                    },
                    Err(draft) => *draft,
                })
                .collect(),
            strict_variables,
        })
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

fn target(errors: &mut Vec<FieldError>, raw: &Value, path: &str) -> Option<Target> {
    let Some(object) = raw.as_object() else {
        err(errors, path, "is required: an object with a `type`");
        return None;
    };
    let string = |errors: &mut Vec<FieldError>, keys: &[&str]| -> Option<String> {
        match keys.iter().find_map(|k| object.get(*k).map(|v| (k, v))) {
            // A segment id or a tag never holds a control character (none is stored).
            Some((_, Value::String(s))) if !s.is_empty() && !s.chars().any(char::is_control) => {
                Some(s.clone())
            }
            Some((k, _)) => {
                err(
                    errors,
                    format!("{path}.{k}"),
                    "must be a non-empty string without control characters",
                );
                None
            }
            None => {
                err(errors, format!("{path}.{}", keys[0]), "is required");
                None
            }
        }
    };
    match object.get("type").and_then(Value::as_str) {
        Some("user") => match object.get("targetUserIds") {
            Some(Value::Array(ids)) if !ids.is_empty() && ids.len() <= MAX_TARGET_USERS => {
                let mut users = Vec::with_capacity(ids.len());
                let before = errors.len();
                for (i, id) in ids.iter().enumerate() {
                    match id {
                        Value::String(id) => {
                            validate_user_id(errors, &format!("{path}.targetUserIds[{i}]"), id);
                            users.push(id.clone());
                        }
                        _ => err(
                            errors,
                            format!("{path}.targetUserIds[{i}]"),
                            "must be a string",
                        ),
                    }
                }
                users.sort();
                users.dedup();
                (errors.len() == before).then_some(Target::Users(users))
            }
            _ => {
                err(
                    errors,
                    format!("{path}.targetUserIds"),
                    format!("must be an array of 1 to {MAX_TARGET_USERS} user ids"),
                );
                None
            }
        },
        Some("segment") => string(errors, &["targetSegmentId"]).map(Target::Segment),
        Some("tag") => string(errors, &["tagName", "tag"]).map(Target::Tag),
        Some("allTestUsers") => Some(Target::AllTestUsers),
        Some("filters") => match object.get("filter") {
            Some(filter) => match Filter::parse(filter, &format!("{path}.filter")) {
                Ok(filter) => Some(Target::Filters(filter)),
                Err(mut e) => {
                    errors.append(&mut e);
                    None
                }
            },
            None => {
                err(
                    errors,
                    format!("{path}.filter"),
                    "is required for a `filters` target",
                );
                None
            }
        },
        _ => {
            err(
                errors,
                format!("{path}.type"),
                "must be user, segment, tag, allTestUsers or filters",
            );
            None
        }
    }
}

fn payload(errors: &mut Vec<FieldError>, raw: &Value, path: &str) -> Payload {
    let mut payload = Payload::default();
    let object = match raw {
        Value::Null => return payload,
        Value::Object(object) => object,
        _ => {
            err(errors, path, "must be an object");
            return payload;
        }
    };
    match object.get("variables") {
        None | Some(Value::Null) => {}
        Some(Value::Object(vars)) => {
            for (name, value) in vars {
                let var_path = format!("{path}.variables.{name}");
                let scalar =
                    |v: &Value| matches!(v, Value::String(_) | Value::Number(_) | Value::Bool(_));
                let parsed = match value {
                    v if scalar(v) => Some(VariableValue {
                        value: v.clone(),
                        ios: None,
                        android: None,
                    }),
                    Value::Object(o) => {
                        let field = |errors: &mut Vec<FieldError>, key: &str| match o.get(key) {
                            None | Some(Value::Null) => None,
                            Some(v) if scalar(v) => Some(v.clone()),
                            Some(_) => {
                                err(errors, format!("{var_path}.{key}"), "must be a string");
                                None
                            }
                        };
                        let ios = field(errors, "valueIos");
                        let android = field(errors, "valueAndroid");
                        match o.get("value") {
                            Some(v) if scalar(v) => Some(VariableValue {
                                value: v.clone(),
                                ios,
                                android,
                            }),
                            _ => {
                                err(
                                    errors,
                                    format!("{var_path}.value"),
                                    "is required and must be a string",
                                );
                                None
                            }
                        }
                    }
                    _ => {
                        err(
                            errors,
                            &var_path,
                            "must be a string, or an object with `value`, `valueIos`, \
                                `valueAndroid`",
                        );
                        None
                    }
                };
                if let Some(parsed) = parsed {
                    payload.variables.push((name.clone(), parsed));
                }
            }
        }
        Some(_) => err(errors, format!("{path}.variables"), "must be an object"),
    }
    match object.get("cardOptions") {
        None | Some(Value::Null) => {}
        Some(Value::Object(options)) => {
            payload.card_options = card_options(errors, options, &format!("{path}.cardOptions"))
        }
        Some(_) => err(errors, format!("{path}.cardOptions"), "must be an object"),
    }
    for (key, slot) in [
        ("notificationDetail", &mut payload.notification_detail),
        ("metadata", &mut payload.metadata),
    ] {
        match object.get(key) {
            None | Some(Value::Null) => {}
            Some(Value::Object(map)) => *slot = Some(map.clone()),
            Some(_) => err(errors, format!("{path}.{key}"), "must be an object"),
        }
    }
    if let Some(detail) = &payload.notification_detail {
        let size = Value::Object(detail.clone()).to_string().len();
        if size > MAX_NOTIFICATION_DETAIL_BYTES {
            err(
                errors,
                format!("{path}.notificationDetail"),
                format!(
                    "is {size} bytes; the push payload it travels in is limited to \
                    {MAX_NOTIFICATION_DETAIL_BYTES} bytes"
                ),
            );
        }
    }
    payload
}

fn timestamp(
    errors: &mut Vec<FieldError>,
    options: &Map<String, Value>,
    key: &str,
    path: &str,
) -> Option<Timestamp> {
    match options.get(key) {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => match crate::time::parse_timestamp(s) {
            Ok(t) => Some(t),
            Err(message) => {
                err(errors, format!("{path}.{key}"), message);
                None
            }
        },
        Some(_) => {
            err(
                errors,
                format!("{path}.{key}"),
                "must be an RFC 3339 timestamp",
            );
            None
        }
    }
}

fn card_options(
    errors: &mut Vec<FieldError>,
    options: &Map<String, Value>,
    path: &str,
) -> CardOptions {
    let mut out = CardOptions::default();
    match options.get("priority") {
        None | Some(Value::Null) => {}
        Some(p) => match p
            .as_u64()
            .and_then(|n| u8::try_from(n).ok())
            .filter(|n| crate::flow::config::PRIORITIES.contains(n))
        {
            Some(n) => out.priority = Some(n),
            None => err(
                errors,
                format!("{path}.priority"),
                "must be a whole number from 1 to 10",
            ),
        },
    }
    out.expires = timestamp(errors, options, "expires", path);
    out.embargo = timestamp(errors, options, "embargo", path);
    match options.get("expiresInterval") {
        None | Some(Value::Null) => {}
        Some(Value::String(s)) => match parse_duration(s) {
            Some(d) if d > crate::time::MAX_DURATION => err(
                errors,
                format!("{path}.expiresInterval"),
                "must be at most 100 years (P36525D)",
            ),
            Some(d) if d > Duration::zero() => out.expires_interval = Some(d),
            _ => err(
                errors,
                format!("{path}.expiresInterval"),
                "must be a positive ISO 8601 duration, e.g. PT30M or P1DT12H",
            ),
        },
        Some(_) => err(
            errors,
            format!("{path}.expiresInterval"),
            "must be an ISO 8601 duration string",
        ),
    }
    if let (Some(embargo), Some(expires)) = (out.embargo, out.expires) {
        if expires <= embargo {
            err(errors, format!("{path}.expires"), "must be after embargo");
        }
    }
    if let (Some(embargo), Some(interval)) = (out.embargo, out.expires_interval) {
        if crate::time::checked_after(embargo, interval).is_none() {
            err(
                errors,
                format!("{path}.expiresInterval"),
                "counted from the embargo, must end by 9999-12-31T23:59:59.999Z",
            );
        }
    }
    match options.get("targetStreamIds") {
        None | Some(Value::Null) => {}
        Some(Value::Array(ids)) => {
            let mut streams = Vec::new();
            for (i, id) in ids.iter().enumerate() {
                match id {
                    Value::String(s) if !s.is_empty() => streams.push(s.clone()),
                    _ => err(
                        errors,
                        format!("{path}.targetStreamIds[{i}]"),
                        "must be a stream id",
                    ),
                }
            }
            out.target_stream_ids = Some(streams);
        }
        Some(_) => err(
            errors,
            format!("{path}.targetStreamIds"),
            "must be an array of stream ids",
        ),
    }
    match options.get("targetPlatforms") {
        None | Some(Value::Null) => {}
        Some(Value::Object(map)) => {
            let mut platforms = Platforms {
                web: false,
                ios: false,
                android: false,
            };
            for (key, value) in map {
                let Some(on) = value.as_bool() else {
                    err(
                        errors,
                        format!("{path}.targetPlatforms.{key}"),
                        "must be true or false",
                    );
                    continue;
                };
                match key.as_str() {
                    "Web" => platforms.web = on,
                    "iOS" => platforms.ios = on,
                    "Android" => platforms.android = on,
                    _ => err(
                        errors,
                        format!("{path}.targetPlatforms.{key}"),
                        "platforms are Web, iOS and Android",
                    ),
                }
            }
            out.target_platforms = Some(platforms);
        }
        Some(_) => err(
            errors,
            format!("{path}.targetPlatforms"),
            "must be an object of Web, iOS, Android booleans",
        ),
    }
    for key in options.keys() {
        if ![
            "priority",
            "expires",
            "expiresInterval",
            "embargo",
            "targetStreamIds",
            "targetPlatforms",
        ]
        .contains(&key.as_str())
        {
            err(errors, format!("{path}.{key}"), "is not a card option");
        }
    }
    out
}

/// ISO 8601 durations are read by [`crate::time`]; re-exported where triggers always had them.
pub use crate::time::{parse_duration, parse_signed_duration};
