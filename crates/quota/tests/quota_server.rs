//! A whole quota server as `QuotaServer` assembles it: the debug port
//! served beside Allow and stopped with it, idle buckets reaped, and the
//! cluster mode's leases given back after the drain, before `serve`
//! returns.
//!
//! Servers run on 127.0.0.1:0 in real time; every wait is bounded and no
//! assertion is about how long anything took.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tollgate::ManualClock;
use tollgate_doorman::Client;
use tollgate_quota::{AllowRequest, ClusterOptions, Quota, QuotaConfig, QuotaLimits, QuotaServer};
use tollgate_testkit::{lease, net};

#[path = "common/http1.rs"]
mod http1;

/// A guard against hanging; never part of what a test asserts.
const HANG: Duration = Duration::from_secs(30);

fn quota(yaml: &str, clock: &ManualClock) -> Arc<Quota> {
    Arc::new(Quota::new(
        QuotaConfig::from_yaml(yaml).unwrap(),
        QuotaLimits::default(),
        Arc::new(clock.clone()),
    ))
}

/// Serves `server` on 127.0.0.1:0 until the sender is used (or dropped).
async fn serve(server: QuotaServer) -> (oneshot::Sender<()>, JoinHandle<std::io::Result<()>>) {
    let (listener, _) = net::listen().await;
    let (stop, stopped) = oneshot::channel::<()>();
    let serving = tokio::spawn(server.serve(listener, async move {
        let _ = stopped.await;
    }));
    (stop, serving)
}

/// Polls `done` every 10 ms until it holds, failing after [`HANG`].
async fn until(what: &str, mut done: impl FnMut() -> bool) {
    let start = Instant::now();
    while !done() {
        assert!(start.elapsed() < HANG, "{what}: not within {HANG:?}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_debug_port_is_served_beside_allow_and_stops_with_it() {
    let clock = ManualClock::new();
    let quota = quota("global_default_bucket: {size: 10, fill_rate: 1}\n", &clock);
    let (debug, daddr) = net::listen().await;
    let (stop, serving) = serve(QuotaServer::builder(Arc::clone(&quota)).debug_port(debug)).await;

    assert_eq!(
        http1::http(&daddr, "GET", "/healthz", "").await,
        (200, "ok\n".to_owned())
    );
    let (code, answer) = http1::http(
        &daddr,
        "POST",
        "/api/allow",
        r#"{"namespace":"a","bucket_name":"b","tokens_requested":1}"#,
    )
    .await;
    assert_eq!(
        (code, answer.as_str()),
        (200, r#"{"status":"OK","tokens_granted":1,"wait_millis":0}"#)
    );

    let outage = quota.readiness().not_ready();
    assert_eq!(
        http1::http(&daddr, "GET", "/healthz", "").await,
        (503, "not ready: etcd unreachable\n".to_owned())
    );
    drop(outage);

    stop.send(()).unwrap();
    serving.await.unwrap().unwrap();
    let start = Instant::now();
    while tokio::net::TcpStream::connect(&daddr).await.is_ok() {
        assert!(start.elapsed() < HANG, "the debug port still open");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_buckets_are_reaped_while_the_server_runs() {
    let clock = ManualClock::new();
    let quota = quota(
        "namespaces:\n  ns:\n    dynamic_bucket_template: {size: 5, fill_rate: 1, max_idle_millis: 1000}\n",
        &clock,
    );
    quota.allow(&AllowRequest::new("ns", "x", 1));
    assert_eq!(quota.registry().len(), 1);
    let (stop, serving) =
        serve(QuotaServer::builder(Arc::clone(&quota)).reap_every(Duration::from_millis(10))).await;
    clock.advance(Duration::from_millis(1000));
    until("the idle bucket reaped", || quota.registry().len() == 0).await;
    stop.send(()).unwrap();
    serving.await.unwrap().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cluster_modes_leases_are_given_back_before_serve_returns() {
    let leases = "\
resources:
  - identifier_glob: \"svc:api\"
    capacity: 1000
    algorithm: {kind: FAIR_SHARE, lease_length: 60, refresh_interval: 1, learning_mode_duration: 0}
  - identifier_glob: \"*\"
    capacity: 0
    algorithm: {kind: FAIR_SHARE, lease_length: 60, refresh_interval: 1, learning_mode_duration: 0}
";
    let (lease_server, lease_addr) = lease::serve(leases).await;
    let clock = ManualClock::new();
    let quota = quota(
        "namespaces:\n  svc:\n    buckets:\n      api: {size: 100, fill_rate: 1000}\n",
        &clock,
    );
    let client = Client::builder().server(lease_addr).build().unwrap();
    let (stop, serving) = serve(QuotaServer::builder(Arc::clone(&quota)).cluster(
        client,
        ClusterOptions::default().interval(Duration::from_millis(50)),
    ))
    .await;
    let held = || {
        lease_server
            .status()
            .iter()
            .find(|r| r.id == "svc:api")
            .map_or(0, |r| r.clients)
    };
    until("a lease on svc:api", || held() == 1).await;

    stop.send(()).unwrap();
    serving.await.unwrap().unwrap();
    assert_eq!(held(), 0);
}
