//! The live buckets: lookup in the reference quotaservice's order, lazy creation under the
//! dynamic-bucket caps, reload that keeps state, and idle removal.
//!
//! # Implementation notes
//!
//! Buckets live in a map keyed by (namespace, bucket), split into
//! [`SHARDS`] shards each behind its own `RwLock`, so that concurrent
//! lookups of different buckets rarely share a lock and never take one
//! exclusively. A key is stored as one `namespace:bucket` string, but
//! hashed and compared as the pair, so that a lookup borrows the request's
//! two names (`&dyn Pair`, which the stored [`Key`] borrows as) and the
//! hit path allocates nothing. A bucket is created on first use; its
//! [`TokenBucket`] owns no thread, so a hundred thousand dynamic buckets cost
//! memory (a few hundred bytes each) and nothing else.
//!
//! The configuration sits behind one `RwLock`. A request holds its read
//! guard from lookup to reservation; [`Registry::reload`] takes the write
//! guard, swaps the configuration and walks every bucket before letting
//! requests in again, so no request creates a bucket from a configuration
//! that is gone. Locks are always taken in the order configuration, shard,
//! dynamic counts.
//!
//! Dynamic buckets are counted per namespace and in all; the counts only
//! change under a shard's write lock together with the map, so they are
//! exact. Reaching a namespace's cap, or the server-wide one, refuses new
//! names until idle buckets are removed.

use std::collections::HashMap;
use std::hash::BuildHasher;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex, RwLock, RwLockReadGuard};

use super::config::{BucketConfig, QuotaConfig, DEFAULT_BUCKET_NAME, GLOBAL_NAMESPACE};
use super::metrics::QuotaMetrics;
use tollgate::Clock;
use tollgate::TokenBucket;
use tollgate_service::{LockUnpoisoned, RwLockUnpoisoned};

mod key;
mod limits;
mod lookup;
mod slot;

use key::{key, Key, Pair};
pub use limits::QuotaLimits;
pub(crate) use limits::TooManyBuckets;
pub use lookup::{resolve, BucketKind};
pub(crate) use slot::LiveBucket;
use slot::SlotCounters;

/// How many shards the bucket map is split into.
pub(crate) const SHARDS: usize = 64;

/// Live dynamic buckets, per namespace and in all.
#[derive(Debug, Default)]
struct DynamicCounts {
    per_namespace: HashMap<Box<str>, u64>,
    total: u64,
}

type Shard = HashMap<Key, Arc<LiveBucket>>;

/// The settings of a bucket under `config`, or under its share if it has
/// one.
fn effective(config: &BucketConfig, share: Option<f64>) -> tollgate::BucketSettings {
    match share {
        Some(rate) => config.share_settings(rate),
        None => config.settings(),
    }
}

/// The live buckets and the configuration they follow.
#[derive(Debug)]
pub struct Registry {
    config: RwLock<Arc<QuotaConfig>>,
    shards: Box<[RwLock<Shard>]>,
    /// Live dynamic buckets.
    dynamic: Mutex<DynamicCounts>,
    hasher: std::collections::hash_map::RandomState,
    clock: Arc<dyn Clock>,
    limits: QuotaLimits,
    metrics: QuotaMetrics,
    /// Fill rates that replace the configured ones, by key (cluster mode).
    shares: RwLock<HashMap<String, f64>>,
    /// Cluster mode leases dynamic buckets: a new one starts at a share of
    /// zero until its lease is applied.
    lease_dynamic: AtomicBool,
    /// With a Redis store, the servers sharing the buckets: this server's
    /// own buckets (the fallback) fill at the rate divided by it; 1: the
    /// configured rate (Relaxed: set once, before the first request).
    divide_by: AtomicU32,
}

impl Registry {
    /// An empty registry following `config`.
    pub fn new(
        config: QuotaConfig,
        limits: QuotaLimits,
        clock: Arc<dyn Clock>,
        metrics: QuotaMetrics,
    ) -> Registry {
        Registry {
            config: RwLock::new(Arc::new(config)),
            shards: (0..SHARDS).map(|_| RwLock::new(HashMap::new())).collect(),
            dynamic: Mutex::new(DynamicCounts::default()),
            hasher: std::collections::hash_map::RandomState::new(),
            clock,
            limits,
            metrics,
            shares: RwLock::new(HashMap::new()),
            lease_dynamic: AtomicBool::new(false),
            divide_by: AtomicU32::new(1),
        }
    }

    /// Cluster mode: dynamic buckets made from now on start at a share of
    /// zero (the least rate, a size of one) until [`set_share`] gives them
    /// their lease, so a new name cannot be served at the full template
    /// rate by every server at once.
    ///
    /// [`set_share`]: Registry::set_share
    pub fn lease_dynamic_buckets(&self, on: bool) {
        // Relaxed: a flag read when a bucket is made; no other data hangs on it.
        self.lease_dynamic.store(on, Ordering::Relaxed);
    }

