//! The gRPC edge: `quotaservice.QuotaService/Allow` served from a
//! [`Quota`].
//!
//! Every outcome, bad input included, is an `AllowResponse` status, never a
//! gRPC error: that is what the reference's clients expect.
//!
//! [`QuotaServer`](crate::QuotaServer) serves it on the service kit's
//! lean gRPC server, plaintext or TLS, which answers Allow inside each
//! connection's task (an Allow that waits on Redis too: the connection's
//! task polls it beside its other calls); `AllowService` (feature `wire`)
//! is the tonic service, for a tonic router of one's own.

use std::sync::Arc;

use prost::Message as _;
use tonic::codegen::Bytes;

use super::pb;
use super::pb::quota_service_server::QuotaServiceServer;
use super::service::{AllowRequest, Quota};
use tollgate_service::UnaryService;

/// The one method served, as an HTTP/2 path.
pub const ALLOW_PATH: &str = "/quotaservice.QuotaService/Allow";

/// The largest Allow request accepted, whatever the limits say: an
/// `AllowRequest` is two names of at most 256 bytes and three numbers, so
/// this is generous, and it bounds what a partly received call holds.
pub(crate) const MAX_MESSAGE: usize = 16 << 10;

/// Allow on the service kit's lean gRPC server.
#[derive(Debug)]
pub(crate) struct Allow(pub(crate) Arc<Quota>);

impl UnaryService for Allow {
    type Method = ();

    fn method(&self, path: &str) -> Option<()> {
        (path == ALLOW_PATH).then_some(())
    }

    fn call(
        &self,
        (): (),
        request: Bytes,
        response: &mut prost::bytes::BytesMut,
    ) -> Result<(), tonic::Status> {
        let req = pb::AllowRequest::decode(request)
            .map_err(|e| tonic::Status::internal(format!("malformed AllowRequest: {e}")))?;
        let answer = pb::AllowResponse::from(self.0.allow(&AllowRequest::from(&req)));
        // Cannot fail: the buffer grows as needed.
        let _ = answer.encode(response);
        Ok(())
    }

    /// An Allow waits on Redis when the buckets are kept there.
    fn waits(&self, (): ()) -> bool {
        self.0.has_store()
    }

    fn call_later(
        &self,
        (): (),
        request: Bytes,
        mut response: prost::bytes::BytesMut,
    ) -> std::pin::Pin<
        Box<
            dyn std::future::Future<Output = Result<prost::bytes::BytesMut, tonic::Status>>
                + Send
                + 'static,
        >,
    > {
        let quota = Arc::clone(&self.0);
        Box::pin(async move {
            let req = pb::AllowRequest::decode(request)
                .map_err(|e| tonic::Status::internal(format!("malformed AllowRequest: {e}")))?;
            let decision = quota.allow_async(&AllowRequest::from(&req)).await;
            // Cannot fail: the buffer grows as needed.
            let _ = pb::AllowResponse::from(decision).encode(&mut response);
            Ok(response)
        })
    }
}

/// The tonic service: public with the feature `wire`.
#[derive(Debug, Clone)]
#[cfg_attr(not(feature = "wire"), allow(unreachable_pub))]
pub struct AllowService {
    quota: Arc<Quota>,
}

#[cfg_attr(not(feature = "wire"), allow(unreachable_pub, dead_code))]
impl AllowService {
    /// A service answering from `quota`.
    pub fn new(quota: Arc<Quota>) -> AllowService {
        AllowService { quota }
    }

    /// The service wrapped for tonic's router.
    pub fn into_server(self) -> QuotaServiceServer<AllowService> {
        QuotaServiceServer::new(self)
    }
}

#[tonic::async_trait]
impl pb::quota_service_server::QuotaService for AllowService {
    async fn allow(
        &self,
        request: tonic::Request<pb::AllowRequest>,
    ) -> Result<tonic::Response<pb::AllowResponse>, tonic::Status> {
        let req = request.into_inner();
        let decision = self.quota.allow_async(&AllowRequest::from(&req)).await;
        Ok(tonic::Response::new(decision.into()))
    }
}
