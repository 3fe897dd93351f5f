//! `tollgate serve` starts with one command (no config) and answers gRPC.

use tollgate_testkit::ask;
use tollgate_testkit::process as cli;

use tollgate_doorman::pb;
use tollgate_doorman::pb::capacity_client::CapacityClient;
use tonic::transport::Channel;

/// A client of the server at `addr`, and its answer to Discovery.
async fn discover(addr: &str) -> (CapacityClient<Channel>, pb::DiscoveryResponse) {
    let mut client = CapacityClient::connect(format!("http://{addr}"))
        .await
        .unwrap();
    let d = client
        .discovery(pb::DiscoveryRequest {})
        .await
        .unwrap()
        .into_inner();
    (client, d)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_without_config_grants_capacity() {
    let mut server = cli::start(&mut cli::on_free_ports("serve"));
    let addr = tokio::task::block_in_place(|| server.logged_addr("gRPC listening"));

    let (mut client, d) = discover(&addr).await;
    assert!(d.is_master);
    assert_eq!(d.mastership.master_address.as_deref(), Some(addr.as_str()));
    let r = client
        .get_capacity(ask::get_capacity("c", "anything", 0, 10.0, None))
        .await
        .unwrap()
        .into_inner();
    assert!(r.mastership.is_none());
    let g = &r.response[0];
    // The built-in template: FAIR_SHARE, 60 s leases refreshed every 15 s.
    // Learning mode (one lease length) grants what the client holds: nothing.
    assert_eq!(g.gets.refresh_interval, 15);
    assert_eq!(g.gets.capacity, 0.0);
}

/// Go Doorman's server flags, one dash as Go writes them: `-port`,
/// `-debug_port`, `-hostname` (advertised with the port) and glog's
/// `-logtostderr` are read as tollgate's flags.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn go_doormans_server_flags_are_read() {
    let mut server = cli::start(cli::tollgate().args([
        "serve",
        "--host",
        "127.0.0.1",
        "-port",
        "0",
        "-debug_port=0",
        "-hostname",
        "doorman-1.test",
        "-logtostderr",
    ]));
    let addr = tokio::task::block_in_place(|| server.logged_addr("gRPC listening"));
    let port = addr.rsplit(':').next().unwrap();
    let (_, d) = discover(&addr).await;
    assert_eq!(
        d.mastership.master_address.as_deref(),
        Some(format!("doorman-1.test:{port}").as_str())
    );
}

/// A Go flag tollgate has no equivalent for is refused in one line that
/// says what to do, as clap refuses a usage error.
#[test]
fn a_go_flag_without_an_equivalent_says_what_to_do() {
    let o = cli::tollgate()
        .args(["serve", "-port", "0", "-server_role", "intermediate"])
        .output()
        .unwrap();
    let err = String::from_utf8(o.stderr).unwrap();
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert_eq!(
        err,
        "error: -server_role is Go Doorman's flag, which tollgate serve does not have: \
         a server with --parent is an intermediate, one without is the root: drop it\n"
    );
}

/// Learning mode is logged as starting only when some template has one,
/// and with how long it lasts.
#[test]
fn learning_mode_is_logged_only_when_there_is_one() {
    let mut server = cli::start(&mut cli::on_free_ports("serve"));
    let won = server.wait_line("won mastership");
    assert!(
        won.ends_with("won mastership: learning mode starts for_up_to=60s"),
        "{won}"
    );
    drop(server);

    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("doorman.yaml");
    std::fs::write(
        &config,
        "resources:\n  - {identifier_glob: '*', capacity: 100, algorithm: {kind: FAIR_SHARE, lease_length: 10, refresh_interval: 1, learning_mode_duration: 0}}\n",
    )
    .unwrap();
    let mut server = cli::start(cli::on_free_ports("serve").arg("--config").arg(&config));
    let won = server.wait_line("won mastership");
    assert!(
        won.ends_with("won mastership; learning mode is off (learning_mode_duration: 0)"),
        "{won}"
    );
    server.wait_line("gRPC listening");
    assert_eq!(server.logged("learning mode starts"), 0);
}

/// A TLS file that cannot be read ends the command before anything is
/// said to listen.
#[test]
fn a_missing_tls_file_is_named_before_anything_listens() {
    let o = cli::on_free_ports("serve")
        .args(["--tls-cert", "/nonexistent/server.pem"])
        .args(["--tls-key", "/nonexistent/server.key"])
        .env("RUST_LOG", "info")
        .output()
        .unwrap();
    let err = String::from_utf8(o.stderr).unwrap();
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(!err.contains("listening"), "{err}");
    assert_eq!(
        err.lines().last().unwrap(),
        "error: cannot read TLS file /nonexistent/server.pem: No such file or directory (os error 2)"
    );
}

/// An elected server advertising a wildcard address (listening on every
/// interface, no --advertise) is warned about at start-up.
#[test]
fn an_elected_server_advertising_a_wildcard_is_warned() {
    let nowhere = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .to_string();
    let mut server = cli::start(cli::tollgate().args([
        "serve",
        "--host",
        "0.0.0.0",
        "--port",
        "0",
        "--debug-port",
        "0",
        "--etcd-endpoints",
        &nowhere,
    ]));
    let warning = server.wait_line("the advertised address is a wildcard");
    assert!(warning.contains(" WARN "), "{warning}");
    assert!(warning.contains("--advertise HOST:PORT"), "{warning}");
}

