//! Coalesced checks on a real `redis-server`: checks that arrive while the
//! store's connection is busy go as one script call, and decide exactly as
//! one by one.

#[path = "common/gathered.rs"]
mod common_gathered;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use axum::http::Request;
use common_gathered::gathered;
use tollgate::{ManualClock, RateSpec};
use tollgate_testkit::redis::RedisServer;
use tollgate_throttle::{
    Extract, FixedWindow, Gcra, Limit, OnError, RedisStore, RequestHead, Rule, Throttler,
    TokenPool, Verdict,
};

const S: u64 = 1_000_000_000;
const HOUR: Duration = Duration::from_secs(3600);

/// Redis' count of script calls since the last reset.
async fn script_calls(url: &str) -> u64 {
    let client = redis::Client::open(url).expect("a url");
    let mut conn = client
        .get_multiplexed_async_connection()
        .await
        .expect("redis answers");
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(&mut conn)
        .await
        .expect("stats");
    info.lines()
        .find_map(|l| l.strip_prefix("cmdstat_evalsha:calls="))
        .and_then(|rest| rest.split(',').next())
        .map_or(0, |n| n.parse().expect("a count"))
}

async fn reset_stats(url: &str) {
    let client = redis::Client::open(url).expect("a url");
    let mut conn = client
        .get_multiplexed_async_connection()
        .await
        .expect("redis answers");
    let _: () = redis::cmd("CONFIG")
        .arg("RESETSTAT")
        .query_async(&mut conn)
        .await
        .expect("reset");
}

