//! Bans kept in Redis: a rule's ban decides as the in-memory throttler's
//! does (the same rejections, retry times and standings), and a key
//! banned through one replica is banned on every replica.

#[path = "common/gathered.rs"]
mod common_gathered;

use std::time::Duration;

use axum::http::Request;
use common_gathered::gathered;
use tollgate::ManualClock;
use tollgate_testkit::redis::RedisServer;
use tollgate_throttle::{
    Extract, FixedWindow, Limit, Mode, Permit, RedisStore, Rejection, RejectionKind, RequestHead,
    Rule, SlidingLog, Throttler,
};

const S: u64 = 1_000_000_000;
const MS: u64 = 1_000_000;

fn request(key: &str) -> Request<()> {
    Request::builder()
        .header("x-api-key", key)
        .body(())
        .expect("a request")
}

/// What a decision told the client: admitted or the rejection's kind and
/// rule, the retry time, and every limit's remaining and reset.
type Told = (bool, String, Duration, Vec<(u64, Duration)>);

fn told(d: Result<Permit, Rejection>) -> Told {
    let limits = |l: &[tollgate_throttle::LimitStatus]| {
        l.iter().map(|l| (l.remaining, l.reset)).collect::<Vec<_>>()
    };
    match d {
        Ok(p) => (true, String::new(), p.delay(), limits(p.limits())),
        Err(r) => (
            false,
            format!("{:?} {:?}", r.kind(), r.rule()),
            r.retry_after().unwrap_or_default(),
            limits(r.limits()),
        ),
    }
}

async fn store(server: &RedisServer, clock: &ManualClock) -> RedisStore {
    RedisStore::builder(server.url())
        .clock(clock.clone())
        .deadline(Duration::from_secs(5))
        .connect()
        .await
        .expect("redis answers")
}

/// A throttler in memory and one in Redis, each with `rules()`.
async fn pair(
    server: &RedisServer,
    clock: &ManualClock,
    rules: impl Fn() -> Vec<Rule>,
) -> (Throttler, Throttler) {
    let mut memory = Throttler::builder().clock(clock.clone());
    let mut shared = Throttler::builder().store(store(server, clock).await);
    for (a, b) in rules().into_iter().zip(rules()) {
        memory = memory.rule(a);
        shared = shared.rule(b);
    }
    (
        memory.build(),
        shared.try_build().expect("rules redis keeps"),
    )
}

fn per_key(limit: Limit) -> Rule {
    Rule::new("per-key", Extract::header("x-api-key"), limit)
}

#[tokio::test]
async fn a_ban_outlasts_the_limit_by_its_duration_in_both_stores() {
    let server = RedisServer::start();
    let clock = ManualClock::new();
    let origin = 1_000 * S;
    clock.set_ns(origin);
    let fw = Limit::FixedWindow(FixedWindow::new(2, Duration::from_secs(1)).unwrap());
    let rules = || {
        vec![per_key(fw.clone())
            .ban(Duration::from_secs(10))
            .ratelimit_headers(true)]
    };
    let (memory, shared) = pair(&server, &clock, rules).await;
    let limited = "Limited Some(\"per-key\")".to_owned();
    let banned = "Banned Some(\"per-key\")".to_owned();
    let ns = Duration::from_nanos;
    // (time after the origin, what the client is told)
    let vector: Vec<(u64, Told)> = vec![
        (0, (true, String::new(), ns(0), vec![(1, ns(S))])),
        (0, (true, String::new(), ns(0), vec![(0, ns(S))])),
        // The window ends in 900 ms; the ban lasts 10 s more.
        (
            100 * MS,
            (false, limited, ns(10_900 * MS), vec![(0, ns(10_900 * MS))]),
        ),
        // A new window, but the key is banned until 11 s: the limit is not
        // asked.
        (
            5 * S,
            (false, banned.clone(), ns(6 * S), vec![(0, ns(6 * S))]),
        ),
        // The key's window is empty: the ban alone sets the reset.
        (11 * S - 1, (false, banned, ns(1), vec![(0, ns(1))])),
        (11 * S, (true, String::new(), ns(0), vec![(1, ns(S))])),
    ];
    for (step, (t, want)) in vector.into_iter().enumerate() {
        clock.set_ns(origin + t);
        let req = request("k");
        let head = RequestHead::of(&req);
        assert_eq!(told(memory.check(&head)), want, "memory, step {step}");
        assert_eq!(told(shared.decide(&head).await), want, "redis, step {step}");
    }
    for t in [&memory, &shared] {
        let text = gathered(t.registry());
        assert!(
            text.contains(
                "tollgate_throttle_decisions_total{outcome=\"ban_started\",rule=\"per-key\"} 1"
            ),
            "{text}"
        );
        assert!(
            text.contains(
                "tollgate_throttle_decisions_total{outcome=\"banned\",rule=\"per-key\"} 2"
            ),
            "{text}"
        );
    }
}

