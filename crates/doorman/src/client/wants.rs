//! Estimating what a resource wants from what its users ask for.
//!
//! # Implementation notes
//!
//! The client samples an estimator once per refresh round. A rate
//! estimator counts every operation asked for (admitted, waited for or
//! refused: demand, not throughput, so a resource held below its need still
//! reports the need); a gauge estimator keeps the peak concurrency (in use
//! plus waiting) since the last sample. The sample is smoothed with an
//! exponentially weighted moving average whose weight depends on the time
//! since the last sample, `alpha = 1 - exp(-dt / tau)`, so irregular
//! sampling (backoff, redirects) weighs samples by the time they cover.
//! The estimate sent as `wants` is the average times a headroom factor,
//! never below a floor. Time is an argument: tests pass exact instants.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

/// How estimated wants are smoothed.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Smoothing {
    /// Time constant of the moving average: a step in demand is about 63%
    /// reflected after `tau`.
    pub tau: Duration,
    /// Factor applied to the average, so a resource can grow (default 1.1).
    pub headroom: f64,
    /// The smallest wants to send (default 1.0), so a resource that falls
    /// idle keeps a foothold.
    pub floor: f64,
}

impl Default for Smoothing {
    fn default() -> Self {
        Smoothing {
            tau: Duration::from_secs(30),
            headroom: 1.1,
            floor: 1.0,
        }
    }
}

/// A time-weighted exponential moving average.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Ewma {
    tau: f64,
    value: f64,
}

impl Ewma {
    pub(crate) fn new(tau: Duration, initial: f64) -> Ewma {
        Ewma {
            tau: tau.as_secs_f64().max(f64::MIN_POSITIVE),
            value: initial,
        }
    }

    /// Folds in `sample`, which covers the last `dt`.
    pub(crate) fn update(&mut self, sample: f64, dt: Duration) -> f64 {
        let alpha = 1.0 - (-dt.as_secs_f64() / self.tau).exp();
        self.value += alpha * (sample - self.value);
        self.value
    }

    pub(crate) fn value(&self) -> f64 {
        self.value
    }
}

/// Something the client can ask for a resource's current wants.
pub(crate) trait WantsEstimate: Send + Sync + std::fmt::Debug {
    /// Samples the estimate at `now` (time since an arbitrary origin that
    /// never changes for one estimator).
    fn wants(&self, now: Duration) -> f64;
}

#[derive(Debug)]
struct Sampled {
    last: Option<Duration>,
    last_count: u64,
    ewma: Ewma,
}

impl Sampled {
    /// Nothing sampled yet; the average starts at `initial`.
    fn new(initial: f64, smoothing: Smoothing) -> Sampled {
        Sampled {
            last: None,
            last_count: 0,
            ewma: Ewma::new(smoothing.tau, initial),
        }
    }
}

/// Estimates a rate from a count of operations asked for.
#[derive(Debug)]
pub(crate) struct RateDemand {
    /// Operations asked for, ever. Relaxed: a statistic; the sampler needs
    /// no other memory to be visible with it.
    asked: AtomicU64,
    sampled: Mutex<Sampled>,
    smoothing: Smoothing,
}

impl RateDemand {
    pub(crate) fn new(initial: f64, smoothing: Smoothing) -> RateDemand {
        RateDemand {
            asked: AtomicU64::new(0),
            sampled: Mutex::new(Sampled::new(initial, smoothing)),
            smoothing,
        }
    }

    /// Counts `n` operations asked for.
    #[inline]
    pub(crate) fn record(&self, n: u64) {
        self.asked.fetch_add(n, Ordering::Relaxed);
    }
}

impl WantsEstimate for RateDemand {
    fn wants(&self, now: Duration) -> f64 {
        let count = self.asked.load(Ordering::Relaxed);
        let mut s = self.sampled.lock().unwrap_or_else(|e| e.into_inner());
        match s.last {
            // The first sample only starts the window.
            None => {
                s.last = Some(now);
                s.last_count = count;
            }
            Some(last) if now > last => {
                let dt = now - last;
                let rate = count.wrapping_sub(s.last_count) as f64 / dt.as_secs_f64();
                s.ewma.update(rate, dt);
                s.last = Some(now);
                s.last_count = count;
            }
            Some(_) => {}
        }
        (s.ewma.value() * self.smoothing.headroom).max(self.smoothing.floor)
    }
}

