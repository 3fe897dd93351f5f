//! The quota service's events as Prometheus metrics: Allow requests by
//! status and the time each took to decide, tokens served (with or
//! without a wait), timeouts, too many tokens requested, bucket misses,
//! buckets created and removed. The names follow Prometheus' conventions
//! (counters end in `_total`, times are in seconds); the README's quota
//! section lists every one.
//!
//! Every series is labelled by namespace at most, never by bucket: dynamic
//! bucket names are unbounded, so they would make the series unbounded too.
//! Requests for namespaces absent from the configuration are counted under
//! [`UNKNOWN_NAMESPACE`].

use prometheus::{
    CounterVec, Encoder as _, Histogram, HistogramOpts, IntCounter, IntCounterVec, IntGauge, Opts,
    Registry,
};

use super::status::Status;

/// Every status, in the order of [`QuotaMetrics::requests`].
const STATUSES: [Status; 7] = [
    Status::Ok,
    Status::RejectedTimeout,
    Status::RejectedNoBucket,
    Status::RejectedTooManyBuckets,
    Status::RejectedTooManyTokensRequested,
    Status::RejectedInvalidRequest,
    Status::RejectedServerError,
];

/// The upper bounds of the Allow decision-time histogram, in seconds:
/// a decision takes about a microsecond; the long tail shows contention.
const DECISION_BUCKETS: [f64; 12] = [
    1e-7, 2.5e-7, 5e-7, 1e-6, 2.5e-6, 5e-6, 1e-5, 2.5e-5, 5e-5, 1e-4, 1e-3, 1e-2,
];

/// The namespace label of requests naming a namespace that is not configured.
pub const UNKNOWN_NAMESPACE: &str = "___UNKNOWN___";

/// The service's counters, in their own registry. Clones share the counters.
#[derive(Debug, Clone)]
pub struct QuotaMetrics {
    registry: Registry,
    /// One counter per status, in [`STATUSES`]' order, resolved once.
    requests: [IntCounter; 7],
    pub(crate) decision_seconds: Histogram,
    pub(crate) served: CounterVec,
    pub(crate) tokens_served: CounterVec,
    pub(crate) timeouts: CounterVec,
    pub(crate) too_many_tokens: CounterVec,
    pub(crate) misses: CounterVec,
    pub(crate) created: CounterVec,
    pub(crate) removed: CounterVec,
    pub(crate) invalid: IntCounter,
    pub(crate) buckets: IntGauge,
    /// Allow requests Redis failed, by the `on_error` mode that answered.
    store_errors: IntCounterVec,
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
            "tollgate_quota_requests_served_total",
            "Allow requests granted, by namespace and whether a wait was imposed.",
            &["namespace", "waited"],
        );
        let tokens_served = counter(
            "tollgate_quota_tokens_served_total",
            "Tokens granted, by namespace.",
            &["namespace"],
        );
        let timeouts = counter(
            "tollgate_quota_timeouts_total",
            "Allow requests refused because the wait exceeded the max wait or max debt.",
            &["namespace"],
        );
        let too_many_tokens = counter(
            "tollgate_quota_too_many_tokens_requested_total",
            "Allow requests refused for asking more than max_tokens_per_request.",
            &["namespace"],
        );
        let misses = counter(
            "tollgate_quota_bucket_misses_total",
            "Allow requests with no bucket: reason no_bucket or too_many_buckets.",
            &["namespace", "reason"],
        );
        let created = counter(
            "tollgate_quota_buckets_created_total",
            "Buckets created (dynamic, or named on first use).",
            &["namespace"],
        );
        let removed = counter(
            "tollgate_quota_buckets_removed_total",
            "Buckets removed: idle, or dropped by a configuration reload.",
            &["namespace"],
        );
        let invalid = IntCounter::new(
            "tollgate_quota_invalid_requests_total",
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
        let by_status = IntCounterVec::new(
            Opts::new(
                "tollgate_quota_requests_total",
                "Allow requests answered, by status (OK or the refusal's name).",
            ),
            &["status"],
        )
        .expect("valid metric");
        registry
            .register(Box::new(by_status.clone()))
            .expect("unique metric");
        let requests = STATUSES.map(|s| by_status.with_label_values(&[s.name()]));
        let decision_seconds = Histogram::with_opts(
            HistogramOpts::new(
                "tollgate_quota_allow_duration_seconds",
                "Time the server took to decide an Allow request, from its parsed request to \
                 its answer (network, decoding and encoding not included).",
            )
            .buckets(DECISION_BUCKETS.to_vec()),
        )
        .expect("valid metric");
        registry
            .register(Box::new(decision_seconds.clone()))
            .expect("unique metric");
        let store_errors = IntCounterVec::new(
            Opts::new(
                "tollgate_quota_store_errors_total",
                "Allow requests that Redis did not answer within the deadline (or failed), \
                 by the on_error mode that answered instead: allow, deny or local.",
            ),
            &["on_error"],
        )
        .expect("valid metric");
        registry
            .register(Box::new(store_errors.clone()))
            .expect("unique metric");
        QuotaMetrics {
            registry,
            requests,
            decision_seconds,
            served,
            tokens_served,
            timeouts,
            too_many_tokens,
            misses,
            created,
            removed,
            invalid,
            buckets,
            store_errors,
        }
    }

    /// Counts one Allow that Redis failed, answered by `mode`.
    pub(crate) fn store_error(&self, mode: crate::OnError) {
        let label = match mode {
            crate::OnError::Allow => "allow",
            crate::OnError::Deny => "deny",
            crate::OnError::Local => "local",
        };
        self.store_errors.with_label_values(&[label]).inc();
    }

    /// Allow requests that Redis failed, answered by `mode`.
    pub fn store_errors(&self, mode: crate::OnError) -> u64 {
        let label = match mode {
            crate::OnError::Allow => "allow",
            crate::OnError::Deny => "deny",
            crate::OnError::Local => "local",
        };
        self.store_errors.with_label_values(&[label]).get()
    }

    /// Counts one Allow answered with `status`, decided in `nanos`.
    pub(crate) fn answered(&self, status: Status, nanos: u64) {
        let i = match status {
            Status::Ok => 0,
            Status::RejectedTimeout => 1,
            Status::RejectedNoBucket => 2,
            Status::RejectedTooManyBuckets => 3,
            Status::RejectedTooManyTokensRequested => 4,
            Status::RejectedInvalidRequest => 5,
            Status::RejectedServerError => 6,
        };
        debug_assert_eq!(STATUSES[i], status);
        self.requests[i].inc();
        self.decision_seconds.observe(nanos as f64 * 1e-9);
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
