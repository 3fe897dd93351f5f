//! Master election on a real etcd: three servers campaign, the master is
//! killed, a new one takes over, and clients follow the redirects.
//!
//! The test starts `etcd` (Debian's `etcd-server`: `/usr/bin/etcd`) on
//! loopback with free ports and a temporary data directory, and fails (does
//! not skip) when it cannot. Assertions poll state with generous bounds; the
//! one timing asserted closely is the failover bound the protocol promises
//! (see the failover test), and the measured figures are printed.

use std::fmt;
use std::process::Command;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use tokio::task::JoinHandle;
use tollgate_doorman::pb;
use tollgate_doorman::pb::capacity_client::CapacityClient;
use tollgate_doorman::{
    Backoff, Capacity, CapacitySource, Client, Election as _, EtcdElection, EtcdElectionConfig,
    Resource, ResourceOptions, Server, ServerConfig, WallClock as _,
};
use tracing::field::{Field, Visit};
use tracing::Level;
use tracing_subscriber::filter::Targets;
use tracing_subscriber::layer::{Context, Layer, SubscriberExt as _};

use tollgate_testkit::ask;
use tollgate_testkit::etcd::{start_etcd, EtcdProcess};
use tollgate_testkit::fixtures::fair_share;
use tollgate_testkit::process as cli;

/// The election TTL: etcd's lease lapses this long after the master's last
/// renewal. Well above etcd's 2 s minimum, so that the failover bound below
/// has a second of slack even in its worst case.
const TTL: Duration = Duration::from_secs(5);

/// The clients' refresh interval: `refresh_interval` in [`config`].
const REFRESH: Duration = Duration::from_secs(2);

/// Leases of 60 s, far longer than a failover, so that a lease granted by
/// the killed master is still valid when the new master grants; a refresh
/// interval of [`REFRESH`]; learning mode of 4 s so the test can watch it
/// start and end.
fn config() -> String {
    fair_share(100, 60, 2, 4)
}

/// The lease clients' backoff after a failed round: at most 0.5 s, a
/// quarter of [`REFRESH`], so that a client still asks at least once per
/// refresh interval while the master is gone.
const BACKOFF: Backoff = Backoff {
    base: Duration::from_millis(200),
    factor: 2.0,
    max: Duration::from_millis(500),
    jitter: 0.5,
};

struct Node {
    addr: String,
    server: Server,
    election: Option<EtcdElection>,
    serving: JoinHandle<std::io::Result<()>>,
}

