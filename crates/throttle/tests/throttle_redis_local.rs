//! What a replica answers itself with a Redis store, on a real
//! `redis-server`: the over-limit cache answers as Redis would, with fewer
//! calls.

#[path = "common/gathered.rs"]
mod common_gathered;
#[path = "common/redis_server.rs"]
mod redis_server;

use std::time::Duration;

use axum::http::Request;
use common_gathered::gathered;
use redis_server::RedisServer;
use tollgate::{ManualClock, RateSpec};
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

/// The scripts Redis has run (`EVALSHA` and `EVAL` calls, less the
/// first `EVALSHA` that finds the script not loaded yet).
async fn script_calls(server: &RedisServer) -> u64 {
    let client = redis::Client::open(server.url()).expect("a url");
    let mut c = client
        .get_multiplexed_async_connection()
        .await
        .expect("redis answers");
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(&mut c)
        .await
        .expect("INFO");
    info.lines()
        .filter(|l| l.starts_with("cmdstat_evalsha:") || l.starts_with("cmdstat_eval:"))
        .map(|l| field(l, "calls=") - field(l, "failed_calls="))
        .sum()
}

/// The number after `name` in an `INFO` line.
fn field(line: &str, name: &str) -> u64 {
    let rest = &line[line.find(name).expect("the field") + name.len()..];
    rest[..rest.find(',').unwrap_or(rest.len())]
        .parse()
        .expect("a count")
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
        script_calls(&cached_redis).await,
        script_calls(&plain_redis).await,
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
    let plain_calls = script_calls(&plain_redis).await - plain_before;
    let cached_calls = script_calls(&cached_redis).await - cached_before;
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
