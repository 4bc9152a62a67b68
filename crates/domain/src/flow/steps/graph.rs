//! The step graph's rules: every step reachable from `initialSteps`, no cycle, and the
//! ancestors a step relies on present on every path to it.

use std::collections::{BTreeMap, BTreeSet, HashSet, VecDeque};

use crate::flow::problems::{Path, Problems};

/// Which list of a step an edge comes from, so a problem names that list.
#[derive(Debug, Clone, Copy)]
pub(super) enum Site<'a> {
    /// `next`.
    Next,
    /// `properties.on.<outcome>`.
    On(&'a str),
    /// `properties.conditions[i].next`.
    Condition(usize),
    /// `properties.otherwise`.
    Otherwise,
}

/// An edge of the step graph, to a step that exists.
#[derive(Debug, Clone, Copy)]
pub(super) struct Edge<'a> {
    pub(super) target: &'a str,
    pub(super) site: Site<'a>,
}

/// A claim that `ancestor` precedes `step` on every path to it, with the problem to report
/// when it does not.
#[derive(Debug, Clone)]
pub(super) struct Ancestry<'a> {
    pub(super) step: &'a str,
    pub(super) ancestor: &'a str,
    pub(super) field: String,
    pub(super) message: String,
}

/// The graph: each step's edges.
pub(super) type Graph<'a> = BTreeMap<&'a str, Vec<Edge<'a>>>;

fn report_cycle(p: &mut Problems, steps_path: &Path<'_>, from: &str, edge: &Edge<'_>) {
    let step = steps_path.key(from);
    let props = step.key("properties");
    let field = match edge.site {
        Site::Next => step.key("next").to_string(),
        Site::On(key) => props.key("on").key(key).to_string(),
        Site::Condition(i) => {
            let conditions = props.key("conditions");
            let rule = conditions.index(i);
            rule.key("next").to_string()
        }
        Site::Otherwise => props.key("otherwise").to_string(),
    };
    let message = format!(
        "`{from}` → `{}` closes a cycle; steps must form a directed acyclic graph",
        edge.target
    );
    p.add_field(field, message);
}

/// Every step reachable from the roots, and no cycle (an iterative depth-first search with
/// colours, so a deep graph cannot exhaust the stack). Reports each problem; true when the
/// graph has no cycle.
pub(super) fn reachability_and_cycles(
    p: &mut Problems,
    graph: &Graph<'_>,
    roots: &[&str],
    steps_path: &Path<'_>,
) -> bool {
    #[derive(Clone, Copy, PartialEq)]
    enum Colour {
        White,
        Grey,
        Black,
    }
    let mut colour: BTreeMap<&str, Colour> = graph.keys().map(|k| (*k, Colour::White)).collect();
    let mut reported = HashSet::new();
    for root in roots {
        if colour.get(root) != Some(&Colour::White) {
            continue;
        }
        // Stack of (node, index of the next edge to follow).
        let mut stack: Vec<(&str, usize)> = vec![(root, 0)];
        colour.insert(root, Colour::Grey);
        while let Some((node, index)) = stack.last_mut() {
            let from = *node;
            let Some(edge) = graph.get(from).and_then(|edges| edges.get(*index)) else {
                colour.insert(from, Colour::Black);
                stack.pop();
                continue;
            };
            *index += 1;
            match colour.get(edge.target).copied() {
                Some(Colour::White) => {
                    colour.insert(edge.target, Colour::Grey);
                    stack.push((edge.target, 0));
                }
                Some(Colour::Grey) if reported.insert((from, edge.target)) => {
                    report_cycle(p, steps_path, from, edge);
                }
                _ => {}
            }
        }
    }
    for (id, c) in &colour {
        if *c == Colour::White {
            p.add(&steps_path.key(id), "is not reachable from initialSteps");
        }
    }
    reported.is_empty()
}

/// For each reachable step, the steps on every path from the roots to it (itself included):
/// its dominators. The graph must have no cycle; steps are taken in topological order, so
/// each step's parents are done before it.
fn dominators<'a>(graph: &Graph<'a>, roots: &[&'a str]) -> BTreeMap<&'a str, BTreeSet<&'a str>> {
    let mut reachable: BTreeSet<&str> = BTreeSet::new();
    let mut queue: VecDeque<&str> = roots.iter().copied().collect();
    while let Some(node) = queue.pop_front() {
        if reachable.insert(node) {
            let edges = graph.get(node).map(Vec::as_slice).unwrap_or_default();
            queue.extend(edges.iter().map(|e| e.target));
        }
    }
    let mut parents: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
    for node in &reachable {
        for edge in graph.get(node).map(Vec::as_slice).unwrap_or_default() {
            parents.entry(edge.target).or_default().insert(node);
        }
    }
    let mut waiting: BTreeMap<&str, usize> = reachable
        .iter()
        .map(|n| (*n, parents.get(n).map_or(0, BTreeSet::len)))
        .collect();
    let mut ready: VecDeque<&str> = waiting
        .iter()
        .filter(|(_, count)| **count == 0)
        .map(|(n, _)| *n)
        .collect();
    let mut out: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
    while let Some(node) = ready.pop_front() {
        // A root is reached from outside the graph too, so only itself is on every path.
        let mut own: BTreeSet<&str> = if roots.contains(&node) {
            BTreeSet::new()
        } else {
            let mut sets = parents
                .get(node)
                .into_iter()
                .flatten()
                .filter_map(|parent| out.get(parent));
            let first = sets.next().cloned().unwrap_or_default();
            sets.fold(first, |acc, set| acc.intersection(set).copied().collect())
        };
        own.insert(node);
        out.insert(node, own);
        // Once per child, as `parents` counts each parent once however many edges it has.
        let children: BTreeSet<&str> = graph
            .get(node)
            .into_iter()
            .flatten()
            .map(|e| e.target)
            .collect();
        for child in children {
            if let Some(count) = waiting.get_mut(child) {
                *count = count.saturating_sub(1);
                if *count == 0 {
                    ready.push_back(child);
                }
            }
        }
    }
    out
}

/// Reports each claim whose ancestor is not on every path to its step. Steps no path reaches
/// are skipped: that they are unreachable is reported already.
pub(super) fn check_ancestry(
    p: &mut Problems,
    graph: &Graph<'_>,
    roots: &[&str],
    claims: &[Ancestry<'_>],
) {
    if claims.is_empty() {
        return;
    }
    let dominators = dominators(graph, roots);
    for claim in claims {
        let Some(on_every_path) = dominators.get(claim.step) else {
            continue;
        };
        if claim.ancestor == claim.step || !on_every_path.contains(claim.ancestor) {
            p.add_field(claim.field.clone(), claim.message.clone());
        }
    }
}
