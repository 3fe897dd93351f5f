//! Master election on a real etcd: three servers campaign, the master is
//! killed, a new one takes over, and clients follow the redirects.
//!
//! The test starts `etcd` (Debian's `etcd-server`: `/usr/bin/etcd`) on
//! loopback with free ports and a temporary data directory, and fails (does
//! not skip) when it cannot. Assertions poll state with generous bounds; the
//! measured failover time is printed, not asserted tightly.

use std::net::TcpListener as StdListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::task::JoinHandle;
use tollgate::doorman::clock::SystemClock;
use tollgate::doorman::config::Config;
use tollgate::doorman::election::etcd::{Etcd, EtcdConfig};
use tollgate::doorman::election::Election as _;
use tollgate::doorman::pb;
use tollgate::doorman::pb::capacity_client::CapacityClient;
use tollgate::doorman::server::Server;

/// An etcd process, killed and its data removed on drop.
struct EtcdProcess {
    child: Child,
    dir: PathBuf,
    endpoint: String,
}

impl Drop for EtcdProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn etcd_binary() -> PathBuf {
    let fixed = PathBuf::from("/usr/bin/etcd");
    if fixed.exists() {
        return fixed;
    }
    std::env::var_os("PATH")
        .and_then(|path| {
            std::env::split_paths(&path)
                .map(|d| d.join("etcd"))
                .find(|p| p.exists())
        })
        .expect("etcd not found: install Debian's etcd-server (.ci/run does)")
}

