//! A card's rendered content, held as the JSON text it is stored as.
//!
//! A card's content is rendered once, when its card is created, and read rarely (a feed, a
//! push): it is kept as text from the template's rendering to the database and back, parsed
//! only where it is read. Building it as a JSON tree, serialising the tree for storage and
//! freeing it was most of the work of a CSV row's card.

use std::fmt::Write as _;
use std::sync::{Arc, OnceLock};

use serde_json::{Map, Value};

use crate::json::JsonText;

/// The key under which a view shared by every platform of a card is kept.
pub const EVERY_PLATFORM: &str = "*";

/// A card's content: per platform (`Web`, `iOS`, `Android`), its view — the template's
/// `defaultView`, `subviews` and `notification` rendered with the trigger's variables.
///
/// Held as the JSON object it is stored as: `{"*": view}` when every platform of the card has
/// the same view (nearly always: a template renders alike for every platform unless a variable
/// has a platform's own value), else `{"Web": view, "iOS": view, ...}`. Cheap to clone.
#[derive(Clone)]
pub struct CardContent(Arc<Held>);

struct Held {
    text: String,
    notifies: OnceLock<bool>,
}

impl CardContent {
    /// One view for every platform of the card. `view` is a JSON object's text.
    pub fn shared(view: &str, notifies: bool) -> Self {
        let mut text = String::with_capacity(view.len() + 8);
        text.push_str("{\"*\":");
        text.push_str(view);
        text.push('}');
        Self::held(text, Some(notifies))
    }

    /// Each platform its own view: (platform name, the view's JSON text).
    pub fn per_platform(views: &[(&str, &str)], notifies: bool) -> Self {
        let mut text = String::with_capacity(views.iter().map(|(_, v)| v.len() + 12).sum());
        text.push('{');
        for (i, (platform, view)) in views.iter().enumerate() {
            if i > 0 {
                text.push(',');
            }
            push_json_string(&mut text, platform);
            text.push(':');
            text.push_str(view);
        }
        text.push('}');
        Self::held(text, Some(notifies))
    }

    /// The content of views given as JSON values, per platform name.
    pub fn of_views(views: &Map<String, Value>) -> Self {
        Self::held(Value::Object(views.clone()).to_string(), None)
    }

    /// The content as stored (see [`text`](Self::text)), read back.
    pub fn stored(text: String) -> Self {
        Self::held(text, None)
    }

    fn held(text: String, notifies: Option<bool>) -> Self {
        let known = OnceLock::new();
        if let Some(n) = notifies {
            let _ = known.set(n);
        }
        CardContent(Arc::new(Held {
            text,
            notifies: known,
        }))
    }

    /// The text stored: a JSON object, see [`CardContent`].
    pub fn text(&self) -> &str {
        &self.0.text
    }

    /// Whether two values are one content, not only equal ones.
    pub fn same(&self, other: &CardContent) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }

    /// The view of each of `platforms` (the card's), by platform name. Empty if the text is
    /// not an object (never written so).
    pub fn views(&self, platforms: &[String]) -> Map<String, Value> {
        let Ok(Value::Object(mut stored)) = serde_json::from_str::<Value>(&self.0.text) else {
            return Map::new();
        };
        match stored.remove(EVERY_PLATFORM) {
            Some(view) if stored.is_empty() => platforms
                .iter()
                .map(|p| (p.clone(), view.clone()))
                .collect(),
            Some(view) => {
                stored.insert(EVERY_PLATFORM.to_owned(), view);
                stored
            }
            None => stored,
        }
    }

    /// The view of `platform` if it is one of `platforms` (the card's).
    pub fn view(&self, platform: &str, platforms: &[String]) -> Option<Value> {
        if !platforms.iter().any(|p| p == platform) {
            return None;
        }
        self.views(platforms).remove(platform)
    }

    /// Whether a view has a notification (the template's `notification`): known when
    /// rendered, else read from the text once.
    pub fn notifies(&self) -> bool {
        *self.0.notifies.get_or_init(|| {
            matches!(
                serde_json::from_str::<Value>(&self.0.text),
                Ok(Value::Object(views))
                    if views.values().any(|v| v.get("notification").is_some())
            )
        })
    }
}