    /// This server's own buckets fill at their rate divided by `replicas`
    /// (the Redis store's fallback, see [`OnError::Local`]), unless a
    /// share replaces it.
    ///
    /// [`OnError::Local`]: crate::OnError::Local
    pub(crate) fn divide_rates(&self, replicas: u32) {
        // Relaxed: see the field.
        self.divide_by.store(replicas.max(1), Ordering::Relaxed);
    }

    /// The share of `bucket` this server fills at, with no lease share:
    /// its rate divided by the replicas, if more than one.
    fn divided(&self, bucket: &BucketConfig) -> Option<f64> {
        // Relaxed: see the field.
        let n = self.divide_by.load(Ordering::Relaxed);
        (n > 1).then(|| bucket.fill_rate / f64::from(n))
    }

    /// The live dynamic buckets as (namespace, name), in no order.
    pub fn dynamic_buckets(&self) -> Vec<(String, String)> {
        let mut out = Vec::new();
        for shard in self.shards.iter() {
            for (k, slot) in shard.read_unpoisoned().iter() {
                if slot.kind() == BucketKind::Dynamic {
                    let (ns, name) = k.pair();
                    out.push((ns.to_owned(), name.to_owned()));
                }
            }
        }
        out
    }

    /// The configuration in force, as a snapshot: a reload after this call
    /// does not change what it returns.
    pub fn config(&self) -> Arc<QuotaConfig> {
        Arc::clone(&self.config.read_unpoisoned())
    }

