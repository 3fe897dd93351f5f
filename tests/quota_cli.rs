//! `tollgate quota` starts from a reference-format YAML file, answers
//! Allow over gRPC, and refuses a bad file with an error naming the field.

use std::io::{BufRead as _, BufReader};
use std::process::{Child, Command, Stdio};

use tollgate::quota::pb::quota_service_client::QuotaServiceClient;
use tollgate::quota::pb::{allow_response, AllowRequest};

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

fn config_file(name: &str, yaml: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("tollgate-quota-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(name);
    std::fs::write(&path, yaml).unwrap();
    path
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quota_serves_allow() {
    let path = config_file(
        "ok.yaml",
        "metrics_enabled: true\nnamespaces:\n  svc:\n    buckets:\n      db: {size: 2, fill_rate: 2}\n",
    );
    let mut child = Command::new(env!("CARGO_BIN_EXE_tollgate"))
        .args([
            "quota",
            "--host",
            "127.0.0.1",
            "--port",
            "0",
            "--debug-port",
            "0",
            "--config",
        ])
        .arg(&path)
        .env("NO_COLOR", "1")
        .env("RUST_LOG", "info")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("tollgate runs");
    let log = child.stderr.take().unwrap();
    let _guard = Killed(child);
    let mut lines = BufReader::new(log).lines().map_while(Result::ok);
    let addr = tokio::task::block_in_place(|| logged_addr(&mut lines, "quota gRPC listening"));
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
    let path = config_file(
        "bad.yaml",
        "namespaces:\n  svc:\n    buckets:\n      db: {max_debt_millis: -1}\n",
    );
    let out = Command::new(env!("CARGO_BIN_EXE_tollgate"))
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
