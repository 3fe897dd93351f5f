//! TLS and mutual TLS end to end: a lease server on 127.0.0.1:0 over TLS,
//! certificates made in the test by rcgen, and lease clients and raw gRPC
//! calls that trust the right or the wrong CA, with or without a client
//! certificate.
//!
//! No assertion is about time: the waits' bound only guards against
//! hanging.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair};
use tokio::sync::oneshot;
use tollgate_doorman::pb;
use tollgate_doorman::pb::capacity_client::CapacityClient;
use tollgate_doorman::{
    Client, ClientTls, Parent, Resource, ResourceOptions, Server, ServerConfig, ServerTls,
    SingleElection,
};
use tonic::transport::Endpoint;

use tollgate_testkit::fixtures::fair_share;
use tollgate_testkit::net;
use tollgate_testkit::process as cli;

/// A guard on how long any wait may take before the test fails.
const HANG: Duration = Duration::from_secs(60);

/// The lease servers' templates: 100 units, leases of 4 s refreshed every
/// second, no learning mode.
fn yaml() -> String {
    fair_share(100, 4, 1, 0)
}

/// A CA: its certificate's file and what signs with it.
struct Ca {
    cert_file: PathBuf,
    issuer: Issuer<'static, KeyPair>,
}

/// A directory for one test's files, removed when the test ends.
fn dir(test: &str) -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix(&format!("tollgate-tls-{test}-"))
        .tempdir()
        .unwrap()
}

fn ca(dir: &Path, name: &str) -> Ca {
    let key = KeyPair::generate().unwrap();
    let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let cert = params.self_signed(&key).unwrap();
    let cert_file = dir.join(format!("{name}.pem"));
    std::fs::write(&cert_file, cert.pem()).unwrap();
    Ca {
        cert_file,
        issuer: Issuer::new(params, key),
    }
}

/// A certificate for `names` signed by `ca`: (certificate file, key file).
fn leaf(dir: &Path, name: &str, names: &[&str], ca: &Ca) -> (PathBuf, PathBuf) {
    let key = KeyPair::generate().unwrap();
    let params =
        CertificateParams::new(names.iter().map(|n| n.to_string()).collect::<Vec<_>>()).unwrap();
    let cert = params.signed_by(&key, &ca.issuer).unwrap();
    let cert_file = dir.join(format!("{name}.pem"));
    let key_file = dir.join(format!("{name}.key"));
    std::fs::write(&cert_file, cert.pem()).unwrap();
    std::fs::write(&key_file, key.serialize_pem()).unwrap();
    (cert_file, key_file)
}

/// A lease server deciding by [`yaml`], the master at `addr`, to serve over
/// `tls`.
fn master_over_tls(addr: &str, tls: &ServerTls) -> Server {
    let election = SingleElection::new(Some(addr.to_owned()));
    Server::builder(ServerConfig::from_yaml(&yaml()).unwrap())
        .election(&election)
        .tls(tls)
        .unwrap()
        .build()
}

/// Serves [`yaml`] over `tls` on 127.0.0.1:0; returns the address and the
/// sender that stops the server.
async fn serve(tls: ServerTls) -> (String, oneshot::Sender<()>) {
    let (listener, addr) = net::listen().await;
    let server = master_over_tls(&addr, &tls);
    let (stop, stopped) = oneshot::channel::<()>();
    tokio::spawn(async move {
        server
            .serve(listener, async {
                let _ = stopped.await;
            })
            .await
            .unwrap();
    });
    (addr, stop)
}

/// A lease client over `tls` asking for 10 of resource "r"; returns the
/// first nonzero capacity it is granted.
async fn lease(addr: &str, tls: &ClientTls) -> f64 {
    let client = Client::builder()
        .server(addr)
        .tls(tls)
        .unwrap()
        .build()
        .unwrap();
    let resource = client.resource("r", ResourceOptions::new(10.0)).unwrap();
    let mut watch = resource.watch();
    let granted = tokio::time::timeout(HANG, watch.wait_for(|c| c.capacity > 0.0))
        .await
        .expect("no capacity granted over TLS")
        .unwrap()
        .capacity;
    granted
}

