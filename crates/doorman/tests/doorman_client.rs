//! End-to-end tests of the lease client against in-process servers on
//! 127.0.0.1:0.
//!
//! Servers and clients run on real time with one-second refresh intervals
//! (the smallest a server may configure). No assertion is about time: the
//! tests wait (with generous bounds that only guard against hanging) for
//! states on the resources' watch channels, and count refreshes — answers
//! from the server — rather than seconds.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{oneshot, watch};
use tokio::task::JoinHandle;
use tollgate_doorman::{
    Backoff, Capacity, CapacitySource, Client, ClientMetrics, ExpiryMode, RateOptions,
    RateResource, ResourceOptions,
};
use tollgate_doorman::{Election, Mastership, Server, ServerConfig, SingleElection};

/// A guard on how long any wait may take before the test fails; never
/// part of what is asserted.
const HANG: Duration = Duration::from_secs(60);

const FAIR: &str = r#"
resources:
  - identifier_glob: fair
    capacity: 1000
    algorithm: {kind: FAIR_SHARE, lease_length: 4, refresh_interval: 1, learning_mode_duration: 0}
  - identifier_glob: "*"
    capacity: 100
    safe_capacity: 10
    algorithm: {kind: FAIR_SHARE, lease_length: 3, refresh_interval: 1}
"#;

struct Running {
    server: Server,
    stop: Option<oneshot::Sender<()>>,
    serving: JoinHandle<()>,
}

impl Running {
    async fn stop(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        let _ = tokio::time::timeout(HANG, self.serving).await;
    }
}

/// Serves `yaml` on `listener`, always master.
fn serve_on(listener: tokio::net::TcpListener, yaml: &str, election: &dyn Election) -> Running {
    let server = Server::builder(ServerConfig::from_yaml(yaml).unwrap())
        .election(election)
        .build();
    let (stop, stopped) = oneshot::channel::<()>();
    let serving = tokio::spawn(server.clone().serve(listener, async {
        let _ = stopped.await;
    }));
    let serving = tokio::spawn(async move {
        serving.await.unwrap().unwrap();
    });
    Running {
        server,
        stop: Some(stop),
        serving,
    }
}

async fn serve(yaml: &str) -> (Running, String) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let election = SingleElection::new(Some(addr.clone()));
    (serve_on(listener, yaml, &election), addr)
}

fn client(servers: &[&str]) -> Client {
    Client::builder()
        .servers(servers.iter().copied())
        .rpc_timeout(Duration::from_secs(2))
        .backoff(Backoff {
            base: Duration::from_millis(200),
            factor: 1.5,
            max: Duration::from_secs(1),
            jitter: 0.5,
        })
        .build()
        .unwrap()
}

/// Waits until the capacity satisfies `pred`; returns it.
async fn wait_for(
    rx: &mut watch::Receiver<Capacity>,
    what: &str,
    pred: impl FnMut(&Capacity) -> bool,
) -> Capacity {
    let found = match tokio::time::timeout(HANG, rx.wait_for(pred)).await {
        Ok(Ok(c)) => Some(c.clone()),
        _ => None,
    };
    found.unwrap_or_else(|| panic!("{what}: still {:?}", *rx.borrow()))
}

/// An address nothing listens on (the port was bound, then let go).
async fn dead_address() -> String {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    l.local_addr().unwrap().to_string()
}

