//! The cost of one Doorman decision: one refresh of an existing client in a
//! resource of 1K, 10K and 100K clients, for the two sharing algorithms.
//!
//! Every refresh changes the client's wants (so its place in the store's
//! index moves) and its expiry (the clock advances 1 ms a call), and the
//! clients come in a scattered order, so the numbers include the index and
//! expiry updates and realistic cache misses. The resource is oversubscribed
//! (total wants twice the capacity), so every decision takes the sharing
//! path, not the "everything fits" shortcut.
//!
//! Run with `cargo bench --bench doorman_decide`.

use std::hint::black_box;
use std::time::Duration;

use criterion::{criterion_main, BenchmarkId, Criterion};
use tollgate_doorman::bench::{AlgorithmConfig, Kind, Request, Resource};

/// A deterministic pseudo-random stream (SplitMix64), so runs compare.
struct Stream(u64);

impl Stream {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
}

struct Setup {
    res: Resource,
    ids: Vec<String>,
    wants: Vec<f64>,
    subclients: Vec<u64>,
    algo: AlgorithmConfig,
    capacity: f64,
}

/// `n` clients wanting 0..200 with 1..=4 subclients, each refreshed once.
fn setup(kind: Kind, n: usize) -> Setup {
    let mut stream = Stream(n as u64);
    let ids: Vec<String> = (0..n).map(|i| format!("client-{i:08}")).collect();
    let wants: Vec<f64> = (0..n)
        .map(|_| (stream.next() % 20_000) as f64 / 100.0)
        .collect();
    let subclients: Vec<u64> = (0..n).map(|_| 1 + stream.next() % 4).collect();
    let capacity = wants.iter().sum::<f64>() / 2.0;
    let algo = AlgorithmConfig::new(kind, Duration::from_secs(3600), Duration::from_secs(5));
    let mut res = Resource::new();
    for i in 0..n {
        let req = Request {
            client: &ids[i],
            has: 0.0,
            wants: wants[i],
            subclients: subclients[i],
        };
        res.decide(&algo, capacity, &req, Duration::ZERO, false);
    }
    Setup {
        res,
        ids,
        wants,
        subclients,
        algo,
        capacity,
    }
}

fn decide(c: &mut Criterion) {
    let mut group = c.benchmark_group("doorman_decide");
    group
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3))
        .sample_size(50);
    for (name, kind) in [
        ("proportional", Kind::ProportionalShare),
        ("fair", Kind::FairShare),
    ] {
        for n in [1_000, 10_000, 100_000] {
            let mut s = setup(kind, n);
            group.bench_function(BenchmarkId::new(name, n), |b| {
                // A stride coprime to n visits every client, scattered.
                let (mut i, mut call) = (0, 0u64);
                b.iter(|| {
                    i = (i + 7919) % n;
                    call += 1;
                    let req = Request {
                        client: &s.ids[i],
                        has: 0.0,
                        wants: s.wants[i] + (call % 2) as f64,
                        subclients: s.subclients[i],
                    };
                    let now = Duration::from_millis(call);
                    black_box(s.res.decide(&s.algo, s.capacity, &req, now, false))
                });
            });
            assert_eq!(s.res.len(), n, "no lease may expire during the run");
        }
    }
    group.finish();
}

/// `criterion_group!` makes an undocumented `pub fn`; keep it out of sight.
mod group {
    criterion::criterion_group!(benches, super::decide);
}

criterion_main!(group::benches);
