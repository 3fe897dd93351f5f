//! `tollgate quota` starts from a reference-format YAML file, answers
//! Allow over gRPC, and refuses a bad file with an error naming the field.

use tollgate_testkit::process as cli;

use tollgate_quota::pb::quota_service_client::QuotaServiceClient;
use tollgate_quota::pb::{allow_response, AllowRequest};

/// Starts `tollgate quota` on `config` with `extra` flags, on ports of its
/// own; returns it and its gRPC address. Blocks: call it from
/// `tokio::task::block_in_place`.
fn start(config: &std::path::Path, extra: &[&str]) -> (cli::Process, String) {
    let mut server = cli::start(
        cli::on_free_ports("quota")
            .arg("--config")
            .arg(config)
            .args(extra),
    );
    let addr = server.logged_addr("quota gRPC listening");
    (server, addr)
}

/// `yaml` written to `name` in a directory removed when the guard drops.
fn config_file(name: &str, yaml: &str) -> (tempfile::TempDir, std::path::PathBuf) {
    let dir = tempfile::Builder::new()
        .prefix("tollgate-quota-cli-")
        .tempdir()
        .unwrap();
    let path = dir.path().join(name);
    std::fs::write(&path, yaml).unwrap();
    (dir, path)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quota_serves_allow() {
    let (_dir, path) = config_file(
        "ok.yaml",
        "metrics_enabled: true\nnamespaces:\n  svc:\n    buckets:\n      db: {size: 2, fill_rate: 2}\n",
    );
    let (_server, addr) = tokio::task::block_in_place(|| start(&path, &[]));
    let mut client = QuotaServiceClient::connect(format!("http://{addr}"))
        .await
        .unwrap();
    let r = client
        .allow(AllowRequest {
            namespace: "svc".into(),
            bucket_name: "db".into(),
            tokens_requested: 2,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        (r.status(), r.tokens_granted),
        (allow_response::Status::Ok, 2)
    );
}

#[test]
fn a_bad_config_is_refused_naming_the_field() {
    let (_dir, path) = config_file(
        "bad.yaml",
        "namespaces:\n  svc:\n    buckets:\n      db: {max_debt_millis: -1}\n",
    );
    let out = cli::tollgate()
        .args(["quota", "--port", "0", "--debug-port", "0", "--config"])
        .arg(&path)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(
            "namespace \"svc\": bucket \"db\": max_debt_millis: must not be negative, got -1"
        ),
        "{err}"
    );
}

/// The connection limits are flags: with `--max-connections 1` a second
/// connection is closed at once while the first is served, and with a
/// short `--handshake-timeout` a silent one is closed too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connection_limits_are_flags() {
    use tokio::io::AsyncReadExt as _;

    /// Waits until the server closes `tcp`.
    async fn closed(mut tcp: tokio::net::TcpStream) -> bool {
        let mut buf = [0u8; 64];
        tokio::time::timeout(std::time::Duration::from_secs(20), async {
            while let Ok(n) = tcp.read(&mut buf).await {
                if n == 0 {
                    break;
                }
            }
        })
        .await
        .is_ok()
    }

    let (_dir, path) = config_file(
        "limits.yaml",
        "namespaces:\n  svc:\n    buckets:\n      db: {size: 2, fill_rate: 2}\n",
    );
    let (_server, addr) = tokio::task::block_in_place(|| {
        start(
            &path,
            &["--max-connections", "1", "--handshake-timeout", "1h"],
        )
    });
    let mut client = QuotaServiceClient::connect(format!("http://{addr}"))
        .await
        .unwrap();
    let allow = AllowRequest {
        namespace: "svc".into(),
        bucket_name: "db".into(),
        tokens_requested: 1,
        ..Default::default()
    };
    let r = client.allow(allow.clone()).await.unwrap().into_inner();
    assert_eq!(r.status(), allow_response::Status::Ok);
    let second = tokio::net::TcpStream::connect(&addr).await.unwrap();
    assert!(
        closed(second).await,
        "the connection over the cap is closed"
    );
    let r = client.allow(allow).await.unwrap().into_inner();
    assert_eq!(r.status(), allow_response::Status::Ok);

    let (_server, addr) =
        tokio::task::block_in_place(|| start(&path, &["--handshake-timeout", "100ms"]));
    let silent = tokio::net::TcpStream::connect(&addr).await.unwrap();
    assert!(closed(silent).await, "the silent connection is closed");
}

