//! Throttlers sharing one real `redis-server`: replicas hammered from many
//! tasks admit exactly each limit, and when Redis dies or stalls each
//! `on_error` mode decides, then decisions go back to Redis once it is
//! back.

#[path = "common/gathered.rs"]
mod common_gathered;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use axum::http::Request;
use common_gathered::gathered;
use tollgate::{ManualClock, RateSpec};
use tollgate_testkit::logs::Logs;
use tollgate_testkit::redis::{RedisCluster, RedisServer};
use tollgate_throttle::{
    Extract, FixedWindow, Gcra, Limit, OnError, Policy, RedisStore, RequestHead, Rule, SlidingLog,
    SlidingWindowCounter, Throttler, TokenPool,
};

const S: u64 = 1_000_000_000;
const MS: u64 = 1_000_000;

fn request(key: &str) -> Request<()> {
    Request::builder()
        .header("x-api-key", key)
        .body(())
        .expect("a request")
}

async fn replica(
    server: &RedisServer,
    clock: &ManualClock,
    limit: Limit,
    on_error: OnError,
    replicas: u32,
) -> Throttler {
    let store = RedisStore::builder(server.url())
        .clock(clock.clone())
        .deadline(Duration::from_secs(5))
        .on_error(on_error)
        .replicas(replicas)
        .connect()
        .await
        .expect("redis answers");
    Throttler::builder()
        .rule(Rule::new("per-key", Extract::header("x-api-key"), limit))
        .store(store)
        .try_build()
        .expect("a rule the store keeps")
}

/// Requests from 24 tasks spread over `throttlers`, for keys `a` and `b`:
/// how many each key had admitted.
async fn hammer(throttlers: &[Throttler], per_task: usize) -> (u64, u64) {
    let a = Arc::new(AtomicU64::new(0));
    let b = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for t in 0..24 {
        let throttler = throttlers[t % throttlers.len()].clone();
        let (a, b) = (a.clone(), b.clone());
        tasks.push(tokio::spawn(async move {
            for i in 0..per_task {
                let (key, count) = if (i + t) % 2 == 0 {
                    ("a", &a)
                } else {
                    ("b", &b)
                };
                let req = request(key);
                if throttler.decide(&RequestHead::of(&req)).await.is_ok() {
                    // Relaxed: a count read after every task is joined.
                    count.fetch_add(1, Ordering::Relaxed);
                }
            }
        }));
    }
    for task in tasks {
        task.await.expect("a task");
    }
    (a.load(Ordering::Relaxed), b.load(Ordering::Relaxed))
}

