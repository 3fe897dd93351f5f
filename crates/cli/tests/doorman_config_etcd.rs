//! `tollgate serve --config etcd:KEY` on a real etcd: the configuration is
//! read from the key, every change put there is applied, an invalid
//! document is refused (the previous configuration stays), and every server
//! of an elected group serves the same configuration.
//!
//! The test starts `etcd` (Debian's `etcd-server`: `/usr/bin/etcd`) on
//! loopback with free ports and a temporary data directory, as
//! `tests/doorman_etcd.rs` does, and fails (does not skip) when it cannot.
//! Every wait polls with a generous bound; no timing is asserted.

use std::time::{Duration, Instant};

use tollgate_doorman::pb::capacity_client::CapacityClient;
use tollgate_doorman::EtcdConfigSource;
use tollgate_doorman::{Server, SingleElection};
use tollgate_service::EtcdKey;

use tollgate_testkit::ask;
use tollgate_testkit::etcd::start_etcd;
use tollgate_testkit::logs::Logs;
use tollgate_testkit::process as cli;

/// The configuration key.
const KEY: &str = "/tollgate/config";

/// One FAIR_SHARE resource of `capacity`, without learning mode, so that a
/// lone client wanting more gets exactly `capacity` from a new master.
fn document(capacity: u32) -> String {
    format!(
        "resources:\n  - identifier_glob: \"*\"\n    capacity: {capacity}\n    \
         algorithm: {{kind: FAIR_SHARE, lease_length: 60, refresh_interval: 1, learning_mode_duration: 0}}\n"
    )
}

/// A `tollgate serve` process and its gRPC address; killed on drop. Its log
/// lines are kept.
struct ServeProcess {
    process: cli::Process,
    addr: String,
}

impl ServeProcess {
    fn start(endpoint: &str, election_key: &str) -> ServeProcess {
        let mut process = cli::start(
            cli::on_free_ports("serve")
                .args(["--config", &format!("etcd:{KEY}")])
                .args(["--etcd-endpoints", endpoint, "--election-key", election_key])
                .args(["--election-ttl", "10s"]),
        );
        let addr = process.logged_addr("gRPC listening");
        ServeProcess { process, addr }
    }

    fn logged(&self, what: &str) -> usize {
        self.process.logged(what)
    }

    async fn is_master(&self) -> bool {
        ask::is_master(&self.addr).await
    }

    async fn capacity(&self) -> Option<f64> {
        capacity_at(&self.addr).await
    }
}

/// What a lone client wanting 1000 of resource `r` gets from `addr`.
async fn capacity_at(addr: &str) -> Option<f64> {
    let mut c = CapacityClient::connect(format!("http://{addr}"))
        .await
        .ok()?;
    let response = c
        .get_capacity(ask::get_capacity("probe", "r", 0, 1000.0, None))
        .await
        .ok()?
        .into_inner();
    response.response.first().map(|r| r.gets.capacity)
}

