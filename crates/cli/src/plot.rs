//! Line charts as self-contained SVG, for the figures `tollgate pace` and
//! the Doorman simulation draw: axes from zero with round ticks,
//! gridlines, axis titles with units, a legend and a title.
//!
//! A [`Figure`] stacks [`Chart`]s that share the width of the picture; each
//! chart draws its [`Series`] in order, so the last is on top.
//!
//! ```text
//! let rate = Chart::new("Rate", "time (s)", "ops/s")
//!     .series(Series::new("achieved", "#1f77b4", vec![(1.0, 980.0), (2.0, 1010.0)]))
//!     .series(Series::new("target", "#d62728", vec![(0.0, 1000.0), (2.0, 1000.0)]).dashed());
//! let svg = Figure::new("tollgate pace 1K").chart(rate).svg();
//! ```
//!
//! (The examples of this module are its unit tests: the command's crate
//! runs no doc tests.)
//!
//! # Implementation notes
//!
//! Ticks are "nice" numbers: the step is 1, 2 or 5 times a power of ten,
//! chosen so that at most the requested count of ticks spans the data, and
//! the axis runs from the first tick to the last. Tick values are computed
//! from integers (`i * mantissa`, then scaled by the power of ten) so that
//! `0.6` is not `0.6000000000000001`. Labels share one SI suffix per axis,
//! chosen from the largest tick.

use std::fmt::Write as _;

/// Width of a figure, in pixels.
const WIDTH: f64 = 900.0;
/// Height of one chart's panel, in pixels.
const PANEL: f64 = 280.0;
/// Space for the figure's title above the first chart.
const TITLE: f64 = 34.0;
/// Margins of a plot area inside its panel: left, right, top, bottom.
const MARGIN: (f64, f64, f64, f64) = (78.0, 24.0, 52.0, 50.0);
/// Most ticks per axis.
const TICKS: usize = 7;
/// Room above the highest point, as a share of the data's span.
const HEADROOM: f64 = 0.04;
/// Height of a line of a figure's notes, in pixels.
const NOTE_LINE: f64 = 15.0;
/// Series with at most this many points get a marker on each point.
const MARKERS: usize = 40;

/// One line of a chart.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Series {
    name: String,
    colour: String,
    points: Vec<(f64, f64)>,
    dashed: bool,
    /// Stroke width, in pixels.
    width: f64,
}

impl Series {
    /// A solid line through `points` (x, y), drawn in `colour` (any SVG
    /// colour) and named `name` in the legend. Points with a non-finite
    /// coordinate are skipped.
    pub(crate) fn new(name: &str, colour: &str, points: Vec<(f64, f64)>) -> Series {
        Series {
            name: name.to_owned(),
            colour: colour.to_owned(),
            points: points
                .into_iter()
                .filter(|(x, y)| x.is_finite() && y.is_finite())
                .collect(),
            dashed: false,
            width: 1.6,
        }
    }

    /// The same line, `width` pixels wide (1.6 unless set): a wide line
    /// drawn under a narrow one stays visible where they run together.
    pub(crate) fn width(mut self, width: f64) -> Series {
        self.width = width;
        self
    }

    /// The same line, dashed: for a reference such as a target or a
    /// capacity, which stays visible where another line runs along it.
    pub(crate) fn dashed(mut self) -> Series {
        self.dashed = true;
        self
    }
}

/// An instant marked on a chart's time axis: a dotted line with `label`
/// (a short number) at its top and `title` as its tooltip.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Mark {
    x: f64,
    label: String,
    title: String,
}

