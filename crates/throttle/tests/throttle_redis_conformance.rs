//! One conformance suite, two stores: every policy the Redis store keeps
//! decides the same vectors, with the same answers, in memory (explicit
//! times) and in a real `redis-server` (the same times passed to its
//! script), and random sequences agree step by step, at times near zero
//! and near today's nanoseconds since the epoch.

use std::time::Duration;

use tollgate::RateSpec;
use tollgate_testkit::redis::RedisServer;
use tollgate_throttle::{
    Extract, FixedWindow, Gcra, KeyedLimiter, Limit, Policy, RedisStore, Rule, SlidingLog,
    SlidingWindowCounter, TokenPool, Verdict,
};

const MS: u64 = 1_000_000;
const S: u64 = 1_000_000_000;

fn admit(remaining: u64) -> Verdict {
    Verdict::Admit { remaining }
}
fn delay(delay_ns: u64) -> Verdict {
    Verdict::Delay { delay_ns }
}
fn reject(retry_after_ns: u64) -> Verdict {
    Verdict::Reject { retry_after_ns }
}

/// A vector: (time, cost, expected verdict) steps.
type Vector = Vec<(u64, u64, Verdict)>;

/// Each limit and its vector.
fn vectors() -> Vec<(Limit, Vector)> {
    let fw = |l, w| Limit::FixedWindow(FixedWindow::new(l, w).unwrap());
    let swc = |l, w| Limit::SlidingWindowCounter(SlidingWindowCounter::new(l, w).unwrap());
    let gcra = |r: f64, b, q| Limit::Gcra(Gcra::new(RateSpec::new(r).unwrap(), b, q).unwrap());
    let sl = |l, w, logged| Limit::SlidingLog(SlidingLog::new(l, w).unwrap().log_rejected(logged));
    let tp = Limit::TokenPool;
    let spec = |r: &str| r.parse::<RateSpec>().unwrap();
    vec![
        (
            sl(3, Duration::from_secs(10), false),
            vec![
                (0, 1, admit(2)),
                (S, 2, admit(0)),
                // The oldest entry, at 0, leaves the window at 10 s.
                (2 * S, 1, reject(8 * S)),
                (10 * S, 1, admit(0)),
                // Two must leave: the second oldest is at 1 s.
                (10 * S, 2, reject(S)),
                (10 * S, 4, reject(u64::MAX)),
                (11 * S, 2, admit(0)),
            ],
        ),
        (
            sl(3, Duration::from_secs(10), true),
            vec![
                (0, 2, admit(1)),
                // Logged: the log keeps 0, 5 s, 5 s.
                (5 * S, 2, reject(10 * S)),
                (10 * S, 1, admit(0)),
                // Logged: 5 s, 10 s, 12 s.
                (12 * S, 1, reject(3 * S)),
                (15 * S, 1, admit(0)),
                (15 * S, 4, reject(u64::MAX)),
            ],
        ),
        (
            fw(2, Duration::from_secs(1)),
            vec![
                (0, 1, admit(1)),
                (10, 1, admit(0)),
                (20, 1, reject(999_999_980)),
                (S, 3, reject(u64::MAX)),
                (S, 2, admit(0)),
                (2 * S - 1, 1, reject(1)),
            ],
        ),
        (
            fw(3, Duration::from_secs(60)),
            vec![
                (59 * S, 3, admit(0)),
                (60 * S, 3, admit(0)),
                (61 * S, 1, reject(59 * S)),
            ],
        ),
        (
            gcra(10.0, 1, 2),
            vec![
                (0, 1, admit(0)),
                (0, 1, delay(100 * MS)),
                (0, 1, delay(200 * MS)),
                (0, 1, reject(100 * MS)),
                (0, 4, reject(u64::MAX)),
                (100 * MS, 1, delay(200 * MS)),
                (S, 1, admit(0)),
            ],
        ),
        (
            // 3 a second: an op is 333,333,333.33 ns, rounded up.
            gcra(3.0, 2, 0),
            vec![
                (0, 2, admit(0)),
                (0, 1, reject(333_333_334)),
                (333_333_334, 1, admit(0)),
                (333_333_334, 1, reject(333_333_334)),
            ],
        ),
        (
            swc(7, Duration::from_secs(60)),
            vec![
                (0, 5, admit(2)),
                (72 * S, 3, admit(0)),
                (78 * S, 1, admit(0)),
                // floor(5 * 0.7) = 3 until 84 s exactly, then 2.
                (78 * S, 1, reject(6 * S + 1)),
                (84 * S, 1, reject(1)),
                (84 * S + 1, 1, admit(0)),
                (84 * S + 1, 8, reject(u64::MAX)),
            ],
        ),
        // Token pools: 2^20 tokens an op; A the active pool, B the burst
        // headroom, W the backlog (capped at one second unless said).
        (
            // 5/s, ratio 2: an op is 200 ms, A = B = 2 ops, W = 5 ops.
            tp(TokenPool::new(spec("5,2"))),
            vec![
                (0, 1, admit(3)),
                (0, 3, admit(0)),
                (0, 1, reject(200 * MS)),
                // Above A: one fill of A + B moves the whole headroom.
                (0, 3, reject(800 * MS)),
                (0, 5, reject(u64::MAX)),
                // 1 op fills A directly and moves 1 * B / A = 1 op of W.
                (200 * MS, 1, admit(1)),
                (400 * MS, 3, admit(0)),
                // 3 ops: 2 to A, B from the backlog, 1 left to it.
                (S, 4, admit(0)),
            ],
        ),
        (
            // 1000/s, ratio 1.5: A = 2 ops, B = 1 op.
            tp(TokenPool::new(spec("1000,1.5"))),
            vec![
                (0, 1, admit(2)),
                (0, 2, admit(0)),
                (0, 1, reject(MS)),
                (0, 4, reject(u64::MAX)),
                // 1 op: 1 to A and floor(1 * 1 / 2) = half an op of burst.
                (MS, 1, admit(0)),
                (MS, 1, reject(MS / 2)),
                // Half an op: to A, and a quarter as burst.
                (3 * MS / 2, 1, admit(0)),
                (3 * MS / 2, 1, reject(3 * MS / 4)),
            ],
        ),
        (
            // 10^7/s, ratio 1.1: an op is 100 ns, A = 10,000 ops, B = 1,000.
            tp(TokenPool::new(
                RateSpec::new(1e7).unwrap().with_burst_ratio(1.1).unwrap(),
            )),
            vec![
                (0, 11_000, admit(0)),
                (0, 1, reject(100)),
                (1_000, 10, admit(1)),
                (1_000, 11_000, reject(1_099_900)),
                (1_000, 11_001, reject(u64::MAX)),
                (10 * S, 11_000, admit(0)),
            ],
        ),
        (
            // A plain bucket of 4 at 5/s: no burst, no backlog.
            tp(TokenPool::new(spec("5")).with_burst(4).unwrap()),
            vec![
                (0, 4, admit(0)),
                (0, 1, reject(200 * MS)),
                (0, 5, reject(u64::MAX)),
                (300 * MS, 1, admit(0)),
                (300 * MS, 1, reject(100 * MS)),
                (S, 4, admit(0)),
                (10 * S, 2, admit(2)),
            ],
        ),
        (
            // 1000/s on a clock of 4 ms steps: A = 6 ops.
            tp(TokenPool::new(spec("1000,1")).with_clock_step(Duration::from_millis(4))),
            vec![
                (0, 6, admit(0)),
                (4 * MS, 4, admit(0)),
                (4 * MS, 1, reject(MS)),
                (8 * MS, 5, reject(MS)),
                (9 * MS, 5, admit(0)),
            ],
        ),
        (
            // 1000/s, ratio 2, a backlog of 4 ops: after an hour idle the
            // key catches up on 4 ops at twice the rate, then no more.
            tp(TokenPool::new(spec("1000,2")).with_backlog_cap(Duration::from_millis(4))),
            vec![
                (0, 4, admit(0)),
                (3_600 * S, 4, admit(0)),
                (3_600 * S + 2 * MS, 4, admit(0)),
                (3_600 * S + 4 * MS, 4, admit(0)),
                (3_600 * S + 6 * MS, 4, reject(2 * MS)),
                (3_600 * S + 6 * MS, 2, admit(0)),
            ],
        ),
        (
            // 10^12/s, ratio 1000: 2^30 tokens a nanosecond, A = 10^9 ops
            // (about 2^50 tokens), B = 999 A, W = 10^12 ops: all above
            // 2^53, and a gap of 4 * 10^18 ns is about 2^92 tokens.
            tp(TokenPool::new(
                RateSpec::new(1e12)
                    .unwrap()
                    .with_burst_ratio(1000.0)
                    .unwrap(),
            )),
            vec![
                (0, 1_000_000_000_000, admit(0)),
                (0, 1, reject(1)),
                // 1000 ops: to A, and 1000 * 999 as burst.
                (1, 1_000, admit(999_000)),
                (4 * S * S + 1, 1_000_000_000_000, admit(0)),
                (4 * S * S + 1, 1_000_000_000_001, reject(u64::MAX)),
            ],
        ),
    ]
}

