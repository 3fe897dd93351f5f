//! The gRPC edge: `quotaservice.QuotaService/Allow` served from a
//! [`Quota`].
//!
//! Every outcome, bad input included, is an `AllowResponse` status, never a
//! gRPC error: that is what the reference's clients expect.
//!
//! [`QuotaServer`] serves it on the service kit's lean gRPC server
//! ([`GrpcServer`]), plaintext or TLS, which answers Allow inside each
//! connection's task, under the same [`ServerLimits`] as Doorman's server
//! (a cap on connections, handshake and idle deadlines, a drain at
//! shutdown). [`AllowService`] is the tonic service, for a tonic router of
//! one's own.

use std::future::Future;
use std::io;
use std::sync::Arc;

use prost::Message as _;
use tonic::codegen::Bytes;

use super::pb;
use super::pb::quota_service_server::QuotaServiceServer;
use super::service::{AllowRequest, Quota};
use tollgate_service::{rustls, GrpcServer, ServerLimits, ServerTls, TlsError, UnaryService};

/// The one method served, as an HTTP/2 path.
pub const ALLOW_PATH: &str = "/quotaservice.QuotaService/Allow";

/// The largest Allow request accepted, whatever the limits say: an
/// `AllowRequest` is two names of at most 256 bytes and three numbers, so
/// this is generous, and it bounds what a partly received call holds.
const MAX_MESSAGE: usize = 16 << 10;

/// Serves `quotaservice.QuotaService/Allow` from a [`Quota`]; start with
/// [`QuotaServer::builder`], end with [`QuotaServer::serve`].
///
/// Every option has a default: the default [`ServerLimits`], the
/// connections on the calling runtime, no TLS.
///
/// # Examples
///
/// ```no_run
/// use std::sync::Arc;
/// use std::time::Duration;
/// use tollgate_quota::QuotaConfig;
/// use tollgate_quota::QuotaServer;
/// use tollgate_quota::{QuotaLimits, Quota};
/// use tollgate_service::ServerLimits;
///
/// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
/// let config = QuotaConfig::from_yaml("namespaces:\n  ns:\n    buckets:\n      b: {size: 5, fill_rate: 1}\n")?;
/// let quota = Arc::new(Quota::new(config, QuotaLimits::default(), Arc::new(tollgate::SystemClock::new())));
/// let listener = tokio::net::TcpListener::bind("127.0.0.1:15100").await?;
/// let limits = ServerLimits {
///     max_connections: 10_000,
///     idle_timeout: Duration::from_secs(60),
///     ..ServerLimits::default()
/// };
/// QuotaServer::builder(quota)
///     .limits(limits)
///     .threads(4)
///     .serve(listener, async { let _ = tokio::signal::ctrl_c().await; })
///     .await?;
/// # Ok(())
/// # }
/// ```
#[derive(Debug)]
#[must_use = "a server does nothing until `serve` is called"]
pub struct QuotaServer {
    quota: Arc<Quota>,
    limits: ServerLimits,
    threads: Option<usize>,
    tls: Option<Arc<rustls::ServerConfig>>,
}

impl QuotaServer {
    /// A server answering from `quota`, with every default.
    pub fn builder(quota: Arc<Quota>) -> QuotaServer {
        QuotaServer {
            quota,
            limits: ServerLimits::default(),
            threads: None,
            tls: None,
        }
    }

    /// Serves under `limits` (default [`ServerLimits::default`]), with
    /// requests capped at 16 KiB whatever `max_message_bytes` says.
    pub fn limits(mut self, limits: ServerLimits) -> QuotaServer {
        self.limits = limits;
        self
    }

    /// Runs the connections on `threads` threads (at least one), each with
    /// a single-threaded runtime of its own, handed out round robin: a call
    /// is read, decided and answered on one thread, with no task or wake-up
    /// crossing to another. Without it (the default) the connections are
    /// tasks of the runtime that serves.
    pub fn threads(mut self, threads: usize) -> QuotaServer {
        self.threads = Some(threads);
        self
    }

    /// Serves over TLS as `tls` says (mutual TLS when it names a client
    /// CA); the files are read now.
    ///
    /// # Errors
    ///
    /// [`TlsError`] naming a file that cannot be read or used, or rustls
    /// refusing the setup.
    pub fn tls(mut self, tls: &ServerTls) -> Result<QuotaServer, TlsError> {
        self.tls = Some(tls.rustls_config()?);
        Ok(self)
    }

    /// Serves Allow on `listener` until `shutdown` completes; then drains.
    /// See [`GrpcServer::serve`] for what is done with each connection.
    ///
    /// # Errors
    ///
    /// An error starting a thread's runtime.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future stops accepting and closes every connection.
    pub async fn serve(
        self,
        listener: tokio::net::TcpListener,
        shutdown: impl Future<Output = ()>,
    ) -> io::Result<()> {
        let limits = ServerLimits {
            max_message_bytes: self.limits.max_message_bytes.min(MAX_MESSAGE),
            ..self.limits
        };
        let mut server = GrpcServer::new(Arc::new(Allow(self.quota))).limits(limits);
        if let Some(tls) = self.tls {
            server = server.tls_config(tls);
        }
        if let Some(threads) = self.threads {
            server = server.threads(threads);
        }
        server.serve(listener, shutdown).await
    }
}

/// Allow on the service kit's lean gRPC server.
#[derive(Debug)]
struct Allow(Arc<Quota>);

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
}

/// The tonic service.
#[derive(Debug, Clone)]
pub struct AllowService {
    quota: Arc<Quota>,
}

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
        let decision = self.quota.allow(&AllowRequest::from(&req));
        Ok(tonic::Response::new(decision.into()))
    }
}