/// One Discovery call over `tls`: the status code of its failure, or
/// `None` when it succeeds.
async fn discovery(addr: &str, tls: &ClientTls) -> Option<tonic::Code> {
    let channel = Endpoint::from_shared(format!("https://{addr}"))
        .unwrap()
        .tls_config(tls.load().unwrap())
        .unwrap()
        .connect_timeout(HANG)
        .connect_lazy();
    let mut client = CapacityClient::new(channel);
    tokio::time::timeout(HANG, client.discovery(pb::DiscoveryRequest {}))
        .await
        .expect("discovery hung")
        .err()
        .map(|s| s.code())
}

/// Whether a call failed as it does when the server refuses the client's
/// certificate. In TLS 1.3 the client's side of the handshake ends before
/// the server checks the client's certificate, so the refusal arrives as
/// the server's alert while the request is being sent or its answer read:
/// tonic reports Unknown or Cancelled depending on which, never a status
/// the service itself sends.
fn refused_by_the_server(code: Option<tonic::Code>) -> bool {
    matches!(
        code,
        Some(tonic::Code::Unknown | tonic::Code::Cancelled | tonic::Code::Unavailable)
    )
}

#[tokio::test]
async fn a_client_trusting_the_servers_ca_is_granted_capacity_and_one_trusting_another_is_refused()
{
    let tmp = dir("tls");
    let d = tmp.path();
    let server_ca = ca(d, "server-ca");
    let other_ca = ca(d, "other-ca");
    let (cert, key) = leaf(d, "server", &["localhost", "127.0.0.1"], &server_ca);
    let (addr, _stop) = serve(ServerTls::new(cert, key)).await;

    let right = ClientTls::new(&server_ca.cert_file);
    assert_eq!(discovery(&addr, &right).await, None);
    assert_eq!(lease(&addr, &right).await, 10.0);

    let wrong = ClientTls::new(&other_ca.cert_file);
    assert_eq!(
        discovery(&addr, &wrong).await,
        Some(tonic::Code::Unavailable)
    );
}

#[tokio::test]
async fn with_mutual_tls_only_a_client_with_a_certificate_from_the_client_ca_is_served() {
    let tmp = dir("mtls");
    let d = tmp.path();
    let server_ca = ca(d, "server-ca");
    let client_ca = ca(d, "client-ca");
    let other_ca = ca(d, "other-ca");
    let (cert, key) = leaf(d, "server", &["localhost", "127.0.0.1"], &server_ca);
    let (addr, _stop) = serve(ServerTls::new(cert, key).client_ca(&client_ca.cert_file)).await;

    let anonymous = ClientTls::new(&server_ca.cert_file);
    assert!(refused_by_the_server(discovery(&addr, &anonymous).await));

    let (cert, key) = leaf(d, "stranger", &["stranger"], &other_ca);
    let stranger = ClientTls::new(&server_ca.cert_file).identity(cert, key);
    assert!(refused_by_the_server(discovery(&addr, &stranger).await));

    let (cert, key) = leaf(d, "client", &["client"], &client_ca);
    let known = ClientTls::new(&server_ca.cert_file).identity(cert, key);
    assert_eq!(discovery(&addr, &known).await, None);
    assert_eq!(lease(&addr, &known).await, 10.0);
}

