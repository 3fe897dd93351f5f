//! `/metrics` at scale: every resource is listed once per gauge family, and
//! swept resources disappear. The `#[ignore]`d test measures the scrape's
//! time and the process's memory at 100K resources against the way the
//! gauges used to be built (prometheus gauge vectors, gathered and encoded),
//! in the same run:
//!
//! ```text
//! cargo test --release --test doorman_metrics -- --ignored --nocapture
//! ```

use std::sync::Arc;
use std::time::{Duration, Instant};

use tollgate::ManualClock;
use tollgate_doorman::pb;
use tollgate_doorman::pb::capacity_client::CapacityClient;
use tollgate_doorman::{Server, ServerConfig, SingleElection};

const T0: u64 = 1_700_000_000;

const CONFIG: &str = "resources:\n  - {identifier_glob: '*', capacity: 100, algorithm: {kind: FAIR_SHARE, lease_length: 60, refresh_interval: 5, learning_mode_duration: 0}}\n";

async fn populated(n: usize) -> (Server, Arc<ManualClock>) {
    let clock = Arc::new({
        let clock = ManualClock::new();
        clock.advance(Duration::from_secs(T0));
        clock
    });
    let election = SingleElection::new(Some("me:1".into()));
    let server = Server::builder(ServerConfig::from_yaml(CONFIG).unwrap())
        .election(&election)
        .clock(clock.clone())
        .build();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(server.clone().serve(listener, std::future::pending()));
    let mut client = CapacityClient::connect(format!("http://{addr}"))
        .await
        .unwrap();
    for batch in 0..n.div_ceil(1000) {
        let resource = (batch * 1000..((batch + 1) * 1000).min(n))
            .map(|i| pb::ResourceRequest {
                resource_id: format!("service-{i:07}/method"),
                priority: 0,
                has: None,
                wants: 10.0,
            })
            .collect();
        client
            .get_capacity(pb::GetCapacityRequest {
                client_id: "c".into(),
                resource,
            })
            .await
            .unwrap();
    }
    (server, clock)
}

#[tokio::test]
async fn every_resource_is_listed_and_swept_ones_disappear() {
    let (server, clock) = populated(2_500).await;
    let text = server.metrics_text();
    for family in [
        "doorman_server_has",
        "doorman_server_wants",
        "doorman_server_subclients",
    ] {
        let rows = text
            .lines()
            .filter(|l| l.starts_with(&format!("{family}{{")))
            .count();
        assert_eq!(rows, 2_500, "{family}");
    }
    assert!(text.contains("doorman_server_has{resource=\"service-0002499/method\"} 10\n"));
    assert!(text.contains("doorman_server_wants{resource=\"service-0000000/method\"} 10\n"));
    clock.advance(Duration::from_secs(61));
    assert_eq!(server.sweep(), 2_500);
    let text = server.metrics_text();
    assert!(!text.contains("doorman_server_has"), "{text}");
    assert!(text.contains("doorman_server_requests{method=\"GetCapacity\"} 3"));
}

fn rss_mib() -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status.lines().find(|l| l.starts_with("VmRSS:")).unwrap();
    line.split_whitespace()
        .nth(1)
        .unwrap()
        .parse::<f64>()
        .unwrap()
        / 1024.0
}

/// The gauges as they used to be built: gauge vectors, gathered, encoded.
fn gauge_vectors(server: &Server) -> String {
    use prometheus::{Encoder as _, GaugeVec, Opts, Registry};
    let registry = Registry::new();
    let vec = |name: &str| {
        let g = GaugeVec::new(Opts::new(name, "help"), &["resource"]).unwrap();
        registry.register(Box::new(g.clone())).unwrap();
        g
    };
    let (has, wants, subclients) = (
        vec("doorman_server_has"),
        vec("doorman_server_wants"),
        vec("doorman_server_subclients"),
    );
    for r in server.status() {
        has.with_label_values(&[r.id.as_str()]).set(r.sum_has);
        wants.with_label_values(&[r.id.as_str()]).set(r.sum_wants);
        subclients
            .with_label_values(&[r.id.as_str()])
            .set(r.subclients as f64);
    }
    let mut buf = Vec::new();
    prometheus::TextEncoder::new()
        .encode(&registry.gather(), &mut buf)
        .unwrap();
    String::from_utf8(buf).unwrap()
}

