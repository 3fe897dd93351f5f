//! How many caller threads this process can start, checked before the run.
//!
//! # Implementation notes
//!
//! A thread that cannot be created is a clean error (`pthread_create`
//! fails and pace stops the threads it started), but one created when the
//! process is at the edge of its memory maps is not: the standard library
//! maps each new thread's signal stack in the thread itself, and when that
//! map fails it aborts the whole process. Each caller thread costs four
//! maps (its stack and guard page, its signal stack and guard page), and
//! `vm.max_map_count` (65530 by default) then allows about 16 thousand.
//! So pace counts what every limit leaves room for before it starts a
//! thread, and refuses a count that does not fit, naming the limit.
//!
//! The limits read: the process's maps against `vm.max_map_count`; the
//! machine's tasks against `kernel.threads-max` and `kernel.pid_max` (every
//! thread takes a pid); the cgroup's `pids.max`; `RLIMIT_NPROC` for a user
//! other than root; the available memory against the threads' stacks; and
//! `RLIMIT_AS` (`ulimit -v`) against the address space the threads map
//! (measured: about 78 KiB each with a 64 KiB stack), besides what the
//! allocator reserves (64 MiB per arena, up to eight arenas per core). A
//! limit that cannot be read is not checked.

use std::fmt;

/// Memory maps one caller thread adds: its stack and guard page, and the
/// signal stack and guard page the standard library maps for it.
pub(super) const MAPS_PER_THREAD: u64 = 4;
/// Maps kept free for what the run allocates besides the threads (the
/// allocator's arenas and large blocks, the runtime).
const SPARE_MAPS: u64 = 1024;
/// Tasks (pids) kept free for the rest of the machine.
const SPARE_TASKS: u64 = 64;
/// Memory a caller thread may use beyond its stack: its signal stack, the
/// kernel's stack and task, its histogram.
const THREAD_OVERHEAD_BYTES: u64 = 64 << 10;
/// Address space a caller thread maps beyond its stack: guard pages and
/// its signal stack (about 14 KiB measured), with room to spare.
const THREAD_MAPPED_BYTES: u64 = 32 << 10;
/// Address space the allocator may reserve: 64 MiB per arena, up to eight
/// arenas per core, and 64 MiB for the rest of the run.
fn allocator_reserve(cores: u64) -> u64 {
    (8 * cores + 1) * (64 << 20)
}

/// One limit on how many more threads may start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Bound {
    /// Threads that still fit under it.
    pub(super) room: u64,
    /// What the limit is and how full it is, e.g. `vm.max_map_count is
    /// 65530 (70 maps in use, 4 per thread)`.
    pub(super) what: String,
}

/// A thread count that does not fit.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct TooMany {
    pub(super) asked: usize,
    pub(super) bound: Bound,
}

impl fmt::Display for TooMany {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let Bound { room, what } = &self.bound;
        write!(
            f,
            "--threads {} is more than this machine can start: about {room} \
             more threads fit, as {what}; use --async (tasks, not threads) \
             or --threads {room} or fewer",
            self.asked
        )
    }
}

impl std::error::Error for TooMany {}

/// The tightest of `bounds`, if `threads` does not fit under it.
pub(super) fn check(threads: usize, bounds: Vec<Bound>) -> Result<(), TooMany> {
    match bounds.into_iter().min_by_key(|b| b.room) {
        Some(bound) if bound.room < threads as u64 => Err(TooMany {
            asked: threads,
            bound,
        }),
        _ => Ok(()),
    }
}

