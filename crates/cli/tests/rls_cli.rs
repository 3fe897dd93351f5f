//! `tollgate rls` serves ShouldRateLimit and the gRPC health check from
//! envoyproxy/ratelimit's YAML, reads the reference's environment
//! variables, reloads on SIGHUP (refusing a bad file and answering from
//! the old one), drains on SIGTERM, and refuses a bad file at start with
//! its name and line.

use tollgate_testkit::process as cli;

use tollgate_rls::pb::health::health_client::HealthClient;
use tollgate_rls::pb::health::{health_check_response::ServingStatus, HealthCheckRequest};
use tollgate_rls::pb::rate_limit_descriptor::Entry;
use tollgate_rls::pb::rate_limit_response::Code;
use tollgate_rls::pb::rate_limit_service_client::RateLimitServiceClient;
use tollgate_rls::pb::{RateLimitDescriptor, RateLimitRequest, RateLimitResponse};

/// Starts `tollgate rls` on `config` with `extra` flags and `envs`;
/// returns it and its gRPC address. Blocks: call it from
/// `tokio::task::block_in_place`.
fn start(
    config: &std::path::Path,
    extra: &[&str],
    envs: &[(&str, &str)],
) -> (cli::Process, String) {
    let mut command = cli::on_free_ports("rls");
    command.arg("--config").arg(config).args(extra);
    for (k, v) in envs {
        command.env(k, v);
    }
    let mut server = cli::start(&mut command);
    let addr = server.logged_addr("rls gRPC listening");
    (server, addr)
}

/// `yaml` written to `name` in a directory removed when the guard drops.
fn config_file(name: &str, yaml: &str) -> (tempfile::TempDir, std::path::PathBuf) {
    let dir = tempfile::Builder::new()
        .prefix("tollgate-rls-cli-")
        .tempdir()
        .unwrap();
    let path = dir.path().join(name);
    std::fs::write(&path, yaml).unwrap();
    (dir, path)
}

const EDGE: &str = "domain: edge\ndescriptors:\n  - key: remote_address\n    rate_limit: {unit: day, requests_per_unit: 1000}\n";

/// One call for a descriptor `(remote_address, ip)`.
async fn ask(addr: &str, ip: &str) -> RateLimitResponse {
    let mut client = RateLimitServiceClient::connect(format!("http://{addr}"))
        .await
        .unwrap();
    client
        .should_rate_limit(RateLimitRequest {
            domain: "edge".into(),
            descriptors: vec![RateLimitDescriptor {
                entries: vec![Entry {
                    key: "remote_address".into(),
                    value: ip.into(),
                }],
                limit: None,
                hits_addend: None,
            }],
            hits_addend: 0,
        })
        .await
        .unwrap()
        .into_inner()
}

