//! `tollgate lease` prints each lease as it refreshes, then releases it.

use std::process::Command;
use std::sync::Arc;

use tollgate::doorman::clock::SystemWallClock;
use tollgate::doorman::config::Config;
use tollgate::doorman::election::single::Single;
use tollgate::doorman::server::Server;

const CONFIG: &str = r#"
resources:
  - identifier_glob: "*"
    capacity: 100
    safe_capacity: 7
    algorithm: {kind: FAIR_SHARE, lease_length: 10, refresh_interval: 1, learning_mode_duration: 0}
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lease_prints_refreshes_and_releases() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let election = Single::new(Some(addr.clone()));
    let server = Server::new(
        Config::from_yaml(CONFIG).unwrap(),
        &election,
        Arc::new(SystemWallClock),
    );
    tokio::spawn(server.clone().serve(listener, std::future::pending()));

    let args = [
        "lease", "a", "b", "--wants", "42", "--server", &addr, "--count", "4", "--id", "cli-test",
    ]
    .map(str::to_owned);
    let output = tokio::task::spawn_blocking(move || {
        Command::new(env!("CARGO_BIN_EXE_tollgate"))
            .args(args)
            .output()
            .unwrap()
    })
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

/// Kills a child process when dropped.
struct Killed(std::process::Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Lines a child writes to `stream` (its stdout or stderr), as they come.
fn lines_of(stream: impl std::io::Read + Send + 'static) -> std::sync::mpsc::Receiver<String> {
    use std::io::{BufRead as _, BufReader};
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stream).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    rx
}

/// The first line from `rx` containing `text`, waiting at most a minute
/// (a guard against hanging, not an assertion about time).
fn wait_line(rx: &std::sync::mpsc::Receiver<String>, text: &str) -> String {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        match rx.recv_timeout(left) {
            Ok(line) if line.contains(text) => return line,
            Ok(_) => {}
            Err(e) => panic!("no line with {text:?}: {e}"),
        }
    }
}

fn signal(child: &std::process::Child, sig: libc::c_int) {
    // SAFETY: kill has no memory-safety preconditions; the pid is our
    // child's, not yet reaped.
    assert_eq!(unsafe { libc::kill(child.id() as libc::pid_t, sig) }, 0);
}

/// A server that stops answering mid-refresh: the pessimistic mode takes
/// effect when the lease expires, although the refresh's deadline (600 s)
/// is far away; the CLI then exits cleanly on SIGINT.
#[test]
fn a_paused_server_cannot_keep_a_lease_in_force() {
    use std::process::Stdio;
    let dir = std::env::temp_dir().join(format!("tollgate-lease-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let config = dir.join("config.yaml");
    std::fs::write(
        &config,
        "resources:\n  - {identifier_glob: '*', capacity: 100, algorithm: {kind: FAIR_SHARE, lease_length: 3, refresh_interval: 1, learning_mode_duration: 0}}\n",
    )
    .unwrap();
    let mut server = Killed(
        Command::new(env!("CARGO_BIN_EXE_tollgate"))
            .args([
                "serve",
                "--host",
                "127.0.0.1",
                "--port",
                "0",
                "--debug-port",
                "0",
            ])
            .arg("--config")
            .arg(&config)
            .env("NO_COLOR", "1")
            .env("RUST_LOG", "info")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let server_log = lines_of(server.0.stderr.take().unwrap());
    let listening = wait_line(&server_log, "gRPC listening");
    let at = listening.find("addr=").unwrap();
    let addr = listening[at + 5..]
        .split_whitespace()
        .next()
        .unwrap()
        .to_owned();
    // Keep draining the server's log.
    std::thread::spawn(move || while server_log.recv().is_ok() {});

    let mut cli = Killed(
        Command::new(env!("CARGO_BIN_EXE_tollgate"))
            .args(["lease", "res", "--wants", "10", "--mode", "pessimistic"])
            .args(["--timeout", "600s", "--server", &addr])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let out = lines_of(cli.0.stdout.take().unwrap());
    wait_line(&out, "capacity=10 source=lease");
    signal(&server.0, libc::SIGSTOP);
    let expired = wait_line(&out, "source=expired");
    assert!(expired.contains("capacity=0 "), "{expired}");
    signal(&server.0, libc::SIGCONT);
    signal(&cli.0, libc::SIGINT);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let status = loop {
        if let Some(s) = cli.0.try_wait().unwrap() {
            break s;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the CLI ignored SIGINT"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    assert!(status.success(), "{status:?}");
    std::fs::remove_dir_all(&dir).unwrap();
}
