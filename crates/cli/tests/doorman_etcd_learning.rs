//! Learning mode as the etcd election bounds it, on a real etcd: the first
//! master of an empty election needs none, a new master learns only until
//! its predecessor's watermark, and a master re-elected after an etcd
//! outage with no one in between keeps its leases; without the watermark
//! learning mode is kept in full.
//!
//! etcd is started as in `doorman_etcd.rs` (Debian's `etcd-server`). Bounds
//! on wall time are generous: what they tell apart is a learning mode
//! configured at 60 s from one that ends within seconds.

use std::time::{Duration, Instant};

use tollgate_doorman::pb::capacity_client::CapacityClient;
use tollgate_doorman::{EtcdElection, EtcdElectionConfig, Server, ServerConfig};

use tollgate_testkit::ask;
use tollgate_testkit::etcd::start_etcd;
use tollgate_testkit::fixtures::fair_share;

/// The election TTL: long enough that a loaded machine does not lose
/// mastership to a late keep-alive.
const TTL: Duration = Duration::from_secs(5);

/// 100 units, leases of `lease` seconds, 60 s of learning mode.
fn config(lease: u64) -> ServerConfig {
    ServerConfig::from_yaml(&fair_share(100, lease, 2, 60)).unwrap()
}

struct Node {
    addr: String,
    server: Server,
    election: Option<EtcdElection>,
    serving: tokio::task::JoinHandle<std::io::Result<()>>,
}

impl Node {
    /// A server with leases of `lease` seconds electing on `key`; the
    /// watermark promises a lease and a TTL ahead, or is off.
    async fn start(endpoint: &str, key: &str, lease: u64, watermark: bool) -> Node {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let promise = if watermark {
            Duration::from_secs(lease) + TTL
        } else {
            Duration::ZERO
        };
        let election = EtcdElection::start(EtcdElectionConfig {
            endpoints: vec![endpoint.to_owned()],
            key: key.to_owned(),
            ttl: TTL,
            advertise: addr.clone(),
            promise,
            clock_skew: Duration::from_secs(1),
        })
        .unwrap();
        let server = Server::builder(config(lease)).election(&election).build();
        server.spawn_background(Duration::from_secs(1));
        let serving = tokio::spawn(server.clone().serve(listener, std::future::pending()));
        Node {
            addr,
            server,
            election: Some(election),
            serving,
        }
    }

    /// Kills the node as a crash would: its etcd lease must lapse.
    fn kill(&mut self) {
        self.election = None;
        self.serving.abort();
    }

    fn is_master(&self) -> bool {
        self.election.is_some() && self.server.current_mastership().is_master
    }

    fn learning(&self) -> bool {
        self.server.status().iter().any(|r| r.learning)
    }

    /// What client `id` is granted asking this node for `wants`.
    async fn ask(&self, id: &str, wants: f64) -> f64 {
        let mut c = CapacityClient::connect(format!("http://{}", self.addr))
            .await
            .unwrap();
        let r = c
            .get_capacity(ask::get_capacity(id, "r", 0, wants, None))
            .await
            .unwrap()
            .into_inner();
        assert!(r.mastership.is_none(), "{} is not the master", self.addr);
        r.response[0].gets.capacity
    }
}

/// Waits until `f` holds, polling every 50 ms, for at most `bound`;
/// returns how long it took.
async fn until(bound: Duration, what: &str, mut f: impl FnMut() -> bool) -> Duration {
    let start = Instant::now();
    while !f() {
        assert!(start.elapsed() < bound, "{what}: not within {bound:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    start.elapsed()
}

fn master_of(nodes: &[Node]) -> Option<usize> {
    let masters: Vec<usize> = (0..nodes.len()).filter(|&i| nodes[i].is_master()).collect();
    assert!(masters.len() <= 1, "two masters at once: {masters:?}");
    masters.first().copied()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_first_master_of_an_empty_election_needs_no_learning_mode() {
    let etcd = start_etcd();
    let with = Node::start(&etcd.endpoint, "/tollgate/empty", 60, true).await;
    let without = Node::start(&etcd.endpoint, "/tollgate/off", 60, false).await;
    until(Duration::from_secs(20), "masters", || {
        with.is_master() && without.is_master()
    })
    .await;
    // An empty election: the algorithm decides at once.
    assert_eq!(with.ask("a", 30.0).await, 30.0);
    assert!(!with.learning());
    // Without the watermark nothing is known: 60 s of learning mode.
    assert_eq!(without.ask("a", 30.0).await, 0.0);
    assert!(without.learning());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_master_learns_only_until_its_predecessor_s_watermark() {
    let etcd = start_etcd();
    let mut nodes = Vec::new();
    for _ in 0..3 {
        // Leases of 4 s: the watermark is 9 s ahead.
        nodes.push(Node::start(&etcd.endpoint, "/tollgate/failover", 4, true).await);
    }
    until(Duration::from_secs(20), "first master", || {
        master_of(&nodes).is_some()
    })
    .await;
    let first = master_of(&nodes).unwrap();
    assert_eq!(nodes[first].ask("a", 30.0).await, 30.0);
    nodes[first].kill();
    until(Duration::from_secs(20), "second master", || {
        master_of(&nodes).is_some()
    })
    .await;
    let second = master_of(&nodes).unwrap();
    assert_ne!(second, first);
    // The first master's leases end 9 s after its last renewal at the
    // latest (a 4 s lease and the 5 s TTL); the new master learns until
    // then and a second more, not for the 60 s configured, and then grants
    // b all it wants.
    let start = Instant::now();
    loop {
        let master = master_of(&nodes).expect("a master");
        if nodes[master].ask("b", 100.0).await == 100.0 {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "b still granted nothing: learning mode in full"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    println!(
        "b granted all it wants {:?} after the new master was seen",
        start.elapsed()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_master_re_elected_after_an_etcd_outage_keeps_its_leases() {
    let mut etcd = start_etcd();
    let node = Node::start(&etcd.endpoint, "/tollgate/outage", 60, true).await;
    until(Duration::from_secs(20), "master", || node.is_master()).await;
    assert_eq!(node.ask("a", 30.0).await, 30.0);
    // etcd gone for longer than the TTL: mastership ends at the local
    // deadline.
    etcd.kill();
    until(Duration::from_secs(10), "mastership lost", || {
        !node.is_master()
    })
    .await;
    etcd.restart();
    until(Duration::from_secs(30), "master again", || node.is_master()).await;
    // No one else wrote the watermark: a's 30 still count, no learning
    // mode.
    assert_eq!(node.ask("b", 100.0).await, 70.0);
    assert!(!node.learning());
}
