//! The waiting path: CPU per admitted op and achieved/target for a crowd of
//! capped callers, tollgate and governor side by side in one run.
//!
//! Each case runs for `CROWD_SECS` seconds (default 2) per limiter: caller
//! threads loop `acquire` (governor: `check()`, then sleep until the
//! instant it names), or tokio tasks loop `acquire_async` (governor:
//! `until_ready`), each counting its ops on its own cache line. CPU time is
//! the process's user + system time from `getrusage` over the measured
//! span, the limiter's own threads included; the callers do nothing but
//! acquire, so it is the cost of waiting. Governor is built with its
//! default burst (one second of ops) and drained when the measured span
//! starts, so it starts empty like tollgate.
//!
//! The contention cases run 2 caller threads next to two busy loops per
//! core and report only achieved/target (the busy loops own the CPU).
//!
//! The machine is shared and noisy: compare the two limiters within one
//! case, and repeat a case before trusting a surprise.
//!
//! `cargo bench --bench crowd` (a few minutes);
//! `CROWD_SECS=1 CROWD_CASES=threads cargo bench --bench crowd` runs a subset
//! (`threads`, `async`, `contention`).

#![allow(missing_docs)]

use std::num::NonZeroU32;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use crossbeam_utils::CachePadded;
use governor::clock::{Clock as _, DefaultClock};
use governor::{Quota, RateLimiter as Governor};
use tollgate::{RateLimiter, RateSpec, Verb};

type Gov = governor::DefaultDirectRateLimiter;

/// Process CPU time (user + system).
fn cpu_now() -> Duration {
    // SAFETY: an all-zero `rusage` is a valid value of the plain C struct.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `usage` is valid and writable; RUSAGE_SELF is a valid `who`.
    if unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) } != 0 {
        return Duration::ZERO;
    }
    let tv = |t: libc::timeval| {
        Duration::from_secs(t.tv_sec as u64) + Duration::from_micros(t.tv_usec as u64)
    };
    tv(usage.ru_utime) + tv(usage.ru_stime)
}

fn secs() -> Duration {
    let s: f64 = std::env::var("CROWD_SECS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2.0);
    Duration::from_secs_f64(s)
}

/// One limiter under test.
#[derive(Clone)]
enum Limiter {
    Tollgate(Arc<RateLimiter>),
    Governor(Arc<Gov>),
}

impl Limiter {
    fn name(&self) -> &'static str {
        match self {
            Limiter::Tollgate(_) => "tollgate",
            Limiter::Governor(_) => "governor",
        }
    }

    fn acquire(&self) {
        match self {
            Limiter::Tollgate(l) => {
                l.acquire();
            }
            Limiter::Governor(g) => loop {
                match g.check() {
                    Ok(()) => return,
                    Err(not_until) => {
                        std::thread::sleep(not_until.wait_time_from(DefaultClock::default().now()))
                    }
                }
            },
        }
    }

    async fn acquire_async(&self) {
        match self {
            Limiter::Tollgate(l) => {
                l.acquire_async().await;
            }
            Limiter::Governor(g) => g.until_ready().await,
        }
    }

    /// Starts the schedule now: tollgate is built unstarted; governor is
    /// drained of the burst it gathered while the callers were spawned.
    fn start(&self, spec: RateSpec) {
        match self {
            Limiter::Tollgate(l) => l.apply(spec.with_verb(Verb::Start)),
            Limiter::Governor(g) => while g.check().is_ok() {},
        }
    }
}

/// Both limiters for `spec`: tollgate unstarted, governor drained.
fn limiters(spec: &str) -> (RateSpec, [Limiter; 2]) {
    let spec: RateSpec = spec.parse().expect("a valid spec");
    let tollgate = RateLimiter::new(spec.with_verb(Verb::Configure));
    let rate = NonZeroU32::new(spec.ops_per_sec().round() as u32).expect("a rate >= 1");
    let governor = Governor::direct(Quota::per_second(rate));
    (
        spec,
        [
            Limiter::Tollgate(Arc::new(tollgate)),
            Limiter::Governor(Arc::new(governor)),
        ],
    )
}

struct Outcome {
    ops: u64,
    elapsed: Duration,
    cpu: Duration,
}

fn counters(n: usize) -> Arc<Vec<CachePadded<AtomicU64>>> {
    Arc::new(
        (0..n)
            .map(|_| CachePadded::new(AtomicU64::new(0)))
            .collect(),
    )
}

fn total(counts: &[CachePadded<AtomicU64>]) -> u64 {
    counts.iter().map(|c| c.load(Relaxed)).sum()
}