/// `load` in lease mode registers every client, then reports what it
/// measured: calls, outcomes, and its own and the server's CPU per call.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn load_reports_leases_granted_and_cpu_per_call() {
    let config = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../doorman/examples/doorman-fair.yaml");
    let mut server = cli::start(cli::on_free_ports("serve").arg("--config").arg(&config));
    let addr = tokio::task::block_in_place(|| server.logged_addr("gRPC listening"));
    let out = cli::tollgate()
        .args([
            "load",
            "--server",
            &addr,
            "--clients",
            "10",
            "--duration",
            "200ms",
        ])
        .args(["--concurrency", "4", "--connections", "1", "--threads", "1"])
        .args(["--server-pid", &server.pid().to_string()])
        .output()
        .unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("lease load: 10 clients"), "{stderr}");
    for field in [
        "rpcs=",
        " granted=",
        "errors=0",
        "load_cpu=",
        "server_cpu=",
        "us/call",
        "p99=",
    ] {
        assert!(stdout.contains(field), "{field}: {stdout}");
    }
    // Every call was granted: none failed, none was redirected.
    let count = |name: &str| -> u64 {
        let at = stdout.find(name).unwrap() + name.len();
        stdout[at..].split(' ').next().unwrap().parse().unwrap()
    };
    assert!(count("rpcs=") > 0, "{stdout}");
    assert_eq!(count("rpcs="), count(" granted="), "{stdout}");
}

/// `--host` and `--debug-host` take a name (`localhost`) as well as an
/// address, for `serve` and `quota`.
#[test]
fn a_host_name_is_resolved_for_serve_and_quota() {
    let dir = tempfile::tempdir().unwrap();
    let quotas = dir.path().join("quotas.yaml");
    std::fs::write(
        &quotas,
        "namespaces:\n  svc:\n    buckets:\n      db: {size: 2, fill_rate: 2}\n",
    )
    .unwrap();
    for (command, config, logged) in [
        ("serve", None, "gRPC listening"),
        ("quota", Some(&quotas), "quota gRPC listening"),
    ] {
        let mut c = cli::tollgate();
        c.args([
            command,
            "--host",
            "localhost",
            "--port",
            "0",
            "--debug-host",
            "localhost",
        ])
        .args(["--debug-port", "0"]);
        if let Some(config) = config {
            c.arg("--config").arg(config);
        }
        let mut server = cli::start(&mut c);
        let addr = server.logged_addr(logged);
        assert!(addr.starts_with("127.0.0.1:"), "{command}: {addr}");
    }
}

/// A server named as its own parent, by its address, by `localhost`, or
/// by 127.0.0.1 while it listens on 0.0.0.0, is refused at start.
#[test]
fn a_server_given_itself_as_parent_is_refused() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    for (host, parent) in [
        ("127.0.0.1", format!("127.0.0.1:{port}")),
        ("127.0.0.1", format!("localhost:{port}")),
        ("0.0.0.0", format!("127.0.0.1:{port}")),
    ] {
        let port = port.to_string();
        let mut server = cli::start(
            cli::tollgate()
                .args([
                    "serve",
                    "--host",
                    host,
                    "--port",
                    &port,
                    "--debug-port",
                    "0",
                ])
                .args(["--parent", &parent]),
        );
        // Fails (rather than hangs) when the server starts after all.
        let status = server.exit_status();
        assert_eq!(status.code(), Some(1), "{:?}", server.lines());
        let last = server.wait_line("error: ");
        assert!(
            last.starts_with(&format!("error: --parent {parent} is this server itself")),
            "{last}"
        );
    }
}

/// `--max-message-bytes 0` would refuse every request: refused at start.
#[test]
fn a_message_limit_too_small_for_any_request_is_refused() {
    let mut server = cli::start(cli::tollgate().args([
        "serve",
        "--host",
        "127.0.0.1",
        "--port",
        "0",
        "--debug-port",
        "0",
        "--max-message-bytes",
        "0",
    ]));
    // Fails (rather than hangs) when the server starts after all.
    assert_eq!(server.exit_status().code(), Some(2));
    let line = server.wait_line("--max-message-bytes");
    assert!(
        line.contains(
            "invalid value '0' for '--max-message-bytes <MAX_MESSAGE_BYTES>': must be at least \
             4096 bytes"
        ),
        "{line}"
    );
}

/// etcd that cannot be reached is one readable line: the address and the
/// refusal, with no dump of tonic's error.
#[test]
fn an_unreachable_etcd_is_one_readable_line() {
    let o = cli::tollgate()
        .args([
            "serve",
            "--host",
            "127.0.0.1",
            "--port",
            "0",
            "--debug-port",
            "0",
        ])
        .args([
            "--config",
            "etcd:/tollgate/config",
            "--etcd-endpoints",
            "127.0.0.1:1",
        ])
        .output()
        .unwrap();
    let stderr = String::from_utf8(o.stderr).unwrap();
    assert_eq!(o.status.code(), Some(1), "{stderr}");
    assert_eq!(
        stderr.lines().last().unwrap(),
        "error: etcd range of \"/tollgate/config\" at 127.0.0.1:1 failed: Unavailable: tcp \
         connect error: Connection refused (os error 111)"
    );
    assert!(!stderr.contains("tonic::transport"), "{stderr}");
}