    /// The configuration, read-locked: hold the guard while using a bucket
    /// found under it, so that no reload changes the bucket meanwhile.
    pub(crate) fn config_locked(&self) -> RwLockReadGuard<'_, Arc<QuotaConfig>> {
        self.config.read_unpoisoned()
    }

    /// The shard holding (`namespace`, `name`).
    fn shard(&self, namespace: &str, name: &str) -> &RwLock<Shard> {
        &self.shards[(self.hasher.hash_one((namespace, name)) as usize) % SHARDS]
    }

    /// The live bucket kept under (`namespace`, `name`).
    fn find(&self, namespace: &str, name: &str) -> Option<Arc<LiveBucket>> {
        let pair: &dyn Pair = &(namespace, name);
        self.shard(namespace, name)
            .read_unpoisoned()
            .get(pair)
            .cloned()
    }

    /// The bucket kept under (`namespace`, `name`), created from `bucket` if
    /// it is not there. `config` must be the guard from
    /// [`Registry::config`].
    ///
    /// # Errors
    ///
    /// [`TooManyBuckets`] when a dynamic bucket would exceed its
    /// namespace's cap or the server-wide one.
    pub(crate) fn get_or_create(
        &self,
        config: &QuotaConfig,
        kind: BucketKind,
        namespace: &str,
        name: &str,
        bucket: &BucketConfig,
    ) -> Result<Arc<LiveBucket>, TooManyBuckets> {
        let shard = self.shard(namespace, name);
        let pair: &dyn Pair = &(namespace, name);
        if let Some(slot) = shard.read_unpoisoned().get(pair) {
            return Ok(Arc::clone(slot));
        }
        let mut map = shard.write_unpoisoned();
        if let Some(slot) = map.get(pair) {
            return Ok(Arc::clone(slot));
        }
        let k = Key::new(namespace, name);
        if kind == BucketKind::Dynamic {
            let mut counts = self.dynamic.lock_unpoisoned();
            self.room(&counts, config, namespace)?;
            *counts.per_namespace.entry(namespace.into()).or_insert(0) += 1;
            counts.total += 1;
        }
        let share = self
            .shares
            .read_unpoisoned()
            .get(k.as_str())
            .copied()
            .or_else(|| {
                (kind == BucketKind::Dynamic && self.lease_dynamic.load(Ordering::Relaxed))
                    .then_some(0.0)
            })
            .or_else(|| self.divided(bucket));
        let slot = Arc::new(LiveBucket::new(
            TokenBucket::with_clock(effective(bucket, share), Arc::clone(&self.clock)),
            kind,
            SlotCounters::new(&self.metrics, namespace),
        ));
        slot.set_max_idle(bucket.max_idle);
        map.insert(k, Arc::clone(&slot));
        self.metrics.created.with_label_values(&[namespace]).inc();
        self.metrics.buckets.inc();
        Ok(slot)
    }

    /// Whether [`get_or_create`](Registry::get_or_create) would find or
    /// create the bucket now, without creating it: `config` must be the
    /// guard from [`Registry::config`].
    ///
    /// # Errors
    ///
    /// [`TooManyBuckets`] when the bucket is a dynamic one not yet created
    /// and its namespace's cap or the server-wide one is reached.
    pub(crate) fn has_room(
        &self,
        config: &QuotaConfig,
        kind: BucketKind,
        namespace: &str,
        name: &str,
    ) -> Result<(), TooManyBuckets> {
        if kind != BucketKind::Dynamic || self.find(namespace, name).is_some() {
            return Ok(());
        }
        self.room(&self.dynamic.lock_unpoisoned(), config, namespace)
    }

    /// Whether `counts` leave room for one more dynamic bucket in
    /// `namespace`.
    fn room(
        &self,
        counts: &DynamicCounts,
        config: &QuotaConfig,
        namespace: &str,
    ) -> Result<(), TooManyBuckets> {
        let server = self.limits.max_dynamic_buckets;
        if counts.total >= server {
            return Err(TooManyBuckets {
                cap: server,
                server_wide: true,
            });
        }
        let own = config
            .namespaces
            .get(namespace)
            .map_or(0, |ns| ns.max_dynamic_buckets);
        let count = counts.per_namespace.get(namespace).copied().unwrap_or(0);
        if own > 0 && count >= own {
            return Err(TooManyBuckets {
                cap: own,
                server_wide: false,
            });
        }
        Ok(())
    }

    /// Counts a removed bucket.
    fn removed(&self, key: &Key, slot: &LiveBucket) {
        let (namespace, _) = key.pair();
        if slot.kind() == BucketKind::Dynamic {
            let mut counts = self.dynamic.lock_unpoisoned();
            counts.total = counts.total.saturating_sub(1);
            if let Some(count) = counts.per_namespace.get_mut(namespace) {
                *count = count.saturating_sub(1);
                if *count == 0 {
                    counts.per_namespace.remove(namespace);
                }
            }
        }
        self.metrics.removed.with_label_values(&[namespace]).inc();
        self.metrics.buckets.dec();
    }

    /// Replaces the configuration. Buckets that still resolve to the same
    /// kind keep their state (tokens and debt) under the new settings; the
    /// others are removed and made afresh on next use. Returns how many
    /// were removed.
    pub fn reload(&self, new: QuotaConfig) -> usize {
        let mut config = self.config.write_unpoisoned();
        let shares = self.shares.read_unpoisoned().clone();
        let mut removed = 0;
        for shard in self.shards.iter() {
            let mut map = shard.write_unpoisoned();
            map.retain(|k, slot| {
                let (namespace, name) = k.pair();
                let keep = match slot.kind() {
                    BucketKind::GlobalDefault => new.global_default_bucket.as_ref(),
                    BucketKind::NamespaceDefault => new
                        .namespaces
                        .get(namespace)
                        .and_then(|ns| ns.default_bucket.as_ref()),
                    BucketKind::Named => new
                        .namespaces
                        .get(namespace)
                        .and_then(|ns| ns.buckets.get(name)),
                    BucketKind::Dynamic => new
                        .namespaces
                        .get(namespace)
                        .filter(|ns| !ns.buckets.contains_key(name))
                        .and_then(|ns| ns.dynamic_bucket_template.as_ref()),
                };
                match keep {
                    Some(b) => {
                        let share = shares.get(k.as_str()).copied();
                        slot.bucket()
                            .set_settings(effective(b, share.or_else(|| self.divided(b))));
                        slot.set_max_idle(b.max_idle);
                        true
                    }
                    None => {
                        self.removed(k, slot);
                        removed += 1;
                        false
                    }
                }
            });
        }
        *config = Arc::new(new);
        removed
    }

    /// Removes the buckets idle longer than their max idle time; returns
    /// how many. A removed bucket is made afresh (full) on next use.
    pub fn reap(&self) -> usize {
        let mut removed = 0;
        for shard in self.shards.iter() {
            if !shard.read_unpoisoned().values().any(|s| s.is_idle()) {
                continue;
            }
            shard.write_unpoisoned().retain(|k, slot| {
                if slot.is_idle() {
                    self.removed(k, slot);
                    removed += 1;
                    false
                } else {
                    true
                }
            });
        }
        removed
    }

    /// Gives the bucket kept under (`namespace`, `name`) a fill rate of
    /// `rate` instead of its configured one (its lease share in cluster
    /// mode), or restores the configured one with `None`. Applies to the
    /// live bucket, keeping its state, and to the bucket made on next use.
    pub fn set_share(&self, namespace: &str, name: &str, rate: Option<f64>) {
        let config = self.config_locked();
        let k = key(namespace, name);
        match rate {
            Some(r) => self.shares.write_unpoisoned().insert(k.clone(), r),
            None => self.shares.write_unpoisoned().remove(&k),
        };
        let Some(slot) = self.find(namespace, name) else {
            return;
        };
        let bucket = if namespace == GLOBAL_NAMESPACE {
            config.global_default_bucket.as_ref()
        } else {
            config.namespaces.get(namespace).and_then(|ns| {
                if name == DEFAULT_BUCKET_NAME {
                    ns.default_bucket.as_ref()
                } else {
                    ns.buckets.get(name).or(ns.dynamic_bucket_template.as_ref())
                }
            })
        };
        if let Some(b) = bucket {
            slot.bucket().set_settings(effective(b, rate));
        }
    }

    /// Tokens asked of the bucket kept under (`namespace`, `name`) since it
    /// was made, granted or not; 0 if it is not alive.
    pub fn demand(&self, namespace: &str, name: &str) -> u64 {
        self.find(namespace, name).map_or(0, |s| s.demand())
    }

    /// The settings of the bucket kept under (`namespace`, `name`), if it
    /// is alive.
    pub fn settings(&self, namespace: &str, name: &str) -> Option<tollgate::BucketSettings> {
        self.find(namespace, name).map(|s| s.bucket().settings())
    }

    /// How many buckets are alive.
    pub fn len(&self) -> usize {
        self.shards.iter().map(|s| s.read_unpoisoned().len()).sum()
    }

    /// Whether no bucket is alive.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// How many dynamic buckets of `namespace` are alive.
    pub fn dynamic_count(&self, namespace: &str) -> u64 {
        let counts = self.dynamic.lock_unpoisoned();
        counts.per_namespace.get(namespace).copied().unwrap_or(0)
    }

    /// How many dynamic buckets are alive, all namespaces together.
    pub fn dynamic_total(&self) -> u64 {
        self.dynamic.lock_unpoisoned().total
    }

    /// The live buckets as (namespace, bucket, kind, tokens on hand), sorted,
    /// at most `limit` of them.
    pub fn list(&self, limit: usize) -> Vec<(String, String, BucketKind, i64)> {
        let mut out = Vec::new();
        for shard in self.shards.iter() {
            for (k, slot) in shard.read_unpoisoned().iter() {
                let (ns, name) = k.pair();
                out.push((
                    ns.to_owned(),
                    name.to_owned(),
                    slot.kind(),
                    slot.bucket().available(),
                ));
            }
        }
        out.sort_by(|a, b| (&a.0, &a.1).cmp(&(&b.0, &b.1)));
        out.truncate(limit);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn registry() -> Registry {
        let config = QuotaConfig::from_yaml(
            "namespaces:\n  ns:\n    dynamic_bucket_template: {size: 5, fill_rate: 1}\n",
        )
        .unwrap();
        Registry::new(
            config,
            QuotaLimits::default(),
            Arc::new(tollgate::ManualClock::new()),
            QuotaMetrics::new(),
        )
    }

    /// The configuration handed out is a snapshot: a reload while a caller
    /// holds it goes through (no lock is held) and leaves it as it was.
    #[test]
    fn config_is_a_snapshot_a_reload_does_not_wait_for() {
        let registry = registry();
        let before = registry.config();
        let new = QuotaConfig::from_yaml(
            "namespaces:\n  other:\n    dynamic_bucket_template: {size: 7, fill_rate: 2}\n",
        )
        .unwrap();
        registry.reload(new);
        assert!(before.namespaces.contains_key("ns"));
        assert!(!before.namespaces.contains_key("other"));
        let after = registry.config();
        assert!(after.namespaces.contains_key("other"));
        assert!(!after.namespaces.contains_key("ns"));
    }

    /// A bucket made once is found again by its names, and only by them.
    #[test]
    fn buckets_are_found_by_their_names() {
        let registry = registry();
        let config = registry.config();
        let template = config.namespaces["ns"]
            .dynamic_bucket_template
            .as_ref()
            .unwrap();
        let made = registry
            .get_or_create(&config, BucketKind::Dynamic, "ns", "x", template)
            .unwrap();
        let again = registry
            .get_or_create(&config, BucketKind::Dynamic, "ns", "x", template)
            .unwrap();
        assert!(Arc::ptr_eq(&made, &again));
        assert_eq!(registry.len(), 1);
        assert_eq!(registry.dynamic_count("ns"), 1);
        assert!(registry.settings("ns", "x").is_some());
        assert!(registry.settings("ns", "y").is_none());
        assert!(registry.settings("ns:x", "").is_none());
        assert_eq!(registry.dynamic_buckets(), vec![("ns".into(), "x".into())]);
    }
}
