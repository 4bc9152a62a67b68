//! Where each step of a drawing goes: a layered layout of a directed acyclic graph.
//!
//! Each step sits in the layer of its longest path from the roots, so every arrow points
//! down. A layer wider than [`MAX_ACROSS`] steps wraps onto further rows, so that a drawing
//! of 50 steps keeps its text at a readable size on a laptop. Within a layer, steps are
//! ordered by the mean place of their parents (the barycentre heuristic), which keeps arrows
//! short and crossings few. The graph is small (at most the steps of one configuration), so
//! one pass down is enough; the order of the first layer is the configuration's.
//!
//! The layout is total: an edge that would close a cycle, which validation refuses, is left
//! out of the layering rather than looping.

/// The most steps side by side on one row.
pub(crate) const MAX_ACROSS: usize = 4;

/// A step's place: its row from the top, and its slot from the left, in step widths (a row
/// narrower than the widest is centred, so slots can be halves).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Place {
    pub(crate) row: usize,
    pub(crate) slot: f64,
}

/// The places of `n` steps, by index, with the drawing's size in rows and slots.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Layout {
    pub(crate) places: Vec<Place>,
    pub(crate) rows: usize,
    pub(crate) across: usize,
}

/// Lays out `n` steps joined by `edges` (from, to), steps indexed in the order they should
/// appear when nothing else decides. Edges naming a step out of range are ignored.
pub(crate) fn layout(n: usize, edges: &[(usize, usize)]) -> Layout {
    let edges: Vec<(usize, usize)> = edges
        .iter()
        .copied()
        .filter(|(a, b)| *a < n && *b < n && a != b)
        .collect();
    let layer = layers(n, &edges);
    let depth = layer.iter().copied().max().map_or(0, |d| d + 1);
    let mut by_layer: Vec<Vec<usize>> = vec![Vec::new(); depth];
    for (step, l) in layer.iter().enumerate() {
        by_layer[*l].push(step);
    }
    let widest = by_layer.iter().map(Vec::len).max().unwrap_or(0);
    let across = widest.clamp(1, MAX_ACROSS);
    let mut places = vec![Place { row: 0, slot: 0.0 }; n];
    let mut placed = vec![false; n];
    let mut row = 0;
    for steps in &mut by_layer {
        // The mean slot of each step's parents placed so far; none keeps the given order.
        let centre = |step: usize| -> Option<f64> {
            let slots: Vec<f64> = edges
                .iter()
                .filter(|(_, to)| *to == step)
                .filter(|(from, _)| placed[*from])
                .map(|(from, _)| places[*from].slot)
                .collect();
            (!slots.is_empty()).then(|| slots.iter().sum::<f64>() / slots.len() as f64)
        };
        let mut keyed: Vec<(f64, usize)> = steps
            .iter()
            .enumerate()
            .map(|(i, s)| (centre(*s).unwrap_or(i as f64), *s))
            .collect();
        keyed.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
        for chunk in keyed.chunks(across) {
            let offset = (across - chunk.len()) as f64 / 2.0;
            for (i, (_, step)) in chunk.iter().enumerate() {
                places[*step] = Place {
                    row,
                    slot: offset + i as f64,
                };
                placed[*step] = true;
            }
            row += 1;
        }
    }
    Layout {
        places,
        rows: row,
        across,
    }
}

/// Each step's layer: 0 for a step nothing leads to, else one more than its deepest parent
/// (Kahn's order, so each step is settled once its parents are). Steps on a cycle go below
/// every settled one.
fn layers(n: usize, edges: &[(usize, usize)]) -> Vec<usize> {
    let mut parents_left = vec![0usize; n];
    for (_, to) in edges {
        parents_left[*to] += 1;
    }
    let mut layer = vec![0usize; n];
    let mut ready: std::collections::VecDeque<usize> =
        (0..n).filter(|s| parents_left[*s] == 0).collect();
    let mut settled = vec![false; n];
    while let Some(step) = ready.pop_front() {
        settled[step] = true;
        for (_, to) in edges.iter().filter(|(from, _)| *from == step) {
            layer[*to] = layer[*to].max(layer[step] + 1);
            parents_left[*to] -= 1;
            if parents_left[*to] == 0 {
                ready.push_back(*to);
            }
        }
    }
    let below = layer.iter().copied().max().map_or(0, |d| d + 1);
    for (step, done) in settled.iter().enumerate() {
        if !done {
            layer[step] = below;
        }
    }
    layer
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    #[test]
    fn a_chain_goes_down_one_row_a_step() {
        let l = layout(3, &[(0, 1), (1, 2)]);
        assert_eq!(l.rows, 3);
        assert_eq!(l.across, 1);
        assert_eq!(
            l.places.iter().map(|p| p.row).collect::<Vec<_>>(),
            [0, 1, 2]
        );
    }

    #[test]
    fn a_step_sits_below_its_deepest_parent() {
        // 0 → 1 → 2, and 0 → 2 directly: 2 is below 1.
        let l = layout(3, &[(0, 1), (0, 2), (1, 2)]);
        assert_eq!(l.places[2].row, 2);
    }

    #[test]
    fn a_branch_puts_its_children_side_by_side_under_it() {
        let l = layout(3, &[(0, 1), (0, 2)]);
        assert_eq!((l.rows, l.across), (2, 2));
        assert_eq!(l.places[0].slot, 0.5, "centred over its two children");
        assert_ne!(l.places[1].slot, l.places[2].slot);
    }

    #[test]
    fn a_wide_layer_wraps_onto_more_rows() {
        let edges: Vec<(usize, usize)> = (1..=9).map(|c| (0, c)).collect();
        let l = layout(10, &edges);
        assert_eq!(l.across, MAX_ACROSS);
        assert_eq!(l.rows, 1 + 3, "nine children in rows of four");
    }

    #[test]
    fn a_cycle_or_a_bad_edge_does_not_hang_or_panic() {
        let l = layout(3, &[(0, 1), (1, 2), (2, 1), (7, 0), (1, 1)]);
        assert_eq!(l.places.len(), 3);
        assert!(layout(0, &[]).places.is_empty());
    }

    proptest! {
        /// Any edges: every step gets a distinct place within the drawing, and every edge of
        /// an acyclic graph (edges from lower to higher index) points down.
        #[test]
        fn places_are_distinct_and_arrows_point_down(
            n in 1usize..60,
            raw in proptest::collection::vec((0usize..60, 0usize..60), 0..200),
        ) {
            let edges: Vec<(usize, usize)> = raw
                .into_iter()
                .map(|(a, b)| ((a % n).min(b % n), (a % n).max(b % n)))
                .collect();
            let l = layout(n, &edges);
            let mut seen = std::collections::HashSet::new();
            for p in &l.places {
                prop_assert!(p.row < l.rows);
                prop_assert!(p.slot >= 0.0 && p.slot < l.across as f64);
                prop_assert!(seen.insert((p.row, (p.slot * 2.0) as i64)));
            }
            for (a, b) in edges.iter().filter(|(a, b)| a != b) {
                prop_assert!(l.places[*a].row < l.places[*b].row);
            }
        }
    }
}
