//! Where the quota service's Redis store finds Redis, each against real
//! processes: a master named by a `redis-server --sentinel`; a server
//! over TLS whose CA the store is given, and one line at start-up for a
//! certificate the store does not trust; a Redis Cluster through its
//! seed list.

use std::sync::Arc;
use std::time::Duration;

use tollgate::ManualClock;
use tollgate_quota::{AllowRequest, OnError, Quota, QuotaConfig, QuotaLimits, QuotaStore, Status};
use tollgate_testkit::redis::{start_up_error, RedisCluster, RedisSentinel, RedisServer};

/// About 2026 in nanoseconds since the epoch: Redis' own scale.
const TODAY: u64 = 1_764_000_000_123_456_789;

const CONFIG: &str = "global_default_bucket: {size: 2, fill_rate: 1, max_debt_millis: 0}\n";

/// A quota server whose buckets are at `url`, on `clock`.
async fn server(url: String, clock: &ManualClock) -> Result<Quota, String> {
    let store = QuotaStore::new(url).map_err(|e| e.to_string())?;
    on(store, clock).await
}

/// A quota server whose buckets are in `store`, on `clock`.
async fn on(store: QuotaStore, clock: &ManualClock) -> Result<Quota, String> {
    let store = store
        .deadline(Duration::from_secs(5))
        .connect_timeout(Duration::from_secs(2))
        .on_error(OnError::Deny)
        .clock(Arc::new(clock.clone()));
    Quota::with_store(
        QuotaConfig::from_yaml(CONFIG).expect("a config"),
        QuotaLimits::default(),
        Arc::new(clock.clone()),
        store,
    )
    .await
    .map_err(|e| e.to_string())
}

/// The statuses of `n` Allows of one token with no wait, through Redis
/// or in memory.
async fn statuses(quota: &Quota, n: usize, redis: bool) -> Vec<Status> {
    statuses_of(quota, "any", n, redis).await
}

/// As [`statuses`], for bucket `b` of `namespace`.
async fn statuses_of(quota: &Quota, namespace: &str, n: usize, redis: bool) -> Vec<Status> {
    let mut answers = Vec::new();
    for _ in 0..n {
        let req = AllowRequest::new(namespace, "b", 1).max_wait_millis(0);
        let decision = if redis {
            quota.allow_async(&req).await
        } else {
            quota.allow(&req)
        };
        answers.push(decision.status);
    }
    answers
}

#[tokio::test(flavor = "current_thread")]
async fn a_store_through_a_sentinel_decides_on_its_master() {
    let mut redis = RedisSentinel::start();
    let clock = ManualClock::new();
    clock.set_ns(TODAY);
    let one = server(redis.url(), &clock).await.expect("the master");
    let two = server(redis.url(), &clock).await.expect("the master");
    // One server in memory, on the same clock, answers as the two
    // sharing one bucket through the master do.
    let memory = Quota::new(
        QuotaConfig::from_yaml(CONFIG).expect("a config"),
        QuotaLimits::default(),
        Arc::new(clock.clone()),
    );
    let mut shared = statuses(&one, 2, true).await;
    shared.extend(statuses(&two, 2, true).await);
    assert_eq!(shared, statuses(&memory, 4, false).await);
    assert_eq!(shared.last(), Some(&Status::RejectedTimeout));
    clock.advance(Duration::from_secs(1));
    let mut shared = statuses(&two, 1, true).await;
    shared.extend(statuses(&one, 2, true).await);
    assert_eq!(shared, statuses(&memory, 3, false).await);
    // The master gone, the store denies: it was the master deciding.
    redis.master.kill();
    clock.advance(Duration::from_secs(1));
    assert_eq!(statuses(&two, 1, true).await, [Status::RejectedServerError]);
}

#[tokio::test(flavor = "current_thread")]
async fn a_sentinel_that_names_no_such_master_is_one_line_at_start_up() {
    let redis = RedisSentinel::start();
    let clock = ManualClock::new();
    let line = start_up_error(
        server(redis.url_of("elsewhere"), &clock),
        "redis unreachable: redis sentinel master \"elsewhere\": ",
    )
    .await;
    assert!(line.contains("not found"), "{line}");
}

#[tokio::test(flavor = "current_thread")]
async fn a_store_over_tls_decides_with_its_ca_trusted() {
    let redis = RedisServer::start_tls();
    let clock = ManualClock::new();
    clock.set_ns(TODAY);
    let store = QuotaStore::new(redis.tls_url())
        .expect("a url")
        .ca(redis.ca_file());
    let quota = on(store, &clock).await.expect("the CA is trusted");
    let memory = Quota::new(
        QuotaConfig::from_yaml(CONFIG).expect("a config"),
        QuotaLimits::default(),
        Arc::new(clock.clone()),
    );
    let over_tls = statuses(&quota, 4, true).await;
    assert_eq!(over_tls, statuses(&memory, 4, false).await);
    assert_eq!(over_tls.last(), Some(&Status::RejectedTimeout));
}

#[tokio::test(flavor = "current_thread")]
async fn an_untrusted_certificate_is_one_line_at_start_up() {
    let redis = RedisServer::start_tls();
    let other = RedisServer::start_tls();
    let clock = ManualClock::new();
    // The system's roots, then another CA: neither signed the server's.
    for ca in [None, Some(other.ca_file())] {
        let mut store = QuotaStore::new(redis.tls_url()).expect("a url");
        if let Some(ca) = ca {
            store = store.ca(ca);
        }
        let address = redis.tls_url().replace("rediss://", "");
        let start = format!("redis unreachable: {address}: invalid peer certificate: ");
        start_up_error(on(store, &clock), &start).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn servers_on_a_cluster_through_its_seed_list_share_each_bucket() {
    let cluster = RedisCluster::start(3);
    let clock = ManualClock::new();
    clock.set_ns(TODAY);
    // The seeds as one comma-separated URL, and as a list.
    let one = server(cluster.urls().join(","), &clock)
        .await
        .expect("the cluster");
    let store = QuotaStore::cluster(cluster.urls()).expect("seeds");
    let two = on(store, &clock).await.expect("the cluster");
    let memory = Quota::new(
        QuotaConfig::from_yaml(CONFIG).expect("a config"),
        QuotaLimits::default(),
        Arc::new(clock.clone()),
    );
    // Buckets whose keys land on different nodes, each shared.
    for bucket in ["b", "c", "d", "e", "f", "g"] {
        let mut shared = statuses_of(&one, bucket, 2, true).await;
        shared.extend(statuses_of(&two, bucket, 2, true).await);
        assert_eq!(
            shared,
            statuses_of(&memory, bucket, 4, false).await,
            "{bucket}"
        );
        assert_eq!(shared.last(), Some(&Status::RejectedTimeout), "{bucket}");
    }
}
