//! gRPC tests of the capacity server on 127.0.0.1:0 with a real tonic client.
//! Time is a manual clock: no test sleeps to make leases expire.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use prost::Message as _;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::sync::watch;
use tollgate::ManualClock;
use tollgate_doorman::pb;
use tollgate_doorman::pb::capacity_client::CapacityClient;
use tollgate_doorman::{Election, Mastership, Server, ServerConfig, SingleElection};
use tonic::transport::Channel;
use tonic::Code;

/// Unix time the tests start at.
const T0: u64 = 1_700_000_000;

/// Learning mode disabled so grants come from the algorithms at once.
const CONFIG: &str = r#"
resources:
  - identifier_glob: fair
    capacity: 100
    safe_capacity: 10
    algorithm: {kind: FAIR_SHARE, lease_length: 20, refresh_interval: 5, learning_mode_duration: 0}
  - identifier_glob: "static-*"
    capacity: 50
    algorithm: {kind: STATIC, lease_length: 20, refresh_interval: 5, learning_mode_duration: 0}
  - identifier_glob: learning
    capacity: 100
    algorithm: {kind: FAIR_SHARE, lease_length: 10, refresh_interval: 5}
  - identifier_glob: "*"
    capacity: 1000
    algorithm: {kind: PROPORTIONAL_SHARE, lease_length: 60, refresh_interval: 15, learning_mode_duration: 0}
"#;

/// An election the test drives.
#[derive(Debug)]
struct TestElection {
    tx: watch::Sender<Mastership>,
}

impl TestElection {
    fn new(m: Mastership) -> Arc<Self> {
        Arc::new(TestElection {
            tx: watch::Sender::new(m),
        })
    }
    fn set(&self, m: Mastership) {
        self.tx.send_replace(m);
    }
}

impl Election for TestElection {
    fn subscribe(&self) -> watch::Receiver<Mastership> {
        self.tx.subscribe()
    }
}

struct Harness {
    server: Server,
    client: CapacityClient<Channel>,
    clock: Arc<ManualClock>,
    channel: Channel,
}

async fn start_with(yaml: &str, election: &dyn Election) -> Harness {
    let clock = Arc::new({
        let clock = ManualClock::new();
        clock.advance(Duration::from_secs(T0));
        clock
    });
    let server = Server::builder(ServerConfig::from_yaml(yaml).unwrap())
        .election(election)
        .clock(clock.clone())
        .build();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(server.clone().serve(listener, std::future::pending()));
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let client = CapacityClient::new(channel.clone());
    Harness {
        server,
        client,
        clock,
        channel,
    }
}

async fn start() -> Harness {
    start_with(CONFIG, &SingleElection::new(Some("me:1".into()))).await
}

fn lease(capacity: f64) -> pb::Lease {
    pb::Lease {
        expiry_time: 0,
        refresh_interval: 0,
        capacity,
    }
}

fn ask(resource: &str, wants: f64, has: Option<f64>) -> pb::ResourceRequest {
    pb::ResourceRequest {
        resource_id: resource.into(),
        priority: 0,
        has: has.map(lease),
        wants,
    }
}

fn req(client: &str, resources: Vec<pb::ResourceRequest>) -> pb::GetCapacityRequest {
    pb::GetCapacityRequest {
        client_id: client.into(),
        resource: resources,
    }
}

impl Harness {
    async fn get(
        &mut self,
        client: &str,
        resource: &str,
        wants: f64,
        has: Option<f64>,
    ) -> pb::ResourceResponse {
        let r = self
            .client
            .get_capacity(req(client, vec![ask(resource, wants, has)]))
            .await
            .unwrap()
            .into_inner();
        assert!(r.mastership.is_none());
        assert_eq!(r.response.len(), 1);
        r.response.into_iter().next().unwrap()
    }

    async fn refused(&mut self, request: pb::GetCapacityRequest) -> tonic::Status {
        self.client.get_capacity(request).await.unwrap_err()
    }

    fn sum_has(&self, resource: &str) -> f64 {
        self.server
            .status()
            .into_iter()
            .find(|r| r.id == resource)
            .map_or(0.0, |r| r.sum_has)
    }
}

#[tokio::test]
async fn discovery_reports_the_master() {
    let mut h = start().await;
    let d = h
        .client
        .discovery(pb::DiscoveryRequest {})
        .await
        .unwrap()
        .into_inner();
    assert!(d.is_master);
    assert_eq!(d.mastership.master_address.as_deref(), Some("me:1"));
}

