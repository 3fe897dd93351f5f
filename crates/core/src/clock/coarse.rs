//! [`CoarseClock`]: the kernel's coarse monotonic clock.

use super::Clock;

/// The kernel's coarse monotonic clock (`CLOCK_MONOTONIC_COARSE`): the
/// time of the last timer tick, read from memory the kernel shares with
/// the process, so a read costs a few nanoseconds and never waits for the
/// time-stamp counter. It moves in steps of one tick (1 ms to 10 ms, by
/// the kernel's `HZ`; [`resolution_ns`](Clock::resolution_ns) says which)
/// and costs nothing while idle: no thread refreshes it.
///
/// Linux only. Meant for a throttler deciding millions of times a second
/// on keys spread wider than the caches. Limits then move in steps of a
/// tick: pools widen to cover a step and a half so that rates hold, and a
/// key may see up to one step's worth of rate more at once.
///
/// # Examples
///
/// ```
/// use tollgate::{Clock, CoarseClock};
///
/// let clock = CoarseClock::new();
/// let step = clock.resolution_ns();
/// assert!((1..=100_000_000).contains(&step));
/// let (a, b) = (clock.now_ns(), clock.now_ns());
/// assert!(b >= a);
/// ```
#[derive(Debug, Clone)]
pub struct CoarseClock {
    id: libc::clockid_t,
    origin_ns: u64,
    resolution_ns: u64,
}

impl CoarseClock {
    /// A clock whose origin is now. On a kernel without the coarse clock
    /// (before Linux 2.6.32) it reads `CLOCK_MONOTONIC` instead.
    pub fn new() -> CoarseClock {
        let (id, resolution_ns) = match resolution(libc::CLOCK_MONOTONIC_COARSE) {
            Some(step) => (libc::CLOCK_MONOTONIC_COARSE, step),
            None => (libc::CLOCK_MONOTONIC, 1),
        };
        CoarseClock {
            id,
            origin_ns: read(id).unwrap_or(0),
            resolution_ns,
        }
    }
}

impl Default for CoarseClock {
    fn default() -> CoarseClock {
        CoarseClock::new()
    }
}

impl Clock for CoarseClock {
    fn now_ns(&self) -> u64 {
        // The monotonic clocks cannot fail once `new` has read one.
        read(self.id)
            .unwrap_or(self.origin_ns)
            .saturating_sub(self.origin_ns)
    }

    fn resolution_ns(&self) -> u64 {
        self.resolution_ns
    }
}

/// The clock's step, if the kernel has the clock.
fn resolution(id: libc::clockid_t) -> Option<u64> {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec for the duration of the
    // call; clock_getres writes only to it.
    let rc = unsafe { libc::clock_getres(id, &mut ts) };
    (rc == 0).then(|| nanos(&ts).max(1))
}

/// The clock's time in nanoseconds, if the kernel has the clock.
fn read(id: libc::clockid_t) -> Option<u64> {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: as in `resolution`; clock_gettime writes only to `ts`.
    let rc = unsafe { libc::clock_gettime(id, &mut ts) };
    (rc == 0).then(|| nanos(&ts))
}

fn nanos(ts: &libc::timespec) -> u64 {
    let secs = u64::try_from(ts.tv_sec).unwrap_or(0);
    let nanos = u64::try_from(ts.tv_nsec).unwrap_or(0);
    secs.saturating_mul(1_000_000_000).saturating_add(nanos)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn it_reports_the_kernels_tick_and_never_goes_back() {
        let clock = CoarseClock::new();
        assert_eq!(clock.id, libc::CLOCK_MONOTONIC_COARSE);
        assert_eq!(Some(clock.resolution_ns()), resolution(clock.id));
        let mut last = clock.now_ns();
        for _ in 0..10_000 {
            let now = clock.now_ns();
            assert!(now >= last);
            last = now;
        }
    }
}
