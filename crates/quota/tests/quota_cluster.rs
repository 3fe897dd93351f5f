//! Cluster mode: three quota servers under one lease server, uneven load.
//! The combined granted rate stays within the configured rate (+2%), and
//! the busy server holds the larger share within two refresh intervals.
//!
//! This test runs in real time (the lease protocol's refresh interval is at
//! least a second), but every assertion is an upper bound or an ordering
//! that a slow, loaded machine only makes easier to meet.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tollgate_doorman::Client;
use tollgate_quota::{
    run_cluster, AllowRequest, ClusterOptions, Quota, QuotaConfig, QuotaLimits, Status,
};

use tollgate_testkit::lease as lease_server;

const RATE: f64 = 1000.0;
const SIZE: u64 = 100;

const LEASES: &str = "\
resources:
  - identifier_glob: \"svc:api\"
    capacity: 1000
    algorithm: {kind: FAIR_SHARE, lease_length: 10, refresh_interval: 1, learning_mode_duration: 0}
  - identifier_glob: \"*\"
    capacity: 0
    algorithm: {kind: FAIR_SHARE, lease_length: 10, refresh_interval: 1, learning_mode_duration: 0}
";

const QUOTA: &str = "\
namespaces:
  svc:
    buckets:
      api: {size: 100, fill_rate: 1000, max_tokens_per_request: 1000}
";

/// The rate of `namespace/bucket` on one server: its share of the leased
/// rate (`None` while the bucket does not exist there).
fn share(q: &Quota, namespace: &str, bucket: &str) -> Option<f64> {
    q.registry()
        .settings(namespace, bucket)
        .map(|s| s.rate().ops_per_sec())
}

/// The first test's share: of `svc/api`, 0 while it does not exist.
fn rate_of_api(q: &Quota) -> f64 {
    share(q, "svc", "api").unwrap_or(0.0)
}

/// Samples the servers' shares of `namespace/bucket` every 200 ms until
/// `settled` holds of them (leases settle after a couple of refresh
/// intervals of 1 s and a demand measurement; later on a loaded machine, so
/// for up to 150 samples, 30 s), asserting at every sample that they never
/// sum to more than `cap` + 2 %. Returns the last sample.
async fn settle(
    quotas: &[Arc<Quota>],
    (namespace, bucket): (&str, &str),
    cap: f64,
    settled: impl Fn(&[f64]) -> bool,
) -> Vec<f64> {
    let mut rates = Vec::new();
    for _ in 0..150 {
        tokio::time::sleep(Duration::from_millis(200)).await;
        rates = quotas
            .iter()
            .map(|q| share(q, namespace, bucket).unwrap_or(0.0))
            .collect();
        let sum: f64 = rates.iter().sum();
        assert!(sum <= cap * 1.02, "shares summed to {sum}: {rates:?}");
        if settled(&rates) {
            break;
        }
    }
    rates
}

/// A lease server on 127.0.0.1:0 deciding by `leases`, and `servers` quota
/// servers configured by `quota` in cluster mode under it, each asking
/// every 200 ms. With `prime`, each server makes that bucket of `svc`
/// exist before its cluster mode starts.
async fn cluster(
    leases: &str,
    quota: &str,
    servers: usize,
    prime: Option<&str>,
) -> Vec<Arc<Quota>> {
    let (_, lease_addr) = lease_server::serve(leases).await;

    let mut quotas = Vec::new();
    for _ in 0..servers {
        let quota = Arc::new(Quota::new(
            QuotaConfig::from_yaml(quota).unwrap(),
            QuotaLimits::default(),
            Arc::new(tollgate::SystemClock::new()),
        ));
        if let Some(bucket) = prime {
            quota.allow(&AllowRequest::new("svc", bucket, 1).max_wait_millis(0));
        }
        let client = Client::builder()
            .server(lease_addr.clone())
            .build()
            .unwrap();
        tokio::spawn(run_cluster(
            Arc::clone(&quota),
            client,
            ClusterOptions::default().interval(Duration::from_millis(200)),
        ));
        quotas.push(quota);
    }
    quotas
}

