//! The quota service in process: a configuration in the reference
//! quotaservice's YAML format, and Allow answers on a manual clock.
//!
//! `cargo run --example quota_allow`

use std::sync::Arc;
use std::time::Duration;

use tollgate::ManualClock;
use tollgate_quota::{AllowRequest, Quota, QuotaConfig, QuotaLimits};

const CONFIG: &str = "\
namespaces:
  Pinky_TheBrain:
    buckets:
      UserService_getUser: {size: 2, fill_rate: 10, wait_timeout_millis: 250}
  TheBrain_userLogins:
    max_dynamic_buckets: 1000
    dynamic_bucket_template: {size: 1, fill_rate: 0.2, max_idle_millis: 60000}
";

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let clock = ManualClock::new();
    let quota = Quota::new(
        QuotaConfig::from_yaml(CONFIG)?,
        QuotaLimits::default(),
        Arc::new(clock.clone()),
    );
    let show = |label: &str, ns: &str, bucket: &str| {
        let d = quota.allow(&AllowRequest::new(ns, bucket, 1));
        println!(
            "{label:>8}: {ns}:{bucket} -> {} (granted {}, wait {} ms)",
            d.status.name(),
            d.tokens_granted,
            d.wait_millis()
        );
    };
    for i in 0..5 {
        show(
            &format!("call {i}"),
            "Pinky_TheBrain",
            "UserService_getUser",
        );
    }
    clock.advance(Duration::from_millis(150));
    show("+150 ms", "Pinky_TheBrain", "UserService_getUser");
    // One login per 5 s per user, each user a dynamic bucket.
    show("login", "TheBrain_userLogins", "user42");
    show("login", "TheBrain_userLogins", "user42");
    show("login", "TheBrain_userLogins", "user7");
    show("unknown", "Pinky_Elsewhere", "x");
    Ok(())
}