/// Estimates a gauge from the peak concurrency between samples.
#[derive(Debug)]
pub(crate) struct GaugeDemand {
    /// The highest concurrency (in use + waiting) since the last sample.
    /// Relaxed: a statistic, as above.
    peak: AtomicU64,
    sampled: Mutex<Sampled>,
    smoothing: Smoothing,
}

impl GaugeDemand {
    pub(crate) fn new(initial: f64, smoothing: Smoothing) -> GaugeDemand {
        GaugeDemand {
            peak: AtomicU64::new(0),
            sampled: Mutex::new(Sampled::new(initial, smoothing)),
            smoothing,
        }
    }

    /// Records that `concurrency` operations are in use or waiting.
    #[inline]
    pub(crate) fn observe(&self, concurrency: u64) {
        self.peak.fetch_max(concurrency, Ordering::Relaxed);
    }

    /// The sample `wants` reads: the peak, restarted from `current`.
    pub(crate) fn wants_with(&self, now: Duration, current: u64) -> f64 {
        let peak = self.peak.swap(current, Ordering::Relaxed);
        let mut s = self.sampled.lock().unwrap_or_else(|e| e.into_inner());
        match s.last {
            None => s.last = Some(now),
            Some(last) if now > last => {
                s.ewma.update(peak as f64, now - last);
                s.last = Some(now);
            }
            Some(_) => {}
        }
        (s.ewma.value() * self.smoothing.headroom).max(self.smoothing.floor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secs(s: u64) -> Duration {
        Duration::from_secs(s)
    }

    #[test]
    fn ewma_weighs_by_time() {
        let mut e = Ewma::new(secs(10), 100.0);
        // One time constant moves 1 - 1/e of the way.
        let v = e.update(200.0, secs(10));
        assert!((v - (100.0 + 100.0 * (1.0 - (-1.0f64).exp()))).abs() < 1e-9);
        // No time, no change.
        assert_eq!(e.update(1e9, Duration::ZERO), v);
    }

    #[test]
    fn rate_demand_counts_what_was_asked() {
        let smoothing = Smoothing {
            tau: secs(10),
            headroom: 1.0,
            floor: 0.0,
        };
        let d = RateDemand::new(50.0, smoothing);
        assert_eq!(d.wants(secs(0)), 50.0); // the window starts
        d.record(1_000); // 100/s over the next 10 s
        let alpha = 1.0 - (-1.0f64).exp();
        let expect = 50.0 + alpha * 50.0;
        assert!((d.wants(secs(10)) - expect).abs() < 1e-9);
        // Steady 100/s converges to 100.
        for t in 2..40 {
            d.record(1_000);
            d.wants(secs(t * 10));
        }
        assert!((d.wants(secs(390)) - 100.0).abs() < 1e-3);
    }

    #[test]
    fn rate_demand_applies_headroom_and_floor() {
        let d = RateDemand::new(0.0, Smoothing::default());
        assert_eq!(d.wants(secs(0)), 1.0);
        let d = RateDemand::new(100.0, Smoothing::default());
        assert!((d.wants(secs(0)) - 110.0).abs() < 1e-9);
    }

    #[test]
    fn gauge_demand_follows_the_peak() {
        let smoothing = Smoothing {
            tau: secs(10),
            headroom: 1.0,
            floor: 0.0,
        };
        let g = GaugeDemand::new(0.0, smoothing);
        assert_eq!(g.wants_with(secs(0), 0), 0.0);
        g.observe(3);
        g.observe(8);
        g.observe(2);
        let alpha = 1.0 - (-1.0f64).exp();
        assert!((g.wants_with(secs(10), 2) - 8.0 * alpha).abs() < 1e-9);
        // The next window starts from the current concurrency, 2.
        let v = 8.0 * alpha;
        assert!((g.wants_with(secs(20), 0) - (v + alpha * (2.0 - v))).abs() < 1e-9);
    }
}
