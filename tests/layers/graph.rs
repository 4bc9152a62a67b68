//! The import graph of one crate's modules, read from its source.
//!
//! A module is a file: `a/b.rs` and `a/b/mod.rs` are `a::b`; the crate root (`lib.rs`,
//! `main.rs`) declares and re-exports, so it is left out. An edge is a path in a file's code
//! (comments left out) that names an item of another module: `crate::…`, `super::…`,
//! `self::…`, or a child module's name in a `use`. A name that a module re-exports
//! (`pub use x::Name`) leads to the module it comes from, so a re-export is not an edge of its
//! own. Tests are left out: they may use any module's fixtures.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use super::source::{files, outside_tests};

/// Module → the modules it imports from.
pub type Graph = BTreeMap<String, BTreeSet<String>>;

/// `src/a/b.rs` → `a::b`; `src/a/mod.rs` → `a`; the root → "".
fn module_of(src: &Path, file: &Path) -> String {
    let relative = file.strip_prefix(src).unwrap_or(file);
    let mut parts: Vec<String> = relative
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    if let Some(last) = parts.last_mut() {
        *last = last.trim_end_matches(".rs").to_owned();
    }
    if matches!(
        parts.last().map(String::as_str),
        Some("mod" | "lib" | "main")
    ) {
        parts.pop();
    }
    parts.join("::")
}

/// The text with line comments removed (a `//` inside a string is kept).
fn code(text: &str) -> String {
    text.lines()
        .map(|line| match super::source::comment_of(line) {
            Some(comment) => &line[..line.len() - comment.len()],
            None => line,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The paths of a `use` tree (`a::{b, c::{d, e as f}}`), each as its segments.
fn use_paths(tree: &str) -> Vec<Vec<String>> {
    fn expand(prefix: &[String], tree: &str, out: &mut Vec<Vec<String>>) {
        let tree = tree.trim();
        if let Some(open) = tree.find('{') {
            let head: Vec<String> = tree[..open]
                .split("::")
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(str::to_owned)
                .collect();
            let base: Vec<String> = prefix.iter().cloned().chain(head).collect();
            let inner = tree[open + 1..].trim_end().trim_end_matches('}');
            let (mut depth, mut start) = (0, 0);
            for (i, c) in inner.char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' => depth -= 1,
                    ',' if depth == 0 => {
                        expand(&base, &inner[start..i], out);
                        start = i + 1;
                    }
                    _ => {}
                }
            }
            expand(&base, &inner[start..], out);
        } else if !tree.is_empty() {
            let name = tree.split(" as ").next().unwrap_or(tree);
            let mut path = prefix.to_vec();
            path.extend(name.split("::").map(|s| s.trim().to_owned()));
            out.push(path);
        }
    }
    let mut out = Vec::new();
    expand(&[], tree, &mut out);
    out
}

/// One file's `use` statements: (is it a `pub` re-export, the tree).
fn uses(code: &str) -> Vec<(bool, String)> {
    let mut found = Vec::new();
    let mut rest = code;
    while let Some(at) = rest.find("use ") {
        let before = &rest[..at];
        let line_start = before.rfind('\n').map_or(0, |i| i + 1);
        let lead = before[line_start..].trim();
        let after = &rest[at + 4..];
        let statement = lead.is_empty() || lead.starts_with("pub");
        let end = after.find(';').unwrap_or(after.len());
        if statement && !before.ends_with(|c: char| c.is_alphanumeric() || c == '_') {
            found.push((lead.starts_with("pub"), after[..end].to_owned()));
            rest = &after[end..];
        } else {
            rest = after;
        }
    }
    found
}

/// The inline paths of `code` that start with `crate::`, `super::` or `self::`.
fn inline_paths(code: &str) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    for start in ["crate::", "super::", "self::"] {
        let mut rest = code;
        while let Some(at) = rest.find(start) {
            let boundary = !rest[..at].ends_with(|c: char| c.is_alphanumeric() || c == '_');
            let path: String = rest[at..]
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_' || *c == ':')
                .collect();
            if boundary && !path.ends_with("::") {
                out.push(path.split("::").map(str::to_owned).collect());
            }
            rest = &rest[at + start.len()..];
        }
    }
    out
}

/// `path`, written in module `at`, as absolute segments; none for another crate's path.
fn absolute(at: &str, path: &[String], modules: &BTreeSet<String>) -> Option<Vec<String>> {
    let mut here: Vec<String> = at
        .split("::")
        .filter(|s| !s.is_empty())
        .map(Into::into)
        .collect();
    let mut segments = path.iter().peekable();
    match segments.peek().map(|s| s.as_str()) {
        Some("crate") => {
            segments.next();
            here.clear();
        }
        Some("self") => {
            segments.next();
        }
        Some("super") => {
            while segments.peek().map(|s| s.as_str()) == Some("super") {
                segments.next();
                here.pop();
            }
        }
        Some(first) => {
            // A child module's name, in a `use`.
            let child = [at, first]
                .iter()
                .filter(|s| !s.is_empty())
                .cloned()
                .collect::<Vec<_>>();
            if !modules.contains(&child.join("::")) {
                return None;
            }
        }
        None => return None,
    }
    here.extend(segments.cloned());
    Some(here)
}

