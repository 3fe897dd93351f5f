//! `tollgate pace --plot`: the interval lines as a picture of rate,
//! backlog and lateness over time.

use crate::plot::{time_unit, Chart, Figure, Series};

use super::report::{callers, Line, Summary};

/// Most interval lines kept for the picture.
const KEEP: usize = 4096;

/// The interval lines, thinned to at most [`KEEP`]: when full, every
/// other kept line is dropped and from then on only every other line is
/// kept, so a long run costs bounded memory and still covers its whole
/// length evenly.
#[derive(Debug, Default)]
pub(super) struct History {
    /// Each line, and whether any caller recorded lateness in it (a
    /// line without has no percentiles to draw).
    lines: Vec<(Line, bool)>,
    /// Keep one line in `stride`.
    stride: usize,
    /// Lines offered so far.
    seen: usize,
}

impl History {
    pub(super) fn push(&mut self, line: Line, lateness_recorded: bool) {
        self.stride = self.stride.max(1);
        if self.seen.is_multiple_of(self.stride) {
            if self.lines.len() == KEEP {
                let mut i = 0;
                self.lines.retain(|_| {
                    i += 1;
                    i % 2 == 1
                });
                self.stride *= 2;
            }
            if self.seen.is_multiple_of(self.stride) {
                self.lines.push((line, lateness_recorded));
            }
        }
        self.seen += 1;
    }

    /// The picture: achieved rate against the target, the backlog, and
    /// lateness percentiles per interval, over time.
    pub(super) fn svg(&self, summary: &Summary) -> String {
        let at = |f: &dyn Fn(&Line) -> f64| -> Vec<(f64, f64)> {
            self.lines
                .iter()
                .map(|(l, _)| (l.elapsed_s, f(l)))
                .collect()
        };
        let late = |f: &dyn Fn(&Line) -> f64| -> Vec<(f64, f64)> {
            self.lines
                .iter()
                .filter(|(_, recorded)| *recorded)
                .map(|(l, _)| (l.elapsed_s, f(l)))
                .collect()
        };
        let end = self
            .lines
            .last()
            .map_or(summary.elapsed_s, |(l, _)| l.elapsed_s);
        let rate = Chart::new("Rate per interval", "time since start (s)", "rate (ops/s)")
            .series(Series::new(
                "achieved",
                "#1f77b4",
                at(&|l| l.achieved_ops_per_s),
            ))
            .series(
                Series::new(
                    "target",
                    "#d62728",
                    vec![
                        (0.0, summary.target_ops_per_s),
                        (end, summary.target_ops_per_s),
                    ],
                )
                .dashed(),
            );
        let most_backlog = self
            .lines
            .iter()
            .map(|(l, _)| l.backlog_ns)
            .max()
            .unwrap_or(0);
        let (b_div, b_unit) = time_unit(most_backlog as f64);
        let backlog = Chart::new(
            "Backlog at the end of each interval: schedule time due and not taken",
            "time since start (s)",
            &format!("backlog ({b_unit})"),
        )
        .series(Series::new(
            "backlog",
            "#9467bd",
            at(&|l| l.backlog_ns as f64 / b_div),
        ));
        let most_late = self
            .lines
            .iter()
            .map(|(l, _)| l.lateness.max)
            .max()
            .unwrap_or(0);
        let (l_div, l_unit) = time_unit(most_late as f64);
        let lateness = Chart::new(
            "Lateness per interval: how late ops started after their schedule",
            "time since start (s)",
            &format!("lateness ({l_unit})"),
        )
        // Percentiles are often equal (to the histogram's precision), so
        // each stays visible over the one before: p99 wide, p50 narrow on
        // it, and the max dashed on top.
        .series(Series::new("p99", "#ff7f0e", late(&|l| l.lateness.p99 as f64 / l_div)).width(5.0))
        .series(Series::new(
            "p50",
            "#2ca02c",
            late(&|l| l.lateness.p50 as f64 / l_div),
        ))
        .series(Series::new("max", "#404040", late(&|l| l.lateness.max as f64 / l_div)).dashed());
        let mode = callers(summary);
        Figure::new(&format!(
            "tollgate pace {}: {} {mode}, {:.1} s, achieved/target {:.4}",
            summary.spec, summary.threads, summary.elapsed_s, summary.ratio
        ))
        .chart(rate)
        .chart(backlog)
        .chart(lateness)
        .svg()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pace::report::Lateness;

    fn line(t: usize) -> Line {
        Line {
            elapsed_s: t as f64,
            target_ops_per_s: 1000.0,
            achieved_ops_per_s: 990.0,
            ratio: 0.99,
            ops: 990,
            backlog_ns: 2_000_000,
            lateness: Lateness {
                p50: 1_000,
                p99: 250_000,
                max: 1_500_000,
                mean: 40_000,
            },
            stalled: false,
        }
    }

    #[test]
    fn equal_percentiles_and_max_all_stay_visible() {
        let mut h = History::default();
        for t in 1..4 {
            let mut l = line(t);
            l.lateness.p99 = l.lateness.max;
            l.lateness.p50 = l.lateness.max;
            h.push(l, true);
        }
        let summary = crate::pace::report::tests::summary();
        let svg = h.svg(&summary);
        let at = |needle: &str| {
            svg.find(needle)
                .unwrap_or_else(|| panic!("{needle} in {svg}"))
        };
        // Drawn in this order, each over the one before: p99 wide, p50
        // narrow, the max dashed (so the others show through its gaps).
        let p99 = at(r##"<polyline fill="none" stroke="#ff7f0e" stroke-width="5""##);
        let p50 = at(r##"<polyline fill="none" stroke="#2ca02c" stroke-width="1.6" points"##);
        let max = at(
            r##"<polyline fill="none" stroke="#404040" stroke-width="1.6" stroke-dasharray="7 5""##,
        );
        assert!(p99 < p50 && p50 < max, "{svg}");
    }

    #[test]
    fn a_long_run_is_thinned_evenly_to_a_bounded_history() {
        let mut h = History::default();
        for t in 0..KEEP {
            h.push(line(t), true);
        }
        assert_eq!(h.lines.len(), KEEP);
        h.push(line(KEEP), true);
        assert_eq!(h.lines.len(), KEEP / 2 + 1);
        assert_eq!(h.lines[1].0.elapsed_s, 2.0);
        assert_eq!(h.lines[KEEP / 2].0.elapsed_s, KEEP as f64);
        for t in KEEP + 1..10 * KEEP {
            h.push(line(t), true);
        }
        assert!(h.lines.len() <= KEEP);
        let gaps: Vec<f64> = h
            .lines
            .windows(2)
            .map(|w| w[1].0.elapsed_s - w[0].0.elapsed_s)
            .collect();
        assert!(gaps.iter().all(|&g| g == gaps[0]), "{gaps:?}");
    }
}
