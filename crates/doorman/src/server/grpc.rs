//! The tonic glue: each RPC calls the server, records metrics and maps
//! errors to gRPC statuses, nothing else.

use std::time::Instant;

use tracing::debug;

use super::super::error::RequestError;
use super::super::pb;
use super::state::Server;

/// The tonic service: records metrics and maps errors, nothing else.
#[derive(Debug)]
pub(super) struct Service {
    server: Server,
}

impl Service {
    pub(super) fn new(server: Server) -> Self {
        Service { server }
    }

    fn record<T>(
        &self,
        method: &str,
        start: Instant,
        result: Result<T, RequestError>,
    ) -> Result<tonic::Response<T>, tonic::Status> {
        let m = &self.server.inner.metrics;
        m.requests.with_label_values(&[method]).inc();
        m.request_durations
            .with_label_values(&[method])
            .observe(start.elapsed().as_secs_f64());
        match result {
            Ok(response) => Ok(tonic::Response::new(response)),
            Err(e) => {
                m.request_errors.with_label_values(&[method]).inc();
                debug!(method, error = %e, "request refused");
                Err(e.into())
            }
        }
    }
}

#[tonic::async_trait]
impl pb::capacity_server::Capacity for Service {
    async fn discovery(
        &self,
        _request: tonic::Request<pb::DiscoveryRequest>,
    ) -> Result<tonic::Response<pb::DiscoveryResponse>, tonic::Status> {
        let start = Instant::now();
        self.record("Discovery", start, Ok(self.server.discovery()))
    }

    async fn get_capacity(
        &self,
        request: tonic::Request<pb::GetCapacityRequest>,
    ) -> Result<tonic::Response<pb::GetCapacityResponse>, tonic::Status> {
        let start = Instant::now();
        let result = self.server.get_capacity(request.into_inner());
        self.record("GetCapacity", start, result)
    }

    async fn get_server_capacity(
        &self,
        request: tonic::Request<pb::GetServerCapacityRequest>,
    ) -> Result<tonic::Response<pb::GetServerCapacityResponse>, tonic::Status> {
        let start = Instant::now();
        let result = self.server.get_server_capacity(request.into_inner());
        self.record("GetServerCapacity", start, result)
    }

    async fn release_capacity(
        &self,
        request: tonic::Request<pb::ReleaseCapacityRequest>,
    ) -> Result<tonic::Response<pb::ReleaseCapacityResponse>, tonic::Status> {
        let start = Instant::now();
        let result = self.server.release_capacity(request.into_inner());
        self.record("ReleaseCapacity", start, result)
    }
}
