//! [`Gcra`]: the leaky bucket as a virtual FIFO queue drained at the rate.
//!
//! # Implementation notes
//!
//! GCRA keeps one number per key, the theoretical arrival time `TAT`: when
//! the key's queue would be empty if every admitted request left exactly
//! one interval `T` (per unit of cost) after the previous one. Time is kept
//! in the core's tokens (`T` is exactly `TOKENS_PER_OP`, converted from
//! absolute nanoseconds by the exact [`Meter`]), so the interval carries no
//! rounding at any rate.
//!
//! A request of cost `c` at time `t` would leave the queue at
//! `TAT' = max(TAT, t) + c T`; `ahead = TAT' - t` is the work queued in
//! front of it, itself included:
//!
//! - `ahead <= burst T`: admitted now (the bucket's burst tolerance);
//! - `ahead <= (burst + queue) T`: admitted after a delay of
//!   `ahead - burst T`, the time its place in the FIFO takes to drain;
//! - otherwise rejected: the queue is full. The retry time is when
//!   `ahead` falls back to `(burst + queue) T`. A cost above
//!   `burst + queue` is never admitted.
//!
//! Delays round up to whole nanoseconds, so a delayed request never leaves
//! before its slot.

use super::{sat_u64, LimitKey, Policy, Standing, Verdict};
use crate::error::ValueError;
use tollgate::pool::{Meter, MAX_OPS_PER_ACQUIRE, TOKENS_PER_OP};
use tollgate::RateSpec;

/// GCRA / leaky bucket with a bounded queue.
///
/// # Examples
///
/// ```
/// use tollgate::RateSpec;
/// use tollgate_throttle::{Gcra, Policy, Verdict};
///
/// // 10/s (one every 100 ms), a burst of 1 and two places in the queue.
/// let policy = Gcra::new(RateSpec::new(10.0)?, 1, 2)?;
/// let mut key = policy.new_state(0);
/// assert_eq!(policy.check(&mut key, 0, 1), Verdict::Admit { remaining: 0 });
/// assert_eq!(policy.check(&mut key, 0, 1), Verdict::Delay { delay_ns: 100_000_000 });
/// assert_eq!(policy.check(&mut key, 0, 1), Verdict::Delay { delay_ns: 200_000_000 });
/// assert_eq!(policy.check(&mut key, 0, 1), Verdict::Reject { retry_after_ns: 100_000_000 });
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone)]
pub struct Gcra {
    meter: Meter,
    /// The meter's rate, in nano-units per second.
    pub(crate) nano_ops_per_sec: u128,
    pub(crate) burst: u64,
    pub(crate) queue: u64,
}

/// The state of one key under [`Gcra`]: its theoretical arrival time, in
/// tokens since the clock's origin.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct GcraState {
    tat: u128,
}

impl GcraState {
    /// The state the Redis store holds in these fields.
    pub(crate) fn from_parts(tat: u128) -> GcraState {
        GcraState { tat }
    }
}

impl Gcra {
    /// A bucket draining at `rate` (its burst ratio and verb are unused)
    /// that admits `burst` units at once and delays up to `queue` more.
    ///
    /// # Errors
    ///
    /// A `burst` of zero, or a burst plus queue too large to count in
    /// tokens.
    pub fn new(rate: RateSpec, burst: u64, queue: u64) -> Result<Gcra, ValueError> {
        if burst == 0 {
            return Err(ValueError::limit("a burst of zero admits nothing"));
        }
        if burst.saturating_add(queue) > MAX_OPS_PER_ACQUIRE {
            return Err(ValueError::limit("burst plus queue is too large"));
        }
        Ok(Gcra {
            meter: Meter::new(rate.nano_ops_per_sec()),
            nano_ops_per_sec: rate.nano_ops_per_sec(),
            burst,
            queue,
        })
    }

    /// What tells this limit apart from another on reload.
    pub(crate) fn key(&self) -> LimitKey {
        LimitKey::Gcra {
            nano_ops_per_sec: self.nano_ops_per_sec,
            burst: self.burst,
            queue: self.queue,
        }
    }

    fn ceil_ns(&self, tokens: u128) -> u64 {
        let ns = self.meter.nanos_for(tokens);
        if self.meter.tokens_floor(ns) >= tokens {
            ns
        } else {
            ns.saturating_add(1)
        }
    }
}

impl Policy for Gcra {
    type State = GcraState;

    fn new_state(&self, _now_ns: u64) -> GcraState {
        GcraState::default()
    }