/// Events (time, what) as numbered marks: events closer than a sixtieth
/// of `span` to the first of a group share its mark, so that no two marks'
/// numbers overlap. Returns the marks and a key, a line per mark:
/// `3  120 s  dc lost its master; dc held an election`. The key lists at
/// most [`KEY_LINES`] marks and says how many more there are.
pub(crate) fn event_marks(events: &[(f64, String)], span: f64) -> (Vec<Mark>, Vec<String>) {
    let mut sorted: Vec<&(f64, String)> = events.iter().filter(|(t, _)| t.is_finite()).collect();
    sorted.sort_by(|a, b| a.0.total_cmp(&b.0));
    let gap = span.abs() / 60.0;
    let mut groups: Vec<(f64, Vec<&str>)> = Vec::new();
    for (t, what) in sorted {
        match groups.last_mut() {
            Some((first, whats)) if t - *first < gap => whats.push(what),
            _ => groups.push((*t, vec![what])),
        }
    }
    let marks = groups
        .iter()
        .enumerate()
        .map(|(i, (t, whats))| Mark {
            x: *t,
            label: (i + 1).to_string(),
            title: whats.join("\n"),
        })
        .collect();
    let mut key: Vec<String> = groups
        .iter()
        .take(KEY_LINES)
        .enumerate()
        .map(|(i, (t, whats))| {
            let mut line = format!("{}  {} s  {}", i + 1, label(*t, *t), whats[0]);
            if whats.len() > 1 {
                let _ = write!(
                    line,
                    " (and {} more: {})",
                    whats.len() - 1,
                    whats[1..].join("; ")
                );
            }
            truncate(&line, KEY_CHARS)
        })
        .collect();
    if groups.len() > KEY_LINES {
        key.push(format!("... and {} more marks", groups.len() - KEY_LINES));
    }
    (marks, key)
}

/// Most marks a key lists.
pub(crate) const KEY_LINES: usize = 60;
/// Most characters of a key line (the figure's width at its font size).
const KEY_CHARS: usize = 140;

/// `text` cut to `max` characters, ending in `...` when cut.
fn truncate(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        return text.to_owned();
    }
    let mut cut: String = text.chars().take(max.saturating_sub(3)).collect();
    cut.push_str("...");
    cut
}

/// One panel: axes, gridlines, a legend and its series.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Chart {
    title: String,
    x_title: String,
    y_title: String,
    series: Vec<Series>,
    marks: Vec<Mark>,
}

impl Chart {
    /// An empty chart with a title and the axes' titles (units included,
    /// e.g. `time (s)`).
    pub(crate) fn new(title: &str, x_title: &str, y_title: &str) -> Chart {
        Chart {
            title: title.to_owned(),
            x_title: x_title.to_owned(),
            y_title: y_title.to_owned(),
            series: Vec::new(),
            marks: Vec::new(),
        }
    }

    /// Marks instants on the x axis (events, see [`event_marks`]), drawn
    /// as thin dotted vertical lines under the series, numbered at the
    /// top; non-finite ones are skipped.
    pub(crate) fn marks(mut self, marks: Vec<Mark>) -> Chart {
        self.marks = marks.into_iter().filter(|m| m.x.is_finite()).collect();
        self
    }

    /// Adds a series, drawn over those added before.
    pub(crate) fn series(mut self, series: Series) -> Chart {
        self.series.push(series);
        self
    }

