//! The step graph as SVG text: a box a step, shaped by its kind, and a curve an arrow, each
//! labelled; every text of a configuration escaped.

use std::fmt::Write as _;

use domain::flow::steps::StepState;

use super::layout::{self, Layout};
use super::{words, Arrow, Kind, Marks, Node, StepGraph};

/// A step's box.
const WIDTH: f64 = 220.0;
const HEIGHT: f64 = 92.0;
/// Between boxes, across and down.
const GAP_ACROSS: f64 = 28.0;
const GAP_DOWN: f64 = 60.0;
/// Around the drawing.
const MARGIN: f64 = 12.0;
/// The characters of a line that fit a box at the drawing's font size.
const LINE: usize = 29;
/// The characters of an arrow's label.
const LABEL: usize = 34;

/// Where the layout put each step, in pixels.
struct Canvas {
    laid: Layout,
}

impl Canvas {
    /// The top left corner of step `i`'s box.
    fn corner(&self, i: usize) -> (f64, f64) {
        let p = self.laid.places[i];
        (
            MARGIN + p.slot * (WIDTH + GAP_ACROSS),
            MARGIN + p.row as f64 * (HEIGHT + GAP_DOWN),
        )
    }

    fn size(&self) -> (f64, f64) {
        let across = self.laid.across as f64;
        let rows = self.laid.rows as f64;
        (
            2.0 * MARGIN + across * WIDTH + (across - 1.0).max(0.0) * GAP_ACROSS,
            2.0 * MARGIN + rows * HEIGHT + (rows - 1.0).max(0.0) * GAP_DOWN,
        )
    }
}

/// The drawing of `graph` with its `marks` (`lines`: the two lines they add to each step).
pub(super) fn render(
    graph: &StepGraph,
    title: &str,
    marks: &Marks<'_>,
    lines: &[[String; 2]],
) -> String {
    let edges: Vec<(usize, usize)> = graph.arrows.iter().map(|a| (a.from, a.to)).collect();
    let canvas = Canvas {
        laid: layout::layout(graph.nodes.len(), &edges),
    };
    let (width, height) = canvas.size();
    let reached = |i: usize| match marks {
        Marks::Path(records) => records.contains_key(&graph.nodes[i].id),
        _ => true,
    };
    let mut svg = String::new();
    let _ = write!(
        svg,
        "<svg xmlns=\"http://www.w3.org/2000/svg\" class=\"graph\" role=\"img\" \
         aria-labelledby=\"graph-title\" width=\"{width:.0}\" height=\"{height:.0}\" \
         viewBox=\"0 0 {width:.0} {height:.0}\"><title id=\"graph-title\">{}</title>\
         <defs><marker id=\"arrow\" viewBox=\"0 0 10 10\" refX=\"10\" refY=\"5\" \
         markerWidth=\"7\" markerHeight=\"7\" orient=\"auto-start-reverse\">\
         <path d=\"M0,0 L10,5 L0,10 z\" class=\"arrowhead\"/></marker></defs>",
        words::escape(title)
    );
    for a in &graph.arrows {
        let taken = reached(a.from) && reached(a.to);
        edge(
            &mut svg,
            a,
            canvas.corner(a.from),
            canvas.corner(a.to),
            taken,
        );
    }
    for (i, n) in graph.nodes.iter().enumerate() {
        let state = match marks {
            Marks::Path(records) => match records.get(&n.id).map(|r| &r.state) {
                None => " unreached",
                Some(StepState::Waiting { .. }) => " waiting",
                Some(StepState::Failed { .. }) => " failed",
                Some(_) => " reached",
            },
            _ => "",
        };
        node(&mut svg, n, canvas.corner(i), state, &lines[i]);
    }
    svg.push_str("</svg>");
    svg
}

/// An arrow from the bottom of one box to the top of another, with its label halfway.
fn edge(svg: &mut String, a: &Arrow, from: (f64, f64), to: (f64, f64), taken: bool) {
    let (x1, y1) = (from.0 + WIDTH / 2.0, from.1 + HEIGHT);
    let (x2, y2) = (to.0 + WIDTH / 2.0, to.1);
    let bend = ((y2 - y1) / 2.0).max(20.0);
    let class = if taken { "edge" } else { "edge untaken" };
    let _ = write!(
        svg,
        "<path class=\"{class}\" d=\"M{x1:.1},{y1:.1} C{x1:.1},{:.1} {x2:.1},{:.1} \
         {x2:.1},{y2:.1}\" marker-end=\"url(#arrow)\"/>",
        y1 + bend,
        y2 - bend
    );
    if a.label.is_empty() {
        return;
    }
    let text = words::clip(&a.label, LABEL);
    let w = text.chars().count() as f64 * 6.6 + 10.0;
    let (mx, my) = ((x1 + x2) / 2.0, (y1 + y2) / 2.0);
    let _ = write!(
        svg,
        "<g class=\"edge-label\"><title>{}</title><rect x=\"{:.1}\" y=\"{:.1}\" \
         width=\"{w:.1}\" height=\"18\" rx=\"3\"/><text x=\"{mx:.1}\" y=\"{:.1}\" \
         text-anchor=\"middle\">{}</text></g>",
        words::escape(&a.label),
        mx - w / 2.0,
        my - 9.0,
        my + 4.5,
        words::escape(&text)
    );
}

/// A step's box at `(x, y)` with its four lines: kind and id, what it does, its marks.
fn node(svg: &mut String, n: &Node, (x, y): (f64, f64), state: &str, marks: &[String; 2]) {
    let _ = write!(
        svg,
        "<g class=\"step {}{state}\"><title>{}: {}</title>{}",
        n.kind.class(),
        words::escape(&format!("{} {}", n.kind.word(), n.id)),
        words::escape(&n.what),
        shape(n.kind, x, y)
    );
    let head = format!("{} · {}", n.kind.word(), n.id);
    let texts = [
        (head.as_str(), "head"),
        (n.what.as_str(), "what"),
        (marks[0].as_str(), "mark"),
        (marks[1].as_str(), "mark"),
    ];
    for (k, (text, class)) in texts.iter().enumerate() {
        if text.is_empty() {
            continue;
        }
        let _ = write!(
            svg,
            "<text class=\"{class}\" x=\"{:.1}\" y=\"{:.1}\">{}</text>",
            x + 14.0,
            y + 22.0 + 19.0 * k as f64,
            words::escape(&words::clip(text, LINE))
        );
    }
    svg.push_str("</g>");
}

/// A step's outline at `(x, y)`, by kind.
fn shape(kind: Kind, x: f64, y: f64) -> String {
    match kind {
        Kind::Card => {
            format!(
                "<rect x=\"{x:.1}\" y=\"{y:.1}\" width=\"{WIDTH}\" height=\"{HEIGHT}\" rx=\"3\"/>"
            )
        }
        Kind::Wait | Kind::Listen => format!(
            "<rect x=\"{x:.1}\" y=\"{y:.1}\" width=\"{WIDTH}\" height=\"{HEIGHT}\" rx=\"{}\"/>",
            HEIGHT / 2.0 - 18.0
        ),
        Kind::Branch => {
            let (r, b, m) = (x + WIDTH, y + HEIGHT, y + HEIGHT / 2.0);
            format!(
                "<polygon points=\"{:.1},{y:.1} {:.1},{y:.1} {r:.1},{m:.1} {:.1},{b:.1} \
                 {:.1},{b:.1} {x:.1},{m:.1}\"/>",
                x + 10.0,
                r - 10.0,
                r - 10.0,
                x + 10.0
            )
        }
    }
}
