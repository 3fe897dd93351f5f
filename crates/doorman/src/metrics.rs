//! The server's Prometheus metrics, under the names the Go server used so
//! existing dashboards keep working.
//!
//! # Implementation notes
//!
//! The request metrics (a few series per method) live in a prometheus
//! registry. The per-resource gauges (`doorman_server_has`, `_wants`,
//! `_subclients`, one series per resource) do not: at 100K resources,
//! filling gauge vectors and gathering them built hundreds of thousands of
//! small allocations per scrape, and glibc kept the memory after the
//! resources were gone. Instead `ResourceGauges` writes them straight
//! into the scrape's text, in the text exposition format, from one pass
//! over the resources: the cost of a scrape is the output itself.

#[cfg(feature = "server")]
use std::fmt::Write as _;

#[cfg(feature = "server")]
use prometheus::{CounterVec, HistogramOpts, HistogramVec, Opts};
use prometheus::{Encoder as _, Registry};

#[cfg(feature = "server")]
/// Request counters and durations, in their own registry.
#[derive(Debug, Clone)]
pub struct Metrics {
    registry: Registry,
    pub(crate) requests: CounterVec,
    pub(crate) request_errors: CounterVec,
    pub(crate) request_durations: HistogramVec,
}

#[cfg(feature = "server")]
/// One resource's gauges, as written by [`ResourceGauges`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Gauges {
    pub(crate) has: f64,
    pub(crate) wants: f64,
    pub(crate) subclients: u64,
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

    /// Appends the three families to `out`.
    pub(crate) fn write(&self, out: &mut String) {
        let ids: usize = self.rows.iter().map(|(id, _)| id.len()).sum();
        // Per row: the name, `{resource="`, the id, `"} `, a number.
        out.reserve(3 * ids + self.rows.len() * 3 * 64 + 512);
        let families: [Family; 3] = [
            (
                "doorman_server_has",
                "All capacity assigned to clients for a resource.",
                |g| g.has,
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
        Metrics {
            registry,
            requests,
            request_errors,
            request_durations,
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
        let gauges = |has, wants, subclients| Gauges {
            has,
            wants,
            subclients,
        };
        g.push("a".into(), gauges(1.5, 2.0, 3));
        g.push("q\"x\\y\nz".into(), gauges(0.0, 1e21, 0));
        let mut out = String::new();
        g.write(&mut out);
        assert_eq!(
            out,
            "# HELP doorman_server_has All capacity assigned to clients for a resource.\n\
             # TYPE doorman_server_has gauge\n\
             doorman_server_has{resource=\"a\"} 1.5\n\
             doorman_server_has{resource=\"q\\\"x\\\\y\\nz\"} 0\n\
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
