//! The gRPC server's transport limits, in one place: message size, streams,
//! flow-control windows, HTTP/2 keepalive, handshake and idle timeouts, a
//! cap on connections, accept errors backed off, and a drain deadline at
//! shutdown. Any tonic service served with [`ServerLimits::serve`] gets
//! them all.
//!
//! # Examples
//!
//! ```
//! use tollgate::doorman::server::ServerLimits;
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
//! Accepting runs in its own task, which takes a connection permit (a
//! semaphore) for each connection and hands it, wrapped in [`Guarded`], to
//! tonic once the client has sent its first bytes (until then a connection
//! costs its socket and a small task, not HTTP/2's buffers: about 15 KiB
//! each). A connection over the cap is accepted and closed at once, so a
//! client learns of it at once instead of hanging in the listen backlog.
//! An accept error (EMFILE when out of file descriptors) is logged and
//! retried after an exponential back-off from 5 ms to 1 s, never in a
//! tight loop.
//!
//! [`Guarded`] enforces two deadlines on the socket itself: the HTTP/2
//! client preface (24 bytes) must arrive within the handshake timeout, and
//! a connection with no RPC in flight is closed after the idle timeout
//! (HTTP/2 pings do not count as activity). A tower layer
//! ([`InFlightLayer`]) counts each connection's RPCs in flight through the
//! connection info tonic puts in each request's extensions. At shutdown,
//! tonic stops accepting and drains; when the drain deadline passes every
//! remaining connection is closed by the same guard.

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch, OwnedSemaphorePermit, Semaphore};
use tokio::time::{Instant, Sleep};
use tonic::transport::server::{Connected, Router};
use tonic::transport::Server;
use tower::layer::util::{Identity, Stack};
use tracing::{debug, info, warn};

use crate::doorman::tls::{ServeError, ServerTls, TlsError};

/// The HTTP/2 client connection preface is this long.
const PREFACE_BYTES: u64 = 24;

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
        ServerLimits {
            max_message_bytes: 64 * 1024,
            max_concurrent_streams: 64,
            stream_window_bytes: 64 * 1024,
            connection_window_bytes: 256 * 1024,
            max_header_list_bytes: 16 * 1024,
            request_timeout: Duration::from_secs(10),
            keepalive_interval: Duration::from_secs(30),
            keepalive_timeout: Duration::from_secs(10),
            handshake_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(300),
            max_connections: 4096,
            drain_timeout: Duration::from_secs(5),
        }
    }
}

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
        let (kill, killed) = watch::channel(false);
        let (tx, rx) = mpsc::channel(1);
        let accepting = tokio::spawn(accept_loop(listener, *self, tx, killed));
        // Dropping `_kill` (this future ending or being dropped) closes
        // every connection still open.
        let _kill = KillOnDrop(kill);
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

/// Closes every guarded connection when dropped.
struct KillOnDrop(watch::Sender<bool>);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        self.0.send_replace(true);
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

/// Accepts connections until tonic stops taking them.
async fn accept_loop(
    listener: TcpListener,
    limits: ServerLimits,
    tx: mpsc::Sender<Guarded>,
    killed: watch::Receiver<bool>,
) {
    let permits = Arc::new(Semaphore::new(limits.max_connections.max(1)));
    let mut backoff = Duration::ZERO;
    let mut refused: u64 = 0;
    loop {
        let accepted = tokio::select! {
            a = listener.accept() => a,
            () = tx.closed() => return,
        };
        match accepted {
            Ok((stream, peer)) => {
                backoff = Duration::ZERO;
                let Ok(permit) = permits.clone().try_acquire_owned() else {
                    refused += 1;
                    // Log the first refusal and then one in 1000.
                    if refused % 1000 == 1 {
                        warn!(
                            max_connections = limits.max_connections,
                            refused, "connection cap reached: closing new connections"
                        );
                    }
                    drop(stream);
                    continue;
                };
                let _ = stream.set_nodelay(true);
                let guarded = Guarded::new(stream, peer, &limits, permit, killed.clone());
                // Hand the connection to HTTP/2 only once it has sent
                // something: a silent connection then costs a socket and
                // this small task, not an HTTP/2 connection's buffers.
                let tx = tx.clone();
                let timeout = limits.handshake_timeout;
                tokio::spawn(async move {
                    let mut first = [0u8; 1];
                    let spoke =
                        tokio::time::timeout(timeout, guarded.stream.peek(&mut first)).await;
                    match spoke {
                        Ok(Ok(n)) if n > 0 => {
                            let _ = tx.send(guarded).await;
                        }
                        _ => debug!(remote = %guarded.info.remote, "no handshake: closed"),
                    }
                });
            }
            Err(e) => {
                backoff = (backoff * 2).clamp(Duration::from_millis(5), Duration::from_secs(1));
                warn!(error = %e, retry_in = ?backoff, "accept failed; backing off");
                tokio::time::sleep(backoff).await;
            }
        }
    }
}

/// What a connection's RPCs tell its guard.
#[derive(Debug)]
struct Activity {
    origin: Instant,
    in_flight: AtomicUsize,
    /// When the last RPC ended, in nanoseconds since `origin`.
    idle_since: AtomicU64,
}

impl Activity {
    fn begin(self: &Arc<Self>) -> InFlightGuard {
        // Relaxed: the counter is only compared with 0 by the same
        // connection's guard; no other memory depends on it.
        self.in_flight.fetch_add(1, Ordering::Relaxed);
        InFlightGuard(self.clone())
    }