/// `replicas` throttlers on one Redis admit exactly `quota.0` per key in
/// a window (or from a full bucket), then `quota.1` when `next` later.
async fn replicas_admit_exactly(replicas: usize, limit: Limit, quota: (u64, u64), next: Duration) {
    let server = RedisServer::start();
    let clock = ManualClock::new();
    clock.set_ns(1_000 * S);
    let mut throttlers = Vec::new();
    for _ in 0..replicas {
        throttlers.push(replica(&server, &clock, limit.clone(), OnError::Deny, 1).await);
    }
    // 24 tasks x 20 requests: 240 per key, against a quota of `quota`.
    assert_eq!(
        hammer(&throttlers, 20).await,
        (quota.0, quota.0),
        "{limit:?}"
    );
    clock.advance(next);
    assert_eq!(
        hammer(&throttlers, 20).await,
        (quota.1, quota.1),
        "{limit:?}, later"
    );
    for t in &throttlers {
        assert!(!gathered(t.registry()).contains("tollgate_throttle_store_errors_total{"));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_and_three_replicas_admit_exactly_a_fixed_windows_limit() {
    for replicas in [2, 3] {
        let limit = Limit::FixedWindow(FixedWindow::new(100, Duration::from_secs(1)).unwrap());
        replicas_admit_exactly(replicas, limit, (100, 100), Duration::from_secs(1)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_and_three_replicas_admit_exactly_a_sliding_counters_limit() {
    for replicas in [2, 3] {
        let limit = Limit::SlidingWindowCounter(
            SlidingWindowCounter::new(100, Duration::from_secs(1)).unwrap(),
        );
        // Two windows on, the first no longer weighs.
        replicas_admit_exactly(replicas, limit, (100, 100), Duration::from_secs(2)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_and_three_replicas_admit_exactly_a_gcra_burst() {
    for replicas in [2, 3] {
        let limit = Limit::Gcra(Gcra::new(RateSpec::new(10.0).unwrap(), 100, 0).unwrap());
        // Ten seconds refill the whole burst.
        replicas_admit_exactly(replicas, limit, (100, 100), Duration::from_secs(10)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_and_three_replicas_admit_exactly_a_sliding_logs_limit() {
    for replicas in [2, 3] {
        for logged in [false, true] {
            let limit = Limit::SlidingLog(
                SlidingLog::new(100, Duration::from_secs(1))
                    .unwrap()
                    .log_rejected(logged),
            );
            // A window on, every entry (logged rejections too) has left it.
            replicas_admit_exactly(replicas, limit, (100, 100), Duration::from_secs(1)).await;
        }
    }
}

/// What one in-memory `pool` admits of 240 requests of cost 1 on a fresh
/// key, then of 240 more `next` later: the count a hammered key must come
/// to on any number of replicas.
fn one_pool_admits(pool: &TokenPool, next: Duration) -> (u64, u64) {
    let t0 = 1_000 * S;
    let mut key = pool.new_state(t0);
    let mut admitted = |t: u64| {
        (0..240)
            .filter(|_| pool.check(&mut key, t, 1).is_admitted())
            .count() as u64
    };
    let first = admitted(t0);
    (first, admitted(t0 + next.as_nanos() as u64))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_and_three_replicas_admit_exactly_what_one_token_pool_admits() {
    // 100,000/s with a burst ratio of 1.5: A = 1 ms = 100 ops and B = 50.
    // A fresh key holds A + B = 150; 300 µs later 30 ops refill A
    // directly and move 30 * 50 / 100 = 15 of the backlog as burst.
    let ratio = TokenPool::new("100000,1.5".parse().unwrap());
    let next = Duration::from_micros(300);
    assert_eq!(one_pool_admits(&ratio, next), (150, 45));
    // A plain bucket of 100 at 10/s: 30 back after 3 s.
    let bucket = TokenPool::new("10".parse().unwrap())
        .with_burst(100)
        .unwrap();
    assert_eq!(one_pool_admits(&bucket, Duration::from_secs(3)), (100, 30));
    for replicas in [2, 3] {
        replicas_admit_exactly(
            replicas,
            Limit::TokenPool(ratio.clone()),
            one_pool_admits(&ratio, next),
            next,
        )
        .await;
        replicas_admit_exactly(
            replicas,
            Limit::TokenPool(bucket.clone()),
            one_pool_admits(&bucket, Duration::from_secs(3)),
            Duration::from_secs(3),
        )
        .await;
    }
}

#[tokio::test]
async fn rules_the_store_cannot_keep_are_refused_at_build() {
    let server = RedisServer::start();
    let store = RedisStore::builder(server.url()).connect().await.unwrap();
    let banned = Rule::new(
        "banned",
        Extract::global(),
        Limit::FixedWindow(FixedWindow::new(1, Duration::from_secs(1)).unwrap()),
    )
    .ban(Duration::from_secs(60));
    let err = Throttler::builder()
        .rule(banned.slice(5))
        .store(store)
        .try_build()
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "redis store: rule \"banned\": a rule with a slice has no ban (a replica spends its \
         slice without asking Redis, so it would not see the ban): drop one"
    );
}

/// Admitted out of `n` decisions for one key.
async fn admitted(throttler: &Throttler, key: &str, n: usize) -> usize {
    let mut count = 0;
    for _ in 0..n {
        let req = request(key);
        // Each decision returns well within this bound, or the test fails.
        let decided = tokio::time::timeout(
            Duration::from_secs(5),
            throttler.decide(&RequestHead::of(&req)),
        )
        .await
        .expect("a decision within the bound");
        if decided.is_ok() {
            count += 1;
        }
    }
    count
}

fn errors(throttler: &Throttler, mode: &str) -> u64 {
    let text = gathered(throttler.registry());
    let prefix = format!("tollgate_throttle_store_errors_total{{on_error=\"{mode}\"}} ");
    text.lines()
        .find_map(|l| l.strip_prefix(prefix.as_str()))
        .map_or(0, |v| v.parse().expect("a count"))
}

/// A throttler on `server` with a limit of 10 per hour-long window per
/// key, shared by two replicas, failing over to `mode` past `deadline`.
async fn failing_over(
    server: &RedisServer,
    clock: &ManualClock,
    mode: OnError,
    deadline: Duration,
) -> Throttler {
    let store = RedisStore::builder(server.url())
        .clock(clock.clone())
        .deadline(deadline)
        .connect_timeout(Duration::from_millis(200))
        .on_error(mode)
        .replicas(2)
        .connect()
        .await
        .expect("redis answers");
    let limit = Limit::FixedWindow(FixedWindow::new(10, Duration::from_secs(3600)).unwrap());
    Throttler::builder()
        .rule(Rule::new("per-key", Extract::header("x-api-key"), limit))
        .store(store)
        .try_build()
        .expect("a rule the store keeps")
}

/// Waits until decisions go through Redis again: a fresh key's decision
/// counts no error.
async fn until_redis_answers(throttler: &Throttler, mode: &str) {
    for i in 0..500 {
        let before = errors(throttler, mode);
        let req = request(&format!("probe-{i}"));
        let _ = throttler.decide(&RequestHead::of(&req)).await;
        if errors(throttler, mode) == before {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("decisions never went back to redis");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn when_redis_dies_each_mode_decides_and_redis_decides_again_after_restart() {
    let mut server = RedisServer::start();
    let clock = ManualClock::new();
    clock.set_ns(1_000 * S);
    // A dead Redis fails calls at once; the deadline is for a stalled one
    // (below), and long here so that a loaded machine never reaches it.
    let deadline = Duration::from_secs(2);
    let allow = failing_over(&server, &clock, OnError::Allow, deadline).await;
    let deny = failing_over(&server, &clock, OnError::Deny, deadline).await;
    let local = failing_over(&server, &clock, OnError::Local, deadline).await;
    // Through Redis: 10 per key, whichever throttler asks.
    assert_eq!(admitted(&allow, "k", 6).await, 6);
    assert_eq!(admitted(&deny, "k", 6).await, 4);
    assert_eq!(admitted(&local, "k", 6).await, 0);

    let logs = Logs::default();
    let guard = tracing::subscriber::set_default(logs.subscriber());
    server.kill();
    // allow admits everything, deny nothing, local its own half (5).
    assert_eq!(admitted(&allow, "dead", 20).await, 20);
    assert_eq!(admitted(&deny, "dead", 20).await, 0);
    assert_eq!(admitted(&local, "dead", 20).await, 5);
    assert_eq!(errors(&allow, "allow"), 20);
    assert_eq!(errors(&deny, "deny"), 20);
    assert_eq!(errors(&local, "local"), 20);
    // 20 failures each, one line each (at most one per 10 s), naming Redis.
    drop(guard);
    let text = logs.text();
    let lines: Vec<&str> = text
        .lines()
        .filter(|l| l.contains("throttle store:"))
        .collect();
    assert_eq!(lines.len(), 3, "{text}");
    let address = server.url().replace("redis://", "");
    for line in lines {
        assert!(line.contains("WARN"), "{line}");
        assert!(line.contains(&address), "{line}");
    }

    // A fresh Redis: decisions go back to it (with a fresh key's limit).
    server.restart();
    for (t, mode) in [(&allow, "allow"), (&deny, "deny"), (&local, "local")] {
        until_redis_answers(t, mode).await;
    }
    assert_eq!(admitted(&allow, "back", 8).await, 8);
    assert_eq!(admitted(&deny, "back", 8).await, 2);
    assert_eq!(admitted(&local, "back", 8).await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_redis_answers_by_the_mode_after_the_deadline() {
    let server = RedisServer::start();
    let clock = ManualClock::new();
    clock.set_ns(1_000 * S);
    let deadline = Duration::from_millis(10);
    let allow = failing_over(&server, &clock, OnError::Allow, deadline).await;
    let deny = failing_over(&server, &clock, OnError::Deny, deadline).await;
    let local = failing_over(&server, &clock, OnError::Local, deadline).await;
    server.pause();
    assert_eq!(admitted(&allow, "k", 3).await, 3);
    assert_eq!(admitted(&deny, "k", 3).await, 0);
    assert_eq!(admitted(&local, "k", 7).await, 5);
    assert_eq!(errors(&allow, "allow"), 3);
    assert_eq!(errors(&deny, "deny"), 3);
    assert_eq!(errors(&local, "local"), 7);
    server.resume();
}

#[tokio::test]
async fn an_unparsable_url_or_an_unreachable_redis_is_one_line_in_bounded_time() {
    let err = RedisStore::builder("http://127.0.0.1:1")
        .connect()
        .await
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "invalid redis store: cannot parse \"http://127.0.0.1:1\": the scheme is none of \
         redis://, rediss://, redis+sentinel://"
    );
    let err = RedisStore::builder("redis+sentinel://127.0.0.1:1")
        .connect()
        .await
        .unwrap_err();
    assert!(err.is_config(), "{err}");
    assert!(!err.to_string().contains('\n'));
    // A port nothing listens on: refused at once.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let err = RedisStore::builder(format!("redis://127.0.0.1:{port}"))
        .connect_timeout(Duration::from_millis(300))
        .connect()
        .await
        .unwrap_err();
    assert!(!err.is_config());
    assert!(
        err.to_string()
            .starts_with(&format!("redis unreachable: 127.0.0.1:{port}: ")),
        "{err}"
    );
    assert!(!err.to_string().contains('\n'));
}

#[tokio::test]
async fn the_store_comes_from_the_rules_yaml() {
    let server = RedisServer::start();
    let yaml = format!(
        "store:\n  url: {}\n  prefix: \"app:\"\n  pool_size: 1\n  deadline: 2s\n  \
         on_error: deny\n  replicas: 3\nrules:\n  - name: per-key\n    \
         key: {{ header: x-api-key }}\n    \
         limit: {{ fixed_window: {{ limit: 2, window: 1h }} }}\n",
        server.url()
    );
    let store = tollgate_throttle::store_from_yaml(&yaml)
        .unwrap()
        .expect("a store")
        .connect()
        .await
        .unwrap();
    assert_eq!(store.on_error(), OnError::Deny);
    assert_eq!(store.replicas(), 3);
    assert_eq!(store.deadline(), Duration::from_secs(2));
    let throttler = Throttler::builder()
        .rule(tollgate_throttle::rules_from_yaml(&yaml).unwrap().remove(0))
        .store(store)
        .try_build()
        .unwrap();
    assert_eq!(admitted(&throttler, "k", 3).await, 2);
    // The keys carry the prefix and the hash tag.
    let keys: Vec<String> = server.query(&["KEYS", "*"]).await;
    assert_eq!(keys, ["app:{k}:per-key:fw:2:3600000000000:h"]);
}

#[test]
fn a_bad_store_in_the_rules_yaml_is_one_line() {
    let rules = "rules:\n  - name: r\n    key: global\n    slice: 5\n    \
                 limit: { token_pool: { rate: \"5\" } }\n";
    let err = tollgate_throttle::rules_from_yaml(&format!(
        "store: {{ url: \"redis://127.0.0.1:6379\" }}\n{rules}"
    ))
    .unwrap_err();
    assert_eq!(
        err.to_string(),
        "invalid throttle rules: store: redis store: rule \"r\": a token pool takes no slices \
         (tokens spent after they were taken would let the pool refill under them): use \
         fixed_window or sliding_window_counter, or drop the slice"
    );
    // Without a store the same rules are fine.
    assert!(tollgate_throttle::rules_from_yaml(rules).is_ok());
    let err = tollgate_throttle::store_from_yaml(&format!(
        "store: {{ url: \"redis://127.0.0.1:6379\", on_error: maybe }}\n{rules}"
    ))
    .unwrap_err();
    assert_eq!(
        err.to_string(),
        "invalid throttle rules: store: invalid redis store: on_error \"maybe\" is none of \
         allow, deny, local"
    );
    let err = tollgate_throttle::store_from_yaml(&format!("store: {{ prefix: x }}\n{rules}"))
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "invalid throttle rules: store: invalid redis store: give either a url or a cluster \
         seed list"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn post_accounting_reaches_redis_and_other_replicas_see_it() {
    let server = RedisServer::start();
    let clock = ManualClock::new();
    clock.set_ns(1_000 * S);
    let limit = Limit::FixedWindow(FixedWindow::new(10, Duration::from_secs(3600)).unwrap());
    let store = |clock: &ManualClock| {
        RedisStore::builder(server.url())
            .clock(clock.clone())
            .deadline(Duration::from_secs(2))
            .connect()
    };
    let predicted = Throttler::builder()
        .rule(Rule::new(
            "per-key",
            Extract::header("x-api-key"),
            limit.clone(),
        ))
        .cost(tollgate_throttle::CostModel::Predicted {
            class: Extract::global(),
            default: 1,
        })
        .store(store(&clock).await.unwrap())
        .try_build()
        .unwrap();
    let other = Throttler::builder()
        .rule(Rule::new("per-key", Extract::header("x-api-key"), limit))
        .store(store(&clock).await.unwrap())
        .try_build()
        .unwrap();
    let req = request("k");
    let permit = predicted.decide(&RequestHead::of(&req)).await.unwrap();
    assert_eq!(permit.cost(), 1);
    // It really cost 7: 6 more are charged to the key in Redis.
    permit.finish(7);
    for _ in 0..200 {
        let count: Option<String> = server
            .query(&["HGET", "tollgate:{k}:per-key:fw:10:3600000000000:h", "c"])
            .await;
        if count.as_deref() == Some("7") {
            // 3 left of 10, whichever replica asks.
            assert_eq!(admitted(&other, "k", 5).await, 3);
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("the settlement never reached redis");
}

/// What a decision came to, for comparing two throttlers.
fn outcome(
    d: Result<tollgate_throttle::Permit, tollgate_throttle::Rejection>,
) -> (
    bool,
    String,
    Duration,
    Vec<(String, u64)>,
    Vec<(u64, Duration)>,
) {
    match d {
        Ok(p) => (
            true,
            String::new(),
            p.delay(),
            p.warnings()
                .iter()
                .map(|w| (w.rule.to_string(), w.remaining))
                .collect(),
            p.limits().iter().map(|l| (l.remaining, l.reset)).collect(),
        ),
        Err(r) => (
            false,
            format!("{:?} {:?}", r.kind(), r.rule()),
            r.retry_after().unwrap_or_default(),
            Vec::new(),
            Vec::new(),
        ),
    }
}

#[tokio::test]
async fn a_redis_backed_throttler_decides_as_one_in_memory() {
    let server = RedisServer::start();
    let clock = ManualClock::new();
    clock.set_ns(1_000 * S);
    let fw = |l, ms| Limit::FixedWindow(FixedWindow::new(l, Duration::from_millis(ms)).unwrap());
    let rules = || {
        vec![
            Rule::new("per-key", Extract::header("x-api-key"), fw(5, 1000))
                .soft(Limit::SlidingWindowCounter(
                    SlidingWindowCounter::new(3, Duration::from_millis(700)).unwrap(),
                ))
                .ratelimit_headers(true),
            Rule::new(
                "global",
                Extract::global(),
                Limit::Gcra(Gcra::new(RateSpec::new(10.0).unwrap(), 4, 2).unwrap()),
            )
            .ratelimit_headers(true),
            Rule::new("shadow", Extract::header("x-api-key"), fw(2, 300))
                .mode(tollgate_throttle::Mode::Shadow),
        ]
    };
    let mut memory = Throttler::builder().clock(clock.clone());
    let store = RedisStore::builder(server.url())
        .clock(clock.clone())
        .deadline(Duration::from_secs(2))
        .connect()
        .await
        .unwrap();
    let mut shared = Throttler::builder().store(store);
    for (a, b) in rules().into_iter().zip(rules()) {
        memory = memory.rule(a);
        shared = shared.rule(b);
    }
    let (memory, shared) = (memory.build(), shared.try_build().unwrap());
    let mut rng = 0x9E37_79B9_7F4A_7C15u64;
    let (mut admitted, mut rejected) = (0, 0);
    for step in 0..400 {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        clock.advance(Duration::from_millis(rng % 90));
        let req = request(["a", "b", "c"][(rng >> 32) as usize % 3]);
        let head = RequestHead::of(&req);
        let m = outcome(memory.check(&head));
        let r = outcome(shared.decide(&head).await);
        assert_eq!(r, m, "step {step}");
        if m.0 {
            admitted += 1;
        } else {
            rejected += 1;
        }
    }
    // Both ways were taken many times.
    assert!(
        admitted > 50 && rejected > 50,
        "{admitted} admitted, {rejected} rejected"
    );
}

#[tokio::test]
async fn a_redis_backed_throttler_of_token_pools_decides_as_one_in_memory() {
    let server = RedisServer::start();
    let clock = ManualClock::new();
    clock.set_ns(1_000 * S);
    let pool = |rate: &str| TokenPool::new(rate.parse().unwrap());
    // A key's pool admitted and then refunded when the global bucket
    // rejects (or is banned) keeps its refill, in memory and in Redis
    // alike; a banned key's pool is not consulted.
    let rules = || {
        vec![
            Rule::new(
                "per-key",
                Extract::header("x-api-key"),
                Limit::TokenPool(pool("20,1.5")),
            )
            .soft(Limit::TokenPool(pool("10").with_burst(3).unwrap()))
            .ratelimit_headers(true),
            Rule::new(
                "global",
                Extract::global(),
                Limit::TokenPool(pool("30,2").with_backlog_cap(Duration::from_millis(200))),
            )
            .ban(Duration::from_millis(40))
            .ratelimit_headers(true),
            Rule::new(
                "shadow",
                Extract::header("x-api-key"),
                Limit::TokenPool(pool("5,3")),
            )
            .mode(tollgate_throttle::Mode::Shadow)
            .ban(Duration::from_millis(300)),
        ]
    };
    let mut memory = Throttler::builder().clock(clock.clone());
    let store = RedisStore::builder(server.url())
        .clock(clock.clone())
        .deadline(Duration::from_secs(2))
        .connect()
        .await
        .unwrap();
    let mut shared = Throttler::builder().store(store);
    for (a, b) in rules().into_iter().zip(rules()) {
        memory = memory.rule(a);
        shared = shared.rule(b);
    }
    let (memory, shared) = (memory.build(), shared.try_build().unwrap());
    let mut rng = 0x243F_6A88_85A3_08D3u64;
    let (mut admitted, mut rejected, mut banned) = (0, 0, 0);
    for step in 0..300 {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        clock.advance(Duration::from_nanos(rng % 30_000_000));
        let req = request(["a", "b", "c"][(rng >> 32) as usize % 3]);
        let head = RequestHead::of(&req);
        let m = outcome(memory.check(&head));
        let r = outcome(shared.decide(&head).await);
        assert_eq!(r, m, "step {step}");
        if m.0 {
            admitted += 1;
        } else if m.1.starts_with("Banned") {
            banned += 1;
        } else {
            rejected += 1;
        }
    }
    assert!(
        admitted > 50 && rejected > 20 && banned > 20,
        "{admitted} admitted, {rejected} rejected, {banned} banned"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_cluster_rules_on_different_keys_refund_each_other_exactly() {
    let cluster = RedisCluster::start(3);
    let clock = ManualClock::new();
    clock.set_ns(1_000 * S);
    let fw = |l, s| Limit::FixedWindow(FixedWindow::new(l, Duration::from_secs(s)).unwrap());
    let mut replicas = Vec::new();
    for _ in 0..2 {
        let store = RedisStore::builder("")
            .cluster(cluster.urls())
            .clock(clock.clone())
            .deadline(Duration::from_secs(2))
            .connect()
            .await
            .expect("the cluster answers");
        replicas.push(
            Throttler::builder()
                .rule(Rule::new(
                    "per-key",
                    Extract::header("x-api-key"),
                    fw(10, 3600),
                ))
                .rule(Rule::new("global", Extract::global(), fw(6, 1)))
                .store(store)
                .try_build()
                .unwrap(),
        );
    }
    // 6 a second in all: the global rule rejects the rest, and refunds
    // what the per-key rule (in other slots) charged them.
    let (a, b) = hammer(&replicas, 10).await;
    assert_eq!(a + b, 6);
    // The next second: 6 more, and the per-key counts are exact, so "a"
    // (and "b") stop at 10 each over both seconds and the third.
    let mut total = (a, b);
    for _ in 0..3 {
        clock.advance(Duration::from_secs(1));
        let (a, b) = hammer(&replicas, 10).await;
        total = (total.0 + a, total.1 + b);
    }
    assert_eq!(total.0 + total.1, 20, "{total:?}");
    assert_eq!(total, (10, 10));
}

#[tokio::test]
async fn a_reloaded_rule_the_store_cannot_keep_is_decided_locally_and_logged() {
    let server = RedisServer::start();
    let clock = ManualClock::new();
    clock.set_ns(1_000 * S);
    let throttler = replica(
        &server,
        &clock,
        Limit::FixedWindow(FixedWindow::new(4, Duration::from_secs(3600)).unwrap()),
        OnError::Local,
        2,
    )
    .await;
    assert_eq!(admitted(&throttler, "k", 6).await, 4);
    let logs = Logs::default();
    let guard = tracing::subscriber::set_default(logs.subscriber());
    throttler.reload(vec![Rule::new(
        "pool",
        Extract::header("x-api-key"),
        Limit::TokenPool(TokenPool::new("1".parse().unwrap()).with_burst(6).unwrap()),
    )
    .slice(2)]);
    drop(guard);
    assert_eq!(
        logs.count("redis store: rule \"pool\": a token pool takes no slices"),
        1,
        "{}",
        logs.text()
    );
    // Decided on this replica alone, at half the burst of 6.
    assert_eq!(admitted(&throttler, "k", 6).await, 3);
}

#[tokio::test]
async fn one_fixed_window_with_headers_decides_as_in_memory_when_time_steps_back() {
    let server = RedisServer::start();
    let clock = ManualClock::new();
    clock.set_ns(1_000 * S);
    let rule = || {
        Rule::new(
            "per-key",
            Extract::header("x-api-key"),
            Limit::FixedWindow(FixedWindow::new(4, Duration::from_millis(300)).unwrap()),
        )
        .ratelimit_headers(true)
    };
    let memory = Throttler::builder()
        .clock(clock.clone())
        .rule(rule())
        .build();
    let store = RedisStore::builder(server.url())
        .clock(clock.clone())
        .deadline(Duration::from_secs(2))
        .connect()
        .await
        .unwrap();
    let shared = Throttler::builder()
        .store(store)
        .rule(rule())
        .try_build()
        .unwrap();
    let mut rng = 0x2545_F491_4F6C_DD1Du64;
    let mut now = 1_000 * S;
    let (mut admitted, mut rejected) = (0, 0);
    for step in 0..300 {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        if rng % 10 == 0 {
            // Back, often into the window before.
            now -= (rng >> 8) % (400 * MS);
        } else {
            now += (rng % 60) * MS;
        }
        clock.set_ns(now);
        let req = request(["a", "b"][(rng >> 32) as usize % 2]);
        let head = RequestHead::of(&req);
        let m = outcome(memory.check(&head));
        let r = outcome(shared.decide(&head).await);
        assert_eq!(r, m, "step {step}");
        if m.0 {
            admitted += 1;
        } else {
            rejected += 1;
        }
    }
    assert!(
        admitted > 50 && rejected > 50,
        "{admitted} admitted, {rejected} rejected"
    );
}
