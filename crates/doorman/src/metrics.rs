//! The server's Prometheus metrics: the Go server's, under its names so
//! that existing dashboards keep working, and tollgate's own, named as
//! Prometheus advises (base units, `_total` on counters).
//!
//! The crate's front page lists them all, in one table (its `# Metrics`).
//!
//! # Implementation notes
//!
//! The request metrics (a few series per method) live in a prometheus
//! registry. The per-resource gauges (`doorman_server_has`, `_wants`,
//! `_subclients`, `_capacity`, `_learning_mode`, one series per resource)
//! do not: at 100K resources,
//! filling gauge vectors and gathering them built hundreds of thousands of
//! small allocations per scrape, and glibc kept the memory after the
//! resources were gone. Instead `ResourceGauges` writes them straight
//! into the scrape's text, in the text exposition format, from one pass
//! over the resources: the cost of a scrape is the output itself.

#[cfg(feature = "server")]
use std::fmt::Write as _;

#[cfg(feature = "server")]
use prometheus::{Counter, CounterVec, HistogramOpts, HistogramVec, IntCounterVec, Opts};
use prometheus::{Encoder as _, Registry};
#[cfg(feature = "server")]
#[cfg(feature = "server")]
/// Request counters and durations and reload counters, in their own
/// registry, and the connections refused.
#[derive(Debug, Clone)]
pub struct Metrics {
    registry: Registry,
    pub(crate) requests: CounterVec,
    pub(crate) request_errors: CounterVec,
    pub(crate) request_durations: HistogramVec,
    pub(crate) reloads: Counter,
    pub(crate) reload_failures: Counter,
    /// Connections refused, by reason (`max_connections`,
    /// `tls_handshake`), counted by the lean server.
    pub(crate) refused: IntCounterVec,
}

#[cfg(feature = "server")]
/// One resource's gauges, as written by [`ResourceGauges`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Gauges {
    pub(crate) has: f64,
    pub(crate) wants: f64,
    pub(crate) subclients: u64,
    pub(crate) capacity: f64,
    pub(crate) learning: bool,
}

#[cfg(feature = "server")]
/// One gauge family: its name, its help text and how to read it from a row.
type Family = (&'static str, &'static str, fn(&Gauges) -> f64);

#[cfg(feature = "server")]
/// The per-resource gauge families, written as text.
#[derive(Debug, Default)]
pub(crate) struct ResourceGauges {
    rows: Vec<(String, Gauges)>,
}

#[cfg(feature = "server")]
impl ResourceGauges {
    pub(crate) fn with_capacity(n: usize) -> Self {
        ResourceGauges {
            rows: Vec::with_capacity(n),
        }
    }

    pub(crate) fn push(&mut self, resource: String, gauges: Gauges) {
        self.rows.push((resource, gauges));
    }

    /// Appends the five families to `out`.
    pub(crate) fn write(&self, out: &mut String) {
        let ids: usize = self.rows.iter().map(|(id, _)| id.len()).sum();
        // Per row: the name, `{resource="`, the id, `"} `, a number.
        out.reserve(5 * ids + self.rows.len() * 5 * 64 + 1024);
        let families: [Family; 5] = [
            (
                "doorman_server_capacity",
                "Capacity to share for a resource: its template's, or what the parent granted.",
                |g| g.capacity,
            ),
            (
                "doorman_server_has",
                "All capacity assigned to clients for a resource.",
                |g| g.has,
            ),
            (
                "doorman_server_learning_mode",
                "1 while a resource is in learning mode, else 0.",
                |g| f64::from(u8::from(g.learning)),
            ),
            (
                "doorman_server_subclients",
                "Number of clients requesting this resource.",
                |g| g.subclients as f64,
            ),
            (
                "doorman_server_wants",
                "All capacity requested by clients for a resource.",
                |g| g.wants,
            ),
        ];
        for (name, help, value) in families {
            if self.rows.is_empty() {
                continue;
            }
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} gauge");
            for (id, g) in &self.rows {
                out.push_str(name);
                out.push_str("{resource=\"");
                escape_label(id, out);
                out.push_str("\"} ");
                write_value(value(g), out);
                out.push('\n');
            }
        }
    }
}

#[cfg(feature = "server")]
/// Escapes a label value for the text format: `\\`, `\"` and `\n`.
fn escape_label(value: &str, out: &mut String) {
    for c in value.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
}

