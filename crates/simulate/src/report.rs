//! A run's samples and figures, its CSV and its one-screen summary.

use std::fmt::Write as _;

/// Overshoots kept in a report (all are counted).
const OVERSHOOTS_KEPT: usize = 100;

/// One sample of the whole fleet, taken half a second after each second's
/// events.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Sample {
    /// Seconds since the start.
    pub t: u64,
    /// The capacity available at the root: its configured capacity while
    /// the root job has a master, else 0 (the drop in the design doc's
    /// chart during a root crash).
    pub capacity: f64,
    /// The root's configured capacity.
    pub configured: f64,
    /// Sum of the clients' wants.
    pub wants: f64,
    /// Sum of the clients' unexpired grants.
    pub has: f64,
    /// Clients without an unexpired lease.
    pub without_lease: usize,
}

/// One level of the tree in one sample.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct LevelSample {
    /// Sum of what the level's masters hold: the root's capacity, below it
    /// what the parents granted.
    pub available: f64,
    /// Sum of what the level's masters have handed out (with what they hold
    /// back for cut subtrees).
    pub handed_out: f64,
    /// Calls the level's servers took in the second before the sample.
    pub rpcs: u64,
}

/// A master that had handed out more than it held at a sample, outside
/// learning mode (in learning mode a master echoes what its clients say
/// they hold, by design, before it holds anything itself).
#[derive(Debug, Clone, PartialEq)]
pub struct Overshoot {
    /// When.
    pub t: u64,
    /// Which job.
    pub job: String,
    /// What its master had handed out.
    pub handed_out: f64,
    /// What it held.
    pub capacity: f64,
    /// The last event before it: (second, what).
    pub after: Option<(u64, String)>,
}

/// An event of the run and how long the fleet took to settle after it.
#[derive(Debug, Clone, PartialEq)]
pub struct EventReport {
    /// When it happened.
    pub t: u64,
    /// What happened.
    pub what: String,
    /// Seconds until what the clients hold was within 1 % of
    /// `min(wants, available capacity)` and stayed there until the next
    /// event (or the end); `None` if the last sample before the next event
    /// is not within.
    pub converged_after: Option<u64>,
    /// Seconds from the event until the next one (or the end) in which
    /// what the clients held was below 99 % of `min(wants, configured
    /// capacity)`: what the event cost.
    pub below_for: u64,
}

/// A finished run and its figures.
#[derive(Debug, Clone)]
pub struct Report {
    /// The fleet's name.
    pub name: String,
    /// The seed used.
    pub seed: u64,
    /// One sample per second.
    pub samples: Vec<Sample>,
    /// The levels' names, root first.
    pub level_names: Vec<String>,
    /// Per sample, one entry per level.
    pub levels: Vec<Vec<LevelSample>>,
    /// The run's events, with their convergence.
    pub events: Vec<EventReport>,
    /// The first 100 overshoots.
    pub overshoots: Vec<Overshoot>,
    /// Overshoots counted (one per master and sample).
    pub overshoot_count: usize,
    /// Mean of `has / capacity` after the warm-up, over the samples with
    /// capacity available (the root job has a master).
    pub mean_handed_out: f64,
    /// Mean of `has` over the configured capacity after the warm-up, over
    /// all samples (root outages count as capacity not handed out).
    pub mean_handed_out_all: f64,
    /// Samples (after the warm-up) with `has` above the configured
    /// capacity.
    pub samples_over_capacity: usize,
    /// Largest `has` over the configured capacity after the warm-up.
    pub max_has_over_capacity: f64,
    /// Mean `has` over the configured capacity, over the samples over
    /// capacity (0 without any).
    pub mean_has_over_capacity_when_over: f64,
}

/// What a run recorded, before the figures.
pub(super) struct Recording {
    pub(super) samples: Vec<Sample>,
    pub(super) levels: Vec<Vec<LevelSample>>,
    pub(super) overshoots: Vec<Overshoot>,
    pub(super) overshoot_count: usize,
    pub(super) log: Vec<(u64, String)>,
}

