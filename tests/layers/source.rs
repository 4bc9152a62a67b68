//! Reading the workspace's source as text: its files, their code outside tests, their
//! functions and their comments. rustfmt's layout is relied on (an item's closing brace at the
//! indentation of its first line).

use std::path::{Path, PathBuf};

/// The workspace's root.
pub fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The Rust files under `dir`, recursively, in a stable order.
pub fn files(dir: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return found;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            found.extend(files(&path));
        } else if path.extension().is_some_and(|e| e == "rs") {
            found.push(path);
        }
    }
    found.sort();
    found
}

/// Each crate of the workspace with a `src` folder: its name and that folder.
pub fn crate_sources() -> Vec<(String, PathBuf)> {
    let crates = workspace().join("crates");
    let mut sources: Vec<_> = std::fs::read_dir(&crates)
        .expect("crates/")
        .flatten()
        .map(|entry| {
            let name = entry.file_name().to_string_lossy().into_owned();
            (name, entry.path().join("src"))
        })
        .filter(|(_, src)| src.is_dir())
        .collect();
    sources.sort();
    sources
}

/// Whether `file` holds tests only: `tests.rs`, `*_tests.rs`, or a file under a `tests` folder.
pub fn is_test_file(file: &Path) -> bool {
    let name = file.file_name().unwrap_or_default().to_string_lossy();
    name == "tests.rs"
        || name.ends_with("_tests.rs")
        || file.components().any(|c| c.as_os_str() == "tests")
}

/// The text of a source file without its inline test modules (`#[cfg(test)] mod x { … }`, at
/// the left margin, wherever they stand); none for a file of tests.
pub fn outside_tests(file: &Path) -> Option<String> {
    if is_test_file(file) {
        return None;
    }
    let text = std::fs::read_to_string(file).unwrap_or_default();
    Some(without_test_modules(&text))
}

/// `text` without its inline test modules: from a `#[cfg(test)]` line followed by `mod x {` to
/// the next `}` at the left margin.
pub fn without_test_modules(text: &str) -> String {
    let mut kept = String::with_capacity(text.len());
    let mut lines = text.lines().peekable();
    while let Some(line) = lines.next() {
        let opens_module = line == "#[cfg(test)]"
            && lines
                .peek()
                .is_some_and(|next| next.starts_with("mod ") && next.ends_with('{'));
        if opens_module {
            for inside in lines.by_ref() {
                if inside == "}" {
                    break;
                }
            }
            continue;
        }
        kept.push_str(line);
        kept.push('\n');
    }
    kept
}

/// Whether `line` starts a function: `fn name`, after any of `pub`, `pub(…)`, `const`,
/// `async`, `unsafe`, `extern "C"`. Its name when it does.
fn function_name(line: &str) -> Option<&str> {
    let mut rest = line.trim_start();
    loop {
        let before = rest;
        for word in [
            "pub ",
            "const ",
            "async ",
            "unsafe ",
            "extern \"C\" ",
            "default ",
        ] {
            rest = rest.strip_prefix(word).unwrap_or(rest);
        }
        if rest.starts_with("pub(") {
            rest = rest.split_once(") ").map_or(rest, |(_, r)| r);
        }
        if rest == before {
            break;
        }
    }
    let rest = rest.strip_prefix("fn ")?;
    let end = rest
        .find(|c: char| !(c.is_alphanumeric() || c == '_'))
        .unwrap_or(rest.len());
    (end > 0).then(|| &rest[..end])
}

/// Every function with a body in `text`: its name and how many lines it spans, from its
/// `fn` line to its closing brace.
pub fn functions(text: &str) -> Vec<(String, usize)> {
    let lines: Vec<&str> = text.lines().collect();
    let mut found = Vec::new();
    for (at, line) in lines.iter().enumerate() {
        let Some(name) = function_name(line) else {
            continue;
        };
        let indent = &line[..line.len() - line.trim_start().len()];
        // The signature ends at the first line ending in `{` (a body) or `;` (none).
        let Some(open) = (at..lines.len()).find(|&i| {
            let l = lines[i].trim_end();
            l.ends_with('{') || l.ends_with(';') || l.ends_with('}')
        }) else {
            continue;
        };
        let opening = lines[open].trim_end();
        if !opening.ends_with('{') {
            continue;
        }
        let close = format!("{indent}}}");
        if let Some(end) = (open + 1..lines.len()).find(|&i| lines[i].trim_end() == close) {
            found.push((name.to_owned(), end - at + 1));
        }
    }
    found
}

/// The comment that ends `line`, if any: from a `//` that is not inside a string literal.
pub fn comment_of(line: &str) -> Option<&str> {
    let bytes = line.as_bytes();
    let mut in_string = false;
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'\\' if in_string => i += 1,
            b'"' => in_string = !in_string,
            b'\'' if !in_string && bytes.get(i + 2) == Some(&b'\'') => i += 2,
            b'/' if !in_string && bytes.get(i + 1) == Some(&b'/') => return Some(&line[i..]),
            _ => {}
        }
        i += 1;
    }
    None
}

/// Whether `comment` names a commit (7 to 40 hex digits, with letters and digits both) or a
/// calendar date (`2026-12-02`; a timestamp such as `2026-12-02T10:00:00Z` is an example
/// value, not a date of when).
pub fn names_a_commit_or_date(comment: &str) -> bool {
    let words = comment.split(|c: char| !(c.is_ascii_alphanumeric() || c == '-' || c == '_'));
    words.into_iter().any(|word| {
        let hex = (7..=40).contains(&word.len())
            && word
                .chars()
                .all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase())
            && word.chars().any(|c| c.is_ascii_digit())
            && word.chars().any(|c| c.is_ascii_alphabetic());
        hex || is_date(word)
    })
}

/// `YYYY-MM-DD` as a whole word (the split leaves `T…` of a timestamp attached, so a
/// timestamp is not a date here).
fn is_date(word: &str) -> bool {
    let b = word.as_bytes();
    b.len() == 10
        && b[4] == b'-'
        && b[7] == b'-'
        && [0, 1, 2, 3, 5, 6, 8, 9]
            .iter()
            .all(|&i| b[i].is_ascii_digit())
}
