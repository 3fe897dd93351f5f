//! Cluster mode: several quota servers share each bucket's rate through
//! Doorman leases, so Allow is answered from local buckets with no
//! per-request round trip, and the servers' rates never add up to more
//! than the configured one.
//!
//! # Implementation notes
//!
//! Each server runs [`run`] with a lease [`Client`] of a Doorman server
//! (tollgate's own, which may be elected on etcd) whose configuration gives
//! every bucket a resource `namespace:bucket` with the bucket's fill rate as
//! capacity. Every `interval` the task measures each bucket's demand (tokens
//! asked per second, granted or not, since its previous look) and sends it
//! as the resource's wants; the lease it holds becomes the bucket's fill
//! rate, and the bucket's size shrinks in the same proportion, through
//! [`Registry::set_share`](super::Registry::set_share). The lease server's
//! algorithm (fair share or proportional share) divides the rate by demand,
//! so the busy server gets the larger share at the next refresh.
//!
//! Resources are asked for in pessimistic expiry mode: before its first
//! lease, and when a lease expires unrenewed, a server's share is zero
//! rather than a guess, so the sum over servers stays at or below the
//! configured rate. The buckets shared are the named buckets and the
//! default buckets; dynamic buckets stay local to each server (one lease
//! per dynamic name would cost a resource per name on the lease server).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use crate::doorman::client::{Client, ExpiryMode, Resource, ResourceOptions};

use super::config::{Config, DEFAULT_BUCKET_NAME, GLOBAL_NAMESPACE};
use super::service::Quota;

/// Options of cluster mode.
#[derive(Debug, Clone, Copy)]
pub struct ClusterOptions {
    interval: Duration,
    min_wants: f64,
}

impl Default for ClusterOptions {
    fn default() -> ClusterOptions {
        ClusterOptions {
            interval: Duration::from_secs(1),
            min_wants: 1.0,
        }
    }
}

impl ClusterOptions {
    /// How often demand is measured and sent, and leases applied (default
    /// 1 s).
    #[must_use]
    pub fn interval(mut self, every: Duration) -> ClusterOptions {
        self.interval = every.max(Duration::from_millis(10));
        self
    }

    /// The least wants sent for a bucket, so an idle server keeps a small
    /// share to serve its first requests (default 1 token per second).
    #[must_use]
    pub fn min_wants(mut self, wants: f64) -> ClusterOptions {
        if wants.is_finite() && wants >= 0.0 {
            self.min_wants = wants;
        }
        self
    }
}

/// The shared buckets of a configuration: (namespace, name, fill rate).
fn shared_buckets(config: &Config) -> Vec<(String, String, f64)> {
    let mut out = Vec::new();
    if let Some(b) = &config.global_default_bucket {
        out.push((
            GLOBAL_NAMESPACE.into(),
            DEFAULT_BUCKET_NAME.into(),
            b.fill_rate,
        ));
    }
    for (ns, n) in &config.namespaces {
        if let Some(b) = &n.default_bucket {
            out.push((ns.clone(), DEFAULT_BUCKET_NAME.into(), b.fill_rate));
        }
        for (name, b) in &n.buckets {
            out.push((ns.clone(), name.clone(), b.fill_rate));
        }
    }
    out
}

/// One shared bucket's lease and demand bookkeeping.
#[derive(Debug)]
struct Shared {
    resource: Resource,
    last_demand: u64,
}

/// The resource id of a bucket on the lease server.
pub fn resource_id(namespace: &str, bucket: &str) -> String {
    format!("{namespace}:{bucket}")
}

/// Keeps `quota`'s shared buckets at their lease share of the rate, using
/// `client`'s leases, until the task is dropped.
///
/// # Cancel safety
///
/// Dropping the future stops the updates and drops the leases' resources
/// (the lease client releases them); the buckets keep their last share.
pub async fn run(quota: Arc<Quota>, client: Client, options: ClusterOptions) {
    let mut shared: HashMap<(String, String), Shared> = HashMap::new();
    let mut tick = tokio::time::interval(options.interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut last = tokio::time::Instant::now();
    loop {
        tick.tick().await;
        let now = tokio::time::Instant::now();
        let dt = (now - last).as_secs_f64().max(1e-3);
        last = now;
        let config = Arc::clone(&*quota.registry().config());
        let wanted = shared_buckets(&config);
        // Forget buckets gone from the configuration.
        shared.retain(|(ns, name), _| {
            let keep = wanted.iter().any(|(n, b, _)| n == ns && b == name);
            if !keep {
                quota.registry().set_share(ns, name, None);
            }
            keep
        });
        for (ns, name, _rate) in wanted {
            let demand_now = quota.registry().demand(&ns, &name);
            let key = (ns.clone(), name.clone());
            let entry = match shared.get_mut(&key) {
                Some(e) => e,
                None => {
                    let options =
                        ResourceOptions::new(options.min_wants).mode(ExpiryMode::Pessimistic);
                    match client.resource(resource_id(&ns, &name), options) {
                        Ok(resource) => shared.entry(key).or_insert(Shared {
                            resource,
                            last_demand: demand_now,
                        }),
                        Err(e) => {
                            tracing::error!(namespace = ns, bucket = name, error = %e, "cannot lease the bucket's rate");
                            continue;
                        }
                    }
                }
            };
            // A reaped and remade bucket restarts its counter.
            let asked = demand_now
                .checked_sub(entry.last_demand)
                .unwrap_or(demand_now);
            entry.last_demand = demand_now;
            let wants = (asked as f64 / dt).max(options.min_wants);
            if let Err(e) = entry.resource.set_wants(wants) {
                tracing::error!(namespace = ns, bucket = name, error = %e, "cannot update wants");
            }
            let rate = entry.resource.capacity();
            quota.registry().set_share(&ns, &name, Some(rate));
        }
    }
}