/// The module that defines the item `segments` name: its longest prefix that is a module,
/// followed through the re-exports of that module.
fn target(
    segments: &[String],
    modules: &BTreeSet<String>,
    exports: &BTreeMap<String, BTreeMap<String, Vec<String>>>,
    depth: usize,
) -> Option<String> {
    let found = (0..=segments.len())
        .rev()
        .map(|n| segments[..n].join("::"))
        .find(|m| modules.contains(m) || m.is_empty())?;
    let used = found.split("::").filter(|s| !s.is_empty()).count();
    if let (Some(name), true) = (segments.get(used), depth < 8) {
        if let Some(source) = exports.get(&found).and_then(|e| e.get(name)) {
            let mut next = source.clone();
            next.extend(segments[used + 1..].iter().cloned());
            return target(&next, modules, exports, depth + 1);
        }
    }
    Some(found)
}

/// The graph of one crate's modules (the root left out).
pub fn modules(src: &Path) -> Graph {
    let mut texts = BTreeMap::new();
    for file in files(src) {
        let name = module_of(src, &file);
        let text = if name.is_empty() {
            std::fs::read_to_string(&file).ok()
        } else {
            outside_tests(&file)
        };
        if let Some(text) = text {
            texts.insert(name, code(&text));
        }
    }
    let modules: BTreeSet<String> = texts.keys().cloned().collect();
    // Module → re-exported name → the absolute path it re-exports.
    let mut exports: BTreeMap<String, BTreeMap<String, Vec<String>>> = BTreeMap::new();
    for (module, text) in &texts {
        for (public, tree) in uses(text) {
            for path in use_paths(&tree).into_iter().filter(|_| public) {
                let alias = tree_alias(&tree, &path);
                if let Some(abs) = absolute(module, &path, &modules) {
                    exports
                        .entry(module.clone())
                        .or_default()
                        .insert(alias, abs);
                }
            }
        }
    }
    let mut graph = Graph::new();
    for (module, text) in texts.iter().filter(|(m, _)| !m.is_empty()) {
        let mut paths: Vec<Vec<String>> = uses(text)
            .into_iter()
            .filter(|(public, _)| !public)
            .flat_map(|(_, tree)| use_paths(&tree))
            .collect();
        paths.extend(inline_paths(text));
        let edges = graph.entry(module.clone()).or_default();
        for path in paths {
            let to = absolute(module, &path, &modules)
                .and_then(|abs| target(&abs, &modules, &exports, 0));
            if let Some(to) = to.filter(|to| to != module && !to.is_empty()) {
                edges.insert(to);
            }
        }
    }
    graph
}

/// The name a re-exported path is known by: its last segment (an `as` rename is rare enough
/// in this workspace to be taken as written).
fn tree_alias(_tree: &str, path: &[String]) -> String {
    path.last().cloned().unwrap_or_default()
}

/// One cycle of the graph, if it has any: the modules in order.
pub fn a_cycle(graph: &Graph) -> Option<Vec<String>> {
    fn walk(
        graph: &Graph,
        at: &str,
        path: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(from) = path.iter().position(|m| m == at) {
            return Some(path[from..].to_vec());
        }
        if !done.insert(at.to_owned()) {
            return None;
        }
        path.push(at.to_owned());
        for next in graph.get(at).into_iter().flatten() {
            if let Some(cycle) = walk(graph, next, path, done) {
                return Some(cycle);
            }
        }
        path.pop();
        None
    }
    let mut done = BTreeSet::new();
    graph
        .keys()
        .find_map(|start| walk(graph, start, &mut Vec::new(), &mut done))
}

/// The reading and the cycle search, on small inputs.
pub fn self_test() {
    assert_eq!(
        use_paths("crate::{a::B, c, d::{e, f as g}}"),
        [
            vec!["crate", "a", "B"],
            vec!["crate", "c"],
            vec!["crate", "d", "e"],
            vec!["crate", "d", "f"]
        ]
    );
    let modules: BTreeSet<String> = ["a", "a::b", "c"].iter().map(|s| (*s).to_owned()).collect();
    let path = |s: &str| s.split("::").map(str::to_owned).collect::<Vec<_>>();
    assert_eq!(
        absolute("a::b", &path("super::super::c::X"), &modules),
        Some(path("c::X"))
    );
    assert_eq!(
        absolute("a", &path("b::Y"), &modules),
        Some(path("a::b::Y"))
    );
    assert_eq!(absolute("a", &path("serde::Serialize"), &modules), None);
    let exports = BTreeMap::from([(
        "a".to_owned(),
        BTreeMap::from([("Y".to_owned(), path("a::b::Y"))]),
    )]);
    assert_eq!(
        target(&path("a::Y"), &modules, &exports, 0),
        Some("a::b".to_owned())
    );
    let graph: Graph = [("a", "b"), ("b", "c"), ("c", "a"), ("d", "a")]
        .into_iter()
        .map(|(from, to)| (from.to_owned(), BTreeSet::from([to.to_owned()])))
        .collect();
    assert_eq!(
        a_cycle(&graph),
        Some(vec!["a".into(), "b".into(), "c".into()])
    );
    let acyclic: Graph = [("a", "b"), ("b", "c"), ("d", "a")]
        .into_iter()
        .map(|(from, to)| (from.to_owned(), BTreeSet::from([to.to_owned()])))
        .collect();
    assert_eq!(a_cycle(&acyclic), None);
}