/// The in-memory store's answers.
fn in_memory<P: Policy>(policy: P, steps: &[(u64, u64)]) -> Vec<Verdict> {
    let store: KeyedLimiter<P> = KeyedLimiter::new(policy, 16);
    steps.iter().map(|&(t, c)| store.check("k", t, c)).collect()
}

fn memory_answers(limit: &Limit, steps: &[(u64, u64)]) -> Vec<Verdict> {
    match limit.clone() {
        Limit::FixedWindow(p) => in_memory(p, steps),
        Limit::SlidingWindowCounter(p) => in_memory(p, steps),
        Limit::Gcra(p) => in_memory(p, steps),
        Limit::SlidingLog(p) => in_memory(p, steps),
        Limit::TokenPool(p) => in_memory(p, steps),
    }
}

async fn redis_answers(
    store: &RedisStore,
    limit: &Limit,
    key: &str,
    steps: &[(u64, u64)],
) -> Vec<Verdict> {
    let mut out = Vec::new();
    for &(t, c) in steps {
        out.push(store.check_at(limit, key, t, c).await.unwrap());
    }
    out
}

async fn store(server: &RedisServer) -> RedisStore {
    RedisStore::builder(server.url())
        .deadline(Duration::from_secs(5))
        .connect()
        .await
        .unwrap()
}

#[tokio::test]
async fn both_stores_answer_every_vector_alike() {
    let server = RedisServer::start();
    let store = store(&server).await;
    for (i, (limit, vector)) in vectors().into_iter().enumerate() {
        let steps: Vec<(u64, u64)> = vector.iter().map(|&(t, c, _)| (t, c)).collect();
        let expected: Vec<Verdict> = vector.iter().map(|&(_, _, v)| v).collect();
        assert_eq!(
            memory_answers(&limit, &steps),
            expected,
            "memory, vector {i}"
        );
        let key = format!("vector-{i}");
        assert_eq!(
            redis_answers(&store, &limit, &key, &steps).await,
            expected,
            "redis, vector {i}"
        );
    }
}

#[tokio::test]
async fn random_sequences_agree_step_by_step_near_zero_and_near_today() {
    let server = RedisServer::start();
    let store = store(&server).await;
    let fw = |l, w| Limit::FixedWindow(FixedWindow::new(l, Duration::from_nanos(w)).unwrap());
    let swc = |l, w| {
        Limit::SlidingWindowCounter(SlidingWindowCounter::new(l, Duration::from_nanos(w)).unwrap())
    };
    let gcra = |r: f64, b, q| Limit::Gcra(Gcra::new(RateSpec::new(r).unwrap(), b, q).unwrap());
    let limits = [
        fw(5, 1_000),
        fw(1_000_000, 7 * S),
        swc(7, 1_000),
        swc(50, 3 * S + 7),
        gcra(1000.0, 3, 2),
        gcra(7.0, 1, 4),
        gcra(123_456.789, 10, 0),
        gcra(0.25, 2, 1),
    ];
    // Today's nanoseconds since the epoch, fixed so that failures repeat.
    let today = 1_795_000_000_123_456_789u64;
    let mut rng = 0x2545_F491_4F6C_DD1Du64;
    for (i, limit) in limits.iter().enumerate() {
        for (j, origin) in [0, today].into_iter().enumerate() {
            let mut now = origin;
            let mut steps = Vec::new();
            for _ in 0..120 {
                rng ^= rng << 13;
                rng ^= rng >> 7;
                rng ^= rng << 17;
                // Mostly short gaps, sometimes a long one.
                now += match rng % 8 {
                    0 => rng >> 40,
                    1..=3 => 0,
                    _ => (rng >> 20) % 2_000_000,
                };
                steps.push((now, 1 + (rng >> 8) % 4));
            }
            let key = format!("random-{i}-{j}");
            assert_eq!(
                redis_answers(&store, limit, &key, &steps).await,
                memory_answers(limit, &steps),
                "limit {i} ({limit:?}) from {origin}"
            );
        }
    }
}