    fn idle_since(&self) -> Instant {
        self.origin + Duration::from_nanos(self.idle_since.load(Ordering::Relaxed))
    }
}

/// Counts one RPC in flight until dropped.
#[derive(Debug)]
struct InFlightGuard(Arc<Activity>);

impl Drop for InFlightGuard {
    fn drop(&mut self) {
        let nanos = self.0.origin.elapsed().as_nanos();
        // Relaxed: a timestamp read only by the connection's guard.
        self.0
            .idle_since
            .store(u64::try_from(nanos).unwrap_or(u64::MAX), Ordering::Relaxed);
        self.0.in_flight.fetch_sub(1, Ordering::Relaxed);
    }
}

/// The connection info tonic puts in every request's extensions.
#[derive(Debug, Clone)]
pub struct ConnInfo {
    /// The peer's address.
    pub remote: SocketAddr,
    activity: Arc<Activity>,
}

/// A connection with its deadlines and its permit.
pub struct Guarded {
    stream: TcpStream,
    info: ConnInfo,
    handshake_timeout: Duration,
    idle_timeout: Duration,
    /// Bytes read so far, up to the preface's length.
    read: u64,
    timer: Pin<Box<Sleep>>,
    killed: Pin<Box<dyn Future<Output = ()> + Send>>,
    _permit: OwnedSemaphorePermit,
}

impl std::fmt::Debug for Guarded {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Guarded")
            .field("remote", &self.info.remote)
            .finish_non_exhaustive()
    }
}

impl Guarded {
    fn new(
        stream: TcpStream,
        remote: SocketAddr,
        limits: &ServerLimits,
        permit: OwnedSemaphorePermit,
        mut killed: watch::Receiver<bool>,
    ) -> Guarded {
        let origin = Instant::now();
        Guarded {
            stream,
            info: ConnInfo {
                remote,
                activity: Arc::new(Activity {
                    origin,
                    in_flight: AtomicUsize::new(0),
                    idle_since: AtomicU64::new(0),
                }),
            },
            handshake_timeout: limits.handshake_timeout,
            idle_timeout: limits.idle_timeout,
            read: 0,
            timer: Box::pin(tokio::time::sleep_until(deadline(
                origin,
                limits.handshake_timeout,
            ))),
            killed: Box::pin(async move {
                let _ = killed.wait_for(|k| *k).await;
            }),
            _permit: permit,
        }
    }

    /// Fails with the reason the connection must close, if any; otherwise
    /// arms the wake-ups for the next deadline and for the kill signal.
    fn check(&mut self, cx: &mut Context<'_>) -> io::Result<()> {
        if self.killed.as_mut().poll(cx).is_ready() {
            return Err(io::Error::new(
                io::ErrorKind::ConnectionAborted,
                "server shutting down",
            ));
        }
        let activity = &self.info.activity;
        let (at, what) = if self.read < PREFACE_BYTES {
            (
                deadline(activity.origin, self.handshake_timeout),
                "handshake",
            )
        } else if activity.in_flight.load(Ordering::Relaxed) == 0 {
            (deadline(activity.idle_since(), self.idle_timeout), "idle")
        } else {
            return Ok(());
        };
        if self.timer.deadline() != at {
            self.timer.as_mut().reset(at);
        }
        if self.timer.as_mut().poll(cx).is_ready() {
            debug!(remote = %self.info.remote, what, "connection timed out");
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!("{what} timeout"),
            ));
        }
        Ok(())
    }
}

/// `from + d`, saturating far in the future.
fn deadline(from: Instant, d: Duration) -> Instant {
    from.checked_add(d)
        .unwrap_or_else(|| from + Duration::from_secs(86_400 * 365))
}

impl AsyncRead for Guarded {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = &mut *self;
        if let Err(e) = this.check(cx) {
            return Poll::Ready(Err(e));
        }
        let before = buf.filled().len();
        let r = Pin::new(&mut this.stream).poll_read(cx, buf);
        if let Poll::Ready(Ok(())) = r {
            let n = (buf.filled().len() - before) as u64;
            this.read = this.read.saturating_add(n).min(PREFACE_BYTES);
        }
        r
    }
}

impl AsyncWrite for Guarded {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = &mut *self;
        if let Err(e) = this.check(cx) {
            return Poll::Ready(Err(e));
        }
        Pin::new(&mut this.stream).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = &mut *self;
        if let Err(e) = this.check(cx) {
            return Poll::Ready(Err(e));
        }
        Pin::new(&mut this.stream).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }
}

impl Connected for Guarded {
    type ConnectInfo = ConnInfo;

    fn connect_info(&self) -> ConnInfo {
        self.info.clone()
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
        let guard = request
            .extensions()
            .get::<ConnInfo>()
            .map(|c| c.activity.begin());
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

impl super::Server {
    /// As [`Server::serve_with`](super::Server::serve_with), over TLS as
    /// `tls` says; the files are read before anything is served.
    ///
    /// # Errors
    ///
    /// [`ServeError::Tls`] when the TLS files cannot be used, else a
    /// transport error from tonic.
    pub async fn serve_with_tls(
        self,
        listener: TcpListener,
        limits: ServerLimits,
        tls: &ServerTls,
        shutdown: impl Future<Output = ()>,
    ) -> Result<(), ServeError> {
        let service = crate::doorman::pb::capacity_server::CapacityServer::new(
            super::grpc::Service::new(self),
        )
        .max_decoding_message_size(limits.max_message_bytes);
        let router = limits.tls_builder(tls)?.add_service(service);
        Ok(limits.serve(router, listener, shutdown).await?)
    }
}
