//! [`TokenPool`]: the limiter core's token pool, evaluated lazily per key.
//!
//! # Implementation notes
//!
//! A key's state is the core's [`Pool`] (active level `P`, backlog `W`), the
//! meter's fractional carry, the time of its last fill, and a debt left by
//! post-accounting. Nothing runs in the background: on each access the
//! elapsed nanoseconds since the last fill become tokens through the core's
//! exact [`Meter`] (the carry keeps the total exactly
//! `floor(elapsed * rate)`), debt is repaid from them first, and the rest
//! goes through the core's [`Pool::fill`], so the active pool, the burst
//! headroom and its recovery normalised for jitter are the core's own
//! arithmetic. A cost of `c` is `c * TOKENS_PER_OP` tokens.
//!
//! A service's key may sit idle for an hour; the core's unbounded backlog
//! would then let it run `burst_ratio` times fast for ten hours. The
//! backlog is therefore capped (one second of schedule by default). A fresh
//! key holds what a key idle forever holds: a full active pool with its
//! burst headroom (`A + B`) and a full backlog.
//!
//! Edge cases: a cost above `A + B` can never be admitted
//! (`retry_after_ns == u64::MAX`). For a cost within `A`, the retry time is
//! exactly when the direct fill alone covers it (an upper bound: the burst
//! can only admit sooner); above `A` it is one fill long enough to move the
//! whole burst headroom.

use std::time::Duration;

use super::{sat_u64, LimitKey, Policy, Standing, Verdict};
use crate::error::ValueError;
use tollgate::pool::Pool;
use tollgate::pool::{Meter, Sizing, MAX_OPS_PER_ACQUIRE, TOKENS_PER_OP};
use tollgate::RateSpec;

/// The token-pool policy: the core's rate and burst ratio per key, or a
/// plain token bucket with a burst in ops ([`with_burst`](TokenPool::with_burst)).
///
/// What a fresh key admits, at a rate of `r` ops per second:
///
/// - [`with_burst`](TokenPool::with_burst)`(b)`: a bucket of `b` ops,
///   full when the key is new and refilled at `r`: `b` at once, and `b + r`
///   by the end of its first second (at `t = 1 s`, requests spread to use
///   every refill), the bucket of tower_governor and of most surveys.
/// - [`new`](TokenPool::new) with the core's burst ratio `k`: an active
///   pool `A` of `max(1 ms, 2 ops)` of schedule with headroom
///   `B = A (k - 1)`, and a backlog of one second
///   ([`DEFAULT_BACKLOG_CAP`](TokenPool::DEFAULT_BACKLOG_CAP)) that a
///   key catches up on at `k` times the rate: `A + B` at once, and up to
///   `A + B + 2r` by the end of its first second. `"5,2"` admits 4 at
///   once and 14 in its first second; `"5"` with a burst of 4 admits 4
///   and 9.
///
/// On a coarse clock (see [`with_clock_step`](TokenPool::with_clock_step))
/// the active pool grows to at least one and a half clock steps of rate,
/// which raises a small burst at a high rate.
///
/// # Examples
///
/// ```
/// use tollgate::RateSpec;
/// use tollgate_throttle::{Policy, TokenPool, Verdict};
///
/// // 1000 ops/s: the active pool holds two ops (2 ms), the burst ratio 1.5
/// // adds one more.
/// let policy = TokenPool::new("1000,1.5".parse::<RateSpec>()?);
/// let mut key = policy.new_state(0);
/// assert_eq!(policy.check(&mut key, 0, 1), Verdict::Admit { remaining: 2 });
/// assert_eq!(policy.check(&mut key, 0, 2), Verdict::Admit { remaining: 0 });
/// assert_eq!(
///     policy.check(&mut key, 0, 1),
///     Verdict::Reject { retry_after_ns: 1_000_000 }
/// );
/// assert!(policy.check(&mut key, 1_000_000, 1).is_admitted());
/// # Ok::<(), tollgate::SpecError>(())
/// ```
///
/// A fresh key's first second, with a burst ratio and with a burst:
///
/// ```
/// use tollgate_throttle::{Policy, TokenPool};
///
/// // Requests every 100 ms from 0 to 1 s inclusive.
/// let first_second = |p: &TokenPool| {
///     let mut key = p.new_state(0);
///     (0..=10u64)
///         .map(|tenth| (0..10).filter(|_| p.check(&mut key, tenth * 100_000_000, 1).is_admitted()).count())
///         .sum::<usize>()
/// };
/// let ratio = TokenPool::new("5,2".parse()?);
/// assert_eq!(ratio.quota(), 4);
/// assert_eq!(first_second(&ratio), 14);
/// let bucket = TokenPool::new("5".parse()?).with_burst(4)?;
/// assert_eq!(bucket.quota(), 4);
/// assert_eq!(first_second(&bucket), 9);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone)]
pub struct TokenPool {
    meter: Meter,
    /// The meter's rate, in nano-ops per second.
    nano_ops_per_sec: u128,
    burst_ppm: u64,
    sizing: Sizing,
    /// The backlog cap, in tokens.
    backlog_cap: u128,
}