#[tokio::test]
async fn banning_rules_in_redis_decide_as_in_memory_step_by_step() {
    let server = RedisServer::start();
    let clock = ManualClock::new();
    clock.set_ns(1_000 * S);
    let rules = || {
        vec![
            per_key(Limit::FixedWindow(
                FixedWindow::new(4, Duration::from_millis(300)).unwrap(),
            ))
            .ban(Duration::from_millis(700))
            .ratelimit_headers(true),
            Rule::new(
                "global",
                Extract::global(),
                Limit::SlidingLog(
                    SlidingLog::new(6, Duration::from_millis(400))
                        .unwrap()
                        .log_rejected(true),
                ),
            )
            .ban(Duration::from_millis(150))
            .ratelimit_headers(true),
            Rule::new(
                "shadow",
                Extract::header("x-api-key"),
                Limit::FixedWindow(FixedWindow::new(2, Duration::from_millis(200)).unwrap()),
            )
            .mode(Mode::Shadow)
            .ban(Duration::from_millis(500)),
        ]
    };
    let (memory, shared) = pair(&server, &clock, rules).await;
    let mut rng = 0x9E37_79B9_7F4A_7C15u64;
    let (mut admitted, mut banned) = (0, 0);
    for step in 0..400 {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        clock.advance(Duration::from_millis(rng % 60));
        let req = request(["a", "b", "c"][(rng >> 32) as usize % 3]);
        let head = RequestHead::of(&req);
        let m = told(memory.check(&head));
        assert_eq!(told(shared.decide(&head).await), m, "step {step}");
        if m.0 {
            admitted += 1;
        } else if m.1.starts_with("Banned") {
            banned += 1;
        }
    }
    // Admissions, bans and rejections of both kinds, many times.
    assert!(
        admitted > 50 && banned > 50,
        "{admitted} admitted, {banned} banned"
    );
    for outcome in ["ban_started", "shadow_banned"] {
        let count = |t: &Throttler| {
            gathered(t.registry())
                .lines()
                .filter(|l| l.contains(&format!("outcome=\"{outcome}\"")))
                .map(str::to_owned)
                .collect::<Vec<_>>()
        };
        assert_eq!(count(&shared), count(&memory));
        assert!(!count(&memory).is_empty(), "no {outcome}");
    }
}

#[tokio::test]
async fn a_key_banned_through_one_replica_is_banned_on_the_other() {
    let server = RedisServer::start();
    let clock = ManualClock::new();
    clock.set_ns(1_000 * S);
    let rule = || {
        per_key(Limit::FixedWindow(
            FixedWindow::new(3, Duration::from_secs(1)).unwrap(),
        ))
        .ban(Duration::from_secs(60))
    };
    let mut replicas = Vec::new();
    for _ in 0..2 {
        let store = store(&server, &clock).await;
        replicas.push(
            Throttler::builder()
                .store(store)
                .rule(rule())
                .try_build()
                .unwrap(),
        );
    }
    let (a, b) = (&replicas[0], &replicas[1]);
    let req = request("k");
    let head = RequestHead::of(&req);
    for _ in 0..3 {
        assert!(a.decide(&head).await.is_ok());
    }
    // Over the limit on replica a: banned for a minute after the window.
    let err = a.decide(&head).await.unwrap_err();
    assert_eq!(err.kind(), RejectionKind::Limited);
    assert_eq!(err.retry_after(), Some(Duration::from_secs(61)));
    // The ban is a key of its own, expiring with it.
    let client = redis::Client::open(server.url()).unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg("*:b")
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(keys.len(), 1, "{keys:?}");
    let ms: i64 = redis::cmd("PTTL")
        .arg(&keys[0])
        .query_async(&mut conn)
        .await
        .unwrap();
    assert!((60_000..=61_001).contains(&ms), "{ms}");
    // The next window: replica b never saw the key, yet it is banned.
    clock.advance(Duration::from_secs(2));
    let err = b.decide(&head).await.unwrap_err();
    assert_eq!(err.kind(), RejectionKind::Banned);
    assert_eq!(err.retry_after(), Some(Duration::from_secs(59)));
    let other = request("other");
    assert!(b.decide(&RequestHead::of(&other)).await.is_ok());
    clock.advance(Duration::from_secs(59));
    assert!(b.decide(&head).await.is_ok());
    assert!(a.decide(&head).await.is_ok());
}
