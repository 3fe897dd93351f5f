//! Tokens, the limiter's currency, and their exact conversion from time.
//!
//! # Implementation notes
//!
//! A token is a fixed slice of one op's schedule time: `1 / 2^20` of an op,
//! i.e. `1e9 / (rate * 2^20)` nanoseconds. Counting schedule time in
//! op-slices instead of whole nanoseconds makes the cost of an op an exact
//! integer (`TOKENS_PER_OP`) at every rate from 0.001 to 1e12 ops/s, so no
//! per-op rounding exists to drift.
//!
//! Time enters only through [`Meter::tokens_for`], which turns elapsed
//! nanoseconds into tokens with the exact rational `rate * 2^20 / 1e18`
//! (rate held as nano-ops per second) and carries the remainder from one
//! call to the next: after any sequence of calls the total handed out is
//! `floor(total_ns * rate * 2^20 / 1e18)`, never less, never more.
//!
//! Ranges: the active pool at 1e12 ops/s with a burst ratio of 1000 is about
//! 2^60 tokens, inside `u64`; the waiting pool is a `u128`.

/// log2 of the tokens one op costs.
pub(crate) const TOKEN_SHIFT: u32 = 20;
/// The tokens one op costs, at every rate.
pub const TOKENS_PER_OP: u64 = 1 << TOKEN_SHIFT;
/// The largest weight one acquire may ask for: its tokens must fit in 63 bits.
pub const MAX_OPS_PER_ACQUIRE: u64 = (1 << (63 - TOKEN_SHIFT)) - 1;

const NANOS_PER_SEC: u128 = 1_000_000_000;
/// Nano-ops per second times nanoseconds per second: the converter's denominator.
const DENOMINATOR: u128 = NANOS_PER_SEC * NANOS_PER_SEC;

/// Tokens for a weight of `n` ops. `n` must be at most [`MAX_OPS_PER_ACQUIRE`].
pub(crate) fn tokens_for_ops(n: u64) -> u64 {
    debug_assert!(n <= MAX_OPS_PER_ACQUIRE);
    n << TOKEN_SHIFT
}

/// Converts between nanoseconds and tokens at one rate, exactly.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Meter {
    /// Whole tokens per nanosecond.
    whole: u128,
    /// The fractional tokens per nanosecond, as `fraction / den`.
    fraction: u128,
    /// Tokens per nanosecond is `(whole * den + fraction) / den`; `den` <= 1e18.
    den: u128,
    /// Nano-ops per second, kept to rescale tokens between rates.
    nano_ops_per_sec: u128,
}

fn gcd(mut a: u128, mut b: u128) -> u128 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

impl Meter {
    /// A meter for a rate given in nano-ops per second (> 0).
    pub fn new(nano_ops_per_sec: u128) -> Meter {
        assert!(nano_ops_per_sec > 0, "a rate must be positive");
        let num = nano_ops_per_sec << TOKEN_SHIFT;
        let g = gcd(num, DENOMINATOR);
        let (num, den) = (num / g, DENOMINATOR / g);
        Meter {
            whole: num / den,
            fraction: num % den,
            den,
            nano_ops_per_sec,
        }
    }

    /// The exact rate: `(whole, fraction, den)`, tokens per nanosecond
    /// being `whole + fraction / den` (what the Redis stores' scripts
    /// meter with, so they count tokens as the core does).
    pub fn parts(&self) -> (u128, u128, u128) {
        (self.whole, self.fraction, self.den)
    }

    /// Tokens for `ns` nanoseconds, adding to and updating the remainder
    /// `carry` (always `< den`), so repeated calls never lose a fraction.
    #[inline]
    pub fn tokens_for(&self, ns: u64, carry: &mut u128) -> u128 {
        let ns = u128::from(ns);
        // ns < 2^64 and fraction < den <= 1e18 < 2^60: the product fits.
        let scaled = ns * self.fraction + *carry;
        *carry = scaled % self.den;
        ns * self.whole + scaled / self.den
    }

    /// Tokens for `ns` nanoseconds, rounded down, without a carry.
    #[inline]
    pub fn tokens_floor(&self, ns: u64) -> u128 {
        self.tokens_for(ns, &mut 0)
    }

    /// Nanoseconds that `tokens` stand for, rounded down, saturating at
    /// `u64::MAX`.
    #[inline]
    pub fn nanos_for(&self, tokens: u128) -> u64 {
        let num = self.whole * self.den + self.fraction;
        let ns = match tokens.checked_mul(self.den) {
            Some(product) => product / num,
            None => (tokens as f64 * self.den as f64 / num as f64) as u128,
        };
        u64::try_from(ns).unwrap_or(u64::MAX)
    }

    /// Rescales `tokens` of this meter into tokens of `to` standing for the
    /// same time, rounded down (exact while the product fits in 128 bits,
    /// within f64 precision beyond).
    #[inline]
    pub fn rescale(&self, tokens: u128, to: &Meter) -> u128 {
        mul_div(tokens, to.nano_ops_per_sec, self.nano_ops_per_sec)
    }
}

/// `a * b / c` rounded down, falling back to f64 when the product overflows.
#[inline]
pub(crate) fn mul_div(a: u128, b: u128, c: u128) -> u128 {
    match a.checked_mul(b) {
        Some(product) => product / c,
        None => (a as f64 * (b as f64 / c as f64)) as u128,
    }
}

