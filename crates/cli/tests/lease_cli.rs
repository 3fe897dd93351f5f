//! `tollgate lease` prints each lease as it refreshes, then releases it.

use tollgate_testkit::lease as lease_server;
use tollgate_testkit::process as cli;

const CONFIG: &str = r#"
resources:
  - identifier_glob: "*"
    capacity: 100
    safe_capacity: 7
    algorithm: {kind: FAIR_SHARE, lease_length: 10, refresh_interval: 1, learning_mode_duration: 0}
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lease_prints_refreshes_and_releases() {
    let (server, addr) = lease_server::serve(CONFIG).await;

    let args = [
        "lease", "a", "b", "--wants", "42", "--server", &addr, "--count", "4", "--id", "cli-test",
    ]
    .map(str::to_owned);
    let output = tokio::task::spawn_blocking(move || cli::tollgate().args(args).output().unwrap())
        .await
        .unwrap();
    let stdout = String::from_utf8(output.stdout).unwrap();
    assert!(output.status.success(), "{stdout}");
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 4, "{stdout}");
    for line in &lines {
        assert!(line.contains(" capacity=42 source=lease "), "{line}");
        assert!(line.contains(" refresh=1s safe=7 "), "{line}");
    }
    for id in ["a", "b"] {
        assert!(
            lines.iter().any(|l| l.starts_with(&format!("{id} "))),
            "{stdout}"
        );
    }
    // Released on exit.
    for r in server.status() {
        assert_eq!(r.sum_has, 0.0, "{}", r.id);
    }
}