#[cfg(feature = "server")]
/// A sample value as the text format writes it.
fn write_value(v: f64, out: &mut String) {
    if v.is_nan() {
        out.push_str("NaN");
    } else if v.is_infinite() {
        out.push_str(if v > 0.0 { "+Inf" } else { "-Inf" });
    } else {
        let _ = write!(out, "{v}");
    }
}

#[cfg(feature = "server")]
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
        let plain = |name: &str, help: &str| {
            let c = Counter::new(name, help).expect("valid metric");
            registry
                .register(Box::new(c.clone()))
                .expect("unique metric");
            c
        };
        let reloads = plain(
            "doorman_server_config_reloads_total",
            "New configurations put in force.",
        );
        let reload_failures = plain(
            "doorman_server_config_reload_failures_total",
            "New configurations refused; the previous one stays in force.",
        );
        let refused = IntCounterVec::new(
            Opts::new(
                "doorman_server_refused_connections_total",
                "Connections refused: over max_connections, or at the TLS handshake.",
            ),
            &["reason"],
        )
        .expect("valid metric");
        registry
            .register(Box::new(refused.clone()))
            .expect("unique metric");
        // Both reasons are exported from the start, at 0.
        for reason in ["max_connections", "tls_handshake"] {
            refused.with_label_values(&[reason]);
        }
        Metrics {
            registry,
            requests,
            request_errors,
            request_durations,
            reloads,
            reload_failures,
            refused,
        }
    }

    /// The registry in Prometheus' text exposition format.
    pub fn encode(&self) -> String {
        encode(&self.registry)
    }

    /// Appends whether this server `is_master`.
    pub(crate) fn write_state(&self, out: &mut String, is_master: bool) {
        let name = "doorman_server_is_master";
        let _ = writeln!(
            out,
            "# HELP {name} 1 while this server is the master, else 0.\n\
             # TYPE {name} gauge\n\
             {name} {}",
            u8::from(is_master)
        );
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

#[cfg(feature = "server")]
impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}

#[cfg(all(test, feature = "server"))]
mod tests {
    use super::*;

    #[test]
    fn resource_gauges_are_written_in_the_text_format() {
        let mut g = ResourceGauges::with_capacity(2);
        let gauges = |has, wants, subclients, learning| Gauges {
            has,
            wants,
            subclients,
            capacity: 10.0,
            learning,
        };
        g.push("a".into(), gauges(1.5, 2.0, 3, true));
        g.push("q\"x\\y\nz".into(), gauges(0.0, 1e21, 0, false));
        let mut out = String::new();
        g.write(&mut out);
        assert_eq!(
            out,
            "# HELP doorman_server_capacity Capacity to share for a resource: its template's, or what the parent granted.\n\
             # TYPE doorman_server_capacity gauge\n\
             doorman_server_capacity{resource=\"a\"} 10\n\
             doorman_server_capacity{resource=\"q\\\"x\\\\y\\nz\"} 10\n\
             # HELP doorman_server_has All capacity assigned to clients for a resource.\n\
             # TYPE doorman_server_has gauge\n\
             doorman_server_has{resource=\"a\"} 1.5\n\
             doorman_server_has{resource=\"q\\\"x\\\\y\\nz\"} 0\n\
             # HELP doorman_server_learning_mode 1 while a resource is in learning mode, else 0.\n\
             # TYPE doorman_server_learning_mode gauge\n\
             doorman_server_learning_mode{resource=\"a\"} 1\n\
             doorman_server_learning_mode{resource=\"q\\\"x\\\\y\\nz\"} 0\n\
             # HELP doorman_server_subclients Number of clients requesting this resource.\n\
             # TYPE doorman_server_subclients gauge\n\
             doorman_server_subclients{resource=\"a\"} 3\n\
             doorman_server_subclients{resource=\"q\\\"x\\\\y\\nz\"} 0\n\
             # HELP doorman_server_wants All capacity requested by clients for a resource.\n\
             # TYPE doorman_server_wants gauge\n\
             doorman_server_wants{resource=\"a\"} 2\n\
             doorman_server_wants{resource=\"q\\\"x\\\\y\\nz\"} 1000000000000000000000\n"
        );
        let mut empty = String::new();
        ResourceGauges::default().write(&mut empty);
        assert_eq!(empty, "");
    }
}