fn free_port() -> u16 {
    StdListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn start_etcd() -> EtcdProcess {
    let client = free_port();
    let peer = free_port();
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    let dir = std::env::temp_dir().join(format!("tollgate-etcd-{}-{nanos}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let log = std::fs::File::create(dir.join("etcd.log")).unwrap();
    let client_url = format!("http://127.0.0.1:{client}");
    let peer_url = format!("http://127.0.0.1:{peer}");
    let child = Command::new(etcd_binary())
        .arg("--name=t")
        .arg(format!("--data-dir={}", dir.join("data").display()))
        .arg(format!("--listen-client-urls={client_url}"))
        .arg(format!("--advertise-client-urls={client_url}"))
        .arg(format!("--listen-peer-urls={peer_url}"))
        .arg(format!("--initial-advertise-peer-urls={peer_url}"))
        .arg(format!("--initial-cluster=t={peer_url}"))
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .expect("etcd could not be started");
    let mut etcd = EtcdProcess {
        child,
        dir,
        endpoint: format!("127.0.0.1:{client}"),
    };
    let start = Instant::now();
    loop {
        if let Some(status) = etcd.child.try_wait().unwrap() {
            let log = std::fs::read_to_string(etcd.dir.join("etcd.log")).unwrap_or_default();
            panic!("etcd exited with {status}: {log}");
        }
        if std::net::TcpStream::connect(&etcd.endpoint).is_ok() {
            return etcd;
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "etcd did not listen within 30 s"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

const TTL: Duration = Duration::from_secs(3);

/// Learning mode of 4 s so the test can watch it start and end.
const CONFIG: &str = r#"
resources:
  - identifier_glob: "*"
    capacity: 100
    algorithm: {kind: FAIR_SHARE, lease_length: 60, refresh_interval: 1, learning_mode_duration: 4}
"#;

struct Node {
    addr: String,
    server: Server,
    election: Option<Etcd>,
    serving: JoinHandle<Result<(), tonic::transport::Error>>,
}

impl Node {
    async fn start(endpoint: &str, key: &str) -> Node {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let election = Etcd::start(EtcdConfig {
            endpoints: vec![endpoint.to_owned()],
            key: key.to_owned(),
            ttl: TTL,
            advertise: addr.clone(),
        })
        .unwrap();
        let server = Server::new(
            Config::from_yaml(CONFIG).unwrap(),
            &election,
            Arc::new(SystemClock),
        );
        server.spawn_background(Duration::from_secs(1));
        let serving = tokio::spawn(server.clone().serve(listener, std::future::pending()));
        Node {
            addr,
            server,
            election: Some(election),
            serving,
        }
    }

    /// Kills the node as a crash would: the etcd lease is not revoked and
    /// must lapse.
    fn kill(&mut self) {
        self.election = None;
        self.serving.abort();
    }

    fn is_master(&self) -> bool {
        self.election.is_some() && self.server.current_mastership().is_master
    }

    fn learning(&self) -> bool {
        self.server
            .status()
            .iter()
            .any(|r| r.id == "r" && r.learning)
    }
}

/// Waits until `f` holds, polling every 50 ms, for at most `bound`.
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

/// A client that knows one server address and follows redirects.
struct Client {
    id: String,
    addr: String,
    redirects: usize,
}

/// What one attempt to get capacity gave.
#[derive(Debug)]
enum Outcome {
    Granted {
        by: String,
        capacity: f64,
    },
    /// Connection or RPC error, or a redirect to an unknown master.
    Failed(String),
}

impl Client {
    async fn ask(&mut self, wants: f64, has: Option<f64>) -> Outcome {
        for _ in 0..3 {
            let addr = self.addr.clone();
            let call = async {
                let mut c = CapacityClient::connect(format!("http://{addr}"))
                    .await
                    .map_err(|e| e.to_string())?;
                c.get_capacity(pb::GetCapacityRequest {
                    client_id: self.id.clone(),
                    resource: vec![pb::ResourceRequest {
                        resource_id: "r".into(),
                        priority: 0,
                        has: has.map(|capacity| pb::Lease {
                            expiry_time: 0,
                            refresh_interval: 0,
                            capacity,
                        }),
                        wants,
                    }],
                })
                .await
                .map(tonic::Response::into_inner)
                .map_err(|e| e.to_string())
            };
            let r = match tokio::time::timeout(Duration::from_secs(2), call).await {
                Ok(Ok(r)) => r,
                Ok(Err(e)) => return Outcome::Failed(e),
                Err(_) => return Outcome::Failed("timed out".into()),
            };
            match r.mastership {
                None => {
                    return Outcome::Granted {
                        by: addr,
                        capacity: r.response[0].gets.capacity,
                    }
                }
                Some(pb::Mastership {
                    master_address: Some(m),
                }) => {
                    self.redirects += 1;
                    self.addr = m;
                }
                Some(_) => return Outcome::Failed("master unknown".into()),
            }
        }
        Outcome::Failed("redirect loop".into())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failover_elects_a_new_master_that_starts_in_learning_mode() {
    let etcd = start_etcd();
    let mut nodes = Vec::new();
    for _ in 0..3 {
        nodes.push(Node::start(&etcd.endpoint, "/tollgate/test").await);
    }
    until(Duration::from_secs(20), "first master", || {
        master_of(&nodes).is_some()
    })
    .await;
    let first = master_of(&nodes).unwrap();
    let follower = (first + 1) % 3;
    until(Duration::from_secs(10), "followers know the master", || {
        nodes.iter().enumerate().all(|(i, n)| {
            i == first
                || n.server.current_mastership().master_address == Some(nodes[first].addr.clone())
        })
    })
    .await;

    // Clients start at a follower and follow its redirect; once the first
    // master's learning mode is over they hold 30 each.
    let mut clients: Vec<Client> = ["c1", "c2"]
        .iter()
        .map(|id| Client {
            id: (*id).into(),
            addr: nodes[follower].addr.clone(),
            redirects: 0,
        })
        .collect();
    let mut held = [0.0; 2];
    let start = Instant::now();
    while held != [30.0, 30.0] {
        assert!(start.elapsed() < Duration::from_secs(20), "first grants");
        for (i, c) in clients.iter_mut().enumerate() {
            match c.ask(30.0, Some(held[i])).await {
                Outcome::Granted { by, capacity } => {
                    assert_eq!(by, nodes[first].addr);
                    held[i] = capacity;
                }
                Outcome::Failed(e) => panic!("before failover: {e}"),
            }
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(
        clients.iter().all(|c| c.redirects == 1),
        "one redirect each"
    );

    // Kill the master; its lease lapses after the TTL. The clients keep
    // asking every 200 ms throughout, now for 70 each: a client that fails
    // (dead server, master unknown) moves on to another live server.
    nodes[first].kill();
    let killed = Instant::now();
    let live: Vec<String> = (0..3)
        .filter(|&i| i != first)
        .map(|i| nodes[i].addr.clone())
        .collect();
    let mut second = None;
    let mut agreed = None::<Duration>;
    let mut errors = Vec::new();
    let mut learning_grants = 0;
    let mut got = [0.0; 2];
    while got != [50.0, 50.0] {
        assert!(
            killed.elapsed() < Duration::from_secs(40),
            "fair shares after learning mode: {got:?}"
        );
        if second.is_none() {
            if let Some(m) = master_of(&nodes) {
                second = Some((m, killed.elapsed()));
            }
        }
        if let (Some((m, _)), None) = (second, agreed) {
            let all = nodes.iter().enumerate().all(|(i, n)| {
                i == first
                    || i == m
                    || n.server.current_mastership().master_address == Some(nodes[m].addr.clone())
            });
            if all {
                agreed = Some(killed.elapsed());
            }
        }
        for (i, c) in clients.iter_mut().enumerate() {
            match c.ask(70.0, Some(held[i])).await {
                Outcome::Granted { by, capacity } => {
                    let m = nodes.iter().position(|n| n.addr == by).unwrap();
                    assert_ne!(m, first, "the killed master granted");
                    got[i] = capacity;
                    if nodes[m].learning() {
                        // Learning mode only ends, so it held for the grant.
                        learning_grants += 1;
                        assert!(
                            capacity <= held[i],
                            "{} granted {capacity} in learning mode, held {}",
                            c.id,
                            held[i]
                        );
                    }
                    held[i] = capacity;
                }
                Outcome::Failed(_) => {
                    errors.push((killed.elapsed(), agreed.is_some()));
                    c.addr = live[errors.len() % live.len()].clone();
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let (second, failover) = second.expect("a new master granted");
    assert_ne!(second, first);
    let window = TTL + TTL / 3;
    println!(
        "failover: new master after {:.2} s, followers agree after {:.2} s (ttl {} s, refresh {} ms)",
        failover.as_secs_f64(),
        agreed.unwrap().as_secs_f64(),
        TTL.as_secs(),
        (TTL / 3).as_millis()
    );
    println!(
        "failover: {} client errors, {} after ttl + refresh, {} after the followers agreed; \
         {learning_grants} grants in learning mode",
        errors.len(),
        errors.iter().filter(|(t, _)| *t > window).count(),
        errors.iter().filter(|(_, a)| *a).count(),
    );
    assert!(
        failover < TTL * 2 + Duration::from_secs(10),
        "new master after {failover:?}"
    );
    assert!(learning_grants > 0, "no grant was seen in learning mode");
    assert_eq!(
        errors.iter().filter(|(_, a)| *a).count(),
        0,
        "client errors once every server knew the new master"
    );
    assert!(!nodes[second].learning());

    // Shut the rest down; resigning hands mastership over without the TTL.
    let resigner = nodes[second].election.take().unwrap();
    resigner.resign().await;
    let third = 3 - first - second;
    let handover = until(Duration::from_secs(10), "master after resign", || {
        nodes[third].is_master()
    })
    .await;
    println!("resign: next master after {:.2} s", handover.as_secs_f64());
    drop(nodes);
    drop(etcd);
}

fn signal(etcd: &EtcdProcess, sig: &str) {
    let ok = Command::new("kill")
        .arg(format!("-{sig}"))
        .arg(etcd.child.id().to_string())
        .status()
        .unwrap()
        .success();
    assert!(ok, "kill -{sig} etcd");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mastership_survives_a_stall_shorter_than_the_lease_and_ends_with_it() {
    let etcd = start_etcd();
    let node = Node::start(&etcd.endpoint, "/tollgate/stall").await;
    until(Duration::from_secs(20), "master", || node.is_master()).await;
    let mut terms = node.election.as_ref().unwrap().subscribe();
    terms.mark_unchanged();

    // etcd stalls for half the TTL: renewals fail or wait, the lease has
    // not lapsed, so mastership (and the term) must not change.
    signal(&etcd, "STOP");
    tokio::time::sleep(TTL / 2).await;
    assert!(node.is_master(), "mastership lost during a short stall");
    signal(&etcd, "CONT");
    tokio::time::sleep(TTL).await;
    assert!(node.is_master());
    assert!(
        !terms.has_changed().unwrap(),
        "a new term after a short stall"
    );

    // etcd stalls for longer than the TTL: the server must give up
    // mastership by itself, while etcd is still stopped.
    signal(&etcd, "STOP");
    let lost = until(TTL + Duration::from_secs(5), "mastership given up", || {
        !node.is_master()
    })
    .await;
    println!(
        "stall: mastership given up {:.2} s into it",
        lost.as_secs_f64()
    );
    signal(&etcd, "CONT");
    until(Duration::from_secs(20), "master again", || node.is_master()).await;
    drop(node);
    drop(etcd);
}