/// SIGTERM is handled as Ctrl-C: logged, the server drains and exits 0
/// (before, the process died with the signal: exit 143, no log line).
#[test]
fn sigterm_drains_and_exits_zero() {
    let (_dir, path) = config_file(
        "term.yaml",
        "namespaces:\n  svc:\n    buckets:\n      db: {size: 2, fill_rate: 2}\n",
    );
    let (mut server, _) = start(&path, &[]);
    server.signal(libc::SIGTERM);
    let line = server.wait_line("shutting down");
    assert!(line.contains("signal=\"SIGTERM\""), "{line}");
    server.wait_line("drained: exiting");
    let status = server.exit_status();
    assert_eq!(status.code(), Some(0), "{status:?}");
}

/// The reference-style example configuration (`test.namespace`) loads and
/// serves; start-up says where the server-wide dynamic-bucket cap binds,
/// and warns about a configuration with no buckets.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_example_configuration_serves_and_start_up_explains_itself() {
    let example = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../quota/examples")
        .join("quota-test-namespace.yaml");
    let (server, addr) = tokio::task::block_in_place(|| start(&example, &[]));
    let mut client = QuotaServiceClient::connect(format!("http://{addr}"))
        .await
        .unwrap();
    let one = AllowRequest {
        namespace: "test.namespace".into(),
        bucket_name: "one".into(),
        tokens_requested: 1,
        ..Default::default()
    };
    let mut answers = Vec::new();
    for _ in 0..3 {
        let r = client.allow(one.clone()).await.unwrap().into_inner();
        answers.push((r.status(), r.tokens_granted, r.wait_millis));
    }
    // Size 2 at 1/s: two on hand, the third borrowed, all at once.
    assert_eq!(answers, [(allow_response::Status::Ok, 1, 0); 3]);
    assert_eq!(server.logged("dynamic buckets capped"), 0);
    assert_eq!(server.logged("no buckets"), 0);

    let (_dir, path) = config_file(
        "open.yaml",
        "namespaces:\n  ips:\n    dynamic_bucket_template: {size: 1}\n",
    );
    // Logged before the server listens, which `start` waits for.
    let line_with = |server: &cli::Process, text: &str| {
        server
            .lines()
            .into_iter()
            .find(|l| l.contains(text))
            .unwrap_or_else(|| panic!("no line with {text:?}: {:#?}", server.lines()))
    };
    let (server, _) =
        tokio::task::block_in_place(|| start(&path, &["--max-dynamic-buckets", "5000"]));
    let line = line_with(&server, "dynamic buckets capped");
    assert!(
        line.contains("max_dynamic_buckets=5000")
            && line.contains("namespace \"ips\" has no max_dynamic_buckets of its own"),
        "{line}"
    );

    let (_dir, path) = config_file("empty.yaml", "namespaces:\n  svc: {}\n");
    let (server, _) = tokio::task::block_in_place(|| start(&path, &[]));
    let line = line_with(&server, "no buckets");
    assert!(line.contains("WARN"), "{line}");
}

