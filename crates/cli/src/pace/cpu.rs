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

/// Busy and total time of every CPU of the machine, from `/proc/stat`, to
/// tell how much of the machine other processes took during a run.
#[derive(Debug, Clone, Copy)]
pub(super) struct HostCpu {
    busy_ticks: u64,
    total_ticks: u64,
    cpus: usize,
}

impl HostCpu {
    /// `None` where `/proc/stat` is missing or unreadable.
    pub(super) fn now() -> Option<HostCpu> {
        let stat = std::fs::read_to_string("/proc/stat").ok()?;
        let cpus = stat
            .lines()
            .filter(|l| {
                l.strip_prefix("cpu")
                    .is_some_and(|n| n.starts_with(|c: char| c.is_ascii_digit()))
            })
            .count();
        let fields: Vec<u64> = stat
            .lines()
            .next()?
            .strip_prefix("cpu ")?
            .split_whitespace()
            .map(|f| f.parse().ok())
            .collect::<Option<_>>()?;
        // user nice system idle iowait irq softirq steal [guest guest_nice],
        // where guest time is already counted in user and nice.
        let total: u64 = fields.iter().take(8).sum();
        let idle = fields.get(3)? + fields.get(4).copied().unwrap_or(0);
        Some(HostCpu {
            busy_ticks: total - idle,
            total_ticks: total,
            cpus,
        })
    }

    /// Cores the whole machine kept busy between `earlier` and `self`.
    pub(super) fn busy_cores_since(&self, earlier: &HostCpu) -> f64 {
        let busy = self.busy_ticks.saturating_sub(earlier.busy_ticks) as f64;
        let total = self.total_ticks.saturating_sub(earlier.total_ticks) as f64;
        if total == 0.0 {
            return 0.0;
        }
        busy / total * self.cpus as f64
    }
}