fn granted(c: &Capacity, value: f64) -> bool {
    c.source == CapacitySource::Lease && c.capacity == value
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_clients_share_fairly_and_grow_when_one_releases() {
    let (running, addr) = serve(FAIR).await;
    // The first client also has a dead address first: it must fail over.
    let dead = dead_address().await;
    let clients = [client(&[&dead, &addr]), client(&[&addr]), client(&[&addr])];
    let ids: Vec<&str> = clients.iter().map(Client::id).collect();
    assert!(
        ids[0] != ids[1] && ids[1] != ids[2] && ids[0] != ids[2],
        "{ids:?}"
    );
    assert_eq!(
        ids[0].split(':').count(),
        3,
        "host:pid:counter, got {}",
        ids[0]
    );

    let wants = [200.0, 500.0, 700.0];
    // The limiters measure time on a manual clock, so what they admit is
    // exact arithmetic.
    let clock = tollgate::ManualClock::new();
    let mut rates = Vec::new();
    for (c, w) in clients.iter().zip(wants) {
        let opts = RateOptions::new(ResourceOptions::new(w).mode(ExpiryMode::Pessimistic))
            .limiter_clock(Arc::new(clock.clone()));
        rates.push(RateResource::new(c, "fair", opts).unwrap());
    }
    let mut rxs: Vec<_> = rates.iter().map(|r| r.resource().watch()).collect();

    // Max-min fair shares of 1000 for wants 200, 500, 700.
    for (rx, share) in rxs.iter_mut().zip([200.0, 400.0, 400.0]) {
        wait_for(rx, "fair share", |c| granted(c, share)).await;
    }
    let leases: Vec<f64> = rxs.iter().map(|rx| rx.borrow().capacity).collect();
    assert!(leases.iter().sum::<f64>() <= 1000.0, "{leases:?}");
    let status = running.server.status();
    assert!(status[0].sum_has <= 1000.0);
    // The limiters run at the leased rates.
    for (r, share) in rates.iter().zip([200.0, 400.0, 400.0]) {
        assert_eq!(r.limiter().spec().ops_per_sec(), share);
    }
    // Greedy callers, 10 s of limiter time in 1 ms steps: each admits its
    // share, and all together at most 1000/s + 2%.
    let mut admitted = [0u64; 3];
    for _ in 0..10_000 {
        clock.advance(Duration::from_millis(1));
        for (n, r) in admitted.iter_mut().zip(&rates) {
            while r.try_acquire() {
                *n += 1;
            }
        }
    }
    println!("admitted in 10 s: {admitted:?}");
    for (n, share) in admitted.iter().zip([200u64, 400, 400]) {
        assert!(
            *n >= share * 10 && *n <= share * 10 * 102 / 100,
            "{admitted:?}"
        );
    }
    assert!(admitted.iter().sum::<u64>() <= 10_200, "{admitted:?}");

    // The first releases; the others grow to 500 each within two refreshes.
    let first = rates.remove(0);
    rxs.remove(0);
    first.release().await.unwrap();
    let before: Vec<u64> = rxs.iter().map(|rx| rx.borrow().refreshes).collect();
    for (rx, n) in rxs.iter_mut().zip(before) {
        let c = wait_for(rx, "share after release", |c| granted(c, 500.0)).await;
        assert!(c.refreshes - n <= 2, "took {} refreshes", c.refreshes - n);
    }
    for r in &rates {
        assert_eq!(r.limiter().spec().ops_per_sec(), 500.0);
    }
    drop(rates);
    running.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn outage_applies_each_mode_at_expiry_and_recovery_ends_it() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let election = SingleElection::new(Some(addr.clone()));
    let running = serve_on(listener, FAIR, &election);

    // "outage" matches "*": capacity 100, safe capacity 10, lease 3 s,
    // learning mode 3 s from when the server starts.
    let modes = [
        ExpiryMode::Optimistic,
        ExpiryMode::Pessimistic,
        ExpiryMode::Safe,
    ];
    let clients: Vec<Client> = modes.iter().map(|_| client(&[&addr])).collect();
    let rates: Vec<RateResource> = clients
        .iter()
        .zip(modes)
        .map(|(c, m)| {
            let opts = RateOptions::new(ResourceOptions::new(30.0).mode(m));
            RateResource::new(c, "outage", opts).unwrap()
        })
        .collect();
    let mut rxs: Vec<_> = rates.iter().map(|r| r.resource().watch()).collect();
    // Learning mode grants 0 (no client has a lease to report), then 30 each.
    for rx in &mut rxs {
        wait_for(rx, "lease before outage", |c| granted(c, 30.0)).await;
    }

    running.stop().await;
    let expected = [30.0, 0.0, 10.0];
    for ((rx, want), mode) in rxs.iter_mut().zip(expected).zip(modes) {
        let c = wait_for(rx, "expiry", |c| c.source == CapacitySource::Expired).await;
        assert_eq!(c.capacity, want, "{mode:?}");
        assert_eq!(c.safe_capacity, Some(10.0));
    }
    // Pessimistic: the gate is shut.
    assert!(!rates[1].try_acquire());
    assert_eq!(rates[2].limiter().spec().ops_per_sec(), 10.0);

    // Restart on the same port: a fresh server in learning mode.
    let listener = tokio::net::TcpListener::bind(&addr).await.unwrap();
    let election = SingleElection::new(Some(addr.clone()));
    let running = serve_on(listener, FAIR, &election);
    for rx in &mut rxs {
        let c = wait_for(rx, "recovery", |c| c.source == CapacitySource::Lease).await;
        // The first answer comes in learning mode: it echoes `has`, and an
        // expired lease is not reported, so 0.
        assert_eq!(c.capacity, 0.0);
    }
    for rx in &mut rxs {
        wait_for(rx, "lease after learning mode", |c| granted(c, 30.0)).await;
    }
    drop(rates);
    running.stop().await;
}

/// An election whose value the test sets.
#[derive(Debug)]
struct Follower(watch::Sender<Mastership>);

impl Election for Follower {
    fn subscribe(&self) -> watch::Receiver<Mastership> {
        self.0.subscribe()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn discovery_finds_the_master_through_a_follower_and_release_works() {
    let (master, master_addr) = serve(FAIR).await;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let follower_addr = listener.local_addr().unwrap().to_string();
    let election = Follower(watch::Sender::new(Mastership::follower(Some(
        master_addr.clone(),
    ))));
    let follower = serve_on(listener, FAIR, &election);

    let c = client(&[&follower_addr]);
    let r = c.resource("fair", ResourceOptions::new(42.0)).unwrap();
    let mut rx = r.watch();
    wait_for(&mut rx, "lease via discovery", |c| granted(c, 42.0)).await;
    assert_eq!(master.server.status()[0].sum_has, 42.0);
    assert!(follower.server.status().is_empty());
    r.release().await.unwrap();
    assert_eq!(master.server.status()[0].sum_has, 0.0);

    // Dropping a resource releases it too, in the background.
    let r = c.resource("fair", ResourceOptions::new(17.0)).unwrap();
    wait_for(&mut r.watch(), "second lease", |c| granted(c, 17.0)).await;
    assert_eq!(master.server.status()[0].sum_has, 17.0);
    drop(r);
    tokio::time::timeout(HANG, async {
        while master.server.status()[0].sum_has != 0.0 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .expect("released on drop");
    follower.stop().await;
    master.stop().await;
}

const LEARNING: &str = r#"
resources:
  - identifier_glob: fair
    capacity: 1000
    algorithm: {kind: FAIR_SHARE, lease_length: 4, refresh_interval: 1, learning_mode_duration: 30}
  - identifier_glob: "*"
    capacity: 100
    algorithm: {kind: FAIR_SHARE, lease_length: 3, refresh_interval: 1}
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failover_to_the_next_server_keeps_the_lease_through_its_learning_mode() {
    let (first, first_addr) = serve(FAIR).await;
    // The second server is in learning mode: it grants what clients hold.
    let (second, second_addr) = serve(LEARNING).await;
    let c = client(&[&first_addr, &second_addr]);
    let r = c.resource("fair", ResourceOptions::new(30.0)).unwrap();
    let mut rx = r.watch();
    wait_for(&mut rx, "lease from the first server", |c| granted(c, 30.0)).await;
    assert!(second.server.status().is_empty());

    // Record every capacity published from now on.
    let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
    let recorder = {
        let seen = seen.clone();
        let mut rx = r.watch();
        tokio::spawn(async move {
            while rx.changed().await.is_ok() {
                let c = rx.borrow_and_update().clone();
                seen.lock().unwrap().push((c.capacity, c.source));
            }
        })
    };
    first.stop().await;
    tokio::time::timeout(HANG, async {
        while second.server.status().first().map(|s| s.sum_has) != Some(30.0) {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .expect("the second server grants the lease");
    recorder.abort();
    // The lease was renewed from the second server before it expired.
    for (capacity, source) in seen.lock().unwrap().iter() {
        assert_eq!((*capacity, *source), (30.0, CapacitySource::Lease));
    }
    drop(r);
    second.stop().await;
}

/// The value of `metric{method, server}` in `metrics`' text, 0 if absent.
fn metric(metrics: &ClientMetrics, metric: &str, server: &str, method: &str) -> f64 {
    let series = format!("{metric}{{method=\"{method}\",server=\"{server}\"}} ");
    metrics
        .encode()
        .lines()
        .find_map(|l| l.strip_prefix(series.as_str()))
        .map_or(0.0, |v| v.parse().unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_count_each_rpc_by_server_and_method_failures_included() {
    let (running, addr) = serve(FAIR).await;
    let dead = dead_address().await;
    let metrics = ClientMetrics::new();
    let c = Client::builder()
        .servers([dead.clone(), addr.clone()])
        .backoff(Backoff {
            base: Duration::from_millis(50),
            factor: 1.0,
            max: Duration::from_millis(50),
            jitter: 0.0,
        })
        .metrics(metrics.clone())
        .build()
        .unwrap();
    let r = c.resource("fair", ResourceOptions::new(30.0)).unwrap();
    wait_for(&mut r.watch(), "a lease", |c| granted(c, 30.0)).await;
    r.release().await.unwrap();

    let requests =
        |server: &str, method: &str| metric(&metrics, "doorman_client_requests", server, method);
    let errors = |server: &str, method: &str| {
        metric(&metrics, "doorman_client_request_errors", server, method)
    };
    // The dead address fails once; the client moves on to the live one.
    assert_eq!(requests(&dead, "Discovery"), 1.0);
    assert_eq!(errors(&dead, "Discovery"), 1.0);
    assert_eq!(requests(&addr, "Discovery"), 1.0);
    assert!(requests(&addr, "GetCapacity") >= 1.0);
    assert_eq!(errors(&addr, "GetCapacity"), 0.0);
    assert_eq!(requests(&addr, "ReleaseCapacity"), 1.0);
    assert_eq!(errors(&addr, "ReleaseCapacity"), 0.0);
    let text = metrics.encode();
    assert!(
        text.contains(&format!(
            "doorman_client_request_durations_count{{method=\"ReleaseCapacity\",server=\"{addr}\"}} 1"
        )),
        "{text}"
    );
    running.stop().await;
}
