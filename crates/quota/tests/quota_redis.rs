//! The quota service's buckets in a real `redis-server`: the same answers
//! as the in-memory buckets, step for step (debt, waits, rates below one
//! per second, `max_tokens_per_request`, dynamic buckets and their cap,
//! reloads); several servers on one Redis granting exactly a bucket's
//! tokens; and each `on_error` mode when Redis stops answering.

use std::sync::Arc;
use std::time::Duration;

use tollgate::ManualClock;
use tollgate_quota::{
    AllowRequest, Decision, OnError, Quota, QuotaConfig, QuotaLimits, QuotaStore, Status,
};
use tollgate_testkit::redis::RedisServer;

const MS: u64 = 1_000_000;
/// About 2026 in nanoseconds since the epoch: Redis' own scale.
const TODAY: u64 = 1_764_000_000_123_456_789;

/// One step of a vector: advance the clock, then ask.
#[derive(Debug, Clone)]
enum Step {
    Advance(u64),
    Ask(&'static str, &'static str, i64, Option<i64>),
    Reload(&'static str),
    /// Removes idle buckets in memory, and the Redis server's own (those
    /// it counts against the server-wide cap); Redis expires its keys by
    /// itself.
    Reap,
}

use Step::{Advance, Ask, Reap, Reload};

/// The in-memory quota and the Redis one, on one manual clock.
struct Pair {
    clock: ManualClock,
    memory: Quota,
    redis: Quota,
}

async fn pair(server: &RedisServer, yaml: &str, prefix: &str, start: u64) -> Pair {
    let clock = ManualClock::new();
    clock.set_ns(start);
    let config = QuotaConfig::from_yaml(yaml).expect("a config");
    let memory = Quota::new(
        config.clone(),
        QuotaLimits::default(),
        Arc::new(clock.clone()),
    );
    let store = QuotaStore::new(server.url())
        .expect("a url")
        .prefix(prefix)
        .deadline(Duration::from_secs(5))
        .on_error(OnError::Deny)
        .clock(Arc::new(clock.clone()));
    let redis = Quota::with_store(
        config,
        QuotaLimits::default(),
        Arc::new(clock.clone()),
        store,
    )
    .await
    .expect("redis is up");
    Pair {
        clock,
        memory,
        redis,
    }
}

impl Pair {
    /// Runs `steps` through both, asserting equal answers; returns them.
    async fn run(&self, steps: &[Step]) -> Vec<Decision> {
        let mut answers = Vec::new();
        for (i, step) in steps.iter().enumerate() {
            match step {
                Advance(ns) => self.clock.advance(Duration::from_nanos(*ns)),
                Reap => {
                    self.memory.reap();
                    self.redis.reap();
                }
                Reload(yaml) => {
                    let config = QuotaConfig::from_yaml(yaml).expect("a config");
                    self.memory.reload(config.clone());
                    self.redis.reload(config);
                }
                Ask(ns, bucket, tokens, wait) => {
                    let mut req = AllowRequest::new(ns, bucket, *tokens);
                    if let Some(w) = wait {
                        req = req.max_wait_millis(*w);
                    }
                    let memory = self.memory.allow(&req);
                    let redis = self.redis.allow_async(&req).await;
                    assert_eq!(memory, redis, "step {i}: {step:?}");
                    answers.push(memory);
                }
            }
        }
        assert_eq!(self.redis.metrics().store_errors(OnError::Deny), 0);
        answers
    }
}

fn ok(wait_ns: u64) -> (Status, Duration) {
    (Status::Ok, Duration::from_nanos(wait_ns))
}

fn status(s: Status) -> (Status, Duration) {
    (s, Duration::ZERO)
}

fn seen(answers: &[Decision]) -> Vec<(Status, Duration)> {
    answers.iter().map(|d| (d.status, d.wait)).collect()
}

#[tokio::test(flavor = "current_thread")]
async fn debt_and_waits_match_the_in_memory_bucket() {
    let server = RedisServer::start();
    for start in [0, TODAY] {
        let p = pair(
            &server,
            "namespaces:\n  ns:\n    buckets:\n      b: {size: 2, fill_rate: 10, max_debt_millis: 250, wait_timeout_millis: 100000}\n",
            &format!("debt{start}:"),
            start,
        )
        .await;
        let answers = p
            .run(&[
                Ask("ns", "b", 2, None),
                Ask("ns", "b", 1, None),
                Ask("ns", "b", 1, None),
                Ask("ns", "b", 1, None),
                Advance(150 * MS),
                Ask("ns", "b", 1, None),
                // A lower max wait than the 150 ms owed: refused.
                Ask("ns", "b", 1, Some(100)),
                Advance(10_000 * MS),
                Ask("ns", "b", 2, None),
            ])
            .await;
        assert_eq!(
            seen(&answers),
            [
                ok(0),
                ok(0),
                ok(100 * MS),
                status(Status::RejectedTimeout),
                ok(50 * MS),
                status(Status::RejectedTimeout),
                ok(0),
            ]
        );
    }
}

#[tokio::test(flavor = "current_thread")]
async fn rates_below_one_per_second_and_carried_fractions_match() {
    let server = RedisServer::start();
    let p = pair(
        &server,
        "namespaces:\n  slow:\n    buckets:\n      b: {size: 1, fill_rate: 0.3, max_debt_millis: 100000, wait_timeout_millis: 100000}\n      \
         c: {size: 1, fill_rate: 10, max_debt_millis: 10000, wait_timeout_millis: 100000}\n",
        "slow:",
        TODAY,
    )
    .await;
    let answers = p
        .run(&[
            Ask("slow", "b", 1, None),
            Ask("slow", "b", 1, None),
            Ask("slow", "b", 1, None),
            Ask("slow", "c", 1, None),
            Ask("slow", "c", 1, None),
            Advance(60 * MS),
            Ask("slow", "c", 1, None),
            Ask("slow", "c", 1, None),
        ])
        .await;
    assert_eq!(
        seen(&answers),
        [
            ok(0),
            ok(0),
            ok(3_333_333_334),
            ok(0),
            ok(0),
            ok(40 * MS),
            ok(140 * MS),
        ]
    );
    // A bucket polled every 99 ms, taking a token only while nothing is
    // owed, earns its full rate: 10 on hand and 0.99 per poll.
    let p = pair(
        &server,
        "namespaces:\n  poll:\n    buckets:\n      b: {size: 10, fill_rate: 10}\n",
        "poll:",
        TODAY,
    )
    .await;
    let mut steps = Vec::new();
    for poll in 0..=1010 {
        if poll > 0 {
            steps.push(Advance(99 * MS));
        }
        steps.push(Ask("poll", "b", 1, Some(0)));
    }
    let answers = p.run(&steps).await;
    assert_eq!(
        answers.iter().filter(|d| d.status == Status::Ok).count(),
        1010
    );
}

#[tokio::test(flavor = "current_thread")]
async fn tokens_per_request_and_dynamic_caps_match() {
    let server = RedisServer::start();
    let p = pair(
        &server,
        "namespaces:\n  named:\n    buckets:\n      b: {size: 10, fill_rate: 1, max_tokens_per_request: 5}\n  \
         dyn:\n    max_dynamic_buckets: 2\n    dynamic_bucket_template: {size: 1, fill_rate: 1, max_tokens_per_request: 3}\n  \
         open:\n    dynamic_bucket_template: {size: 2, fill_rate: 2}\n  \
         deflt:\n    default_bucket: {size: 3, fill_rate: 1}\n\
         global_default_bucket: {size: 4, fill_rate: 2}\n",
        "caps:",
        TODAY,
    )
    .await;
    let answers = p
        .run(&[
            Ask("named", "b", 6, None),
            Ask("named", "b", 5, None),
            Ask("named", "b", 0, None),
            Ask("named", "missing", 1, None),
            Ask("dyn", "a", 1, None),
            Ask("dyn", "b", 4, None),
            Ask("dyn", "b", 1, None),
            // The cap is reached: a new name is refused, whatever it asks.
            Ask("dyn", "c", 1, None),
            Ask("dyn", "c", 9, None),
            Ask("dyn", "a", 1, None),
            Ask("dyn", "a", 1, None),
            Ask("open", "x", 2, None),
            Ask("open", "y", 3, None),
            Ask("open", "y", 2, None),
            Ask("deflt", "anything", 1, None),
            Ask("deflt", "other", 2, None),
            Ask("elsewhere", "z", 2, None),
            Ask("elsewhere", "z", 3, None),
            Ask("", "z", 1, None),
            Ask("named", "b", -1, None),
        ])
        .await;
    assert_eq!(
        seen(&answers),
        [
            status(Status::RejectedTooManyTokensRequested),
            ok(0),
            ok(0),
            status(Status::RejectedNoBucket),
            ok(0),
            status(Status::RejectedTooManyTokensRequested),
            ok(0),
            status(Status::RejectedTooManyBuckets),
            status(Status::RejectedTooManyBuckets),
            ok(0),
            ok(1_000 * MS),
            // max_tokens_per_request defaults to the fill rate.
            ok(0),
            status(Status::RejectedTooManyTokensRequested),
            ok(0),
            ok(0),
            status(Status::RejectedTooManyTokensRequested),
            ok(0),
            status(Status::RejectedTooManyTokensRequested),
            status(Status::RejectedInvalidRequest),
            status(Status::RejectedInvalidRequest),
        ]
    );
    assert_eq!(answers[2].tokens_granted, 0);
}

async fn ask(quota: &Quota, bucket: &str) -> Status {
    let req = AllowRequest::new("open", bucket, 1);
    quota.allow_async(&req).await.status
}

/// `--max-dynamic-buckets` holds per server with buckets in Redis: each
/// server counts the dynamic buckets it answers for, as in memory, and
/// frees one when it is reaped.
#[tokio::test(flavor = "current_thread")]
async fn the_server_wide_cap_on_dynamic_buckets_holds_per_server() {
    let server = RedisServer::start();
    let yaml = "namespaces:\n  open:\n    dynamic_bucket_template: \
                {size: 10, fill_rate: 10, max_idle_millis: 1000}\n";
    let limits = QuotaLimits {
        max_dynamic_buckets: 2,
    };
    let clock = ManualClock::new();
    clock.set_ns(TODAY);
    let config = QuotaConfig::from_yaml(yaml).expect("a config");
    let memory = Quota::new(config.clone(), limits, Arc::new(clock.clone()));
    let mut servers = Vec::new();
    for _ in 0..2 {
        let store = QuotaStore::new(server.url())
            .expect("a url")
            .prefix("server-cap:")
            .deadline(Duration::from_secs(5))
            .on_error(OnError::Deny)
            .clock(Arc::new(clock.clone()));
        let quota = Quota::with_store(config.clone(), limits, Arc::new(clock.clone()), store)
            .await
            .expect("redis is up");
        servers.push(quota);
    }
    let (one, two) = (&servers[0], &servers[1]);
    let mut answers = Vec::new();
    for bucket in ["a", "b", "c", "a"] {
        let in_memory = memory.allow(&AllowRequest::new("open", bucket, 1)).status;
        let on_redis = ask(one, bucket).await;
        assert_eq!(on_redis, in_memory, "{bucket}");
        answers.push(on_redis);
    }
    assert_eq!(
        answers,
        [
            Status::Ok,
            Status::Ok,
            Status::RejectedTooManyBuckets,
            Status::Ok
        ]
    );
    // The other server counts its own.
    assert_eq!(ask(two, "c").await, Status::Ok);
    assert_eq!(ask(two, "d").await, Status::Ok);
    assert_eq!(ask(two, "e").await, Status::RejectedTooManyBuckets);
    assert_eq!(one.registry().dynamic_total(), 2);
    assert_eq!(two.registry().dynamic_total(), 2);
    // Reaped once idle, a server has room again.
    clock.advance(Duration::from_millis(1_001));
    assert_eq!(one.reap(), 2);
    assert_eq!(ask(one, "c").await, Status::Ok);
    assert_eq!(ask(one, "e").await, Status::Ok);
    assert_eq!(ask(one, "f").await, Status::RejectedTooManyBuckets);
    assert_eq!(one.metrics().store_errors(OnError::Deny), 0);
}

/// A bucket idle for its max idle starts afresh and, if dynamic, leaves
/// its namespace's count: as the in-memory reaper removes it.
#[tokio::test(flavor = "current_thread")]
async fn idle_buckets_start_afresh_as_when_reaped() {
    let server = RedisServer::start();
    for start in [0, TODAY - TODAY % MS] {
        let p = pair(
            &server,
            "namespaces:\n  dyn:\n    max_dynamic_buckets: 2\n    dynamic_bucket_template: {size: 2, fill_rate: 0.01, max_idle_millis: 1000, max_tokens_per_request: 2}\n  \
             named:\n    buckets:\n      b: {size: 2, fill_rate: 0.01, max_idle_millis: 500, max_tokens_per_request: 2}\n",
            &format!("idle{start}:"),
            start,
        )
        .await;
        let answers = p
            .run(&[
                Ask("dyn", "a", 2, None),
                Advance(400 * MS),
                Ask("dyn", "b", 2, None),
                Ask("dyn", "c", 1, None),
                Ask("named", "b", 2, None),
                Advance(599 * MS),
                Reap,
                // a was used 999 ms ago: still counted, still empty.
                Ask("dyn", "c", 1, None),
                Ask("named", "b", 1, Some(0)),
                Advance(MS),
                Reap,
                // a is gone: c takes its place.
                Ask("dyn", "c", 1, None),
                Ask("dyn", "a", 1, None),
                Ask("named", "b", 1, Some(0)),
                Ask("named", "b", 1, Some(0)),
            ])
            .await;
        assert_eq!(
            seen(&answers),
            [
                ok(0),
                ok(0),
                status(Status::RejectedTooManyBuckets),
                ok(0),
                status(Status::RejectedTooManyBuckets),
                ok(0),
                ok(0),
                status(Status::RejectedTooManyBuckets),
                ok(0),
                // A second token would leave about 100 s owed at 0.01/s,
                // over the max debt of 10 s.
                status(Status::RejectedTimeout),
            ]
        );
    }
}

#[tokio::test(flavor = "current_thread")]
async fn a_reload_applies_the_new_settings_keeping_the_level() {
    let server = RedisServer::start();
    let p = pair(
        &server,
        "namespaces:\n  ns:\n    buckets:\n      b: {size: 10, fill_rate: 10}\n",
        "reload:",
        TODAY,
    )
    .await;
    let answers = p
        .run(&[
            Ask("ns", "b", 4, None),
            Advance(30 * MS),
            Reload("namespaces:\n  ns:\n    buckets:\n      b: {size: 3, fill_rate: 20}\n"),
            Ask("ns", "b", 5, None),
            Ask("ns", "b", 1, None),
            Advance(100 * MS),
            Ask("ns", "b", 1, None),
            Reload("namespaces:\n  ns:\n    buckets:\n      b: {size: 3, fill_rate: 20, max_debt_millis: 50}\n"),
            Ask("ns", "b", 2, None),
        ])
        .await;
    // 6.3 on hand cut to 3 (the carry dropped with the old rate); 5 taken
    // leave 2 owed, 100 ms at 20/s; 100 ms later 1 is owed.
    assert_eq!(
        seen(&answers),
        [
            ok(0),
            ok(0),
            ok(100 * MS),
            ok(50 * MS),
            status(Status::RejectedTimeout),
        ]
    );
}

/// Random steps on several shapes of bucket, at times near zero and near
/// today's: the two stores agree on every answer.
#[tokio::test(flavor = "current_thread")]
async fn random_sequences_agree() {
    let server = RedisServer::start();
    let shapes = [
        "{size: 5, fill_rate: 10, max_debt_millis: 1000, wait_timeout_millis: 500}",
        "{size: 1, fill_rate: 0.3, max_debt_millis: 20000, wait_timeout_millis: 10000}",
        "{size: 100000000, fill_rate: 1000000.5, max_debt_millis: 3000, max_tokens_per_request: 300000000}",
        "{size: 3, fill_rate: 7.77, max_debt_millis: 900000000, wait_timeout_millis: 900000000}",
    ];
    let mut rng = 0x2545_F491_4F6C_DD1Du64;
    let mut next = move || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng
    };
    for (k, shape) in shapes.iter().enumerate() {
        for start in [0, TODAY] {
            let yaml = format!(
                "namespaces:\n  ns:\n    buckets:\n      b: {shape}\n  dyn:\n    max_dynamic_buckets: 3\n    dynamic_bucket_template: {shape}\n"
            );
            let p = pair(&server, &yaml, &format!("random{k}-{start}:"), start).await;
            let big = shape.contains("100000000");
            let mut steps = Vec::new();
            for _ in 0..400 {
                let r = next();
                match r % 4 {
                    0 => steps.push(Advance(next() % (700 * MS))),
                    1 => steps.push(Advance(next() % 3_000)),
                    _ => {}
                }
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
                steps.push(Ask(ns, name, tokens, wait));
            }
            let answers = p.run(&steps).await;
            let granted = answers.iter().filter(|d| d.status == Status::Ok).count();
            assert!(granted > 0 && granted < answers.len(), "{shape}: {granted}");
        }
    }
}

