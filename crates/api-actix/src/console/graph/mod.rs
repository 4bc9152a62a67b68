//! A configuration's steps drawn as a graph (contract §21): SVG made here, with nothing from
//! another origin and no script, and the same steps as a table for readers who do not see it.
//!
//! - [`layout`]: where each step goes (a layered layout; no crate draws one as plain data
//!   with labels we can style, so it is written here: the graph is a validated DAG of at most
//!   a configuration's steps, and longest-path layering with barycentre ordering is enough);
//! - [`words`]: durations, dates and conditions said in words;
//! - this module: the steps and arrows of a [`Program`], marked with what a version did
//!   ([`Marks::Counts`]) or with one instance's path ([`Marks::Path`]), and drawn.

mod layout;
mod svg;
pub(crate) mod words;

use std::collections::{BTreeMap, HashSet, VecDeque};

use domain::flow::steps::run::Records;
use domain::flow::steps::{Program, StepKind, StepState};
use domain::stats::steps::StepTotals;
use maud::{html, Markup, PreEscaped};
use serde_json::Value;

/// What a step is, as the drawing tells them apart: by its shape and by its first line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Card,
    Wait,
    Listen,
    Branch,
}

impl Kind {
    fn word(self) -> &'static str {
        match self {
            Kind::Card => "Card",
            Kind::Wait => "Wait",
            Kind::Listen => "Wait for card",
            Kind::Branch => "Branch",
        }
    }

    fn class(self) -> &'static str {
        match self {
            Kind::Card => "card",
            Kind::Wait => "wait",
            Kind::Listen => "listen",
            Kind::Branch => "branch",
        }
    }
}

#[derive(Debug, Clone)]
struct Node {
    id: String,
    kind: Kind,
    /// What it does, in words.
    what: String,
}

#[derive(Debug, Clone)]
struct Arrow {
    from: usize,
    to: usize,
    /// The outcome or condition it follows; empty for plain `next`.
    label: String,
}

/// What a drawing marks on its steps.
pub(crate) enum Marks<'a> {
    /// Nothing: a draft, or a version that never ran.
    Nothing,
    /// What a version's instances did, by step id.
    Counts(&'a BTreeMap<String, StepTotals>),
    /// The path one instance took.
    Path(&'a Records),
}

/// A configuration's steps and the arrows between them, in the order a reader meets them.
#[derive(Debug, Clone)]
pub(crate) struct StepGraph {
    nodes: Vec<Node>,
    arrows: Vec<Arrow>,
}

impl StepGraph {
    /// The graph of `program`; `config` is the configuration it was parsed from, for the names
    /// of its card templates.
    pub(crate) fn of(program: &Program, config: &Value) -> StepGraph {
        let order = reading_order(program);
        let index: BTreeMap<&str, usize> = order
            .iter()
            .enumerate()
            .map(|(i, id)| (id.as_str(), i))
            .collect();
        let mut nodes = Vec::new();
        let mut arrows = Vec::new();
        for (i, id) in order.iter().enumerate() {
            let Some(step) = program.step(id) else {
                continue;
            };
            let mut arrow = |targets: &[String], label: String| {
                for t in targets {
                    if let Some(to) = index.get(t.as_str()) {
                        arrows.push(Arrow {
                            from: i,
                            to: *to,
                            label: label.clone(),
                        });
                    }
                }
            };
            let (kind, what) = match &step.kind {
                StepKind::CreateCard(c) => {
                    arrow(&c.next, String::new());
                    (Kind::Card, template_name(config, &c.card_template_id))
                }
                StepKind::Wait(w) => {
                    arrow(&w.next, String::new());
                    (Kind::Wait, words::wait(&w.until))
                }
                StepKind::WaitForCard(w) => {
                    for (key, next) in &w.on {
                        arrow(next, key.as_str().to_owned());
                    }
                    let what = format!(
                        "{}'s card, up to {}",
                        w.card_step,
                        words::duration(w.timeout)
                    );
                    (Kind::Listen, what)
                }
                StepKind::Branch(b) => {
                    for rule in &b.conditions {
                        arrow(
                            &rule.next,
                            format!("if {}", words::condition(&rule.condition)),
                        );
                    }
                    if let Some(otherwise) = &b.otherwise {
                        arrow(otherwise, "otherwise".into());
                    }
                    let what = match b.conditions.as_slice() {
                        [one] => format!("if {}", words::condition(&one.condition)),
                        many => format!("first of {} conditions", many.len()),
                    };
                    (Kind::Branch, what)
                }
            };
            nodes.push(Node {
                id: id.clone(),
                kind,
                what,
            });
        }
        StepGraph { nodes, arrows }
    }

    /// How many steps it has.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.nodes.len()
    }

    /// The drawing, then the same steps as a table; `title` names it for assistive
    /// technology.
    pub(crate) fn draw(&self, title: &str, marks: &Marks<'_>) -> Markup {
        let lines: Vec<[String; 2]> = self.nodes.iter().map(|n| mark_lines(n, marks)).collect();
        let svg = svg::render(self, title, marks, &lines);
        html! {
            figure.graph {
                div.scroll.graph-frame tabindex="0" role="region" aria-label=(title) {
                    (PreEscaped(svg)) }
                figcaption.muted { (self.nodes.len()) " steps; shapes: card (square corners), \
                    wait (round ends), wait for card (round ends, dashed), branch (pointed \
                    ends)." }
            }
            (self.table(&lines))
        }
    }

    /// The steps as a table, with what the marks say of each.
    fn table(&self, lines: &[[String; 2]]) -> Markup {
        html! {
            details.steps-table {
                summary { "The steps as a table" }
                div.scroll { table {
                    thead { tr {
                        th scope="col" { "Step" } th scope="col" { "Type" }
                        th scope="col" { "What it does" } th scope="col" { "Leads to" }
                        th scope="col" { "Seen" }
                    } }
                    tbody { @for (i, n) in self.nodes.iter().enumerate() { tr {
                        th scope="row" { code { (n.id) } }
                        td { (n.kind.word()) }
                        td { (n.what) }
                        td { (self.leads_to(i)) }
                        td { (lines[i].iter().filter(|l| !l.is_empty()).cloned()
                            .collect::<Vec<_>>().join("; ")) }
                    } } }
                } }
            }
        }
    }

    /// Where step `i` leads, in words: "thanks (if rating ≥ 4), sorry (otherwise)".
    fn leads_to(&self, i: usize) -> String {
        let parts: Vec<String> = self
            .arrows
            .iter()
            .filter(|a| a.from == i)
            .map(|a| {
                let to = &self.nodes[a.to].id;
                if a.label.is_empty() {
                    to.clone()
                } else {
                    format!("{to} ({})", a.label)
                }
            })
            .collect();
        if parts.is_empty() {
            "— (the path ends)".into()
        } else {
            parts.join(", ")
        }
    }
}

