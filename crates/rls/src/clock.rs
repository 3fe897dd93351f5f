//! [`UnixClock`]: wall-clock time since the Unix epoch, the timeline the
//! reference's windows are aligned on.

use std::time::{SystemTime, UNIX_EPOCH};

/// Nanoseconds since 1970-01-01 00:00:00 UTC, from the system's wall
/// clock: windows of a unit start at multiples of its length since then,
/// as the reference's do, so that two servers (or a server and the
/// reference) agree on them.
///
/// A test drives the service with a [`tollgate::ManualClock`] set to a
/// Unix time instead.
///
/// # Examples
///
/// ```
/// use tollgate::Clock;
/// use tollgate_rls::UnixClock;
///
/// // Some time after 2023-11-14.
/// assert!(UnixClock.now_ns() > 1_700_000_000 * 1_000_000_000);
/// ```
#[derive(Debug, Clone, Copy, Default)]
pub struct UnixClock;

impl tollgate::Clock for UnixClock {
    fn now_ns(&self) -> u64 {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
    }
}
