//! Time sources for the limiter: a monotonic nanosecond clock, injectable.
//!
//! The limiter never reads time on the acquire fast path; it reads its clock
//! when it fills the pool (the filler thread, or a caller doing the filler's
//! late work). Tests inject a [`ManualClock`] and assert exact token
//! arithmetic instead of wall-clock timings.

use std::fmt;

use crate::sync::{Arc, AtomicU64, Ordering};

#[cfg(any(target_os = "linux", target_os = "android"))]
mod coarse;

#[cfg(any(target_os = "linux", target_os = "android"))]
pub use self::coarse::CoarseClock;

/// A monotonic clock in nanoseconds since an arbitrary origin.
///
/// Implementations must never go backwards; the limiter treats a reading
/// below the previous one as no time passing.
pub trait Clock: Send + Sync + fmt::Debug + 'static {
    /// Nanoseconds since this clock's origin.
    fn now_ns(&self) -> u64;

    /// The step in which the clock moves, in nanoseconds (default 1).
    ///
    /// Time from a clock with a coarse step arrives in chunks of a whole
    /// step, so pools that must take in one chunk without spilling are
    /// sized to cover at least one and a half steps: the
    /// [`RateLimiter`](crate::RateLimiter) fills no more often than once a
    /// step, and the throttler's token pools widen their active pools.
    fn resolution_ns(&self) -> u64 {
        1
    }
}

/// The default clock: the CPU's time-stamp counter through `quanta`,
/// calibrated against the OS monotonic clock (about 10 ns a read).
///
/// On some machines (a KVM guest, for one) a counter read waits for the
/// loads issued before it to complete, so a read right after a cache miss
/// costs the miss's whole latency. Where every decision reads the clock
/// and touches memory no cache holds (a throttler with a million keys),
/// [`CoarseClock`] avoids that wait.
#[derive(Debug, Clone)]
pub struct SystemClock {
    clock: quanta::Clock,
    origin: quanta::Instant,
}

impl SystemClock {
    /// A clock whose origin is now.
    pub fn new() -> SystemClock {
        let clock = quanta::Clock::new();
        let origin = clock.now();
        SystemClock { clock, origin }
    }
}

impl Default for SystemClock {
    fn default() -> SystemClock {
        SystemClock::new()
    }
}

impl Clock for SystemClock {
    fn now_ns(&self) -> u64 {
        let elapsed = self.clock.now().saturating_duration_since(self.origin);
        u64::try_from(elapsed.as_nanos()).unwrap_or(u64::MAX)
    }
}

/// A clock that moves only when told to: for tests and simulations.
///
/// Clones share the same time, so a test keeps one handle and gives the
/// limiter another.
///
/// # Examples
///
/// ```
/// use tollgate::{Clock, ManualClock};
/// use std::time::Duration;
///
/// let clock = ManualClock::new();
/// clock.advance(Duration::from_millis(3));
/// assert_eq!(clock.now_ns(), 3_000_000);
/// ```
#[derive(Debug, Clone)]
pub struct ManualClock {
    ns: Arc<AtomicU64>,
}

impl ManualClock {
    /// A clock at time zero.
    pub fn new() -> ManualClock {
        ManualClock {
            ns: Arc::new(AtomicU64::new(0)),
        }
    }

    /// Moves time forward by `by` (saturating at `u64::MAX` ns).
    pub fn advance(&self, by: std::time::Duration) {
        let by = u64::try_from(by.as_nanos()).unwrap_or(u64::MAX);
        // Relaxed: the clock's value carries no other data; readers only
        // need to see some recent value, and the limiter orders its own
        // state under its fill lock.
        let _ = self
            .ns
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |t| {
                Some(t.saturating_add(by))
            });
    }

    /// Sets the time, in nanoseconds since the origin. Moving it backwards
    /// is allowed but the limiter sees no time pass until it catches up.
    pub fn set_ns(&self, ns: u64) {
        // Relaxed: as in `advance`.
        self.ns.store(ns, Ordering::Relaxed);
    }
}

impl Default for ManualClock {
    fn default() -> ManualClock {
        ManualClock::new()
    }
}

impl Clock for ManualClock {
    fn now_ns(&self) -> u64 {
        // Relaxed: pairs with the Relaxed writes in `advance`/`set_ns`; no
        // other memory is published through the clock.
        self.ns.load(Ordering::Relaxed)
    }
}