impl Default for CardContent {
    fn default() -> Self {
        Self::held("{}".to_owned(), Some(false))
    }
}

impl From<Map<String, Value>> for CardContent {
    fn from(views: Map<String, Value>) -> Self {
        Self::of_views(&views)
    }
}

impl PartialEq for CardContent {
    fn eq(&self, other: &Self) -> bool {
        self.same(other) || self.0.text == other.0.text
    }
}

impl std::fmt::Debug for CardContent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0.text)
    }
}

/// The trigger's context of a card — `test`, `variables`, `metadata`, `notificationDetail` —
/// as JSON text: read only when an event's payload or a push is built.
pub type CardContext = JsonText;

/// The context of a card of a trigger: `variables` (their web values), `metadata` and
/// `notificationDetail` as sent, `test` in test mode. Written as text at once (keys in order,
/// as `serde_json` writes a map), not built as a tree first.
///
/// What is empty or false is left out (an absent `metadata`, `notificationDetail` or
/// `variables` reads as `{}`, an absent `test` as `false`): a card's context is in every card
/// row, and these were a sizeable part of its bytes at rest (issue 27).
pub fn trigger_context(
    test: bool,
    variables: impl Iterator<Item = (impl AsRef<str>, impl AsRef<str>)>,
    metadata: Option<&Map<String, Value>>,
    notification_detail: Option<&Map<String, Value>>,
) -> CardContext {
    let mut text = String::with_capacity(96);
    text.push('{');
    let key = |text: &mut String, name: &str| {
        if text.len() > 1 {
            text.push(',');
        }
        push_json_string(text, name);
        text.push(':');
    };
    for (name, map) in [
        ("metadata", metadata),
        ("notificationDetail", notification_detail),
    ] {
        if let Some(map) = map.filter(|m| !m.is_empty()) {
            key(&mut text, name);
            text.push_str(&serde_json::to_string(map).unwrap_or_else(|_| "{}".into()));
        }
    }
    if test {
        key(&mut text, "test");
        text.push_str("true");
    }
    let mut variables = variables.peekable();
    if variables.peek().is_some() {
        key(&mut text, "variables");
        text.push('{');
        for (i, (name, value)) in variables.enumerate() {
            if i > 0 {
                text.push(',');
            }
            push_json_string(&mut text, name.as_ref());
            text.push(':');
            push_json_string(&mut text, value.as_ref());
        }
        text.push('}');
    }
    text.push('}');
    JsonText::stored(text)
}

/// Appends `s` as a JSON string, escaped exactly as `serde_json` escapes it (so a content
/// rendered here is the text `serde_json` would have written of the same tree).
pub(crate) fn push_json_string(out: &mut String, s: &str) {
    out.push('"');
    push_json_escaped(out, s);
    out.push('"');
}

