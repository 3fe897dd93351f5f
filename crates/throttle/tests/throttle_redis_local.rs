//! What a replica answers itself with a Redis store, on a real
//! `redis-server`: the over-limit cache answers as Redis would, with fewer
//! calls; replicas spending slices of a hot key admit exactly the limit
//! together, and return what they did not spend.

#[path = "common/gathered.rs"]
mod common_gathered;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::http::Request;
use common_gathered::gathered;
use tollgate::{ManualClock, RateSpec};
use tollgate_testkit::redis::RedisServer;
use tollgate_throttle::{
    CostModel, Extract, FixedWindow, Gcra, Limit, OnError, Permit, RedisStore, Rejection,
    RequestHead, Rule, SlidingWindowCounter, Throttler,
};

const S: u64 = 1_000_000_000;

fn request(key: &str, cost: u64) -> Request<()> {
    Request::builder()
        .header("x-api-key", key)
        .header("x-cost", cost.to_string())
        .body(())
        .expect("a request")
}

/// A throttler on `server` with one rule of `limit` per API key, headers
/// on, the cost from `x-cost`, an over-limit cache of `cache` keys.
async fn replica(
    server: &RedisServer,
    clock: &ManualClock,
    limit: Limit,
    cache: usize,
) -> Throttler {
    let store = RedisStore::builder(server.url())
        .clock(clock.clone())
        .deadline(Duration::from_secs(5))
        .on_error(OnError::Deny)
        .over_limit_cache(cache)
        .connect()
        .await
        .expect("redis answers");
    Throttler::builder()
        .rule(Rule::new("per-key", Extract::header("x-api-key"), limit).ratelimit_headers(true))
        .cost(CostModel::Header {
            name: "x-cost".to_owned(),
            default: 1,
        })
        .store(store)
        .try_build()
        .expect("a rule the store keeps")
}

type Outcome = (bool, Duration, Vec<(u64, Duration)>);

/// What a decision came to: admitted, the delay or retry time, and the
/// standings reported.
fn outcome(d: Result<Permit, Rejection>) -> Outcome {
    match d {
        Ok(p) => (
            true,
            p.delay(),
            p.limits().iter().map(|l| (l.remaining, l.reset)).collect(),
        ),
        Err(r) => (
            false,
            r.retry_after().unwrap_or_default(),
            r.limits().iter().map(|l| (l.remaining, l.reset)).collect(),
        ),
    }
}

fn cache_hits(throttler: &Throttler) -> u64 {
    let text = gathered(throttler.registry());
    text.lines()
        .find(|l| l.starts_with("tollgate_throttle_store_cache_hits_total{rule=\"per-key\"}"))
        .map_or(0, |l| {
            l.rsplit(' ')
                .next()
                .and_then(|n| n.parse().ok())
                .expect("a count")
        })
}

/// Two replicas with the cache and two without, each pair on its own
/// Redis, take the same requests at the same times (random replica, key,
/// cost and pace): every answer is the same, and the cached pair calls
/// Redis less, by the cache's hits.
async fn cached_replicas_answer_as_uncached(limit: Limit, max_step_ms: u64) {
    let (cached_redis, plain_redis) = (RedisServer::start(), RedisServer::start());
    let clock = ManualClock::new();
    clock.set_ns(1_000 * S);
    let cached = [
        replica(&cached_redis, &clock, limit.clone(), 10_000).await,
        replica(&cached_redis, &clock, limit.clone(), 10_000).await,
    ];
    let plain = [
        replica(&plain_redis, &clock, limit.clone(), 0).await,
        replica(&plain_redis, &clock, limit.clone(), 0).await,
    ];
    let (cached_before, plain_before) = (
        cached_redis.script_calls().await,
        plain_redis.script_calls().await,
    );
    let mut rng = 0x9E37_79B9_7F4A_7C15u64;
    let (mut admitted, mut rejected) = (0u64, 0u64);
    let steps = 600;
    for step in 0..steps {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        clock.advance(Duration::from_millis(rng % max_step_ms));
        let r = (rng >> 20) as usize % 2;
        let key = ["a", "b"][(rng >> 24) as usize % 2];
        // Mostly single costs, sometimes dearer ones.
        let cost = [1, 1, 1, 2, 3][(rng >> 32) as usize % 5];
        let req = request(key, cost);
        let head = RequestHead::of(&req);
        let want = outcome(plain[r].decide(&head).await);
        let got = outcome(cached[r].decide(&head).await);
        assert_eq!(got, want, "step {step}: {limit:?}");
        if want.0 {
            admitted += 1;
        } else {
            rejected += 1;
        }
    }
    assert!(
        admitted > 60 && rejected > 200,
        "{admitted} admitted, {rejected} rejected: {limit:?}"
    );
    let hits = cache_hits(&cached[0]) + cache_hits(&cached[1]);
    let plain_calls = plain_redis.script_calls().await - plain_before;
    let cached_calls = cached_redis.script_calls().await - cached_before;
    assert_eq!(plain_calls, steps, "{limit:?}");
    assert_eq!(cached_calls + hits, steps, "{limit:?}");
    // A GCRA or a sliding counter rejects every cost only briefly (until
    // the next token or the next step of the estimate): fewer hits.
    assert!(hits > 50, "{hits} hits of {rejected} rejections: {limit:?}");
}

