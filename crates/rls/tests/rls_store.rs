//! `RateLimitService` on a Redis store: replicas on one Redis admit
//! exactly each limit together, a limit the store cannot count is refused
//! at load, and Redis killed mid-run is answered by each `on_error` mode,
//! then counted again once Redis is back (the reference answers every
//! call with a gRPC error while its Redis is down: its case 39).

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::{fresh_prefix, RedisServer, T};
use tollgate::ManualClock;
use tollgate_rls::{
    Code, Descriptor, RateLimitService, Request, RequestError, RlsConfig, RlsSettings,
};
use tollgate_throttle::{OnError, RedisStore};

const LIMITS: &str = r#"
domain: edge
descriptors:
  - key: fixed
    rate_limit: {unit: minute, requests_per_unit: 50}
  - key: gcra
    rate_limit: {unit: hour, requests_per_unit: 20, algorithm: gcra}
  - key: sliding
    rate_limit: {unit: minute, requests_per_unit: 30, algorithm: sliding_window}
  - key: both
    rate_limit:
      - {unit: second, requests_per_unit: 7}
      - {unit: hour, requests_per_unit: 40, algorithm: gcra}
"#;

fn clock() -> ManualClock {
    let clock = ManualClock::new();
    clock.set_ns(T * 1_000_000_000);
    clock
}

async fn replica(
    url: &str,
    prefix: &str,
    clock: &ManualClock,
    on_error: OnError,
    replicas: u32,
) -> Arc<RateLimitService> {
    let store = RedisStore::builder(url)
        .prefix(prefix)
        .deadline(Duration::from_millis(500))
        .connect_timeout(Duration::from_millis(500))
        .on_error(on_error)
        .replicas(replicas)
        .clock(clock.clone())
        .connect()
        .await
        .unwrap();
    common::replica_of(store, LIMITS, clock)
}