/// The state of one key under a [`TokenPool`]: 40 bytes.
///
/// The core's pool is stored narrowed: the backlog is capped below 2^64
/// tokens and the meter's carry is below its denominator (at most 10^18).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenPoolState {
    active: u64,
    waiting: u64,
    carry: u64,
    last_ns: u64,
    /// Tokens charged by post-accounting beyond what the pool held.
    debt: u64,
}

impl TokenPoolState {
    fn pool(&self) -> Pool {
        Pool {
            active: self.active,
            waiting: u128::from(self.waiting),
        }
    }
}

impl TokenPool {
    /// The default backlog cap: one second of schedule.
    pub const DEFAULT_BACKLOG_CAP: Duration = Duration::from_secs(1);

    /// A token pool at `spec`'s rate and burst ratio (its verb is ignored),
    /// with the default backlog cap.
    pub fn new(spec: RateSpec) -> TokenPool {
        let meter = Meter::new(spec.nano_ops_per_sec());
        let sizing = Sizing::new(&meter, spec.burst_ppm());
        let mut pool = TokenPool {
            meter,
            nano_ops_per_sec: spec.nano_ops_per_sec(),
            burst_ppm: spec.burst_ppm(),
            sizing,
            backlog_cap: 0,
        };
        pool.backlog_cap = pool.tokens_for_duration(TokenPool::DEFAULT_BACKLOG_CAP);
        pool
    }

    /// A plain token bucket of `burst` ops at this pool's rate: a fresh key
    /// holds `burst` ops and refills at the rate up to `burst` again, with
    /// no burst ratio and no backlog (both are replaced).
    ///
    /// # Errors
    ///
    /// A burst of zero, or one too large to count in tokens.
    pub fn with_burst(mut self, burst: u64) -> Result<TokenPool, ValueError> {
        if burst == 0 {
            return Err(ValueError::limit("a burst of zero admits nothing"));
        }
        if burst > MAX_OPS_PER_ACQUIRE {
            return Err(ValueError::limit("the burst is too large"));
        }
        self.burst_ppm = 1_000_000;
        self.sizing = Sizing {
            active: burst * TOKENS_PER_OP,
            burst: 0,
        };
        self.backlog_cap = 0;
        Ok(self)
    }

    /// What tells this limit apart from another on reload.
    pub(crate) fn key(&self) -> LimitKey {
        LimitKey::TokenPool {
            nano_ops_per_sec: self.nano_ops_per_sec,
            burst_ppm: self.burst_ppm,
            active: self.sizing.active,
            burst: self.sizing.burst,
            backlog_cap: self.backlog_cap,
        }
    }

