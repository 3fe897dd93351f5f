//! Wall-clock time for the lease server, injectable so tests can drive lease
//! expiry and learning mode without sleeping.

use std::fmt::Debug;
use std::sync::Mutex;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::lease::Timestamp;
use crate::service::LockUnpoisoned;

/// A source of Unix time.
///
/// The server stamps leases with it (`expiry_time` on the wire is Unix
/// seconds), so it must be wall-clock time, not a monotonic clock like the
/// limiter's [`Clock`](crate::Clock).
pub trait WallClock: Send + Sync + Debug + 'static {
    /// The time since the Unix epoch.
    fn now(&self) -> Timestamp;
}

/// The system's real-time clock.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemWallClock;

impl WallClock for SystemWallClock {
    fn now(&self) -> Timestamp {
        // A clock set before 1970 reads as the epoch rather than panicking.
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or(Duration::ZERO)
    }
}

/// A clock that moves only when told to; for tests.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use tollgate::doorman::clock::{WallClock, ManualWallClock};
///
/// let clock = ManualWallClock::new(Duration::from_secs(1_000));
/// clock.advance(Duration::from_secs(5));
/// assert_eq!(clock.now(), Duration::from_secs(1_005));
/// ```
#[derive(Debug, Default)]
pub struct ManualWallClock {
    now: Mutex<Timestamp>,
}

impl ManualWallClock {
    /// A clock that reads `start` until advanced.
    pub fn new(start: Timestamp) -> Self {
        ManualWallClock {
            now: Mutex::new(start),
        }
    }

    /// Moves the clock forward by `by`.
    pub fn advance(&self, by: Duration) {
        *self.now.lock_unpoisoned() += by;
    }
}

impl WallClock for ManualWallClock {
    fn now(&self) -> Timestamp {
        *self.now.lock_unpoisoned()
    }
}

impl<C: WallClock> WallClock for std::sync::Arc<C> {
    fn now(&self) -> Timestamp {
        (**self).now()
    }
}
