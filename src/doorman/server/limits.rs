//! The gRPC server's transport limits, in one place: message size, streams,
//! flow-control windows, HTTP/2 keepalive, handshake and idle timeouts, a
//! cap on connections, accept errors backed off, and a drain deadline at
//! shutdown. Any tonic service served with [`ServerLimits::serve`] gets
//! them all.
//!
//! # Examples
//!
//! ```
//! use tollgate::doorman::ServerLimits;
//! # use tollgate::doorman::pb::capacity_server::CapacityServer;
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
//! Doorman messages are small, so the defaults are tight: a request larger
//! than [`ServerLimits::max_message_bytes`] is refused from its 5-byte
//! gRPC header, before its body is buffered, and each HTTP/2 stream and
//! connection may hold only one flow-control window of unread data. With
//! at most [`ServerLimits::max_concurrent_streams`] streams per connection
//! and [`ServerLimits::max_connections`] connections, the memory a client
//! can pin is bounded by
//! `max_connections × max_concurrent_streams × max_message_bytes` at worst,
//! and a stream that stops sending mid-message is ended by
//! [`ServerLimits::request_timeout`].
//!
//! The connections themselves (the cap, the handshake and idle deadlines,
//! the kill switch at the end of the drain) are [`crate::conn`]'s, shared
//! with the quota server: accepting runs in its own task and hands each
//! connection, wrapped in [`Guarded`], to tonic once the client has sent
//! its first bytes (until then a connection costs its socket and a small
//! task, not HTTP/2's buffers: about 15 KiB each). A tower layer
//! ([`InFlightLayer`]) counts each connection's RPCs in flight, for the
//! idle deadline, through the [`ConnInfo`] tonic puts in each request's
//! extensions. At shutdown, tonic stops accepting and drains; when the
//! drain deadline passes every remaining connection is closed.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::sync::{mpsc, watch};
use tonic::transport::server::{Connected, Router};
use tonic::transport::Server;
use tower::layer::util::{Identity, Stack};
use tracing::{info, warn};

use crate::conn::{self, ConnInfo, ConnectionLimits, Guarded, KillSwitch, Permits};
use crate::doorman::{ServerTls, TlsError};

/// The transport limits of a gRPC server. The defaults suit Doorman's small
/// messages; every field is a `tollgate serve` flag.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ServerLimits {
    /// Largest request message, in bytes (default 64 KiB: a GetCapacity
    /// for about 1000 resources with 40-byte ids). Larger ones get
    /// OUT_OF_RANGE from their header, before their body is read.
    pub max_message_bytes: usize,
    /// Most concurrent HTTP/2 streams (RPCs) per connection (default 64).
    pub max_concurrent_streams: u32,
    /// HTTP/2 flow-control window per stream, in bytes (default 64 KiB):
    /// how much unread data one stream may hold.
    pub stream_window_bytes: u32,
    /// HTTP/2 flow-control window per connection, in bytes (default
    /// 256 KiB).
    pub connection_window_bytes: u32,
    /// Largest HTTP/2 header list, in bytes (default 16 KiB).
    pub max_header_list_bytes: u32,
    /// How long one RPC may take, reading its request included (default
    /// 10 s): ends a stream that stops sending mid-message.
    pub request_timeout: Duration,
    /// HTTP/2 PING interval (default 30 s).
    pub keepalive_interval: Duration,
    /// How long a PING may go unanswered before the connection is closed
    /// (default 10 s).
    pub keepalive_timeout: Duration,
    /// How long a new connection may take to send the HTTP/2 preface
    /// (default 10 s).
    pub handshake_timeout: Duration,
    /// How long a connection may stay open with no RPC in flight (default
    /// 5 min).
    pub idle_timeout: Duration,
    /// Most connections open at once (default 4096); more are accepted and
    /// closed at once.
    pub max_connections: usize,
    /// At shutdown, how long in-flight RPCs may take to finish before every
    /// connection is closed (default 5 s).
    pub drain_timeout: Duration,
}

impl Default for ServerLimits {
    fn default() -> Self {
        let conn = ConnectionLimits::default();
        ServerLimits {
            max_message_bytes: 64 * 1024,
            max_concurrent_streams: 64,
            stream_window_bytes: 64 * 1024,
            connection_window_bytes: 256 * 1024,
            max_header_list_bytes: 16 * 1024,
            request_timeout: Duration::from_secs(10),
            keepalive_interval: Duration::from_secs(30),
            keepalive_timeout: Duration::from_secs(10),
            handshake_timeout: conn.handshake_timeout,
            idle_timeout: conn.idle_timeout,
            max_connections: conn.max_connections,
            drain_timeout: conn.drain_timeout,
        }
    }
}

/// A tonic server builder with the limits applied.
pub(super) type LimitedServer = Server<Stack<InFlightLayer, Identity>>;

/// A tonic router built from a [`LimitedServer`].
pub(super) type LimitedRouter = Router<Stack<InFlightLayer, Identity>>;

impl ServerLimits {
    /// The limits on connections alone, which do not depend on tonic.
    pub fn connection_limits(&self) -> ConnectionLimits {
        ConnectionLimits {
            max_connections: self.max_connections,
            handshake_timeout: self.handshake_timeout,
            idle_timeout: self.idle_timeout,
            drain_timeout: self.drain_timeout,
        }
    }

    /// These limits with `conn`'s limits on connections.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::conn::ConnectionLimits;
    /// use tollgate::doorman::ServerLimits;
    ///
    /// let conn = ConnectionLimits {
    ///     max_connections: 10,
    ///     ..ConnectionLimits::default()
    /// };
    /// let limits = ServerLimits::default().with_connection_limits(conn);
    /// assert_eq!(limits.max_connections, 10);
    /// assert_eq!(limits.connection_limits(), conn);
    /// ```
    pub fn with_connection_limits(self, conn: ConnectionLimits) -> ServerLimits {
        ServerLimits {
            max_connections: conn.max_connections,
            handshake_timeout: conn.handshake_timeout,
            idle_timeout: conn.idle_timeout,
            drain_timeout: conn.drain_timeout,
            ..self
        }
    }

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
        let accepting = tokio::spawn(accept_loop(
            listener,
            self.connection_limits(),
            tx,
            _kill.subscribe(),
        ));
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
                warn!(drain = ?drain, "drain deadline passed: closing the remaining connections");
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
    limits: ConnectionLimits,
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

impl ServerLimits {
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
}
