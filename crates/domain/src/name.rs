//! Names people give things: Action Flows, streams, segments and keys (docs/api.md, Errors).
//! One rule for all of them, so that a name that could mislead a reader is refused everywhere
//! alike: no control characters, no bidirectional controls (which reorder what is shown, so
//! that `abc<U+202E>gpj.exe` reads as `abcexe.jpg`), and at least one visible character.
//! Folder names have a stricter rule of their own ([`folder::rules`](crate::folder::rules)).
//!
//! ```
//! use workbench_domain::name;
//!
//! assert_eq!(name::problem("Welcome flow", 255), None);
//! assert!(name::problem("invoice\u{202e}fdp.exe", 255).is_some());
//! assert!(name::problem("\u{200b}\u{200b}", 255).is_some());
//! assert!(name::problem(&"x".repeat(256), 255).is_some());
//! ```

use crate::FieldError;

/// Characters that change the order text is shown in: the embeddings, overrides and isolates
/// (U+202A–U+202E, U+2066–U+2069) and the directional marks (U+061C, U+200E, U+200F).
pub fn is_bidi_control(c: char) -> bool {
    matches!(
        c,
        '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}' | '\u{061c}' | '\u{200e}' | '\u{200f}'
    )
}

/// Characters that show nothing: white space, and the zero-width, blank and filler characters
/// (U+00AD, U+034F, U+115F, U+1160, U+180E, U+200B–U+200F, U+2060–U+2064, U+2800, U+3164,
/// U+FEFF, U+FFA0, and the tag characters U+E0000–U+E007F).
pub fn is_invisible(c: char) -> bool {
    c.is_whitespace()
        || matches!(
            c,
            '\u{00ad}'
                | '\u{034f}'
                | '\u{115f}'
                | '\u{1160}'
                | '\u{180e}'
                | '\u{200b}'..='\u{200f}'
                | '\u{2060}'..='\u{2064}'
                | '\u{2800}'
                | '\u{3164}'
                | '\u{feff}'
                | '\u{ffa0}'
                | '\u{e0000}'..='\u{e007f}'
        )
}

/// What is wrong with `name`, if anything: empty or white space only, made only of invisible
/// characters, longer than `max_chars` characters (Unicode scalar values), or holding a
/// control or bidirectional control character.
pub fn problem(name: &str, max_chars: usize) -> Option<String> {
    if name.trim().is_empty() {
        Some("must not be empty".into())
    } else if name.chars().all(is_invisible) {
        Some("must contain a visible character".into())
    } else if name.chars().count() > max_chars {
        Some(format!("must be at most {max_chars} characters"))
    } else if name.chars().any(char::is_control) {
        Some("must not contain control characters".into())
    } else if name.chars().any(is_bidi_control) {
        Some(
            "must not contain bidirectional control characters (U+061C, U+200E, U+200F, U+202A to \
                U+202E, U+2066 to U+2069)"
                .into(),
        )
    } else {
        None
    }
}

/// [`problem`] as a problem of `field`.
pub fn check(field: &str, name: &str, max_chars: usize) -> Option<FieldError> {
    problem(name, max_chars).map(|message| FieldError::new(field, message))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn misleading_names_are_refused_and_ordinary_ones_kept() {
        for ok in [
            "Welcome",
            "Café 50% off",
            "日本語の名前",
            "a",
            "emoji 🎉",
            "tab\u{a0}nbsp",
        ] {
            assert_eq!(problem(ok, 255), None, "{ok:?}");
        }
        for bad in [
            "",
            "   ",
            "\u{200b}",
            "\u{200b}\u{feff}\u{2060}",
            "\u{3164}",
            "a\u{0}b",
            "line\nbreak",
            "invoice\u{202e}fdp.exe",
            "x\u{2066}y",
            "x\u{2069}",
            "ab\u{200f}c",
            "\u{2800}\u{2800}",
            "\u{e0041}\u{e0042}",
        ] {
            assert!(problem(bad, 255).is_some(), "{bad:?}");
        }
        assert!(problem(&"é".repeat(255), 255).is_none());
        assert!(problem(&"é".repeat(256), 255).is_some());
    }
}
