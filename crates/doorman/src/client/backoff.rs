//! Exponential backoff with jitter between failed rounds.
//!
//! # Implementation notes
//!
//! The n-th consecutive failure waits `base * factor^n`, capped at `max`,
//! then scaled by a uniform factor in `[1 - jitter, 1]` ("equal jitter" when
//! `jitter` is 0.5) so that clients that failed together do not retry
//! together. The random numbers come from a SplitMix64 generator seeded per
//! client; tests seed it and assert exact delays.

use std::time::Duration;

/// Backoff settings.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Backoff {
    /// The first delay.
    pub base: Duration,
    /// Growth per consecutive failure.
    pub factor: f64,
    /// The largest delay before jitter.
    pub max: Duration,
    /// Fraction of the delay that is random, in `0.0..=1.0`.
    pub jitter: f64,
}

impl Default for Backoff {
    /// 1 s, growing by 1.3 per failure up to 60 s (as the Go client), with
    /// half of each delay random.
    fn default() -> Self {
        Backoff {
            base: Duration::from_secs(1),
            factor: 1.3,
            max: Duration::from_secs(60),
            jitter: 0.5,
        }
    }
}

/// The state of a backoff: consecutive failures and the random source.
#[derive(Debug, Clone)]
pub(crate) struct Retry {
    config: Backoff,
    failures: u32,
    rng: u64,
}

impl Retry {
    pub(crate) fn new(config: Backoff, seed: u64) -> Retry {
        Retry {
            config,
            failures: 0,
            rng: seed,
        }
    }

    /// Forgets the failures after a success.
    pub(crate) fn reset(&mut self) {
        self.failures = 0;
    }

    /// Consecutive failures so far.
    pub(crate) fn failures(&self) -> u32 {
        self.failures
    }

    /// Records a failure and returns how long to wait before the next try.
    pub(crate) fn next_delay(&mut self) -> Duration {
        let c = &self.config;
        let exp = c
            .factor
            .max(1.0)
            .powi(i32::try_from(self.failures).unwrap_or(i32::MAX));
        self.failures = self.failures.saturating_add(1);
        let raw = (c.base.as_secs_f64() * exp).min(c.max.as_secs_f64());
        let jitter = c.jitter.clamp(0.0, 1.0);
        let scale = 1.0 - jitter * self.uniform();
        Duration::from_secs_f64((raw * scale).max(0.0))
    }

    /// A uniform number in `[0, 1)` (SplitMix64).
    fn uniform(&mut self) -> f64 {
        self.rng = self.rng.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.rng;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        // The top 53 bits make an exact f64 in [0, 1).
        (z >> 11) as f64 / (1u64 << 53) as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn without_jitter_delays_grow_and_cap() {
        let mut r = Retry::new(
            Backoff {
                base: Duration::from_secs(1),
                factor: 2.0,
                max: Duration::from_secs(5),
                jitter: 0.0,
            },
            7,
        );
        let delays: Vec<u64> = (0..5).map(|_| r.next_delay().as_secs()).collect();
        assert_eq!(delays, [1, 2, 4, 5, 5]);
        assert_eq!(r.failures(), 5);
        r.reset();
        assert_eq!(r.next_delay(), Duration::from_secs(1));
    }

    #[test]
    fn jitter_stays_within_its_band_and_differs_by_seed() {
        let config = Backoff {
            jitter: 0.5,
            ..Backoff::default()
        };
        let mut a = Retry::new(config, 1);
        let mut b = Retry::new(config, 2);
        let da = a.next_delay();
        let db = b.next_delay();
        for d in [da, db] {
            assert!(
                d >= Duration::from_millis(500) && d <= Duration::from_secs(1),
                "{d:?}"
            );
        }
        assert_ne!(da, db);
        // Same seed, same sequence.
        let mut c = Retry::new(config, 1);
        assert_eq!(c.next_delay(), da);
    }
}
