//! The gRPC edge: `quotaservice.QuotaService/Allow` served from a
//! [`Quota`].
//!
//! Every outcome, bad input included, is an `AllowResponse` status, never a
//! gRPC error: that is what the reference's clients expect.
//!
//! Two servers speak the same wire protocol. [`Service`] is the tonic
//! service, for a tonic router (and TLS). [`serve_with`] and
//! [`serve_threads_with`] are a lean plaintext server on the `h2` crate
//! (`grpc/lean.rs`) that answers Allow inside each connection's task,
//! under the same [`ServerLimits`] as Doorman's server (a cap on
//! connections, handshake and idle deadlines, a drain at shutdown);
//! `tollgate quota` runs [`serve_threads_with`] without TLS.

use std::sync::Arc;

use super::pb;
use super::pb::quota_service_server::QuotaServiceServer;
use super::service::{Quota, Request};

mod lean;

pub use lean::{serve, serve_threads, serve_threads_with, serve_with, ALLOW_PATH};
pub use tollgate_service::ServerLimits;

/// The tonic service.
#[derive(Debug, Clone)]
pub struct Service {
    quota: Arc<Quota>,
}

impl Service {
    /// A service answering from `quota`.
    pub fn new(quota: Arc<Quota>) -> Service {
        Service { quota }
    }

    /// The service wrapped for tonic's router.
    pub fn into_server(self) -> QuotaServiceServer<Service> {
        QuotaServiceServer::new(self)
    }
}

#[tonic::async_trait]
impl pb::quota_service_server::QuotaService for Service {
    async fn allow(
        &self,
        request: tonic::Request<pb::AllowRequest>,
    ) -> Result<tonic::Response<pb::AllowResponse>, tonic::Status> {
        let req = request.into_inner();
        let decision = self.quota.allow(&Request::from(&req));
        Ok(tonic::Response::new(decision.into()))
    }
}