#[test]
fn every_limit_is_kept_and_a_sliced_token_pool_is_one_line() {
    for (limit, _) in vectors() {
        assert!(RedisStore::supports(&limit).is_ok(), "{limit:?}");
    }
    for pool in pools() {
        assert!(RedisStore::supports(&Limit::TokenPool(pool)).is_ok());
    }
    let pool = Limit::TokenPool(TokenPool::new("5".parse().unwrap()));
    let rule = Rule::new("hot", Extract::global(), pool).slice(5);
    let err = RedisStore::supports_rule(&rule).unwrap_err();
    assert!(err.is_config());
    assert_eq!(
        err.to_string(),
        "redis store: rule \"hot\": a token pool takes no slices (tokens spent after they \
         were taken would let the pool refill under them): use fixed_window or \
         sliding_window_counter, or drop the slice"
    );
}

#[tokio::test]
async fn the_script_is_loaded_again_after_a_flush() {
    let server = RedisServer::start();
    let store = store(&server).await;
    let limit = Limit::FixedWindow(FixedWindow::new(2, Duration::from_secs(1)).unwrap());
    assert_eq!(store.check_at(&limit, "k", 0, 1).await.unwrap(), admit(1));
    let () = server.query(&["SCRIPT", "FLUSH"]).await;
    assert_eq!(store.check_at(&limit, "k", 1, 1).await.unwrap(), admit(0));
}

#[tokio::test]
async fn each_key_expires_when_it_would_decide_like_a_fresh_one() {
    let server = RedisServer::start();
    let store = store(&server).await;
    let pttl = |key: &'static str| {
        let server = &server;
        async move {
            let pattern = format!("tollgate:{{{key}}}:*");
            let keys: Vec<String> = server.query(&["KEYS", &pattern]).await;
            assert_eq!(keys.len(), 1, "{keys:?}");
            server.query::<i64>(&["PTTL", &keys[0]]).await
        }
    };
    // At Redis' own time: a GCRA of 1/s with a burst of 1 admitted once is
    // fresh again a second later; 100 s of post-accounted debt takes 101 s.
    let gcra = Limit::Gcra(Gcra::new(RateSpec::new(1.0).unwrap(), 1, 0).unwrap());
    assert!(store.check(&gcra, "g", 1).await.unwrap().is_admitted());
    let ms = pttl("g").await;
    assert!((900..=1001).contains(&ms), "{ms}");
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64;
    store.settle_at(&gcra, "g", now, 100).await.unwrap();
    // A time passed by the caller keeps the key at least a minute, so
    // debt alone sets it here.
    let ms = pttl("g").await;
    assert!((99_000..=101_001).contains(&ms), "{ms}");
    // A sliding log is fresh again a window after its newest entry.
    let log = Limit::SlidingLog(SlidingLog::new(5, Duration::from_secs(2)).unwrap());
    assert!(store.check(&log, "l", 3).await.unwrap().is_admitted());
    let ms = pttl("l").await;
    assert!((1_900..=2_001).contains(&ms), "{ms}");
}

#[tokio::test]
async fn a_token_pools_key_expires_when_one_refill_would_make_it_fresh() {
    let server = RedisServer::start();
    let store = store(&server).await;
    // 0.01/s: an op is 100 s, A = 2 ops, and W's cap of one second is a
    // hundredth of an op; each TTL below is past the minute a time
    // passed by the caller keeps a key.
    let pool = |r: &str| Limit::TokenPool(TokenPool::new(r.parse().unwrap()));
    let today = 1_795_000_000_123_456_789u64;
    let mut ttl = Vec::new();
    for (key, limit, cost, debt) in [
        // Ratio 2 (B = 2 ops), one op taken: one op of refill.
        ("one", pool("0.01,2"), 1, 0),
        // Ratio 1.25 (B = half an op), P = 1.5 ops < A: under A a refill
        // moves under B, so it takes one of A = 2 ops, not 1.
        ("under", pool("0.01,1.25"), 1, 0),
        // Ratio 1.5 (B = 1 op), P = A: a refill f moves f B / A, so one
        // op of headroom takes f = 2 ops.
        ("at", pool("0.01,1.5"), 1, 0),
        // Four ops taken and one more owed: 5 ops.
        ("owed", pool("0.01,2"), 4, 1),
        // At 1/64 op a second (a meter over 5^9, which the script's fast
        // step takes), ratio 2: one op of refill is 64 s.
        ("fast", pool("0.015625,2"), 1, 0),
    ] {
        assert!(store
            .check_at(&limit, key, today, cost)
            .await
            .unwrap()
            .is_admitted());
        if debt > 0 {
            store.settle_at(&limit, key, today, debt).await.unwrap();
        }
        let pattern = format!("tollgate:{{{key}}}:*");
        let keys: Vec<String> = server.query(&["KEYS", &pattern]).await;
        assert_eq!(keys.len(), 1, "{keys:?}");
        ttl.push(server.query::<i64>(&["PTTL", &keys[0]]).await);
    }
    // Whole seconds of refill, rounded up to the next millisecond, less
    // the moments since the call.
    for (got, want) in ttl
        .into_iter()
        .zip([100_001, 200_001, 200_001, 500_001, 64_001])
    {
        assert!((want - 1_000..=want).contains(&got), "{got} ms, not {want}");
    }
}

