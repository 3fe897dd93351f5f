//! A server tree on 127.0.0.1:0: a root and intermediate servers that ask
//! their parent with GetServerCapacity, and clients of the intermediates.
//!
//! The poller runs on real time (it waits the parent's refresh interval), so
//! the tests poll state with generous bounds instead of asserting timings.

use std::time::{Duration, Instant};

use tollgate_doorman::pb;
use tollgate_doorman::pb::capacity_client::CapacityClient;
use tollgate_doorman::{Parent, Server, ServerConfig, SingleElection};
use tollgate_testkit::fixtures::fair_share;
use tollgate_testkit::{ask, net};
use tonic::transport::Channel;

/// The root: 100 units, refresh 4 s, no learning mode.
fn root() -> String {
    fair_share(100, 30, 4, 0)
}

/// An intermediate's own templates: only its learning mode and the
/// fallback lease before the first grant matter.
fn mid() -> String {
    fair_share(1000, 60, 1, 0)
}

struct Running {
    server: Server,
    addr: String,
}

async fn start(yaml: &str, parent: Option<(&str, &str)>) -> Running {
    let (listener, addr) = net::listen().await;
    let election = SingleElection::new(Some(addr.clone()));
    let builder = Server::builder(ServerConfig::from_yaml(yaml).unwrap()).election(&election);
    let server = match parent {
        None => builder.build(),
        Some((parent, id)) => builder
            .parent(Parent {
                address: parent.to_owned(),
                server_id: id.to_owned(),
                decay_factor: 0.5,
            })
            .build(),
    };
    server.spawn_background(Duration::from_secs(1));
    tokio::spawn(server.clone().serve(listener, std::future::pending()));
    Running { server, addr }
}

async fn connect(addr: &str) -> CapacityClient<Channel> {
    CapacityClient::connect(format!("http://{addr}"))
        .await
        .unwrap()
}

async fn get(
    c: &mut CapacityClient<Channel>,
    client: &str,
    wants: f64,
    has: Option<f64>,
) -> pb::Lease {
    let r = c
        .get_capacity(ask::get_capacity(client, "r", 1, wants, has))
        .await
        .unwrap()
        .into_inner();
    assert!(r.mastership.is_none());
    r.response[0].gets
}

/// The lease the root holds for server `id` on "r".
fn root_lease(root: &Server, id: &str) -> tollgate_doorman::ClientLease {
    root.leases("r")
        .unwrap()
        .into_iter()
        .find(|(c, _)| c == id)
        .unwrap()
        .1
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_intermediate_grants_zero_then_what_its_parent_granted() {
    let root = start(&root(), None).await;
    let mid = start(&mid(), Some((&root.addr, "mid"))).await;
    let mut c = connect(&mid.addr).await;

    let first = get(&mut c, "c1", 40.0, None).await;
    assert_eq!(first.capacity, 0.0, "no grant from the parent yet");

    let start = Instant::now();
    let lease = loop {
        let l = get(&mut c, "c1", 40.0, Some(0.0)).await;
        if l.capacity > 0.0 {
            break l;
        }
        assert!(start.elapsed() < Duration::from_secs(10), "no grant");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(lease.capacity, 40.0, "the parent granted what was wanted");
    let up = root_lease(&root.server, "mid");
    assert_eq!(up.has, 40.0);
    assert_eq!(up.subclients, 1);
    assert_eq!(up.refresh_interval, Duration::from_secs(4));
    assert!(
        lease.expiry_time <= up.expiry.as_secs() as i64,
        "the client's lease ({}) outlives the intermediate's ({})",
        lease.expiry_time,
        up.expiry.as_secs()
    );
    assert_eq!(lease.refresh_interval, 2, "the parent's 4 s halved");
    let status = mid.server.status();
    assert_eq!(status[0].capacity, 40.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grants_through_an_intermediate_never_exceed_the_roots_capacity() {
    let root = start(&root(), None).await;
    let mid = start(&mid(), Some((&root.addr, "mid"))).await;
    let mut c = connect(&mid.addr).await;
    let ids = ["c1", "c2", "c3"];
    let mut held = [0.0; 3];
    let start = Instant::now();
    let mut rounds = 0;
    // Clients refresh until the intermediate has asked for all three and
    // shares the root's whole capacity; at no step do they hold more.
    while held.iter().sum::<f64>() < 100.0 - 1e-9 || rounds < 10 {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "did not converge: {held:?}"
        );
        for (i, id) in ids.iter().enumerate() {
            held[i] = get(&mut c, id, 50.0, Some(held[i])).await.capacity;
            let total: f64 = held.iter().sum();
            assert!(total <= 100.0 + 1e-9, "clients hold {total} > 100");
        }
        rounds += 1;
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let up = root_lease(&root.server, "mid");
    assert_eq!(up.has, 100.0);
    assert_eq!(up.subclients, 3, "one band of three clients");
    assert_eq!(up.wants, 150.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refresh_intervals_halve_at_each_level() {
    let root = start(&root(), None).await;
    let region = start(&mid(), Some((&root.addr, "region"))).await;
    let dc = start(&mid(), Some((&region.addr, "dc"))).await;
    let mut c = connect(&dc.addr).await;
    let start = Instant::now();
    let lease = loop {
        let l = get(&mut c, "c1", 30.0, Some(0.0)).await;
        if l.capacity > 0.0 {
            break l;
        }
        assert!(start.elapsed() < Duration::from_secs(20), "no grant");
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert_eq!(lease.capacity, 30.0);
    assert_eq!(
        root_lease(&root.server, "region")
            .refresh_interval
            .as_secs(),
        4
    );
    assert_eq!(
        root_lease(&region.server, "dc").refresh_interval.as_secs(),
        2
    );
    assert_eq!(lease.refresh_interval, 1);
}

/// As [`mid`], with 30 s of learning mode after winning mastership.
fn mid_learning() -> String {
    fair_share(1000, 60, 1, 30)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_intermediate_in_learning_mode_echoes_has_only_up_to_its_grant() {
    let root = start(&root(), None).await;
    let mid = start(&mid_learning(), Some((&root.addr, "mid"))).await;
    let mut c = connect(&mid.addr).await;
    // Before its first grant the intermediate knows no bound: c1's claim
    // of 150 is echoed, since c1 already holds it.
    assert_eq!(get(&mut c, "c1", 150.0, Some(150.0)).await.capacity, 150.0);
    let start = Instant::now();
    while mid.server.status()[0].capacity == 0.0 {
        assert!(start.elapsed() < Duration::from_secs(10), "no grant");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(mid.server.status()[0].capacity, 100.0);
    assert!(mid.server.status()[0].learning);
    // Once granted, echoes reach only as far as the grant: c1 keeps the
    // root's whole capacity, not 150, and nothing is left for c2.
    assert_eq!(get(&mut c, "c1", 150.0, Some(150.0)).await.capacity, 100.0);
    assert_eq!(
        get(&mut c, "c2", 50.0, Some(50.0)).await.capacity,
        0.0,
        "nothing left to echo"
    );
}
