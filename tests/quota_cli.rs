//! `tollgate quota` starts from a reference-format YAML file, answers
//! Allow over gRPC, and refuses a bad file with an error naming the field.

#[path = "common/cli.rs"]
mod cli;

use tollgate::quota::pb::quota_service_client::QuotaServiceClient;
use tollgate::quota::pb::{allow_response, AllowRequest};

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
    let mut server = cli::start(cli::on_free_ports("quota").arg("--config").arg(&path));
    let addr = tokio::task::block_in_place(|| server.logged_addr("quota gRPC listening"));
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