#[tokio::test]
async fn get_capacity_grants_leases() {
    let mut h = start().await;
    let a = h.get("a", "fair", 30.0, None).await;
    assert_eq!(a.resource_id, "fair");
    assert_eq!(a.gets.capacity, 30.0);
    assert_eq!(a.gets.expiry_time, (T0 + 20) as i64);
    assert_eq!(a.gets.refresh_interval, 5);
    assert_eq!(a.safe_capacity, Some(10.0), "the template's safe capacity");
    let b = h.get("b", "fair", 100.0, None).await;
    assert_eq!(b.gets.capacity, 70.0, "what a leaves");
    // Dynamic safe capacity: capacity / clients, this one included.
    let s1 = h.get("a", "static-x", 80.0, None).await;
    assert_eq!(s1.gets.capacity, 50.0, "STATIC caps at capacity");
    assert_eq!(s1.safe_capacity, Some(50.0));
    let s2 = h.get("b", "static-x", 10.0, None).await;
    assert_eq!(s2.safe_capacity, Some(25.0));
    // Several resources in one request, answered by id.
    let r = h
        .client
        .get_capacity(req(
            "c",
            vec![ask("other", 5.0, None), ask("static-y", 7.0, None)],
        ))
        .await
        .unwrap()
        .into_inner();
    let mut got: Vec<_> = r
        .response
        .iter()
        .map(|r| (r.resource_id.as_str(), r.gets.capacity))
        .collect();
    got.sort_by(|x, y| x.0.cmp(y.0));
    assert_eq!(got, [("other", 5.0), ("static-y", 7.0)]);
}

#[tokio::test]
async fn leases_expire_on_the_injected_clock() {
    let mut h = start().await;
    assert_eq!(h.get("a", "fair", 100.0, None).await.gets.capacity, 100.0);
    assert_eq!(h.get("b", "fair", 100.0, None).await.gets.capacity, 0.0);
    h.clock.advance(Duration::from_secs(21));
    // a's lease has expired, so b can have it all.
    let b = h.get("b", "fair", 100.0, None).await;
    assert_eq!(b.gets.capacity, 100.0);
    assert_eq!(b.gets.expiry_time, (T0 + 21 + 20) as i64);
}

#[tokio::test]
async fn sweeper_drops_expired_leases_and_idle_resources() {
    let mut h = start().await;
    h.get("a", "fair", 10.0, None).await;
    h.get("a", "other", 10.0, None).await;
    assert_eq!(h.server.sweep(), 0);
    assert_eq!(h.server.status().len(), 2);
    h.clock.advance(Duration::from_secs(30)); // fair's 20 s lease is over
    assert_eq!(h.server.sweep(), 1);
    let left: Vec<_> = h.server.status().into_iter().map(|r| r.id).collect();
    assert_eq!(left, ["other"]);
    // A swept resource comes back on demand.
    assert_eq!(h.get("b", "fair", 10.0, None).await.gets.capacity, 10.0);
}

#[tokio::test]
async fn learning_mode_echoes_has_then_runs_the_algorithm() {
    let mut h = start().await;
    // learning_mode_duration defaults to lease_length (10 s).
    assert_eq!(
        h.get("a", "learning", 50.0, Some(20.0)).await.gets.capacity,
        20.0
    );
    assert_eq!(
        h.get("b", "learning", 50.0, Some(90.0)).await.gets.capacity,
        90.0
    );
    assert_eq!(h.get("c", "learning", 50.0, None).await.gets.capacity, 0.0);
    let s = h.server.status();
    assert!(s[0].learning);
    h.clock.advance(Duration::from_secs(11)); // learning over, leases expired
    let c = h.get("c", "learning", 120.0, None).await;
    assert_eq!(c.gets.capacity, 100.0);
    assert!(!h.server.status()[0].learning);
}

#[tokio::test]
async fn learning_mode_asks_a_client_short_of_its_wants_back_when_it_ends() {
    let mut h = start().await;
    // `learning`: refresh every 5 s, learning mode for 10 s.
    let a = h.get("a", "learning", 50.0, Some(20.0)).await;
    assert_eq!((a.gets.capacity, a.gets.refresh_interval), (20.0, 5));
    // 3 s before the end a client granted less than it wants is asked back
    // when learning mode ends, not 2 s after it; one granted all it wants
    // keeps the usual interval.
    h.clock.advance(Duration::from_secs(7));
    let a = h.get("a", "learning", 50.0, Some(20.0)).await;
    assert_eq!((a.gets.capacity, a.gets.refresh_interval), (20.0, 3));
    let b = h.get("b", "learning", 10.0, Some(10.0)).await;
    assert_eq!((b.gets.capacity, b.gets.refresh_interval), (10.0, 5));
    // Part of a second before the end: back in whole seconds, at least one.
    h.clock.advance(Duration::from_millis(2_500));
    let a = h.get("a", "learning", 50.0, Some(20.0)).await;
    assert_eq!((a.gets.capacity, a.gets.refresh_interval), (20.0, 1));
    // Then the algorithm decides, with the usual interval.
    h.clock.advance(Duration::from_secs(1));
    assert!(!h.server.status()[0].learning);
    let a = h.get("a", "learning", 50.0, Some(20.0)).await;
    assert_eq!((a.gets.capacity, a.gets.refresh_interval), (50.0, 5));
}