impl Recording {
    /// Records one sample and its overshoots.
    pub(super) fn push(&mut self, sample: Sample, levels: Vec<LevelSample>, over: Vec<Overshoot>) {
        self.samples.push(sample);
        self.levels.push(levels);
        self.overshoot_count += over.len();
        let room = OVERSHOOTS_KEPT.saturating_sub(self.overshoots.len());
        self.overshoots.extend(over.into_iter().take(room));
    }
}

impl Report {
    /// The figures of a run, counted from the end of the warm-up.
    pub(super) fn new(
        name: String,
        seed: u64,
        warmup: u64,
        level_names: Vec<String>,
        rec: Recording,
    ) -> Report {
        let samples = rec.samples;
        let settled: Vec<&Sample> = samples.iter().filter(|s| s.t >= warmup).collect();
        // Folded from +0.0: an empty `sum` of floats is -0.0.
        let mean = |v: &[f64]| v.iter().fold(0.0, |a, b| a + b) / v.len().max(1) as f64;
        let available: Vec<f64> = settled
            .iter()
            .filter(|s| s.capacity > 0.0)
            .map(|s| s.has / s.capacity)
            .collect();
        let fraction: Vec<f64> = settled
            .iter()
            .map(|s| s.has / s.configured.max(f64::MIN_POSITIVE))
            .collect();
        let over: Vec<f64> = fraction
            .iter()
            .copied()
            .filter(|&f| f > 1.0 + 1e-9)
            .collect();
        let max_has_over_capacity = fraction.iter().copied().fold(0.0, f64::max);
        let mean_has_over_capacity_when_over = mean(&over);
        let events = convergence(&samples, &rec.log);
        Report {
            name,
            seed,
            mean_handed_out: mean(&available),
            mean_handed_out_all: mean(&fraction),
            samples,
            level_names,
            levels: rec.levels,
            events,
            overshoots: rec.overshoots,
            overshoot_count: rec.overshoot_count,
            samples_over_capacity: over.len(),
            max_has_over_capacity,
            mean_has_over_capacity_when_over,
        }
    }

    /// The samples as CSV: `t,capacity,total_wants,total_has,without_lease`,
    /// then for each level `LEVEL_available,LEVEL_handed_out,LEVEL_rpcs`.
    pub fn csv(&self) -> String {
        let mut out = String::from("t,capacity,total_wants,total_has,without_lease");
        for name in &self.level_names {
            let _ = write!(out, ",{name}_available,{name}_handed_out,{name}_rpcs");
        }
        out.push('\n');
        for (s, levels) in self.samples.iter().zip(&self.levels) {
            let _ = write!(
                out,
                "{},{},{:.3},{:.3},{}",
                s.t, s.capacity, s.wants, s.has, s.without_lease
            );
            for l in levels {
                let _ = write!(out, ",{:.3},{:.3},{}", l.available, l.handed_out, l.rpcs);
            }
            out.push('\n');
        }
        out
    }

    /// The busiest second's calls at each level.
    pub fn peak_rpcs(&self) -> Vec<u64> {
        (0..self.level_names.len())
            .map(|l| self.levels.iter().map(|s| s[l].rpcs).max().unwrap_or(0))
            .collect()
    }

