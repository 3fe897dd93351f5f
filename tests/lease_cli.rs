//! `tollgate lease` prints each lease as it refreshes, then releases it.

use std::process::Command;
use std::sync::Arc;

use tollgate::doorman::clock::SystemClock;
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
        Arc::new(SystemClock),
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
