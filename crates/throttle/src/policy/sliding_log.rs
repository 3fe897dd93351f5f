//! [`SlidingLog`]: a log of request times per key, counted over a window
//! that slides with each request.
//!
//! # Implementation notes
//!
//! A request at `t` counts the logged times `e` with `t - e < W`: the window
//! is `(t - W, t]`, so an entry leaves the window exactly `W` after it was
//! logged. Outdated entries are dropped from the front of the key's FIFO
//! first; a request of cost `c` adds `c` entries and is admitted iff the
//! log then holds at most `limit`.
//!
//! With [`SlidingLog::log_rejected`] a rejected request's times stay in the
//! log as well (the classic formulation: a client that keeps knocking keeps
//! itself out). Memory stays bounded anyway: only the most recent `limit`
//! entries can matter, because the window is a suffix of the timeline, so
//! "at least `limit` entries in the window" is the same as "the
//! `limit`-th most recent entry is in the window". The log is therefore
//! trimmed to `limit` entries and the decisions are exact.
//!
//! A rejected request's retry time is when enough of the oldest entries
//! have left the window for its cost to fit (counting its own logged
//! entries when rejections are logged). A cost above the limit is never
//! admitted and never logged.

use std::collections::VecDeque;
use std::time::Duration;

use super::fixed_window::window_ns;
use super::{LimitKey, Policy, Standing, Verdict};
use crate::error::ValueError;

/// At most `limit` units of cost in any window of length `W` ending now.
///
/// Costs `8 * limit` bytes per key at most.
///
/// # Examples
///
/// ```
/// use tollgate_throttle::{Policy, SlidingLog, Verdict};
/// use std::time::Duration;
///
/// let policy = SlidingLog::new(2, Duration::from_secs(60))?;
/// let mut key = policy.new_state(0);
/// assert!(policy.check(&mut key, 0, 1).is_admitted());
/// assert!(policy.check(&mut key, 30_000_000_000, 1).is_admitted());
/// assert_eq!(
///     policy.check(&mut key, 40_000_000_000, 1),
///     Verdict::Reject { retry_after_ns: 20_000_000_000 }
/// );
/// assert!(policy.check(&mut key, 60_000_000_000, 1).is_admitted());
/// # Ok::<(), tollgate_throttle::ValueError>(())
/// ```
#[derive(Debug, Clone)]
pub struct SlidingLog {
    pub(crate) limit: u64,
    pub(crate) window_ns: u64,
    pub(crate) log_rejected: bool,
}

/// The state of one key under [`SlidingLog`]: the logged times, oldest
/// first, at most `limit` of them.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SlidingLogState {
    log: VecDeque<u64>,
}

impl SlidingLog {
    /// At most `limit` units of cost in any `window`; rejected requests
    /// are not logged.
    ///
    /// # Errors
    ///
    /// A zero limit or window, or a window of 2^64 ns or more.
    pub fn new(limit: u64, window: Duration) -> Result<SlidingLog, ValueError> {
        if limit == 0 {
            return Err(ValueError::limit("a limit of zero admits nothing"));
        }
        if limit > 1 << 24 {
            return Err(ValueError::limit(
                "a sliding log holds at most 2^24 entries per key",
            ));
        }
        Ok(SlidingLog {
            limit,
            window_ns: window_ns(window)?,
            log_rejected: false,
        })
    }

    /// Logs rejected requests too, so they count against later ones.
    pub fn log_rejected(mut self, yes: bool) -> SlidingLog {
        self.log_rejected = yes;
        self
    }

    /// What tells this limit apart from another on reload.
    pub(crate) fn key(&self) -> LimitKey {
        LimitKey::SlidingLog {
            limit: self.limit,
            window_ns: self.window_ns,
            log_rejected: self.log_rejected,
        }
    }

    fn expire(&self, s: &mut SlidingLogState, now_ns: u64) -> u64 {
        let now = now_ns.max(s.log.back().copied().unwrap_or(0));
        while s.log.front().is_some_and(|&e| now - e >= self.window_ns) {
            s.log.pop_front();
        }
        now
    }

    fn push(&self, s: &mut SlidingLogState, now: u64, n: u64) {
        for _ in 0..n {
            s.log.push_back(now);
        }
        while s.log.len() as u64 > self.limit {
            s.log.pop_front();
        }
    }
}

impl Policy for SlidingLog {
    type State = SlidingLogState;

    fn new_state(&self, _now_ns: u64) -> SlidingLogState {
        SlidingLogState::default()
    }

    fn check(&self, s: &mut SlidingLogState, now_ns: u64, cost: u64) -> Verdict {
        if cost > self.limit {
            return Verdict::Reject {
                retry_after_ns: u64::MAX,
            };
        }
        let now = self.expire(s, now_ns);
        let len = s.log.len() as u64;
        if len + cost <= self.limit {
            self.push(s, now, cost);
            return Verdict::Admit {
                remaining: self.limit - len - cost,
            };
        }
        if self.log_rejected {
            self.push(s, now, cost);
        }
        // The oldest `len + cost - limit` entries must leave the window.
        let len = s.log.len() as u64;
        let k = (len + cost - self.limit) as usize;
        let e = s.log[k - 1];
        Verdict::Reject {
            retry_after_ns: e + self.window_ns - now,
        }
    }

    fn settle(&self, s: &mut SlidingLogState, now_ns: u64, delta: i64) {
        let now = self.expire(s, now_ns);
        if delta >= 0 {
            self.push(s, now, delta.unsigned_abs().min(self.limit));
        } else {
            for _ in 0..delta.unsigned_abs().min(self.limit) {
                s.log.pop_back();
            }
        }
    }

    fn quota(&self) -> u64 {
        self.limit
    }

    fn window_ns(&self) -> u64 {
        self.window_ns
    }

    fn standing(&self, s: &SlidingLogState, now_ns: u64) -> Standing {
        let Some(&newest) = s.log.back() else {
            return Standing {
                remaining: self.limit,
                reset_ns: 0,
            };
        };
        let now = now_ns.max(newest);
        // The log is in time order: the expired entries come first.
        let expired = s.log.partition_point(|&e| now - e >= self.window_ns);
        let held = (s.log.len() - expired) as u64;
        Standing {
            remaining: self.limit.saturating_sub(held),
            reset_ns: if held == 0 {
                0
            } else {
                newest + self.window_ns - now
            },
        }
    }

    fn idle_ns(&self) -> u64 {
        self.window_ns
    }
}
