//! The service's events as Prometheus metrics, under the reference's stat
//! names where it has them.
//!
//! Per rule, labelled by the rule's place in the configuration (`key`,
//! e.g. `edge.tenant_acme.user`; request overrides as `<domain>.override`,
//! so the series stay as many as the rules): `total_hits`, `over_limit`,
//! `near_limit`, `within_limit` and `shadow_mode`, each counting hits (a
//! call's `hits_addend`) and prefixed `tollgate_rls_`, with `_total`. A hit
//! is near the limit when it is admitted with the count past
//! `floor(limit × near_limit_ratio)`. Server-wide: calls answered and
//! refused with an error, configuration loads and refusals, and the keys
//! held, and the calls a Redis store did not answer
//! (`tollgate_rls_store_errors_total`, by `on_error` mode).

use prometheus::{Encoder as _, IntCounter, IntCounterVec, IntGauge, Opts, Registry};

/// One rule's counters, resolved once.
#[derive(Debug, Clone)]
pub(crate) struct RuleStats {
    pub(crate) total_hits: IntCounter,
    pub(crate) over_limit: IntCounter,
    pub(crate) near_limit: IntCounter,
    pub(crate) within_limit: IntCounter,
    pub(crate) shadow_mode: IntCounter,
}

/// The service's counters, in their own registry. Clones share them.
#[derive(Debug, Clone)]
pub struct RlsMetrics {
    registry: Registry,
    total_hits: IntCounterVec,
    over_limit: IntCounterVec,
    near_limit: IntCounterVec,
    within_limit: IntCounterVec,
    shadow_mode: IntCounterVec,
    pub(crate) calls: IntCounter,
    pub(crate) errors: IntCounter,
    pub(crate) config_load_success: IntCounter,
    pub(crate) config_load_error: IntCounter,
    pub(crate) keys: IntGauge,
    /// Calls Redis did not answer, by the `on_error` mode that decided.
    pub(crate) store_errors: IntCounterVec,
}

impl Default for RlsMetrics {
    fn default() -> RlsMetrics {
        RlsMetrics::new()
    }
}

impl RlsMetrics {
    /// Registers the counters in a fresh registry.
    pub fn new() -> RlsMetrics {
        let registry = Registry::new();
        let per_rule = |name: &str, help: &str| {
            let c = IntCounterVec::new(Opts::new(name, help), &["key"]).expect("valid metric");
            registry
                .register(Box::new(c.clone()))
                .expect("unique metric");
            c
        };
        let one = |name: &str, help: &str| {
            let c = IntCounter::new(name, help).expect("valid metric");
            registry
                .register(Box::new(c.clone()))
                .expect("unique metric");
            c
        };
        let keys = IntGauge::new(
            "tollgate_rls_keys",
            "Fixed-window keys held, all units together.",
        )
        .expect("valid metric");
        registry
            .register(Box::new(keys.clone()))
            .expect("unique metric");
        RlsMetrics {
            total_hits: per_rule("tollgate_rls_total_hits_total", "Hits counted, by rule."),
            over_limit: per_rule(
                "tollgate_rls_over_limit_total",
                "Hits over the limit, by rule.",
            ),
            near_limit: per_rule(
                "tollgate_rls_near_limit_total",
                "Hits admitted past the near-limit ratio, by rule.",
            ),
            within_limit: per_rule("tollgate_rls_within_limit_total", "Hits admitted, by rule."),
            shadow_mode: per_rule(
                "tollgate_rls_shadow_mode_total",
                "Hits over the limit of a shadow-mode rule (answered OK), by rule.",
            ),
            calls: one(
                "tollgate_rls_calls_total",
                "ShouldRateLimit calls answered.",
            ),
            errors: one(
                "tollgate_rls_call_errors_total",
                "ShouldRateLimit calls refused with a gRPC error.",
            ),
            config_load_success: one(
                "tollgate_rls_config_load_success_total",
                "Configurations loaded.",
            ),
            config_load_error: one(
                "tollgate_rls_config_load_error_total",
                "Configurations refused (the previous one kept).",
            ),
            store_errors: {
                let c = IntCounterVec::new(
                    Opts::new(
                        "tollgate_rls_store_errors_total",
                        "Calls Redis did not answer in time, by the on_error mode that decided.",
                    ),
                    &["mode"],
                )
                .expect("valid metric");
                registry
                    .register(Box::new(c.clone()))
                    .expect("unique metric");
                c
            },
            keys,
            registry,
        }
    }

    /// Configurations refused so far (the previous one kept).
    pub fn config_load_errors(&self) -> u64 {
        self.config_load_error.get()
    }

    /// Counts a configuration put in force at start.
    pub fn config_load_success_inc(&self) {
        self.config_load_success.inc();
    }

    /// The counters of the rule at `key`.
    pub(crate) fn rule(&self, key: &str) -> RuleStats {
        RuleStats {
            total_hits: self.total_hits.with_label_values(&[key]),
            over_limit: self.over_limit.with_label_values(&[key]),
            near_limit: self.near_limit.with_label_values(&[key]),
            within_limit: self.within_limit.with_label_values(&[key]),
            shadow_mode: self.shadow_mode.with_label_values(&[key]),
        }
    }

    /// Every metric in Prometheus' text format.
    pub fn render(&self) -> String {
        let mut out = Vec::new();
        // Cannot fail: the registry holds only valid metrics and a Vec
        // takes every write.
        let _ = prometheus::TextEncoder::new().encode(&self.registry.gather(), &mut out);
        String::from_utf8(out).unwrap_or_default()
    }
}