#[tokio::test]
async fn windows_agree_where_times_step_back_and_near_the_ends_of_their_ranges() {
    let server = RedisServer::start();
    let store = store(&server).await;
    let fw = |l, w| Limit::FixedWindow(FixedWindow::new(l, Duration::from_nanos(w)).unwrap());
    let swc = |l, w| {
        Limit::SlidingWindowCounter(SlidingWindowCounter::new(l, Duration::from_nanos(w)).unwrap())
    };
    // Small and large limits, windows around the script's bounds (10^14 ns,
    // 2^49 ns, 2^53 ns) and one window of a nanosecond.
    let limits = [
        fw(3, 1),
        fw(4, 999),
        fw(5, 3_600 * S),
        fw(6, 99_999_999_999_999),
        fw(7, 100_000_000_000_000),
        fw(8, (1 << 49) - 1),
        fw(9, 1 << 49),
        fw(10, 1 << 53),
        fw(99_999_999_999_999, 7 * S),
        fw(100_000_000_000_000, 7 * S),
        fw(u64::MAX, 7 * S),
        swc(3, 1),
        swc(4, 999),
        swc(5, 3_600 * S),
        swc(6, 99_999_999_999_999),
        swc(7, 100_000_000_000_000),
        swc(8, 1 << 53),
        swc(99_999_999_999_999, 7 * S),
        swc(100_000_000_000_000, 7 * S),
        swc(u64::MAX, 7 * S),
    ];
    let origins = [0, 1_795_000_000_123_456_789, u64::MAX - 20 * S];
    let mut rng = 0x9E37_79B9_7F4A_7C15u64;
    for (i, limit) in limits.iter().enumerate() {
        let big = matches!(i, 8..=10 | 17..=19);
        for (j, origin) in origins.into_iter().enumerate() {
            let mut now = origin;
            let mut steps = Vec::new();
            for _ in 0..80 {
                rng ^= rng << 13;
                rng ^= rng >> 7;
                rng ^= rng << 17;
                // Forward mostly, sometimes back across a window's start.
                now = match rng % 8 {
                    0 => now.saturating_sub((rng >> 20) % (3 * S)),
                    1 => now.saturating_add(rng >> 30),
                    2 | 3 => now,
                    _ => now.saturating_add((rng >> 20) % 2_000_000),
                }
                .min(u64::MAX - 1);
                // Up to 2^50: more than 10^14, and no sum of them overflows.
                let cost = if big && rng % 5 == 0 {
                    rng >> 14
                } else if big && rng % 5 == 1 {
                    (rng >> 20) % 40_000_000_000_000
                } else {
                    1 + (rng >> 8) % 4
                };
                steps.push((now, cost));
            }
            let key = format!("edges-{i}-{j}");
            assert_eq!(
                redis_answers(&store, limit, &key, &steps).await,
                memory_answers(limit, &steps),
                "limit {i} ({limit:?}) from {origin}"
            );
        }
    }
}

/// One step of a sliding log's random walk.
#[derive(Debug, Clone, Copy)]
enum Step {
    Check(u64, u64),
    /// A check through `check_each`, which also says where the key stands.
    Stand(u64, u64),
    Settle(u64, i64),
    /// Three checks of the key in one script call, decided in turn.
    Three(u64, u64),
}

#[tokio::test]
async fn sliding_logs_check_settle_and_stand_as_in_memory_step_by_step() {
    let server = RedisServer::start();
    let clock = tollgate::ManualClock::new();
    let store = RedisStore::builder(server.url())
        .clock(clock.clone())
        .deadline(Duration::from_secs(5))
        .connect()
        .await
        .unwrap();
    // Windows of a microsecond, of seconds, and above 2^53 ns.
    let windows = [1_000, 3 * S + 7, (1 << 53) + 7, 1 << 58];
    let today = 1_795_000_000_123_456_789u64;
    let mut rng = 0xD1B5_4A32_D192_ED03u64;
    let mut walks = 0;
    for (wi, w) in windows.into_iter().enumerate() {
        for limit in [1, 5, 40] {
            for logged in [false, true] {
                for origin in [0, today] {
                    let policy = SlidingLog::new(limit, Duration::from_nanos(w))
                        .unwrap()
                        .log_rejected(logged);
                    let memory: KeyedLimiter<SlidingLog> = KeyedLimiter::new(policy.clone(), 16);
                    let shared = Limit::SlidingLog(policy);
                    let key = format!("log-{wi}-{limit}-{logged}-{origin}");
                    let mut now = origin;
                    for n in 0..150 {
                        rng ^= rng << 13;
                        rng ^= rng >> 7;
                        rng ^= rng << 17;
                        now = match rng % 16 {
                            0 => now + w,
                            1 => now + (w - 1),
                            2 => now.saturating_sub((rng >> 20) % (w / 4 + 1)),
                            3..=6 => now,
                            7 | 8 => now + (rng >> 20) % w,
                            _ => now + (rng >> 20) % (w / 8 + 1),
                        }
                        .min(1 << 62);
                        // Mostly within the limit, sometimes above it.
                        let cost = 1 + (rng >> 12) % (limit + limit / 4 + 1);
                        let step = match (rng >> 8) % 9 {
                            0 => Step::Settle(now, ((rng >> 24) % (limit + 3)) as i64),
                            1 => Step::Settle(now, -(((rng >> 24) % (limit + 3)) as i64)),
                            2 | 3 => Step::Stand(now, cost),
                            4 => Step::Three(now, cost),
                            _ => Step::Check(now, cost),
                        };
                        let at = format!("{key}, step {n}: {step:?}");
                        match step {
                            Step::Check(t, c) => assert_eq!(
                                store.check_at(&shared, &key, t, c).await.unwrap(),
                                memory.check("k", t, c),
                                "{at}"
                            ),
                            Step::Stand(t, c) => {
                                clock.set_ns(t);
                                let (at_ns, got) =
                                    store.check_each(&[(&shared, &key, c)]).await.unwrap();
                                assert_eq!(at_ns, t);
                                let want = memory.update("k", t, |p, s| {
                                    let v = p.check(s, t, c);
                                    (v, p.standing(s, t))
                                });
                                assert_eq!(got, [want], "{at}");
                            }
                            Step::Three(t, c) => {
                                clock.set_ns(t);
                                let checks = [(&shared, key.as_str(), c); 3];
                                let (_, got) = store.check_each(&checks).await.unwrap();
                                // Where the key stands after all three.
                                let want: Vec<_> = (0..3)
                                    .map(|_| {
                                        memory.update("k", t, |p, s| {
                                            (p.check(s, t, c), p.standing(s, t))
                                        })
                                    })
                                    .collect();
                                let last = want[2].1;
                                let want: Vec<_> =
                                    want.into_iter().map(|(v, _)| (v, last)).collect();
                                assert_eq!(got, want, "{at}");
                            }
                            Step::Settle(t, d) => {
                                store.settle_at(&shared, &key, t, d).await.unwrap();
                                memory.settle("k", t, d);
                            }
                        }
                    }
                    walks += 1;
                }
            }
        }
    }
    assert_eq!(walks, 48);
}

