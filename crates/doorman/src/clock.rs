//! Wall-clock time for the lease server, injectable so tests can drive lease
//! expiry and learning mode without sleeping.

use std::fmt::Debug;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tollgate::{Clock as _, ManualClock, SystemClock};

/// An instant, as the time since an epoch the caller chooses (monotonic or
/// wall clock). The wire has whole seconds; this keeps whatever it is given.
pub(crate) type Timestamp = Duration;

/// A source of Unix time.
///
/// The server and the client stamp leases with it (`expiry_time` on the
/// wire is Unix seconds, read by other machines), so it must be wall-clock
/// time, not a monotonic clock from an arbitrary origin like the
/// limiter's [`Clock`](tollgate::Clock); hence a trait of its own.
pub trait WallClock: Send + Sync + Debug + 'static {
    /// The time since the Unix epoch.
    fn now(&self) -> Timestamp;
}

/// The system's real-time clock: the default of servers and clients.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct SystemWallClock;

impl WallClock for SystemWallClock {
    fn now(&self) -> Timestamp {
        // A clock set before 1970 reads as the epoch rather than panicking.
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or(Duration::ZERO)
    }
}

/// The limiter's system clock reads Unix time from the system's real-time
/// clock (its monotonic reading has an arbitrary origin), so that one clock
/// vocabulary serves the limiter and the lease protocol.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use tollgate_doorman::WallClock;
/// use tollgate::SystemClock;
///
/// // Unix time: after 2020-01-01, not a count from the clock's creation.
/// let unix = WallClock::now(&SystemClock::new());
/// assert!(unix > Duration::from_secs(1_577_836_800));
/// ```
impl WallClock for SystemClock {
    fn now(&self) -> Timestamp {
        SystemWallClock.now()
    }
}

/// The limiter's manual clock reads as Unix time too, so that one clock
/// drives a test's limiters and its lease server alike.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use tollgate_doorman::WallClock;
/// use tollgate::ManualClock;
///
/// let clock = ManualClock::new();
/// clock.advance(Duration::from_secs(1_005));
/// assert_eq!(WallClock::now(&clock), Duration::from_secs(1_005));
/// ```
impl WallClock for ManualClock {
    fn now(&self) -> Timestamp {
        Duration::from_nanos(self.now_ns())
    }
}

impl<C: WallClock> WallClock for std::sync::Arc<C> {
    fn now(&self) -> Timestamp {
        (**self).now()
    }
}
