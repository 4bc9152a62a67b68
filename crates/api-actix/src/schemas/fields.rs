//! The field schemas the bodies share: references to components, ids, names and texts as the
//! domain checks them.

use serde_json::{json, Value};

/// A reference to the component schema `name`.
pub(super) fn reference(name: &str) -> Value {
    json!({"$ref": format!("#/components/schemas/{name}")})
}

/// A string of 1 or more characters, none of them a control character.
pub(super) fn id_string(description: &str) -> Value {
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
pub(super) fn name_schema(max: usize) -> Value {
    json!({"type": "string", "minLength": 1, "maxLength": max,
           "pattern": format!("^[^{NOT_IN_NAMES}]*[^{NOT_IN_NAMES}{INVISIBLE}][^{NOT_IN_NAMES}]*$"),
           "description": format!("1 to {max} characters with at least one visible one; no \
               control or bidirectional control characters")})
}

/// A string without control characters, of `min` to `max` characters.
pub(super) fn text(min: usize, max: usize) -> Value {
    json!({"type": "string", "minLength": min, "maxLength": max,
           "pattern": "^[^\\u0000-\\u001f\\u007f-\\u009f]*$"})
}
