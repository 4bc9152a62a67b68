//! The subscribe request (docs/api.md, Webhooks: Validation), parsed and validated: every
//! problem at once.

use std::collections::BTreeMap;

use serde_json::Value;

use super::{HttpMethod, EVENT_TYPES};
use crate::{DomainError, FieldError};

/// The longest subscription URL accepted, in characters.
pub const MAX_URL_CHARS: usize = 2_048;
/// The most headers a subscription may set.
pub const MAX_HEADERS: usize = 20;
const MAX_HEADER_NAME_CHARS: usize = 256;
const MAX_HEADER_VALUE_CHARS: usize = 4_096;
const MAX_FILTER_ID_CHARS: usize = 255;
/// The longest subscription description, in characters.
pub const MAX_DESCRIPTION_CHARS: usize = 1_000;
/// Headers the service sets itself; a subscription cannot override them.
const RESERVED_HEADERS: &[&str] = &[
    "webhook-id",
    "webhook-timestamp",
    "webhook-signature",
    "content-type",
    "content-length",
    "host",
    "transfer-encoding",
    "connection",
    "user-agent",
];

/// A subscribe body, read and validated by [`SubscriptionRequest::parse`].
#[derive(Debug, Clone, PartialEq)]
pub struct SubscriptionRequest {
    /// `types`: at least one name of [`EVENT_TYPES`], duplicates dropped, in the order given.
    pub types: Vec<String>,
    /// `url`: http or https with a host, at most [`MAX_URL_CHARS`] characters, without
    /// spaces, control characters or credentials. Not yet checked against the SSRF policy.
    pub url: String,
    /// `method`: `POST` (the default) or `PUT`, in any case.
    pub method: HttpMethod,
    /// `headers`: at most [`MAX_HEADERS`]; names are HTTP tokens of at most 256 characters,
    /// not one the service sets itself, unique ignoring case; values at most 4,096 characters
    /// without control characters (a tab allowed).
    pub headers: BTreeMap<String, String>,
    /// `cardTemplateId`, at most 255 characters; None when absent, null or empty.
    pub card_template_id: Option<String>,
    /// `actionFlowConfigId`, at most 255 characters; None when absent, null or empty.
    pub flow_id: Option<String>,
    /// `description`, at most [`MAX_DESCRIPTION_CHARS`] characters without control characters
    /// (tabs and line breaks allowed); None when absent, null or empty.
    pub description: Option<String>,
}

impl SubscriptionRequest {
    /// Reads a subscribe body. Unknown fields are ignored. Fails with
    /// [`DomainError::Validation`] listing every problem, each naming its field (`url`,
    /// `types[1]`, `headers.X-Token`, ...); a body that is not an object is one problem, of
    /// the field `""`.
    ///
    /// ```
    /// use workbench_domain::serde_json::json;
    /// use workbench_domain::webhook::{HttpMethod, SubscriptionRequest};
    /// use workbench_domain::DomainError;
    ///
    /// let body = json!({"types": ["card-completed", "card-completed"], "url": "https://x.io/h"});
    /// let request = SubscriptionRequest::parse(&body).unwrap();
    /// assert_eq!((request.types.len(), request.method), (1, HttpMethod::Post));
    ///
    /// let body = json!({"types": ["card-eaten"], "url": "ftp://x.io", "method": "GET"});
    /// let Err(DomainError::Validation(errors)) = SubscriptionRequest::parse(&body) else {
    ///     panic!("expected a validation error");
    /// };
    /// let fields: Vec<&str> = errors.iter().map(|e| e.field.as_str()).collect();
    /// assert_eq!(fields, ["types[0]", "url", "method"]);
    /// ```
    pub fn parse(body: &Value) -> Result<Self, DomainError> {
        let Some(obj) = body.as_object() else {
            return Err(DomainError::invalid("", "the body must be a JSON object"));
        };
        // Unknown fields are ignored, as everywhere in the API (docs/api.md, Errors).
        let mut errors = Vec::new();
        let types = parse_types(obj.get("types"), &mut errors);
        let url = parse_url(obj.get("url"), &mut errors);
        let method = match obj.get("method") {
            None | Some(Value::Null) => HttpMethod::Post,
            Some(Value::String(m)) => {
                HttpMethod::parse(&m.to_ascii_uppercase()).unwrap_or_else(|| {
                    errors.push(FieldError::new("method", "must be POST or PUT"));
                    HttpMethod::Post
                })
            }
            Some(_) => {
                errors.push(FieldError::new("method", "must be POST or PUT"));
                HttpMethod::Post
            }
        };
        let headers = parse_headers(obj.get("headers"), &mut errors);
        let card_template_id =
            optional_id(obj.get("cardTemplateId"), "cardTemplateId", &mut errors);
        let flow_id = optional_id(
            obj.get("actionFlowConfigId"),
            "actionFlowConfigId",
            &mut errors,
        );
        let description = parse_description(obj.get("description"), &mut errors);
        if !errors.is_empty() {
            return Err(DomainError::Validation(errors));
        }
        Ok(SubscriptionRequest {
            types,
            url,
            method,
            headers,
            card_template_id,
            flow_id,
            description,
        })
    }
}

