//! The quota store's coalescing on a real `redis-server`: concurrent
//! Allows that find the store's calls busy go to Redis as one script call,
//! which answers exactly as the same requests sent one by one in the same
//! order (and as the in-memory buckets); a bucket hammered from many tasks
//! grants exactly its tokens in fewer calls than Allows; a Cluster's batch
//! splits by hash tag; and a waiter never waits past the deadline.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;

use tollgate::ManualClock;
use tollgate_quota::{
    AllowRequest, Decision, OnError, Quota, QuotaConfig, QuotaLimits, QuotaStore, Status,
};
use tollgate_testkit::redis::{fresh_prefix, RedisCluster, RedisServer};

const MS: u64 = 1_000_000;
/// About 2026 in nanoseconds since the epoch: Redis' own scale.
const TODAY: u64 = 1_764_000_000_123_456_789;

/// Runs `futures` at once on the current task, polling them in order
/// (so the first to reach the store goes alone and the others queue in
/// that order); their outputs, in order.
async fn together<F: Future>(futures: Vec<F>) -> Vec<F::Output> {
    let mut futures: Vec<Pin<Box<F>>> = futures.into_iter().map(Box::pin).collect();
    let mut outputs: Vec<Option<F::Output>> = futures.iter().map(|_| None).collect();
    std::future::poll_fn(|cx| {
        let mut done = true;
        for (future, output) in futures.iter_mut().zip(outputs.iter_mut()) {
            if output.is_none() {
                match future.as_mut().poll(cx) {
                    Poll::Ready(v) => *output = Some(v),
                    Poll::Pending => done = false,
                }
            }
        }
        if done {
            Poll::Ready(())
        } else {
            Poll::Pending
        }
    })
    .await;
    outputs.into_iter().map(|o| o.expect("done")).collect()
}

/// A quota on `store` (one connection, so one call in flight) and the
/// manual clock both it and the store decide at.
async fn on_store(store: QuotaStore, yaml: &str, clock: &ManualClock) -> Quota {
    let store = store
        .pool_size(1)
        .deadline(Duration::from_secs(10))
        .on_error(OnError::Deny)
        .clock(Arc::new(clock.clone()));
    Quota::with_store(
        QuotaConfig::from_yaml(yaml).expect("a config"),
        QuotaLimits::default(),
        Arc::new(clock.clone()),
        store,
    )
    .await
    .expect("redis is up")
}

/// One request of a random run: namespace, bucket, tokens, max wait.
type Ask = (&'static str, &'static str, i64, Option<i64>);

