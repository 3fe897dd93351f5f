//! Acquire throughput of an uncapped limiter (placeholder until the full
//! comparison lands).
#![allow(missing_docs)]
use criterion::{criterion_group, criterion_main, Criterion, Throughput};

fn uncapped(c: &mut Criterion) {
    let limiter = tollgate::RateLimiter::new("1T".parse().unwrap());
    let mut group = c.benchmark_group("uncapped");
    group.throughput(Throughput::Elements(1));
    group.bench_function("tollgate_acquire_1_thread", |b| {
        b.iter(|| limiter.acquire())
    });
    group.finish();
}

criterion_group!(benches, uncapped);
criterion_main!(benches);