    /// What the Redis store's script decides with: the meter (its rate in
    /// nano-ops per second), the pool's sizes and the backlog cap in
    /// tokens.
    pub(crate) fn script_parts(&self) -> (u128, Sizing, u128) {
        (self.nano_ops_per_sec, self.sizing, self.backlog_cap)
    }

    /// Caps the backlog (the schedule time a key may catch up on at the
    /// burst rate) at `cap`; zero means no catching up.
    pub fn with_backlog_cap(mut self, cap: Duration) -> TokenPool {
        self.backlog_cap = self.tokens_for_duration(cap);
        self
    }

    /// Widens the active pool to cover one and a half `step`s of the
    /// clock that times the decisions (a clock's
    /// [`resolution_ns`](tollgate::Clock::resolution_ns)), so a key used
    /// steadily takes in each step whole and keeps its rate. A
    /// [`Throttler`](crate::Throttler) does this with its own clock's step.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate_throttle::{Policy, TokenPool, Verdict};
    ///
    /// // 1000 ops/s on a clock that moves 4 ms at a time: the active pool
    /// // holds 6 ops, not 2, so every step's 4 ops are kept.
    /// let policy = TokenPool::new("1000,1.0".parse()?).with_clock_step(Duration::from_millis(4));
    /// let mut key = policy.new_state(0);
    /// assert_eq!(policy.check(&mut key, 0, 6), Verdict::Admit { remaining: 0 });
    /// assert_eq!(policy.check(&mut key, 4_000_000, 4), Verdict::Admit { remaining: 0 });
    /// # Ok::<(), tollgate::SpecError>(())
    /// ```
    pub fn with_clock_step(mut self, step: Duration) -> TokenPool {
        let step_ns = u64::try_from(step.as_nanos()).unwrap_or(u64::MAX);
        self.sizing = self.sizing.covering(&self.meter, self.burst_ppm, step_ns);
        self
    }

    /// This pool shared by `replicas` replicas deciding alone: its rate
    /// divided by them, and its burst (a plain bucket's ops, or the
    /// active pool a ratio sizes) with it, at least one op; the burst
    /// ratio and the backlog's length in time stay.
    pub(crate) fn per_replica(&self, replicas: u64) -> TokenPool {
        let r = replicas.max(1);
        let rate = self.nano_ops_per_sec as f64 / 1e9 / r as f64;
        let Ok(spec) = RateSpec::new(rate) else {
            return self.clone();
        };
        let plain = self.sizing.burst == 0 && self.backlog_cap == 0 && self.burst_ppm == 1_000_000;
        if plain {
            let ops = (self.sizing.active / TOKENS_PER_OP / r).max(1);
            return TokenPool::new(spec)
                .with_burst(ops)
                .unwrap_or_else(|_| self.clone());
        }
        let spec = spec
            .with_burst_ratio(self.burst_ppm as f64 / 1e6)
            .unwrap_or(spec);
        let mut pool = TokenPool::new(spec);
        // The same backlog in time: a rate r times lower counts r times
        // fewer tokens for it.
        pool.backlog_cap = self.backlog_cap / u128::from(r);
        pool
    }

    fn tokens_for_duration(&self, d: Duration) -> u128 {
        let tokens = self
            .meter
            .tokens_floor(u64::try_from(d.as_nanos()).unwrap_or(u64::MAX));
        // The state stores the backlog in 64 bits.
        tokens.min(u128::from(u64::MAX))
    }

    /// Fills the state with the time elapsed since its last fill.
    fn advance(&self, s: &mut TokenPoolState, now_ns: u64) {
        if now_ns <= s.last_ns {
            return;
        }
        let elapsed = now_ns - s.last_ns;
        s.last_ns = now_ns;
        let mut carry = u128::from(s.carry);
        let mut tokens = self.meter.tokens_for(elapsed, &mut carry);
        // The carry is below the meter's denominator, at most 1e18.
        s.carry = carry as u64;
        let repaid = tokens.min(u128::from(s.debt));
        // repaid <= debt, a u64.
        s.debt -= repaid as u64;
        tokens -= repaid;
        if tokens > 0 {
            let mut pool = s.pool();
            pool.fill(tokens, &self.sizing);
            pool.cap_waiting(Some(self.backlog_cap));
            s.active = pool.active;
            // Capped at backlog_cap, which fits in a u64.
            s.waiting = pool.waiting as u64;
        }
    }