/// Load on one server until `stop`: `per_tick` requests for one token of
/// `(namespace, bucket)` every `every_ms`, each granted only from tokens on
/// hand; `granted` runs for each one granted.
fn load(
    quota: &Arc<Quota>,
    (namespace, bucket): (&'static str, &'static str),
    per_tick: u32,
    every_ms: u64,
    stop: &Arc<AtomicBool>,
    granted: impl Fn() + Send + 'static,
) {
    let quota = Arc::clone(quota);
    let stop = Arc::clone(stop);
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(Duration::from_millis(every_ms));
        while !stop.load(Ordering::Relaxed) {
            tick.tick().await;
            for _ in 0..per_tick {
                let d = quota.allow(&AllowRequest::new(namespace, bucket, 1).max_wait_millis(0));
                if d.status == Status::Ok {
                    granted();
                }
            }
        }
    });
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_servers_share_one_rate_by_demand() {
    // Make the shared bucket exist before the load starts.
    let quotas = cluster(LEASES, QUOTA, 3, Some("api")).await;

    // Uneven load: 20, 3 and 1 requests every 10 ms (2000, 300, 100 per s
    // if the machine keeps up), each granted only from tokens on hand.
    let granted: Arc<[AtomicU64; 3]> = Arc::new(Default::default());
    let stop = Arc::new(AtomicBool::new(false));
    for (i, per_tick) in [20, 3, 1].into_iter().enumerate() {
        let granted = Arc::clone(&granted);
        load(&quotas[i], ("svc", "api"), per_tick, 10, &stop, move || {
            granted[i].fetch_add(1, Ordering::Relaxed);
        });
    }

    // Wait for the busy server to hold the largest share.
    let busiest = |rates: &[f64]| rates[0] > rates[1] && rates[0] > rates[2];
    let rates = settle(&quotas, ("svc", "api"), RATE, busiest).await;
    assert!(
        busiest(&rates),
        "the busy server should hold the largest share: {rates:?}"
    );

    // The combined granted rate over a window, tokens on hand at its start
    // included (at most the configured size, split between the servers).
    let before: u64 = granted.iter().map(|g| g.load(Ordering::Relaxed)).sum();
    let start = Instant::now();
    let mut max_sum: f64 = 0.0;
    for _ in 0..15 {
        tokio::time::sleep(Duration::from_millis(200)).await;
        let sum: f64 = quotas.iter().map(|q| rate_of_api(q)).sum();
        max_sum = max_sum.max(sum);
    }
    let after: u64 = granted.iter().map(|g| g.load(Ordering::Relaxed)).sum();
    let window = start.elapsed().as_secs_f64();
    stop.store(true, Ordering::Relaxed);
    let total = (after - before) as f64;
    let sizes = SIZE as f64 + 3.0;
    assert!(
        total <= RATE * window * 1.02 + sizes,
        "granted {total} in {window:.2} s"
    );
    assert!(max_sum <= RATE * 1.02, "shares summed to {max_sum}");
    let last: Vec<f64> = quotas.iter().map(|q| rate_of_api(q)).collect();
    eprintln!(
        "shares once settled: {rates:?}, at the end: {last:?}; granted {total} in {window:.2} s ({:.0}/s)",
        total / window
    );
}

const DYNAMIC_LEASES: &str = "\
resources:
  - identifier_glob: \"users:*\"
    capacity: 100
    algorithm: {kind: FAIR_SHARE, lease_length: 10, refresh_interval: 1, learning_mode_duration: 0}
  - identifier_glob: \"*\"
    capacity: 0
    algorithm: {kind: FAIR_SHARE, lease_length: 10, refresh_interval: 1, learning_mode_duration: 0}
";

const DYNAMIC_QUOTA: &str = "\
namespaces:
  users:
    max_dynamic_buckets: 10
    dynamic_bucket_template: {size: 10, fill_rate: 100}
";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dynamic_buckets_share_their_template_rate_by_demand() {
    let quotas = cluster(DYNAMIC_LEASES, DYNAMIC_QUOTA, 2, None).await;
    // Let cluster mode start on both before the first dynamic bucket.
    tokio::time::sleep(Duration::from_millis(50)).await;
    // A dynamic bucket made in cluster mode starts at a share of zero, not
    // at the template's full rate.
    quotas[0].allow(&AllowRequest::new("users", "alice", 1).max_wait_millis(0));
    let first = share(&quotas[0], "users", "alice").unwrap();
    assert!(first < 1.0, "a new dynamic bucket started at {first}/s");

    // "alice" on both servers, unevenly: 1000/s asked of the first, 20/s
    // of the second (if the machine keeps up).
    let stop = Arc::new(AtomicBool::new(false));
    for (i, per_tick, every) in [(0, 10, 10), (1, 1, 50)] {
        load(
            &quotas[i],
            ("users", "alice"),
            per_tick,
            every,
            &stop,
            || {},
        );
    }
    // Wait for the split, the shares never exceeding the template's rate.
    let rates = settle(&quotas, ("users", "alice"), 100.0, |rates| {
        rates[0] > rates[1] && rates[1] > 1.0
    })
    .await;
    stop.store(true, Ordering::Relaxed);
    // The template's 100/s is split, never exceeded, and the busy server
    // holds the larger share (fair share: the second's 20/s, the rest to
    // the first).
    assert!(rates[0] > rates[1], "{rates:?}");
    assert!(rates[1] > 1.0, "{rates:?}");
    eprintln!("dynamic bucket shares: {rates:?}");
}
