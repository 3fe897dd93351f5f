//! [`FixedWindow`]: a counter per aligned window of time.
//!
//! # Implementation notes
//!
//! Windows are `[k W, (k + 1) W)` on the clock's nanosecond timeline. A key
//! holds its window's index and the cost admitted in it; the first access
//! in a later window starts from zero. A request of cost `c` is admitted
//! iff `count + c <= limit`. A rejected request's retry time is the start of
//! the next window; a cost above the limit is never admitted.
//!
//! The known edge: up to twice the limit passes in one window's length that
//! straddles a boundary (the end of one window and the start of the next);
//! the sliding policies exist for that.

use std::time::Duration;

use super::{LimitKey, Policy, Standing, Verdict};
use crate::error::ValueError;

/// At most `limit` units of cost per aligned window.
///
/// # Examples
///
/// ```
/// use tollgate_throttle::{FixedWindow, Policy, Verdict};
/// use std::time::Duration;
///
/// let policy = FixedWindow::new(3, Duration::from_secs(60))?;
/// let mut key = policy.new_state(0);
/// assert_eq!(policy.check(&mut key, 59_000_000_000, 3), Verdict::Admit { remaining: 0 });
/// // A new window: the full limit again, one second later.
/// assert_eq!(policy.check(&mut key, 60_000_000_000, 3), Verdict::Admit { remaining: 0 });
/// # Ok::<(), tollgate_throttle::ValueError>(())
/// ```
#[derive(Debug, Clone)]
pub struct FixedWindow {
    pub(crate) limit: u64,
    pub(crate) window_ns: u64,
}

/// The state of one key under [`FixedWindow`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct FixedWindowState {
    index: u64,
    count: u64,
}

impl FixedWindowState {
    /// The state the Redis store holds in these fields.
    pub(crate) fn from_parts(index: u64, count: u64) -> FixedWindowState {
        FixedWindowState { index, count }
    }
}

pub(crate) fn window_ns(window: Duration) -> Result<u64, ValueError> {
    match u64::try_from(window.as_nanos()) {
        Ok(0) => Err(ValueError::limit("a window must be longer than zero")),
        Ok(ns) => Ok(ns),
        Err(_) => Err(ValueError::limit("a window must be under 584 years")),
    }
}

impl FixedWindow {
    /// At most `limit` units of cost in each `window`.
    ///
    /// # Errors
    ///
    /// A zero limit or window, or a window of 2^64 ns or more.
    pub fn new(limit: u64, window: Duration) -> Result<FixedWindow, ValueError> {
        if limit == 0 {
            return Err(ValueError::limit("a limit of zero admits nothing"));
        }
        Ok(FixedWindow {
            limit,
            window_ns: window_ns(window)?,
        })
    }

    /// What tells this limit apart from another on reload.
    pub(crate) fn key(&self) -> LimitKey {
        LimitKey::FixedWindow {
            limit: self.limit,
            window_ns: self.window_ns,
        }
    }

    fn roll(&self, s: &mut FixedWindowState, now_ns: u64) -> u64 {
        let index = now_ns / self.window_ns;
        if index > s.index {
            *s = FixedWindowState { index, count: 0 };
        }
        now_ns.max(s.index * self.window_ns)
    }

    /// Where the key's window ends, or `u64::MAX` for the last window of
    /// the timeline, which never ends (its next index does not exist).
    fn window_end(&self, s: &FixedWindowState) -> u64 {
        s.index
            .checked_add(1)
            .map_or(u64::MAX, |next| next.saturating_mul(self.window_ns))
    }
}

impl Policy for FixedWindow {
    type State = FixedWindowState;

    fn new_state(&self, now_ns: u64) -> FixedWindowState {
        FixedWindowState {
            index: now_ns / self.window_ns,
            count: 0,
        }
    }

    fn check(&self, s: &mut FixedWindowState, now_ns: u64, cost: u64) -> Verdict {
        if cost > self.limit {
            return Verdict::Reject {
                retry_after_ns: u64::MAX,
            };
        }
        let now = self.roll(s, now_ns);
        // `checked_add`: a count and a cost each up to a limit above 2^63
        // sum past `u64::MAX`, and such a sum is over any limit.
        match s.count.checked_add(cost) {
            Some(count) if count <= self.limit => {
                s.count = count;
                Verdict::Admit {
                    remaining: self.limit - count,
                }
            }
            _ => Verdict::Reject {
                retry_after_ns: self.window_end(s) - now,
            },
        }
    }

    fn settle(&self, s: &mut FixedWindowState, now_ns: u64, delta: i64) {
        self.roll(s, now_ns);
        s.count = if delta >= 0 {
            s.count.saturating_add(delta.unsigned_abs())
        } else {
            s.count.saturating_sub(delta.unsigned_abs())
        };
    }

    fn quota(&self) -> u64 {
        self.limit
    }

    fn window_ns(&self) -> u64 {
        self.window_ns
    }

    fn standing(&self, s: &FixedWindowState, now_ns: u64) -> Standing {
        let mut s = *s;
        let now = self.roll(&mut s, now_ns);
        Standing {
            remaining: self.limit.saturating_sub(s.count),
            reset_ns: if s.count == 0 {
                0
            } else {
                self.window_end(&s) - now
            },
        }
    }

    fn idle_ns(&self) -> u64 {
        self.window_ns
    }
}
