//! The cost of one Doorman decision: one refresh of an existing client in a
//! resource of 1K, 10K and 100K clients, for the two sharing algorithms,
//! through the [`Engine`] (the resource's lookup and lock, learning mode,
//! the lease store and the algorithm; no wire, no election).
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
use tollgate_doorman::{Engine, ServerConfig};

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
    engine: Engine,
    ids: Vec<String>,
    wants: Vec<f64>,
}

/// The resource every client asks for.
const RESOURCE: &str = "r";

/// `n` clients wanting 0..200, each refreshed once, under `kind` with
/// 3,600 s leases, no learning mode and half the total wants as capacity.
fn setup(kind: &str, n: usize) -> Setup {
    let mut stream = Stream(n as u64);
    let ids: Vec<String> = (0..n).map(|i| format!("client-{i:08}")).collect();
    let wants: Vec<f64> = (0..n)
        .map(|_| (stream.next() % 20_000) as f64 / 100.0)
        .collect();
    let capacity = wants.iter().sum::<f64>() / 2.0;
    let config = ServerConfig::from_yaml(&format!(
        "resources: [{{identifier_glob: '{RESOURCE}', capacity: {capacity}, algorithm: {{kind: {kind}, lease_length: 3600, refresh_interval: 5, learning_mode_duration: 0}}}}]"
    ))
    .expect("a valid configuration");
    let engine = Engine::new(config);
    for i in 0..n {
        engine
            .decide(&ids[i], RESOURCE, wants[i], Duration::ZERO, Duration::ZERO)
            .expect("the template matches");
    }
    Setup { engine, ids, wants }
}

fn decide(c: &mut Criterion) {
    let mut group = c.benchmark_group("doorman_decide");
    group
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3))
        .sample_size(50);
    for (name, kind) in [
        ("proportional", "PROPORTIONAL_SHARE"),
        ("fair", "FAIR_SHARE"),
    ] {
        for n in [1_000, 10_000, 100_000] {
            let s = setup(kind, n);
            group.bench_function(BenchmarkId::new(name, n), |b| {
                // A stride coprime to n visits every client, scattered.
                let (mut i, mut call) = (0, 0u64);
                b.iter(|| {
                    i = (i + 7919) % n;
                    call += 1;
                    let wants = s.wants[i] + (call % 2) as f64;
                    let now = Duration::from_millis(call);
                    black_box(
                        s.engine
                            .decide(&s.ids[i], RESOURCE, wants, now, Duration::ZERO),
                    )
                });
            });
            let leases = s.engine.leases(RESOURCE).map_or(0, |l| l.len());
            assert_eq!(leases, n, "no lease may expire during the run");
        }
    }
    group.finish();
}

/// `criterion_group!` makes an undocumented `pub fn`; keep it out of sight.
mod group {
    criterion::criterion_group!(benches, super::decide);
}

criterion_main!(group::benches);