#[tokio::test]
async fn the_over_limit_cache_answers_a_fixed_window_as_redis_with_fewer_calls() {
    let limit = Limit::FixedWindow(FixedWindow::new(10, Duration::from_secs(1)).unwrap());
    cached_replicas_answer_as_uncached(limit, 40).await;
}

#[tokio::test]
async fn the_over_limit_cache_answers_a_sliding_counter_as_redis_with_fewer_calls() {
    let limit =
        Limit::SlidingWindowCounter(SlidingWindowCounter::new(10, Duration::from_secs(1)).unwrap());
    cached_replicas_answer_as_uncached(limit, 40).await;
}

#[tokio::test]
async fn the_over_limit_cache_answers_a_gcra_as_redis_with_fewer_calls() {
    // 10/s, a burst of 5 and a queue of 2: delays too.
    let limit = Limit::Gcra(Gcra::new(RateSpec::new(10.0).unwrap(), 5, 2).unwrap());
    cached_replicas_answer_as_uncached(limit, 40).await;
}

/// A key rejected for a cost while a smaller one still fits is not
/// answered locally: another replica may take what is left, and Redis'
/// answer (its standing, its retry time) changes.
#[tokio::test]
async fn a_rejection_that_leaves_room_is_asked_of_redis_again() {
    let server = RedisServer::start();
    let clock = ManualClock::new();
    clock.set_ns(1_000 * S);
    // A burst of 10 refilling at 1/s.
    let limit = Limit::Gcra(Gcra::new(RateSpec::new(1.0).unwrap(), 10, 0).unwrap());
    let a = replica(&server, &clock, limit.clone(), 10_000).await;
    let b = replica(&server, &clock, limit.clone(), 10_000).await;
    let plain = replica(&server, &clock, limit, 0).await;
    let ask = |t: &Throttler, cost: u64| {
        let t = t.clone();
        async move {
            let req = request("k", cost);
            outcome(t.decide(&RequestHead::of(&req)).await)
        }
    };
    assert!(ask(&a, 8).await.0);
    // 2 left: a cost of 5 waits 3 s.
    assert_eq!(
        ask(&a, 5).await,
        (
            false,
            Duration::from_secs(3),
            vec![(2, Duration::from_secs(8))]
        )
    );
    // The other replica takes the 2.
    assert!(ask(&b, 2).await.0);
    // Redis now says 5 s and nothing left.
    assert_eq!(
        ask(&a, 5).await,
        (
            false,
            Duration::from_secs(5),
            vec![(0, Duration::from_secs(10))]
        )
    );
    // That rejection holds for every cost until a token comes back: the
    // cache answers as Redis does (a rejection writes nothing, so asking
    // Redis through a replica without the cache changes nothing).
    clock.advance(Duration::from_millis(400));
    let cached = ask(&a, 1).await;
    assert_eq!(cached, ask(&plain, 1).await);
    assert!(!cached.0 && cached.2[0].0 == 0, "{cached:?}");
    assert_eq!(cache_hits(&a), 1);
    clock.advance(Duration::from_millis(600));
    assert_eq!(
        ask(&a, 1).await,
        (true, Duration::ZERO, vec![(0, Duration::from_secs(10))])
    );
    assert_eq!(cache_hits(&a), 1);
}

/// A throttler on `server` with one enforced rule of `limit` per API key
/// and a slice of `slice` tokens, headers on.
async fn sliced(server: &RedisServer, clock: &ManualClock, limit: Limit, slice: u64) -> Throttler {
    let store = RedisStore::builder(server.url())
        .clock(clock.clone())
        .deadline(Duration::from_secs(5))
        .on_error(OnError::Deny)
        .connect()
        .await
        .expect("redis answers");
    Throttler::builder()
        .rule(
            Rule::new("per-key", Extract::header("x-api-key"), limit)
                .ratelimit_headers(true)
                .slice(slice),
        )
        .store(store)
        .try_build()
        .expect("a rule the store keeps")
}

