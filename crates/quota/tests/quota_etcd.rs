//! The admin API's changes kept in a real etcd: a restarted server (with
//! its file lost or stale) loads them back; an invalid stored document is
//! refused with the field named; with etcd down a change answers 503 and
//! nothing is applied.
//!
//! Starts `etcd` (Debian's `etcd-server`: `/usr/bin/etcd`) on free ports
//! with a temporary data directory, as `crates/cli/tests/doorman_etcd.rs` does.

use std::path::PathBuf;
use std::sync::Arc;

use tollgate::ManualClock;
use tollgate_quota::{
    load_config, Admin, AdminError, AllowRequest, Overlay, Quota, QuotaConfig, QuotaLimits, Status,
};

use tollgate_service::EtcdKey;
use tollgate_testkit::etcd::start_etcd;

#[path = "common/admin_api.rs"]
mod admin_api;

use admin_api::{on_bucket, serve};

fn temp_dir(what: &str) -> PathBuf {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    let dir = std::env::temp_dir().join(format!(
        "tollgate-quota-{what}-{}-{nanos}",
        std::process::id()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

const CONFIG: &str = "namespaces:\n  svc:\n    buckets:\n      db: {size: 2, fill_rate: 2}\n";

/// A quota server's state read from a file holding `CONFIG`.
fn quota(path: &PathBuf) -> Arc<Quota> {
    std::fs::write(path, CONFIG).unwrap();
    Arc::new(Quota::new(
        QuotaConfig::from_file(path).unwrap(),
        QuotaLimits::default(),
        Arc::new(ManualClock::new()),
    ))
}

fn allow(quota: &Quota, bucket: &str, n: i64) -> Status {
    quota
        .allow(&AllowRequest::new("svc", bucket, n).max_wait_millis(0))
        .status
}

#[tokio::test]
async fn admin_changes_survive_a_restart_through_etcd() {
    let etcd = start_etcd();
    let dir = temp_dir("admin-etcd");
    let store = EtcdKey::new(
        std::slice::from_ref(&etcd.endpoint),
        "/tollgate/quota",
        None,
    )
    .unwrap();
    assert_eq!(store.load().await.unwrap(), None);

    // First start: the key is absent, so the local changes (none) are
    // stored.
    let first = dir.join("first.yaml");
    let q1 = quota(&first);
    let admin = Admin::with_etcd(Arc::clone(&q1), first.clone(), store.clone())
        .await
        .unwrap();
    let stored = store.load().await.unwrap().unwrap();
    assert_eq!(Overlay::from_yaml(&stored).unwrap(), Overlay::default());
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
    assert_eq!(allow(&q1, "cache", 5), Status::Ok);
    let stored = Overlay::from_yaml(&store.load().await.unwrap().unwrap()).unwrap();
    assert_eq!(stored.changes().len(), 1);
    assert_eq!(stored, Overlay::read(&Overlay::path_for(&first)).unwrap());
    assert_eq!(std::fs::read_to_string(&first).unwrap(), CONFIG);

    // Adding a bucket the two failures below must both refuse.
    let put_queue = || {
        on_bucket(
            &addr,
            "PUT",
            "svc",
            "queue",
            r#"{"size": 1, "fill_rate": 1}"#,
        )
    };

    // The overlay cannot be written (a full disk): etcd gets the previous
    // changes back, so the refused change is in neither.
    let tmp = dir.join("first.admin.tmp");
    std::os::unix::fs::symlink("/dev/full", &tmp).unwrap();
    let (code, body) = put_queue().await;
    assert_eq!(code, 500, "{body}");
    assert!(
        body.contains("No space left on device (os error 28); nothing changed"),
        "{body}"
    );
    let kept = Overlay::from_yaml(&store.load().await.unwrap().unwrap()).unwrap();
    assert_eq!(kept, stored);
    assert_eq!(allow(&q1, "queue", 1), Status::RejectedNoBucket);
    assert!(std::fs::symlink_metadata(&tmp).is_err());

    // A restart without the local changes (lost, or another server's): the
    // changes in etcd win, are applied and written beside the file.
    let second = dir.join("second.yaml");
    let q2 = quota(&second);
    assert_eq!(allow(&q2, "cache", 1), Status::RejectedNoBucket);
    let _admin2 = Admin::with_etcd(Arc::clone(&q2), second.clone(), store.clone())
        .await
        .unwrap();
    assert_eq!(allow(&q2, "cache", 5), Status::Ok);
    assert_eq!(allow(&q2, "db", 2), Status::Ok);
    let on_disk = load_config(&second).unwrap();
    assert_eq!(on_disk.namespaces["svc"].buckets["cache"].size, 5);
    assert_eq!(std::fs::read_to_string(&second).unwrap(), CONFIG);

    // Invalid changes in etcd are refused at start, naming the field.
    store
        .save("changes:\n- {op: put_bucket, namespace: svc, bucket: db, config: {size: -1}}\n")
        .await
        .unwrap();
    let third = dir.join("third.yaml");
    let err = Admin::with_etcd(quota(&third), third.clone(), store.clone())
        .await
        .unwrap_err();
    assert!(matches!(err, AdminError::Config(_)), "{err:?}");
    assert!(err.to_string().contains("bucket \"db\": size"), "{err}");

    // etcd down: the running admin refuses changes with 503 and applies
    // nothing; a new one cannot start.
    drop(etcd);
    let (code, body) = put_queue().await;
    assert_eq!(code, 503, "{body}");
    assert!(body.contains("etcd put"), "{body}");
    assert_eq!(allow(&q1, "queue", 1), Status::RejectedNoBucket);
    let err = Admin::with_etcd(quota(&first), first.clone(), store)
        .await
        .unwrap_err();
    assert!(matches!(err, AdminError::Etcd(_)), "{err:?}");
    std::fs::remove_dir_all(&dir).unwrap();
}
