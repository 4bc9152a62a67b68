//! The house rules of docs/architecture.md (Reading the code), checked on the source of every
//! crate under `crates/`:
//! - no import cycle between two modules of a crate, directly or through others;
//! - no function over 80 lines outside tests, but for the named declarative tables;
//! - no source file over 600 lines outside its tests;
//! - no line over 100 characters, tests and benches included;
//! - no comment that names a commit or a calendar date (those live in git and in
//!   docs/benchmarks.md).

mod graph;
mod source;

use source::{crate_sources, files, outside_tests, workspace};

/// The most lines a function may have outside tests.
const MOST_FUNCTION_LINES: usize = 80;
/// The most lines a source file may have outside its tests.
const MOST_FILE_LINES: usize = 600;
/// The longest a line may be (rustfmt's `max_width`).
const MOST_LINE_CHARS: usize = 100;

/// Declarative tables, longer than a function should be because splitting them would scatter
/// one list (docs/architecture.md names them): `file:function`.
const TABLES: [&str; 2] = [
    // The OpenAPI document's hand-written schemas, one entry a schema.
    "api-actix/src/schemas.rs:schemas",
    // The metrics' families, one registration a family.
    "api-actix/src/metrics.rs:new",
];

/// `path` relative to `crates/`, with `/` separators.
fn shown(path: &std::path::Path) -> String {
    let crates = workspace().join("crates");
    path.strip_prefix(&crates)
        .unwrap_or(path)
        .to_string_lossy()
        .replace('\\', "/")
}

/// Fails with `what` and the places found, when there are any.
fn none(what: &str, found: &[String]) {
    assert!(found.is_empty(), "{what}:\n{}", found.join("\n"));
}

#[test]
fn no_crate_has_an_import_cycle_between_two_of_its_modules() {
    let mut cycles = Vec::new();
    let (mut checked, mut edges) = (0, 0);
    for (name, src) in crate_sources() {
        let graph = graph::modules(&src);
        checked += graph.len();
        edges += graph.values().map(|e| e.len()).sum::<usize>();
        if let Some(cycle) = graph::a_cycle(&graph) {
            cycles.push(format!("{name}: {}", cycle.join(" -> ")));
        }
    }
    assert!(checked > 150, "the crates' modules were found ({checked})");
    assert!(edges > 400, "the imports between them were read ({edges})");
    assert!(cycles.is_empty(), "import cycles:\n{}", cycles.join("\n"));
}

#[test]
fn no_function_is_longer_than_80_lines_outside_tests() {
    let mut report = Vec::new();
    for (_, src) in crate_sources() {
        for file in files(&src) {
            let Some(text) = outside_tests(&file) else {
                continue;
            };
            for (name, lines) in source::functions(&text) {
                let key = format!("{}:{name}", shown(&file));
                if lines > MOST_FUNCTION_LINES && !TABLES.contains(&key.as_str()) {
                    report.push(format!("{key} {lines}"));
                }
            }
        }
    }
    none(
        "functions over 80 lines (cut them into named steps)",
        &report,
    );
}

#[test]
fn no_source_file_is_longer_than_600_lines_outside_its_tests() {
    let mut report = Vec::new();
    let mut checked = 0;
    for (_, src) in crate_sources() {
        for file in files(&src) {
            let Some(text) = outside_tests(&file) else {
                continue;
            };
            checked += 1;
            let lines = text.lines().count();
            if lines > MOST_FILE_LINES {
                report.push(format!("{} {lines}", shown(&file)));
            }
        }
    }
    assert!(checked > 100, "the crates' files were found ({checked})");
    none("files over 600 lines (cut them by concept)", &report);
}

#[test]
fn no_line_in_crates_is_longer_than_100_characters() {
    let mut long = Vec::new();
    for file in files(&workspace().join("crates")) {
        let text = std::fs::read_to_string(&file).unwrap_or_default();
        for (n, line) in text.lines().enumerate() {
            if line.chars().count() > MOST_LINE_CHARS {
                long.push(format!("{}:{}", shown(&file), n + 1));
            }
        }
    }
    assert!(
        long.is_empty(),
        "lines over 100 characters:\n{}",
        long.join("\n")
    );
}

#[test]
fn no_comment_in_crates_names_a_commit_or_a_date() {
    let mut dated = Vec::new();
    for file in files(&workspace().join("crates")) {
        let text = std::fs::read_to_string(&file).unwrap_or_default();
        for (n, line) in text.lines().enumerate() {
            if let Some(comment) = source::comment_of(line) {
                if source::names_a_commit_or_date(comment) {
                    dated.push(format!("{}:{}: {}", shown(&file), n + 1, line.trim()));
                }
            }
        }
    }
    assert!(
        dated.is_empty(),
        "comments naming a commit or a date:\n{}",
        dated.join("\n")
    );
}

#[test]
fn the_checks_see_what_they_look_for() {
    let text = "fn short() {\n    a();\n}\n\npub(crate) async fn long(\n    x: u8,\n) -> u8 {\n\
                \x20   b();\n    c();\n}\n\nfn declared(x: u8);\n";
    assert_eq!(
        source::functions(text),
        [("short".to_owned(), 3), ("long".to_owned(), 6)]
    );
    assert_eq!(
        source::comment_of("let x = \"// no\"; // yes"),
        Some("// yes")
    );
    assert_eq!(source::comment_of("let x = \"a // b\";"), None);
    assert!(source::names_a_commit_or_date(
        "// since 07b562e the loop batches"
    ));
    assert!(source::names_a_commit_or_date("// measured on 2026-12-02"));
    assert!(!source::names_a_commit_or_date(
        "/// `2026-11-22T10:00:00.000Z`, in UTC"
    ));
    assert!(!source::names_a_commit_or_date(
        "// a deadline of 1000000 ms"
    ));
    assert_eq!(
        source::without_test_modules(
            "fn a() {}\n#[cfg(test)]\nmod t {\n    use super::a;\n}\nfn b() {}\n"
        ),
        "fn a() {}\nfn b() {}\n"
    );
    graph::self_test();
}
