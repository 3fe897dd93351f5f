//! The gRPC edge: `quotaservice.QuotaService/Allow` served from a
//! [`Quota`].
//!
//! Every outcome, bad input included, is an `AllowResponse` status, never a
//! gRPC error: that is what the reference's clients expect.

use std::future::Future;
use std::sync::Arc;

use super::pb;
use super::pb::quota_service_server::QuotaServiceServer;
use super::service::{Quota, Request};

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

/// Serves Allow for `quota` on `listener` until `shutdown` completes.
///
/// # Errors
///
/// A transport error from tonic.
pub async fn serve(
    quota: Arc<Quota>,
    listener: tokio::net::TcpListener,
    shutdown: impl Future<Output = ()>,
) -> Result<(), tonic::transport::Error> {
    let incoming = tonic::transport::server::TcpIncoming::from(listener).with_nodelay(Some(true));
    tonic::transport::Server::builder()
        .add_service(Service::new(quota).into_server())
        .serve_with_incoming_shutdown(incoming, shutdown)
        .await
}
