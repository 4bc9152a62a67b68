//! The house rules of docs/architecture.md (Reading the code), checked on the source of every
//! crate under `crates/`:
//! - no import cycle between two modules of a crate, directly or through others;
//! - no function over 80 lines outside tests, but for the named declarative tables;
//! - no source file over 600 lines outside its tests;
//! - no line over 100 characters, tests and benches included;
//! - no comment that names a commit or a calendar date (those live in git and in
//!   docs/benchmarks.md).
//!
//! The function and file limits hold with a list of what is still to be cut
//! ([`STILL_LONG_FUNCTIONS`], [`STILL_LONG_FILES`]): an entry that is no longer long fails the
//! check, so the lists only shrink.

mod graph;
mod source;

use std::collections::BTreeSet;

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

/// Functions still over the limit, to be cut into named steps: `file:function`.
const STILL_LONG_FUNCTIONS: &[&str] = &[
    "adapters-diesel/src/cancel.rs:cancel_batch",
    "adapters-diesel/src/db/mod.rs:run_unreported",
    "adapters-diesel/src/instances.rs:advance",
    "adapters-diesel/src/prune.rs:prune",
    "adapters-diesel/src/prune.rs:prune_cards",
    "adapters-diesel/src/push_jobs.rs:claim",
    "adapters-diesel/src/push_jobs.rs:enqueue",
    "adapters-diesel/src/totals.rs:flush",
    "adapters-diesel/src/webhooks.rs:claim",
    "adapters-diesel/src/webhooks.rs:record",
    "adapters-push/src/validate.rs:certificate",
    "api-actix/src/console/credentials.rs:render",
    "api-actix/src/console/push.rs:render",
    "api-actix/src/console/runs.rs:runs_page",
    "api-actix/src/console/webhooks.rs:subscription_page",
    "api-actix/src/edge.rs:edge",
    "api-actix/src/openapi.rs:modify",
    "api-actix/src/openapi.rs:shared_responses",
    "api-actix/src/problem.rs:from",
    "api-actix/src/routes/bulk.rs:upload",
    "api-actix/src/routes/oauth.rs:token",
    "api-actix/src/schemas.rs:bodies",
    "domain/src/audience/filter.rs:parse_condition",
    "domain/src/contract.rs:list_filters",
    "domain/src/flow/config.rs:card_templates",
    "domain/src/flow/config.rs:check_view",
    "domain/src/flow/machine.rs:decide",
    "domain/src/push/mod.rs:parse",
    "domain/src/retention.rs:step",
    "domain/src/sdk/keys.rs:check_fields",
    "domain/src/trigger/batch.rs:batch_for",
    "domain/src/trigger/engine.rs:step",
    "domain/src/trigger/request.rs:card_options",
    "domain/src/trigger/request.rs:parse_drafts",
    "domain/src/trigger/request.rs:payload",
    "domain/src/trigger/request.rs:target",
    "domain/src/trigger/variables.rs:resolve",
    "server/src/app.rs:build",
    "server/src/config.rs:try_from",
    "server/src/main.rs:serve",
    "server/src/workers.rs:spawn_deliveries",
];

/// Files still over the limit, to be cut by concept.
const STILL_LONG_FILES: &[&str] = &[
    "adapters-diesel/src/audience.rs",
    "adapters-diesel/src/bulk.rs",
    "adapters-diesel/src/cancel.rs",
    "adapters-diesel/src/db/mod.rs",
    "adapters-diesel/src/instances.rs",
    "adapters-diesel/src/invocations.rs",
    "adapters-diesel/src/prune.rs",
    "adapters-diesel/src/webhooks.rs",
    "api-actix/src/routes/audience.rs",
    "api-actix/src/routes/trigger.rs",
    "api-actix/src/routes/webhooks.rs",
    "api-actix/src/schemas.rs",
    "domain/src/audience/mod.rs",
    "domain/src/bulk/service.rs",
    "domain/src/card.rs",
    "domain/src/contract.rs",
    "domain/src/flow/service.rs",
    "domain/src/push/send.rs",
    "domain/src/tenancy.rs",
    "domain/src/tenancy/service.rs",
    "domain/src/trigger/engine.rs",
    "domain/src/trigger/request.rs",
    "domain/src/trigger/service.rs",
    "server/src/config.rs",
    "server/src/main.rs",
    "server/src/workers.rs",
];

/// `path` relative to `crates/`, with `/` separators.
fn shown(path: &std::path::Path) -> String {
    let crates = workspace().join("crates");
    path.strip_prefix(&crates)
        .unwrap_or(path)
        .to_string_lossy()
        .replace('\\', "/")
}

/// Fails with `what` when `found` differs from `allowed`: what is over the limit and not
/// allowed, and what is allowed but no longer over it.
fn holds(what: &str, found: &BTreeSet<String>, allowed: &[&str], shown_found: &[String]) {
    let allowed: BTreeSet<String> = allowed.iter().map(|s| (*s).to_owned()).collect();
    let new: Vec<_> = found.difference(&allowed).collect();
    let done: Vec<_> = allowed.difference(found).collect();
    assert!(
        new.is_empty() && done.is_empty(),
        "{what}\nover the limit: {new:?}\nlisted but no longer over it (take them off the \
         list): {done:?}\nall found:\n{}",
        shown_found.join("\n")
    );
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
    let mut found = BTreeSet::new();
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
                    found.insert(key);
                }
            }
        }
    }
    holds(
        "functions over 80 lines",
        &found,
        STILL_LONG_FUNCTIONS,
        &report,
    );
}

#[test]
fn no_source_file_is_longer_than_600_lines_outside_its_tests() {
    let mut found = BTreeSet::new();
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
                found.insert(shown(&file));
            }
        }
    }
    assert!(checked > 100, "the crates' files were found ({checked})");
    holds("files over 600 lines", &found, STILL_LONG_FILES, &report);
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