    /// The run on one screen: the figures, the busiest second of each
    /// level, the overshoots and the convergence after each event (the
    /// first 20).
    pub fn summary(&self) -> String {
        let mut out = String::new();
        let clients = self.samples.last().map_or(0, |s| s.without_lease);
        let _ = writeln!(
            out,
            "{} (seed {}): {} s; handed out {:.2}% of the available capacity ({:.2}% counting \
             root outages); {} samples over capacity (max {:.2}%)",
            self.name,
            self.seed,
            self.samples.last().map_or(0, |s| s.t),
            100.0 * self.mean_handed_out,
            100.0 * self.mean_handed_out_all,
            self.samples_over_capacity,
            100.0 * self.max_has_over_capacity,
        );
        let most_without = self.samples.iter().map(|s| s.without_lease).max();
        let _ = writeln!(
            out,
            "clients without a lease: {} at the end, {} at most",
            clients,
            most_without.unwrap_or(0)
        );
        for (l, name) in self.level_names.iter().enumerate() {
            let peak = self.levels.iter().map(|s| s[l].rpcs).max().unwrap_or(0);
            let total: u64 = self.levels.iter().map(|s| s[l].rpcs).sum();
            let secs = self.samples.len().max(1) as f64;
            let _ = writeln!(
                out,
                "level {name}: {:.0} RPCs/s on average, {peak} in the busiest second",
                total as f64 / secs
            );
        }
        match self.overshoots.first() {
            None => out.push_str("no server handed out more than it held\n"),
            Some(o) => {
                let _ = writeln!(
                    out,
                    "{} overshoots; first at {} s: {} handed out {:.3} of {:.3}{}",
                    self.overshoot_count,
                    o.t,
                    o.job,
                    o.handed_out,
                    o.capacity,
                    o.after
                        .as_ref()
                        .map_or(String::new(), |(t, w)| format!(" (after {t} s: {w})"))
                );
            }
        }
        for e in self.events.iter().take(20) {
            let _ = match e.converged_after {
                Some(s) => write!(out, "{:>6} s  {}: converged after {s} s", e.t, e.what),
                None => write!(out, "{:>6} s  {}: not converged", e.t, e.what),
            };
            let _ = writeln!(out, "; below 99% for {} s", e.below_for);
        }
        if self.events.len() > 20 {
            let _ = writeln!(out, "... and {} more events", self.events.len() - 20);
        }
        out
    }
}

/// Each logged event with the seconds until the clients held within 1 %
/// of `min(wants, capacity)` for good: from then until the next event
/// (or the end of the run), every sample is within; and the seconds until
/// the next event in which they held less than 99 % of `min(wants,
/// configured capacity)`.
fn convergence(samples: &[Sample], log: &[(u64, String)]) -> Vec<EventReport> {
    let end = samples.last().map_or(0, |s| s.t + 1);
    let within = |s: &Sample| {
        let target = s.wants.min(s.capacity);
        (s.has - target).abs() <= 0.01 * target
    };
    log.iter()
        .map(|(t, what)| {
            let next = log.iter().map(|e| e.0).find(|&u| u > *t).unwrap_or(end);
            let window: Vec<&Sample> = samples.iter().filter(|s| s.t >= *t && s.t < next).collect();
            let converged_after = match window.iter().rposition(|s| !within(s)) {
                None => Some(0),
                Some(last) if last + 1 < window.len() => Some(window[last + 1].t - t),
                Some(_) => None,
            };
            let below_for = window
                .iter()
                .filter(|s| s.has < 0.99 * s.wants.min(s.configured))
                .count() as u64;
            EventReport {
                t: *t,
                what: what.clone(),
                converged_after,
                below_for,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(t: u64, has: f64) -> Sample {
        Sample {
            t,
            capacity: 100.0,
            configured: 100.0,
            wants: 200.0,
            has,
            without_lease: 0,
        }
    }

    #[test]
    fn convergence_counts_until_the_fleet_settles_within_one_percent() {
        let has = [
            100.0, 50.0, 80.0, 99.5, 100.0, 99.0, 100.0, 100.0, 100.0, 90.0,
        ];
        let samples: Vec<Sample> = (0..10).map(|t| sample(t, has[t as usize])).collect();
        let log = vec![(1, "kill".to_owned()), (9, "again".to_owned())];
        let events = convergence(&samples, &log);
        // 99.5 at 3 s and five seconds within 1 % from there.
        assert_eq!(events[0].converged_after, Some(2));
        // 90 at 9 s, and the run ends.
        assert_eq!(events[1].converged_after, None);
        // Below 99 from 1 s to 8 s: 50 and 80; 99.0 is not below.
        assert_eq!(events[0].below_for, 2);
        assert_eq!(events[1].below_for, 1);
    }
}
