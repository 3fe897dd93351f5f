//! The in-process cost of one Allow: `Quota::allow` (name checks, lookup,
//! reservation, metrics) against a bare `TokenBucket::reserve` and against
//! governor (a direct limiter for one bucket, a keyed one for many names),
//! all in one run.
//!
//! Every bucket is set far above the call rate, so each call measures cost,
//! not schedule. The machine is shared and noisy: read the ratios within
//! one group, not the absolute numbers. The gRPC figure comes from
//! `tollgate load --mode allow` (see the README).
//!
//! `cargo bench --bench quota` (about a minute).

// `criterion_group!` generates an undocumented public function.
#![allow(missing_docs)]

use std::hint::black_box;
use std::num::NonZeroU32;
use std::sync::Arc;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use governor::{Quota as GovQuota, RateLimiter as Governor};
use tollgate::{BucketSettings, RateSpec, SystemClock, TokenBucket};
use tollgate_quota::{AllowRequest, Quota, QuotaConfig, QuotaLimits, Status};

const NAMES: usize = 100_000;

fn quota() -> Quota {
    let config = QuotaConfig::from_yaml(
        "namespaces:\n  one:\n    buckets:\n      b0: {size: 1000000000, fill_rate: 1000000000}\n  dyn:\n    max_dynamic_buckets: 100000\n    dynamic_bucket_template: {size: 1000000, fill_rate: 1000000}\n",
    )
    .expect("a valid config");
    Quota::new(config, QuotaLimits::default(), Arc::new(SystemClock::new()))
}

fn one_bucket(c: &mut Criterion) {
    let mut group = c.benchmark_group("allow_one_bucket");
    group.throughput(Throughput::Elements(1));
    let q = quota();
    let req = AllowRequest::new("one", "b0", 1);
    group.bench_function("quota_allow", |b| {
        b.iter(|| black_box(q.allow(black_box(&req)).status == Status::Ok))
    });
    let bucket = TokenBucket::new(
        BucketSettings::new(RateSpec::new(1e9).expect("a valid rate")).size(1_000_000_000),
    );
    group.bench_function("token_bucket_reserve", |b| {
        b.iter(|| black_box(bucket.reserve(1).is_ok()))
    });
    let gov = Governor::direct(GovQuota::per_second(NonZeroU32::MAX));
    group.bench_function("governor_direct", |b| {
        b.iter(|| black_box(gov.check().is_ok()))
    });
    group.finish();
}

fn many_buckets(c: &mut Criterion) {
    let mut group = c.benchmark_group("allow_100k_names");
    group.throughput(Throughput::Elements(1));
    let names: Vec<String> = (0..NAMES).map(|i| format!("u{i}")).collect();
    let q = quota();
    for n in &names {
        assert_eq!(q.allow(&AllowRequest::new("dyn", n, 1)).status, Status::Ok);
    }
    let mut i = 0;
    group.bench_function("quota_allow", |b| {
        b.iter(|| {
            i = (i + 7919) % NAMES;
            black_box(q.allow(&AllowRequest::new("dyn", &names[i], 1)).status == Status::Ok)
        })
    });
    let gov = Governor::keyed(GovQuota::per_second(NonZeroU32::MAX));
    for n in &names {
        let _ = gov.check_key(n);
    }
    let mut i = 0;
    group.bench_function("governor_keyed", |b| {
        b.iter(|| {
            i = (i + 7919) % NAMES;
            black_box(gov.check_key(&names[i]).is_ok())
        })
    });
    group.finish();
}

criterion_group!(benches, one_bucket, many_buckets);
criterion_main!(benches);
