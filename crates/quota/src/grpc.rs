//! The gRPC edge: `quotaservice.QuotaService/Allow` served from a
//! [`Quota`].
//!
//! Every outcome, bad input included, is an `AllowResponse` status, never a
//! gRPC error: that is what the reference's clients expect.
//!
//! [`QuotaServer`] serves it: plaintext on a lean server on the `h2`
//! crate (`grpc/lean.rs`) that answers Allow inside each connection's
//! task, or over TLS with tonic; both under the same [`ServerLimits`] as
//! Doorman's server (a cap on connections, handshake and idle deadlines, a
//! drain at shutdown). [`AllowService`] is the tonic service, for a tonic
//! router of one's own.

use std::future::Future;
use std::io;
use std::sync::Arc;

use tonic::transport::ServerTlsConfig;

use super::pb;
use super::pb::quota_service_server::QuotaServiceServer;
use super::service::{AllowRequest, Quota};
use tollgate_service::{ServeError, ServerLimits, ServerTls, TlsError};

mod lean;

pub use lean::ALLOW_PATH;

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
    tls: Option<ServerTlsConfig>,
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

    /// Serves under `limits` (default [`ServerLimits::default`]).
    pub fn limits(mut self, limits: ServerLimits) -> QuotaServer {
        self.limits = limits;
        self
    }

    /// Runs the connections on `threads` threads (at least one), each with
    /// a single-threaded runtime of its own, handed out round robin: a call
    /// is read, decided and answered on one thread, with no task or wake-up
    /// crossing to another. Without it (the default) the connections are
    /// tasks of the runtime that serves. Plaintext only: over TLS, tonic
    /// serves on the calling runtime.
    pub fn threads(mut self, threads: usize) -> QuotaServer {
        self.threads = Some(threads);
        self
    }

    /// Serves over TLS as `tls` says (mutual TLS when it names a client
    /// CA), with tonic; the files are read now.
    ///
    /// # Errors
    ///
    /// [`TlsError`] naming a file that cannot be read or holds no PEM
    /// certificate or key.
    pub fn tls(mut self, tls: &ServerTls) -> Result<QuotaServer, TlsError> {
        self.tls = Some(tls.load()?);
        Ok(self)
    }

    /// Serves Allow on `listener` until `shutdown` completes; then stops
    /// accepting, asks every connection to finish its calls and close
    /// (HTTP/2 GOAWAY), waits for them for at most
    /// [`ServerLimits::drain_timeout`] and closes those still open.
    /// Returns once every connection has closed.
    ///
    /// A connection beyond [`ServerLimits::max_connections`] is accepted
    /// and closed at once; one that has not sent the HTTP/2 preface within
    /// [`ServerLimits::handshake_timeout`], or has had no call in flight
    /// for [`ServerLimits::idle_timeout`], is closed.
    ///
    /// # Errors
    ///
    /// An error starting a thread's runtime; over TLS, a [`ServeError`]
    /// (rustls rejecting the TLS setup, or tonic's transport failing)
    /// inside the [`io::Error`]. A failed connection is only closed, and a
    /// failed accept retried after a back-off.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future stops accepting and closes every connection.
    pub async fn serve(
        self,
        listener: tokio::net::TcpListener,
        shutdown: impl Future<Output = ()>,
    ) -> io::Result<()> {
        let QuotaServer {
            quota,
            limits,
            threads,
            tls,
        } = self;
        let Some(tls) = tls else {
            return match threads {
                None => lean::serve_tasks(quota, listener, limits, shutdown).await,
                Some(n) => lean::serve_threads(quota, listener, n, limits, shutdown).await,
            };
        };
        let service = AllowService::new(quota)
            .into_server()
            .max_decoding_message_size(limits.max_message_bytes);
        let served = match limits.builder().tls_config(tls) {
            Ok(mut builder) => {
                let router = builder.add_service(service);
                limits
                    .serve(router, listener, shutdown)
                    .await
                    .map_err(ServeError::Transport)
            }
            Err(source) => Err(ServeError::Tls(TlsError::Rejected { source })),
        };
        served.map_err(io::Error::other)
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