/// The token pools the walks below run: burst ratios, a plain bucket, a
/// coarse clock step, capped and uncapped backlogs, and the extreme
/// rates whose tokens pass 2^64.
fn pools() -> Vec<TokenPool> {
    let spec = |r: &str| r.parse::<RateSpec>().unwrap();
    let ratio = |r: f64, k: f64| RateSpec::new(r).unwrap().with_burst_ratio(k).unwrap();
    vec![
        TokenPool::new(spec("5,2")),
        TokenPool::new(spec("1000,1.5")),
        TokenPool::new(ratio(1e7, 1.1)),
        TokenPool::new(spec("5")).with_burst(4).unwrap(),
        TokenPool::new(spec("1000,1")).with_clock_step(Duration::from_millis(4)),
        TokenPool::new(spec("123456.789,3")).with_backlog_cap(Duration::from_millis(10)),
        TokenPool::new(spec("0.25,2")).with_backlog_cap(Duration::ZERO),
        TokenPool::new(ratio(1e12, 1000.0)),
        TokenPool::new(ratio(0.001, 7.5)),
    ]
}

#[tokio::test]
async fn token_pools_check_settle_and_stand_as_in_memory_step_by_step() {
    let server = RedisServer::start();
    let clock = tollgate::ManualClock::new();
    let store = RedisStore::builder(server.url())
        .clock(clock.clone())
        .deadline(Duration::from_secs(5))
        .connect()
        .await
        .unwrap();
    let today = 1_795_000_000_123_456_789u64;
    let mut rng = 0xA076_1D64_78BD_642Fu64;
    let mut walks = 0;
    // Verdicts seen: admitted, rejected for a while, rejected for good.
    let mut seen = [0u32; 3];
    for (pi, policy) in pools().into_iter().enumerate() {
        let quota = policy.quota();
        for origin in [0, today, u64::MAX - (1 << 62)] {
            let memory: KeyedLimiter<TokenPool> = KeyedLimiter::new(policy.clone(), 16);
            let shared = Limit::TokenPool(policy.clone());
            let key = format!("pool-{pi}-{origin}");
            let mut now = origin;
            for n in 0..120 {
                rng ^= rng << 13;
                rng ^= rng >> 7;
                rng ^= rng << 17;
                // Mostly short gaps, sometimes none, a step back, or a
                // gap of up to 2^62 ns (tokens far above 2^64).
                now = match rng % 32 {
                    0 => now.saturating_add(rng >> 2),
                    1 | 2 => now.saturating_add((rng >> 20) % (10 * S)),
                    3 | 4 => now.saturating_sub((rng >> 20) % (5 * MS)),
                    5..=12 => now,
                    _ => now.saturating_add((rng >> 20) % (3 * MS)),
                };
                // Mostly within the pool, sometimes above A + B, rarely
                // beyond any pool.
                let cost = match (rng >> 4) % 16 {
                    0 => u64::MAX >> ((rng >> 10) % 30),
                    1 => quota + 1,
                    _ => 1 + (rng >> 12) % (quota + quota / 4 + 1),
                };
                let step = match (rng >> 8) % 9 {
                    0 => Step::Settle(now, ((rng >> 24) % (2 * quota + 3)) as i64),
                    1 => Step::Settle(now, -(((rng >> 24) % (2 * quota + 3)) as i64)),
                    2 | 3 => Step::Stand(now, cost),
                    4 => Step::Three(now, cost),
                    _ => Step::Check(now, cost),
                };
                let at = format!("{key} ({policy:?}), step {n}: {step:?}");
                match step {
                    Step::Check(t, c) => {
                        let v = memory.check("k", t, c);
                        assert_eq!(
                            store.check_at(&shared, &key, t, c).await.unwrap(),
                            v,
                            "{at}"
                        );
                        seen[match v {
                            Verdict::Reject {
                                retry_after_ns: u64::MAX,
                            } => 2,
                            Verdict::Reject { .. } => 1,
                            _ => 0,
                        }] += 1;
                    }
                    Step::Stand(t, c) => {
                        clock.set_ns(t);
                        let (at_ns, got) = store.check_each(&[(&shared, &key, c)]).await.unwrap();
                        assert_eq!(at_ns, t);
                        let want = memory.update("k", t, |p, s| {
                            let v = p.check(s, t, c);
                            (v, p.standing(s, t))
                        });
                        assert_eq!(got, [want], "{at}");
                    }
                    Step::Three(t, c) => {
                        clock.set_ns(t);
                        let checks = [(&shared, key.as_str(), c); 3];
                        let (_, got) = store.check_each(&checks).await.unwrap();
                        let want: Vec<_> = (0..3)
                            .map(|_| {
                                memory.update("k", t, |p, s| (p.check(s, t, c), p.standing(s, t)))
                            })
                            .collect();
                        let last = want[2].1;
                        let want: Vec<_> = want.into_iter().map(|(v, _)| (v, last)).collect();
                        assert_eq!(got, want, "{at}");
                    }
                    Step::Settle(t, d) => {
                        store.settle_at(&shared, &key, t, d).await.unwrap();
                        memory.settle("k", t, d);
                    }
                }
            }
            walks += 1;
        }
    }
    assert_eq!(walks, 27);
    assert!(seen.iter().all(|&n| n > 100), "{seen:?}");
}

/// Runs `steps` on one key of `policy` in Redis and in memory, asserting
/// that every answer agrees (checks, checks that say where the key
/// stands, three checks in one call) and returning how many steps were
/// admitted, delayed and rejected.
async fn agrees<P: Policy + Clone + std::fmt::Debug>(
    store: &RedisStore,
    clock: &tollgate::ManualClock,
    policy: &P,
    shared: Limit,
    key: &str,
    steps: &[Step],
) -> [u32; 3] {
    let memory: KeyedLimiter<P> = KeyedLimiter::new(policy.clone(), 16);
    let mut seen = [0u32; 3];
    let mut count = |v: Verdict| {
        seen[match v {
            Verdict::Admit { .. } => 0,
            Verdict::Delay { .. } => 1,
            Verdict::Reject { .. } => 2,
        }] += 1
    };
    for (n, &step) in steps.iter().enumerate() {
        let at = format!("{key} ({policy:?}), step {n}: {step:?}");
        match step {
            Step::Check(t, c) => {
                let v = memory.check("k", t, c);
                assert_eq!(store.check_at(&shared, key, t, c).await.unwrap(), v, "{at}");
                count(v);
            }
            Step::Stand(t, c) => {
                clock.set_ns(t);
                let (at_ns, got) = store.check_each(&[(&shared, key, c)]).await.unwrap();
                assert_eq!(at_ns, t);
                let want = memory.update("k", t, |p, s| {
                    let v = p.check(s, t, c);
                    (v, p.standing(s, t))
                });
                assert_eq!(got, [want], "{at}");
                count(want.0);
            }
            Step::Three(t, c) => {
                clock.set_ns(t);
                let checks = [(&shared, key, c); 3];
                let (_, got) = store.check_each(&checks).await.unwrap();
                let want: Vec<_> = (0..3)
                    .map(|_| memory.update("k", t, |p, s| (p.check(s, t, c), p.standing(s, t))))
                    .collect();
                let last = want[2].1;
                let want: Vec<_> = want.into_iter().map(|(v, _)| (v, last)).collect();
                assert_eq!(got, want, "{at}");
            }
            Step::Settle(t, d) => {
                store.settle_at(&shared, key, t, d).await.unwrap();
                memory.settle("k", t, d);
            }
        }
    }
    seen
}