/// Requests from 24 tasks spread over `throttlers`, for keys `a` and `b`:
/// how many each replica admitted of each key.
async fn hammer(throttlers: &[Throttler], per_task: usize) -> Vec<(u64, u64)> {
    let counts: Vec<Arc<(AtomicU64, AtomicU64)>> = throttlers
        .iter()
        .map(|_| Arc::new((AtomicU64::new(0), AtomicU64::new(0))))
        .collect();
    let mut tasks = Vec::new();
    for t in 0..24 {
        let r = t % throttlers.len();
        let throttler = throttlers[r].clone();
        let counts = counts[r].clone();
        tasks.push(tokio::spawn(async move {
            for i in 0..per_task {
                let (key, count) = if (i + t) % 2 == 0 {
                    ("a", &counts.0)
                } else {
                    ("b", &counts.1)
                };
                let req = request(key, 1);
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
    counts
        .iter()
        .map(|c| (c.0.load(Ordering::Relaxed), c.1.load(Ordering::Relaxed)))
        .collect()
}

/// `replicas` throttlers with slices of 7 on one Redis admit exactly
/// `quota` per key in a window, twice: now and `next` later (every replica
/// keeps asking, so no token is lost in a slice).
async fn sliced_replicas_admit_exactly(replicas: usize, limit: Limit, quota: u64, next: Duration) {
    let server = RedisServer::start();
    let clock = ManualClock::new();
    clock.set_ns(1_000 * S);
    let mut throttlers = Vec::new();
    for _ in 0..replicas {
        throttlers.push(sliced(&server, &clock, limit.clone(), 7).await);
    }
    for round in 0..2 {
        let before = server.script_calls().await;
        // 24 tasks x 20 requests: 240 per key, against a quota of `quota`.
        let per_replica = hammer(&throttlers, 20).await;
        let a: u64 = per_replica.iter().map(|c| c.0).sum();
        let b: u64 = per_replica.iter().map(|c| c.1).sum();
        assert_eq!(
            (a, b),
            (quota, quota),
            "round {round}: {per_replica:?} {limit:?}"
        );
        // The admitted requests spent slices: fewer calls than requests.
        let calls = server.script_calls().await - before;
        assert!(calls < 480, "{calls} calls: {limit:?}");
        clock.advance(next);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_and_three_replicas_with_slices_admit_exactly_a_fixed_windows_limit() {
    for replicas in [2, 3] {
        let limit = Limit::FixedWindow(FixedWindow::new(100, Duration::from_secs(1)).unwrap());
        sliced_replicas_admit_exactly(replicas, limit, 100, Duration::from_secs(1)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_and_three_replicas_with_slices_admit_exactly_a_sliding_counters_limit() {
    for replicas in [2, 3] {
        let limit = Limit::SlidingWindowCounter(
            SlidingWindowCounter::new(100, Duration::from_secs(1)).unwrap(),
        );
        // Two windows on, the first no longer weighs.
        sliced_replicas_admit_exactly(replicas, limit, 100, Duration::from_secs(2)).await;
    }
}

/// The count Redis holds for key `k` under a fixed window of 10 a second.
async fn count_in_redis(server: &RedisServer) -> u64 {
    let count: Option<u64> = server
        .query(&["HGET", "tollgate:{k}:per-key:fw:10:1000000000:h", "c"])
        .await;
    count.unwrap_or(0)
}

#[tokio::test]
async fn a_slice_is_spent_without_calls_and_what_is_left_goes_back_at_expiry() {
    let server = RedisServer::start();
    let clock = ManualClock::new();
    clock.set_ns(1_000 * S);
    let limit = Limit::FixedWindow(FixedWindow::new(10, Duration::from_secs(1)).unwrap());
    let a = sliced(&server, &clock, limit.clone(), 4).await;
    let b = sliced(&server, &clock, limit.clone(), 4).await;
    let c = sliced(&server, &clock, limit, 4).await;
    let ask = |t: &Throttler| {
        let t = t.clone();
        async move {
            let req = request("k", 1);
            outcome(t.decide(&RequestHead::of(&req)).await)
        }
    };
    let left = |n: u64| (true, Duration::ZERO, vec![(n, Duration::from_secs(1))]);
    // The first request takes 4 in one call; the next three spend them here.
    let before = server.script_calls().await;
    assert_eq!(ask(&a).await, left(9));
    assert_eq!(ask(&a).await, left(8));
    assert_eq!(ask(&a).await, left(7));
    assert_eq!(ask(&a).await, left(6));
    assert_eq!(server.script_calls().await - before, 1);
    assert_eq!(count_in_redis(&server).await, 4);
    // Another replica takes 4 of the 6 left; a third the last 2.
    assert_eq!(ask(&b).await, left(5));
    assert_eq!(ask(&c).await, left(1));
    assert_eq!(count_in_redis(&server).await, 10);
    // Everything is taken: a replica whose slice is spent is refused.
    assert_eq!(ask(&c).await, left(0));
    let refused = ask(&a).await;
    assert!(!refused.0, "{refused:?}");
    // At the slices' expiry b's 3 unspent tokens go back to Redis, and a
    // sees them.
    clock.advance(Duration::from_millis(100));
    let start = Instant::now();
    while count_in_redis(&server).await != 7 {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "the unspent tokens never went back"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let later = (true, Duration::ZERO, vec![(2, Duration::from_millis(900))]);
    assert_eq!(ask(&a).await, later);
    assert_eq!(count_in_redis(&server).await, 10);
}

#[tokio::test]
async fn a_slice_the_store_cannot_keep_exactly_is_one_line() {
    let server = RedisServer::start();
    let store = RedisStore::builder(server.url()).connect().await.unwrap();
    let gcra = Limit::Gcra(Gcra::new(RateSpec::new(10.0).unwrap(), 10, 0).unwrap());
    let fw = Limit::FixedWindow(FixedWindow::new(10, Duration::from_secs(1)).unwrap());
    let log =
        Limit::SlidingLog(tollgate_throttle::SlidingLog::new(10, Duration::from_secs(1)).unwrap());
    for (rule, why) in [
        (
            Rule::new("bucket", Extract::global(), gcra).slice(5),
            "redis store: rule \"bucket\": a gcra takes no slices (tokens spent after they \
             were taken would let the bucket refill under them): use fixed_window or \
             sliding_window_counter, or drop the slice",
        ),
        (
            Rule::new("log", Extract::global(), log).slice(5),
            "redis store: rule \"log\": a sliding log takes no slices (each entry is logged \
             at the time of its own request): use fixed_window or sliding_window_counter, or \
             drop the slice",
        ),
        (
            Rule::new("soft", Extract::global(), fw.clone())
                .soft(fw.clone())
                .slice(5),
            "redis store: rule \"soft\": a rule with a slice has no soft limit (it would \
             need Redis on every request): drop one",
        ),
        (
            Rule::new("shadow", Extract::global(), fw)
                .mode(tollgate_throttle::Mode::Shadow)
                .slice(5),
            "redis store: rule \"shadow\": a shadow rule takes no slices: drop the slice",
        ),
    ] {
        let err = Throttler::builder()
            .rule(rule)
            .store(store.clone())
            .try_build()
            .expect_err("refused");
        assert_eq!(err.to_string(), why);
    }
    // In YAML: `slice` and `slice_expiry` on a rule.
    let yaml = "rules:\n  - name: api\n    key: { header: x-api-key }\n    \
                limit: { gcra: { rate: \"10\", burst: 10 } }\n    slice: 20\n    \
                slice_expiry: 50ms\n";
    let rules = tollgate_throttle::rules_from_yaml(yaml).expect("rules");
    let err = Throttler::builder()
        .rule(rules.into_iter().next().unwrap())
        .store(store)
        .try_build()
        .expect_err("refused");
    assert!(err.to_string().contains("a gcra takes no slices"), "{err}");
}

#[tokio::test]
async fn a_reloaded_rule_with_a_slice_the_store_cannot_keep_is_decided_here() {
    let server = RedisServer::start();
    let clock = ManualClock::new();
    clock.set_ns(1_000 * S);
    let fw = Limit::FixedWindow(FixedWindow::new(10, Duration::from_secs(1)).unwrap());
    let throttler = sliced(&server, &clock, fw, 4).await;
    let req = request("k", 1);
    assert!(throttler.decide(&RequestHead::of(&req)).await.is_ok());
    let gcra = Limit::Gcra(Gcra::new(RateSpec::new(10.0).unwrap(), 10, 0).unwrap());
    throttler.reload(vec![Rule::new(
        "per-key",
        Extract::header("x-api-key"),
        gcra,
    )
    .slice(4)]);
    let before = server.script_calls().await;
    assert!(throttler.decide(&RequestHead::of(&req)).await.is_ok());
    // Decided on this replica's own tables, as the reload logged.
    assert_eq!(server.script_calls().await, before);
}