/// The pool sizes for one spec, in tokens (`docs/design/token-pool.md` §2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sizing {
    /// `A`: the active pool's capacity, `max(1 ms, 2 ops)` of schedule.
    pub active: u64,
    /// `B`: the burst headroom above `A`, `A * (burst_ratio - 1)`.
    pub burst: u64,
}

/// The active pool holds at least this much schedule time.
const MIN_ACTIVE_NS: u64 = 1_000_000;

impl Sizing {
    /// Sizes for a meter and a burst ratio in parts per million (>= 1e6).
    pub fn new(meter: &Meter, burst_ppm: u64) -> Sizing {
        let one_ms = meter.tokens_floor(MIN_ACTIVE_NS);
        let two_ops = u128::from(2 * TOKENS_PER_OP);
        // A spec is at most 1e12 ops/s and ratio 1000: A + B < 2^61.
        Sizing::with_active(one_ms.max(two_ops), burst_ppm)
    }

    /// These sizes with the active pool widened, if need be, to cover one
    /// and a half times `step_ns` (a fill interval, a clock's step), so
    /// that time arriving a step at a time, up to half a step late, fits
    /// instead of spilling into the backlog. The burst headroom keeps its
    /// ratio to the active pool.
    pub fn covering(self, meter: &Meter, burst_ppm: u64, step_ns: u64) -> Sizing {
        let span = step_ns.saturating_add(step_ns / 2);
        let wide = meter.tokens_floor(span);
        if wide <= u128::from(self.active) {
            return self;
        }
        Sizing::with_active(wide, burst_ppm)
    }

    /// An active pool of `active` tokens and its burst headroom, each
    /// kept below 2^61 so that `A + B` stays below 2^62.
    fn with_active(active: u128, burst_ppm: u64) -> Sizing {
        let clamp = |v: u128| u64::try_from(v).unwrap_or(u64::MAX).min(u64::MAX >> 3);
        let active = clamp(active);
        let extra_ppm = u128::from(burst_ppm.saturating_sub(1_000_000));
        Sizing {
            active,
            burst: clamp(mul_div(u128::from(active), extra_ppm, 1_000_000)),
        }
    }

    /// `A + B`: the most the active pool can hold while catching up.
    #[inline]
    pub fn max_over(&self) -> u64 {
        self.active + self.burst
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NANO: u128 = 1_000_000_000;

    #[test]
    fn an_op_of_time_is_exactly_one_op_of_tokens() {
        for ops in [1u128, 3, 7, 1000, 300_000_000, 1_000_000_000_000] {
            let meter = Meter::new(ops * NANO);
            // One second is exactly `rate` ops.
            assert_eq!(meter.tokens_floor(1_000_000_000), ops << TOKEN_SHIFT);
        }
    }

    #[test]
    fn three_hundred_million_per_second_is_not_rounded_to_three_nanoseconds() {
        let meter = Meter::new(300_000_000 * NANO);
        let mut carry = 0;
        let total: u128 = (0..1000)
            .map(|_| meter.tokens_for(1_000_000, &mut carry))
            .sum();
        assert_eq!(total >> TOKEN_SHIFT, 300_000_000);
    }

    #[test]
    fn the_carry_loses_nothing_over_odd_steps() {
        // 0.001 ops/s, 7 ops/s and a rate with a long fraction.
        for nano_ops in [1_000_000u128, 7 * NANO, 333_333_333_333_333] {
            let meter = Meter::new(nano_ops);
            let mut carry = 0;
            let mut total = 0u128;
            let mut ns_total = 0u128;
            for step in 1..2000u64 {
                let ns = step * 7919 % 100_003;
                total += meter.tokens_for(ns, &mut carry);
                ns_total += u128::from(ns);
            }
            let exact = ns_total * (nano_ops << TOKEN_SHIFT) / DENOMINATOR;
            assert_eq!(total, exact);
        }
    }

    #[test]
    fn nanos_round_trip() {
        let meter = Meter::new(10_000_000 * NANO);
        // 1 ns is 10485.76 tokens here: the floor loses under one ns.
        let tokens = meter.tokens_floor(123_456_789);
        assert_eq!(meter.nanos_for(tokens), 123_456_788);
        assert_eq!(meter.nanos_for(tokens + 1), 123_456_789);
        assert_eq!(meter.nanos_for(u128::MAX), u64::MAX);
    }

    #[test]
    fn sizing_follows_the_spec() {
        // 1e7 ops/s, burst 1.1: A = 1 ms, B = 0.1 ms.
        let meter = Meter::new(10_000_000 * NANO);
        let s = Sizing::new(&meter, 1_100_000);
        assert_eq!(u128::from(s.active), meter.tokens_floor(1_000_000));
        assert_eq!(s.active, 10_000 * TOKENS_PER_OP);
        assert_eq!(s.burst, 1_000 * TOKENS_PER_OP);
        // 100 ops/s, burst 10: A = two ops, maxOver = 20 ops.
        let s = Sizing::new(&Meter::new(100 * NANO), 10_000_000);
        assert_eq!(s.active, 2 * TOKENS_PER_OP);
        assert_eq!(s.max_over(), 20 * TOKENS_PER_OP);
    }

    #[test]
    fn extreme_rates_fit() {
        let fast = Sizing::new(&Meter::new(1_000_000_000_000 * NANO), 1_000_000_000);
        assert!(fast.max_over() < u64::MAX / 2);
        let slow = Sizing::new(&Meter::new(1_000_000), 1_000_000);
        assert_eq!(slow.active, 2 * TOKENS_PER_OP);
    }
}
