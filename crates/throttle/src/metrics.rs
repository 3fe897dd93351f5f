//! The throttler's Prometheus metrics: decisions as counters, state (keys,
//! bans, queue) as gauges computed when scraped.
//!
//! # Implementation notes
//!
//! Decision counters are incremented on the decision path (one labelled
//! counter lookup each). The state gauges are read from the throttler only
//! when the registry is gathered, by a collector holding a weak reference
//! (the throttler owns the registry, so a strong one would be a cycle).

use std::sync::{Arc, OnceLock, Weak};

use prometheus::core::{Collector, Desc};
use prometheus::proto::MetricFamily;
use prometheus::{IntCounterVec, IntGauge, IntGaugeVec, Opts, Registry};

/// What the state gauges read from a throttler when the registry is
/// gathered; the throttler implements it, so this module does not name it.
pub(crate) trait State: Send + Sync {
    /// The clock's reading, in nanoseconds.
    fn now_ns(&self) -> u64;

    /// Calls `each` with every rule's name, its keys held and its keys
    /// banned at `now_ns`.
    fn each_rule(&self, now_ns: u64, each: &mut dyn FnMut(&str, usize, usize));

    /// The queue's waiting cost and length, if the throttler has a queue.
    fn queue_state(&self) -> Option<(u64, usize)>;
}

/// The throttler's metrics, in their own registry.
#[derive(Debug, Clone)]
pub(crate) struct ThrottleMetrics {
    registry: Registry,
    decisions: IntCounterVec,
    queue: IntCounterVec,
    store_errors: IntCounterVec,
    cache_hits: IntCounterVec,
    state: Arc<StateCollector>,
}

#[derive(Debug)]
struct StateCollector {
    throttler: OnceLock<Weak<dyn State>>,
    keys: IntGaugeVec,
    banned: IntGaugeVec,
    queued_cost: IntGauge,
    queued: IntGauge,
}

impl ThrottleMetrics {
    pub(crate) fn new() -> ThrottleMetrics {
        let registry = Registry::new();
        let decisions = IntCounterVec::new(
            Opts::new(
                "tollgate_throttle_decisions_total",
                "Throttle decisions by rule and outcome (admitted, delayed, rejected, banned, \
                 ban_started, soft_exceeded, too_costly, no_key, shadow_rejected, \
                 shadow_banned, shadow_too_costly).",
            ),
            &["rule", "outcome"],
        )
        .expect("valid metric");
        let queue = IntCounterVec::new(
            Opts::new(
                "tollgate_throttle_queue_total",
                "Admission queue outcomes (immediate, queued, evicted, full, too_costly).",
            ),
            &["outcome"],
        )
        .expect("valid metric");
        let store_errors = IntCounterVec::new(
            Opts::new(
                "tollgate_throttle_store_errors_total",
                "Calls to the Redis store that failed or passed their deadline, by what \
                 decided instead (allow, deny, local; settle: a post-accounting lost).",
            ),
            &["on_error"],
        )
        .expect("valid metric");
        let cache_hits = IntCounterVec::new(
            Opts::new(
                "tollgate_throttle_store_cache_hits_total",
                "Decisions the Redis store's over-limit cache answered without calling Redis, \
                 by rule (each a rejection).",
            ),
            &["rule"],
        )
        .expect("valid metric");
        let state = Arc::new(StateCollector {
            throttler: OnceLock::new(),
            keys: IntGaugeVec::new(
                Opts::new("tollgate_throttle_keys", "Keys held per rule (hard limit)."),
                &["rule"],
            )
            .expect("valid metric"),
            banned: IntGaugeVec::new(
                Opts::new("tollgate_throttle_banned_keys", "Keys banned now per rule."),
                &["rule"],
            )
            .expect("valid metric"),
            queued_cost: IntGauge::new(
                "tollgate_throttle_queued_cost",
                "Cost waiting in the admission queue.",
            )
            .expect("valid metric"),
            queued: IntGauge::new(
                "tollgate_throttle_queued_requests",
                "Requests waiting in the admission queue.",
            )
            .expect("valid metric"),
        });
        for c in [
            Box::new(decisions.clone()) as Box<dyn Collector>,
            Box::new(queue.clone()),
            Box::new(store_errors.clone()),
            Box::new(cache_hits.clone()),
            Box::new(SharedCollector(state.clone())),
        ] {
            registry.register(c).expect("unique metric");
        }
        ThrottleMetrics {
            registry,
            decisions,
            queue,
            store_errors,
            cache_hits,
            state,
        }
    }

    pub(crate) fn watch(&self, throttler: Weak<dyn State>) {
        let _ = self.state.throttler.set(throttler);
    }

    pub(crate) fn registry(&self) -> &Registry {
        &self.registry
    }

    pub(crate) fn decision(&self, rule: &str, outcome: &str) {
        self.decisions.with_label_values(&[rule, outcome]).inc();
    }

    pub(crate) fn store_error(&self, on_error: &str) {
        self.store_errors.with_label_values(&[on_error]).inc();
    }

    pub(crate) fn cache_hit(&self, rule: &str) {
        self.cache_hits.with_label_values(&[rule]).inc();
    }

    pub(crate) fn queue(&self, outcome: &str) {
        self.queue.with_label_values(&[outcome]).inc();
    }
}

struct SharedCollector(Arc<StateCollector>);

impl Collector for SharedCollector {
    fn desc(&self) -> Vec<&Desc> {
        let s = &self.0;
        let mut d = s.keys.desc();
        d.extend(s.banned.desc());
        d.extend(s.queued_cost.desc());
        d.extend(s.queued.desc());
        d
    }

    fn collect(&self) -> Vec<MetricFamily> {
        let s = &self.0;
        if let Some(inner) = s.throttler.get().and_then(Weak::upgrade) {
            let now = inner.now_ns();
            inner.each_rule(now, &mut |name, keys, banned| {
                s.keys.with_label_values(&[name]).set(keys as i64);
                s.banned.with_label_values(&[name]).set(banned as i64);
            });
            if let Some((cost, len)) = inner.queue_state() {
                s.queued_cost.set(cost as i64);
                s.queued.set(len as i64);
            }
        }
        let mut out = s.keys.collect();
        out.extend(s.banned.collect());
        out.extend(s.queued_cost.collect());
        out.extend(s.queued.collect());
        out
    }
}
