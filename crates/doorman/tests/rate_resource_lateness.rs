//! A lease-fed limiter owes its callers no schedule for the time before
//! its lease: its first ops, and its steady state, start on time. The
//! limiter measures time on a manual clock, so the numbers are exact.

use std::sync::Arc;
use std::time::Duration;

use tollgate_doorman::{
    CapacitySource, Client, ExpiryMode, RateOptions, RateResource, ResourceOptions,
};

#[path = "common/lease_server.rs"]
mod lease_server;

const CONFIG: &str = r#"
resources:
  - identifier_glob: "*"
    capacity: 1000
    algorithm: {kind: STATIC, lease_length: 10, refresh_interval: 1, learning_mode_duration: 0}
"#;

const MS: Duration = Duration::from_millis(1);

/// One op, as `RateResource::acquire`, failing rather than hanging when
/// the manual clock has not granted it.
async fn acquire(rate: &RateResource) -> Duration {
    tokio::time::timeout(Duration::from_secs(10), rate.acquire())
        .await
        .expect("the op was due")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_first_ops_after_the_lease_are_on_time_and_stay_so() {
    let (_, addr) = lease_server::serve(CONFIG).await;
    let client = Client::builder().server(addr).build().unwrap();
    let clock = tollgate::ManualClock::new();
    let options = RateOptions::new(ResourceOptions::new(500.0).mode(ExpiryMode::Pessimistic))
        .limiter_clock(Arc::new(clock.clone()));
    let rate = RateResource::new(&client, "pace2", options).unwrap();
    // A second of limiter time before the lease comes.
    clock.advance(Duration::from_secs(1));
    let mut rx = rate.resource().watch();
    tokio::time::timeout(
        Duration::from_secs(60),
        rx.wait_for(|c| c.source == CapacitySource::Lease),
    )
    .await
    .unwrap()
    .unwrap();
    assert_eq!(rate.capacity(), 500.0);

    let limiter = rate.limiter();
    assert_eq!(limiter.backlog(), Duration::ZERO);
    // The pool holds 2.2 ops at 500/s: two start at once, on time.
    for _ in 0..2 {
        assert_eq!(acquire(&rate).await, Duration::ZERO);
    }
    // Then one every 2 ms, each on time.
    for _ in 0..1000 {
        clock.advance(2 * MS);
        assert_eq!(acquire(&rate).await, Duration::ZERO);
    }
    let stats = limiter.stats();
    assert_eq!(stats.admitted, 1002);
    assert_eq!(stats.total_wait, Duration::ZERO);
    assert_eq!(stats.backlog, Duration::ZERO);
}