/// Runs `command` (a tollgate command) to its end; returns its exit code
/// and stderr.
fn exit_and_stderr(command: &mut std::process::Command) -> (Option<i32>, String) {
    let out = command.output().unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A quota configuration file in `d`: one bucket, svc/db, of 2 tokens.
fn quota_config(d: &Path) -> PathBuf {
    let config = d.join("quotas.yaml");
    std::fs::write(
        &config,
        "namespaces:\n  svc:\n    buckets:\n      db: {size: 2, fill_rate: 2}\n",
    )
    .unwrap();
    config
}

/// Go Doorman's TLS flag names, as `lease` and `serve` read them: a
/// missing file is named, whether the flags are written with two dashes or
/// with one, as Go's flag package writes them (`-name value` or
/// `-name=value`).
#[test]
fn go_doormans_flag_names_are_read_with_two_dashes_or_one_and_a_missing_file_is_named() {
    // The `lease` flags, the `serve` flags, and the file each names first.
    let two_dashes: (&[&str], &[&str], &str, &str) = (
        &["--ca_file", "/nonexistent/ca.pem"],
        &[
            "--tls",
            "--cert_file",
            "/nonexistent/server.pem",
            "--key_file",
            "/nonexistent/server.key",
        ],
        "/nonexistent/ca.pem",
        "/nonexistent/server.pem",
    );
    let one_dash: (&[&str], &[&str], &str, &str) = (
        &["-ca_file=/nonexistent/one-dash-ca.pem"],
        &[
            "-tls",
            "-cert_file",
            "/nonexistent/one-dash.pem",
            "-key_file=/nonexistent/one-dash.key",
        ],
        "/nonexistent/one-dash-ca.pem",
        "/nonexistent/one-dash.pem",
    );
    for (lease_tls, serve_tls, ca, cert) in [two_dashes, one_dash] {
        let lease = [&["lease", "r"], lease_tls, &["--count", "1"]].concat();
        let (code, stderr) = exit_and_stderr(cli::tollgate().args(&lease));
        assert_eq!(code, Some(1), "{lease:?}: {stderr}");
        assert!(
            stderr.contains(&format!("cannot read TLS file {ca}")),
            "{lease:?}: {stderr}"
        );

        let (code, stderr) = exit_and_stderr(cli::on_free_ports("serve").args(serve_tls));
        assert_eq!(code, Some(1), "{serve_tls:?}: {stderr}");
        assert!(
            stderr.contains(&format!("cannot read TLS file {cert}")),
            "{serve_tls:?}: {stderr}"
        );
    }

    // Only those names: another one-dash word is still clap's error.
    let (code, stderr) = exit_and_stderr(cli::tollgate().args(["serve", "-tls_cert", "x"]));
    assert_eq!(code, Some(2));
    assert!(stderr.contains("unexpected argument"), "{stderr}");
}

/// One Allow for 2 tokens of svc/db over `tls`: the tokens granted, or the
/// status code of the failure.
async fn allow(addr: &str, tls: &ClientTls) -> Result<i64, tonic::Code> {
    use tollgate_quota::pb::quota_service_client::QuotaServiceClient;
    let channel = Endpoint::from_shared(format!("https://{addr}"))
        .unwrap()
        .tls_config(tls.load().unwrap())
        .unwrap()
        .connect_lazy();
    let request = tollgate_quota::pb::AllowRequest {
        namespace: "svc".into(),
        bucket_name: "db".into(),
        tokens_requested: 2,
        ..Default::default()
    };
    tokio::time::timeout(HANG, QuotaServiceClient::new(channel).allow(request))
        .await
        .expect("allow hung")
        .map(|r| r.into_inner().tokens_granted)
        .map_err(|s| s.code())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quota_serves_allow_over_mutual_tls_only_to_a_client_with_a_certificate() {
    quota_over_mutual_tls(&[]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quota_with_a_store_serves_allow_over_mutual_tls_only_to_a_client_with_a_certificate() {
    let redis = redis_server::RedisServer::start();
    quota_over_mutual_tls(&["--store", &redis.url(), "--store-deadline", "1s"]).await;
}

async fn quota_over_mutual_tls(extra: &[&str]) {
    let tmp = dir("quota");
    let d = tmp.path();
    let server_ca = ca(d, "server-ca");
    let client_ca = ca(d, "client-ca");
    let (cert, key) = leaf(d, "server", &["localhost", "127.0.0.1"], &server_ca);
    let config = quota_config(d);
    let mut quota = cli::start(
        cli::on_free_ports("quota")
            .arg("--config")
            .arg(&config)
            .arg("--tls-cert")
            .arg(&cert)
            .arg("--tls-key")
            .arg(&key)
            .arg("--tls-client-ca")
            .arg(&client_ca.cert_file)
            .args(extra),
    );
    let addr = tokio::task::block_in_place(|| quota.logged_addr("quota gRPC listening over TLS"));

    let anonymous = ClientTls::new(&server_ca.cert_file);
    assert!(refused_by_the_server(allow(&addr, &anonymous).await.err()));

    let (cert, key) = leaf(d, "client", &["client"], &client_ca);
    let known = ClientTls::new(&server_ca.cert_file).identity(cert, key);
    assert_eq!(allow(&addr, &known).await, Ok(2));
}

/// An intermediate server's own templates: only its learning mode and the
/// fallback lease before the first grant matter.
fn mid() -> String {
    fair_share(1000, 60, 1, 0)
}

/// A root server on 127.0.0.1:0 serving [`yaml`] over `tls`: the server (to
/// read its leases) and its address.
async fn root(tls: ServerTls) -> (Server, String) {
    let (listener, addr) = net::listen().await;
    let server = master_over_tls(&addr, &tls);
    server.spawn_background(Duration::from_secs(1));
    let serving = server.clone();
    tokio::spawn(async move {
        serving
            .serve(listener, std::future::pending())
            .await
            .unwrap();
    });
    (server, addr)
}

/// An intermediate server on 127.0.0.1:0 (plain gRPC to its clients) whose
/// poller asks `parent` as `id` over `tls`; returns its address.
async fn intermediate(parent: &str, id: &str, tls: &ClientTls) -> String {
    let (listener, addr) = net::listen().await;
    let election = SingleElection::new(Some(addr.clone()));
    let server = Server::builder(ServerConfig::from_yaml(&mid()).unwrap())
        .election(&election)
        .parent(Parent {
            address: parent.to_owned(),
            server_id: id.to_owned(),
            decay_factor: 0.5,
        })
        .parent_tls(tls)
        .unwrap()
        .build();
    server.spawn_background(Duration::from_secs(1));
    tokio::spawn(server.serve(listener, std::future::pending()));
    addr
}

/// A plain lease client of the intermediate at `addr` wanting 10 of "r":
/// the client and its resource, kept alive while the lease is watched.
fn plain_client(addr: &str) -> (Client, Resource) {
    let client = Client::builder().server(addr).build().unwrap();
    let resource = client.resource("r", ResourceOptions::new(10.0)).unwrap();
    (client, resource)
}

/// The root's lease for server `id` on "r", if it has one.
fn lease_of(root: &Server, id: &str) -> Option<f64> {
    root.leases("r")?
        .into_iter()
        .find(|(c, _)| c == id)
        .map(|(_, l)| l.has)
}

/// A TCP relay on 127.0.0.1:0 to `to`: its address, and how many of the
/// connections relayed have ended. A poller whose handshake fails ends its
/// connection (or has it ended by the root); one that succeeds keeps it
/// open for its next calls.
async fn relay(to: String) -> (String, Arc<AtomicUsize>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let ended = Arc::new(AtomicUsize::new(0));
    let count = Arc::clone(&ended);
    tokio::spawn(async move {
        loop {
            let (mut inbound, _) = listener.accept().await.unwrap();
            let mut outbound = tokio::net::TcpStream::connect(&to).await.unwrap();
            let count = Arc::clone(&count);
            tokio::spawn(async move {
                let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                count.fetch_add(1, Ordering::SeqCst);
            });
        }
    });
    (addr, ended)
}

/// An intermediate that trusts the right CA (and, when `mutual`, presents
/// a certificate from the root's client CA) passes on what the root grants;
/// ones that do not reach the root through relays, and once a relay has
/// seen a connection end (a failed handshake), the root has granted that
/// one nothing and its client holds no capacity.
async fn tree(mutual: bool) {
    let tmp = dir(if mutual { "tree-mtls" } else { "tree-tls" });
    let d = tmp.path();
    let server_ca = ca(d, "server-ca");
    let client_ca = ca(d, "client-ca");
    let other_ca = ca(d, "other-ca");
    let (cert, key) = leaf(d, "root", &["localhost", "127.0.0.1"], &server_ca);
    let tls = ServerTls::new(cert, key);
    let tls = if mutual {
        tls.client_ca(&client_ca.cert_file)
    } else {
        tls
    };
    let (root, root_addr) = root(tls).await;

    let (cert, key) = leaf(d, "mid", &["mid"], &client_ca);
    let good = ClientTls::new(&server_ca.cert_file).identity(&cert, &key);
    let good_addr = intermediate(&root_addr, "good", &good).await;
    let (_client, resource) = plain_client(&good_addr);
    let mut watch = resource.watch();
    let granted = tokio::time::timeout(HANG, watch.wait_for(|c| c.capacity > 0.0))
        .await
        .expect("the intermediate passed on no capacity from its parent over TLS")
        .unwrap()
        .capacity;
    assert_eq!(granted, 10.0);
    assert_eq!(lease_of(&root, "good"), Some(10.0));

    let mut bad = vec![(
        "wrong-ca",
        ClientTls::new(&other_ca.cert_file).identity(&cert, &key),
    )];
    if mutual {
        bad.push(("anonymous", ClientTls::new(&server_ca.cert_file)));
        let (cert, key) = leaf(d, "stranger", &["stranger"], &other_ca);
        bad.push((
            "stranger",
            ClientTls::new(&server_ca.cert_file).identity(cert, key),
        ));
    }
    for (id, tls) in &bad {
        let (via, ended) = relay(root_addr.clone()).await;
        let addr = intermediate(&via, id, tls).await;
        let (_client, resource) = plain_client(&addr);
        let until = Instant::now() + HANG;
        while ended.load(Ordering::SeqCst) == 0 {
            assert!(Instant::now() < until, "{id}'s poller kept its connection");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert_eq!(lease_of(&root, id), None, "{id} was granted by the root");
        let capacity = resource.watch().borrow().capacity;
        assert_eq!(capacity, 0.0, "{id}'s client got capacity");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_intermediate_polls_its_parent_over_tls_and_one_trusting_another_ca_gets_nothing() {
    tree(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_intermediate_polls_its_parent_over_mutual_tls_only_with_a_certificate_it_trusts() {
    tree(true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quota_in_cluster_mode_leases_its_buckets_rates_over_mutual_tls() {
    let tmp = dir("quota-cluster");
    let d = tmp.path();
    let server_ca = ca(d, "server-ca");
    let client_ca = ca(d, "client-ca");
    let (cert, key) = leaf(d, "root", &["localhost", "127.0.0.1"], &server_ca);
    let (root, root_addr) = root(ServerTls::new(cert, key).client_ca(&client_ca.cert_file)).await;
    let (cert, key) = leaf(d, "quota", &["quota"], &client_ca);
    let config = quota_config(d);
    let _quota = cli::start(
        cli::on_free_ports("quota")
            .args(["--cluster-interval", "100ms", "--lease-servers", &root_addr])
            .arg("--config")
            .arg(&config)
            .arg("--lease-tls-ca")
            .arg(&server_ca.cert_file)
            .arg("--lease-tls-cert")
            .arg(&cert)
            .arg("--lease-tls-key")
            .arg(&key)
            .arg("--lease-tls-server-name")
            .arg("localhost"),
    );

    // The root records a lease only for a GetCapacity that came through
    // the mutual TLS handshake.
    let until = Instant::now() + HANG;
    let lease = loop {
        if let Some((_, lease)) = root.leases("svc:db").and_then(|l| l.into_iter().next()) {
            break lease;
        }
        assert!(Instant::now() < until, "quota never leased svc:db over TLS");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(lease.wants >= 1.0, "{lease:?}");
    assert_eq!(lease.has, lease.wants, "the root had room for all of it");
}

#[test]
fn quota_names_a_missing_lease_tls_file() {
    let tmp = dir("quota-missing");
    let d = tmp.path();
    let config = quota_config(d);
    let (code, stderr) = exit_and_stderr(
        cli::on_free_ports("quota")
            .arg("--config")
            .arg(&config)
            .args(["--lease-servers", "127.0.0.1:1"])
            .args(["--lease-tls-ca", "/nonexistent/lease-ca.pem"]),
    );
    assert_eq!(code, Some(1));
    assert!(
        stderr.contains("cannot read TLS file /nonexistent/lease-ca.pem"),
        "{stderr}"
    );
}

/// Runs `openssl` with `args` in `dir`; panics with its output if it fails.
fn openssl(dir: &Path, args: &[&str]) {
    let out = std::process::Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .expect("openssl runs (.ci/run installs it)");
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A client certificate the server refuses is explained on both sides:
/// an X.509 v1 certificate (as a plain `openssl x509 -req` makes) stops
/// the client before it dials, naming the file and the fix, and the server
/// logs one from another client at warn with the same fix; a certificate
/// from another CA is refused by the server, which logs why, and the
/// client's error names the TLS failure and its likely fix.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_client_certificate_is_explained_on_both_sides() {
    let tmp = dir("v1");
    let d = tmp.path();
    let server_ca = ca(d, "server-ca");
    let other_ca = ca(d, "other-ca");
    let (cert, key) = leaf(d, "server", &["localhost", "127.0.0.1"], &server_ca);
    let ec = [
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:prime256v1",
        "-nodes",
    ];
    let mut args = vec!["req", "-x509"];
    args.extend(ec);
    args.extend([
        "-keyout",
        "cca.key",
        "-out",
        "cca.pem",
        "-subj",
        "/CN=client-ca",
        "-days",
        "2",
    ]);
    openssl(d, &args);
    let mut args = vec!["req"];
    args.extend(ec);
    args.extend(["-keyout", "v1.key", "-out", "v1.csr", "-subj", "/CN=client"]);
    openssl(d, &args);
    openssl(
        d,
        &[
            "x509",
            "-req",
            "-in",
            "v1.csr",
            "-CA",
            "cca.pem",
            "-CAkey",
            "cca.key",
            "-CAcreateserial",
            "-out",
            "v1.pem",
            "-days",
            "2",
        ],
    );
    let mut server = cli::start(
        cli::on_free_ports("serve")
            .arg("--tls-cert")
            .arg(&cert)
            .arg("--tls-key")
            .arg(&key)
            .arg("--tls-client-ca")
            .arg(d.join("cca.pem")),
    );
    let addr = tokio::task::block_in_place(|| server.logged_addr("gRPC listening over TLS"));
    let lease = |cert: &Path, key: &Path| {
        exit_and_stderr(cli::tollgate().args([
            "lease",
            "r",
            "--server",
            &addr,
            "--timeout",
            "2s",
            "--tls-ca",
            server_ca.cert_file.to_str().unwrap(),
            "--tls-cert",
            cert.to_str().unwrap(),
            "--tls-key",
            key.to_str().unwrap(),
            "--tls-server-name",
            "localhost",
        ]))
    };

    let (code, stderr) = lease(&d.join("v1.pem"), &d.join("v1.key"));
    assert_eq!(code, Some(1), "{stderr}");
    assert!(stderr.contains("v1.pem"), "{stderr}");
    assert!(stderr.contains("an X.509 v1 certificate"), "{stderr}");
    assert!(stderr.contains("-extfile"), "{stderr}");

    // A client that does send it: the server says why it refused it.
    let out = std::process::Command::new("openssl")
        .args([
            "s_client", "-connect", &addr, "-alpn", "h2", "-cert", "v1.pem", "-key", "v1.key",
        ])
        .arg("-CAfile")
        .arg(&server_ca.cert_file)
        .current_dir(d)
        .stdin(std::process::Stdio::null())
        .output()
        .expect("openssl runs");
    let _ = out;
    let refused = tokio::task::block_in_place(|| server.wait_line("TLS handshake refused"));
    assert!(refused.contains("WARN"), "{refused}");
    assert!(refused.contains("X.509 v1"), "{refused}");
    assert!(refused.contains("-extfile"), "{refused}");

    // Held back: the next refusal within a second is counted, not logged;
    // wait for the log to take lines again.
    std::thread::sleep(std::time::Duration::from_millis(1100));
    let (stranger, stranger_key) = leaf(d, "stranger", &["stranger"], &other_ca);
    let (code, stderr) = lease(&stranger, &stranger_key);
    assert_eq!(code, Some(1), "{stderr}");
    // The client reads the server's alert, or (when the server closed
    // first) only the close: either way it is told its certificate was
    // refused.
    assert!(
        stderr.contains("the server refused this client's certificate")
            || stderr.contains("the server closed the TLS connection before answering"),
        "{stderr}"
    );
    let refused = tokio::task::block_in_place(|| server.wait_line("TLS handshake refused"));
    assert!(refused.contains("not signed by the client CA"), "{refused}");

    // A client dialling in plaintext is told the server may speak TLS.
    let (code, stderr) =
        exit_and_stderr(cli::tollgate().args(["lease", "r", "--server", &addr, "--timeout", "2s"]));
    assert_eq!(code, Some(1), "{stderr}");
    assert!(stderr.contains("the server may be serving TLS"), "{stderr}");
}

/// A server whose certificate has expired says so when it starts; a
/// client stops at once, told the certificate is outside its dates, and
/// the server's log says the client refused it as expired (not that the
/// client must trust the CA).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expired_server_certificate_is_warned_at_start_and_named_on_both_sides() {
    let tmp = dir("expired");
    let d = tmp.path();
    let server_ca = ca(d, "server-ca");
    let key = KeyPair::generate().unwrap();
    let mut params = CertificateParams::new(vec!["localhost".to_owned()]).unwrap();
    params.not_before = rcgen::date_time_ymd(2020, 1, 1);
    params.not_after = rcgen::date_time_ymd(2021, 1, 1);
    let cert = params.signed_by(&key, &server_ca.issuer).unwrap();
    let (cert_file, key_file) = (d.join("expired.pem"), d.join("expired.key"));
    std::fs::write(&cert_file, cert.pem()).unwrap();
    std::fs::write(&key_file, key.serialize_pem()).unwrap();

    let mut server = cli::start(
        cli::on_free_ports("serve")
            .arg("--tls-cert")
            .arg(&cert_file)
            .arg("--tls-key")
            .arg(&key_file),
    );
    let warned = tokio::task::block_in_place(|| server.wait_line("expired on"));
    assert!(warned.contains("WARN"), "{warned}");
    assert!(
        warned.contains(&format!(
            "the certificate in {} expired on 2021-01-01 00:00:00 UTC",
            cert_file.display()
        )),
        "{warned}"
    );
    let addr = tokio::task::block_in_place(|| server.logged_addr("gRPC listening over TLS"));
    let (code, stderr) = exit_and_stderr(cli::tollgate().args([
        "lease",
        "r",
        "--server",
        &addr,
        "--timeout",
        "60s",
        "--tls-ca",
        server_ca.cert_file.to_str().unwrap(),
        "--tls-server-name",
        "localhost",
    ]));
    assert_eq!(code, Some(1), "{stderr}");
    let last = stderr.lines().last().unwrap();
    assert!(
        last.contains("TLS failed: the server's certificate is outside its validity dates"),
        "{stderr}"
    );
    assert!(!stderr.contains("no answer from"), "{stderr}");
    let refused = tokio::task::block_in_place(|| server.wait_line("TLS handshake refused"));
    assert!(refused.contains("as expired or not valid yet"), "{refused}");
    assert!(!refused.contains("must trust"), "{refused}");
}

/// `tollgate rls` over mutual TLS: a client without a certificate from the
/// client CA is refused, one with it is answered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rls_answers_over_mutual_tls_only_a_client_with_a_certificate() {
    rls_over_mutual_tls(&[]).await;
}

use tollgate_testkit::redis as redis_server;

/// As above, with the counters in Redis (served through tonic).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rls_with_a_store_answers_over_mutual_tls_only_a_client_with_a_certificate() {
    let redis = redis_server::RedisServer::start();
    rls_over_mutual_tls(&["--store", &redis.url(), "--store-deadline", "1s"]).await;
}

async fn rls_over_mutual_tls(extra: &[&str]) {
    use tollgate_rls::pb::rate_limit_descriptor::Entry;
    use tollgate_rls::pb::rate_limit_service_client::RateLimitServiceClient;
    use tollgate_rls::pb::{RateLimitDescriptor, RateLimitRequest};
    let tmp = dir("rls");
    let d = tmp.path();
    let server_ca = ca(d, "server-ca");
    let client_ca = ca(d, "client-ca");
    let (cert, key) = leaf(d, "server", &["localhost", "127.0.0.1"], &server_ca);
    let config = d.join("edge.yaml");
    std::fs::write(
        &config,
        "domain: edge\ndescriptors:\n  - key: k\n    rate_limit: {unit: day, requests_per_unit: 5}\n",
    )
    .unwrap();
    let mut rls = cli::start(
        cli::on_free_ports("rls")
            .arg("--config")
            .arg(&config)
            .arg("--tls-cert")
            .arg(&cert)
            .arg("--tls-key")
            .arg(&key)
            .arg("--tls-client-ca")
            .arg(&client_ca.cert_file)
            .args(extra),
    );
    let addr = tokio::task::block_in_place(|| rls.logged_addr("rls gRPC listening over TLS"));
    let ask = |tls: ClientTls| {
        let addr = addr.clone();
        async move {
            let channel = Endpoint::from_shared(format!("https://{addr}"))
                .unwrap()
                .tls_config(tls.load().unwrap())
                .unwrap()
                .connect_lazy();
            let request = RateLimitRequest {
                domain: "edge".into(),
                descriptors: vec![RateLimitDescriptor {
                    entries: vec![Entry {
                        key: "k".into(),
                        value: "v".into(),
                    }],
                    limit: None,
                    hits_addend: None,
                }],
                hits_addend: 0,
            };
            tokio::time::timeout(
                HANG,
                RateLimitServiceClient::new(channel).should_rate_limit(request),
            )
            .await
            .expect("ShouldRateLimit hung")
            .map(|r| r.into_inner().statuses[0].limit_remaining)
            .map_err(|s| s.code())
        }
    };
    let anonymous = ClientTls::new(&server_ca.cert_file);
    assert!(refused_by_the_server(ask(anonymous).await.err()));
    let (cert, key) = leaf(d, "client", &["client"], &client_ca);
    let known = ClientTls::new(&server_ca.cert_file).identity(cert, key);
    assert_eq!(ask(known).await, Ok(4));
}