/// The one status's (code, limit, remaining) of a fresh key: the same
/// whatever the wall clock reads.
fn first(r: &RateLimitResponse) -> (i32, u32, u32) {
    let s = &r.statuses[0];
    (
        s.code,
        s.current_limit.as_ref().map_or(0, |l| l.requests_per_unit),
        s.limit_remaining,
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rls_serves_should_rate_limit_and_health() {
    let (_dir, path) = config_file("edge.yaml", EDGE);
    let (_server, addr) = tokio::task::block_in_place(|| start(&path, &[], &[]));
    let r = ask(&addr, "1.2.3.4").await;
    assert_eq!(r.overall_code, Code::Ok as i32);
    assert_eq!(first(&r), (Code::Ok as i32, 1000, 999));
    assert!(r.response_headers_to_add.is_empty());
    let mut health = HealthClient::connect(format!("http://{addr}"))
        .await
        .unwrap();
    let h = health
        .check(HealthCheckRequest {
            service: String::new(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(h.status, ServingStatus::Serving as i32);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_reference_environment_variables_are_read() {
    let (_dir, path) = config_file("edge.yaml", EDGE);
    let (_server, addr) = tokio::task::block_in_place(|| {
        start(
            &path,
            &[],
            &[
                ("LIMIT_RESPONSE_HEADERS_ENABLED", "true"),
                ("LIMIT_REMAINING_HEADER", "X-Left"),
            ],
        )
    });
    let r = ask(&addr, "1.2.3.4").await;
    let headers: Vec<(&str, &str)> = r
        .response_headers_to_add
        .iter()
        .map(|h| (h.key.as_str(), h.value.as_str()))
        .collect();
    assert_eq!(
        headers[..2],
        [("RateLimit-Limit", "1000"), ("X-Left", "999")]
    );
    assert_eq!(headers[2].0, "RateLimit-Reset");
}

#[test]
fn a_bad_configuration_at_start_exits_naming_file_and_line() {
    let (_dir, path) = config_file(
        "edge.yaml",
        "domain: edge\ndescriptors:\n  - key: a\n    rate_limit: {unit: minutes, requests_per_unit: 1}\n",
    );
    let mut server = cli::start(cli::on_free_ports("rls").arg("--config").arg(&path));
    let status = server.exit_status();
    assert_eq!(status.code(), Some(1), "{status:?}");
    let lines = server.lines();
    let error = lines.last().unwrap();
    assert_eq!(
        error,
        &format!(
            "error: loading {0}: {0}:3: descriptors[0]: invalid rate limit unit 'minutes'",
            path.display()
        )
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sighup_reloads_and_a_bad_reload_keeps_the_old_configuration() {
    let (_dir, path) = config_file("edge.yaml", EDGE);
    let (mut server, addr) = tokio::task::block_in_place(|| start(&path, &[], &[]));
    assert_eq!(
        first(&ask(&addr, "1.1.1.1").await),
        (Code::Ok as i32, 1000, 999)
    );
    std::fs::write(&path, EDGE.replace("1000", "7")).unwrap();
    server.signal(libc::SIGHUP);
    tokio::task::block_in_place(|| server.wait_line("loaded rate limit configuration"));
    assert_eq!(first(&ask(&addr, "2.2.2.2").await), (Code::Ok as i32, 7, 6));
    // A duplicate key: refused, logged, the 7 a day still answers.
    std::fs::write(&path, format!("{EDGE}  - key: remote_address\n")).unwrap();
    server.signal(libc::SIGHUP);
    let line =
        tokio::task::block_in_place(|| server.wait_line("rejected new rate limit configuration"));
    assert!(
        line.contains("duplicate descriptor composite key 'edge.remote_address'"),
        "{line}"
    );
    assert_eq!(first(&ask(&addr, "3.3.3.3").await), (Code::Ok as i32, 7, 6));
}

#[test]
fn sigterm_drains_and_exits_zero() {
    let (_dir, path) = config_file("edge.yaml", EDGE);
    let (mut server, _) = start(&path, &[], &[]);
    server.signal(libc::SIGTERM);
    server.wait_line("drained: exiting");
    let status = server.exit_status();
    assert_eq!(status.code(), Some(0), "{status:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_a_store_sigterm_drains_and_exits_zero_with_a_connection_open() {
    let redis = redis_server::RedisServer::start();
    let (_dir, path) = config_file("edge.yaml", EDGE);
    let url = redis.url();
    let flags = ["--store", url.as_str(), "--drain-timeout", "1s"];
    let (mut server, addr) = tokio::task::block_in_place(|| start(&path, &flags, &[]));
    // A client that keeps its connection open, as Envoy does.
    let mut client = RateLimitServiceClient::connect(format!("http://{addr}"))
        .await
        .unwrap();
    let _ = client.should_rate_limit(RateLimitRequest::default()).await;
    server.signal(libc::SIGTERM);
    tokio::task::block_in_place(|| server.wait_line("drained: exiting"));
    let status = tokio::task::block_in_place(|| server.exit_status());
    assert_eq!(status.code(), Some(0), "{status:?}");
    drop(client);
}

/// `tollgate load --mode rls` sends its descriptors with their distinct
/// values: under a limit of one a day per value, the first call of each of
/// the three values passes and every later one is over.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn load_sends_descriptors_over_distinct_values() {
    let (_dir, path) = config_file(
        "load.yaml",
        "domain: load\ndescriptors:\n  - key: remote_address\n    rate_limit: {unit: day, requests_per_unit: 1}\n",
    );
    let (_server, addr) = tokio::task::block_in_place(|| start(&path, &[], &[]));
    let out = tokio::task::block_in_place(|| {
        cli::tollgate()
            .args([
                "load",
                "--mode",
                "rls",
                "--server",
                &addr,
                "--duration",
                "300ms",
            ])
            .args(["--values", "3", "--descriptors", "1"])
            .args(["--concurrency", "1", "--connections", "1", "--threads", "1"])
            .output()
            .unwrap()
    });
    assert!(out.status.success(), "{out:?}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr
            .contains("1 descriptor(s) of key \"remote_address\" per call over 3 distinct values"),
        "{stderr}"
    );
    assert!(stdout.contains(" OK=3 "), "{stdout}");
    assert!(stdout.contains("OVER_LIMIT="), "{stdout}");
}

use tollgate_testkit::redis as redis_server;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_replicas_on_one_redis_answer_as_one() {
    let redis = redis_server::RedisServer::start();
    let yaml = "domain: edge\ndescriptors:\n  - key: remote_address\n    rate_limit: {unit: day, requests_per_unit: 3}\n";
    let (_dir, path) = config_file("edge.yaml", yaml);
    let url = redis.url();
    let flags = ["--store", url.as_str(), "--store-deadline", "1s"];
    let ((_a, a), (_b, b)) =
        tokio::task::block_in_place(|| (start(&path, &flags, &[]), start(&path, &flags, &[])));
    // One count across both: 3 a day in all, whichever replica answers.
    let mut remaining = Vec::new();
    for addr in [&a, &b, &a, &b] {
        let r = ask(addr, "9.9.9.9").await;
        remaining.push((r.overall_code, r.statuses[0].limit_remaining));
    }
    let ok = Code::Ok as i32;
    let over = Code::OverLimit as i32;
    assert_eq!(remaining, [(ok, 2), (ok, 1), (ok, 0), (over, 0)]);
}

#[test]
fn a_token_bucket_with_a_store_exits_naming_file_and_key() {
    let redis = redis_server::RedisServer::start();
    let yaml = "domain: edge\ndescriptors:\n  - key: user\n    rate_limit: {unit: second, requests_per_unit: 5, algorithm: token_bucket}\n";
    let (_dir, path) = config_file("tb.yaml", yaml);
    let mut server = cli::start(
        cli::on_free_ports("rls")
            .arg("--config")
            .arg(&path)
            .args(["--store", &redis.url()]),
    );
    let status = server.exit_status();
    assert_eq!(status.code(), Some(1), "{status:?}");
    assert_eq!(
        server.lines().last().unwrap(),
        &format!(
            "error: {}: edge.user: algorithm token_bucket cannot be counted in a Redis store: use fixed_window, gcra or sliding_window",
            path.display()
        )
    );
}