    /// The chart drawn in the panel whose top edge is at `top`.
    fn draw(&self, out: &mut String, top: f64) {
        let (ml, mr, mt, mb) = MARGIN;
        let (left, right) = (ml, WIDTH - mr);
        let (plot_top, bottom) = (top + mt, top + PANEL - mb);
        let all = || self.series.iter().flat_map(|s| s.points.iter());
        let x_hi = all().map(|p| p.0).fold(0.0, f64::max);
        let y_hi = all().map(|p| p.1).fold(0.0, f64::max);
        let x_lo = all().map(|p| p.0).fold(0.0, f64::min);
        let y_lo = all().map(|p| p.1).fold(0.0, f64::min);
        // Time runs to the end of the data, not to the next round tick.
        let mut xs = ticks(x_lo, x_hi, TICKS);
        let (x0, mut x1) = (xs[0], xs[xs.len() - 1]);
        if x_hi > x0 {
            x1 = x_hi;
            xs.retain(|&x| x <= x_hi * (1.0 + 1e-9));
        }
        // Headroom: the highest point stays off the top of the frame (a
        // capacity line at 500 would otherwise run along it).
        let ys = ticks(y_lo, y_hi + (y_hi - y_lo) * HEADROOM, TICKS);
        let (y0, y1) = (ys[0], ys[ys.len() - 1]);
        let px = |x: f64| left + (x - x0) / (x1 - x0) * (right - left);
        let py = |y: f64| bottom - (y.clamp(y0, y1) - y0) / (y1 - y0) * (bottom - plot_top);
        let title = escape(&self.title);
        let _ = writeln!(
            out,
            r#"<text x="{left}" y="{}" font-size="14" font-weight="bold">{title}</text>"#,
            top + 20.0
        );
        // Gridlines and tick labels.
        for &x in &xs {
            let _ = writeln!(
                out,
                r##"<line x1="{0:.1}" y1="{plot_top}" x2="{0:.1}" y2="{bottom}" stroke="#e0e0e0"/><text x="{0:.1}" y="{1}" text-anchor="middle">{2}</text>"##,
                px(x),
                bottom + 16.0,
                label(x, xs[xs.len() - 1])
            );
        }
        for &y in &ys {
            let _ = writeln!(
                out,
                r##"<line x1="{left}" y1="{0:.1}" x2="{right}" y2="{0:.1}" stroke="#e0e0e0"/><text x="{1}" y="{2:.1}" text-anchor="end">{3}</text>"##,
                py(y),
                left - 6.0,
                py(y) + 4.0,
                label(y, y1)
            );
        }
        // Axes, through zero where zero is on the chart.
        let ax = px(if x0 <= 0.0 && 0.0 <= x1 { 0.0 } else { x0 });
        let ay = py(if y0 <= 0.0 && 0.0 <= y1 { 0.0 } else { y0 });
        let _ = writeln!(
            out,
            r#"<line x1="{left}" y1="{ay:.1}" x2="{right}" y2="{ay:.1}" stroke="black"/><line x1="{ax:.1}" y1="{plot_top}" x2="{ax:.1}" y2="{bottom}" stroke="black"/>"#
        );
        let _ = writeln!(
            out,
            r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">{}</text>"#,
            (left + right) / 2.0,
            bottom + 38.0,
            escape(&self.x_title)
        );
        let (yx, yy) = (18.0, (plot_top + bottom) / 2.0);
        let _ = writeln!(
            out,
            r#"<text x="{yx}" y="{yy:.1}" text-anchor="middle" transform="rotate(-90 {yx} {yy:.1})">{}</text>"#,
            escape(&self.y_title)
        );
        // The marks, under the series: numbered, their events as tooltips.
        for m in self.marks.iter().filter(|m| x0 <= m.x && m.x <= x1) {
            let _ = writeln!(
                out,
                r##"<g><title>{title}</title><line x1="{0:.1}" y1="{plot_top}" x2="{0:.1}" y2="{bottom}" stroke="#ff7f0e" stroke-width="1" stroke-dasharray="2 3"/><text x="{0:.1}" y="{1:.1}" font-size="9" text-anchor="middle" fill="#c05000">{label}</text></g>"##,
                px(m.x),
                plot_top + 10.0,
                title = escape(&m.title),
                label = escape(&m.label),
            );
        }
        // The series, clipped to the plot area.
        for s in &self.series {
            let mut points = String::new();
            for &(x, y) in &s.points {
                let _ = write!(points, "{:.1},{:.1} ", px(x), py(y));
            }
            let dash = if s.dashed {
                r#" stroke-dasharray="7 5""#
            } else {
                ""
            };
            let _ = writeln!(
                out,
                r#"<polyline fill="none" stroke="{}" stroke-width="{}"{dash} points="{}"/>"#,
                escape(&s.colour),
                s.width,
                points.trim_end()
            );
            if s.points.len() <= MARKERS && !s.dashed {
                for &(x, y) in &s.points {
                    let _ = writeln!(
                        out,
                        r#"<circle cx="{:.1}" cy="{:.1}" r="2.5" fill="{}"/>"#,
                        px(x),
                        py(y),
                        escape(&s.colour)
                    );
                }
            }
        }
        // The legend, a row above the plot area's right end.
        let mut x = right;
        for s in self.series.iter().rev() {
            let width = 44.0 + 7.0 * s.name.chars().count() as f64;
            x -= width;
            let y = top + 40.0;
            let dash = if s.dashed {
                r#" stroke-dasharray="7 5""#
            } else {
                ""
            };
            let _ = writeln!(
                out,
                r#"<line x1="{x:.1}" y1="{:.1}" x2="{:.1}" y2="{:.1}" stroke="{}" stroke-width="2"{dash}/><text x="{:.1}" y="{y:.1}">{}</text>"#,
                y - 4.0,
                x + 22.0,
                y - 4.0,
                escape(&s.colour),
                x + 26.0,
                escape(&s.name)
            );
        }
    }
}

/// Charts stacked under one title: a whole picture.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Figure {
    title: String,
    charts: Vec<Chart>,
    /// Lines of text under the charts (a key to their marks).
    notes: Vec<String>,
}

