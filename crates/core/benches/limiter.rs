//! Uncapped acquire throughput: tollgate against governor, in one run.
//!
//! Both limiters are set far above what the machine can issue (tollgate at
//! 1e12 ops/s, governor at `u32::MAX` per second), so every call measures
//! the limiter's own cost, not its schedule. Each multi-threaded sample
//! spawns its threads, lets each do `iters` calls and reports the wall time
//! of the whole scope: throughput is total calls per second across threads.
//!
//! The machine is shared and noisy: read the tollgate/governor ratio within
//! one group, not the absolute numbers.
//!
//! `cargo bench --bench limiter` (a few minutes).

// `criterion_group!` generates an undocumented public function.
#![allow(missing_docs)]

use std::hint::black_box;
use std::num::NonZeroU32;
use std::sync::Barrier;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use governor::{Quota, RateLimiter as Governor};
use tollgate::RateLimiter;

/// Far above what two cores can issue.
const UNCAPPED: &str = "1T";

fn tollgate() -> RateLimiter {
    RateLimiter::new(UNCAPPED.parse().expect("a valid spec"))
}

fn governor() -> governor::DefaultDirectRateLimiter {
    Governor::direct(Quota::per_second(NonZeroU32::MAX))
}

/// Runs `op` `iters` times on each of `threads` threads, released together;
/// returns the wall time from the first thread's start to the last one's
/// end (each thread reads the clock itself: the releasing thread may be
/// scheduled long after the others started).
fn run_threads<F>(threads: usize, iters: u64, op: F) -> Duration
where
    F: Fn() + Sync,
{
    let start = Barrier::new(threads);
    std::thread::scope(|scope| {
        let handles: Vec<_> = (0..threads)
            .map(|_| {
                scope.spawn(|| {
                    start.wait();
                    let began = Instant::now();
                    for _ in 0..iters {
                        op();
                    }
                    (began, Instant::now())
                })
            })
            .collect();
        let spans: Vec<(Instant, Instant)> = handles
            .into_iter()
            .map(|h| h.join().expect("bench thread panicked"))
            .collect();
        let first = spans
            .iter()
            .map(|s| s.0)
            .min()
            .expect("at least one thread");
        let last = spans
            .iter()
            .map(|s| s.1)
            .max()
            .expect("at least one thread");
        last.duration_since(first)
    })
}

fn uncapped(c: &mut Criterion) {
    let mut group = c.benchmark_group("uncapped");
    group
        .sample_size(10)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2));
    for threads in [1usize, 2, 64] {
        group.throughput(Throughput::Elements(threads as u64));
        let lim = tollgate();
        group.bench_with_input(BenchmarkId::new("tollgate", threads), &threads, |b, &t| {
            b.iter_custom(|iters| {
                run_threads(t, iters, || {
                    black_box(lim.acquire());
                })
            })
        });
        let gov = governor();
        group.bench_with_input(BenchmarkId::new("governor", threads), &threads, |b, &t| {
            b.iter_custom(|iters| {
                run_threads(t, iters, || {
                    let _ = black_box(gov.check());
                })
            })
        });
    }
    group.finish();
}

fn try_acquire(c: &mut Criterion) {
    let mut group = c.benchmark_group("try_acquire");
    group
        .sample_size(10)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2))
        .throughput(Throughput::Elements(1));
    let lim = tollgate();
    group.bench_function("tollgate", |b| b.iter(|| black_box(lim.try_acquire())));
    let gov = governor();
    group.bench_function("governor", |b| b.iter(|| black_box(gov.check().is_ok())));
    group.finish();
}

criterion_group!(benches, uncapped, try_acquire);
criterion_main!(benches);
