//! Where the throttler's Redis store finds Redis, each against real
//! processes: a master named by a `redis-server --sentinel`, and one
//! line at start-up for a Sentinel that names no such master; a server
//! over TLS whose CA the store is given, and one line at start-up for a
//! certificate the store does not trust.

use std::time::Duration;

use axum::http::Request;
use tollgate::ManualClock;
use tollgate_testkit::redis::{start_up_error, RedisSentinel, RedisServer};
use tollgate_throttle::{
    Extract, FixedWindow, Limit, OnError, RedisStore, RequestHead, Rule, Throttler,
};

const S: u64 = 1_000_000_000;

fn request(key: &str) -> Request<()> {
    Request::builder()
        .header("x-api-key", key)
        .body(())
        .expect("a request")
}

/// A throttler admitting 2 a second per key, on `store`.
fn throttler(store: RedisStore) -> Throttler {
    let limit = Limit::FixedWindow(FixedWindow::new(2, Duration::from_secs(1)).unwrap());
    Throttler::builder()
        .rule(Rule::new("per-key", Extract::header("x-api-key"), limit))
        .store(store)
        .try_build()
        .expect("a rule the store keeps")
}

async fn admitted(throttler: &Throttler, key: &str, n: usize) -> Vec<bool> {
    let mut answers = Vec::new();
    for _ in 0..n {
        let req = request(key);
        answers.push(throttler.decide(&RequestHead::of(&req)).await.is_ok());
    }
    answers
}

#[tokio::test(flavor = "current_thread")]
async fn a_store_through_a_sentinel_decides_on_its_master() {
    let mut redis = RedisSentinel::start();
    let clock = ManualClock::new();
    clock.set_ns(1_000 * S);
    let store = |clock: &ManualClock| {
        RedisStore::builder(redis.url())
            .clock(clock.clone())
            .deadline(Duration::from_secs(5))
            .on_error(OnError::Deny)
            .connect()
    };
    let one = throttler(store(&clock).await.expect("the sentinel names the master"));
    let two = throttler(store(&clock).await.expect("the sentinel names the master"));
    // Two replicas share one window of 2 through the master.
    assert_eq!(admitted(&one, "a", 1).await, [true]);
    assert_eq!(admitted(&two, "a", 2).await, [true, false]);
    assert_eq!(admitted(&one, "a", 1).await, [false]);
    clock.advance(Duration::from_secs(1));
    assert_eq!(admitted(&two, "a", 3).await, [true, true, false]);
    // The master gone, the store denies: it was the master deciding.
    redis.master.kill();
    clock.advance(Duration::from_secs(1));
    assert_eq!(admitted(&one, "a", 2).await, [false, false]);
}

#[tokio::test(flavor = "current_thread")]
async fn a_sentinel_that_names_no_such_master_is_one_line_at_start_up() {
    let redis = RedisSentinel::start();
    let connecting = RedisStore::builder(redis.url_of("elsewhere"))
        .connect_timeout(Duration::from_secs(2))
        .connect();
    let line = start_up_error(
        connecting,
        "redis unreachable: redis sentinel master \"elsewhere\": ",
    )
    .await;
    assert!(line.contains("not found"), "{line}");
}

#[tokio::test(flavor = "current_thread")]
async fn a_store_over_tls_decides_with_its_ca_trusted() {
    let server = RedisServer::start_tls();
    let clock = ManualClock::new();
    clock.set_ns(1_000 * S);
    let store = RedisStore::builder(server.tls_url())
        .ca(server.ca_file())
        .clock(clock.clone())
        .deadline(Duration::from_secs(5))
        .on_error(OnError::Deny)
        .connect()
        .await
        .expect("the CA is trusted");
    let throttler = throttler(store);
    assert_eq!(admitted(&throttler, "a", 3).await, [true, true, false]);
    clock.advance(Duration::from_secs(1));
    assert_eq!(admitted(&throttler, "a", 3).await, [true, true, false]);
}

#[tokio::test(flavor = "current_thread")]
async fn an_untrusted_certificate_is_one_line_at_start_up() {
    let server = RedisServer::start_tls();
    let other = RedisServer::start_tls();
    // The system's roots, then another CA: neither signed the server's.
    for ca in [None, Some(other.ca_file())] {
        let mut builder =
            RedisStore::builder(server.tls_url()).connect_timeout(Duration::from_secs(2));
        if let Some(ca) = ca {
            builder = builder.ca(ca);
        }
        let address = server.tls_url().replace("rediss://", "");
        let start = format!("redis unreachable: {address}: invalid peer certificate: ");
        start_up_error(builder.connect(), &start).await;
    }
}

#[tokio::test(flavor = "current_thread")]
async fn the_rules_yaml_gives_the_ca() {
    let server = RedisServer::start_tls();
    let yaml = format!(
        "store: {{url: \"{}\", ca: \"{}\", on_error: deny}}\nrules: []\n",
        server.tls_url(),
        server.ca_file().display()
    );
    let builder = tollgate_throttle::store_from_yaml(&yaml)
        .expect("a store section")
        .expect("a store");
    let clock = ManualClock::new();
    clock.set_ns(1_000 * S);
    let store = builder
        .clock(clock.clone())
        .deadline(Duration::from_secs(5))
        .connect()
        .await
        .expect("the CA is trusted");
    assert_eq!(
        admitted(&throttler(store), "a", 3).await,
        [true, true, false]
    );
}