async fn store(server: &RedisServer, clock: &ManualClock, deadline: Duration) -> RedisStore {
    RedisStore::builder(server.url())
        .clock(clock.clone())
        .pool_size(1)
        .deadline(deadline)
        .over_limit_cache(0)
        .on_error(OnError::Allow)
        .connect()
        .await
        .expect("redis answers")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_checks_on_one_key_coalesce_and_admit_exactly_the_limit() {
    let server = RedisServer::start();
    let clock = ManualClock::new();
    clock.set_ns(1_000 * S);
    let store = store(&server, &clock, Duration::from_secs(5)).await;
    let limit = Limit::FixedWindow(FixedWindow::new(100, HOUR).unwrap());
    // Checks the script's general path decides, between the others: a
    // batch goes on there from the first.
    let gcra = Limit::Gcra(Gcra::new(RateSpec::new(1_000.0).unwrap(), 10, 0).unwrap());
    reset_stats(&server.url()).await;
    let mut tasks = Vec::new();
    for t in 0..16 {
        let (store, limit, gcra) = (store.clone(), limit.clone(), gcra.clone());
        tasks.push(tokio::spawn(async move {
            let mut remaining = Vec::new();
            for _ in 0..25 {
                if t % 2 == 1 {
                    store.check(&gcra, "g", 1).await.expect("redis decides");
                }
                match store.check(&limit, "k", 1).await.expect("redis decides") {
                    Verdict::Admit { remaining: r } => remaining.push(r),
                    Verdict::Reject { .. } => {}
                    Verdict::Delay { .. } => panic!("a window does not delay"),
                }
            }
            remaining
        }));
    }
    let mut remaining = Vec::new();
    for task in tasks {
        remaining.extend(task.await.expect("a task"));
    }
    // Exactly the limit, each admission seeing one fewer left: the checks
    // were decided one after another on one state.
    remaining.sort_unstable();
    assert_eq!(remaining, (0..100).collect::<Vec<u64>>());
    // 600 checks in fewer calls: they coalesced.
    let calls = script_calls(&server.url()).await;
    assert!(calls < 300, "{calls} script calls for 600 checks");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_checks_on_one_token_pool_coalesce_and_admit_exactly_its_pool() {
    let server = RedisServer::start();
    let clock = ManualClock::new();
    clock.set_ns(1_000 * S);
    let store = store(&server, &clock, Duration::from_secs(5)).await;
    // 100,000/s with a burst ratio of 1.5: a fresh key holds 150 ops.
    let pool = Limit::TokenPool(TokenPool::new("100000,1.5".parse().unwrap()));
    reset_stats(&server.url()).await;
    let mut tasks = Vec::new();
    for _ in 0..16 {
        let (store, pool) = (store.clone(), pool.clone());
        tasks.push(tokio::spawn(async move {
            let mut remaining = Vec::new();
            for _ in 0..25 {
                match store.check(&pool, "p", 1).await.expect("redis decides") {
                    Verdict::Admit { remaining: r } => remaining.push(r),
                    Verdict::Reject { .. } => {}
                    Verdict::Delay { .. } => panic!("a pool does not delay"),
                }
            }
            remaining
        }));
    }
    let mut remaining = Vec::new();
    for task in tasks {
        remaining.extend(task.await.expect("a task"));
    }
    remaining.sort_unstable();
    assert_eq!(remaining, (0..150).collect::<Vec<u64>>());
    let calls = script_calls(&server.url()).await;
    assert!(calls < 200, "{calls} script calls for 400 checks");
}

fn request(user: &str, api_key: &str) -> Request<()> {
    Request::builder()
        .header("x-user", user)
        .header("x-api-key", api_key)
        .body(())
        .expect("a request")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rejected_check_in_a_batch_charges_nothing_and_leaves_the_others_be() {
    let server = RedisServer::start();
    let clock = ManualClock::new();
    clock.set_ns(1_000 * S);
    let store = store(&server, &clock, Duration::from_secs(5)).await;
    // Every request meets both rules, the user's first: a request the API
    // key's rule rejects must not count against the user.
    let throttler = Throttler::builder()
        .rule(Rule::new(
            "user",
            Extract::header("x-user"),
            Limit::FixedWindow(FixedWindow::new(1000, HOUR).unwrap()),
        ))
        .rule(Rule::new(
            "api-key",
            Extract::header("x-api-key"),
            Limit::FixedWindow(FixedWindow::new(5, HOUR).unwrap()),
        ))
        .store(store.clone())
        .try_build()
        .expect("rules the store keeps");
    reset_stats(&server.url()).await;
    let admitted = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for t in 0..16 {
        let (throttler, admitted) = (throttler.clone(), admitted.clone());
        tasks.push(tokio::spawn(async move {
            for _ in 0..25 {
                let req = request("u", &format!("key-{t}"));
                if throttler.decide(&RequestHead::of(&req)).await.is_ok() {
                    // Relaxed: a count read after every task is joined.
                    admitted.fetch_add(1, Ordering::Relaxed);
                }
            }
        }));
    }
    for task in tasks {
        task.await.expect("a task");
    }
    // Five per API key, and the user charged for those 80 alone.
    assert_eq!(admitted.load(Ordering::Relaxed), 80);
    let calls = script_calls(&server.url()).await;
    assert!(calls < 200, "{calls} script calls for 400 requests");
    let client = redis::Client::open(server.url()).expect("a url");
    let mut conn = client
        .get_multiplexed_async_connection()
        .await
        .expect("redis answers");
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg("*{u}:user:*")
        .query_async(&mut conn)
        .await
        .expect("keys");
    assert_eq!(keys.len(), 1, "{keys:?}");
    let count: u64 = redis::cmd("HGET")
        .arg(&keys[0])
        .arg("c")
        .query_async(&mut conn)
        .await
        .expect("the count");
    assert_eq!(count, 80);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_past_the_deadline_answers_every_check_by_on_error() {
    let server = RedisServer::start();
    let clock = ManualClock::new();
    clock.set_ns(1_000 * S);
    let store = store(&server, &clock, Duration::from_millis(50)).await;
    let throttler = Throttler::builder()
        .rule(Rule::new(
            "per-key",
            Extract::header("x-api-key"),
            Limit::FixedWindow(FixedWindow::new(1, HOUR).unwrap()),
        ))
        .store(store)
        .try_build()
        .expect("a rule the store keeps");
    server.pause();
    // One call in flight, the rest queued behind it: every one is answered
    // by allow (each key's limit of one would admit only its first).
    let mut tasks = Vec::new();
    for t in 0..12 {
        let throttler = throttler.clone();
        tasks.push(tokio::spawn(async move {
            let mut admitted = 0;
            for _ in 0..2 {
                let req = request("u", &format!("key-{t}"));
                let decided = tokio::time::timeout(
                    Duration::from_secs(5),
                    throttler.decide(&RequestHead::of(&req)),
                )
                .await
                .expect("a decision within the bound");
                if decided.is_ok() {
                    admitted += 1;
                }
            }
            admitted
        }));
    }
    let mut admitted = 0;
    for task in tasks {
        admitted += task.await.expect("a task");
    }
    server.resume();
    assert_eq!(admitted, 24);
    let text = gathered(throttler.registry());
    let errors = text
        .lines()
        .find_map(|l| l.strip_prefix("tollgate_throttle_store_errors_total{on_error=\"allow\"} "))
        .map_or(0, |v| v.parse::<u64>().expect("a count"));
    assert_eq!(errors, 24);
}