/// A server that stops answering mid-refresh: the pessimistic mode takes
/// effect when the lease expires, although the refresh's deadline (600 s)
/// is far away; the CLI then exits cleanly on SIGINT.
#[test]
fn a_paused_server_cannot_keep_a_lease_in_force() {
    let dir = std::env::temp_dir().join(format!("tollgate-lease-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let config = dir.join("config.yaml");
    std::fs::write(
        &config,
        "resources:\n  - {identifier_glob: '*', capacity: 100, algorithm: {kind: FAIR_SHARE, lease_length: 3, refresh_interval: 1, learning_mode_duration: 0}}\n",
    )
    .unwrap();
    let mut server = cli::start(cli::on_free_ports("serve").arg("--config").arg(&config));
    let addr = server.logged_addr("gRPC listening");

    let mut lease = cli::start_reading_stdout(
        cli::tollgate()
            .args(["lease", "res", "--wants", "10", "--mode", "pessimistic"])
            .args(["--timeout", "600s", "--server", &addr]),
    );
    lease.wait_line("capacity=10 source=lease");
    server.signal(libc::SIGSTOP);
    let expired = lease.wait_line("source=expired");
    assert!(expired.contains("capacity=0 "), "{expired}");
    server.signal(libc::SIGCONT);
    lease.signal(libc::SIGINT);
    let status = lease.exit_status();
    assert!(status.success(), "{status:?}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// SIGTERM, as a service manager sends it, releases the leases as SIGINT
/// does, and the command exits 0.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_releases_the_leases() {
    let (server, addr) = lease_server::serve(CONFIG).await;
    let mut lease = cli::start_reading_stdout(
        cli::tollgate().args(["lease", "a", "--wants", "42", "--server", &addr]),
    );
    tokio::task::block_in_place(|| lease.wait_line("a capacity=42 source=lease"));
    assert_eq!(server.status()[0].sum_has, 42.0);
    lease.signal(libc::SIGTERM);
    let status = tokio::task::block_in_place(|| lease.exit_status());
    assert!(status.success(), "{status:?}");
    for r in server.status() {
        assert_eq!(r.sum_has, 0.0, "{}", r.id);
    }
}

/// A server in learning mode grants a new client 0: the command says why
/// on stderr, once, with the lease length learning mode lasts by default.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grant_of_nothing_names_learning_mode() {
    let (_server, addr) = lease_server::serve(
        "resources:\n  - {identifier_glob: '*', capacity: 100, algorithm: {kind: FAIR_SHARE, lease_length: 30, refresh_interval: 1}}\n",
    )
    .await;
    let args = [
        "lease", "a", "--wants", "42", "--server", &addr, "--count", "2",
    ]
    .map(str::to_owned);
    let output = tokio::task::spawn_blocking(move || cli::tollgate().args(args).output().unwrap())
        .await
        .unwrap();
    let stdout = String::from_utf8(output.stdout).unwrap();
    let stderr = String::from_utf8(output.stderr).unwrap();
    assert!(output.status.success(), "{stderr}");
    assert_eq!(stdout.lines().count(), 2, "{stdout}");
    for line in stdout.lines() {
        assert!(line.starts_with("a capacity=0 source=lease "), "{line}");
    }
    let notes: Vec<&str> = stderr.lines().filter(|l| l.starts_with("note: ")).collect();
    assert_eq!(notes.len(), 1, "{stderr}");
    assert!(
        notes[0].starts_with(
            "note: a: granted 0 of 42 wanted: a server in learning mode grants a client only \
             what it already holds, for its learning_mode_duration after it becomes master \
             (by default one lease length, here "
        ),
        "{stderr}"
    );
    // The lease's 30 s, less the whole seconds since it was granted.
    assert!(
        notes[0].contains("here 30s)") || notes[0].contains("here 29s)"),
        "{stderr}"
    );
}

/// Runs `tollgate lease` with `args` to its end: exit code and stderr.
async fn lease_output(args: Vec<String>) -> (Option<i32>, String) {
    let output = tokio::task::spawn_blocking(move || {
        cli::tollgate().arg("lease").args(args).output().unwrap()
    })
    .await
    .unwrap();
    (
        output.status.code(),
        String::from_utf8(output.stderr).unwrap(),
    )
}

/// An id the server refuses ends the command at once with the server's
/// reason, rather than retrying until --timeout and blaming the network.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_id_the_server_refuses_ends_the_command_with_the_reason() {
    let (_server, addr) = lease_server::serve(CONFIG).await;
    let long = "c".repeat(2_000);
    let args = ["a", "--server", &addr, "--id", &long, "--timeout", "120s"];
    let (code, stderr) = lease_output(args.map(str::to_owned).to_vec()).await;
    assert_eq!(code, Some(1), "{stderr}");
    let last = stderr.lines().last().unwrap();
    assert_eq!(
        last,
        format!(
            "error: {addr}: InvalidArgument: client_id is 2000 bytes long, more than the limit \
             of 1024: the server refuses the request as it stands"
        )
    );
    assert!(!stderr.contains("no answer from"), "{stderr}");
    let args = ["a", "--server", &addr, "--id", ""];
    let (code, stderr) = lease_output(args.map(str::to_owned).to_vec()).await;
    assert_eq!(code, Some(1), "{stderr}");
    assert_eq!(stderr.trim_end(), "error: the client id is empty");
}

/// A quota server does not serve Doorman's API: said at once.
#[test]
fn a_quota_server_is_named_as_not_a_doorman_server() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("quotas.yaml");
    std::fs::write(
        &config,
        "namespaces:\n  svc:\n    buckets:\n      db: {size: 2, fill_rate: 2}\n",
    )
    .unwrap();
    let mut quota = cli::start(cli::on_free_ports("quota").arg("--config").arg(&config));
    let addr = quota.logged_addr("quota gRPC listening");
    let output = cli::tollgate()
        .args(["lease", "a", "--server", &addr, "--timeout", "120s"])
        .output()
        .unwrap();
    let stderr = String::from_utf8(output.stderr).unwrap();
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert_eq!(
        stderr.lines().last().unwrap(),
        format!(
            "error: {addr}: Unimplemented: unknown method /doorman.Capacity/GetCapacity: the \
             server does not serve Doorman's Capacity API"
        )
    );
}

/// 3,000 resources on one command: more than a server takes in one
/// request, by count and by size, all leased.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_thousand_resources_are_leased_in_requests_the_server_accepts() {
    let (server, addr) = lease_server::serve(CONFIG).await;
    let mut args: Vec<String> = (0..3_000).map(|i| format!("resource-{i:031}")).collect();
    args.extend(["--server", &addr, "--count", "3000", "--timeout", "60s"].map(str::to_owned));
    let output = tokio::task::spawn_blocking(move || {
        cli::tollgate().arg("lease").args(args).output().unwrap()
    })
    .await
    .unwrap();
    let stdout = String::from_utf8(output.stdout).unwrap();
    let stderr = String::from_utf8(output.stderr).unwrap();
    assert!(output.status.success(), "{stderr}");
    assert_eq!(stdout.lines().count(), 3_000);
    assert!(
        stdout.lines().all(|l| l.contains(" source=lease ")),
        "{stdout}"
    );
    assert_eq!(server.status().len(), 3_000);
    // Released on exit.
    assert!(server.status().iter().all(|r| r.sum_has == 0.0));
}
