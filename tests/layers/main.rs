//! The layering rule of docs/architecture.md, checked on the source: within each crate, no
//! top-level module imports a module that imports it back, directly or through others; and no
//! source file is longer than 800 lines outside its tests.
//!
//! A module's imports are the `crate::` paths in its files (comments left out): `crate::x::…`
//! names module `x`, and a name re-exported at the crate root (`pub use x::{Name, …}` in
//! `lib.rs`) names the module it comes from. `super::` inside a top-level module stays inside
//! it, so it is not an edge. Tests are left out (`tests.rs`, `*_tests.rs`, and an inline
//! `#[cfg(test)] mod tests` at the end of a file): they may use any module's fixtures.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

type Graph = BTreeMap<String, BTreeSet<String>>;

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The Rust files under `dir`, recursively.
fn files(dir: &Path) -> Vec<PathBuf> {
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
    found
}

/// The text with line comments (`//`, `///`, `//!`) removed; string literals are kept, which
/// is harmless here (none holds `crate::`).
fn code(text: &str) -> String {
    text.lines()
        .map(|line| match line.find("//") {
            Some(at) if !line[..at].contains('"') => &line[..at],
            _ => line,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The first segment of each path after `crate::` in `text`, following `crate::{a, b::c}`
/// groups (nested ones too).
fn crate_paths(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(at) = rest.find("crate::") {
        let after = &rest[at + "crate::".len()..];
        if let Some(group) = after.strip_prefix('{') {
            let mut depth = 1;
            let mut item = String::new();
            let mut items = Vec::new();
            for c in group.chars() {
                match c {
                    '{' => depth += 1,
                    '}' => {
                        depth -= 1;
                        if depth == 0 {
                            break;
                        }
                    }
                    ',' if depth == 1 => items.push(std::mem::take(&mut item)),
                    _ if depth == 1 => item.push(c),
                    _ => {}
                }
            }
            items.push(item);
            out.extend(items.iter().filter_map(|i| first_segment(i)));
        } else if let Some(name) = first_segment(after) {
            out.push(name);
        }
        rest = after;
    }
    out
}

fn first_segment(path: &str) -> Option<String> {
    let name: String = path
        .trim()
        .chars()
        .take_while(|c| c.is_alphanumeric() || *c == '_')
        .collect();
    (!name.is_empty()).then_some(name)
}

/// Names re-exported at the root of a crate: name → module (`pub use module::{A, B}`).
fn root_exports(root: &str) -> BTreeMap<String, String> {
    let mut exports = BTreeMap::new();
    let root = code(root);
    let mut rest = root.as_str();
    while let Some(at) = rest.find("pub use ") {
        let after = &rest[at + "pub use ".len()..];
        let end = after.find(';').unwrap_or(after.len());
        let statement = &after[..end];
        if let Some((module, names)) = statement.split_once("::") {
            let names = names.trim().trim_start_matches('{').trim_end_matches('}');
            for name in names.split(',') {
                let name = name.trim().rsplit("::").next().unwrap_or("").trim();
                if !name.is_empty() {
                    exports.insert(name.to_owned(), module.trim().to_owned());
                }
            }
        }
        rest = &after[end..];
    }
    exports
}

/// The graph of one crate's top-level modules.
fn graph(src: &Path) -> Graph {
    let root_file = ["lib.rs", "main.rs"]
        .iter()
        .map(|f| src.join(f))
        .find(|p| p.exists());
    let root = root_file
        .as_ref()
        .and_then(|p| std::fs::read_to_string(p).ok())
        .unwrap_or_default();
    let exports = root_exports(&root);
    let mut graph = Graph::new();
    for file in files(src) {
        let relative = file.strip_prefix(src).unwrap_or(&file);
        let mut parts = relative.components();
        let Some(first) = parts.next() else { continue };
        let first = first.as_os_str().to_string_lossy();
        let module = first.trim_end_matches(".rs").to_owned();
        if module == "lib" || module == "main" {
            continue;
        }
        let Some(text) = outside_tests(&file) else {
            continue;
        };
        let edges = graph.entry(module.clone()).or_default();
        for name in crate_paths(&code(&text)) {
            let target = exports.get(&name).cloned().unwrap_or(name);
            if target != module {
                edges.insert(target);
            }
        }
    }
    // Only edges to modules of this crate.
    let modules: BTreeSet<String> = graph.keys().cloned().collect();
    for edges in graph.values_mut() {
        edges.retain(|m| modules.contains(m));
    }
    graph
}

/// A cycle through `start`, if any: the modules in order.
fn cycle_from(graph: &Graph, start: &str) -> Option<Vec<String>> {
    fn walk(
        graph: &Graph,
        start: &str,
        at: &str,
        path: &mut Vec<String>,
        seen: &mut BTreeSet<String>,
    ) -> bool {
        for next in graph.get(at).into_iter().flatten() {
            if next == start {
                return true;
            }
            if seen.insert(next.clone()) {
                path.push(next.clone());
                if walk(graph, start, next, path, seen) {
                    return true;
                }
                path.pop();
            }
        }
        false
    }
    let mut path = vec![start.to_owned()];
    let mut seen = BTreeSet::new();
    walk(graph, start, start, &mut path, &mut seen).then_some(path)
}

/// Each crate of the workspace with a `src` folder: its name and that folder.
fn crate_sources() -> Vec<(String, PathBuf)> {
    let crates = workspace().join("crates");
    std::fs::read_dir(&crates)
        .expect("crates/")
        .flatten()
        .map(|entry| {
            let name = entry.file_name().to_string_lossy().into_owned();
            (name, entry.path().join("src"))
        })
        .filter(|(_, src)| src.is_dir())
        .collect()
}

/// The text of a source file before its inline test module (`#[cfg(test)] mod tests` at its
/// end); none for a file of tests (`tests.rs`, `*_tests.rs`).
fn outside_tests(file: &Path) -> Option<String> {
    let name = file.file_name().unwrap_or_default().to_string_lossy();
    if name == "tests.rs" || name.ends_with("_tests.rs") {
        return None;
    }
    let mut text = std::fs::read_to_string(file).unwrap_or_default();
    if let Some(at) = text.find("#[cfg(test)]\nmod tests {") {
        text.truncate(at);
    }
    Some(text)
}

#[test]
fn no_crate_has_an_import_cycle_between_its_top_level_modules() {
    let mut cycles = Vec::new();
    let mut checked = 0;
    for (name, src) in crate_sources() {
        let graph = graph(&src);
        checked += graph.len();
        for module in graph.keys() {
            if let Some(cycle) = cycle_from(&graph, module) {
                cycles.push(format!("{name}: {} -> {module}", cycle.join(" -> ")));
            }
        }
    }
    assert!(checked > 40, "the crates' modules were found ({checked})");
    assert!(cycles.is_empty(), "import cycles:\n{}", cycles.join("\n"));
}

/// The longest a source file may be, its tests left out as for the import check.
const MOST_LINES: usize = 800;

#[test]
fn no_source_file_is_longer_than_800_lines_outside_its_tests() {
    let mut long = Vec::new();
    let mut checked = 0;
    for (_, src) in crate_sources() {
        for file in files(&src) {
            let Some(text) = outside_tests(&file) else {
                continue;
            };
            checked += 1;
            let lines = text.lines().count();
            if lines > MOST_LINES {
                long.push(format!("{}: {lines}", file.display()));
            }
        }
    }
    assert!(checked > 100, "the crates' files were found ({checked})");
    assert!(
        long.is_empty(),
        "files over {MOST_LINES} lines:\n{}",
        long.join("\n")
    );
}

#[test]
fn the_check_sees_a_cycle_and_the_paths_it_is_made_of() {
    let dir = std::env::temp_dir().join(format!("layers-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let (code, tests) = (dir.join("code.rs"), dir.join("code_tests.rs"));
    for file in [&code, &tests] {
        std::fs::write(file, "a\nb\n#[cfg(test)]\nmod tests {\nc\n}\n").expect("write");
    }
    assert_eq!(outside_tests(&code).map(|t| t.lines().count()), Some(2));
    assert_eq!(outside_tests(&tests), None);
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(
        crate_paths("use crate::{a::B, c, d::{e, f}};\nlet x = crate::g::h();"),
        ["a", "c", "d", "g"]
    );
    let graph: Graph = [("a", "b"), ("b", "c"), ("c", "a"), ("d", "a")]
        .into_iter()
        .map(|(from, to)| (from.to_owned(), BTreeSet::from([to.to_owned()])))
        .collect();
    assert_eq!(
        cycle_from(&graph, "a"),
        Some(vec!["a".into(), "b".into(), "c".into()])
    );
    assert_eq!(cycle_from(&graph, "d"), None);
    assert_eq!(
        root_exports("pub use error::{DomainError, StorageError};\npub use time::Clock;")
            .get("Clock")
            .map(String::as_str),
        Some("time")
    );
}
