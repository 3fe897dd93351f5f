//! The token-pool arithmetic: how measured time fills the active, burst and
//! waiting pools. Pure: no atomics, no clock.
//!
//! # Implementation notes
//!
//! With `P` the active level (including burst), `W` the waiting pool, `A`
//! the active capacity, `B` the burst headroom and `F` the tokens for the
//! elapsed time, a fill does (`docs/design/token-pool.md` §3):
//!
//! 1. `to_active = min(F, max(A - P, 0))`; `P += to_active`.
//! 2. `W += F - to_active`.
//! 3. Burst recovery normalised for filler jitter:
//!    `allowed = min(F / A, 1) * B`, then `min(A + B - P, allowed)`;
//!    `burst = min(allowed, W)`; `W -= burst`; `P += burst`.
//!
//! `P + W` grows by exactly `F`: a fill creates no token beyond the time it
//! measured and loses none. Ten fills of `A / 10` move as much burst as one
//! fill of `A` (up to one token of rounding per fill, which stays in `W`).
//! The limiter runs this same function on a snapshot of its sliced active
//! pool, so the unit tests here pin the production arithmetic.

use super::units::Sizing;

/// The active level and the waiting pool, in tokens.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Pool {
    /// `P`: tokens ops can take now (active pool plus burst in use).
    pub active: u64,
    /// `W`: the backlog, schedule time granted by the clock and not yet
    /// claimed by any op.
    pub waiting: u128,
}

impl Pool {
    /// Adds `elapsed` tokens of measured time; returns how many went to the
    /// active pool (directly or as burst).
    #[inline]
    pub fn fill(&mut self, elapsed: u128, sizing: &Sizing) -> u64 {
        let room = sizing.active.saturating_sub(self.active);
        // to_active <= room, a u64.
        let to_active = elapsed.min(u128::from(room)) as u64;
        self.active += to_active;
        self.waiting += elapsed - u128::from(to_active);

        let allowed = if elapsed >= u128::from(sizing.active) {
            u128::from(sizing.burst)
        } else {
            elapsed * u128::from(sizing.burst) / u128::from(sizing.active)
        };
        let headroom = u128::from(sizing.max_over().saturating_sub(self.active));
        // burst <= headroom, a u64.
        let burst = allowed.min(headroom).min(self.waiting) as u64;
        self.waiting -= u128::from(burst);
        self.active += burst;
        to_active + burst
    }

    /// Drops the backlog above `cap`; returns how much was dropped.
    #[inline]
    pub fn cap_waiting(&mut self, cap: Option<u128>) -> u128 {
        match cap {
            Some(cap) if self.waiting > cap => {
                let dropped = self.waiting - cap;
                self.waiting = cap;
                dropped
            }
            _ => 0,
        }
    }

    /// Takes up to `n` tokens from the active pool (never from `W`).
    #[cfg(test)]
    pub fn take_up_to(&mut self, n: u64) -> u64 {
        let taken = n.min(self.active);
        self.active -= taken;
        taken
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The spec's sizes in nanosecond tokens, to check its golden vectors.
    fn ns_sizing(active: u64, burst: u64) -> Sizing {
        Sizing { active, burst }
    }

    #[test]
    fn golden_vector_rate_1e7_burst_1_1() {
        let s = ns_sizing(1_000_000, 100_000);
        let mut pool = Pool::default();

        pool.fill(1_000_000, &s);
        assert_eq!(u128::from(pool.active) + pool.waiting, 1_000_000);
        assert_eq!(pool.waiting, 0);

        pool.fill(100, &s);
        assert_eq!(u128::from(pool.active) + pool.waiting, 1_000_100);
        assert_eq!(pool.waiting, 90, "10 moved into the burst headroom");

        pool.fill(10, &s);
        assert_eq!(u128::from(pool.active) + pool.waiting, 1_000_110);
        assert_eq!(pool.waiting, 99);
    }

    #[test]
    fn golden_vector_rate_100_burst_10_take_up_to() {
        // op = 1e7 ns, A = max(1e6, 2e7) = 2e7, maxOver = 2e8.
        let s = ns_sizing(20_000_000, 180_000_000);
        let mut pool = Pool::default();
        pool.fill(100, &s);
        assert_eq!(pool.take_up_to(99), 99);
        assert_eq!(pool.take_up_to(10), 1);
        assert_eq!(pool.take_up_to(1), 0);
    }

    #[test]
    fn overflow_goes_to_waiting_and_burst_is_capped_by_headroom() {
        let s = ns_sizing(1_000, 500);
        let mut pool = Pool::default();
        assert_eq!(pool.fill(5_000, &s), 1_500);
        assert_eq!(pool.active, 1_500);
        assert_eq!(pool.waiting, 3_500);
        // Full: nothing more reaches the active pool.
        assert_eq!(pool.fill(5_000, &s), 0);
        assert_eq!(pool.waiting, 8_500);
    }

    #[test]
    fn strict_ratio_never_recovers_backlog() {
        let s = ns_sizing(1_000, 0);
        let mut pool = Pool {
            active: 0,
            waiting: 10_000,
        };
        for _ in 0..10 {
            pool.fill(1_000, &s);
            pool.take_up_to(u64::MAX);
        }
        assert_eq!(pool.waiting, 10_000);
    }

    #[test]
    fn cap_waiting_drops_only_the_excess() {
        let mut pool = Pool {
            active: 5,
            waiting: 100,
        };
        assert_eq!(pool.cap_waiting(None), 0);
        assert_eq!(pool.cap_waiting(Some(200)), 0);
        assert_eq!(pool.cap_waiting(Some(30)), 70);
        assert_eq!(pool.waiting, 30);
    }

    proptest! {
        /// P + W grows by exactly F per fill and shrinks by exactly what is
        /// taken; P never exceeds A + B.
        #[test]
        fn conservation(
            active in 1u64..1_000_000,
            burst in 0u64..2_000_000,
            steps in proptest::collection::vec((0u128..3_000_000, 0u64..3_000_000), 1..60),
        ) {
            let s = ns_sizing(active, burst);
            let mut pool = Pool::default();
            let mut total: u128 = 0;
            for (fill, take) in steps {
                pool.fill(fill, &s);
                total += fill;
                prop_assert!(pool.active <= s.max_over());
                total -= u128::from(pool.take_up_to(take));
                prop_assert_eq!(u128::from(pool.active) + pool.waiting, total);
            }
        }

        /// With callers draining the active pool after every fill, ten
        /// fills of A/10 deliver as many tokens as one fill of A (to within
        /// one token of rounding per fill).
        #[test]
        fn burst_is_normalised_for_jitter(active in 10u64..1_000_000, ratio_pct in 100u64..500, backlog in 0u128..10_000_000) {
            let s = ns_sizing(active, active * (ratio_pct - 100) / 100);
            let start = Pool { active: 0, waiting: backlog };
            let mut one = start;
            one.fill(u128::from(active), &s);
            let one_taken = one.take_up_to(u64::MAX);
            let mut ten = start;
            let mut ten_taken = 0;
            for _ in 0..10 {
                ten.fill(u128::from(active / 10), &s);
                ten_taken += ten.take_up_to(u64::MAX);
            }
            ten.fill(u128::from(active % 10), &s);
            ten_taken += ten.take_up_to(u64::MAX);
            prop_assert!(one_taken.abs_diff(ten_taken) <= 11, "one fill gave {}, ten gave {}", one_taken, ten_taken);
            prop_assert_eq!(u128::from(one_taken) + one.waiting, u128::from(ten_taken) + ten.waiting);
        }
    }
}
