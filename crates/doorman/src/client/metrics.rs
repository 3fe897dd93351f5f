//! The lease client's Prometheus metrics, under the names the Go client
//! used (`doorman_client_requests`, `..._request_errors`,
//! `..._request_durations`, labelled by `server` and `method`), so existing
//! dashboards keep working.
//!
//! # Implementation notes
//!
//! [`Metered`] wraps the client's transport, so every RPC the task sends is
//! counted where it leaves, whatever the protocol logic above does with it.
//! A call is an error when the server answers with a gRPC status, or when
//! the caller drops it unfinished (its deadline passed): the drop guard
//! records it then, with the time it ran. A mastership redirect is an
//! answer, not an error. Durations are read from tokio's clock, so paused
//! time in tests gives exact figures.

use std::sync::Arc;

use prometheus::{CounterVec, HistogramOpts, HistogramVec, Opts, Registry};
use tokio::time::Instant;

use crate::pb;
use crate::transport::{Call, Transport};

/// Request counters and durations of lease clients, by server address and
/// method.
///
/// One value may serve many clients (clones share the counters); give it to
/// each with [`ClientBuilder::metrics`](super::ClientBuilder::metrics).
///
/// # Examples
///
/// ```
/// use tollgate_doorman::ClientMetrics;
///
/// // Into an application's own registry ...
/// let registry = prometheus::Registry::new();
/// let metrics = ClientMetrics::registered(&registry)?;
/// # let _ = metrics;
/// // ... or into one of its own, read as text.
/// let metrics = ClientMetrics::new();
/// assert!(metrics.encode().is_empty(), "nothing sent yet");
/// # Ok::<(), prometheus::Error>(())
/// ```
#[derive(Debug, Clone)]
pub struct ClientMetrics {
    registry: Registry,
    requests: CounterVec,
    request_errors: CounterVec,
    request_durations: HistogramVec,
}

impl ClientMetrics {
    /// The metrics in a registry of their own (see [`ClientMetrics::encode`]).
    pub fn new() -> ClientMetrics {
        ClientMetrics::registered(&Registry::new()).expect("a fresh registry has no clashes")
    }

    /// The metrics, registered in `registry`.
    ///
    /// # Errors
    ///
    /// The registry's error when it already holds metrics of these names
    /// (register once and clone the result for every client).
    pub fn registered(registry: &Registry) -> Result<ClientMetrics, prometheus::Error> {
        let labels = &["server", "method"];
        let requests = CounterVec::new(
            Opts::new(
                "doorman_client_requests",
                "Requests sent to a Doorman service.",
            ),
            labels,
        )?;
        let request_errors = CounterVec::new(
            Opts::new(
                "doorman_client_request_errors",
                "Requests sent to a Doorman service that returned an error.",
            ),
            labels,
        )?;
        let request_durations = HistogramVec::new(
            HistogramOpts::new(
                "doorman_client_request_durations",
                "Duration of different requests in seconds.",
            )
            .buckets(vec![
                0.000_25, 0.000_5, 0.001, 0.002_5, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0,
                2.5, 5.0, 10.0,
            ]),
            labels,
        )?;
        registry.register(Box::new(requests.clone()))?;
        registry.register(Box::new(request_errors.clone()))?;
        registry.register(Box::new(request_durations.clone()))?;
        Ok(ClientMetrics {
            registry: registry.clone(),
            requests,
            request_errors,
            request_durations,
        })
    }

    /// The registry these metrics are in, in Prometheus' text exposition
    /// format (empty until a request is sent).
    pub fn encode(&self) -> String {
        crate::metrics::encode(&self.registry)
    }
}

impl Default for ClientMetrics {
    fn default() -> Self {
        ClientMetrics::new()
    }
}

/// A transport that records every call in [`ClientMetrics`].
#[derive(Debug)]
pub(crate) struct Metered {
    pub(crate) inner: Arc<dyn Transport>,
    pub(crate) metrics: ClientMetrics,
}

/// Records one call when it ends: answered, failed, or dropped unfinished.
struct Record {
    metrics: ClientMetrics,
    server: String,
    method: &'static str,
    start: Instant,
    failed: bool,
}

impl Drop for Record {
    fn drop(&mut self) {
        let labels = &[self.server.as_str(), self.method];
        let m = &self.metrics;
        m.requests.with_label_values(labels).inc();
        m.request_durations
            .with_label_values(labels)
            .observe(self.start.elapsed().as_secs_f64());
        if self.failed {
            m.request_errors.with_label_values(labels).inc();
        }
    }
}

impl Metered {
    fn meter<T: Send + 'static>(
        &self,
        address: &str,
        method: &'static str,
        call: Call<T>,
    ) -> Call<T> {
        let record = Record {
            metrics: self.metrics.clone(),
            server: address.to_owned(),
            method,
            start: Instant::now(),
            // Until it answers: a call dropped unfinished failed.
            failed: true,
        };
        Box::pin(async move {
            // The whole guard moves in (not just its `failed` field), so it
            // records when the call ends, not when `meter` returns.
            let mut record = record;
            let result = call.await;
            record.failed = result.is_err();
            result
        })
    }
}

