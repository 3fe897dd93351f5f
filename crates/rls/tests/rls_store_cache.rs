//! `RateLimitService` on a Redis store answers a smooth limit that Redis
//! rejected for every cost from the store's over-limit cache, with no
//! Redis call, exactly as Redis would, until its retry time.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::{fresh_prefix, RedisServer, T};
use tollgate::ManualClock;
use tollgate_rls::{Code, Descriptor, RateLimitService, Request, Response};
use tollgate_throttle::{OnError, RedisStore};

const LIMITS: &str = r#"
domain: edge
descriptors:
  - key: gcra
    rate_limit: {unit: hour, requests_per_unit: 20, algorithm: gcra}
"#;

/// A replica failing open (a call Redis does not answer is OK), with an
/// over-limit cache of `cache_keys`.
async fn replica(
    url: &str,
    prefix: &str,
    clock: &ManualClock,
    cache_keys: usize,
) -> Arc<RateLimitService> {
    let store = RedisStore::builder(url)
        .prefix(prefix)
        .deadline(Duration::from_millis(300))
        .connect_timeout(Duration::from_millis(500))
        .on_error(OnError::Allow)
        .over_limit_cache(cache_keys)
        .clock(clock.clone())
        .connect()
        .await
        .unwrap();
    common::replica_of(store, LIMITS, clock)
}

async fn call(service: &RateLimitService) -> Response {
    let request = Request {
        domain: "edge".into(),
        descriptors: vec![Descriptor::new([("gcra", "k")])],
        hits_addend: 0,
    };
    service.should_rate_limit_async(&request).await.unwrap()
}

fn store_errors(service: &RateLimitService) -> bool {
    service
        .metrics()
        .render()
        .contains("tollgate_rls_store_errors_total{")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_over_its_smooth_limit_is_answered_locally_until_its_retry_time() {
    let redis = RedisServer::start();
    let clock = ManualClock::new();
    clock.set_ns(T * 1_000_000_000);
    let prefix = fresh_prefix("rls");
    let cached = replica(&redis.url(), &prefix, &clock, 100).await;
    let plain = replica(&redis.url(), &prefix, &clock, 0).await;
    for _ in 0..20 {
        assert_eq!(call(&cached).await.overall_code, Code::Ok);
    }
    // Redis rejects the 21st for any cost: one token comes back in 180 s.
    assert_eq!(call(&cached).await.overall_code, Code::OverLimit);
    let from_redis = call(&plain).await;
    assert_eq!(from_redis.overall_code, Code::OverLimit);

    // Redis stalls: the cached replica still answers as Redis did, with
    // no call (one would pass the deadline and be answered OK).
    redis.pause();
    assert_eq!(call(&cached).await, from_redis);
    clock.advance(Duration::from_secs(60));
    let later = call(&cached).await;
    redis.resume();
    assert_eq!(later.overall_code, Code::OverLimit);
    assert_eq!(call(&plain).await, later, "Redis answers as the cache did");
    assert_ne!(later, from_redis, "the reset came 60 s closer");
    assert!(!store_errors(&cached));

    // At the retry time the entry is gone: the call goes to Redis again.
    clock.advance(Duration::from_secs(120));
    redis.pause();
    assert_eq!(call(&cached).await.overall_code, Code::Ok);
    redis.resume();
    assert!(store_errors(&cached));
}
