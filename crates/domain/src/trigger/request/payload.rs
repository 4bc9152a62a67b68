//! An element's `payload`: its variables, card options, notification detail and metadata, as
//! far as the request's shape goes (the variables are checked against the flow by
//! [`crate::trigger::variables::resolve`]).

use serde_json::{Map, Value};

use super::card_options::{card_options, CardOptions};
use super::problem::err;
use crate::FieldError;

/// The push payload limit (docs/api.md, Sending pushes), which `notificationDetail` must fit
/// in, as JSON text.
pub const MAX_NOTIFICATION_DETAIL_BYTES: usize = 2_048;

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

/// An element's `payload`, as far as it is the request's to check.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Payload {
    /// `variables`: (name, value) pairs; checked against the flow's definitions by
    /// [`crate::trigger::variables::resolve`].
    pub variables: Vec<(String, VariableValue)>,
    /// `cardOptions`.
    pub card_options: CardOptions,
    /// `notificationDetail`: any object of at most [`MAX_NOTIFICATION_DETAIL_BYTES`] as JSON,
    /// passed to the SDKs with the push.
    pub notification_detail: Option<Map<String, Value>>,
    /// `metadata`: any object, carried to the cards' analytics events.
    pub metadata: Option<Map<String, Value>>,
}

/// The payload at `path`, without the parts with problems (recorded in `errors`).
pub(super) fn payload(errors: &mut Vec<FieldError>, raw: &Value, path: &str) -> Payload {
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
                if let Some(parsed) = variable(errors, value, &var_path) {
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
        check_detail_size(errors, detail, path);
    }
    payload
}

/// A string, a number or a boolean: what a variable's value may be.
fn scalar(v: &Value) -> bool {
    matches!(v, Value::String(_) | Value::Number(_) | Value::Bool(_))
}

/// One variable's value at `var_path`: sent plain, or as an object with `value` and the
/// platforms' overrides.
fn variable(errors: &mut Vec<FieldError>, value: &Value, var_path: &str) -> Option<VariableValue> {
    match value {
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
                var_path,
                "must be a string, or an object with `value`, `valueIos`, \
                    `valueAndroid`",
            );
            None
        }
    }
}

/// `notificationDetail` must fit, as JSON text, in [`MAX_NOTIFICATION_DETAIL_BYTES`].
fn check_detail_size(errors: &mut Vec<FieldError>, detail: &Map<String, Value>, path: &str) {
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