impl Transport for Metered {
    fn discovery(&self, address: &str) -> Call<pb::DiscoveryResponse> {
        self.meter(address, "Discovery", self.inner.discovery(address))
    }

    fn get_capacity(
        &self,
        address: &str,
        request: pb::GetCapacityRequest,
    ) -> Call<pb::GetCapacityResponse> {
        let call = self.inner.get_capacity(address, request);
        self.meter(address, "GetCapacity", call)
    }

    fn get_server_capacity(
        &self,
        address: &str,
        request: pb::GetServerCapacityRequest,
    ) -> Call<pb::GetServerCapacityResponse> {
        let call = self.inner.get_server_capacity(address, request);
        self.meter(address, "GetServerCapacity", call)
    }

    fn release_capacity(
        &self,
        address: &str,
        request: pb::ReleaseCapacityRequest,
    ) -> Call<pb::ReleaseCapacityResponse> {
        let call = self.inner.release_capacity(address, request);
        self.meter(address, "ReleaseCapacity", call)
    }

    fn forget(&self, address: &str) {
        self.inner.forget(address);
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use tonic::Status;

    use super::*;

    fn requests(m: &ClientMetrics, server: &str, method: &str) -> f64 {
        m.requests.with_label_values(&[server, method]).get()
    }

    fn errors(m: &ClientMetrics, server: &str, method: &str) -> f64 {
        m.request_errors.with_label_values(&[server, method]).get()
    }

    fn seconds(m: &ClientMetrics, server: &str, method: &str) -> f64 {
        m.request_durations
            .with_label_values(&[server, method])
            .get_sample_sum()
    }

    /// Answers Discovery after 2 s, fails GetCapacity after 1 s, and never
    /// answers ReleaseCapacity.
    #[derive(Debug)]
    struct Scripted;

    impl Transport for Scripted {
        fn discovery(&self, _: &str) -> Call<pb::DiscoveryResponse> {
            Box::pin(async {
                tokio::time::sleep(Duration::from_secs(2)).await;
                Ok(pb::DiscoveryResponse::default())
            })
        }
        fn get_capacity(
            &self,
            _: &str,
            _: pb::GetCapacityRequest,
        ) -> Call<pb::GetCapacityResponse> {
            Box::pin(async {
                tokio::time::sleep(Duration::from_secs(1)).await;
                Err(Status::unavailable("down"))
            })
        }
        fn get_server_capacity(
            &self,
            _: &str,
            _: pb::GetServerCapacityRequest,
        ) -> Call<pb::GetServerCapacityResponse> {
            Box::pin(std::future::pending())
        }
        fn release_capacity(
            &self,
            _: &str,
            _: pb::ReleaseCapacityRequest,
        ) -> Call<pb::ReleaseCapacityResponse> {
            Box::pin(std::future::pending())
        }
        fn forget(&self, _: &str) {}
    }

    #[tokio::test(start_paused = true)]
    async fn answers_failures_and_abandoned_calls_are_counted_with_their_durations() {
        let metrics = ClientMetrics::new();
        let t = Metered {
            inner: Arc::new(Scripted),
            metrics: metrics.clone(),
        };
        t.discovery("a:1").await.unwrap();
        t.discovery("a:1").await.unwrap();
        t.get_capacity("b:1", pb::GetCapacityRequest::default())
            .await
            .unwrap_err();
        let abandoned = tokio::time::timeout(
            Duration::from_secs(3),
            t.release_capacity("b:1", pb::ReleaseCapacityRequest::default()),
        )
        .await;
        assert!(abandoned.is_err());

        assert_eq!(requests(&metrics, "a:1", "Discovery"), 2.0);
        assert_eq!(errors(&metrics, "a:1", "Discovery"), 0.0);
        assert_eq!(seconds(&metrics, "a:1", "Discovery"), 4.0);
        assert_eq!(requests(&metrics, "b:1", "GetCapacity"), 1.0);
        assert_eq!(errors(&metrics, "b:1", "GetCapacity"), 1.0);
        assert_eq!(seconds(&metrics, "b:1", "GetCapacity"), 1.0);
        assert_eq!(requests(&metrics, "b:1", "ReleaseCapacity"), 1.0);
        assert_eq!(errors(&metrics, "b:1", "ReleaseCapacity"), 1.0);
        assert_eq!(seconds(&metrics, "b:1", "ReleaseCapacity"), 3.0);
        assert_eq!(requests(&metrics, "a:1", "GetCapacity"), 0.0);

        let text = metrics.encode();
        assert!(
            text.contains(r#"doorman_client_requests{method="Discovery",server="a:1"} 2"#),
            "{text}"
        );
        assert!(
            text.contains(
                r#"doorman_client_request_errors{method="ReleaseCapacity",server="b:1"} 1"#
            ),
            "{text}"
        );
    }

    #[test]
    fn registering_twice_in_one_registry_is_an_error() {
        let registry = Registry::new();
        ClientMetrics::registered(&registry).unwrap();
        assert!(ClientMetrics::registered(&registry).is_err());
    }
}