#[tokio::test]
async fn non_master_answers_only_with_mastership() {
    let election = TestElection::new(Mastership::follower(Some("master:15000".into())));
    let mut h = start_with(CONFIG, &*election).await;
    let r = h
        .client
        .get_capacity(req("a", vec![ask("fair", 10.0, None)]))
        .await
        .unwrap()
        .into_inner();
    assert!(r.response.is_empty());
    assert_eq!(
        r.mastership.unwrap().master_address.as_deref(),
        Some("master:15000")
    );
    let r = h
        .client
        .release_capacity(pb::ReleaseCapacityRequest {
            client_id: "a".into(),
            resource_id: vec!["fair".into()],
        })
        .await
        .unwrap()
        .into_inner();
    assert!(r.mastership.is_some());
    let r = h
        .client
        .get_server_capacity(pb::GetServerCapacityRequest {
            server_id: "s".into(),
            resource: vec![],
        })
        .await
        .unwrap()
        .into_inner();
    assert!(r.response.is_empty());
    assert!(r.mastership.is_some());
    let d = h
        .client
        .discovery(pb::DiscoveryRequest {})
        .await
        .unwrap()
        .into_inner();
    assert!(!d.is_master);
    assert_eq!(d.mastership.master_address.as_deref(), Some("master:15000"));
    assert!(h.server.status().is_empty(), "a follower stores nothing");

    // Master unknown: a bare mastership, still present on the wire.
    election.set(Mastership::follower(None));
    let r = h
        .client
        .get_capacity(req("a", vec![ask("fair", 10.0, None)]))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        r.mastership,
        Some(pb::Mastership {
            master_address: None
        })
    );
    assert_eq!(r.encode_to_vec(), [0x12, 0x00], "field 2, empty message");
}

#[tokio::test]
async fn winning_mastership_starts_learning_mode_afresh() {
    let election = TestElection::new(Mastership::master(Some("me:1".into())));
    let mut h = start_with(CONFIG, &*election).await;
    h.clock.advance(Duration::from_secs(100)); // long out of learning mode
    assert_eq!(
        h.get("a", "learning", 50.0, Some(5.0)).await.gets.capacity,
        50.0
    );
    election.set(Mastership::follower(None));
    h.clock.advance(Duration::from_secs(1));
    election.set(Mastership::master(Some("me:1".into())));
    // The old leases are forgotten and learning mode echoes `has` again.
    assert_eq!(
        h.get("a", "learning", 50.0, Some(5.0)).await.gets.capacity,
        5.0
    );
    assert_eq!(h.server.status()[0].clients, 1);
}

#[tokio::test]
async fn release_brings_sum_has_to_zero() {
    let mut h = start().await;
    h.get("a", "fair", 30.0, None).await;
    h.get("b", "fair", 30.0, None).await;
    assert_eq!(h.sum_has("fair"), 60.0);
    for c in ["a", "b"] {
        let r = h
            .client
            .release_capacity(pb::ReleaseCapacityRequest {
                client_id: c.into(),
                resource_id: vec!["fair".into(), "never-seen".into()],
            })
            .await
            .unwrap()
            .into_inner();
        assert!(r.mastership.is_none());
    }
    assert_eq!(h.sum_has("fair"), 0.0);
}

#[tokio::test]
async fn empty_request_gets_empty_response() {
    let mut h = start().await;
    let r = h
        .client
        .get_capacity(req("a", vec![]))
        .await
        .unwrap()
        .into_inner();
    assert!(r.response.is_empty());
    assert!(r.mastership.is_none());
}

#[tokio::test]
async fn bad_requests_are_invalid_arguments() {
    let mut h = start().await;
    let long = "x".repeat(1025);
    let many: Vec<_> = (0..1001)
        .map(|i| ask(&format!("r{i}"), 1.0, None))
        .collect();
    let cases = [
        (req("", vec![ask("fair", 1.0, None)]), "client id is empty"),
        (req("a", vec![ask("", 1.0, None)]), "resource id is empty"),
        (req("a", vec![ask("fair", -1.0, None)]), "wants -1"),
        (req("a", vec![ask("fair", f64::NAN, None)]), "wants NaN"),
        (
            req("a", vec![ask("fair", f64::INFINITY, None)]),
            "wants inf",
        ),
        (
            req("a", vec![ask("fair", 1.0, Some(f64::NAN))]),
            "has.capacity NaN",
        ),
        (
            req("a", vec![ask("fair", 1.0, Some(-2.0))]),
            "has.capacity -2",
        ),
        (
            req(&long, vec![ask("fair", 1.0, None)]),
            "client_id is 1025 bytes",
        ),
        (
            req("a", vec![ask(&long, 1.0, None)]),
            "resource_id is 1025 bytes",
        ),
        (req("a", many), "1001 resources"),
        (
            req("a", vec![ask("fair", 1.0, None), ask("fair", 2.0, None)]),
            "appears more than once",
        ),
    ];
    for (request, message) in cases {
        let status = h.refused(request).await;
        assert_eq!(status.code(), Code::InvalidArgument, "{status:?}");
        assert!(
            status.message().contains(message),
            "{message:?} in {status:?}"
        );
    }
    // Nothing of a refused request is applied, not even its valid parts.
    let status = h
        .refused(req(
            "a",
            vec![ask("other", 1.0, None), ask("fair", -1.0, None)],
        ))
        .await;
    assert_eq!(status.code(), Code::InvalidArgument);
    assert!(h.server.status().is_empty());

    let status = h
        .client
        .release_capacity(pb::ReleaseCapacityRequest {
            client_id: String::new(),
            resource_id: vec!["fair".into()],
        })
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::InvalidArgument);
}