impl Figure {
    /// An empty figure with a title.
    pub(crate) fn new(title: &str) -> Figure {
        Figure {
            title: title.to_owned(),
            charts: Vec::new(),
            notes: Vec::new(),
        }
    }

    /// Adds a chart below those added before.
    pub(crate) fn chart(mut self, chart: Chart) -> Figure {
        self.charts.push(chart);
        self
    }

    /// Adds lines of text under the charts, such as the key of
    /// [`event_marks`].
    pub(crate) fn notes(mut self, lines: Vec<String>) -> Figure {
        self.notes = lines;
        self
    }

    /// The figure as a self-contained SVG document.
    pub(crate) fn svg(&self) -> String {
        let charts = TITLE + PANEL * self.charts.len() as f64;
        let notes = if self.notes.is_empty() {
            0.0
        } else {
            NOTE_LINE * (self.notes.len() + 1) as f64
        };
        let height = charts + notes;
        let mut out = format!(
            r#"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" viewBox="0 0 {WIDTH} {height}" font-family="sans-serif" font-size="12">
<rect width="100%" height="100%" fill="white"/>
<text x="{}" y="22" font-size="16" font-weight="bold" text-anchor="middle">{}</text>
"#,
            WIDTH / 2.0,
            escape(&self.title)
        );
        for (i, chart) in self.charts.iter().enumerate() {
            chart.draw(&mut out, TITLE + PANEL * i as f64);
        }
        for (i, line) in self.notes.iter().enumerate() {
            let _ = writeln!(
                out,
                r#"<text x="{}" y="{:.1}" font-size="11">{}</text>"#,
                MARGIN.0,
                charts + NOTE_LINE * (i + 1) as f64,
                escape(line)
            );
        }
        out.push_str("</svg>\n");
        out
    }
}

/// Round tick values spanning `lo..=hi` and zero, at most `max` of them
/// (at least 2): the step is 1, 2 or 5 times a power of ten, the first
/// tick is at or below `lo` and the last at or above `hi`.
///
/// `ticks(0.0, 600.0, 7)` is `[0, 100, ..., 600]`; `ticks(0.0, 0.55, 7)`
/// is `[0, 0.1, ..., 0.6]`.
pub(crate) fn ticks(lo: f64, hi: f64, max: usize) -> Vec<f64> {
    let max = max.max(2);
    let (mut lo, mut hi) = (lo.min(0.0), hi.max(0.0));
    if !lo.is_finite() || !hi.is_finite() {
        (lo, hi) = (0.0, 1.0);
    }
    if hi - lo <= f64::MIN_POSITIVE {
        hi = lo + 1.0;
    }
    // The smallest nice step giving at most `max` ticks.
    let rough = (hi - lo) / (max - 1) as f64;
    let mut exponent = rough.log10().floor() as i32;
    loop {
        for mantissa in [1u64, 2, 5] {
            let at = |i: i64| -> f64 {
                let n = i as f64 * mantissa as f64;
                if exponent >= 0 {
                    n * 10f64.powi(exponent)
                } else {
                    n / 10f64.powi(-exponent)
                }
            };
            let step = at(1);
            // A hair of tolerance, so that 0.6 / 0.2 counts as 3.
            let first = (lo / step + 1e-9).floor() as i64;
            let last = (hi / step - 1e-9).ceil() as i64;
            if ((last - first + 1) as usize) <= max {
                return (first..=last).map(at).collect();
            }
        }
        exponent += 1;
    }
}

/// A tick label: `value` with the SI suffix that suits `scale` (the
/// axis's largest tick), trailing zeros trimmed: `0`, `0.25`, `500`,
/// `1500`, `15K`, `2.5M`. Numbers below ten thousand keep all their
/// digits.
///
pub(crate) fn label(value: f64, scale: f64) -> String {
    let (divisor, suffix) = match scale.abs() {
        s if s >= 1e12 => (1e12, "T"),
        s if s >= 1e9 => (1e9, "G"),
        s if s >= 1e6 => (1e6, "M"),
        s if s >= 1e4 => (1e3, "K"),
        _ => (1.0, ""),
    };
    let text = format!("{:.6}", value / divisor);
    let text = text.trim_end_matches('0').trim_end_matches('.');
    match text {
        "0" | "-0" => "0".to_owned(),
        t => format!("{t}{suffix}"),
    }
}