/// `tollgate load --mode allow --bucket NAME` asks that named bucket, not
/// `b0`: every call is served by it, none refused for want of a bucket.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn load_asks_the_named_bucket() {
    let example = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../quota/examples")
        .join("quota-load.yaml");
    let (_server, addr) = tokio::task::block_in_place(|| start(&example, &[]));
    let load = |names: &[&str]| {
        let out = cli::tollgate()
            .args(["load", "--mode", "allow", "--server", &addr])
            .args(["--namespace", "one", "--duration", "200ms"])
            .args(["--concurrency", "2", "--connections", "1", "--threads", "1"])
            .args(names)
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        (
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (stdout, stderr) = tokio::task::block_in_place(|| load(&["--bucket", "b"]));
    assert!(
        stderr.contains("on bucket \"b\" in namespace \"one\""),
        "{stderr}"
    );
    assert!(stdout.contains(" OK="), "{stdout}");
    assert!(!stdout.contains("REJECTED"), "{stdout}");
    // `b0` is no bucket of namespace `one`.
    let (stdout, _) = tokio::task::block_in_place(|| load(&["--buckets", "1"]));
    assert!(stdout.contains("REJECTED_NO_BUCKET="), "{stdout}");
    assert!(!stdout.contains(" OK="), "{stdout}");
}

/// A port free on 127.0.0.1 a moment ago, for a debug port (0 would turn
/// it off).
fn free_port() -> String {
    let free = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    free.local_addr().unwrap().port().to_string()
}

/// One HTTP/1.1 request to `addr`: the status and the body.
fn http(addr: &str, method: &str, path: &str, body: &str) -> (u16, String) {
    use std::io::{Read as _, Write as _};
    let mut tcp = std::net::TcpStream::connect(addr).unwrap();
    write!(
        tcp,
        "{method} {path} HTTP/1.1\r\nhost: test\r\nconnection: close\r\n\
         content-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut answer = String::new();
    tcp.read_to_string(&mut answer).unwrap();
    let status = answer[9..12].parse().unwrap();
    let body = answer.split_once("\r\n\r\n").map_or("", |(_, b)| b);
    (status, body.to_owned())
}

/// The sum of what clients hold of resource `id`, from the status page of
/// the lease server whose debug port is `debug` (`None`: no such resource).
fn sum_has(debug: &str, id: &str) -> Option<f64> {
    let (_, page) = http(debug, "GET", "/debug/status", "");
    // Columns: resource, template, capacity, sum of has, ...
    let row = page.lines().find(|l| l.contains(&format!(">{id}</a>")))?;
    let cells: Vec<&str> = row.split("<td>").skip(1).collect();
    Some(cells[3].trim_end_matches("</td>").parse().unwrap())
}

/// In cluster mode, SIGTERM drains the server and then gives its leases
/// back: right after it exits the lease server shows nothing held, not
/// until the 60 s lease expires.
#[test]
fn sigterm_releases_the_cluster_leases() {
    let (_dir, lease_config) = config_file(
        "lease.yaml",
        "resources:\n  - {identifier_glob: '*', capacity: 10, algorithm: {kind: FAIR_SHARE, lease_length: 60, refresh_interval: 1, learning_mode_duration: 0}}\n",
    );
    // Its debug port shows the leases.
    let debug_port = free_port();
    let mut lease_server = cli::start(
        cli::tollgate()
            .args(["serve", "--host", "127.0.0.1", "--port", "0"])
            .args(["--debug-port", &debug_port, "--config"])
            .arg(&lease_config),
    );
    let debug = lease_server.logged_addr("debug HTTP listening");
    let lease_addr = lease_server.logged_addr("gRPC listening");
    let (_dir2, path) = config_file(
        "cluster.yaml",
        "namespaces:\n  one:\n    buckets:\n      b: {size: 10, fill_rate: 10}\n",
    );
    let (mut quota, _) = start(
        &path,
        &["--lease-servers", &lease_addr, "--cluster-interval", "50ms"],
    );
    let deadline = std::time::Instant::now() + cli::HANG;
    while !sum_has(&debug, "one:b").is_some_and(|has| has > 0.0) {
        assert!(std::time::Instant::now() < deadline, "no lease granted");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    quota.signal(libc::SIGTERM);
    let line = quota.wait_line("leases released");
    assert!(line.contains("released=1"), "{line}");
    quota.wait_line("drained: exiting");
    let status = quota.exit_status();
    assert_eq!(status.code(), Some(0), "{status:?}");
    assert_eq!(sum_has(&debug, "one:b").unwrap_or(0.0), 0.0);
}

/// `--admin` never writes the operator's file (comments, key order and
/// `50` stay as written): the change goes to `quota.admin.yaml` beside it,
/// is logged naming what changed, and a restart serves it.
#[test]
fn admin_changes_are_logged_and_kept_beside_the_operator_s_file() {
    let written = "# Quotas for the svc team.\nnamespaces:\n  svc:\n    buckets:\n      db: {fill_rate: 50, size: 100}  # the database\n";
    let (dir, path) = config_file("quota.yaml", written);
    let start_admin = || {
        let mut server = cli::start(
            cli::tollgate()
                .args(["quota", "--host", "127.0.0.1", "--port", "0", "--admin"])
                .args(["--debug-port", &free_port(), "--config"])
                .arg(&path),
        );
        let debug = server.logged_addr("quota debug HTTP listening");
        server.wait_line("quota gRPC listening");
        (server, debug)
    };
    let (mut server, debug) = start_admin();
    let cache = r#"{"namespace": "svc", "bucket_name": "cache", "tokens_requested": 5}"#;
    let (code, body) = http(
        &debug,
        "PUT",
        "/api/admin/namespaces/svc/buckets/cache",
        r#"{"size": 5, "fill_rate": 5}"#,
    );
    assert_eq!(code, 200, "{body}");
    let line = server.wait_line("admin change applied");
    assert!(line.contains("INFO"), "{line}");
    assert!(
        line.contains(r#"put bucket "svc":"cache": {"size":5,"fill_rate":5.0}"#),
        "{line}"
    );
    assert_eq!(std::fs::read_to_string(&path).unwrap(), written);
    let overlay = std::fs::read_to_string(dir.path().join("quota.admin.yaml")).unwrap();
    assert!(overlay.contains("op: put_bucket"), "{overlay}");
    let (_, answer) = http(&debug, "POST", "/api/allow", cache);
    assert!(answer.contains(r#""status":"OK""#), "{answer}");
    drop(server);

    // Restarted: the change is served still.
    let (_server, debug) = start_admin();
    let (_, answer) = http(&debug, "POST", "/api/allow", cache);
    assert!(answer.contains(r#""status":"OK""#), "{answer}");
    assert_eq!(std::fs::read_to_string(&path).unwrap(), written);
}

/// Two `tollgate quota` servers on one Redis (one by `--store`, one by its
/// file's `store:` section) answer as one: the tokens one grants are gone
/// from the other.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn servers_on_one_redis_share_their_buckets() {
    let redis = tollgate_testkit::redis::RedisServer::start();
    let (_dir, path) = config_file(
        "shared.yaml",
        "namespaces:\n  svc:\n    buckets:\n      db: {size: 5, fill_rate: 0.001, max_debt_millis: 1, max_tokens_per_request: 5}\n",
    );
    let url = redis.url();
    // A deadline a loaded machine does not pass, and no local fallback.
    let store = [
        "--store",
        url.as_str(),
        "--store-replicas",
        "2",
        "--store-deadline",
        "1s",
        "--store-on-error",
        "deny",
    ];
    let (_a, a) = tokio::task::block_in_place(|| start(&path, &store));
    // The other from its file's `store:` section.
    let (_dir2, path2) = config_file(
        "shared-store.yaml",
        &format!(
            "store: {{url: \"{url}\", replicas: 2, deadline_millis: 1000, on_error: deny}}\n{}",
            std::fs::read_to_string(&path).unwrap()
        ),
    );
    let (_b, b) = tokio::task::block_in_place(|| start(&path2, &[]));
    let ask = |addr: String| async move {
        let mut client = QuotaServiceClient::connect(format!("http://{addr}"))
            .await
            .unwrap();
        client
            .allow(AllowRequest {
                namespace: "svc".into(),
                bucket_name: "db".into(),
                tokens_requested: 3,
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner()
            .status()
    };
    assert_eq!(ask(a.clone()).await, allow_response::Status::Ok);
    // 2 left in Redis: refused by the other server too.
    assert_eq!(
        ask(b.clone()).await,
        allow_response::Status::RejectedTimeout
    );
    assert_eq!(ask(a).await, allow_response::Status::RejectedTimeout);
}

/// `--store` with a URL that cannot be parsed, or a Redis that cannot be
/// reached within the connect timeout, is one line and exit status 1.
#[test]
fn a_bad_or_unreachable_store_is_one_line() {
    let (_dir, path) = config_file("ok.yaml", "global_default_bucket: {}\n");
    let run = |store: &str| {
        let out = cli::tollgate()
            .args(["quota", "--port", "0", "--debug-port", "0", "--config"])
            .arg(&path)
            .args(["--store", store, "--store-connect-timeout", "300ms"])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(1), "{out:?}");
        let err = String::from_utf8_lossy(&out.stderr).into_owned();
        let errors: Vec<&str> = err.lines().filter(|l| l.contains("redis")).collect();
        assert_eq!(errors.len(), 1, "{err}");
        errors[0].to_owned()
    };
    assert_eq!(
        run("http://localhost:6379"),
        "error: invalid redis store: cannot parse \"http://localhost:6379\": the scheme is none \
         of redis://, rediss://, redis+sentinel://"
    );
    let port = tollgate_testkit::net::free_port();
    let (_dir2, bad) = config_file("bad-store.yaml", "store: {url: \"redis//x\"}\n");
    let out = cli::tollgate()
        .args(["quota", "--port", "0", "--debug-port", "0", "--config"])
        .arg(&bad)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        err.lines()
            .filter(|l| l.contains("redis"))
            .collect::<Vec<_>>(),
        [format!(
            "error: loading {}: store.url: invalid redis store: cannot parse \"redis//x\": the \
             scheme is none of redis://, rediss://, redis+sentinel://",
            bad.display()
        )]
    );
    let line = run(&format!("redis://127.0.0.1:{port}"));
    assert!(
        line.starts_with(&format!("error: redis unreachable: 127.0.0.1:{port}: ")),
        "{line}"
    );
}
