//! CPU per admitted op and per-op lateness of a crowd of capped callers on
//! one tollgate limiter: tokio tasks looping `acquire_async`, or threads
//! looping `acquire`.
//!
//! `benches/crowd.rs` compares tollgate with governor; this example looks
//! at tollgate alone, with one more column: the lateness each admitted op
//! was given (the value `acquire` returns, i.e. the backlog), as a mean
//! and a maximum over the measured span.
//!
//! ```text
//! cargo run --release --example wait_cost -- async 1024 100K 3
//! cargo run --release --example wait_cost -- threads 8 1M 3
//! ```
//!
//! Arguments: `async` or `threads`, the number of callers, the rate spec,
//! the measured seconds. CPU is the process's user + system time
//! (`getrusage`) over the measured span, the limiter's filler thread and
//! the runtime's workers included.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use crossbeam_utils::CachePadded;
use tollgate::spec::Verb;
use tollgate::{RateLimiter, RateSpec};

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

/// One caller's tallies, on its own cache line.
#[derive(Default)]
struct Tally {
    ops: AtomicU64,
    late_ns: AtomicU64,
    max_late_ns: AtomicU64,
}

impl Tally {
    fn record(&self, late: Duration) {
        let ns = u64::try_from(late.as_nanos()).unwrap_or(u64::MAX);
        // Relaxed: counters read after the callers stop or as snapshots.
        self.ops.fetch_add(1, Relaxed);
        self.late_ns.fetch_add(ns, Relaxed);
        self.max_late_ns.fetch_max(ns, Relaxed);
    }
}

type Tallies = Arc<Vec<CachePadded<Tally>>>;

fn tallies(n: usize) -> Tallies {
    Arc::new((0..n).map(|_| CachePadded::new(Tally::default())).collect())
}

/// Ops, summed lateness and maximum lateness over all callers.
fn totals(t: &Tallies) -> (u64, u64, u64) {
    t.iter().fold((0, 0, 0), |(ops, late, max), c| {
        (
            ops + c.ops.load(Relaxed),
            late + c.late_ns.load(Relaxed),
            max.max(c.max_late_ns.load(Relaxed)),
        )
    })
}

fn usage() -> ! {
    eprintln!("usage: wait_cost async|threads CALLERS RATESPEC SECONDS");
    std::process::exit(2);
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.len() != 4 {
        usage();
    }
    let mode = args[0].as_str();
    let callers: usize = args[1].parse().unwrap_or_else(|_| usage());
    let spec: RateSpec = args[2].parse().unwrap_or_else(|e| {
        eprintln!("bad rate spec: {e}");
        usage()
    });
    let secs: f64 = args[3].parse().unwrap_or_else(|_| usage());
    let span = Duration::from_secs_f64(secs);
    let limiter = Arc::new(RateLimiter::new(spec.with_verb(Verb::Configure)));
    let t = tallies(callers);
    let stop = Arc::new(AtomicBool::new(false));

    let measure = |t: &Tallies| {
        // Warm up for a quarter second, then measure (mean and maximum
        // lateness over the measured span only: reset the tallies).
        std::thread::sleep(Duration::from_millis(250));
        let (t0, c0) = (Instant::now(), cpu_now());
        for c in t.iter() {
            c.max_late_ns.store(0, Relaxed);
        }
        let (o0, l0, _) = totals(t);
        std::thread::sleep(span);
        let (elapsed, cpu) = (t0.elapsed(), cpu_now() - c0);
        let (o1, l1, max) = totals(t);
        (elapsed, cpu, o1 - o0, l1 - l0, max)
    };

    let (elapsed, cpu, ops, late, max) = match mode {
        "async" => {
            let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(cores)
                .build()
                .expect("a runtime");
            let handles: Vec<_> = (0..callers)
                .map(|i| {
                    let (limiter, t, stop) =
                        (Arc::clone(&limiter), Arc::clone(&t), Arc::clone(&stop));
                    runtime.spawn(async move {
                        let mut n = 0u64;
                        while !stop.load(Relaxed) {
                            t[i].record(limiter.acquire_async().await);
                            n += 1;
                            if n.is_multiple_of(64) {
                                tokio::task::yield_now().await;
                            }
                        }
                    })
                })
                .collect();
            std::thread::sleep(Duration::from_millis(50));
            limiter.apply(spec.with_verb(Verb::Start));
            let out = measure(&t);
            stop.store(true, Relaxed);
            runtime.block_on(async {
                for h in handles {
                    let _ = h.await;
                }
            });
            out
        }
        "threads" => {
            let ready = Arc::new(Barrier::new(callers + 1));
            let handles: Vec<_> = (0..callers)
                .map(|i| {
                    let (limiter, t, stop, ready) = (
                        Arc::clone(&limiter),
                        Arc::clone(&t),
                        Arc::clone(&stop),
                        Arc::clone(&ready),
                    );
                    std::thread::Builder::new()
                        .stack_size(256 << 10)
                        .spawn(move || {
                            ready.wait();
                            while !stop.load(Relaxed) {
                                t[i].record(limiter.acquire());
                            }
                        })
                        .expect("spawn a caller")
                })
                .collect();
            ready.wait();
            limiter.apply(spec.with_verb(Verb::Start));
            let out = measure(&t);
            stop.store(true, Relaxed);
            for h in handles {
                h.join().expect("caller panicked");
            }
            out
        }
        _ => usage(),
    };
    let ratio = ops as f64 / elapsed.as_secs_f64() / spec.ops_per_sec();
    let per_op = cpu.as_nanos() as f64 / ops.max(1) as f64;
    let mean_late = late as f64 / ops.max(1) as f64;
    println!(
        "{mode} {callers} {spec}: ops {ops} ach/tgt {ratio:.4} cpu {per_op:.0} ns/op \
         cores {:.2} lateness mean {:.1} us max {:.1} us",
        cpu.as_secs_f64() / elapsed.as_secs_f64(),
        mean_late / 1e3,
        max as f64 / 1e3,
    );
}