/// The bounds on this machine now, for threads with `stack` bytes of stack.
pub(super) fn bounds(stack: u64) -> Vec<Bound> {
    let mut bounds = Vec::new();
    let number =
        |path: &str| -> Option<u64> { std::fs::read_to_string(path).ok()?.trim().parse().ok() };
    if let (Some(max), Ok(maps)) = (
        number("/proc/sys/vm/max_map_count"),
        std::fs::read_to_string("/proc/self/maps"),
    ) {
        bounds.push(maps_bound(max, maps.lines().count() as u64));
    }
    if let Some(tasks) = tasks_in_use() {
        for (name, path) in [
            ("kernel.threads-max", "/proc/sys/kernel/threads-max"),
            ("kernel.pid_max", "/proc/sys/kernel/pid_max"),
        ] {
            if let Some(max) = number(path) {
                bounds.push(tasks_bound(name, max, tasks));
            }
        }
    }
    if let (Some(max), Some(current)) = (
        number("/sys/fs/cgroup/pids.max"),
        number("/sys/fs/cgroup/pids.current"),
    ) {
        bounds.push(Bound {
            room: max.saturating_sub(current),
            what: format!("the cgroup's pids.max is {max} ({current} in use)"),
        });
    }
    if let Some(bound) = nproc_bound() {
        bounds.push(bound);
    }
    if let Some(available) = mem_available() {
        bounds.push(memory_bound(available, stack));
    }
    if let (Some(limit), Some(in_use)) = (address_space_limit(), vm_size()) {
        let cores = crate::cli::cores() as u64;
        bounds.push(address_space_bound(
            limit,
            in_use,
            allocator_reserve(cores),
            stack,
        ));
    }
    bounds
}

/// Room under `RLIMIT_AS` (`limit` bytes) for threads with `stack` bytes of
/// stack, `in_use` bytes being mapped and `reserve` kept for the allocator.
pub(super) fn address_space_bound(limit: u64, in_use: u64, reserve: u64, stack: u64) -> Bound {
    let per_thread = stack + THREAD_MAPPED_BYTES;
    Bound {
        room: limit.saturating_sub(in_use + reserve) / per_thread,
        what: format!(
            "RLIMIT_AS (ulimit -v) is {} MiB ({} MiB mapped, {} MiB kept for the \
             allocator, {} KiB per thread)",
            limit >> 20,
            in_use >> 20,
            reserve >> 20,
            per_thread >> 10
        ),
    }
}

/// The soft `RLIMIT_AS` in bytes, unless unlimited.
fn address_space_limit() -> Option<u64> {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `limit` is a valid, writable rlimit for the call to fill.
    if unsafe { libc::getrlimit(libc::RLIMIT_AS, &mut limit) } != 0
        || limit.rlim_cur == libc::RLIM_INFINITY
    {
        return None;
    }
    u64::try_from(limit.rlim_cur).ok()
}

/// This process's mapped address space (`VmSize`), in bytes.
fn vm_size() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmSize:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib << 10)
}

/// Room under `vm.max_map_count`.
pub(super) fn maps_bound(max: u64, in_use: u64) -> Bound {
    Bound {
        room: max.saturating_sub(in_use + SPARE_MAPS) / MAPS_PER_THREAD,
        what: format!(
            "vm.max_map_count is {max} ({in_use} maps in use, \
             {MAPS_PER_THREAD} per thread)"
        ),
    }
}

/// Room under a machine-wide limit on tasks.
pub(super) fn tasks_bound(name: &str, max: u64, in_use: u64) -> Bound {
    Bound {
        room: max.saturating_sub(in_use + SPARE_TASKS),
        what: format!("{name} is {max} ({in_use} threads running on the machine)"),
    }
}

/// Room in the available memory for threads with `stack` bytes of stack.
pub(super) fn memory_bound(available: u64, stack: u64) -> Bound {
    Bound {
        room: available / (stack + THREAD_OVERHEAD_BYTES),
        what: format!(
            "{} MiB of memory is available ({} KiB per thread)",
            available >> 20,
            (stack + THREAD_OVERHEAD_BYTES) >> 10
        ),
    }
}

/// The machine's tasks now: the total in `/proc/loadavg` (`0.1 0.2 0.3
/// 2/345 6789`).
fn tasks_in_use() -> Option<u64> {
    let loadavg = std::fs::read_to_string("/proc/loadavg").ok()?;
    let field = loadavg.split_whitespace().nth(3)?;
    field.split('/').nth(1)?.parse().ok()
}

/// `MemAvailable` from `/proc/meminfo`, in bytes.
fn mem_available() -> Option<u64> {
    let meminfo = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = meminfo.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib << 10)
}