    /// The tokens a debt-free state needs to become a fresh one: a full
    /// pool with its burst headroom, and a full backlog.
    fn full(&self) -> u128 {
        u128::from(self.sizing.max_over()) + self.backlog_cap
    }

    /// The fewest nanoseconds whose tokens are at least `tokens`.
    fn ceil_ns(&self, tokens: u128) -> u64 {
        let ns = self.meter.nanos_for(tokens);
        if self.meter.tokens_floor(ns) >= tokens {
            ns
        } else {
            ns.saturating_add(1)
        }
    }

    fn retry_after(&self, s: &TokenPoolState, need: u64) -> u64 {
        let (a, b) = (self.sizing.active, self.sizing.burst);
        let tokens = if need <= a {
            u128::from(need - s.active)
        } else {
            // One fill of at least A moves the whole headroom B, provided
            // the overflow left in the backlog covers it.
            u128::from(a.max(a - s.active.min(a) + b))
        };
        self.ceil_ns(tokens + u128::from(s.debt))
    }
}

impl Policy for TokenPool {
    type State = TokenPoolState;

    fn new_state(&self, now_ns: u64) -> TokenPoolState {
        TokenPoolState {
            active: self.sizing.max_over(),
            // Capped at u64::MAX by `tokens_for_duration`.
            waiting: self.backlog_cap as u64,
            carry: 0,
            last_ns: now_ns,
            debt: 0,
        }
    }

    fn check(&self, s: &mut TokenPoolState, now_ns: u64, cost: u64) -> Verdict {
        self.advance(s, now_ns);
        if cost > MAX_OPS_PER_ACQUIRE || cost * TOKENS_PER_OP > self.sizing.max_over() {
            return Verdict::Reject {
                retry_after_ns: u64::MAX,
            };
        }
        let need = cost * TOKENS_PER_OP;
        if s.active >= need {
            s.active -= need;
            Verdict::Admit {
                remaining: s.active / TOKENS_PER_OP,
            }
        } else {
            Verdict::Reject {
                retry_after_ns: self.retry_after(s, need),
            }
        }
    }

    fn settle(&self, s: &mut TokenPoolState, now_ns: u64, delta: i64) {
        self.advance(s, now_ns);
        let tokens = delta.unsigned_abs().saturating_mul(TOKENS_PER_OP);
        if delta >= 0 {
            let taken = tokens.min(s.active);
            s.active -= taken;
            s.debt = s.debt.saturating_add(tokens - taken);
        } else {
            let repaid = tokens.min(s.debt);
            s.debt -= repaid;
            let back = tokens - repaid;
            s.active = s.active.saturating_add(back).min(self.sizing.max_over());
        }
    }

    fn quota(&self) -> u64 {
        self.sizing.max_over() / TOKENS_PER_OP
    }

    fn window_ns(&self) -> u64 {
        self.ceil_ns(u128::from(self.sizing.max_over()))
    }

    fn standing(&self, s: &TokenPoolState, now_ns: u64) -> Standing {
        let mut s = s.clone();
        self.advance(&mut s, now_ns);
        let missing = u128::from(self.sizing.max_over().saturating_sub(s.active));
        Standing {
            remaining: if s.debt > 0 {
                0
            } else {
                s.active / TOKENS_PER_OP
            },
            reset_ns: self.ceil_ns(missing + u128::from(s.debt)),
        }
    }

