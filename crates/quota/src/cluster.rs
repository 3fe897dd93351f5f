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
//! configured rate. The buckets shared are the named buckets, the default
//! buckets and the live dynamic buckets: each dynamic name is a resource
//! `namespace:name` of its own, which the lease server's configuration
//! covers with a glob template (`namespace:*`) whose capacity is the
//! template's fill rate. In cluster mode a new dynamic bucket starts at a
//! share of zero until its first lease ([`Registry::lease_dynamic_buckets`]),
//! and a reaped one gives its resource back. A resource per live name costs
//! the lease server one entry per name and server, bounded by the
//! namespaces' dynamic-bucket caps and idle reaping.
//!
//! [`Registry::lease_dynamic_buckets`]: super::Registry::lease_dynamic_buckets

use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tollgate_doorman::{Client, ExpiryMode, ReleaseError, Resource, ResourceOptions};

use super::config::{QuotaConfig, DEFAULT_BUCKET_NAME, GLOBAL_NAMESPACE};
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

/// The shared buckets: those of the configuration (named and default)
/// and the live dynamic ones, as (namespace, name).
fn shared_buckets(config: &QuotaConfig, quota: &Quota) -> Vec<(String, String)> {
    let mut out = Vec::new();
    if config.global_default_bucket.is_some() {
        out.push((GLOBAL_NAMESPACE.into(), DEFAULT_BUCKET_NAME.into()));
    }
    for (ns, n) in &config.namespaces {
        if n.default_bucket.is_some() {
            out.push((ns.clone(), DEFAULT_BUCKET_NAME.into()));
        }
        for name in n.buckets.keys() {
            out.push((ns.clone(), name.clone()));
        }
    }
    out.extend(quota.registry().dynamic_buckets());
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
/// A server that stops should give its leases back, so that the others
/// get its share at once rather than when its leases expire: a
/// [`QuotaServer`](crate::QuotaServer) in cluster mode releases them on
/// shutdown.
///
/// # Cancel safety
///
/// Dropping the future stops the updates and drops the leases' resources
/// (the lease client releases them while it runs); the buckets keep their
/// last share.
pub async fn run(quota: Arc<Quota>, client: Client, options: ClusterOptions) {
    run_until(quota, client, options, std::future::pending()).await;
}

/// As [`run`], until `shutdown` completes; then releases every lease
/// held, all at once, and returns when the lease servers have
/// acknowledged (or each release has failed, after the lease client's
/// deadline): how many were released, and the errors of those that were
/// not.
///
/// # Cancel safety
///
/// As [`run`]. Dropping it while it releases leaves the releases not yet
/// sent to the lease client's task.
pub(crate) async fn run_until(
    quota: Arc<Quota>,
    client: Client,
    options: ClusterOptions,
    shutdown: impl Future<Output = ()>,
) -> Released {
    quota.registry().lease_dynamic_buckets(true);
    let mut shared: HashMap<(String, String), Shared> = HashMap::new();
    let mut tick = tokio::time::interval(options.interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut last = tokio::time::Instant::now();
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            () = &mut shutdown => break,
        }
        let now = tokio::time::Instant::now();
        let dt = (now - last).as_secs_f64().max(1e-3);
        last = now;
        update(&quota, &client, &options, &mut shared, dt);
    }
    let mut releases = tokio::task::JoinSet::new();
    for ((ns, name), entry) in shared {
        releases.spawn(async move { (resource_id(&ns, &name), entry.resource.release().await) });
    }
    let mut released = Released::default();
    while let Some(done) = releases.join_next().await {
        match done {
            Ok((_, Ok(()))) => released.released += 1,
            Ok((id, Err(e))) => released.failed.push((id, e)),
            Err(e) => std::panic::resume_unwind(e.into_panic()),
        }
    }
    released
}

/// What [`run_until`] gave back on shutdown.
#[derive(Debug, Default)]
pub(crate) struct Released {
    /// Leases released and acknowledged.
    pub(crate) released: usize,
    /// Each lease whose release failed (the lease server lets it expire):
    /// its resource id and why.
    pub(crate) failed: Vec<(String, ReleaseError)>,
}

/// One round: sends each shared bucket's demand since the last round
/// (`dt` seconds ago) as its wants and applies its lease.
fn update(
    quota: &Quota,
    client: &Client,
    options: &ClusterOptions,
    shared: &mut HashMap<(String, String), Shared>,
    dt: f64,
) {
    let config = quota.registry().config();
    let wanted = shared_buckets(&config, quota);
    let wanted_set: HashSet<&(String, String)> = wanted.iter().collect();
    // Forget buckets gone from the configuration, and reaped ones.
    shared.retain(|key, _| {
        let keep = wanted_set.contains(key);
        if !keep {
            let (ns, name) = key;
            quota.registry().set_share(ns, name, None);
        }
        keep
    });
    drop(wanted_set);
    for (ns, name) in wanted {
        let demand_now = quota.registry().demand(&ns, &name);
        let key = (ns.clone(), name.clone());
        let entry = match shared.get_mut(&key) {
            Some(e) => e,
            None => {
                let options = ResourceOptions::new(options.min_wants).mode(ExpiryMode::Pessimistic);
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
