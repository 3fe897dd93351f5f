//! The quota service's events as Prometheus counters: tokens served (with
//! or without a wait), timeouts, too many tokens requested, bucket misses,
//! buckets created and removed.
//!
//! Every series is labelled by namespace only, never by bucket: dynamic
//! bucket names are unbounded, so they would make the series unbounded too.
//! Requests for namespaces absent from the configuration are counted under
//! [`UNKNOWN_NAMESPACE`].

use prometheus::{CounterVec, Encoder as _, IntCounter, IntGauge, Opts, Registry};

/// The namespace label of requests naming a namespace that is not configured.
pub const UNKNOWN_NAMESPACE: &str = "___UNKNOWN___";

/// The service's counters, in their own registry. Clones share the counters.
#[derive(Debug, Clone)]
pub struct QuotaMetrics {
    registry: Registry,
    pub(crate) served: CounterVec,
    pub(crate) tokens_served: CounterVec,
    pub(crate) timeouts: CounterVec,
    pub(crate) too_many_tokens: CounterVec,
    pub(crate) misses: CounterVec,
    pub(crate) created: CounterVec,
    pub(crate) removed: CounterVec,
    pub(crate) invalid: IntCounter,
    pub(crate) buckets: IntGauge,
}

impl Default for QuotaMetrics {
    fn default() -> QuotaMetrics {
        QuotaMetrics::new()
    }
}

impl QuotaMetrics {
    /// Registers the counters in a fresh registry.
    pub fn new() -> QuotaMetrics {
        let registry = Registry::new();
        let counter = |name: &str, help: &str, labels: &[&str]| {
            let c = CounterVec::new(Opts::new(name, help), labels).expect("valid metric");
            registry
                .register(Box::new(c.clone()))
                .expect("unique metric");
            c
        };
        let served = counter(
            "tollgate_quota_requests_served",
            "Allow requests granted, by namespace and whether a wait was imposed.",
            &["namespace", "waited"],
        );
        let tokens_served = counter(
            "tollgate_quota_tokens_served",
            "Tokens granted, by namespace.",
            &["namespace"],
        );
        let timeouts = counter(
            "tollgate_quota_timeouts",
            "Allow requests refused because the wait exceeded the max wait or max debt.",
            &["namespace"],
        );
        let too_many_tokens = counter(
            "tollgate_quota_too_many_tokens_requested",
            "Allow requests refused for asking more than max_tokens_per_request.",
            &["namespace"],
        );
        let misses = counter(
            "tollgate_quota_bucket_misses",
            "Allow requests with no bucket: reason no_bucket or too_many_buckets.",
            &["namespace", "reason"],
        );
        let created = counter(
            "tollgate_quota_buckets_created",
            "Buckets created (dynamic, or named on first use).",
            &["namespace"],
        );
        let removed = counter(
            "tollgate_quota_buckets_removed",
            "Buckets removed: idle, or dropped by a configuration reload.",
            &["namespace"],
        );
        let invalid = IntCounter::new(
            "tollgate_quota_invalid_requests",
            "Allow requests refused as invalid (bad names, negative tokens or waits).",
        )
        .expect("valid metric");
        registry
            .register(Box::new(invalid.clone()))
            .expect("unique metric");
        let buckets =
            IntGauge::new("tollgate_quota_buckets", "Buckets alive now.").expect("valid metric");
        registry
            .register(Box::new(buckets.clone()))
            .expect("unique metric");
        QuotaMetrics {
            registry,
            served,
            tokens_served,
            timeouts,
            too_many_tokens,
            misses,
            created,
            removed,
            invalid,
            buckets,
        }
    }

    /// The counters in Prometheus's text format.
    pub fn render(&self) -> String {
        let mut out = Vec::new();
        // Encoding to a Vec cannot fail for well-formed metrics.
        let _ = prometheus::TextEncoder::new().encode(&self.registry.gather(), &mut out);
        String::from_utf8(out).unwrap_or_default()
    }

    /// The Prometheus registry, to merge into another exporter.
    pub fn registry(&self) -> &Registry {
        &self.registry
    }
}
