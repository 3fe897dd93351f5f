//! The [`Policy`] trait: one rate-limiting algorithm applied to the small
//! state of one key, and its [`Verdict`].
//!
//! # Implementation notes
//!
//! A policy holds the configuration shared by every key of a rule; the
//! per-key `State` is a plain value the keyed store keeps under its shard
//! lock, so a policy is pure arithmetic on `(state, now, cost)`: no atomics,
//! no clock, no allocation beyond the state's own (the sliding log's ring).
//! Tests drive it with explicit nanosecond times and assert exact numbers.
//!
//! The five policies live in `policy/`, one file each: the core's token
//! pool, GCRA, the fixed window, the sliding log and the sliding window
//! counter.
//!
//! Contracts every policy keeps (the property tests check them):
//!
//! - A rejected check leaves the state as a check never made, except where
//!   the policy documents otherwise (the sliding log can log rejections).
//! - Time never runs backwards: a `now` below the state's last time is
//!   treated as that last time.
//! - A state untouched for [`Policy::idle_ns`] decides exactly like a fresh
//!   one unless it [`owes`](Policy::owes) post-accounted cost, so the keyed
//!   store may evict it then (and only then) without changing any
//!   decision.

use std::fmt;

mod fixed_window;
mod gcra;
mod sliding_counter;
mod sliding_log;
mod token_pool;

pub use fixed_window::{FixedWindow, FixedWindowState};
pub use gcra::{Gcra, GcraState};
pub use sliding_counter::{SlidingWindowCounter, SlidingWindowCounterState};
pub use sliding_log::{SlidingLog, SlidingLogState};
pub use token_pool::{TokenPool, TokenPoolState};

/// What a policy decided for one request of some cost.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Admitted now; `remaining` more units of cost would be admitted now.
    Admit {
        /// Units of cost still available at once after this request.
        remaining: u64,
    },
    /// Admitted, but only after waiting `delay_ns` in the policy's queue;
    /// the cost is already charged.
    Delay {
        /// How long the request must wait before it proceeds.
        delay_ns: u64,
    },
    /// Rejected; nothing was charged.
    Reject {
        /// When a retry of the same cost would be admitted if nothing else
        /// arrives; `u64::MAX` when never (the cost exceeds the policy's
        /// capacity).
        retry_after_ns: u64,
    },
}

impl Verdict {
    /// Whether the request may proceed (now or after a delay).
    pub fn is_admitted(&self) -> bool {
        !matches!(self, Verdict::Reject { .. })
    }
}

/// Where a key stands under a policy at some time: what a client sees in
/// the `RateLimit` field.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Standing {
    /// Units of cost admitted at once now.
    pub remaining: u64,
    /// Nanoseconds until the key holds its whole quota again if nothing
    /// arrives (0: it does now).
    pub reset_ns: u64,
}

/// One rate-limiting algorithm over a per-key state.
///
/// Implementations: [`TokenPool`](super::TokenPool),
/// [`Gcra`](super::Gcra), [`FixedWindow`](super::FixedWindow),
/// [`SlidingLog`](super::SlidingLog),
/// [`SlidingWindowCounter`](super::SlidingWindowCounter).
///
/// # Examples
///
/// ```
/// use tollgate_throttle::{FixedWindow, Policy, Verdict};
/// use std::time::Duration;
///
/// let policy = FixedWindow::new(2, Duration::from_secs(1))?;
/// let mut state = policy.new_state(0);
/// assert!(policy.check(&mut state, 0, 1).is_admitted());
/// assert!(policy.check(&mut state, 10, 1).is_admitted());
/// assert_eq!(
///     policy.check(&mut state, 20, 1),
///     Verdict::Reject { retry_after_ns: 999_999_980 }
/// );
/// # Ok::<(), tollgate_throttle::ValueError>(())
/// ```
pub trait Policy: Send + Sync + fmt::Debug + 'static {
    /// The state of one key.
    type State: Send + fmt::Debug + 'static;

    /// The state of a key first seen at `now_ns`.
    fn new_state(&self, now_ns: u64) -> Self::State;

    /// Decides a request of `cost` units at `now_ns`, charging it if admitted.
    fn check(&self, state: &mut Self::State, now_ns: u64, cost: u64) -> Verdict;

    /// Post-accounting: charges `delta` more units (or refunds `-delta`)
    /// after a request's real cost is known. Never rejects; a charge beyond
    /// what is available becomes debt repaid before later requests.
    fn settle(&self, state: &mut Self::State, now_ns: u64, delta: i64);

    /// The most cost admitted at once from a fresh state (the burst or the
    /// window's limit): the quota a client sees in `RateLimit-Policy`.
    fn quota(&self) -> u64;

    /// The time over which [`quota`](Policy::quota) applies, the `w` of
    /// `RateLimit-Policy`: a window's length; for a bucket, the time it
    /// takes to refill its quota from empty.
    fn window_ns(&self) -> u64;

    /// Where `state` stands at `now_ns` (without changing it).
    fn standing(&self, state: &Self::State, now_ns: u64) -> Standing;

    /// The most cost one request may have and ever be admitted (at once or
    /// after a delay); a dearer request is rejected with a retry time of
    /// `u64::MAX`. The default: [`quota`](Policy::quota).
    fn max_cost(&self) -> u64 {
        self.quota()
    }

    /// After this long untouched a state without debt decides exactly like
    /// a fresh one. A state that [`owes`](Policy::owes) needs longer: its
    /// debt is repaid first.
    fn idle_ns(&self) -> u64;

    /// Whether `state` still owes post-accounted cost ([`settle`](Policy::settle)
    /// beyond what it held) at `now_ns`, so that it would not yet decide
    /// like a fresh one however long it has been idle. The keyed store never
    /// drops an idle state that owes. The default, for policies whose
    /// [`idle_ns`](Policy::idle_ns) already covers any charge: `false`.
    fn owes(&self, state: &Self::State, now_ns: u64) -> bool {
        let _ = (state, now_ns);
        false
    }
}

/// What tells one limit from another on reload: its policy and every
/// parameter of it. Two limits with equal keys decide alike.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum LimitKey {
    TokenPool {
        nano_ops_per_sec: u128,
        burst_ppm: u64,
        active: u64,
        burst: u64,
        backlog_cap: u128,
    },
    Gcra {
        nano_ops_per_sec: u128,
        burst: u64,
        queue: u64,
    },
    FixedWindow {
        limit: u64,
        window_ns: u64,
    },
    SlidingLog {
        limit: u64,
        window_ns: u64,
        log_rejected: bool,
    },
    SlidingWindowCounter {
        limit: u64,
        window_ns: u64,
    },
}

/// Rounds `ns` (a `u128`) into a `u64`, saturating.
pub(crate) fn sat_u64(ns: u128) -> u64 {
    u64::try_from(ns).unwrap_or(u64::MAX)
}
