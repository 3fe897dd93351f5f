//! A run's samples and figures, and their CSV.

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
    pub samples_over_capacity: usize,
    /// Largest `has` over the configured capacity after the first learning
    /// mode.
    pub max_has_over_capacity: f64,
    /// Mean `has` over the configured capacity, over the samples over capacity
    /// (0 without any).
    pub mean_has_over_capacity_when_over: f64,
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
        let max_has_over_capacity = fraction.iter().copied().fold(0.0, f64::max);
        let mean_has_over_capacity_when_over = mean(&over);
        Report {
            scenario,
            seed,
            mean_handed_out: mean(&available),
            mean_handed_out_all: mean(&fraction),
            samples,
            samples_over_capacity: over.len(),
            max_has_over_capacity,
            mean_has_over_capacity_when_over,
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
}