/// Rounds of requests asked at once, on each bucket shape of
/// `quota_redis.rs`' random sequences: the coalesced answers equal those
/// of the same requests one by one in the same order, in Redis and in
/// memory, in fewer script calls.
#[tokio::test(flavor = "current_thread")]
async fn coalesced_answers_equal_the_same_requests_one_by_one() {
    let batched_redis = RedisServer::start();
    let single_redis = RedisServer::start();
    let shapes = [
        "{size: 5, fill_rate: 10, max_debt_millis: 1000, wait_timeout_millis: 500}",
        "{size: 1, fill_rate: 0.3, max_debt_millis: 20000, wait_timeout_millis: 10000}",
        "{size: 100000000, fill_rate: 1000000.5, max_debt_millis: 3000, max_tokens_per_request: 300000000}",
        "{size: 3, fill_rate: 7.77, max_debt_millis: 900000000, wait_timeout_millis: 900000000}",
    ];
    let mut rng = 0x9E37_79B9_7F4A_7C15u64;
    let mut next = move || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng
    };
    let (mut rounds, mut asked) = (0u64, 0usize);
    let batched_before = batched_redis.script_calls().await;
    let single_before = single_redis.script_calls().await;
    for shape in shapes {
        for start in [0, TODAY] {
            let yaml = format!(
                "namespaces:\n  ns:\n    buckets:\n      b: {shape}\n  dyn:\n    max_dynamic_buckets: 3\n    dynamic_bucket_template: {shape}\n"
            );
            let clock = ManualClock::new();
            clock.set_ns(start);
            let store = |server: &RedisServer| {
                QuotaStore::new(server.url())
                    .expect("a url")
                    .prefix(fresh_prefix("qbatch"))
            };
            let batched = on_store(store(&batched_redis), &yaml, &clock).await;
            let single = on_store(store(&single_redis), &yaml, &clock).await;
            let memory = Quota::new(
                QuotaConfig::from_yaml(&yaml).expect("a config"),
                QuotaLimits::default(),
                Arc::new(clock.clone()),
            );
            let big = shape.contains("100000000");
            for _ in 0..25 {
                match next() % 3 {
                    0 => clock.advance(Duration::from_nanos(next() % (700 * MS))),
                    1 => clock.advance(Duration::from_nanos(next() % 3_000)),
                    _ => {}
                }
                let mut round: Vec<Ask> = Vec::new();
                for _ in 0..1 + next() % 24 {
                    let tokens = if big {
                        (next() % 400_000_000) as i64
                    } else {
                        (next() % 6) as i64
                    };
                    let wait = match next() % 3 {
                        0 => Some((next() % 1500) as i64 - 100),
                        _ => None,
                    };
                    let names = ["a", "b", "c", "d", "e"];
                    let (ns, name) = if next() % 2 == 0 {
                        ("ns", "b")
                    } else {
                        ("dyn", names[(next() % 5) as usize])
                    };
                    round.push((ns, name, tokens, wait));
                }
                let requests: Vec<AllowRequest<'_>> = round
                    .iter()
                    .map(|&(ns, name, tokens, wait)| {
                        let req = AllowRequest::new(ns, name, tokens);
                        match wait {
                            Some(w) => req.max_wait_millis(w),
                            None => req,
                        }
                    })
                    .collect();
                let coalesced: Vec<Decision> =
                    together(requests.iter().map(|r| batched.allow_async(r)).collect()).await;
                for (i, req) in requests.iter().enumerate() {
                    let one = single.allow_async(req).await;
                    assert_eq!(coalesced[i], one, "{shape} at {start}: {:?}", round[i]);
                    assert_eq!(memory.allow(req), one, "{shape} at {start}: {:?}", round[i]);
                }
                rounds += 1;
                asked += requests.len();
            }
            assert_eq!(batched.metrics().store_errors(OnError::Deny), 0);
            assert_eq!(single.metrics().store_errors(OnError::Deny), 0);
        }
    }
    let batched_calls = batched_redis.script_calls().await - batched_before;
    let single_calls = single_redis.script_calls().await - single_before;
    // Each round: the first request alone, the rest in one batch.
    assert!(
        batched_calls <= 2 * rounds,
        "{batched_calls} calls in {rounds} rounds"
    );
    assert!(
        batched_calls < single_calls,
        "{batched_calls} calls batched, {single_calls} one by one ({asked} asked)"
    );
}

/// Many tasks hammering one bucket on a fixed clock: exactly its tokens
/// are granted, not one more, in fewer script calls than Allows.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hammered_bucket_grants_exactly_its_tokens_in_fewer_calls() {
    let server = RedisServer::start();
    let clock = ManualClock::new();
    clock.set_ns(TODAY);
    let yaml = "namespaces:\n  ns:\n    buckets:\n      b: {size: 500, fill_rate: 1, max_debt_millis: 1, max_tokens_per_request: 3}\n";
    let store = QuotaStore::new(server.url())
        .expect("a url")
        .prefix(fresh_prefix("hammer"));
    let quota = Arc::new(on_store(store.pool_size(2), yaml, &clock).await);
    let before = server.script_calls().await;
    let (tasks, each) = (32usize, 40usize);
    let mut handles = Vec::new();
    for t in 0..tasks {
        let quota = Arc::clone(&quota);
        handles.push(tokio::spawn(async move {
            let mut granted = 0i64;
            for i in 0..each {
                let tokens = 1 + ((i + t) % 3) as i64;
                let d = quota
                    .allow_async(&AllowRequest::new("ns", "b", tokens))
                    .await;
                if d.status == Status::Ok {
                    granted += tokens;
                } else {
                    assert_eq!(d.status, Status::RejectedTimeout);
                }
            }
            granted
        }));
    }
    let mut granted = 0;
    for handle in handles {
        granted += handle.await.expect("a task");
    }
    let calls = server.script_calls().await - before;
    assert_eq!(granted, 500);
    assert_eq!(quota.metrics().store_errors(OnError::Deny), 0);
    let allows = (tasks * each) as u64;
    assert!(calls < allows, "{calls} script calls for {allows} Allows");
}