fn request(key: &str, value: &str) -> Request {
    Request {
        domain: "edge".into(),
        descriptors: vec![Descriptor::new([(key, value)])],
        hits_addend: 0,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_replicas_hammered_admit_exactly_each_limit() {
    let redis = RedisServer::start();
    let clock = clock();
    let prefix = fresh_prefix("rls");
    let a = replica(&redis.url(), &prefix, &clock, OnError::Deny, 2).await;
    let b = replica(&redis.url(), &prefix, &clock, OnError::Deny, 2).await;
    for (key, limit) in [("fixed", 50), ("gcra", 20), ("sliding", 30), ("both", 7)] {
        let mut tasks = Vec::new();
        for i in 0..16 {
            let service = Arc::clone(if i % 2 == 0 { &a } else { &b });
            tasks.push(tokio::spawn(async move {
                let mut admitted = 0;
                for _ in 0..10 {
                    let r = service
                        .should_rate_limit_async(&request(key, "k"))
                        .await
                        .unwrap();
                    if r.overall_code == Code::Ok {
                        admitted += 1;
                    }
                }
                admitted
            }));
        }
        let mut admitted = 0;
        for t in tasks {
            admitted += t.await.unwrap();
        }
        assert_eq!(admitted, limit, "{key}: 160 calls on two replicas");
    }
    // No call fell back to deciding alone.
    for s in [&a, &b] {
        assert!(!s
            .metrics()
            .render()
            .contains("tollgate_rls_store_errors_total{"));
    }
}

#[tokio::test]
async fn a_token_bucket_is_refused_at_load_with_a_store() {
    let redis = RedisServer::start();
    let clock = clock();
    let yaml = "domain: edge\ndescriptors:\n  - key: user\n    rate_limit: {unit: second, requests_per_unit: 5, algorithm: token_bucket}\n";
    let store = common::redis_store(&redis.url(), &fresh_prefix("rls"), &clock).await;
    let service = RateLimitService::new(
        Some(RlsConfig::from_yaml("tb.yaml", yaml).unwrap()),
        RlsSettings::default(),
        Arc::new(clock.clone()),
    );
    let error = service.with_store(store.clone()).unwrap_err();
    assert_eq!(
        error.to_string(),
        "tb.yaml: edge.user: algorithm token_bucket cannot be counted in a Redis store: use fixed_window, gcra or sliding_window"
    );
    // A reload to such a configuration is refused; the old one answers.
    let service = RateLimitService::new(
        Some(RlsConfig::from_yaml("limits.yaml", LIMITS).unwrap()),
        RlsSettings::default(),
        Arc::new(clock.clone()),
    )
    .with_store(store)
    .unwrap();
    let refused = service.try_set_config(RlsConfig::from_yaml("tb.yaml", yaml).unwrap());
    assert!(refused.is_err());
    let r = service
        .should_rate_limit_async(&request("fixed", "x"))
        .await
        .unwrap();
    assert_eq!(r.statuses[0].limit_remaining, 49);
    // The blocking entry point says to use the async one.
    assert_eq!(
        service.should_rate_limit(&request("fixed", "x")),
        Err(RequestError::NeedsAsync)
    );
}

/// The remaining of each call of `n` to `fixed`/`x`, or None when over.
async fn remaining(service: &RateLimitService, n: usize) -> Vec<Option<u32>> {
    let mut out = Vec::new();
    for _ in 0..n {
        let r = service
            .should_rate_limit_async(&request("fixed", "x"))
            .await
            .unwrap();
        out.push((r.overall_code == Code::Ok).then_some(r.statuses[0].limit_remaining));
    }
    out
}

#[tokio::test]
async fn case_39_redis_killed_mid_run_each_on_error_mode_then_recovery() {
    for mode in [OnError::Allow, OnError::Deny, OnError::Local] {
        let mut redis = RedisServer::start();
        let clock = clock();
        let service = replica(&redis.url(), &fresh_prefix("rls"), &clock, mode, 10).await;
        assert_eq!(
            remaining(&service, 2).await,
            [Some(49), Some(48)],
            "{mode:?}"
        );
        redis.kill();
        let down = remaining(&service, 6).await;
        match mode {
            // Fail open: the whole limit remains.
            OnError::Allow => assert_eq!(down, [Some(50); 6]),
            // Fail closed.
            OnError::Deny => assert_eq!(down, [None; 6]),
            // Alone at 50 / 10 replicas = 5 a minute.
            OnError::Local => assert_eq!(down, [Some(4), Some(3), Some(2), Some(1), Some(0), None]),
        }
        let mode_name = format!("{mode:?}").to_lowercase();
        assert!(
            service.metrics().render().contains(&format!(
                "tollgate_rls_store_errors_total{{mode=\"{mode_name}\"}} 6"
            )),
            "{mode:?}"
        );
        // Back, empty: counted in Redis again once the link reconnects.
        redis.restart();
        let mut back = Vec::new();
        for _ in 0..200 {
            back = remaining(&service, 1).await;
            if back == [Some(49)] {
                break;
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        assert_eq!(back, [Some(49)], "{mode:?}: counted in Redis again");
        assert_eq!(remaining(&service, 1).await, [Some(48)], "{mode:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_cluster_decides_descriptors_on_different_slots() {
    let cluster = tollgate_testkit::redis::RedisCluster::start(3);
    let clock = clock();
    let store = RedisStore::builder("redis://unused")
        .cluster(cluster.urls())
        .prefix(fresh_prefix("rls"))
        .deadline(Duration::from_secs(2))
        .clock(clock.clone())
        .connect()
        .await
        .unwrap();
    let config = RlsConfig::from_yaml("limits.yaml", LIMITS).unwrap();
    let service = RateLimitService::new(
        Some(config),
        RlsSettings::default(),
        Arc::new(clock.clone()),
    )
    .with_store(store)
    .unwrap();
    // Many values, so the call's keys fall on several slots.
    let descriptors: Vec<Descriptor> = (0..12)
        .map(|i| Descriptor::new([("fixed", format!("v{i}"))]))
        .collect();
    let call = Request {
        domain: "edge".into(),
        descriptors,
        hits_addend: 10,
    };
    for expected in [40, 30, 20, 10, 0] {
        let r = service.should_rate_limit_async(&call).await.unwrap();
        assert_eq!(r.overall_code, Code::Ok);
        assert!(r.statuses.iter().all(|s| s.limit_remaining == expected));
    }
    let r = service.should_rate_limit_async(&call).await.unwrap();
    assert_eq!(r.overall_code, Code::OverLimit);
    assert!(service
        .metrics()
        .render()
        .lines()
        .all(|l| !l.starts_with("tollgate_rls_store_errors_total{")));
}

const SMOOTH: &str = r#"
domain: beyond
descriptors:
  - key: gcra
    rate_limit: {unit: second, requests_per_unit: 10, algorithm: gcra}
  - key: sw
    rate_limit: {unit: minute, requests_per_unit: 10, algorithm: sliding_window}
  - key: burst_and_day
    rate_limit:
      - {unit: second, requests_per_unit: 2}
      - {unit: day, requests_per_unit: 30, name: daily}
  - key: two_gcra
    rate_limit:
      - {unit: second, requests_per_unit: 2, algorithm: gcra}
      - {unit: minute, requests_per_unit: 5, algorithm: gcra}
"#;

/// The same calls at the same times, one service in memory and one on
/// Redis: the same answers, call by call (statuses and headers).
#[tokio::test]
async fn the_smooth_algorithms_and_several_limits_answer_alike_on_both_stores() {
    let redis = RedisServer::start();
    let clock = clock();
    let settings = RlsSettings {
        response_headers: true,
        ..RlsSettings::default()
    };
    let config = || RlsConfig::from_yaml("smooth.yaml", SMOOTH).unwrap();
    let memory = RateLimitService::new(Some(config()), settings.clone(), Arc::new(clock.clone()));
    let shared = RateLimitService::new(Some(config()), settings, Arc::new(clock.clone()))
        .with_store(common::redis_store(&redis.url(), &fresh_prefix("rls"), &clock).await)
        .unwrap();
    // A fixed pseudo-random walk: keys, hits and steps of 0 to 390 ms.
    let mut x: u64 = 12345;
    let mut next = |n: u64| {
        x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (x >> 33) % n
    };
    let keys = ["gcra", "sw", "burst_and_day", "two_gcra"];
    let mut now = T * 1_000_000_000;
    let mut over = 0;
    for i in 0..400 {
        now += next(4) * 130_000_000;
        clock.set_ns(now);
        let key = keys[next(4) as usize];
        let request = Request {
            domain: "beyond".into(),
            descriptors: vec![Descriptor::new([(key, "x")])],
            hits_addend: 1 + next(2) as u32,
        };
        let want = memory.should_rate_limit(&request).unwrap();
        let got = shared.should_rate_limit_async(&request).await.unwrap();
        assert_eq!(got, want, "call {i}: {key} at {now}");
        if want.overall_code == Code::OverLimit {
            over += 1;
        }
    }
    // The walk reaches the limits, not only the admitted side.
    assert!(over > 50, "{over} calls over a limit");
}