impl Node {
    async fn start(endpoint: &str, key: &str) -> Node {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let election = EtcdElection::start(EtcdElectionConfig {
            endpoints: vec![endpoint.to_owned()],
            key: key.to_owned(),
            ttl: TTL,
            advertise: addr.clone(),
            // The 60 s leases and the TTL: the killed master's leases may
            // run 65 s, so the new master learns for all of its 4 s.
            promise: Duration::from_secs(65),
            clock_skew: Duration::from_secs(1),
        })
        .unwrap();
        let server = Server::builder(ServerConfig::from_yaml(&config()).unwrap())
            .election(&election)
            .build();
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

/// A hand-written client that knows one server address and follows
/// redirects. Each ask is one GetCapacity on a fresh connection, so every
/// RPC error it sees is reported, none hidden by a retry.
struct Probe {
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
    /// Connection or RPC error, timeout, a redirect to an unknown master,
    /// or a redirect loop.
    Failed(String),
}

impl Probe {
    async fn ask(&mut self, wants: f64, has: Option<f64>) -> Outcome {
        for _ in 0..3 {
            let addr = self.addr.clone();
            let call = async {
                let mut c = CapacityClient::connect(format!("http://{addr}"))
                    .await
                    .map_err(|e| e.to_string())?;
                c.get_capacity(ask::get_capacity(&self.id, "r", 0, wants, has))
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

/// A lease client (the crate's own) with id `id`, knowing `servers`.
fn lease_client(id: &str, servers: &[String]) -> Client {
    Client::builder()
        .servers(servers.iter().cloned())
        .id(id)
        .rpc_timeout(Duration::from_secs(1))
        .backoff(BACKOFF)
        .build()
        .unwrap()
}

/// Whether `node` holds a lease on `r` for `client`. A server forgets every
/// lease when it wins mastership, so on the new master this means it
/// granted one in its own term.
fn holds(node: &Node, client: &str) -> bool {
    node.server
        .leases("r")
        .is_some_and(|leases| leases.iter().any(|(c, _)| c == client))
}

/// The failed refresh rounds of this binary's lease clients, as (when,
/// client id). The lease client has no counter of them; it reports each one
/// as a warning, "capacity refresh failed" with a `client` field, and this
/// subscriber layer records those.
#[derive(Clone, Default)]
struct FailedRounds(Arc<Mutex<Vec<(Instant, String)>>>);

impl FailedRounds {
    /// The recorder, installed as the global subscriber on first use. It is
    /// global, not scoped to a thread, because the clients' tasks run on
    /// the runtime's worker threads. Only the lease client's warnings reach
    /// it.
    fn global() -> &'static FailedRounds {
        static ROUNDS: OnceLock<FailedRounds> = OnceLock::new();
        ROUNDS.get_or_init(|| {
            let rounds = FailedRounds::default();
            let only = Targets::new().with_target("tollgate_doorman::client", Level::WARN);
            tracing::subscriber::set_global_default(
                tracing_subscriber::registry().with(rounds.clone().with_filter(only)),
            )
            .expect("the only subscriber");
            rounds
        })
    }

    /// When `client`'s rounds failed, relative to `origin`: `Err` for those
    /// before it.
    fn of(&self, client: &str, origin: Instant) -> Vec<Result<Duration, Duration>> {
        let rounds = self.0.lock().unwrap();
        rounds
            .iter()
            .filter(|(_, c)| c == client)
            .map(|(t, _)| match t.checked_duration_since(origin) {
                Some(after) => Ok(after),
                None => Err(origin - *t),
            })
            .collect()
    }
}

impl<S: tracing::Subscriber> Layer<S> for FailedRounds {
    fn on_event(&self, event: &tracing::Event<'_>, _: Context<'_, S>) {
        let mut fields = RoundFields::default();
        event.record(&mut fields);
        if fields.message == "capacity refresh failed" {
            self.0.lock().unwrap().push((Instant::now(), fields.client));
        }
    }
}

/// The fields of a warning that [`FailedRounds`] looks at.
#[derive(Default)]
struct RoundFields {
    message: String,
    client: String,
}

impl Visit for RoundFields {
    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "client" {
            value.clone_into(&mut self.client);
        }
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        if field.name() == "message" {
            self.message = format!("{value:?}");
        }
    }
}

/// Three servers elect a master; the master is killed; the test checks the
/// failover the protocol promises:
///
/// - a new master is *serving*, i.e. has granted a client, within
///   `TTL + REFRESH` of the kill, and each lease client holds a lease from it
///   within that window, its lease from the killed master still valid when
///   the new one arrives (its lease never lapsed);
/// - no client sees an RPC error (failed RPC, master unknown, redirect loop,
///   timeout; for a lease client, a failed round) after that window;
/// - clients follow the redirect to the master, and none is granted more in
///   the new master's learning mode than it held before the kill.
///
/// "TTL + one refresh interval" means the clients' refresh interval
/// ([`REFRESH`]), not the election's keep-alive interval (`TTL / 3`). The
/// keep-alive interval cannot lengthen a failover: the master's last renewal
/// came before the kill, so its etcd lease lapses between `TTL - TTL / 3`
/// and `TTL` after it. What comes on top of the TTL is how long a client
/// takes to ask again and reach the new master, and that is what a client's
/// refresh interval bounds (while failing it backs off for less, see
/// [`BACKOFF`]). So the bound reads: the election moves within the TTL, and
/// every client is served again at its next refresh.
///
/// The house style keeps wall-clock timings out of assertions; this one
/// states a protocol bound, so it is asserted, with slack. At worst the
/// lease lapses `TTL` after the kill, etcd revokes it at its next expiry
/// check (every 500 ms), the next candidate's campaign returns within
/// milliseconds and a client asks within 0.5 s (a probe within 0.2 s):
/// about `TTL + 1 s` against the bound of `TTL + 2 s`. Typically it is about
/// `TTL - 0.5 s`. To fail, etcd, the servers or the clients must be starved
/// for a further second at the worst moment, or the failover must really be
/// slow (a follower never told of the new master, a client stuck on the dead
/// address), which is what the bound is there to catch.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failover_elects_a_new_master_that_starts_in_learning_mode() {
    let failed_rounds = FailedRounds::global();
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

    // Two probes start at a follower and follow its redirect. Two lease
    // clients know all three servers, a follower first, and find the master
    // with Discovery. Once the first master's learning mode is over, all
    // four hold 20.
    let mut probes: Vec<Probe> = ["probe-1", "probe-2"]
        .iter()
        .map(|id| Probe {
            id: (*id).into(),
            addr: nodes[follower].addr.clone(),
            redirects: 0,
        })
        .collect();
    let addresses: Vec<String> = [follower, first, 3 - first - follower]
        .iter()
        .map(|&i| nodes[i].addr.clone())
        .collect();
    let clients: Vec<Client> = ["lease-1", "lease-2"]
        .iter()
        .map(|id| lease_client(id, &addresses))
        .collect();
    let resources: Vec<Resource> = clients
        .iter()
        .map(|c| c.resource("r", ResourceOptions::new(20.0)).unwrap())
        .collect();
    let holds_20 = |r: &Resource| {
        let c = r.current();
        c.source == CapacitySource::Lease && c.capacity == 20.0
    };
    let mut held = [0.0; 2];
    let start = Instant::now();
    while held != [20.0, 20.0] || !resources.iter().all(holds_20) {
        assert!(start.elapsed() < Duration::from_secs(20), "first grants");
        for (i, p) in probes.iter_mut().enumerate() {
            match p.ask(20.0, Some(held[i])).await {
                Outcome::Granted { by, capacity } => {
                    assert_eq!(by, nodes[first].addr);
                    held[i] = capacity;
                }
                Outcome::Failed(e) => panic!("before failover: {e}"),
            }
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(probes.iter().all(|p| p.redirects == 1), "one redirect each");

    // Kill the master; its etcd lease lapses within the TTL. Everyone now
    // wants 70. The probes keep asking every 200 ms throughout: a probe that
    // fails (dead server, master unknown) moves on to another live server.
    // The lease clients go on by themselves.
    let before: Vec<Capacity> = resources.iter().map(Resource::current).collect();
    nodes[first].kill();
    let killed = Instant::now();
    for r in &resources {
        r.set_wants(70.0).unwrap();
    }
    let window = TTL + REFRESH;
    let live: Vec<String> = (0..3)
        .filter(|&i| i != first)
        .map(|i| nodes[i].addr.clone())
        .collect();
    let mut second = None;
    let mut agreed = None::<Duration>;
    let mut served = None::<Duration>;
    let mut leased = [None::<Duration>; 2];
    let mut seen: Vec<u64> = before.iter().map(|c| c.refreshes).collect();
    let mut probe_errors = Vec::new();
    let mut learning_grants = [0; 2];
    let mut got = [0.0; 2];
    // Go on for a refresh interval past the window, so that every client
    // has asked again after it.
    while got != [25.0, 25.0]
        || !resources.iter().all(|r| r.capacity() == 25.0)
        || killed.elapsed() < window + REFRESH
    {
        let lease_capacities: Vec<f64> = resources.iter().map(Resource::capacity).collect();
        assert!(
            killed.elapsed() < Duration::from_secs(40),
            "fair shares after learning mode: probes {got:?}, lease clients {lease_capacities:?}"
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
        for (i, p) in probes.iter_mut().enumerate() {
            match p.ask(70.0, Some(held[i])).await {
                Outcome::Granted { by, capacity } => {
                    let m = nodes.iter().position(|n| n.addr == by).unwrap();
                    assert_ne!(m, first, "the killed master granted");
                    served.get_or_insert(killed.elapsed());
                    got[i] = capacity;
                    if nodes[m].learning() {
                        // Learning mode only ends, so it held for the grant.
                        learning_grants[0] += 1;
                        assert!(
                            capacity <= held[i],
                            "{} granted {capacity} in learning mode, held {}",
                            p.id,
                            held[i]
                        );
                    }
                    held[i] = capacity;
                }
                Outcome::Failed(e) => {
                    probe_errors.push((killed.elapsed(), e));
                    p.addr = live[probe_errors.len() % live.len()].clone();
                }
            }
        }
        for (i, r) in resources.iter().enumerate() {
            let now = r.current();
            let id = clients[i].id();
            assert_eq!(
                now.source,
                CapacitySource::Lease,
                "{id} without a lease {:?} after the kill",
                killed.elapsed()
            );
            // A new answer, and the new master has this client's lease: it
            // came from the new master.
            let Some((m, _)) = second else { continue };
            if now.refreshes == seen[i] || !holds(&nodes[m], id) {
                continue;
            }
            seen[i] = now.refreshes;
            if leased[i].is_none() {
                leased[i] = Some(killed.elapsed());
                let old = before[i].lease.expect("a lease before the kill");
                assert!(
                    old.expiry > tollgate::SystemClock::new().now(),
                    "{id}: the lease from before the kill lapsed before the new master's came"
                );
            }
            if nodes[m].learning() {
                learning_grants[1] += 1;
                assert!(
                    now.capacity <= before[i].capacity,
                    "{id} granted {} in learning mode, held {}",
                    now.capacity,
                    before[i].capacity
                );
            }
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    // The lease clients' failed rounds: none before the kill, and split at
    // the window after it.
    let mut rounds_inside = [0; 2];
    let mut rounds_after = [0; 2];
    for (i, c) in clients.iter().enumerate() {
        for t in failed_rounds.of(c.id(), killed) {
            match t {
                Err(ahead) => panic!("{} failed a round {ahead:?} before the kill", c.id()),
                Ok(t) if t <= window => rounds_inside[i] += 1,
                Ok(_) => rounds_after[i] += 1,
            }
        }
    }
    let (second, elected) = second.expect("a new master");
    assert_ne!(second, first);
    let served = served.expect("the new master granted a probe");
    let leased = leased.map(|l| l.expect("a lease client leased from the new master"));
    let probe_errors_after: Vec<_> = probe_errors.iter().filter(|(t, _)| *t > window).collect();
    let secs = Duration::as_secs_f64;
    println!(
        "failover: ttl {} s, keep-alive {} ms, client refresh {} s: window {:.1} s",
        TTL.as_secs(),
        (TTL / 3).as_millis(),
        REFRESH.as_secs(),
        secs(&window)
    );
    println!(
        "failover: new master elected after {:.2} s, followers agree after {:.2} s, \
         first grant after {:.2} s, lease clients leased again after {:.2} s and {:.2} s",
        secs(&elected),
        agreed.as_ref().map_or(f64::NAN, secs),
        secs(&served),
        secs(&leased[0]),
        secs(&leased[1]),
    );
    println!(
        "failover: probe errors {} inside the window, {} after; lease client failed rounds \
         {:?} inside, {:?} after; grants in learning mode: {} to probes, {} to lease clients",
        probe_errors.len() - probe_errors_after.len(),
        probe_errors_after.len(),
        rounds_inside,
        rounds_after,
        learning_grants[0],
        learning_grants[1],
    );
    assert!(
        served <= window,
        "the new master first granted {served:?} after the kill, over ttl + refresh {window:?}"
    );
    for (c, l) in clients.iter().zip(leased) {
        assert!(
            l <= window,
            "{} leased from the new master {l:?} after the kill, over ttl + refresh {window:?}",
            c.id()
        );
    }
    assert!(
        probe_errors_after.is_empty(),
        "probe errors after ttl + refresh: {probe_errors_after:?}"
    );
    // The first round after the kill goes to the dead master and must
    // fail: seeing it shows the failed rounds are being recorded.
    assert!(
        rounds_inside.iter().all(|&n| n > 0),
        "no failed round recorded for the lease clients: {rounds_inside:?}"
    );
    assert_eq!(
        rounds_after,
        [0, 0],
        "lease clients' failed rounds after ttl + refresh"
    );
    assert!(
        learning_grants[0] > 0,
        "no probe was granted in learning mode"
    );
    assert!(!nodes[second].learning());

    // Shut the rest down; resigning hands mastership over without the TTL.
    drop(resources);
    drop(clients);
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
        .arg(etcd.pid().to_string())
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

/// A `tollgate serve` process in an etcd election and its gRPC address;
/// killed on drop.
struct ServeProcess {
    process: cli::Process,
    addr: String,
}

impl ServeProcess {
    fn start(endpoint: &str, key: &str, ttl: Duration) -> ServeProcess {
        let mut process = cli::start(
            cli::on_free_ports("serve")
                .args(["--etcd-endpoints", endpoint, "--election-key", key])
                .args(["--election-ttl", &format!("{}s", ttl.as_secs())]),
        );
        let addr = process.logged_addr("gRPC listening");
        ServeProcess { process, addr }
    }

    async fn is_master(&self) -> bool {
        ask::is_master(&self.addr).await
    }
}

/// SIGTERM makes a master resign at once: a follower takes over long before
/// the etcd lease (10 s) would lapse, and the old master exits 0.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_resigns_mastership_at_once() {
    let etcd = start_etcd();
    let ttl = Duration::from_secs(10);
    let key = "/tollgate/sigterm";
    let mut nodes = [
        ServeProcess::start(&etcd.endpoint, key, ttl),
        ServeProcess::start(&etcd.endpoint, key, ttl),
    ];
    let start = Instant::now();
    let master = loop {
        if nodes[0].is_master().await {
            break 0;
        }
        if nodes[1].is_master().await {
            break 1;
        }
        assert!(start.elapsed() < Duration::from_secs(30), "no master");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let follower = 1 - master;
    nodes[master].process.signal(libc::SIGTERM);
    let signalled = Instant::now();
    while !nodes[follower].is_master().await {
        assert!(
            signalled.elapsed() < ttl,
            "no takeover within the etcd TTL: the master did not resign"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let takeover = signalled.elapsed();
    println!(
        "SIGTERM: follower is master after {:.3} s",
        takeover.as_secs_f64()
    );
    // Resigning, not the lease lapsing, ended the term: well under the TTL.
    assert!(takeover < ttl / 2, "takeover took {takeover:?}");
    let status = tokio::task::block_in_place(|| nodes[master].process.exit_status());
    assert!(status.success(), "{status:?}");
    drop(etcd);
}