/// Appends the inside of `s` as a JSON string: `"`, `\` and control characters escaped.
pub(crate) fn push_json_escaped(out: &mut String, s: &str) {
    let bytes = s.as_bytes();
    let mut start = 0;
    for (i, &b) in bytes.iter().enumerate() {
        let escaped = match b {
            b'"' => "\\\"",
            b'\\' => "\\\\",
            b'\n' => "\\n",
            b'\r' => "\\r",
            b'\t' => "\\t",
            0x08 => "\\b",
            0x0c => "\\f",
            0x00..=0x1f => "",
            _ => continue,
        };
        // Only ASCII bytes are escaped, so `i` is a character boundary.
        out.push_str(&s[start..i]);
        if escaped.is_empty() {
            let _ = write!(out, "\\u{b:04x}");
        } else {
            out.push_str(escaped);
        }
        start = i + 1;
    }
    out.push_str(&s[start..]);
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn platforms(names: &[&str]) -> Vec<String> {
        names.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn strings_are_escaped_as_serde_json_escapes_them() {
        let mut every: String = (0u8..=0x7f).map(char::from).collect();
        every.push_str("é€😀\u{2028}");
        for s in [every.as_str(), "", "plain", "a\"b\\c", "\u{0}\u{1f}\u{7f}"] {
            let mut out = String::new();
            push_json_string(&mut out, s);
            assert_eq!(out, serde_json::to_string(s).expect("string"), "{s:?}");
        }
    }

    #[test]
    fn a_shared_view_is_given_to_each_of_the_cards_platforms_only() {
        let view = json!({"defaultView": {"a": 1}}).to_string();
        let content = CardContent::shared(&view, false);
        assert_eq!(content.text(), format!("{{\"*\":{view}}}"));
        let of = platforms(&["Web", "iOS"]);
        assert_eq!(
            Value::Object(content.views(&of)),
            json!({"Web": {"defaultView": {"a": 1}}, "iOS": {"defaultView": {"a": 1}}})
        );
        assert_eq!(
            content.view("iOS", &of),
            Some(json!({"defaultView": {"a": 1}}))
        );
        assert_eq!(content.view("Android", &of), None);
        assert!(!content.notifies());
    }

    #[test]
    fn views_per_platform_read_back_as_written() {
        let web = json!({"defaultView": {"t": "web"}}).to_string();
        let ios = json!({"defaultView": {"t": "ios"}, "notification": {"b": 1}}).to_string();
        let content = CardContent::per_platform(&[("Web", &web), ("iOS", &ios)], true);
        let of = platforms(&["Web", "iOS"]);
        let expected = json!({"Web": {"defaultView": {"t": "web"}},
            "iOS": {"defaultView": {"t": "ios"}, "notification": {"b": 1}}});
        assert_eq!(Value::Object(content.views(&of)), expected);
        let read = CardContent::stored(content.text().to_owned());
        assert_eq!(read, content);
        assert!(read.notifies(), "read from the text");
        assert_eq!(
            CardContent::of_views(expected.as_object().expect("object")),
            content,
            "the text serde_json writes"
        );
    }

    #[test]
    fn a_triggers_context_is_written_as_serde_json_writes_it() {
        let metadata = json!({"b": [1, {"z": null}], "a": "\"q\""});
        let detail = json!({"d": "é"});
        for (test, variables, metadata, detail) in [
            (false, vec![], None, None),
            (false, vec![("a", "1")], Some(&Map::new()), None),
            (
                true,
                vec![("name", "Ann \"A\"\n"), ("x", "")],
                metadata.as_object(),
                detail.as_object(),
            ),
        ] {
            let context = trigger_context(test, variables.iter().copied(), metadata, detail);
            let mut expected = Map::new();
            for (name, map) in [("metadata", metadata), ("notificationDetail", detail)] {
                if let Some(map) = map.filter(|m| !m.is_empty()) {
                    expected.insert(name.into(), Value::Object(map.clone()));
                }
            }
            if test {
                expected.insert("test".into(), json!(true));
            }
            if !variables.is_empty() {
                expected.insert(
                    "variables".into(),
                    Value::Object(
                        variables
                            .iter()
                            .map(|(k, v)| ((*k).to_owned(), json!(v)))
                            .collect(),
                    ),
                );
            }
            let expected = Value::Object(expected);
            assert_eq!(context.text(), expected.to_string());
            assert_eq!(context.value(), expected);
            assert_eq!(CardContext::from(expected), context);
        }
        assert_eq!(CardContext::stored("nope".into()).value(), Value::Null);
    }

    #[test]
    fn whether_a_stored_content_notifies_is_read_from_its_views() {
        let notifying = CardContent::stored(r#"{"*":{"notification":{}}}"#.into());
        assert!(notifying.notifies());
        let nested = CardContent::stored(r#"{"*":{"defaultView":{"notification":1}}}"#.into());
        assert!(!nested.notifies(), "only a view's own notification counts");
        assert!(!CardContent::stored("not json".into()).notifies());
        assert!(CardContent::stored("not json".into())
            .views(&platforms(&["Web"]))
            .is_empty());
    }
}