/// A unit for durations up to `max_ns` nanoseconds: the divisor from
/// nanoseconds and its name, so that an axis reads in `µs` rather than in
/// millions of `ns`.
///
/// `time_unit(2_500_000.0)` is `(1e6, "ms")`.
pub(crate) fn time_unit(max_ns: f64) -> (f64, &'static str) {
    match max_ns {
        n if n >= 1e9 => (1e9, "s"),
        n if n >= 1e6 => (1e6, "ms"),
        n if n >= 1e3 => (1e3, "µs"),
        _ => (1.0, "ns"),
    }
}

/// `text` with XML's special characters escaped.
fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_documented_examples_hold() {
        use super::{label, ticks, time_unit, Chart, Figure, Series};

        let rate = Chart::new("Rate", "time (s)", "ops/s")
            .series(Series::new(
                "achieved",
                "#1f77b4",
                vec![(1.0, 980.0), (2.0, 1010.0)],
            ))
            .series(Series::new("target", "#d62728", vec![(0.0, 1000.0), (2.0, 1000.0)]).dashed());
        let svg = Figure::new("tollgate pace 1K").chart(rate).svg();
        assert!(svg.starts_with("<svg"));
        assert!(svg.contains(">achieved</text>"));
        assert!(svg.contains(">1200</text>"), "round ticks");
        assert_eq!(
            ticks(0.0, 600.0, 7),
            [0.0, 100.0, 200.0, 300.0, 400.0, 500.0, 600.0]
        );
        assert_eq!(ticks(0.0, 0.55, 7), [0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6]);
        assert_eq!(label(0.0, 3e6), "0");
        assert_eq!(label(2.5e6, 3e6), "2.5M");
        assert_eq!(label(500.0, 1500.0), "500");
        assert_eq!(label(5000.0, 15000.0), "5K");
        assert_eq!(label(0.25, 1.0), "0.25");
        assert_eq!(time_unit(2_500_000.0), (1e6, "ms"));
    }

    use super::*;

    #[test]
    fn ticks_are_round_and_span_the_data_and_zero() {
        assert_eq!(
            ticks(0.0, 600.0, 7),
            [0.0, 100.0, 200.0, 300.0, 400.0, 500.0, 600.0]
        );
        assert_eq!(ticks(0.0, 3600.0, 7), [0.0, 1000.0, 2000.0, 3000.0, 4000.0]);
        assert_eq!(
            ticks(0.0, 550.0, 7),
            [0.0, 100.0, 200.0, 300.0, 400.0, 500.0, 600.0]
        );
        assert_eq!(ticks(0.0, 11e6, 7), [0.0, 2e6, 4e6, 6e6, 8e6, 10e6, 12e6]);
        assert_eq!(ticks(0.0, 4.8, 7), [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]);
        assert_eq!(ticks(0.0, 0.55, 7), [0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6]);
        assert_eq!(
            ticks(0.0, 0.0012, 7),
            [0.0, 0.0002, 0.0004, 0.0006, 0.0008, 0.001, 0.0012]
        );
        // Zero is always on the axis, negative values too.
        assert_eq!(
            ticks(200.0, 300.0, 7),
            [0.0, 50.0, 100.0, 150.0, 200.0, 250.0, 300.0]
        );
        assert_eq!(ticks(-3.0, 7.0, 7), [-4.0, -2.0, 0.0, 2.0, 4.0, 6.0, 8.0]);
        // Nothing to span, or nonsense: one unit.
        assert_eq!(ticks(0.0, 0.0, 7), [0.0, 0.2, 0.4, 0.6, 0.8, 1.0]);
        assert_eq!(ticks(0.0, f64::NAN, 7), [0.0, 0.2, 0.4, 0.6, 0.8, 1.0]);
        assert_eq!(ticks(0.0, 10.0, 0), [0.0, 10.0]);
    }

    #[test]
    fn labels_share_the_axis_suffix() {
        let labels: Vec<String> = ticks(0.0, 11e6, 7)
            .iter()
            .map(|&v| label(v, 12e6))
            .collect();
        assert_eq!(labels, ["0", "2M", "4M", "6M", "8M", "10M", "12M"]);
        assert_eq!(label(0.1 + 0.2, 1.0), "0.3");
        assert_eq!(label(1500.0, 1500.0), "1500");
        assert_eq!(label(15000.0, 15000.0), "15K");
        assert_eq!(label(-2.0, 8.0), "-2");
        assert_eq!(time_unit(999.0), (1.0, "ns"));
        assert_eq!(time_unit(1_000.0), (1e3, "µs"));
        assert_eq!(time_unit(3e9), (1e9, "s"));
    }

    #[test]
    fn a_figure_has_titles_ticks_gridlines_and_a_legend() {
        let svg = Figure::new("a <b> & c")
            .chart(
                Chart::new("Over time", "time (s)", "things (ops/s)")
                    .series(Series::new("has", "blue", vec![(0.0, 0.0), (600.0, 500.0)]))
                    .series(
                        Series::new("capacity", "red", vec![(0.0, 500.0), (600.0, 500.0)]).dashed(),
                    ),
            )
            .svg();
        assert!(svg.starts_with("<svg xmlns=\"http://www.w3.org/2000/svg\""));
        assert!(svg.ends_with("</svg>\n"));
        assert!(svg.contains(">a &lt;b&gt; &amp; c</text>"), "{svg}");
        assert!(svg.contains(">Over time</text>"));
        assert!(svg.contains(">time (s)</text>"));
        assert!(svg.contains(">things (ops/s)</text>"));
        for tick in ["0", "100", "200", "300", "400", "500", "600"] {
            assert!(svg.contains(&format!(">{tick}</text>")), "{tick}");
        }
        assert!(svg.contains(">has</text>"));
        assert!(svg.contains(">capacity</text>"));
        // Seven gridlines across time, seven up to 600 (headroom above the
        // capacity, which would otherwise lie on the frame), and the
        // dashed capacity drawn last.
        assert_eq!(svg.matches(r##"stroke="#e0e0e0""##).count(), 14);
        let has = svg.find(r#"<polyline fill="none" stroke="blue""#).unwrap();
        let capacity = svg
            .find(r#"<polyline fill="none" stroke="red" stroke-width="1.6" stroke-dasharray"#)
            .unwrap();
        assert!(capacity > has);
    }

    #[test]
    fn the_highest_point_stays_off_the_frame() {
        let chart = |top: f64| {
            Figure::new("f")
                .chart(Chart::new("c", "x", "y").series(Series::new(
                    "s",
                    "blue",
                    vec![(0.0, 0.0), (1.0, top)],
                )))
                .svg()
        };
        // 500 is a round tick: the axis runs on to 600.
        assert!(chart(500.0).contains(">600</text>"));
        // 480 leaves room under 500.
        let svg = chart(480.0);
        assert!(
            svg.contains(">500</text>") && !svg.contains(">600</text>"),
            "{svg}"
        );
    }

    #[test]
    fn events_are_numbered_grouped_and_keyed() {
        let events = vec![
            (100.0, "dc lost its master".to_owned()),
            (0.0, "etcd down for 60 s".to_owned()),
            (102.0, "dc held an election".to_owned()),
            (300.0, "root capacity set to <400>".to_owned()),
        ];
        let (marks, key) = event_marks(&events, 600.0);
        assert_eq!(marks.len(), 3, "100 s and 102 s share a mark: {marks:?}");
        assert_eq!(
            key,
            [
                "1  0 s  etcd down for 60 s",
                "2  100 s  dc lost its master (and 1 more: dc held an election)",
                "3  300 s  root capacity set to <400>",
            ]
        );
        let svg = Figure::new("f")
            .chart(
                Chart::new("c", "t", "y")
                    .series(Series::new("s", "blue", vec![(0.0, 1.0), (600.0, 1.0)]))
                    .marks(marks),
            )
            .notes(key)
            .svg();
        assert!(svg.contains("<title>dc lost its master\ndc held an election</title>"));
        assert!(svg.contains(r##"fill="#c05000">2</text>"##));
        assert!(svg.contains(">3  300 s  root capacity set to &lt;400&gt;</text>"));
        // Many events: the key says how many marks it leaves out.
        let many: Vec<(f64, String)> = (0..100)
            .map(|i| (f64::from(i) * 60.0, format!("e{i}")))
            .collect();
        let (marks, key) = event_marks(&many, 3000.0);
        assert_eq!(marks.len(), 100);
        assert_eq!(key.len(), KEY_LINES + 1);
        assert_eq!(key[KEY_LINES], "... and 40 more marks");
    }

    #[test]
    fn non_finite_points_are_skipped() {
        let s = Series::new(
            "s",
            "black",
            vec![(0.0, 1.0), (1.0, f64::NAN), (f64::INFINITY, 2.0)],
        );
        assert_eq!(s.points, [(0.0, 1.0)]);
    }
}
