//! `tollgate serve` starts with one command (no config) and answers gRPC.

use std::io::{BufRead as _, BufReader};
use std::process::{Child, Command, Stdio};

use tollgate::doorman::pb;
use tollgate::doorman::pb::capacity_client::CapacityClient;

/// Kills the server when the test ends, passing or not.
struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The value of `addr=` on the first log line containing `marker`.
fn logged_addr(lines: &mut impl Iterator<Item = String>, marker: &str) -> String {
    for line in lines.by_ref() {
        // Strip ANSI colour codes, if any.
        let mut plain = String::new();
        let mut in_escape = false;
        for c in line.chars() {
            match (in_escape, c) {
                (false, '\x1b') => in_escape = true,
                (true, 'm') => in_escape = false,
                (false, c) => plain.push(c),
                _ => {}
            }
        }
        if plain.contains(marker) {
            let at = plain.find("addr=").expect("the log line names its address");
            return plain[at + 5..]
                .split_whitespace()
                .next()
                .unwrap()
                .to_owned();
        }
    }
    panic!("the server exited before logging {marker:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_without_config_grants_capacity() {
    let mut child = Command::new(env!("CARGO_BIN_EXE_tollgate"))
        .args([
            "serve",
            "--host",
            "127.0.0.1",
            "--port",
            "0",
            "--debug-port",
            "0",
        ])
        .env("NO_COLOR", "1")
        .env("RUST_LOG", "info")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("tollgate runs");
    let log = child.stderr.take().unwrap();
    let _guard = Killed(child);
    let mut lines = BufReader::new(log).lines().map_while(Result::ok);
    let addr = tokio::task::block_in_place(|| logged_addr(&mut lines, "gRPC listening"));

    let mut client = CapacityClient::connect(format!("http://{addr}"))
        .await
        .unwrap();
    let d = client
        .discovery(pb::DiscoveryRequest {})
        .await
        .unwrap()
        .into_inner();
    assert!(d.is_master);
    assert_eq!(d.mastership.master_address.as_deref(), Some(addr.as_str()));
    let r = client
        .get_capacity(pb::GetCapacityRequest {
            client_id: "c".into(),
            resource: vec![pb::ResourceRequest {
                resource_id: "anything".into(),
                priority: 0,
                has: None,
                wants: 10.0,
            }],
        })
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
