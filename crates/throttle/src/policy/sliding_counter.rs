//! [`SlidingWindowCounter`]: the fixed windows' two latest counters,
//! weighted by how much of the previous window the sliding window still
//! covers.
//!
//! # Implementation notes
//!
//! With the current window `[k W, (k + 1) W)`, `r = t - k W` the position
//! in it, `cur` and `prev` the cost admitted in this window and the one
//! before, the estimate of the cost in the window `(t - W, t]` is
//!
//! ```text
//! estimate = cur + floor(prev * (W - r) / W)
//! ```
//!
//! (the previous window's count weighted by its overlap, rounded down, in
//! exact integers). A request of cost `c` is admitted iff
//! `estimate + c <= limit`. With 5 in the previous minute, 3 in this one and
//! a request 30% into it: `3 + floor(5 * 0.7) = 6`, and `6 + 1 <= 7` admits
//! it under a limit of 7.
//!
//! The retry time is exact: the earliest `r' >= r` with
//! `floor(prev (W - r') / W) <= limit - c - cur` is
//! `W - floor(((limit - c - cur + 1) W - 1) / prev)`; if that is not in
//! this window, the same formula on the next window (where `prev` becomes
//! `cur` and `cur` zero). A cost above the limit is never admitted.

use std::time::Duration;

use super::fixed_window::window_ns;
use super::{sat_u64, LimitKey, Policy, Standing, Verdict};
use crate::error::ValueError;

/// At most `limit` units of cost per window, estimated over a sliding
/// window from two fixed-window counters.
///
/// # Examples
///
/// ```
/// use tollgate_throttle::{Policy, SlidingWindowCounter, Verdict};
/// use std::time::Duration;
///
/// let minute = 60_000_000_000u64;
/// let policy = SlidingWindowCounter::new(7, Duration::from_secs(60))?;
/// let mut key = policy.new_state(0);
/// assert!(policy.check(&mut key, 0, 5).is_admitted());
/// // 20% into the next minute the previous one still weighs 4: 3 fit.
/// assert!(policy.check(&mut key, minute + minute / 5, 3).is_admitted());
/// // 30% into the minute: 3 + floor(5 * 0.7) = 6 counted; one more fits.
/// let t = minute + minute * 3 / 10;
/// assert_eq!(policy.check(&mut key, t, 1), Verdict::Admit { remaining: 0 });
/// # Ok::<(), tollgate_throttle::ValueError>(())
/// ```
#[derive(Debug, Clone)]
pub struct SlidingWindowCounter {
    pub(crate) limit: u64,
    pub(crate) window_ns: u64,
}

/// The state of one key under [`SlidingWindowCounter`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SlidingWindowCounterState {
    index: u64,
    prev: u64,
    cur: u64,
}

impl SlidingWindowCounterState {
    /// The state the Redis store holds in these fields.
    pub(crate) fn from_parts(index: u64, prev: u64, cur: u64) -> SlidingWindowCounterState {
        SlidingWindowCounterState { index, prev, cur }
    }
}

impl SlidingWindowCounter {
    /// At most `limit` units of cost in any `window`, estimated.
    ///
    /// # Errors
    ///
    /// A zero limit or window, or a window of 2^64 ns or more.
    pub fn new(limit: u64, window: Duration) -> Result<SlidingWindowCounter, ValueError> {
        if limit == 0 {
            return Err(ValueError::limit("a limit of zero admits nothing"));
        }
        Ok(SlidingWindowCounter {
            limit,
            window_ns: window_ns(window)?,
        })
    }

    /// What tells this limit apart from another on reload.
    pub(crate) fn key(&self) -> LimitKey {
        LimitKey::SlidingWindowCounter {
            limit: self.limit,
            window_ns: self.window_ns,
        }
    }

    /// Moves the state to `now`'s window; returns the position in it.
    fn roll(&self, s: &mut SlidingWindowCounterState, now_ns: u64) -> u64 {
        let index = now_ns / self.window_ns;
        // `index - s.index`, not `s.index + 1`: the timeline's last window
        // has no next index.
        if index > s.index {
            let prev = if index - s.index == 1 { s.cur } else { 0 };
            *s = SlidingWindowCounterState {
                index,
                prev,
                cur: 0,
            };
        }
        now_ns.max(s.index * self.window_ns) - s.index * self.window_ns
    }

    fn weighted(&self, prev: u64, r: u64) -> u64 {
        let w = u128::from(self.window_ns);
        sat_u64(u128::from(prev) * (w - u128::from(r)) / w)
    }

    /// The earliest position `r' >= r` at which `floor(prev (W - r') / W)`
    /// is at most `m`, or `W` if none in this window.
    fn first_fit(&self, prev: u64, m: u64, r: u64) -> u64 {
        if self.weighted(prev, r) <= m {
            return r;
        }
        let w = u128::from(self.window_ns);
        let span = ((u128::from(m) + 1) * w - 1) / u128::from(prev);
        sat_u64(w.saturating_sub(span)).max(r)
    }
}

impl Policy for SlidingWindowCounter {
    type State = SlidingWindowCounterState;

    fn new_state(&self, now_ns: u64) -> SlidingWindowCounterState {
        SlidingWindowCounterState {
            index: now_ns / self.window_ns,
            prev: 0,
            cur: 0,
        }
    }

    fn check(&self, s: &mut SlidingWindowCounterState, now_ns: u64, cost: u64) -> Verdict {
        if cost > self.limit {
            return Verdict::Reject {
                retry_after_ns: u64::MAX,
            };
        }
        let r = self.roll(s, now_ns);
        let estimate = s.cur.saturating_add(self.weighted(s.prev, r));
        if estimate.saturating_add(cost) <= self.limit {
            s.cur += cost;
            return Verdict::Admit {
                remaining: self.limit - estimate - cost,
            };
        }
        let m = self.limit - cost;
        let w = self.window_ns;
        if s.cur <= m {
            let fit = self.first_fit(s.prev, m - s.cur, r);
            if fit < w {
                return Verdict::Reject {
                    retry_after_ns: fit - r,
                };
            }
        }
        // In the next window `cur` becomes `prev` and nothing is current.
        let fit = self.first_fit(s.cur, m, 0).min(w);
        Verdict::Reject {
            retry_after_ns: w - r + fit,
        }
    }

    fn settle(&self, s: &mut SlidingWindowCounterState, now_ns: u64, delta: i64) {
        self.roll(s, now_ns);
        s.cur = if delta >= 0 {
            s.cur.saturating_add(delta.unsigned_abs())
        } else {
            s.cur.saturating_sub(delta.unsigned_abs())
        };
    }

    fn quota(&self) -> u64 {
        self.limit
    }

    fn window_ns(&self) -> u64 {
        self.window_ns
    }

    fn standing(&self, s: &SlidingWindowCounterState, now_ns: u64) -> Standing {
        let mut s = *s;
        let r = self.roll(&mut s, now_ns);
        let estimate = s.cur.saturating_add(self.weighted(s.prev, r));
        let w = self.window_ns;
        Standing {
            remaining: self.limit.saturating_sub(estimate),
            // The current count weighs on the next window to its end; the
            // previous one to the end of this one.
            reset_ns: if s.cur > 0 {
                (w - r).saturating_add(w)
            } else if self.weighted(s.prev, r) > 0 {
                w - r
            } else {
                0
            },
        }
    }

    fn idle_ns(&self) -> u64 {
        self.window_ns.saturating_mul(2)
    }
}
