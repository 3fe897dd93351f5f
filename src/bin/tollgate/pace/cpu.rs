//! The process's CPU time, from `getrusage`.

use std::ops::Sub;
use std::time::Duration;

/// User and system CPU time of every thread of the process.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct CpuTime {
    pub(super) user: Duration,
    pub(super) system: Duration,
}

impl CpuTime {
    /// CPU time used so far by the whole process (all threads, the
    /// limiter's filler included), to microsecond resolution.
    pub(super) fn of_process() -> CpuTime {
        // SAFETY: an all-zero `rusage` is a valid value of the plain C struct.
        let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
        // SAFETY: `usage` is a valid, writable `rusage`; RUSAGE_SELF is a
        // valid `who`. getrusage cannot fail with these arguments.
        let rc = unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) };
        if rc != 0 {
            return CpuTime::default();
        }
        CpuTime {
            user: timeval(usage.ru_utime),
            system: timeval(usage.ru_stime),
        }
    }

    pub(super) fn total(&self) -> Duration {
        self.user + self.system
    }
}

fn timeval(tv: libc::timeval) -> Duration {
    let secs = u64::try_from(tv.tv_sec).unwrap_or(0);
    let micros = u32::try_from(tv.tv_usec).unwrap_or(0);
    Duration::from_secs(secs) + Duration::from_micros(u64::from(micros))
}

impl Sub for CpuTime {
    type Output = CpuTime;

    fn sub(self, earlier: CpuTime) -> CpuTime {
        CpuTime {
            user: self.user.saturating_sub(earlier.user),
            system: self.system.saturating_sub(earlier.system),
        }
    }
}