async fn clocked_store(server: &RedisServer) -> (RedisStore, tollgate::ManualClock) {
    let clock = tollgate::ManualClock::new();
    let store = RedisStore::builder(server.url())
        .clock(clock.clone())
        .deadline(Duration::from_secs(5))
        .connect()
        .await
        .unwrap();
    (store, clock)
}

/// The script decides a common GCRA check on doubles, relative to the
/// time's tokens, and hands a check over to its limbs where a bound
/// could be passed: cost, burst and queue below 10^9 ops, a meter of
/// num / den tokens a nanosecond with num below 2^23 and den below 2^22,
/// the time's seconds times num below 2^52, a lead over the time's
/// tokens below 4 * 10^15, every time below 2^51 ns, and an expiry short
/// of 2^64. Each limit here sits just inside or just
/// outside one of them, and both paths answer as memory does.
#[tokio::test]
async fn gcra_checks_agree_on_both_sides_of_each_bound_of_the_fast_step() {
    let server = RedisServer::start();
    let (store, clock) = clocked_store(&server).await;
    let gcra = |r: &str, b, q| Gcra::new(r.parse().unwrap(), b, q).unwrap();
    let today = 1_795_000_000_123_456_789u64;
    let end = u64::MAX - 20 * S;
    let check = |t, c| Step::Check(t, c);
    let stand = |t, c| Step::Stand(t, c);
    // A check at each origin, a queue filled and passed, a wait, where
    // the key stands, and one beyond any burst.
    let common = |t: u64, b: u64, q: u64| {
        vec![
            check(t, 1),
            stand(t, 1),
            check(t, b),
            check(t, q.max(1)),
            stand(t, b + q),
            check(t + MS, 1),
            Step::Three(t + 2 * MS, 1),
            check(t + 3 * S, b),
            check(t + 3 * S, b + q + 1),
            stand(t + 4 * S, b + q + 1),
        ]
    };
    let mut cases: Vec<(&str, Gcra, Vec<Step>)> = Vec::new();
    for t in [0, 1, 999_999_999, S, today] {
        // Cost, burst and queue of 9 digits, and of 10.
        cases.push((
            "burst 10^9 - 1",
            gcra("1000", 999_999_999, 0),
            common(t, 999_999_999, 0),
        ));
        cases.push((
            "burst 10^9",
            gcra("1000", 1_000_000_000, 0),
            common(t, 1_000_000_000, 0),
        ));
        cases.push((
            "queue 10^9 - 1",
            gcra("1000", 1, 999_999_999),
            common(t, 1, 999_999_999),
        ));
        cases.push((
            "queue 10^9",
            gcra("1000", 1, 1_000_000_000),
            common(t, 1, 1_000_000_000),
        ));
        // den = 5^9 < 2^22 and 5^10 > 2^22.
        cases.push(("den 5^9", gcra("0.001953125", 2, 3), common(t, 2, 3)));
        cases.push(("den 5^10", gcra("0.001171875", 2, 3), common(t, 2, 3)));
        // Times of 2^51 ns: 4398.05 ops of 512 s.
        let steps = vec![
            check(t, 4_000),
            stand(t, 0),
            check(t, 398),
            stand(t, 0),
            check(t, 1),
            stand(t, 0),
            check(t + 512 * S, 1),
            check(t + 512 * S, 2_000),
            stand(t + 512 * S, 1),
        ];
        cases.push(("times near 2^51 ns", gcra("0.001953125", 4_000, 800), steps));
    }
    // num = 2^23 - 4 and 2^23 (whole tokens a nanosecond) at time 0;
    // seconds times num just below and above 2^52 today.
    for (name, r) in [
        ("num 2^23 - 4", "7999996185.302734375"),
        ("num 2^23", "8000000000"),
    ] {
        cases.push((name, gcra(r, 3, 2), common(0, 3, 2)));
        cases.push((name, gcra(r, 3, 2), common(999_999_999, 3, 2)));
    }
    for (name, r) in [
        ("S num below 2^52", "2392738342.28515625"),
        ("S num above 2^52", "2392742156.982421875"),
    ] {
        cases.push((name, gcra(r, 3, 2), common(today, 3, 2)));
    }
    // A lead of debt just below and above 4 * 10^15 tokens, an op a
    // nanosecond (2^20 tokens): 3,814,696 and 3,814,699 ops owed.
    for (name, debt) in [
        ("lead below 4e15", 3_814_696),
        ("lead above 4e15", 3_814_699),
    ] {
        let steps = vec![
            check(today, 1),
            Step::Settle(today, debt),
            check(today, 1),
            stand(today + 1, 1),
            check(today + 3_814_000, 1),
            stand(today + 3_814_600, 1),
            check(today + 3_814_700, 5),
            stand(today + 3_814_800, 3),
        ];
        cases.push((name, gcra("1000000000", 5, 0), steps));
    }
    // Leads of two, one and no tokens: at 1000/s (16384 / 15625 tokens
    // a nanosecond) an op admitted today is 2^20 tokens ahead of today's,
    // and 999,999 ns later one token ahead.
    let steps = vec![
        check(today, 1),
        stand(today + 999_998, 2),
        stand(today + 999_999, 2),
        check(today + 999_999, 1),
        stand(today + 1_000_000, 2),
        check(today + 1_000_000, 1),
    ];
    cases.push(("lead of one token", gcra("1000", 1, 0), steps));
    // Near 2^64: an expiry 10 s off, then 20 s off (past 2^64), and a
    // time 19 s on.
    let steps = vec![
        check(end, 10),
        stand(end, 0),
        check(end, 10),
        stand(end, 1),
        check(end + S, 15),
        check(end + 19 * S, 10),
        stand(end + 19 * S, 1),
        check(u64::MAX - 1, 1),
    ];
    cases.push(("near 2^64", gcra("1", 30, 5), steps));
    let mut seen = [0u32; 3];
    for (i, (name, policy, steps)) in cases.iter().enumerate() {
        let key = format!("gcra-bound-{i}");
        let got = agrees(
            &store,
            &clock,
            policy,
            Limit::Gcra(policy.clone()),
            &key,
            steps,
        )
        .await;
        assert!(got[0] > 0, "{name}: no step admitted: {got:?} {policy:?}");
        for (s, g) in seen.iter_mut().zip(got) {
            *s += g;
        }
    }
    assert!(seen.iter().all(|&n| n > 20), "{seen:?}");
}

