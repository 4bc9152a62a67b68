//! A chart of daily totals, drawn as SVG on the server: cards published, completed and
//! dismissed as three lines told apart by their dash and their markers as well as their
//! colour, and the completion rate as bars below them.

use std::fmt::Write as _;

use chrono::NaiveDate;

/// One day of the chart.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Day {
    pub(crate) date: NaiveDate,
    pub(crate) published: u64,
    pub(crate) completed: u64,
    pub(crate) dismissed: u64,
}

impl Day {
    /// Completed ÷ published, when anything was published.
    pub(crate) fn rate(&self) -> Option<f64> {
        domain::stats::completion_rate(self.published, self.completed)
    }
}

const WIDTH: f64 = 720.0;
const LEFT: f64 = 56.0;
const RIGHT: f64 = 16.0;
const TOP: f64 = 16.0;
/// The counts' plot, then the rates' below it.
const COUNTS: f64 = 190.0;
const GAP: f64 = 44.0;
const RATES: f64 = 80.0;
const BOTTOM: f64 = 30.0;

/// The series: its name, its class (dash and colour), its marker.
const SERIES: [(&str, &str, Marker); 3] = [
    ("published", "published", Marker::Circle),
    ("completed", "completed", Marker::Square),
    ("dismissed", "dismissed", Marker::Triangle),
];

#[derive(Debug, Clone, Copy)]
enum Marker {
    Circle,
    Square,
    Triangle,
}

fn value(day: &Day, series: &str) -> u64 {
    match series {
        "published" => day.published,
        "completed" => day.completed,
        _ => day.dismissed,
    }
}

/// The smallest of 1, 2 or 5 times a power of ten that is at least `n` (at least 1).
fn ceiling(n: u64) -> u64 {
    let mut step = 1u64;
    loop {
        for m in [1, 2, 5] {
            let top = step.saturating_mul(m);
            if top >= n || top == u64::MAX {
                return top.max(1);
            }
        }
        step = step.saturating_mul(10);
    }
}

/// Where a day and a count go.
struct Plot {
    days: usize,
    /// The counts' axis ends here.
    top: u64,
}

impl Plot {
    fn x(&self, i: usize) -> f64 {
        let plot = WIDTH - LEFT - RIGHT;
        LEFT + plot * (i as f64 + 0.5) / self.days.max(1) as f64
    }

    fn y(&self, v: u64) -> f64 {
        TOP + COUNTS - COUNTS * (v as f64 / self.top as f64)
    }

    /// The rates' baseline.
    fn base(&self) -> f64 {
        TOP + COUNTS + GAP + RATES
    }
}

/// The chart of `days` (oldest first, every day of the range), titled `title`.
pub(crate) fn draw(title: &str, days: &[Day]) -> String {
    let height = TOP + COUNTS + GAP + RATES + BOTTOM;
    let plot = Plot {
        days: days.len(),
        top: ceiling(
            days.iter()
                .map(|d| d.published.max(d.completed).max(d.dismissed))
                .max()
                .unwrap_or(0),
        ),
    };
    let totals = days.iter().fold((0u64, 0u64, 0u64), |(p, c, d), day| {
        (
            p.saturating_add(day.published),
            c.saturating_add(day.completed),
            d.saturating_add(day.dismissed),
        )
    });
    let rate = domain::stats::completion_rate(totals.0, totals.1).map_or_else(
        || "no rate".to_owned(),
        |r| format!("{:.0}% completed", r * 100.0),
    );
    let mut svg = String::new();
    let _ = write!(
        svg,
        "<svg xmlns=\"http://www.w3.org/2000/svg\" class=\"chart\" role=\"img\" \
         aria-labelledby=\"chart-title chart-desc\" width=\"{WIDTH}\" height=\"{height}\" \
         viewBox=\"0 0 {WIDTH} {height}\"><title id=\"chart-title\">{}</title>\
         <desc id=\"chart-desc\">Over {} days: {} published, {} completed, {} dismissed; \
         {rate}. The table beside it has each day's numbers.</desc>",
        crate::console::graph::words::escape(title),
        days.len(),
        totals.0,
        totals.1,
        totals.2
    );
    counts(&mut svg, &plot, days);
    rates(&mut svg, &plot, days);
    dates(&mut svg, &plot, days);
    svg.push_str("</svg>");
    svg
}

/// The counts' axis (0, half and the top, with grid lines) and a line a series.
fn counts(svg: &mut String, plot: &Plot, days: &[Day]) {
    for v in [0, plot.top / 2, plot.top] {
        let _ = write!(
            svg,
            "<line class=\"grid\" x1=\"{LEFT}\" x2=\"{:.1}\" y1=\"{y:.1}\" y2=\"{y:.1}\"/>\
             <text class=\"axis\" x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\">{v}</text>",
            WIDTH - RIGHT,
            LEFT - 6.0,
            plot.y(v) + 4.0,
            y = plot.y(v)
        );
    }
    for (name, class, marker) in SERIES {
        let points: Vec<String> = days
            .iter()
            .enumerate()
            .map(|(i, d)| format!("{:.1},{:.1}", plot.x(i), plot.y(value(d, name))))
            .collect();
        let _ = write!(
            svg,
            "<g class=\"series {class}\"><polyline points=\"{}\"/>",
            points.join(" ")
        );
        for (i, d) in days.iter().enumerate() {
            svg.push_str(&mark(marker, plot.x(i), plot.y(value(d, name))));
        }
        svg.push_str("</g>");
    }
}

