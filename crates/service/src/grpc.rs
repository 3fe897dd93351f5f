//! Serving a tonic router under [`ServerLimits`]: the HTTP/2 settings on
//! the builder, connections accepted and guarded by `conn.rs`, and a
//! graceful shutdown that drains in-flight RPCs for at most the drain
//! deadline.
//!
//! # Examples
//!
//! ```
//! use tollgate_service::ServerLimits;
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let limits = ServerLimits {
//!     max_connections: 100,
//!     ..ServerLimits::default()
//! };
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
//! # let health = tonic::service::Routes::default();
//! let router = limits.builder().add_routes(health);
//! // Serves until the shutdown future completes, then drains for at most
//! // `limits.drain_timeout`.
//! limits.serve(router, listener, async {}).await?;
//! # Ok(())
//! # }
//! ```
//!
//! # Implementation notes
//!
//! Accepting runs in its own task and hands each connection, wrapped in
//! [`Guarded`], to tonic once the client has sent its first bytes (until
//! then a connection costs its socket and a small task, not HTTP/2's
//! buffers: about 15 KiB each). A tower layer ([`InFlightLayer`]) counts
//! each connection's RPCs in flight, for the idle deadline, through the
//! [`ConnInfo`] tonic puts in each request's extensions. At shutdown,
//! tonic stops accepting and drains; when the drain deadline passes every
//! remaining connection is closed.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::net::TcpListener;
use tokio::sync::{mpsc, watch};
use tonic::transport::server::{Connected, Router};
use tonic::transport::Server;
use tower::layer::util::{Identity, Stack};
use tracing::info;

use super::conn::{self, deadline_passed, ConnInfo, Guarded, KillSwitch, Permits};
use super::limits::ServerLimits;
use super::tls::{ServerTls, TlsError};

/// A tonic server builder with the limits applied.
pub type LimitedServer = Server<Stack<InFlightLayer, Identity>>;

/// A tonic router built from a [`LimitedServer`].
pub type LimitedRouter = Router<Stack<InFlightLayer, Identity>>;

impl ServerLimits {
    /// A tonic server builder with these limits; add services to it and
    /// pass the router to [`serve`](Self::serve). Services should also cap
    /// their decoding at [`max_message_bytes`](Self::max_message_bytes)
    /// (generated servers' `max_decoding_message_size`).
    pub fn builder(&self) -> LimitedServer {
        Server::builder()
            .tcp_nodelay(true)
            .timeout(self.request_timeout)
            .max_concurrent_streams(self.max_concurrent_streams)
            .initial_stream_window_size(self.stream_window_bytes)
            .initial_connection_window_size(self.connection_window_bytes)
            .http2_max_header_list_size(self.max_header_list_bytes)
            .http2_keepalive_interval(Some(self.keepalive_interval))
            .http2_keepalive_timeout(Some(self.keepalive_timeout))
            .layer(InFlightLayer)
    }

    /// As [`builder`](Self::builder), serving over TLS as `tls` says
    /// (mutual TLS when it names a client CA).
    ///
    /// # Errors
    ///
    /// [`TlsError`] naming a file that cannot be read or holds no PEM
    /// certificate or key, or that rustls rejects.
    pub fn tls_builder(&self, tls: &ServerTls) -> Result<LimitedServer, TlsError> {
        self.builder()
            .tls_config(tls.load()?)
            .map_err(|source| TlsError::Rejected { source })
    }

    /// Serves `router` on `listener` until `shutdown` completes, then stops
    /// accepting, lets in-flight RPCs finish for at most
    /// [`drain_timeout`](Self::drain_timeout) and closes every connection.
    ///
    /// # Errors
    ///
    /// A transport error from tonic.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future stops accepting and closes every connection.
    pub async fn serve(
        &self,
        router: LimitedRouter,
        listener: TcpListener,
        shutdown: impl Future<Output = ()>,
    ) -> Result<(), tonic::transport::Error> {
        // Dropping `_kill` (this future ending or being dropped) closes
        // every connection still open.
        let _kill = KillSwitch::new();
        let (tx, rx) = mpsc::channel(1);
        let accepting = tokio::spawn(accept_loop(listener, *self, tx, _kill.subscribe()));
        let (stopping_tx, stopping) = tokio::sync::oneshot::channel::<()>();
        let signal = async move {
            shutdown.await;
            info!("shutting down: no new connections, draining in-flight RPCs");
            let _ = stopping_tx.send(());
        };
        let serving = router.serve_with_incoming_shutdown(Incoming { rx }, signal);
        tokio::pin!(serving);
        let drain = self.drain_timeout;
        let deadline = async move {
            if stopping.await.is_err() {
                return std::future::pending().await;
            }
            tokio::time::sleep(drain).await;
        };
        let result = tokio::select! {
            r = &mut serving => r,
            () = deadline => {
                deadline_passed(drain);
                Ok(())
            }
        };
        accepting.abort();
        result
    }
}

/// The accepted connections, as tonic takes them.
#[derive(Debug)]
struct Incoming {
    rx: mpsc::Receiver<Guarded>,
}

impl tonic::codegen::tokio_stream::Stream for Incoming {
    type Item = Result<Guarded, io::Error>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.rx.poll_recv(cx).map(|c| c.map(Ok))
    }
}

/// Accepts connections until tonic stops taking them, handing each to it
/// once its client has sent something.
async fn accept_loop(
    listener: TcpListener,
    limits: ServerLimits,
    tx: mpsc::Sender<Guarded>,
    killed: watch::Receiver<bool>,
) {
    let permits = Permits::new(limits.max_connections);
    let closed = tx.clone();
    conn::accept_loop(
        &listener,
        &permits,
        closed.closed(),
        |stream, peer, permit| {
            let mut guarded = Guarded::new(stream, peer, &limits, permit, killed.clone());
            let tx = tx.clone();
            tokio::spawn(async move {
                if guarded.first_bytes().await {
                    let _ = tx.send(guarded).await;
                }
            });
        },
    )
    .await;
}

impl Connected for Guarded {
    type ConnectInfo = ConnInfo;

    fn connect_info(&self) -> ConnInfo {
        self.info().clone()
    }
}

/// Counts each connection's RPCs in flight, for the idle timeout.
#[derive(Debug, Clone, Copy, Default)]
pub struct InFlightLayer;

impl<S> tower::Layer<S> for InFlightLayer {
    type Service = InFlight<S>;

    fn layer(&self, inner: S) -> InFlight<S> {
        InFlight { inner }
    }
}

/// The service [`InFlightLayer`] makes.
#[derive(Debug, Clone)]
pub struct InFlight<S> {
    inner: S,
}

impl<S, B> tower::Service<tonic::codegen::http::Request<B>> for InFlight<S>
where
    S: tower::Service<tonic::codegen::http::Request<B>>,
    S::Future: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<S::Response, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: tonic::codegen::http::Request<B>) -> Self::Future {
        let guard = request.extensions().get::<ConnInfo>().map(ConnInfo::begin);
        let future = self.inner.call(request);
        Box::pin(async move {
            let response = future.await;
            drop(guard);
            response
        })
    }
}