/// Waits until `f` holds, polling every 100 ms, for at most `bound`.
async fn until<F: std::future::Future<Output = bool>>(
    bound: Duration,
    what: &str,
    mut f: impl FnMut() -> F,
) {
    let start = Instant::now();
    while !f().await {
        assert!(start.elapsed() < bound, "{what}: not within {bound:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn master_of(nodes: &[ServeProcess]) -> usize {
    let start = Instant::now();
    loop {
        for (i, n) in nodes.iter().enumerate() {
            if n.is_master().await {
                return i;
            }
        }
        assert!(start.elapsed() < Duration::from_secs(60), "no master");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_elected_group_serves_the_config_watched_in_etcd() {
    let etcd = start_etcd();
    let doc = EtcdKey::new(std::slice::from_ref(&etcd.endpoint), KEY, None).unwrap();
    doc.save(&document(100)).await.unwrap();
    let election = "/tollgate/config-test";
    let nodes = [
        ServeProcess::start(&etcd.endpoint, election),
        ServeProcess::start(&etcd.endpoint, election),
    ];
    let master = master_of(&nodes).await;
    let follower = 1 - master;
    // The document as read at start-up is served.
    until(Duration::from_secs(30), "capacity 100", || async {
        nodes[master].capacity().await == Some(100.0)
    })
    .await;

    // A changed document is applied without a restart.
    doc.save(&document(50)).await.unwrap();
    until(Duration::from_secs(30), "capacity 50", || async {
        nodes[master].capacity().await == Some(50.0)
    })
    .await;
    for n in &nodes {
        until(
            Duration::from_secs(30),
            "the follower loads the change too",
            || async { n.logged("loaded configuration path=etcd:/tollgate/config") >= 1 },
        )
        .await;
    }

    // An invalid document is refused by both, and the old one still served.
    doc.save("resources: [{identifier_glob: \"*\", capacity: -1}]\n")
        .await
        .unwrap();
    for n in &nodes {
        until(
            Duration::from_secs(30),
            "the invalid document is refused",
            || async { n.logged("rejected new configuration") >= 1 },
        )
        .await;
    }
    assert_eq!(nodes[master].capacity().await, Some(50.0));

    // The follower serves the same configuration once it is master.
    nodes[master].process.signal(libc::SIGTERM);
    until(
        Duration::from_secs(30),
        "the follower takes over",
        || async { nodes[follower].is_master().await },
    )
    .await;
    assert_eq!(nodes[follower].capacity().await, Some(50.0));
    assert_eq!(
        nodes[follower].logged("loaded configuration path=etcd:/tollgate/config"),
        1,
        "one change applied, the invalid one refused: {:?}",
        nodes[follower].process.lines()
    );
    drop(nodes);
    drop(etcd);
}

#[test]
fn etcd_config_needs_endpoints_and_an_existing_valid_key() {
    let out = cli::tollgate()
        .args(["serve", "--port", "0", "--debug-port", "0"])
        .args(["--config", "etcd:/tollgate/config"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--etcd-endpoints"), "{err}");

    let etcd = start_etcd();
    let missing = cli::on_free_ports("serve")
        .args(["--config", "etcd:/tollgate/absent"])
        .args(["--etcd-endpoints", &etcd.endpoint])
        .output()
        .unwrap();
    assert!(!missing.status.success());
    let err = String::from_utf8_lossy(&missing.stderr);
    assert!(
        err.contains("etcd key \"/tollgate/absent\" does not exist"),
        "{err}"
    );
    drop(etcd);
}

/// `etcdserverpb.DeleteRangeRequest`, its key only.
#[derive(Clone, PartialEq, prost::Message)]
struct DeleteRangeRequest {
    #[prost(bytes = "vec", tag = "1")]
    key: Vec<u8>,
}

/// `etcdserverpb.DeleteRangeResponse`, its `deleted` count only.
#[derive(Clone, PartialEq, prost::Message)]
struct DeleteRangeResponse {
    #[prost(int64, tag = "2")]
    deleted: i64,
}

async fn delete(endpoint: &str, key: &str) {
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{endpoint}"))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut grpc = tonic::client::Grpc::new(channel);
    grpc.ready().await.unwrap();
    let deleted = grpc
        .unary(
            tonic::Request::new(DeleteRangeRequest {
                key: key.as_bytes().to_vec(),
            }),
            tonic::codegen::http::uri::PathAndQuery::from_static("/etcdserverpb.KV/DeleteRange"),
            tonic_prost::ProstCodec::<DeleteRangeRequest, DeleteRangeResponse>::default(),
        )
        .await
        .unwrap()
        .into_inner()
        .deleted;
    assert_eq!(deleted, 1);
}

/// The library API: a deleted key keeps the configuration, and the watch
/// comes back after etcd is killed and restarted, missing no change.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_watch_survives_a_deleted_key_and_an_etcd_restart() {
    let log = Logs::default();
    let writer = log.clone();
    tracing::subscriber::set_global_default(
        tracing_subscriber::fmt()
            .with_ansi(false)
            .with_max_level(tracing::Level::INFO)
            .with_writer(move || writer.clone())
            .finish(),
    )
    .unwrap();
    let mut etcd = start_etcd();
    let key = "/tollgate/library";
    let doc = EtcdKey::new(&[etcd.endpoint.clone()], key, None).unwrap();
    doc.save(&document(100)).await.unwrap();

    let source = EtcdConfigSource::new(&[etcd.endpoint.clone()], key).unwrap();
    let (config, revision) = source.load().await.unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let election = SingleElection::new(Some(addr.clone()));
    let server = Server::builder(config).election(&election).build();
    let serving = tokio::spawn(server.clone().serve(listener, std::future::pending()));
    let watch = source.spawn(server.clone(), revision);
    assert_eq!(capacity_at(&addr).await, Some(100.0));

    delete(&etcd.endpoint, key).await;
    until(Duration::from_secs(30), "the deletion is seen", || async {
        log.count("etcd configuration key deleted") == 1
    })
    .await;
    assert_eq!(capacity_at(&addr).await, Some(100.0));

    // etcd goes away: the watch fails and retries with backoff, and a change
    // put after the restart is applied (whether it lands before the watch
    // is back, then replayed from the revision after the last one seen, or
    // after).
    etcd.kill();
    until(
        Duration::from_secs(30),
        "the watch notices etcd is gone",
        || async { log.count("etcd configuration watch failed") >= 1 },
    )
    .await;
    etcd.restart();
    doc.save(&document(30)).await.unwrap();
    until(
        Duration::from_secs(30),
        "capacity 30 after the restart",
        || async { capacity_at(&addr).await == Some(30.0) },
    )
    .await;
    assert_eq!(
        log.count("loaded configuration path=etcd:/tollgate/library"),
        1
    );
    watch.abort();
    serving.abort();
}