/// A fixed-seed random walk of GCRA checks, settles and standings, at
/// times near zero, today and 2^64, on meters of whole and fractional
/// tokens a nanosecond, agreeing with memory step by step.
#[tokio::test]
async fn gcras_check_settle_and_stand_as_in_memory_step_by_step() {
    let server = RedisServer::start();
    let (store, clock) = clocked_store(&server).await;
    let policies = [
        ("10", 1, 2),
        ("3", 2, 0),
        ("1000", 5, 10),
        ("123456.789", 10, 3),
        ("0.25", 2, 1),
        ("0.001953125", 40, 40),
        ("1000000000", 100, 1_000),
        ("7999996185.302734375", 7, 7),
    ];
    let today = 1_795_000_000_123_456_789u64;
    let mut rng = 0x94D0_49BB_1331_11EBu64;
    let mut walks = 0;
    let mut seen = [0u32; 3];
    for (pi, (rate, burst, queue)) in policies.into_iter().enumerate() {
        let rate: RateSpec = rate.parse().unwrap();
        let policy = Gcra::new(rate, burst, queue).unwrap();
        let most = burst + queue;
        // An op's nanoseconds, at least one.
        let op = (1_000_000_000_000_000_000u128 / rate.nano_ops_per_sec()).max(1) as u64;
        for origin in [0, today, u64::MAX - (1 << 40)] {
            let mut now = origin;
            let mut steps = Vec::new();
            for _ in 0..120 {
                rng ^= rng << 13;
                rng ^= rng >> 7;
                rng ^= rng << 17;
                // Mostly gaps of up to a few ops, sometimes none, a step
                // back, or a long one.
                now = match rng % 32 {
                    0 => now.saturating_add(rng >> 4),
                    1 | 2 => now.saturating_add((rng >> 20) % (op.saturating_mul(3 * most) + 1)),
                    3 | 4 => now.saturating_sub((rng >> 20) % (op.saturating_mul(2) + 1)),
                    5..=14 => now,
                    _ => now.saturating_add((rng >> 20) % (op.saturating_mul(2) + 1)),
                }
                .min(u64::MAX - 1);
                let cost = match (rng >> 4) % 16 {
                    0 => most + 1 + (rng >> 40),
                    1 => 0,
                    _ => 1 + (rng >> 12) % (most / 2 + 1),
                };
                steps.push(match (rng >> 8) % 12 {
                    0 => Step::Settle(now, ((rng >> 24) % (most + 3)) as i64),
                    1 => Step::Settle(now, -(((rng >> 24) % (most + 3)) as i64)),
                    2 | 3 => Step::Stand(now, cost),
                    4 => Step::Three(now, cost),
                    _ => Step::Check(now, cost),
                });
            }
            let key = format!("gcra-walk-{pi}-{origin}");
            let got = agrees(
                &store,
                &clock,
                &policy,
                Limit::Gcra(policy.clone()),
                &key,
                &steps,
            )
            .await;
            for (s, g) in seen.iter_mut().zip(got) {
                *s += g;
            }
            walks += 1;
        }
    }
    assert_eq!(walks, 24);
    assert!(seen.iter().all(|&n| n > 150), "{seen:?}");
}