fn median_ms(mut f: impl FnMut() -> usize) -> (f64, usize) {
    let mut times = Vec::new();
    let mut len = 0;
    for _ in 0..5 {
        let start = Instant::now();
        len = f();
        times.push(start.elapsed().as_secs_f64() * 1e3);
    }
    times.sort_by(f64::total_cmp);
    (times[2], len)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a measurement: run in release with --ignored --nocapture"]
async fn measure_metrics_at_100k_resources() {
    let n = 100_000;
    let start_rss = rss_mib();
    let (server, clock) = populated(n).await;
    let loaded = rss_mib();
    let (ours, bytes) = median_ms(|| server.metrics_text().len());
    let after_ours = rss_mib();
    let (old, old_bytes) = median_ms(|| gauge_vectors(&server).len());
    let after_old = rss_mib();
    clock.advance(Duration::from_secs(61));
    assert_eq!(server.sweep(), n);
    let swept = rss_mib();
    println!(
        "{n} resources: /metrics text {:.1} MB in {ours:.1} ms (median of 5); \
         gauge vectors {:.1} MB in {old:.1} ms; ratio {:.2}",
        bytes as f64 / 1e6,
        old_bytes as f64 / 1e6,
        old / ours
    );
    println!(
        "RSS MiB: start {start_rss:.0}, {n} resources {loaded:.0}, after 5 scrapes {after_ours:.0}, \
         after 5 gauge-vector scrapes {after_old:.0}, after the sweep {swept:.0}"
    );
}

/// The value of the sample `line` starts (name and labels), if present.
fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
        .map(|v| v.parse().unwrap())
}

/// Beyond Go's names: capacity and learning mode per resource,
/// mastership, reloads put in force and refused, and connections refused
/// over the cap.
#[tokio::test]
async fn capacity_learning_mastership_reloads_and_refused_connections_are_exported() {
    let learning = "resources:\n  - {identifier_glob: '*', capacity: 100, algorithm: {kind: FAIR_SHARE, lease_length: 60, refresh_interval: 5, learning_mode_duration: 30}}\n";
    let election = SingleElection::new(Some("me:1".into()));
    let server = Server::builder(ServerConfig::from_yaml(learning).unwrap())
        .election(&election)
        .limits(tollgate_doorman::ServerLimits {
            max_connections: 1,
            ..Default::default()
        })
        .build();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(server.clone().serve(listener, std::future::pending()));
    let mut client = CapacityClient::connect(format!("http://{addr}"))
        .await
        .unwrap();
    client
        .get_capacity(tollgate_doorman::pb::GetCapacityRequest {
            client_id: "c".into(),
            resource: vec![pb::ResourceRequest {
                resource_id: "r".into(),
                priority: 0,
                has: None,
                wants: 10.0,
            }],
        })
        .await
        .unwrap();
    let text = server.metrics_text();
    assert_eq!(
        sample(&text, "doorman_server_capacity{resource=\"r\"}"),
        Some(100.0)
    );
    assert_eq!(
        sample(&text, "doorman_server_learning_mode{resource=\"r\"}"),
        Some(1.0)
    );
    assert_eq!(sample(&text, "doorman_server_is_master"), Some(1.0));
    assert_eq!(
        sample(&text, "doorman_server_config_reloads_total"),
        Some(0.0)
    );
    assert_eq!(
        sample(&text, "doorman_server_config_reload_failures_total"),
        Some(0.0)
    );
    let refused = "doorman_server_refused_connections_total{reason=\"max_connections\"}";
    assert_eq!(sample(&text, refused), Some(0.0));

    // A second connection while the first is open is over the cap of 1.
    let second = tokio::net::TcpStream::connect(addr).await.unwrap();
    let start = Instant::now();
    while sample(&server.metrics_text(), refused) != Some(1.0) {
        assert!(start.elapsed() < Duration::from_secs(60), "never counted");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    drop(second);

    let dir = std::env::temp_dir().join(format!("tollgate-metrics-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("config.yaml");
    std::fs::write(&file, "resources: [").unwrap();
    assert!(!tollgate_doorman::reload::reload(&server, &file));
    std::fs::write(&file, CONFIG).unwrap();
    assert!(tollgate_doorman::reload::reload(&server, &file));
    std::fs::remove_dir_all(&dir).unwrap();
    let text = server.metrics_text();
    assert_eq!(
        sample(&text, "doorman_server_config_reloads_total"),
        Some(1.0)
    );
    assert_eq!(
        sample(&text, "doorman_server_config_reload_failures_total"),
        Some(1.0)
    );
    // The new template has no learning mode.
    assert_eq!(
        sample(&text, "doorman_server_learning_mode{resource=\"r\"}"),
        Some(0.0)
    );
}
