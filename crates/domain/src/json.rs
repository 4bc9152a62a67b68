//! JSON documents held as their text.

use std::sync::Arc;

use serde_json::Value;

/// `key` as one token of a JSON pointer (RFC 6901): `~` and `/` escaped.
///
/// ```
/// assert_eq!(workbench_domain::json::pointer_token("a/b~c"), "a~1b~0c");
/// ```
pub fn pointer_token(key: &str) -> String {
    key.replace('~', "~0").replace('/', "~1")
}

/// A JSON document held as its text: written once, stored as it is, parsed only where it is
/// read, and cheap to clone (shared). For what the service records and seldom reads — an
/// invocation's target and payload, a card's context — a JSON tree was built, copied,
/// serialised for storage and freed for every CSV row.
#[derive(Clone)]
pub struct JsonText(Arc<str>);

impl JsonText {
    /// The text of `value`.
    pub fn of(value: &Value) -> Self {
        JsonText(value.to_string().into())
    }

    /// Text known to be JSON: as written by [`of`](Self::of) or another writer of JSON,
    /// or read back from storage (which checks it).
    pub fn stored(text: String) -> Self {
        JsonText(text.into())
    }

    /// The text, as written or stored.
    pub fn text(&self) -> &str {
        &self.0
    }

    /// Whether two values are one text, not only equal ones.
    pub fn same(&self, other: &JsonText) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }

    /// The document; null if the text is not JSON (never written so).
    pub fn value(&self) -> Value {
        serde_json::from_str(&self.0).unwrap_or(Value::Null)
    }
}

/// One text, or equal texts.
impl PartialEq for JsonText {
    fn eq(&self, other: &Self) -> bool {
        self.same(other) || self.0 == other.0
    }
}

impl Eq for JsonText {}

/// `null`, as `Value`'s default.
impl Default for JsonText {
    fn default() -> Self {
        JsonText("null".into())
    }
}

impl From<Value> for JsonText {
    fn from(value: Value) -> Self {
        Self::of(&value)
    }
}

impl std::fmt::Debug for JsonText {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_document_is_held_as_its_text() {
        let value = json!({"b": [1, "\"x\""], "a": null});
        let text = JsonText::of(&value);
        assert_eq!(text.text(), value.to_string());
        assert_eq!(text.value(), value);
        assert_eq!(JsonText::from(value.clone()), text);
        assert!(text.same(&text.clone()));
        assert!(!text.same(&JsonText::of(&value)));
        assert_eq!(JsonText::default().value(), Value::Null);
        assert_eq!(JsonText::stored("{".into()).value(), Value::Null);
    }
}