fn parse_types(value: Option<&Value>, errors: &mut Vec<FieldError>) -> Vec<String> {
    let Some(Value::Array(items)) = value else {
        errors.push(FieldError::new(
            "types",
            "is required: an array of event names",
        ));
        return Vec::new();
    };
    if items.is_empty() {
        errors.push(FieldError::new("types", "must name at least one event"));
    }
    let mut types: Vec<String> = Vec::new();
    for (i, item) in items.iter().enumerate() {
        match item.as_str() {
            Some(t) if EVENT_TYPES.contains(&t) => {
                if !types.iter().any(|x| x == t) {
                    types.push(t.to_owned());
                }
            }
            Some(t) => errors.push(FieldError::new(
                format!("types[{i}]"),
                format!(
                    "unknown event {t:?}; known events: {}",
                    EVENT_TYPES.join(", ")
                ),
            )),
            None => errors.push(FieldError::new(format!("types[{i}]"), "must be a string")),
        }
    }
    types
}

fn parse_url(value: Option<&Value>, errors: &mut Vec<FieldError>) -> String {
    let Some(Value::String(url)) = value else {
        errors.push(FieldError::new("url", "is required: an http or https URL"));
        return String::new();
    };
    let lower = url.to_ascii_lowercase();
    let rest = lower
        .strip_prefix("https://")
        .or_else(|| lower.strip_prefix("http://"));
    let problem = if url.chars().count() > MAX_URL_CHARS {
        Some(format!("must be at most {MAX_URL_CHARS} characters"))
    } else if url.chars().any(|c| c.is_whitespace() || c.is_control()) {
        Some("must not contain spaces or control characters".to_owned())
    } else {
        match rest {
            None => Some("must be an http or https URL".to_owned()),
            Some(rest) => {
                let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
                if authority.is_empty() {
                    Some("must name a host".to_owned())
                } else if authority.contains('@') {
                    Some("must not carry credentials; use headers instead".to_owned())
                } else {
                    None
                }
            }
        }
    };
    if let Some(message) = problem {
        errors.push(FieldError::new("url", message));
    }
    url.clone()
}

fn parse_headers(value: Option<&Value>, errors: &mut Vec<FieldError>) -> BTreeMap<String, String> {
    let mut headers = BTreeMap::new();
    let obj = match value {
        None | Some(Value::Null) => return headers,
        Some(Value::Object(obj)) => obj,
        Some(_) => {
            errors.push(FieldError::new(
                "headers",
                "must be an object of header names to string values",
            ));
            return headers;
        }
    };
    if obj.len() > MAX_HEADERS {
        errors.push(FieldError::new(
            "headers",
            format!("at most {MAX_HEADERS} headers"),
        ));
    }
    for (name, value) in obj {
        let path = format!("headers.{name}");
        let lower = name.to_ascii_lowercase();
        if name.is_empty() || name.len() > MAX_HEADER_NAME_CHARS || !name.bytes().all(is_token_byte)
        {
            errors.push(FieldError::new(
                &path,
                format!(
                    "is not a valid header name (1 to {MAX_HEADER_NAME_CHARS} letters, digits \
                    and !#$%&'*+-.^_`|~)"
                ),
            ));
            continue;
        }
        if RESERVED_HEADERS.contains(&lower.as_str()) {
            errors.push(FieldError::new(
                &path,
                "is set by the service and cannot be overridden",
            ));
            continue;
        }
        if headers
            .keys()
            .any(|k: &String| k.eq_ignore_ascii_case(name))
        {
            errors.push(FieldError::new(
                &path,
                "is given twice (header names ignore case)",
            ));
            continue;
        }
        match value.as_str() {
            Some(v)
                if v.chars().count() <= MAX_HEADER_VALUE_CHARS
                    && v.chars().all(|c| c == '\t' || !c.is_control()) =>
            {
                headers.insert(name.clone(), v.to_owned());
            }
            Some(_) => errors.push(FieldError::new(
                &path,
                format!(
                    "must be at most {MAX_HEADER_VALUE_CHARS} characters without line breaks \
                    or control characters"
                ),
            )),
            None => errors.push(FieldError::new(&path, "must be a string")),
        }
    }
    headers
}

fn parse_description(value: Option<&Value>, errors: &mut Vec<FieldError>) -> Option<String> {
    match value {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) if s.is_empty() => None,
        Some(Value::String(s))
            if s.chars().count() <= MAX_DESCRIPTION_CHARS
                && s.chars()
                    .all(|c| matches!(c, '\t' | '\n' | '\r') || !c.is_control()) =>
        {
            Some(s.clone())
        }
        Some(_) => {
            errors.push(FieldError::new(
                "description",
                format!(
                    "must be a string of at most {MAX_DESCRIPTION_CHARS} characters without \
                     control characters other than tabs and line breaks"
                ),
            ));
            None
        }
    }
}

fn is_token_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

fn optional_id(value: Option<&Value>, field: &str, errors: &mut Vec<FieldError>) -> Option<String> {
    match value {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) if s.is_empty() => None,
        Some(Value::String(s)) if s.chars().count() <= MAX_FILTER_ID_CHARS => Some(s.clone()),
        Some(_) => {
            errors.push(FieldError::new(
                field,
                format!("must be a string of at most {MAX_FILTER_ID_CHARS} characters"),
            ));
            None
        }
    }
}