/// Room under `RLIMIT_NPROC`, which counts every thread of the user; root
/// is not held to it.
fn nproc_bound() -> Option<Bound> {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `limit` is a valid, writable rlimit for the call to fill.
    if unsafe { libc::getrlimit(libc::RLIMIT_NPROC, &mut limit) } != 0
        || limit.rlim_cur == libc::RLIM_INFINITY
    {
        return None;
    }
    // SAFETY: geteuid and getuid cannot fail and touch no memory.
    let (euid, uid) = unsafe { (libc::geteuid(), libc::getuid()) };
    if euid == 0 {
        return None;
    }
    let max = u64::try_from(limit.rlim_cur).ok()?;
    let in_use = user_threads(uid);
    Some(Bound {
        room: max.saturating_sub(in_use),
        what: format!("RLIMIT_NPROC (ulimit -u) is {max} ({in_use} threads of this user running)"),
    })
}

/// The threads of user `uid` now, from each process's status.
fn user_threads(uid: libc::uid_t) -> u64 {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return 0;
    };
    let mut threads = 0;
    for entry in entries.flatten() {
        let Ok(status) = std::fs::read_to_string(entry.path().join("status")) else {
            continue;
        };
        let field = |name: &str| {
            status
                .lines()
                .find_map(|l| l.strip_prefix(name))
                .and_then(|rest| rest.split_whitespace().next())
                .and_then(|v| v.parse::<u64>().ok())
        };
        if field("Uid:") == Some(u64::from(uid)) {
            threads += field("Threads:").unwrap_or(1);
        }
    }
    threads
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tightest_bound_is_named_with_what_to_do() {
        // This machine's: 65530 maps, 70 in use; 32768 pids, 400 tasks.
        let bounds = vec![
            tasks_bound("kernel.pid_max", 32_768, 400),
            maps_bound(65_530, 70),
            memory_bound(24 << 30, 64 << 10),
        ];
        assert_eq!(bounds[0].room, 32_304);
        assert_eq!(bounds[1].room, (65_530 - 70 - 1024) / 4);
        assert_eq!(bounds[2].room, 196_608);
        let err = check(100_000, bounds.clone()).unwrap_err();
        assert_eq!(
            err.to_string(),
            "--threads 100000 is more than this machine can start: about 16109 \
             more threads fit, as vm.max_map_count is 65530 (70 maps in use, 4 per \
             thread); use --async (tasks, not threads) or --threads 16109 or fewer"
        );
        assert_eq!(check(16_109, bounds.clone()), Ok(()));
        assert!(check(16_110, bounds).is_err());
        assert_eq!(check(100_000, Vec::new()), Ok(()), "nothing known");
    }

    #[test]
    fn the_address_space_keeps_room_for_the_allocator() {
        // ulimit -v 1500000 on two cores: 1464 MiB, 150 MiB mapped, 1088
        // MiB for the arenas, 96 KiB a thread.
        let bound = address_space_bound(1_500_000 << 10, 150 << 20, allocator_reserve(2), 64 << 10);
        assert_eq!(allocator_reserve(2), 1088 << 20);
        assert_eq!(
            bound.room,
            ((1_500_000u64 << 10) - (1238 << 20)) / (96 << 10)
        );
        assert_eq!(
            bound.what,
            "RLIMIT_AS (ulimit -v) is 1464 MiB (150 MiB mapped, 1088 MiB kept for the \
             allocator, 96 KiB per thread)"
        );
        assert_eq!(address_space_bound(1 << 30, 1 << 30, 0, 64 << 10).room, 0);
    }

    #[test]
    fn a_full_limit_leaves_no_room() {
        assert_eq!(maps_bound(1000, 900).room, 0);
        assert_eq!(tasks_bound("kernel.threads-max", 50, 60).room, 0);
    }

    #[test]
    fn this_machine_has_a_bound_on_maps() {
        let bounds = bounds(64 << 10);
        assert!(
            bounds
                .iter()
                .any(|b| b.what.starts_with("vm.max_map_count")),
            "{bounds:?}"
        );
    }
}