#[tokio::test]
async fn the_catch_all_matches_ids_with_slashes_and_other_globs_keep_their_rules() {
    let mut h = start().await;
    // The catch-all `*` (PROPORTIONAL_SHARE, capacity 1000) takes `svc/method`.
    assert_eq!(
        h.get("a", "svc/method", 700.0, None).await.gets.capacity,
        700.0
    );
    // `static-*` (STATIC, capacity 50) stops at `/`: the catch-all decides.
    assert_eq!(h.get("a", "static-x", 70.0, None).await.gets.capacity, 50.0);
    assert_eq!(
        h.get("a", "static-x/y", 70.0, None).await.gets.capacity,
        70.0
    );
    let status = h.server.status();
    let glob = |id: &str| {
        status
            .iter()
            .find(|r| r.id == id)
            .map(|r| r.glob.clone())
            .unwrap()
    };
    assert_eq!(glob("svc/method"), "*");
    assert_eq!(glob("static-x/y"), "*");
    assert_eq!(glob("static-x"), "static-*");
    // Unicode ids too.
    assert_eq!(h.get("a", "ресурс-🦀", 3.0, None).await.gets.capacity, 3.0);
}

#[tokio::test]
async fn release_ignores_empty_and_unknown_ids_and_releases_the_rest() {
    let mut h = start().await;
    assert_eq!(h.get("a", "fair", 40.0, None).await.gets.capacity, 40.0);
    // What Go's client library sends on Close(): empty ids first.
    h.client
        .release_capacity(pb::ReleaseCapacityRequest {
            client_id: "a".into(),
            resource_id: vec![String::new(), String::new(), "nope".into(), "fair".into()],
        })
        .await
        .unwrap();
    assert_eq!(h.sum_has("fair"), 0.0);
}

fn band(num_clients: i64, wants: f64) -> pb::PriorityBandAggregate {
    pb::PriorityBandAggregate {
        priority: 0,
        num_clients,
        wants,
    }
}

#[tokio::test]
async fn server_capacity_aggregates_bands() {
    let mut h = start().await;
    let r = h
        .client
        .get_server_capacity(pb::GetServerCapacityRequest {
            server_id: "region-1".into(),
            resource: vec![pb::ServerCapacityResourceRequest {
                resource_id: "fair".into(),
                has: None,
                wants: vec![band(3, 30.0), band(2, 20.0)],
            }],
        })
        .await
        .unwrap()
        .into_inner();
    assert!(r.mastership.is_none());
    let g = &r.response[0];
    assert_eq!(g.resource_id, "fair");
    assert_eq!(g.gets.capacity, 50.0);
    assert_eq!(g.gets.expiry_time, (T0 + 20) as i64);
    assert_eq!(g.safe_capacity, Some(10.0));
    let algo = g.algorithm.as_ref().unwrap();
    assert_eq!(algo.kind, pb::algorithm::Kind::FairShare as i32);
    assert_eq!((algo.lease_length, algo.refresh_interval), (20, 5));
    let s = &h.server.status()[0];
    assert_eq!((s.clients, s.subclients, s.sum_wants), (1, 5, 50.0));

    let status = h
        .client
        .get_server_capacity(pb::GetServerCapacityRequest {
            server_id: "region-1".into(),
            resource: vec![pb::ServerCapacityResourceRequest {
                resource_id: "fair".into(),
                has: None,
                wants: vec![band(0, 30.0)],
            }],
        })
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::InvalidArgument);
    assert!(status.message().contains("num_clients 0"), "{status:?}");
}

