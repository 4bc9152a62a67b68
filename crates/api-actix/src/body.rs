//! Reading JSON request bodies so that every field problem is reported at once.
//!
//! Bodies arrive as bytes; [`json_object`] checks the media type (415) and the syntax (400
//! `malformed_json`) and requires an object. [`Fields`] then reads typed fields, collecting a
//! problem per missing or mistyped field instead of stopping at the first, as a derived
//! deserializer would. Unknown fields are ignored, so clients may send more than we read.

use actix_web::http::header;
use actix_web::HttpRequest;
use domain::FieldError;
use serde_json::{Map, Value};

use crate::problem::ApiError;

/// True for `application/json` and any `application/*+json`, with or without parameters.
fn is_json(req: &HttpRequest) -> bool {
    let Some(value) = req
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
    else {
        return false;
    };
    let essence = value
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    essence == "application/json"
        || (essence.starts_with("application/") && essence.ends_with("+json"))
}

pub fn json_object(req: &HttpRequest, body: &[u8]) -> Result<Map<String, Value>, ApiError> {
    if !is_json(req) {
        return Err(ApiError::unsupported_media_type("application/json"));
    }
    if body.iter().all(u8::is_ascii_whitespace) {
        return Err(ApiError::malformed_json(
            "the request body is empty; send a JSON object",
        ));
    }
    match serde_json::from_slice::<Value>(body) {
        Ok(Value::Object(map)) => Ok(map),
        Ok(_) => Err(ApiError::validation(vec![FieldError::new(
            "",
            "the request body must be a JSON object",
        )])),
        Err(e) => Err(ApiError::malformed_json(format!(
            "the request body is not valid JSON: {e}"
        ))),
    }
}

/// Typed reads from a JSON object, collecting every problem.
pub struct Fields<'a> {
    object: &'a Map<String, Value>,
    prefix: Option<String>,
    errors: Vec<FieldError>,
}

impl<'a> Fields<'a> {
    pub fn new(object: &'a Map<String, Value>) -> Self {
        Self {
            object,
            prefix: None,
            errors: Vec::new(),
        }
    }

    /// Reports the fields of this (nested) object as `prefix.field`.
    pub fn prefix(&mut self, prefix: &str) {
        self.prefix = Some(prefix.to_owned());
    }

    /// Records a problem with `key` (the object itself when empty).
    pub fn problem(&mut self, key: &str, message: impl Into<String>) {
        let path = match (&self.prefix, key) {
            (Some(prefix), "") => prefix.clone(),
            (Some(prefix), key) => format!("{prefix}.{key}"),
            (None, key) => key.to_owned(),
        };
        self.errors.push(FieldError::new(path, message));
    }

    /// A required boolean.
    pub fn boolean(&mut self, key: &str) -> Option<bool> {
        match self.object.get(key) {
            Some(Value::Bool(b)) => Some(*b),
            None | Some(Value::Null) => {
                self.problem(key, "is required");
                None
            }
            Some(_) => {
                self.problem(key, "must be true or false");
                None
            }
        }
    }

    /// A required string.
    pub fn string(&mut self, key: &str) -> Option<String> {
        match self.object.get(key) {
            Some(Value::String(s)) => Some(s.clone()),
            None | Some(Value::Null) => {
                self.problem(key, "is required");
                None
            }
            Some(_) => {
                self.problem(key, "must be a string");
                None
            }
        }
    }

    /// An optional, nullable string: `None` when absent, `Some(None)` when null.
    pub fn nullable_string(&mut self, key: &str) -> Option<Option<String>> {
        match self.object.get(key) {
            None => None,
            Some(Value::Null) => Some(None),
            Some(Value::String(s)) => Some(Some(s.clone())),
            Some(_) => {
                self.problem(key, "must be a string or null");
                None
            }
        }
    }

    /// An optional, nullable id: as [`Fields::nullable_string`], and an id never holds a
    /// control character (none is stored; PostgreSQL refuses a NUL in text outright).
    pub fn nullable_id(&mut self, key: &str) -> Option<Option<String>> {
        match self.nullable_string(key) {
            Some(Some(id)) if id.chars().any(char::is_control) => {
                self.problem(key, "must be an id: it has a control character");
                None
            }
            other => other,
        }
    }

    /// Ends the reading: the collected problems, if any, as a 400.
    pub fn finish(self) -> Result<(), ApiError> {
        if self.errors.is_empty() {
            Ok(())
        } else {
            Err(ApiError::validation(self.errors))
        }
    }
}

#[cfg(test)]
mod tests {
    use actix_web::test::TestRequest;
    use serde_json::json;

    use super::*;

    #[test]
    fn media_type_syntax_and_shape_are_checked_in_that_order() {
        let json = TestRequest::default()
            .insert_header(("content-type", "application/json; charset=utf-8"))
            .to_http_request();
        let text = TestRequest::default()
            .insert_header(("content-type", "text/plain"))
            .to_http_request();
        let none = TestRequest::default().to_http_request();
        let vendor = TestRequest::default()
            .insert_header(("content-type", "application/merge-patch+json"))
            .to_http_request();
        assert_eq!(
            json_object(&text, b"{}").err().map(|e| e.code()),
            Some("unsupported_media_type")
        );
        assert_eq!(
            json_object(&none, b"{}").err().map(|e| e.code()),
            Some("unsupported_media_type")
        );
        assert_eq!(
            json_object(&json, b"{\"a\":").err().map(|e| e.code()),
            Some("malformed_json")
        );
        assert_eq!(
            json_object(&json, b"  ").err().map(|e| e.code()),
            Some("malformed_json")
        );
        assert_eq!(
            json_object(&json, b"[1]").err().map(|e| e.code()),
            Some("validation_failed")
        );
        assert!(json_object(&json, b"{\"a\":1}").is_ok());
        assert!(json_object(&vendor, b"{}").is_ok());
    }

    #[test]
    fn fields_collect_every_problem() {
        let value = json!({"name": 5, "parentId": [], "ok": "x"});
        let object = value.as_object().expect("object");
        let mut fields = Fields::new(object);
        assert_eq!(fields.string("ok"), Some("x".into()));
        assert_eq!(fields.string("name"), None);
        assert_eq!(fields.nullable_string("parentId"), None);
        assert_eq!(fields.string("missing"), None);
        assert_eq!(fields.nullable_string("absent"), None);
        let err = fields.finish().expect_err("three problems");
        assert_eq!(err.code(), "validation_failed");
        assert!(err.to_string().contains("3 invalid fields"), "{err}");
    }

    #[test]
    fn nullable_strings_distinguish_absent_null_and_value() {
        let value = json!({"a": null, "b": "x"});
        let object = value.as_object().expect("object");
        let mut fields = Fields::new(object);
        fields.prefix("outer");
        assert_eq!(fields.nullable_string("a"), Some(None));
        assert_eq!(fields.nullable_string("b"), Some(Some("x".into())));
        assert_eq!(fields.nullable_string("c"), None);
        fields.problem("b", "bad");
        assert_eq!(fields.errors[0].field, "outer.b");
        fields.problem("", "whole");
        assert_eq!(fields.errors[1].field, "outer");
        assert_eq!(fields.boolean("b"), None);
        let err = fields.finish().expect_err("problems");
        assert!(err.to_string().contains("3 invalid fields"));
    }
}