    fn idle_ns(&self) -> u64 {
        // One fill of A + B + cap tokens from any debt-free state reaches
        // the fresh state: P = A + B and W = cap.
        sat_u64(u128::from(self.ceil_ns(self.full())) + 1)
    }

    fn owes(&self, s: &TokenPoolState, now_ns: u64) -> bool {
        // The tokens since the last fill repay the debt first, then must
        // still fill the pool and the backlog (the carry only adds).
        s.debt > 0
            && self.meter.tokens_floor(now_ns.saturating_sub(s.last_ns))
                < u128::from(s.debt) + self.full()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn spec(rate: &str) -> RateSpec {
        rate.parse().unwrap()
    }

    #[test]
    fn a_fresh_key_holds_the_burst_and_refills_at_the_rate() {
        // 1000/s, ratio 1: A = 2 ops (2 ms), no burst headroom: quota 2.
        let p = TokenPool::new(spec("1000,1"));
        assert_eq!(p.quota(), 2);
        let mut s = p.new_state(0);
        assert_eq!(p.check(&mut s, 0, 2), Verdict::Admit { remaining: 0 });
        assert_eq!(
            p.check(&mut s, 0, 1),
            Verdict::Reject {
                retry_after_ns: 1_000_000
            }
        );
        assert!(!p.check(&mut s, 999_999, 1).is_admitted());
        assert!(p.check(&mut s, 1_000_000, 1).is_admitted());
    }

    #[test]
    fn a_cost_beyond_the_pool_is_never_admitted() {
        let p = TokenPool::new(spec("1000,1.5"));
        let mut s = p.new_state(0);
        assert_eq!(
            p.check(&mut s, 0, 4),
            Verdict::Reject {
                retry_after_ns: u64::MAX
            }
        );
        assert_eq!(
            p.check(&mut s, 0, u64::MAX),
            Verdict::Reject {
                retry_after_ns: u64::MAX
            }
        );
    }

    #[test]
    fn the_backlog_lets_a_drained_key_catch_up_at_the_burst_rate() {
        // 1000/s ratio 2: A = 2 ops, B = 2 ops; backlog capped at 1 s.
        let p = TokenPool::new(spec("1000,2"));
        let mut s = p.new_state(0);
        assert_eq!(p.check(&mut s, 0, 4), Verdict::Admit { remaining: 0 });
        // 2 ms later: 2 ops refill A directly, and the backlog moves B too.
        assert_eq!(
            p.check(&mut s, 2_000_000, 4),
            Verdict::Admit { remaining: 0 }
        );
        // Strict ratio and no backlog: only A.
        let strict = TokenPool::new(spec("1000,2")).with_backlog_cap(Duration::ZERO);
        let mut s = strict.new_state(0);
        assert!(strict.check(&mut s, 0, 4).is_admitted());
        assert!(!strict.check(&mut s, 2_000_000, 4).is_admitted());
        assert!(strict.check(&mut s, 2_000_000, 2).is_admitted());
    }

    #[test]
    fn post_accounting_debt_is_repaid_before_new_requests() {
        let p = TokenPool::new(spec("1000,1")).with_backlog_cap(Duration::ZERO);
        let mut s = p.new_state(0);
        assert_eq!(p.check(&mut s, 0, 1), Verdict::Admit { remaining: 1 });
        // The request really cost 4: 1 more from the pool, 2 as debt.
        p.settle(&mut s, 0, 3);
        assert_eq!(s.debt, 2 * TOKENS_PER_OP);
        assert_eq!(
            p.check(&mut s, 0, 1),
            Verdict::Reject {
                retry_after_ns: 3_000_000
            }
        );
        assert!(!p.check(&mut s, 2_999_999, 1).is_admitted());
        assert!(p.check(&mut s, 3_000_000, 1).is_admitted());
        // A refund returns tokens, up to the pool's capacity.
        p.settle(&mut s, 3_000_000, -5);
        assert_eq!(
            p.check(&mut s, 3_000_000, 2),
            Verdict::Admit { remaining: 0 }
        );
    }

    /// The core's pool, driven from absolute time with no carry: the
    /// tokens for `(t0, t]` are `floor((t - t0) r) - floor((last - t0) r)`.
    struct Reference {
        pool: Pool,
        t0: u64,
        last: u64,
    }

    proptest! {
        /// The lazily evaluated pool matches the core's arithmetic applied
        /// to absolute-time token counts, decision for decision.
        #[test]
        fn matches_the_core_pool_on_absolute_time(
            rate in 1u64..100_000,
            ratio_pct in 100u64..400,
            steps in proptest::collection::vec((0u64..5_000_000, 1u64..6), 1..80),
        ) {
            let spec = RateSpec::new(rate as f64).unwrap()
                .with_burst_ratio(ratio_pct as f64 / 100.0).unwrap();
            let p = TokenPool::new(spec);
            let mut s = p.new_state(7);
            let mut r = Reference { pool: p.new_state(7).pool(), t0: 7, last: 7 };
            let mut now = 7u64;
            for (dt, cost) in steps {
                now += dt;
                let v = p.check(&mut s, now, cost);
                let f = p.meter.tokens_floor(now - r.t0) - p.meter.tokens_floor(r.last - r.t0);
                r.last = now;
                if f > 0 {
                    r.pool.fill(f, &p.sizing);
                    r.pool.cap_waiting(Some(p.backlog_cap));
                }
                let need = cost * TOKENS_PER_OP;
                let admitted = need <= p.sizing.max_over() && r.pool.active >= need;
                if admitted { r.pool.active -= need; }
                prop_assert_eq!(v.is_admitted(), admitted);
                prop_assert_eq!(s.pool(), r.pool);
            }
        }

        /// With ratio 1 and no backlog the pool is a classic token bucket
        /// of capacity A refilled at the rate (checked in whole ops at a
        /// rate of 1000/s, where an op is exactly 1 ms).
        #[test]
        fn strict_pool_is_a_classic_token_bucket(
            steps in proptest::collection::vec((0u64..4, 1u64..3), 1..100),
        ) {
            let p = TokenPool::new(RateSpec::new(1000.0).unwrap().with_burst_ratio(1.0).unwrap())
                .with_backlog_cap(Duration::ZERO);
            let mut s = p.new_state(0);
            let (mut level, mut now) = (2u64, 0u64);
            for (ms, cost) in steps {
                now += ms * 1_000_000;
                level = (level + ms).min(2);
                let admitted = level >= cost;
                if admitted { level -= cost; }
                prop_assert_eq!(p.check(&mut s, now, cost).is_admitted(), admitted);
            }
        }

        /// A rejection's retry time admits the same cost if nothing else
        /// arrives, and a state idle for `idle_ns` equals a fresh one.
        #[test]
        fn retry_after_admits_and_idle_state_is_fresh(
            rate in 1u64..1_000_000,
            ratio_pct in 100u64..400,
            steps in proptest::collection::vec((0u64..3_000_000, 1u64..8), 1..40),
        ) {
            let spec = RateSpec::new(rate as f64).unwrap()
                .with_burst_ratio(ratio_pct as f64 / 100.0).unwrap();
            let p = TokenPool::new(spec);
            let mut s = p.new_state(0);
            let mut now = 0u64;
            for (dt, cost) in steps {
                now += dt;
                if let Verdict::Reject { retry_after_ns } = p.check(&mut s, now, cost) {
                    if retry_after_ns != u64::MAX {
                        let mut later = s.clone();
                        prop_assert!(p.check(&mut later, now + retry_after_ns, cost).is_admitted());
                    }
                }
            }
            let idle = now + p.idle_ns();
            p.advance(&mut s, idle);
            let mut fresh = p.new_state(idle);
            fresh.carry = s.carry;
            prop_assert_eq!(s, fresh);
        }
    }
}