#[tokio::test]
async fn reload_keeps_leases_and_rejects_a_bad_config() {
    let dir = std::env::temp_dir().join(format!("tollgate-reload-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("config.yaml");
    let mut h = start().await;
    assert_eq!(h.get("a", "fair", 80.0, None).await.gets.capacity, 80.0);

    let bigger = CONFIG.replace(
        "capacity: 100\n    safe_capacity: 10",
        "capacity: 200\n    safe_capacity: 10",
    );
    std::fs::write(&path, &bigger).unwrap();
    assert!(tollgate_doorman::reload::reload(&h.server, &path));
    assert_eq!(h.sum_has("fair"), 80.0, "the lease survived the reload");
    assert_eq!(h.get("b", "fair", 200.0, None).await.gets.capacity, 120.0);
    assert_eq!(h.server.status()[0].capacity, 200.0);

    // No catch-all: rejected, and the previous configuration keeps serving.
    std::fs::write(&path, "resources:\n  - {identifier_glob: fair, capacity: 1, algorithm: {kind: STATIC, lease_length: 5, refresh_interval: 5}}\n").unwrap();
    assert!(!tollgate_doorman::reload::reload(&h.server, &path));
    std::fs::write(&path, "not: [valid").unwrap();
    assert!(!tollgate_doorman::reload::reload(&h.server, &path));
    assert_eq!(h.server.status()[0].capacity, 200.0);
    assert_eq!(h.get("c", "other", 5.0, None).await.gets.capacity, 5.0);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn required_fields_are_encoded_even_when_zero() {
    let r = pb::GetCapacityResponse {
        response: vec![pb::ResourceResponse {
            resource_id: "r".into(),
            gets: lease(0.0),
            safe_capacity: None,
        }],
        mastership: None,
    };
    #[rustfmt::skip]
    let want = [
        0x0a, 18,                   // response = 1, 18 bytes
          0x0a, 1, b'r',            //   resource_id = 1
          0x12, 13,                 //   gets = 2, 13 bytes
            0x08, 0,                //     expiry_time = 1: 0
            0x10, 0,                //     refresh_interval = 2: 0
            0x19, 0, 0, 0, 0, 0, 0, 0, 0, // capacity = 3 (fixed64): 0.0
    ];
    assert_eq!(r.encode_to_vec(), want);
    let d = pb::DiscoveryResponse {
        mastership: pb::Mastership::default(),
        is_master: false,
    };
    assert_eq!(d.encode_to_vec(), [0x0a, 0, 0x10, 0]);
    let rel = pb::ReleaseCapacityResponse {
        mastership: Some(pb::Mastership {
            master_address: Some("m:1".into()),
        }),
    };
    assert_eq!(rel.encode_to_vec(), [0x0a, 5, 0x0a, 3, b'm', b':', b'1']);
    let safe = pb::ResourceResponse {
        resource_id: String::new(),
        gets: lease(0.0),
        safe_capacity: Some(2.0),
    };
    let bytes = safe.encode_to_vec();
    assert_eq!(&bytes[..4], [0x0a, 0, 0x12, 13]);
    assert_eq!(bytes[17], 0x19, "safe_capacity is field 3 (fixed64)");
}

async fn http_get(addr: SocketAddr, path: &str) -> String {
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    s.write_all(format!("GET {path} HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n").as_bytes())
        .await
        .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).await.unwrap();
    out
}

#[tokio::test]
async fn debug_port_serves_status_resources_metrics_and_health() {
    let mut h = start().await;
    h.get("a", "fair", 30.0, None).await;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(tollgate_doorman::debug::serve(
        h.server.clone(),
        listener,
        std::future::pending(),
    ));
    assert!(http_get(addr, "/healthz").await.ends_with("ok\n"));
    let status = http_get(addr, "/debug/status").await;
    assert!(status.contains("Is master: <b>true</b>"), "{status}");
    assert!(status.contains("resource=fair"), "{status}");
    let leases = http_get(addr, "/debug/resources?resource=fair").await;
    assert!(leases.contains("<td>a</td><td>30</td>"), "{leases}");
    assert!(http_get(addr, "/debug/resources?resource=nope")
        .await
        .contains("404"));
    let metrics = http_get(addr, "/metrics").await;
    for line in [
        "doorman_server_requests{method=\"GetCapacity\"} 1",
        "doorman_server_has{resource=\"fair\"} 30",
        "doorman_server_wants{resource=\"fair\"} 30",
        "doorman_server_subclients{resource=\"fair\"} 1",
        "doorman_server_request_durations_count{method=\"GetCapacity\"} 1",
    ] {
        assert!(metrics.contains(line), "{line} in {metrics}");
    }
}

#[tokio::test]
async fn file_change_triggers_a_reload() {
    let dir = std::env::temp_dir().join(format!("tollgate-watch-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("config.yaml");
    std::fs::write(&path, CONFIG).unwrap();
    let h = start().await;
    tollgate_doorman::reload::spawn(h.server.clone(), path.clone(), Duration::from_millis(20));
    let config_capacity = |h: &Harness| {
        let cfg = h.server.status();
        cfg.first().map(|r| r.capacity)
    };
    let mut h = h;
    h.get("a", "fair", 1.0, None).await;
    assert_eq!(config_capacity(&h), Some(100.0));

    std::fs::write(
        &path,
        CONFIG.replace(
            "capacity: 100\n    safe_capacity: 10",
            "capacity: 300\n    safe_capacity: 10",
        ),
    )
    .unwrap();
    // Set a distinct mtime: coarse file system clocks must not hide the change.
    let later = std::time::SystemTime::now() + Duration::from_secs(10);
    std::fs::File::options()
        .write(true)
        .open(&path)
        .unwrap()
        .set_modified(later)
        .unwrap();
    // Waits for the watcher, however slow the machine (no timing asserted).
    for _ in 0..1000 {
        tokio::time::sleep(Duration::from_millis(20)).await;
        h.server.sweep(); // rebinds resources to the new configuration
        if config_capacity(&h) == Some(300.0) {
            break;
        }
    }
    assert_eq!(config_capacity(&h), Some(300.0));
    std::fs::remove_dir_all(&dir).unwrap();
}

/// One GetServerCapacity for `resource` from `server`: one band of
/// `num_clients` wanting `wants`, holding `has`; returns the capacity got.
async fn ask_as_server(
    h: &mut Harness,
    server: &str,
    resource: &str,
    num_clients: i64,
    wants: f64,
    has: Option<f64>,
) -> f64 {
    ask_as_server_for_lease(h, server, resource, num_clients, wants, has)
        .await
        .capacity
}

/// As [`ask_as_server`], returning the whole lease.
async fn ask_as_server_for_lease(
    h: &mut Harness,
    server: &str,
    resource: &str,
    num_clients: i64,
    wants: f64,
    has: Option<f64>,
) -> pb::Lease {
    let r = h
        .client
        .get_server_capacity(pb::GetServerCapacityRequest {
            server_id: server.into(),
            resource: vec![pb::ServerCapacityResourceRequest {
                resource_id: resource.into(),
                has: has.map(lease),
                wants: vec![band(num_clients, wants)],
            }],
        })
        .await
        .unwrap()
        .into_inner();
    r.response[0].gets
}

#[tokio::test]
async fn a_server_that_forgot_its_lease_gets_it_back_while_it_relearns() {
    let yaml = r#"
resources:
  - identifier_glob: "*"
    capacity: 100
    algorithm: {kind: FAIR_SHARE, lease_length: 60, refresh_interval: 8, learning_mode_duration: 20}
"#;
    let mut h = start_with(yaml, &SingleElection::new(Some("me:1".into()))).await;
    h.clock.advance(Duration::from_secs(21));
    assert_eq!(ask_as_server(&mut h, "a", "r", 4, 80.0, None).await, 80.0);
    assert_eq!(ask_as_server(&mut h, "b", "r", 4, 80.0, None).await, 20.0);

    // A new master of "a" reports only the 10 of the one client that has
    // come back so far, and asks for its wants. Its other clients may still
    // hold the rest of the 80, so it gets them again, and "b" cannot take
    // them.
    h.clock.advance(Duration::from_secs(1));
    assert_eq!(
        ask_as_server(&mut h, "a", "r", 1, 10.0, Some(10.0)).await,
        80.0
    );
    assert_eq!(
        ask_as_server(&mut h, "b", "r", 4, 80.0, Some(20.0)).await,
        20.0
    );
    // For the learning mode's 20 s it is answered with what it holds, and
    // asked back when that ends if it wants more ...
    h.clock.advance(Duration::from_secs(15));
    let a = ask_as_server_for_lease(&mut h, "a", "r", 2, 90.0, Some(80.0)).await;
    assert_eq!((a.capacity, a.refresh_interval), (80.0, 5));
    h.clock.advance(Duration::from_secs(4));
    let a = ask_as_server_for_lease(&mut h, "a", "r", 2, 20.0, Some(80.0)).await;
    assert_eq!((a.capacity, a.refresh_interval), (80.0, 8));
    // ... then by the algorithm again.
    h.clock.advance(Duration::from_secs(1));
    assert_eq!(
        ask_as_server(&mut h, "a", "r", 4, 30.0, Some(80.0)).await,
        30.0
    );
    assert_eq!(
        ask_as_server(&mut h, "b", "r", 4, 80.0, Some(20.0)).await,
        70.0
    );

    // A server that reports no `has` at all (as Go's intermediates) is
    // decided by the algorithm.
    assert_eq!(
        ask_as_server(&mut h, "go", "other", 4, 80.0, None).await,
        80.0
    );
    assert_eq!(
        ask_as_server(&mut h, "go", "other", 4, 20.0, None).await,
        20.0
    );

    // A plain client that forgot its lease is not a subtree: it gets what
    // the algorithm gives.
    h.clock.advance(Duration::from_secs(1));
    assert_eq!(h.get("c", "r", 0.0, None).await.gets.capacity, 0.0);
    assert_eq!(
        ask_as_server(&mut h, "a", "r", 4, 30.0, Some(30.0)).await,
        30.0
    );
    h.get("c", "other", 50.0, None).await;
    assert_eq!(h.get("c", "other", 50.0, None).await.gets.capacity, 50.0);
    assert_eq!(h.get("c", "other", 5.0, None).await.gets.capacity, 5.0);
}

/// 100 units shared fairly, 60 s leases, 60 s of learning mode: the
/// timings of a tree's levels.
const RELEARN: &str = r#"
resources:
  - identifier_glob: "*"
    capacity: 100
    algorithm: {kind: FAIR_SHARE, lease_length: 60, refresh_interval: 8, learning_mode_duration: 60}
"#;

/// `a` and `b`, each a server of 4 clients wanting 60, share 100 after
/// this server's learning mode: 50 each.
async fn two_servers_sharing() -> Harness {
    let mut h = start_with(RELEARN, &SingleElection::new(Some("me:1".into()))).await;
    h.clock.advance(Duration::from_secs(61));
    assert_eq!(ask_as_server(&mut h, "a", "r", 4, 60.0, None).await, 60.0);
    assert_eq!(ask_as_server(&mut h, "b", "r", 4, 60.0, None).await, 40.0);
    h.clock.advance(Duration::from_secs(1));
    assert_eq!(
        ask_as_server(&mut h, "a", "r", 4, 60.0, Some(60.0)).await,
        50.0
    );
    h.clock.advance(Duration::from_secs(1));
    assert_eq!(
        ask_as_server(&mut h, "b", "r", 4, 60.0, Some(40.0)).await,
        50.0
    );
    h
}

/// What this server's leases want in all: what it reports to a parent.
fn sum_wants(h: &Harness) -> f64 {
    h.server.status()[0].sum_wants
}

#[tokio::test]
async fn a_relearning_server_wants_at_least_what_it_wanted_before_it_forgot() {
    let mut h = two_servers_sharing().await;
    assert_eq!(sum_wants(&h), 120.0);
    // A new master of "a" asks with the one client back so far, wanting
    // 6. Its other clients are still out there, and want what they did:
    // what this server reports upwards stays 120, not 66 (a parent would
    // cut this server to what a part of its subtree asked).
    h.clock.advance(Duration::from_secs(7));
    assert_eq!(
        ask_as_server(&mut h, "a", "r", 1, 6.0, Some(5.0)).await,
        50.0
    );
    assert_eq!(sum_wants(&h), 120.0);
    assert_eq!(h.server.status()[0].subclients, 8);
}

#[tokio::test]
async fn a_reload_that_shortens_the_lease_length_cuts_existing_leases() {
    let mut h = start().await;
    // `fair`: 100 units, 20 s leases.
    assert_eq!(h.get("a", "fair", 40.0, None).await.gets.capacity, 40.0);
    let shorter = CONFIG.replace(
        "algorithm: {kind: FAIR_SHARE, lease_length: 20, refresh_interval: 5, learning_mode_duration: 0}",
        "algorithm: {kind: FAIR_SHARE, lease_length: 5, refresh_interval: 5, learning_mode_duration: 0}",
    );
    h.server.reload(ServerConfig::from_yaml(&shorter).unwrap());
    let leases = h.server.leases("fair").unwrap();
    assert_eq!(leases[0].1.expiry, Duration::from_secs(T0 + 5));
    // Past the new length, a's 40 no longer count: b gets everything.
    h.clock.advance(Duration::from_secs(6));
    assert_eq!(h.get("b", "fair", 100.0, None).await.gets.capacity, 100.0);
    assert_eq!(h.sum_has("fair"), 100.0);
}

#[tokio::test]
async fn learning_mode_grants_at_most_the_capacity() {
    let mut h = start().await;
    // `learning`: capacity 100, in learning mode for 10 s.
    let liar = h.get("liar", "learning", 50.0, Some(1e308)).await;
    assert_eq!(liar.gets.capacity, 100.0);
    let other = h.get("other", "learning", 50.0, Some(1e308)).await;
    assert_eq!(other.gets.capacity, 100.0);
    // An honest client's echo is exact, whatever the liars said.
    let honest = h.get("honest", "learning", 50.0, Some(20.0)).await;
    assert_eq!(honest.gets.capacity, 20.0);
    assert_eq!(h.sum_has("learning"), 220.0);
    assert!(h.sum_has("learning").is_finite());
}

/// `ResourceRequest` with its required fields optional, to leave them out.
#[derive(Clone, PartialEq, prost::Message)]
struct LooseResource {
    #[prost(string, optional, tag = "1")]
    resource_id: Option<String>,
    #[prost(int64, optional, tag = "2")]
    priority: Option<i64>,
    #[prost(double, optional, tag = "4")]
    wants: Option<f64>,
}

#[derive(Clone, PartialEq, prost::Message)]
struct LooseRequest {
    #[prost(string, optional, tag = "1")]
    client_id: Option<String>,
    #[prost(message, repeated, tag = "2")]
    resource: Vec<LooseResource>,
}

#[tokio::test]
async fn missing_required_wants_or_priority_is_invalid_argument() {
    let h = start().await;
    let grpc = tonic::client::Grpc::new(h.channel.clone());
    let call = |priority: Option<i64>, wants: Option<f64>| {
        let request = LooseRequest {
            client_id: Some("a".into()),
            resource: vec![LooseResource {
                resource_id: Some("fair".into()),
                priority,
                wants,
            }],
        };
        let mut grpc = grpc.clone();
        async move {
            grpc.ready().await.unwrap();
            grpc.unary::<_, pb::GetCapacityResponse, _>(
                tonic::Request::new(request),
                "/doorman.Capacity/GetCapacity".parse().unwrap(),
                tonic_prost::ProstCodec::default(),
            )
            .await
        }
    };
    let status = call(Some(0), None).await.unwrap_err();
    assert_eq!(status.code(), Code::InvalidArgument, "{status:?}");
    assert!(
        status.message().contains("required field wants is missing"),
        "{status:?}"
    );
    let status = call(None, Some(5.0)).await.unwrap_err();
    assert_eq!(status.code(), Code::InvalidArgument, "{status:?}");
    assert!(status.message().contains("priority"), "{status:?}");
    // Nothing was granted; zero values that are present are fine.
    assert!(h.server.status().is_empty());
    let ok = call(Some(0), Some(0.0)).await.unwrap().into_inner();
    assert_eq!(ok.response[0].gets.capacity, 0.0);
}

/// A request over the message limit is refused with RESOURCE_EXHAUSTED, as
/// gRPC asks, from its header; the connection still answers.
#[tokio::test]
async fn a_request_over_the_message_limit_is_resource_exhausted() {
    let mut h = start().await;
    let limit = tollgate_doorman::ServerLimits::default().max_message_bytes;
    let huge = pb::GetCapacityRequest {
        client_id: "x".repeat(limit),
        resource: vec![ask("fair", 1.0, None)],
    };
    let status = h.client.get_capacity(huge).await.unwrap_err();
    assert_eq!(status.code(), Code::ResourceExhausted, "{status:?}");
    assert!(
        status
            .message()
            .contains(&format!("larger than the limit of {limit}")),
        "{status:?}"
    );
    let ok = h
        .client
        .get_capacity(pb::GetCapacityRequest {
            client_id: "a".into(),
            resource: vec![ask("fair", 1.0, None)],
        })
        .await;
    assert!(ok.is_ok(), "{ok:?}");
}

/// A method the server does not have is UNIMPLEMENTED.
#[tokio::test]
async fn an_unknown_method_is_unimplemented() {
    let h = start().await;
    let mut grpc = tonic::client::Grpc::new(h.channel.clone());
    grpc.ready().await.unwrap();
    let status = grpc
        .unary::<_, pb::DiscoveryResponse, _>(
            tonic::Request::new(pb::DiscoveryRequest {}),
            "/doorman.Capacity/Allocate".parse().unwrap(),
            tonic_prost::ProstCodec::default(),
        )
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::Unimplemented, "{status:?}");
}

/// Mounted in a tonic router of one's own, beside another service, the
/// server answers as it does on its own transport.
#[tokio::test]
async fn the_server_mounted_in_a_tonic_router_answers() {
    let server = Server::builder(ServerConfig::from_yaml(CONFIG).unwrap())
        .election(&SingleElection::new(Some("me:1".into())))
        .build();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let router = tonic::transport::Server::builder().add_service(server.clone().into_tonic());
    let incoming = tonic::transport::server::TcpIncoming::from(listener);
    tokio::spawn(router.serve_with_incoming(incoming));
    let mut client = CapacityClient::connect(format!("http://{addr}"))
        .await
        .unwrap();
    let r = client
        .get_capacity(pb::GetCapacityRequest {
            client_id: "a".into(),
            resource: vec![ask("fair", 4.0, None)],
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(r.response[0].gets.capacity, 4.0);
    assert_eq!(server.status()[0].id, "fair");
    let bad = client
        .get_capacity(pb::GetCapacityRequest {
            client_id: String::new(),
            resource: vec![ask("fair", 4.0, None)],
        })
        .await
        .unwrap_err();
    assert_eq!(bad.code(), Code::InvalidArgument);
    // Both calls were counted, the second as an error.
    let metrics = server.metrics().encode();
    assert!(
        metrics.contains("doorman_server_requests{method=\"GetCapacity\"} 2"),
        "{metrics}"
    );
    assert!(
        metrics.contains("doorman_server_request_errors{method=\"GetCapacity\"} 1"),
        "{metrics}"
    );
}
