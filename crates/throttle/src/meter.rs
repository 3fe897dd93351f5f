//! [`CostMeter`]: how the layer measures what a request cost, for
//! post-accounting.
//!
//! # Implementation notes
//!
//! The measured cost for post-accounting is, by default, the CPU time the
//! request's work used: the calling thread's CPU clock
//! (`CLOCK_THREAD_CPUTIME_ID`) is read before and after the inner
//! service's `call` and each poll of its future, and the differences are
//! summed until the response head is ready. Time the future spends
//! waiting (on I/O, a lock, a timer) costs nothing, and work other requests do on the same thread
//! between polls is not charged to it. [`CostMeter::wall`] measures wall
//! time to the response head instead. Either is converted to whole cost
//! units, rounded up, at least one. Work done while the response body
//! streams is not measured. Only a throttler that predicts costs
//! ([`CostModel::Predicted`](crate::CostModel::Predicted)) is measured for;
//! with other cost models the layer reads no clock.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

/// How [`ThrottleLayer`](crate::ThrottleLayer) measures what a request
/// cost, for post-accounting of predicted costs ([`CostModel::Predicted`](crate::CostModel::Predicted)).
///
/// # Examples
///
/// ```
/// use tollgate_throttle::{CostMeter, ThrottleLayer, Throttler};
/// use std::time::Duration;
///
/// // Cost in CPU microseconds of the handler's own work (the default meter).
/// let layer = ThrottleLayer::new(Throttler::builder().build())
///     .cost_meter(CostMeter::thread_cpu())
///     .cost_unit(Duration::from_micros(1));
/// # let _ = layer;
/// ```
#[derive(Clone)]
pub struct CostMeter {
    kind: MeterKind,
}

#[derive(Clone)]
enum MeterKind {
    ThreadCpu,
    Wall,
    Custom(Arc<dyn Fn() -> Duration + Send + Sync>),
}

impl CostMeter {
    /// The CPU time of the thread that polls the inner service's future,
    /// summed over its polls (the default). Where the platform has no
    /// thread CPU clock, reads as zero and every request costs one unit.
    pub fn thread_cpu() -> CostMeter {
        CostMeter {
            kind: MeterKind::ThreadCpu,
        }
    }

    /// The wall time from calling the inner service to its response head.
    pub fn wall() -> CostMeter {
        CostMeter {
            kind: MeterKind::Wall,
        }
    }

    /// A reading of your own (a monotonic counter as a duration), taken
    /// before and after each poll of the inner service's future, the
    /// differences summed like [`thread_cpu`](CostMeter::thread_cpu)'s.
    /// A reading that goes backwards counts as zero.
    pub fn custom(read: impl Fn() -> Duration + Send + Sync + 'static) -> CostMeter {
        CostMeter {
            kind: MeterKind::Custom(Arc::new(read)),
        }
    }

    pub(crate) fn is_wall(&self) -> bool {
        matches!(self.kind, MeterKind::Wall)
    }

    /// The reading summed around polls, or `None` for wall time.
    pub(crate) fn read(&self) -> Option<Duration> {
        match &self.kind {
            MeterKind::ThreadCpu => Some(thread_cpu_time()),
            MeterKind::Wall => None,
            MeterKind::Custom(read) => Some(read()),
        }
    }
}

impl fmt::Debug for CostMeter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self.kind {
            MeterKind::ThreadCpu => "CostMeter::ThreadCpu",
            MeterKind::Wall => "CostMeter::Wall",
            MeterKind::Custom(_) => "CostMeter::Custom",
        })
    }
}

/// The calling thread's CPU time.
#[cfg(unix)]
fn thread_cpu_time() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec for the duration of the
    // call; clock_gettime writes only to it.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    if rc != 0 {
        return Duration::ZERO;
    }
    Duration::new(
        u64::try_from(ts.tv_sec).unwrap_or(0),
        u32::try_from(ts.tv_nsec).unwrap_or(0),
    )
}

/// No thread CPU clock here: every request measures one unit.
#[cfg(not(unix))]
fn thread_cpu_time() -> Duration {
    Duration::ZERO
}