/// Requests of four namespaces (four hash tags) interleaved: the first
/// goes alone, then one call per tag, each answering as in memory.
#[tokio::test(flavor = "current_thread")]
async fn a_batch_on_a_cluster_splits_by_hash_tag() {
    let cluster = RedisCluster::start(3);
    let clock = ManualClock::new();
    clock.set_ns(TODAY);
    let bucket = "{size: 3, fill_rate: 1, max_debt_millis: 1500, wait_timeout_millis: 10000}";
    let yaml = format!(
        "namespaces:\n  alpha:\n    buckets:\n      b: {bucket}\n  beta:\n    buckets:\n      b: {bucket}\n  \
         gamma:\n    buckets:\n      b: {bucket}\n  \
         capped:\n    max_dynamic_buckets: 2\n    dynamic_bucket_template: {{size: 2, fill_rate: 1}}\n"
    );
    let yaml = yaml.as_str();
    let store = QuotaStore::cluster(cluster.urls())
        .expect("seeds")
        .prefix(fresh_prefix("split"));
    let quota = on_store(store, yaml, &clock).await;
    let memory = Quota::new(
        QuotaConfig::from_yaml(yaml).expect("a config"),
        QuotaLimits::default(),
        Arc::new(clock.clone()),
    );
    let mut before = 0;
    for node in &cluster.nodes {
        before += node.script_calls().await;
    }
    let mut requests = Vec::new();
    for i in 0..5 {
        for ns in ["alpha", "beta", "gamma", "capped"] {
            let name = if ns == "capped" {
                ["x", "y", "z"][i % 3]
            } else {
                "b"
            };
            requests.push(AllowRequest::new(ns, name, 1));
        }
    }
    let coalesced = together(requests.iter().map(|r| quota.allow_async(r)).collect()).await;
    let mut calls = 0;
    for node in &cluster.nodes {
        calls += node.script_calls().await;
    }
    let expected: Vec<Decision> = requests.iter().map(|r| memory.allow(r)).collect();
    assert_eq!(coalesced, expected);
    assert_eq!(quota.metrics().store_errors(OnError::Deny), 0);
    assert_eq!(calls - before, 5);
}

/// Redis stopped (its socket open, unanswered): the Allow in flight and
/// every one queued behind it answer by `on_error` at the deadline, not
/// after the call in flight and then their own. Tokio's clock is paused
/// once connected, so the deadline passes exactly, whatever the machine's
/// load.
#[tokio::test(flavor = "current_thread")]
async fn a_waiter_answers_by_on_error_within_the_deadline() {
    let server = RedisServer::start();
    let deadline = Duration::from_millis(50);
    let yaml = "namespaces:\n  ns:\n    buckets:\n      b: {size: 100, fill_rate: 1}\n";
    for mode in [OnError::Deny, OnError::Allow] {
        let store = QuotaStore::new(server.url())
            .expect("a url")
            .prefix(fresh_prefix("paused"))
            .pool_size(1)
            .deadline(deadline)
            .on_error(mode);
        let quota = Quota::with_store(
            QuotaConfig::from_yaml(yaml).expect("a config"),
            QuotaLimits::default(),
            Arc::new(tollgate::SystemClock::new()),
            store,
        )
        .await
        .expect("redis is up");
        server.pause();
        tokio::time::pause();
        let start = tokio::time::Instant::now();
        let requests: Vec<AllowRequest<'_>> =
            (0..20).map(|_| AllowRequest::new("ns", "b", 1)).collect();
        let answers = together(
            requests
                .iter()
                .map(|r| async {
                    let d = quota.allow_async(r).await;
                    (d.status, start.elapsed())
                })
                .collect(),
        )
        .await;
        tokio::time::resume();
        server.resume();
        let want = match mode {
            OnError::Deny => Status::RejectedServerError,
            _ => Status::Ok,
        };
        for (i, (status, took)) in answers.iter().enumerate() {
            assert_eq!(*status, want, "{mode:?} {i}");
            // Tokio's timers fire on whole milliseconds.
            assert!(
                *took <= deadline + Duration::from_millis(1),
                "{mode:?} {i}: {took:?}"
            );
        }
        assert_eq!(quota.metrics().store_errors(mode), 20);
    }
}