    fn check(&self, s: &mut GcraState, now_ns: u64, cost: u64) -> Verdict {
        let limit = u128::from((self.burst + self.queue) * TOKENS_PER_OP);
        if cost > self.burst + self.queue {
            return Verdict::Reject {
                retry_after_ns: u64::MAX,
            };
        }
        let t = self.meter.tokens_floor(now_ns);
        let tat = s.tat.max(t) + u128::from(cost * TOKENS_PER_OP);
        let ahead = tat - t;
        let burst = u128::from(self.burst * TOKENS_PER_OP);
        if ahead <= burst {
            s.tat = tat;
            Verdict::Admit {
                remaining: sat_u64((burst - ahead) / u128::from(TOKENS_PER_OP)),
            }
        } else if ahead <= limit {
            s.tat = tat;
            Verdict::Delay {
                delay_ns: self.ceil_ns(ahead - burst),
            }
        } else {
            Verdict::Reject {
                retry_after_ns: self.ceil_ns(ahead - limit),
            }
        }
    }

    fn settle(&self, s: &mut GcraState, now_ns: u64, delta: i64) {
        let t = self.meter.tokens_floor(now_ns);
        let tokens = u128::from(delta.unsigned_abs()) * u128::from(TOKENS_PER_OP);
        s.tat = if delta >= 0 {
            s.tat.max(t) + tokens
        } else {
            s.tat.saturating_sub(tokens).max(t.min(s.tat))
        };
    }

    fn quota(&self) -> u64 {
        self.burst
    }

    fn window_ns(&self) -> u64 {
        self.ceil_ns(u128::from(self.burst * TOKENS_PER_OP))
    }

    fn standing(&self, s: &GcraState, now_ns: u64) -> Standing {
        let ahead = s.tat.saturating_sub(self.meter.tokens_floor(now_ns));
        let burst = u128::from(self.burst * TOKENS_PER_OP);
        Standing {
            remaining: sat_u64(burst.saturating_sub(ahead) / u128::from(TOKENS_PER_OP)),
            reset_ns: self.ceil_ns(ahead),
        }
    }

    fn max_cost(&self) -> u64 {
        self.burst + self.queue
    }

    fn idle_ns(&self) -> u64 {
        // After TAT <= t the state decides like a fresh one (TAT = 0).
        self.ceil_ns(u128::from((self.burst + self.queue) * TOKENS_PER_OP))
            .saturating_add(1)
    }

    fn owes(&self, s: &GcraState, now_ns: u64) -> bool {
        // Post-accounting may push TAT past the queue's reach; the state is
        // fresh only once the present has caught up with it.
        s.tat > self.meter.tokens_floor(now_ns)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Against the leaky bucket "as a meter": a level in nanoseconds of
        /// work that drains one per nanosecond (rate 1000/s: an op is
        /// exactly 1 ms, and token counts are whole at multiples of 125 µs).
        #[test]
        fn matches_a_draining_bucket(
            burst in 1u64..5,
            queue in 0u64..5,
            steps in proptest::collection::vec((0u64..24, 1u64..4), 1..100),
        ) {
            let p = Gcra::new(RateSpec::new(1000.0).unwrap(), burst, queue).unwrap();
            let mut s = p.new_state(0);
            let op = 1_000_000u64;
            let (mut level, mut now) = (0u64, 0u64);
            for (eighths, cost) in steps {
                let dt = eighths * 125_000;
                now += dt;
                level = level.saturating_sub(dt);
                let after = level + cost * op;
                let expected = if cost > burst + queue {
                    Verdict::Reject { retry_after_ns: u64::MAX }
                } else if after <= burst * op {
                    level = after;
                    Verdict::Admit { remaining: (burst * op - after) / op }
                } else if after <= (burst + queue) * op {
                    level = after;
                    Verdict::Delay { delay_ns: after - burst * op }
                } else {
                    Verdict::Reject { retry_after_ns: after - (burst + queue) * op }
                };
                prop_assert_eq!(p.check(&mut s, now, cost), expected);
            }
        }
    }

    #[test]
    fn settle_moves_the_arrival_time_but_never_before_now() {
        let p = Gcra::new(RateSpec::new(1000.0).unwrap(), 2, 0).unwrap();
        let mut s = p.new_state(0);
        assert_eq!(p.check(&mut s, 0, 1), Verdict::Admit { remaining: 1 });
        p.settle(&mut s, 0, 1);
        assert_eq!(
            p.check(&mut s, 0, 1),
            Verdict::Reject {
                retry_after_ns: 1_000_000
            }
        );
        p.settle(&mut s, 0, -5);
        assert_eq!(s.tat, 0);
        assert_eq!(p.check(&mut s, 0, 2), Verdict::Admit { remaining: 0 });
    }

    #[test]
    fn a_state_in_debt_owes_until_the_present_catches_up() {
        // 1000/s: an op is 1 ms. Admitted at 0, really cost 101 ops.
        let p = Gcra::new(RateSpec::new(1000.0).unwrap(), 2, 0).unwrap();
        let mut s = p.new_state(0);
        assert!(p.check(&mut s, 0, 1).is_admitted());
        p.settle(&mut s, 0, 100);
        let idle = p.idle_ns();
        assert!(idle < 101_000_000);
        assert!(p.owes(&s, idle));
        assert!(p.owes(&s, 100_999_999));
        assert!(!p.owes(&s, 101_000_000));
        assert!(!p.owes(&p.new_state(0), 0));
    }
}
