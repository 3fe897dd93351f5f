//! A run's samples and figures, and their CSV and SVG.

use std::fmt::Write as _;

use super::{CAPACITY, LEARNING};

/// One sample: what the chart plots.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Sample {
    /// Seconds since the start.
    pub t: u64,
    /// The capacity available at the root: its configured capacity while
    /// the root job has a master, else 0 (the drop in the design doc's
    /// chart during a root crash).
    pub capacity: f64,
    /// Sum of the clients' wants.
    pub wants: f64,
    /// Sum of the clients' unexpired grants.
    pub has: f64,
}

/// A finished run and its figures.
#[derive(Debug, Clone)]
pub struct Report {
    /// The scenario run.
    pub scenario: u32,
    /// The seed used.
    pub seed: u64,
    /// One sample per second.
    pub samples: Vec<Sample>,
    /// Mean of `has / capacity` after the first learning mode, over the
    /// samples with capacity available (the root job has a master).
    pub mean_handed_out: f64,
    /// Mean of `has` over the configured capacity after the first learning
    /// mode, over all samples (root outages count as capacity not handed
    /// out).
    pub mean_handed_out_all: f64,
    /// Samples (after the first learning mode) with `has` above the
    /// configured capacity.
    pub shortfall_samples: usize,
    /// Largest `has` over the configured capacity after the first learning
    /// mode.
    pub max_overshoot: f64,
    /// Mean `has` over the configured capacity, over the shortfall samples
    /// (0 without any).
    pub mean_overshoot: f64,
}

impl Report {
    /// The figures of a run's samples, counted from the end of the first
    /// learning mode.
    pub(super) fn new(scenario: u32, seed: u64, samples: Vec<Sample>) -> Report {
        let settled: Vec<&Sample> = samples.iter().filter(|s| s.t >= LEARNING).collect();
        // Folded from +0.0: an empty `sum` of floats is -0.0.
        let mean = |v: &[f64]| v.iter().fold(0.0, |a, b| a + b) / v.len().max(1) as f64;
        let available: Vec<f64> = settled
            .iter()
            .filter(|s| s.capacity > 0.0)
            .map(|s| s.has / s.capacity)
            .collect();
        let fraction: Vec<f64> = settled.iter().map(|s| s.has / CAPACITY).collect();
        let over: Vec<f64> = fraction
            .iter()
            .copied()
            .filter(|&f| f > 1.0 + 1e-9)
            .collect();
        let max_overshoot = fraction.iter().copied().fold(0.0, f64::max);
        let mean_overshoot = mean(&over);
        Report {
            scenario,
            seed,
            mean_handed_out: mean(&available),
            mean_handed_out_all: mean(&fraction),
            samples,
            shortfall_samples: over.len(),
            max_overshoot,
            mean_overshoot,
        }
    }
    /// The samples as CSV: `t,capacity,total_wants,total_has`.
    pub fn csv(&self) -> String {
        let mut out = String::from("t,capacity,total_wants,total_has\n");
        for s in &self.samples {
            let _ = writeln!(out, "{},{},{:.3},{:.3}", s.t, s.capacity, s.wants, s.has);
        }
        out
    }

    /// A line chart of capacity (red), total wants (green) and total has
    /// (blue) over time, as SVG.
    pub fn svg(&self) -> String {
        let (w, h, m) = (900.0, 400.0, 50.0);
        let t_max = self.samples.last().map_or(1, |s| s.t).max(1) as f64;
        // Wants may grow far past the capacity (scenario 7 adds 100 at a
        // time); the axis stops at twice the capacity or the most handed
        // out, and wants above it run along the top.
        let top = |f: &dyn Fn(&Sample) -> f64| self.samples.iter().map(f).fold(1.0, f64::max);
        let y_max = (top(&|s| s.capacity.max(s.wants).max(s.has)) * 1.1)
            .min((2.0 * CAPACITY).max(top(&|s| s.has) * 1.1));
        let x = |t: u64| m + (t as f64 / t_max) * (w - 2.0 * m);
        let y = |v: f64| h - m - (v.min(y_max) / y_max) * (h - 2.0 * m);
        let line = |f: &dyn Fn(&Sample) -> f64, colour: &str| {
            let mut d = String::new();
            for s in &self.samples {
                let _ = write!(d, "{:.1},{:.1} ", x(s.t), y(f(s)));
            }
            format!(r#"<polyline fill="none" stroke="{colour}" stroke-width="1.2" points="{d}"/>"#)
        };
        let mut svg = format!(
            r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-family="sans-serif" font-size="12">
<rect width="100%" height="100%" fill="white"/>
<text x="{m}" y="20">scenario {} (seed {}): capacity (red), total wants (green{clipped}), total has (blue)</text>
<line x1="{m}" y1="{b}" x2="{r}" y2="{b}" stroke="black"/>
<line x1="{m}" y1="{m}" x2="{m}" y2="{b}" stroke="black"/>
<text x="{m}" y="{lb}">0</text><text x="{r}" y="{lb}" text-anchor="end">{t_max} s</text>
<text x="5" y="{m}">{y_max:.0}</text>
"#,
            self.scenario,
            self.seed,
            clipped = if top(&|s| s.wants) > y_max {
                format!(", up to {:.0} off the chart", top(&|s| s.wants))
            } else {
                String::new()
            },
            b = h - m,
            r = w - m,
            lb = h - m + 15.0,
        );
        svg.push_str(&line(&|s| s.capacity, "red"));
        svg.push('\n');
        svg.push_str(&line(&|s| s.wants, "green"));
        svg.push('\n');
        svg.push_str(&line(&|s| s.has, "blue"));
        svg.push_str("\n</svg>\n");
        svg
    }
}
