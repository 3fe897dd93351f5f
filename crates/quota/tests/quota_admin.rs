//! The admin HTTP API: changes are validated, written beside the config
//! file (so a restart keeps them; the operator's file is never written)
//! and applied keeping bucket state.

use std::sync::Arc;

use tollgate::ManualClock;
use tollgate_quota::{load_config, Admin, AllowRequest, Quota, QuotaConfig, QuotaLimits, Status};

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

    // Add a bucket: served at once, kept beside the file, db still empty.
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
    let on_disk = load_config(&path).unwrap();
    assert_eq!(on_disk.namespaces["svc"].buckets["cache"].size, 5);
    assert_eq!(on_disk.namespaces["svc"].buckets["db"].size, 2);
    assert_eq!(std::fs::read_to_string(&path).unwrap(), CONFIG);

    // An invalid change names the field and changes nothing.
    let (code, body) = on_bucket(&addr, "PUT", "svc", "cache", r#"{"size": -1}"#).await;
    assert_eq!(code, 400);
    assert!(
        body.contains("namespace \\\"svc\\\": bucket \\\"cache\\\": size"),
        "{body}"
    );
    assert_eq!(load_config(&path).unwrap(), on_disk);
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
    let restarted = load_config(&path).unwrap();
    assert_eq!(std::fs::read_to_string(&path).unwrap(), CONFIG);
    assert!(!restarted.namespaces.contains_key("logins"));
    assert_eq!(restarted.namespaces["svc"].buckets.len(), 1);
    drop(dir);
}

/// A full disk (the overlay's temporary file is `/dev/full`): the change
/// is refused, nothing is written or applied, and no temporary file is
/// left behind; once there is room the same change goes through.
#[tokio::test]
async fn a_full_disk_refuses_the_change_and_keeps_the_old_document() {
    let (dir, path, quota, addr) = start().await;
    let tmp = dir.path().join("quota.admin.tmp");
    std::os::unix::fs::symlink("/dev/full", &tmp).unwrap();

    let cache = r#"{"size": 5, "fill_rate": 5}"#;
    let (code, body) = on_bucket(&addr, "PUT", "svc", "cache", cache).await;
    assert_eq!(code, 500, "{body}");
    assert!(body.contains("No space left on device"), "{body}");
    assert!(body.contains("nothing changed"), "{body}");
    assert_eq!(std::fs::read_to_string(&path).unwrap(), CONFIG);
    assert!(!dir.path().join("quota.admin.yaml").exists());
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
    let on_disk = load_config(&path).unwrap();
    assert_eq!(on_disk.namespaces["svc"].buckets["cache"].size, 5);
    drop(dir);
}

/// The operator's file, comments, key order and `50` included, is never
/// written: the changes go to `quota.admin.yaml` beside it, read on top of
/// it, and the operator's own later edits to it stay in force under them.
#[tokio::test]
async fn the_operator_s_file_is_kept_as_written() {
    let dir = tempfile::Builder::new()
        .prefix("tollgate-quota-admin-")
        .tempdir()
        .unwrap();
    let path = dir.path().join("quota.yaml");
    let written = "# Quotas for the svc team.\nnamespaces:\n  svc:\n    buckets:\n      # the database\n      db: {fill_rate: 50, size: 100}\n";
    std::fs::write(&path, written).unwrap();
    let quota = Arc::new(Quota::new(
        load_config(&path).unwrap(),
        QuotaLimits::default(),
        Arc::new(ManualClock::new()),
    ));
    let admin = Admin::new(Arc::clone(&quota), path.clone()).unwrap();
    let addr = serve(Arc::new(admin)).await;
    let (code, _) = on_bucket(
        &addr,
        "PUT",
        "svc",
        "cache",
        r#"{"size": 5, "fill_rate": 5}"#,
    )
    .await;
    assert_eq!(code, 200);
    let (code, _) = on_bucket(&addr, "DELETE", "svc", "db", "").await;
    assert_eq!(code, 200);
    assert_eq!(std::fs::read_to_string(&path).unwrap(), written);
    let overlay = std::fs::read_to_string(dir.path().join("quota.admin.yaml")).unwrap();
    assert!(
        overlay.ends_with(
            "changes:\n- op: put_bucket\n  namespace: svc\n  bucket: cache\n  config:\n    size: 5\n    fill_rate: 5.0\n- op: delete_bucket\n  namespace: svc\n  bucket: db\n"
        ),
        "{overlay}"
    );
    // The operator adds a bucket by hand; the next change keeps it.
    std::fs::write(&path, format!("{written}      queue: {{size: 3}}\n")).unwrap();
    let (code, _) = on_bucket(&addr, "PUT", "svc", "cache", r#"{"size": 7}"#).await;
    assert_eq!(code, 200);
    let config = load_config(&path).unwrap();
    let buckets = &config.namespaces["svc"].buckets;
    assert_eq!(
        buckets.keys().map(String::as_str).collect::<Vec<_>>(),
        ["cache", "queue"]
    );
    assert_eq!(buckets["cache"].size, 7);
    assert_eq!(
        quota.allow(&AllowRequest::new("svc", "queue", 3)).status,
        Status::Ok
    );
    // The later put replaced the earlier one in the overlay.
    let overlay = std::fs::read_to_string(dir.path().join("quota.admin.yaml")).unwrap();
    assert_eq!(overlay.matches("op: put_bucket").count(), 1, "{overlay}");
}