/// The rates: a bar a day with something published, 0 to 100%.
fn rates(svg: &mut String, plot: &Plot, days: &[Day]) {
    let base = plot.base();
    let _ = write!(
        svg,
        "<text class=\"axis\" x=\"{LEFT}\" y=\"{:.1}\">Completion rate</text>\
         <line class=\"grid\" x1=\"{LEFT}\" x2=\"{:.1}\" y1=\"{base:.1}\" y2=\"{base:.1}\"/>\
         <text class=\"axis\" x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\">100%</text>\
         <text class=\"axis\" x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\">0%</text>",
        base - RATES - 8.0,
        WIDTH - RIGHT,
        LEFT - 6.0,
        base - RATES + 4.0,
        LEFT - 6.0,
        base + 4.0
    );
    let bar = ((WIDTH - LEFT - RIGHT) / days.len().max(1) as f64 * 0.7).max(1.0);
    for (i, d) in days.iter().enumerate() {
        if let Some(r) = d.rate() {
            let h = RATES * r.clamp(0.0, 1.0);
            let _ = write!(
                svg,
                "<rect class=\"rate\" x=\"{:.1}\" y=\"{:.1}\" width=\"{bar:.1}\" \
                 height=\"{h:.1}\"/>",
                plot.x(i) - bar / 2.0,
                base - h
            );
        }
    }
}

/// The dates under the chart: the first, the middle and the last.
fn dates(svg: &mut String, plot: &Plot, days: &[Day]) {
    let mut labelled: Vec<usize> = vec![0, days.len() / 2, days.len().saturating_sub(1)];
    labelled.dedup();
    for i in labelled.into_iter().filter(|i| *i < days.len()) {
        let _ = write!(
            svg,
            "<text class=\"axis\" x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{}</text>",
            plot.x(i),
            plot.base() + 20.0,
            days[i].date.format("%Y-%m-%d")
        );
    }
}

fn mark(marker: Marker, x: f64, y: f64) -> String {
    match marker {
        Marker::Circle => format!("<circle cx=\"{x:.1}\" cy=\"{y:.1}\" r=\"3.5\"/>"),
        Marker::Square => format!(
            "<rect x=\"{:.1}\" y=\"{:.1}\" width=\"7\" height=\"7\"/>",
            x - 3.5,
            y - 3.5
        ),
        Marker::Triangle => format!(
            "<polygon points=\"{x:.1},{:.1} {:.1},{:.1} {:.1},{:.1}\"/>",
            y - 4.5,
            x + 4.5,
            y + 3.5,
            x - 4.5,
            y + 3.5
        ),
    }
}

/// The legend, as HTML beside the chart: each series' name with a sample of its line.
pub(crate) fn legend() -> String {
    let mut out = String::from("<ul class=\"legend\">");
    for (name, class, marker) in SERIES {
        let _ = write!(
            out,
            "<li><svg xmlns=\"http://www.w3.org/2000/svg\" width=\"36\" height=\"12\" \
             aria-hidden=\"true\"><g class=\"series {class}\"><polyline points=\"2,6 34,6\"/>{}\
             </g></svg> cards {name}</li>",
            mark(marker, 18.0, 6.0)
        );
    }
    out.push_str(
        "<li><svg xmlns=\"http://www.w3.org/2000/svg\" width=\"36\" height=\"12\" \
         aria-hidden=\"true\"><rect class=\"rate\" x=\"12\" y=\"1\" width=\"12\" height=\"10\"/>\
         </svg> completion rate</li></ul>",
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn day(d: u32, published: u64, completed: u64, dismissed: u64) -> Day {
        Day {
            date: NaiveDate::from_ymd_opt(2026, 11, d).expect("date"),
            published,
            completed,
            dismissed,
        }
    }

    #[test]
    fn a_week_draws_three_lines_and_a_bar_a_day_with_something_published() {
        let days: Vec<Day> = (1..=7).map(|d| day(d, 10, u64::from(d), 1)).collect();
        let svg = draw("Welcome", &days);
        assert_eq!(svg.matches("<polyline").count(), 3);
        assert_eq!(svg.matches("class=\"rate\"").count(), 7);
        let summary = "Over 7 days: 70 published, 28 completed, 7 dismissed; 40% completed";
        assert!(svg.contains(summary));
        assert!(svg.contains(">2026-11-01<") && svg.contains(">2026-11-07<"));
    }

    #[test]
    fn empty_and_huge_ranges_do_not_panic() {
        assert!(draw("none", &[]).contains("Over 0 days"));
        let big = [day(1, u64::MAX, u64::MAX, 0), day(2, 0, 0, 0)];
        assert!(draw("big", &big).contains("<polyline"));
        assert_eq!(ceiling(0), 1);
        assert_eq!(ceiling(7), 10);
        assert_eq!(ceiling(11), 20);
        assert_eq!(ceiling(u64::MAX), u64::MAX);
    }
}