/// Two and then three servers on one Redis, asked from many tasks at
/// once, grant exactly the bucket's tokens: not one more.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn servers_on_one_redis_grant_exactly_the_bucket() {
    let server = RedisServer::start();
    // 1000 on hand, a token every 1000 s, and no debt worth a token.
    let yaml = "namespaces:\n  ns:\n    buckets:\n      b: {size: 1000, fill_rate: 0.001, max_debt_millis: 1, max_tokens_per_request: 10}\n    \
                max_dynamic_buckets: 0\n";
    for replicas in [2u32, 3] {
        let prefix = format!("hammer{replicas}:");
        let mut quotas = Vec::new();
        for _ in 0..replicas {
            let store = QuotaStore::new(server.url())
                .unwrap()
                .prefix(prefix.clone())
                .deadline(Duration::from_secs(10))
                .on_error(OnError::Deny)
                .replicas(replicas);
            let quota = Quota::with_store(
                QuotaConfig::from_yaml(yaml).unwrap(),
                QuotaLimits::default(),
                Arc::new(tollgate::SystemClock::new()),
                store,
            )
            .await
            .unwrap();
            quotas.push(Arc::new(quota));
        }
        let mut tasks = Vec::new();
        for t in 0..24usize {
            let quota = Arc::clone(&quotas[t % quotas.len()]);
            tasks.push(tokio::spawn(async move {
                let mut granted = 0i64;
                for i in 0..150 {
                    let tokens = 1 + (i + t) as i64 % 3;
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
        for task in tasks {
            granted += task.await.unwrap();
        }
        assert_eq!(granted, 1000, "{replicas} servers");
        for q in &quotas {
            assert_eq!(q.metrics().store_errors(OnError::Deny), 0);
        }
    }
}

/// Asks until Redis answers again (the link reconnects with backoff).
async fn until_redis_answers(quota: &Quota, mode: OnError) {
    for _ in 0..500 {
        let before = quota.metrics().store_errors(mode);
        let _ = quota
            .allow_async(&AllowRequest::new("ns", "probe", 1))
            .await;
        if quota.metrics().store_errors(mode) == before {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("redis did not answer again");
}

/// Redis stopped (its socket open, unanswered) and then killed: each
/// `on_error` mode answers, after at most the deadline (300 ms: a loaded
/// machine must not pass it while Redis runs), and the buckets
/// in Redis are used again once it is back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_on_error_mode_applies_and_redis_comes_back() {
    let yaml = "namespaces:\n  ns:\n    buckets:\n      b: {size: 10, fill_rate: 0.01, max_debt_millis: 1, max_tokens_per_request: 10}\n      \
                probe: {size: 1000000, fill_rate: 1000}\n";
    for mode in [OnError::Allow, OnError::Deny, OnError::Local] {
        let mut server = RedisServer::start();
        let store = QuotaStore::new(server.url())
            .unwrap()
            .deadline(Duration::from_millis(300))
            .connect_timeout(Duration::from_millis(500))
            .on_error(mode)
            .replicas(2);
        let quota = Quota::with_store(
            QuotaConfig::from_yaml(yaml).unwrap(),
            QuotaLimits::default(),
            Arc::new(tollgate::SystemClock::new()),
            store,
        )
        .await
        .unwrap();
        let ask = AllowRequest::new("ns", "b", 4);
        assert_eq!(quota.allow_async(&ask).await.status, Status::Ok);
        assert_eq!(quota.allow_async(&ask).await.status, Status::Ok);
        // 2 left in Redis.
        assert_eq!(
            quota.allow_async(&ask).await.status,
            Status::RejectedTimeout
        );

        for outage in ["pause", "kill"] {
            if outage == "pause" {
                server.pause();
            } else {
                server.kill();
            }
            let answers: Vec<Status> = {
                let mut v = Vec::new();
                for _ in 0..3 {
                    v.push(quota.allow_async(&ask).await.status);
                }
                v
            };
            let expected = match mode {
                OnError::Allow => vec![Status::Ok; 3],
                OnError::Deny => vec![Status::RejectedServerError; 3],
                // This server's own bucket, at half the rate (two
                // replicas) and so half the size: 5 on hand, 4 granted,
                // then refused (the same bucket through both outages).
                OnError::Local if outage == "pause" => {
                    vec![Status::Ok, Status::RejectedTimeout, Status::RejectedTimeout]
                }
                OnError::Local => vec![Status::RejectedTimeout; 3],
            };
            assert_eq!(answers, expected, "{mode:?} while redis is {outage}d");
            assert_eq!(
                quota.metrics().store_errors(mode),
                if outage == "pause" { 3 } else { 6 }
            );
            if outage == "pause" {
                server.resume();
                until_redis_answers(&quota, mode).await;
                // Redis kept its state: 2 left, 4 refused.
                assert_eq!(
                    quota.allow_async(&ask).await.status,
                    Status::RejectedTimeout
                );
                // The probe's own errors count too.
            }
        }
        server.restart();
        until_redis_answers(&quota, mode).await;
        // An empty Redis: the bucket is full again.
        assert_eq!(quota.allow_async(&ask).await.status, Status::Ok);
    }
}

/// An unreachable Redis at start-up is one line, within the connect
/// timeout; an unparsable URL and a braced prefix too.
#[tokio::test(flavor = "current_thread")]
async fn start_up_errors_are_one_line() {
    let config = || QuotaConfig::from_yaml("global_default_bucket: {}\n").unwrap();
    let clock = Arc::new(tollgate::SystemClock::new());
    let dead = tollgate_testkit::net::free_port();
    let store = QuotaStore::new(format!("redis://127.0.0.1:{dead}"))
        .unwrap()
        .connect_timeout(Duration::from_millis(300));
    let e = Quota::with_store(config(), QuotaLimits::default(), clock.clone(), store)
        .await
        .unwrap_err()
        .to_string();
    assert!(e.starts_with("redis unreachable: "), "{e}");
    assert!(!e.contains('\n'), "{e}");
    assert_eq!(
        QuotaStore::new("redis//nowhere").unwrap_err().to_string(),
        "invalid redis store: cannot parse \"redis//nowhere\": the scheme is none of redis://, \
         rediss://, redis+sentinel://"
    );
    let server = RedisServer::start();
    let store = QuotaStore::new(server.url()).unwrap().prefix("a{b}:");
    let e = Quota::with_store(config(), QuotaLimits::default(), clock, store)
        .await
        .unwrap_err()
        .to_string();
    assert_eq!(
        e,
        "invalid redis store: the key prefix \"a{b}:\" holds a brace, which would move the hash tag"
    );
}

/// A server whose buckets are in Redis refuses cluster mode, which would
/// lease the rates of buckets it does not keep.
#[tokio::test(flavor = "current_thread")]
async fn a_server_on_redis_refuses_cluster_mode() {
    let server = RedisServer::start();
    let quota = Quota::with_store(
        QuotaConfig::from_yaml("global_default_bucket: {}\n").unwrap(),
        QuotaLimits::default(),
        Arc::new(tollgate::SystemClock::new()),
        QuotaStore::new(server.url()).unwrap(),
    )
    .await
    .unwrap();
    let client = tollgate_doorman::Client::builder()
        .server("127.0.0.1:1")
        .build()
        .unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let e = tollgate_quota::QuotaServer::builder(Arc::new(quota))
        .cluster(client, tollgate_quota::ClusterOptions::default())
        .serve(listener, async {})
        .await
        .unwrap_err();
    assert_eq!(e.kind(), std::io::ErrorKind::InvalidInput);
    assert_eq!(
        e.to_string(),
        "a quota server keeps its buckets in Redis or leases their rates (cluster mode), not both"
    );
}