/// The steps from `initialSteps` outward, breadth first, each once; any step not reached so
/// (validation refuses such) after them, by id.
fn reading_order(program: &Program) -> Vec<String> {
    let mut order: Vec<String> = Vec::new();
    let mut seen: HashSet<&str> = HashSet::new();
    let mut queue: VecDeque<&str> = program.initial_steps.iter().map(String::as_str).collect();
    while let Some(id) = queue.pop_front() {
        let Some(step) = program.step(id) else {
            continue;
        };
        if !seen.insert(id) {
            continue;
        }
        order.push(id.to_owned());
        queue.extend(step.targets());
    }
    for id in program.steps.keys() {
        if !seen.contains(id.as_str()) {
            order.push(id.clone());
        }
    }
    order
}

/// A template's `metadata.cardName`, else its id.
fn template_name(config: &Value, template: &str) -> String {
    config
        .pointer(&format!(
            "/cardTemplates/{}/metadata/cardName",
            domain::json::pointer_token(template)
        ))
        .and_then(Value::as_str)
        .unwrap_or(template)
        .to_owned()
}

/// The two lines a step's marks add: counts, or where one instance is.
fn mark_lines(n: &Node, marks: &Marks<'_>) -> [String; 2] {
    match marks {
        Marks::Nothing => [String::new(), String::new()],
        Marks::Counts(counts) => {
            let zero = StepTotals::default();
            let c = counts.get(&n.id).unwrap_or(&zero);
            let first = match n.kind {
                Kind::Wait | Kind::Listen => {
                    format!("{} reached · {} waiting", c.reached, c.waiting)
                }
                Kind::Card | Kind::Branch => format!("{} reached", c.reached),
            };
            let outcomes: Vec<String> = c
                .outcomes
                .iter()
                .filter(|(name, _)| n.kind != Kind::Card || name.as_str() != "created")
                .map(|(name, k)| format!("{k} {name}"))
                .collect();
            [first, outcomes.join(" · ")]
        }
        Marks::Path(records) => match records.get(&n.id) {
            None => ["not reached".into(), String::new()],
            Some(r) => {
                let when = |t: &domain::Timestamp| t.format("%Y-%m-%d %H:%M UTC").to_string();
                match &r.state {
                    StepState::Waiting { deadline } => {
                        ["waiting".into(), format!("until {}", when(deadline))]
                    }
                    StepState::Done { outcome, .. } => [
                        format!("done: {}", outcome.as_str()),
                        r.finished.as_ref().map(when).unwrap_or_default(),
                    ],
                    StepState::Failed { error } => ["failed".into(), error.to_string()],
                    other => [other.status().as_str().to_owned(), String::new()],
                }
            }
        },
    }
}

#[cfg(test)]
mod tests;