/// The script decides a common token pool check on doubles, relative to
/// the key's last fill, and hands a check over to its limbs where a bound
/// could be passed: a cost below 10^9 ops, A + B + cap below 2^51 tokens,
/// num and den below 10^7, a time since the fill within 4 * 10^6 s whose
/// product with num stays below 2^52 (or a fill that fills any pool), a
/// fill below A times B / A in lowest terms below 2^52, every value
/// times den and the headroom times A below 2^52, and
/// an expiry short of 2^64. Each pool here sits just inside or just
/// outside one of them, and both paths answer as memory does.
#[tokio::test]
async fn token_pool_checks_agree_on_both_sides_of_each_bound_of_the_fast_step() {
    let server = RedisServer::start();
    let (store, clock) = clocked_store(&server).await;
    let spec = |r: &str| r.parse::<RateSpec>().unwrap();
    let today = 1_795_000_000_123_456_789u64;
    let end = u64::MAX - 20 * S;
    let check = |t, c| Step::Check(t, c);
    let stand = |t, c| Step::Stand(t, c);
    let mut cases: Vec<(&str, TokenPool, Vec<Step>)> = Vec::new();
    for t in [0, 999_999_999, S, today] {
        // A + B + cap of 2^51 - 2^20 and 2^51 tokens (2^31 ops), and
        // costs of 9 and 10 digits.
        for (name, ops) in [("A below 2^51", (1u64 << 31) - 1), ("A of 2^51", 1 << 31)] {
            let pool = TokenPool::new(spec("1000")).with_burst(ops).unwrap();
            let steps = vec![
                check(t, 999_999_999),
                stand(t, 1_000_000_000),
                check(t + MS, 1_000_000_000),
                check(t + 2 * MS, ops),
                stand(t + 3 * MS, 1),
            ];
            cases.push((name, pool, steps));
        }
        // den = 5^10 (7 digits) and 5^11 (8 digits); num = 9,999,996
        // and 10^7 (whole tokens a nanosecond).
        for (name, r) in [
            ("den 5^10", "0.001171875"),
            ("den 5^11", "0.001015625"),
            ("num 10^7 - 4", "9536739349.365234375"),
            ("num 10^7", "9536743164.0625"),
        ] {
            let pool = TokenPool::new(spec(r)).with_backlog_cap(Duration::ZERO);
            let steps = vec![
                check(t, 1),
                stand(t, 1),
                check(t + 1, 1),
                check(t + 3, 1),
                stand(t + 3, 1),
                check(t + 700 * S, 1),
                stand(t + 700 * S, 1),
            ];
            cases.push((name, pool, steps));
        }
        // At 1000/s, num = 16384: 2^52 / 16384 = 274,877,906,944 ns since
        // the last fill, just within and just past; a time 4 * 10^6 s
        // back (at 0 it stays at 0), and just less.
        let pool = TokenPool::new(spec("1000,2"));
        let idle = 274_877_906_944;
        let steps = vec![
            check(t, 3),
            check(t + idle - 1, 3),
            check(t + 2 * idle - 1, 3),
            check(t + 3 * idle, 3),
            stand(t + 3 * idle + 1, 1),
            check((t + 3 * idle).saturating_sub(4_000_001 * S), 1),
            stand((t + 3 * idle).saturating_sub(3_999_999 * S), 1),
        ];
        cases.push(("time since the fill", pool, steps));
        // A bucket of a million ops at 1000/s: a fill after 2^52 / 16384
        // ns less one is exact, one just past it (2.9 * 10^11 tokens)
        // fills no pool of 10^12 tokens and hands over, one ten times as
        // long (and one of 5 * 10^6 s) fills it whatever its size.
        let pool = TokenPool::new(spec("1000")).with_burst(1_000_000).unwrap();
        let steps = vec![
            check(t, 999_999),
            check(t + idle - 1, 1),
            stand(t + idle - 1, 1),
            check(t + 2 * idle, 999_999),
            stand(t + 2 * idle, 1),
            check(t + 12 * idle, 999_999),
            stand(t + 12 * idle, 1),
            check(t + 12 * idle + 5_000_000 * S, 1_000_000),
            stand(t + 12 * idle + 5_000_000 * S + 7, 1),
        ];
        cases.push(("a fill far past the pool", pool, steps));
        // At 10^7/s with ratio 1000 and 999.5 and a backlog of a
        // millisecond: A = 10,485,760,000 tokens and B = 999 A (a fill
        // below A moves 999 times itself) or 998.5 A, so that a fill of
        // 859 tokens (82 ns) times B mod A = A / 2 passes 2^52.
        for (name, ratio, first, gaps) in [
            (
                "fill times B",
                1000.0,
                5_000_000,
                [40, 41, 42, 40, 39, 43, 41, 900],
            ),
            // B = A / 10 in lowest terms: a fill of 4.3 * 10^6 tokens
            // (410 µs) times B passes 2^52.
            (
                "fill times B / 10",
                1.1,
                10_000,
                [400_000, 410_000, 420_000, 5, 430_000, 9_000_000, 1, 2],
            ),
            (
                "fill times B mod A",
                999.5,
                5_000_000,
                [81, 82, 83, 80, 82, 84, 81, 900],
            ),
        ] {
            let rate = RateSpec::new(1e7).unwrap().with_burst_ratio(ratio).unwrap();
            let pool = TokenPool::new(rate).with_backlog_cap(Duration::from_millis(1));
            let mut steps = vec![check(t, first)];
            let mut at = t;
            for gap in gaps {
                at += gap;
                steps.push(check(at, 2));
                steps.push(stand(at, 1));
            }
            cases.push((name, pool, steps));
        }
        // At 1000/s (den 15625) a debt of 274,877 ops times den is just
        // below 2^52 tokens, 274,878 just above.
        for (name, debt) in [("debt below", 274_877), ("debt above", 274_878)] {
            let pool = TokenPool::new(spec("1000,2"));
            let steps = vec![
                check(t, 1),
                Step::Settle(t, debt),
                check(t, 1),
                stand(t + 1, 1),
                check(t + 100 * S, 1),
                stand(t + 300 * S, 1),
            ];
            cases.push((name, pool, steps));
        }
        // At 257,110.595703125/s (269.6 tokens a nanosecond) and ratio
        // 1.123457, A = 269,600,000 and B = 33,283,007 share no factor: a
        // fill of more than 2^52 / B tokens (about 500 µs) hands over, and
        // so does the headroom times A / B where a >= A.
        let rate = RateSpec::new(257_110.595_703_125)
            .unwrap()
            .with_burst_ratio(1.123457)
            .unwrap();
        let pool = TokenPool::new(rate).with_backlog_cap(Duration::from_millis(1));
        let mut steps = vec![check(t, 250), stand(t, 1)];
        let mut at = t;
        for (gap, cost) in [
            (400_000, 100),
            (450_000, 120),
            (600_000, 150),
            (5, 1),
            (700_000, 260),
            (7, 3),
        ] {
            at += gap;
            steps.push(check(at, cost));
            steps.push(stand(at, 1));
        }
        cases.push(("B / A in lowest terms large", pool, steps));
        // A = B = 2^26 tokens (64,000/s, ratio 2): the headroom times A
        // reaches 2^52 only with the whole headroom missing.
        let pool = TokenPool::new(spec("64000,2"));
        let steps = vec![
            check(t, 64),
            stand(t, 1),
            check(t, 64),
            stand(t + 1, 1),
            check(t + MS, 1),
            check(t + 10 * MS, 65),
            stand(t + 10 * MS, 1),
        ];
        cases.push(("headroom times A", pool, steps));
    }
    // Near 2^64: expiries of a second or so and of 40 s, past 2^64.
    for (name, r) in [("1/s near 2^64", "1"), ("0.1/s near 2^64", "0.1,2")] {
        let pool = TokenPool::new(spec(r));
        let steps = vec![
            check(end, 1),
            stand(end, 1),
            check(end + S, 1),
            check(end + 19 * S, 1),
            stand(end + 19 * S, 1),
            check(u64::MAX - 1, 1),
        ];
        cases.push((name, pool, steps));
    }
    let mut seen = [0u32; 3];
    for (i, (name, pool, steps)) in cases.iter().enumerate() {
        let key = format!("pool-bound-{i}");
        let shared = Limit::TokenPool(pool.clone());
        let got = agrees(&store, &clock, pool, shared, &key, steps).await;
        assert!(got[0] > 0, "{name}: no step admitted: {got:?} {pool:?}");
        for (s, g) in seen.iter_mut().zip(got) {
            *s += g;
        }
    }
    assert!(seen[0] > 20 && seen[2] > 20, "{seen:?}");
}