/// `threads` caller threads looping acquire for `span`.
fn run_threads(limiter: &Limiter, spec: RateSpec, threads: usize, span: Duration) -> Outcome {
    let counts = counters(threads);
    let stop = Arc::new(AtomicBool::new(false));
    let ready = Arc::new(Barrier::new(threads + 1));
    let handles: Vec<_> = (0..threads)
        .map(|i| {
            let (limiter, counts, stop, ready) = (
                limiter.clone(),
                Arc::clone(&counts),
                Arc::clone(&stop),
                Arc::clone(&ready),
            );
            std::thread::Builder::new()
                .stack_size(256 << 10)
                .spawn(move || {
                    ready.wait();
                    let mut n = 0;
                    while !stop.load(Relaxed) {
                        limiter.acquire();
                        n += 1;
                        counts[i].store(n, Relaxed);
                    }
                })
                .expect("spawn a caller")
        })
        .collect();
    ready.wait();
    limiter.start(spec);
    let (t0, c0, o0) = (Instant::now(), cpu_now(), total(&counts));
    std::thread::sleep(span);
    let (elapsed, cpu, ops) = (t0.elapsed(), cpu_now() - c0, total(&counts) - o0);
    stop.store(true, Relaxed);
    for h in handles {
        h.join().expect("caller panicked");
    }
    Outcome { ops, elapsed, cpu }
}

/// `tasks` tokio tasks looping acquire_async for `span`, on a runtime with
/// a worker per core.
fn run_tasks(limiter: &Limiter, spec: RateSpec, tasks: usize, span: Duration) -> Outcome {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(cores)
        .enable_time()
        .build()
        .expect("a runtime");
    let counts = counters(tasks);
    let stop = Arc::new(AtomicBool::new(false));
    let handles: Vec<_> = (0..tasks)
        .map(|i| {
            let (limiter, counts, stop) = (limiter.clone(), Arc::clone(&counts), Arc::clone(&stop));
            runtime.spawn(async move {
                let mut n = 0u64;
                while !stop.load(Relaxed) {
                    limiter.acquire_async().await;
                    n += 1;
                    counts[i].store(n, Relaxed);
                    if n % 64 == 0 {
                        tokio::task::yield_now().await;
                    }
                }
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(50));
    limiter.start(spec);
    let (t0, c0, o0) = (Instant::now(), cpu_now(), total(&counts));
    std::thread::sleep(span);
    let (elapsed, cpu, ops) = (t0.elapsed(), cpu_now() - c0, total(&counts) - o0);
    stop.store(true, Relaxed);
    runtime.block_on(async {
        for h in handles {
            let _ = h.await;
        }
    });
    Outcome { ops, elapsed, cpu }
}

fn report(case: &str, limiter: &Limiter, spec: RateSpec, out: &Outcome, with_cpu: bool) {
    let ratio = out.ops as f64 / out.elapsed.as_secs_f64() / spec.ops_per_sec();
    if with_cpu {
        let per_op = out.cpu.as_nanos() as f64 / out.ops.max(1) as f64;
        let cores = out.cpu.as_secs_f64() / out.elapsed.as_secs_f64();
        println!(
            "{case:<28} {:<9} {:>10} {ratio:>9.4} {per_op:>10.0} {cores:>6.2}",
            limiter.name(),
            out.ops
        );
    } else {
        println!(
            "{case:<28} {:<9} {:>10} {ratio:>9.4} {:>10} {:>6}",
            limiter.name(),
            out.ops,
            "-",
            "-"
        );
    }
}

/// Two busy loops per core, until dropped.
struct BusyLoops {
    stop: Arc<AtomicBool>,
    handles: Vec<std::thread::JoinHandle<()>>,
}

impl BusyLoops {
    fn start() -> BusyLoops {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        let stop = Arc::new(AtomicBool::new(false));
        let handles = (0..2 * cores)
            .map(|_| {
                let stop = Arc::clone(&stop);
                std::thread::spawn(move || {
                    while !stop.load(Relaxed) {
                        std::hint::spin_loop();
                    }
                })
            })
            .collect();
        BusyLoops { stop, handles }
    }
}

impl Drop for BusyLoops {
    fn drop(&mut self) {
        self.stop.store(true, Relaxed);
        for h in self.handles.drain(..) {
            let _ = h.join();
        }
    }
}

fn main() {
    // `cargo bench` passes `--bench`; any other argument is ignored.
    let span = secs();
    let cases = std::env::var("CROWD_CASES").unwrap_or_else(|_| "threads,async,contention".into());
    println!(
        "{:<28} {:<9} {:>10} {:>9} {:>10} {:>6}",
        "case", "limiter", "ops", "ach/tgt", "cpu ns/op", "cores"
    );
    if cases.contains("threads") {
        for threads in [8, 64, 512] {
            let (spec, both) = limiters("1M,1.1");
            for limiter in &both {
                let out = run_threads(limiter, spec, threads, span);
                report(
                    &format!("{threads} threads, 1M/s"),
                    limiter,
                    spec,
                    &out,
                    true,
                );
            }
        }
    }
    if cases.contains("async") {
        for tasks in [64, 1024] {
            let (spec, both) = limiters("100K,1.1");
            for limiter in &both {
                let out = run_tasks(limiter, spec, tasks, span);
                report(&format!("{tasks} tasks, 100K/s"), limiter, spec, &out, true);
            }
        }
    }
    if cases.contains("contention") {
        for ratio in ["1.0", "1.1"] {
            let (spec, both) = limiters(&format!("100K,{ratio}"));
            let busy = BusyLoops::start();
            for limiter in &both {
                let out = run_threads(limiter, spec, 2, span);
                report(
                    &format!("2 threads, 100K,{ratio}, busy"),
                    limiter,
                    spec,
                    &out,
                    false,
                );
            }
            drop(busy);
        }
    }
}
