//! The admin HTTP API: changes are validated, written to the config file
//! (so a restart keeps them) and applied keeping bucket state.

use std::sync::Arc;

use tollgate::ManualClock;
use tollgate_quota::{Admin, AllowRequest, Quota, QuotaConfig, QuotaLimits, Status};

#[path = "common/admin_api.rs"]
mod admin_api;

use admin_api::http1::http;
use admin_api::{on_bucket, serve};

const CONFIG: &str =
    "metrics_enabled: true\nnamespaces:\n  svc:\n    buckets:\n      db: {size: 2, fill_rate: 2}\n";

/// An admin API over `CONFIG` in a new directory (removed when the guard
/// drops): the directory, the config file, the quota and the address.
async fn start() -> (tempfile::TempDir, std::path::PathBuf, Arc<Quota>, String) {
    let dir = tempfile::Builder::new()
        .prefix("tollgate-quota-admin-")
        .tempdir()
        .unwrap();
    let path = dir.path().join("quota.yaml");
    std::fs::write(&path, CONFIG).unwrap();
    let quota = Arc::new(Quota::new(
        QuotaConfig::from_file(&path).unwrap(),
        QuotaLimits::default(),
        Arc::new(ManualClock::new()),
    ));
    let admin = Admin::new(Arc::clone(&quota), path.clone()).unwrap();
    let addr = serve(Arc::new(admin)).await;
    (dir, path, quota, addr)
}

#[tokio::test]
async fn admin_changes_are_validated_persisted_and_keep_state() {
    let (dir, path, quota, addr) = start().await;

    let allow = |b: &str, n| {
        quota
            .allow(&AllowRequest::new("svc", b, n).max_wait_millis(0))
            .status
    };
    assert_eq!(allow("db", 2), Status::Ok); // db is now empty
    assert_eq!(allow("cache", 1), Status::RejectedNoBucket);

    // Add a bucket: served at once, written to the file, db still empty.
    let (code, _) = on_bucket(
        &addr,
        "PUT",
        "svc",
        "cache",
        r#"{"size": 5, "fill_rate": 5}"#,
    )
    .await;
    assert_eq!(code, 200);
    assert_eq!(allow("cache", 5), Status::Ok);
    // Still empty: one token borrowed, then refused.
    assert_eq!(allow("db", 1), Status::Ok);
    assert_eq!(allow("db", 1), Status::RejectedTimeout);
    let on_disk = QuotaConfig::from_file(&path).unwrap();
    assert_eq!(on_disk.namespaces["svc"].buckets["cache"].size, 5);
    assert_eq!(on_disk.namespaces["svc"].buckets["db"].size, 2);

    // An invalid change names the field and changes nothing.
    let (code, body) = on_bucket(&addr, "PUT", "svc", "cache", r#"{"size": -1}"#).await;
    assert_eq!(code, 400);
    assert!(
        body.contains("namespace \\\"svc\\\": bucket \\\"cache\\\": size"),
        "{body}"
    );
    assert_eq!(QuotaConfig::from_file(&path).unwrap(), on_disk);
    let (code, _) = on_bucket(&addr, "PUT", "svc", "cache", r#"{"sise": 1}"#).await;
    assert_eq!(code, 400);
    let (code, _) = on_bucket(&addr, "PUT", &"s".repeat(257), "x", "{}").await;
    assert_eq!(code, 400);

    // A new namespace, listed; then deletions.
    let (code, _) = http(
        &addr,
        "PUT",
        "/api/admin/namespaces/logins",
        r#"{"max_dynamic_buckets": 10, "dynamic_bucket_template": {"size": 1}}"#,
    )
    .await;
    assert_eq!(code, 200);
    assert_eq!(
        quota.allow(&AllowRequest::new("logins", "u1", 1)).status,
        Status::Ok
    );
    let (code, body) = http(&addr, "GET", "/api/admin/config", "").await;
    assert_eq!(code, 200);
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["namespaces"]["logins"]["max_dynamic_buckets"], 10);
    assert_eq!(v["metrics_enabled"], true);
    let (code, _) = on_bucket(&addr, "DELETE", "svc", "cache", "").await;
    assert_eq!(code, 200);
    assert_eq!(allow("cache", 1), Status::RejectedNoBucket);
    let (code, _) = on_bucket(&addr, "DELETE", "svc", "cache", "").await;
    assert_eq!(code, 404);
    let (code, _) = http(&addr, "DELETE", "/api/admin/namespaces/logins", "").await;
    assert_eq!(code, 200);
    assert_eq!(
        quota.allow(&AllowRequest::new("logins", "u1", 1)).status,
        Status::RejectedNoBucket
    );
    // What a restart would load.
    let restarted = QuotaConfig::from_file(&path).unwrap();
    assert!(!restarted.namespaces.contains_key("logins"));
    assert_eq!(restarted.namespaces["svc"].buckets.len(), 1);
    drop(dir);
}

/// A full disk (the temporary file is `/dev/full`): the change is refused,
/// the file keeps the old document, nothing is applied, and no temporary
/// file is left behind; once there is room the same change goes through.
#[tokio::test]
async fn a_full_disk_refuses_the_change_and_keeps_the_old_document() {
    let (dir, path, quota, addr) = start().await;
    let tmp = dir.path().join("quota.tmp");
    std::os::unix::fs::symlink("/dev/full", &tmp).unwrap();

    let cache = r#"{"size": 5, "fill_rate": 5}"#;
    let (code, body) = on_bucket(&addr, "PUT", "svc", "cache", cache).await;
    assert_eq!(code, 500, "{body}");
    assert!(body.contains("No space left on device"), "{body}");
    assert!(body.contains("nothing changed"), "{body}");
    assert_eq!(std::fs::read_to_string(&path).unwrap(), CONFIG);
    assert!(
        std::fs::symlink_metadata(&tmp).is_err(),
        "the temporary file is removed"
    );
    let allow = |b: &str| {
        quota
            .allow(&AllowRequest::new("svc", b, 1).max_wait_millis(0))
            .status
    };
    assert_eq!(allow("cache"), Status::RejectedNoBucket);

    let (code, body) = on_bucket(&addr, "PUT", "svc", "cache", cache).await;
    assert_eq!(code, 200, "{body}");
    assert_eq!(allow("cache"), Status::Ok);
    let on_disk = QuotaConfig::from_file(&path).unwrap();
    assert_eq!(on_disk.namespaces["svc"].buckets["cache"].size, 5);
    drop(dir);
}
