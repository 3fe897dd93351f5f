//! The server's Prometheus metrics, under the names the Go server used so
//! existing dashboards keep working.

use prometheus::{CounterVec, Encoder as _, GaugeVec, HistogramOpts, HistogramVec, Opts, Registry};

/// Request counters and per-resource gauges, in their own registry.
#[derive(Debug, Clone)]
pub struct Metrics {
    registry: Registry,
    pub(crate) requests: CounterVec,
    pub(crate) request_errors: CounterVec,
    pub(crate) request_durations: HistogramVec,
    pub(crate) has: GaugeVec,
    pub(crate) wants: GaugeVec,
    pub(crate) subclients: GaugeVec,
}

impl Metrics {
    /// Registers the metrics in a fresh registry.
    pub fn new() -> Self {
        let registry = Registry::new();
        let counter = |name: &str, help: &str| {
            let c = CounterVec::new(Opts::new(name, help), &["method"]).expect("valid metric");
            registry
                .register(Box::new(c.clone()))
                .expect("unique metric");
            c
        };
        let gauge = |name: &str, help: &str| {
            let g = GaugeVec::new(Opts::new(name, help), &["resource"]).expect("valid metric");
            registry
                .register(Box::new(g.clone()))
                .expect("unique metric");
            g
        };
        let requests = counter(
            "doorman_server_requests",
            "Requests sent to a Doorman service.",
        );
        let request_errors = counter(
            "doorman_server_request_errors",
            "Requests sent to a Doorman service that returned an error.",
        );
        let request_durations = HistogramVec::new(
            HistogramOpts::new(
                "doorman_server_request_durations",
                "Duration of different requests in seconds.",
            )
            .buckets(vec![
                0.000_05, 0.000_1, 0.000_25, 0.000_5, 0.001, 0.002_5, 0.005, 0.01, 0.025, 0.05,
                0.1, 0.25, 0.5, 1.0,
            ]),
            &["method"],
        )
        .expect("valid metric");
        registry
            .register(Box::new(request_durations.clone()))
            .expect("unique metric");
        let has = gauge(
            "doorman_server_has",
            "All capacity assigned to clients for a resource.",
        );
        let wants = gauge(
            "doorman_server_wants",
            "All capacity requested by clients for a resource.",
        );
        let subclients = gauge(
            "doorman_server_subclients",
            "Number of clients requesting this resource.",
        );
        Metrics {
            registry,
            requests,
            request_errors,
            request_durations,
            has,
            wants,
            subclients,
        }
    }

    /// The registry in Prometheus' text exposition format.
    pub fn encode(&self) -> String {
        encode(&self.registry)
    }
}

/// `registry` in Prometheus' text exposition format.
pub(crate) fn encode(registry: &Registry) -> String {
    let mut buf = Vec::new();
    prometheus::TextEncoder::new()
        .encode(&registry.gather(), &mut buf)
        .expect("encoding metrics to memory cannot fail");
    String::from_utf8(buf).expect("the text format is UTF-8")
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}
