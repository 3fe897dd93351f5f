//! One lean gRPC server for every tollgate service: unary calls over HTTP/2
//! on the `h2` crate, plaintext or TLS (rustls), under [`ServerLimits`].
//! Doorman's four RPCs and quota's Allow are served here, each by a
//! [`UnaryService`] that decodes, decides and encodes; the server does the
//! rest.
//!
//! # Examples
//!
//! A service that echoes its request message back:
//!
//! ```
//! use std::sync::Arc;
//! use tollgate_service::{GrpcServer, UnaryService};
//!
//! struct Echo;
//!
//! impl UnaryService for Echo {
//!     type Method = ();
//!
//!     fn method(&self, path: &str) -> Option<()> {
//!         (path == "/echo.Echo/Say").then_some(())
//!     }
//!
//!     fn call(&self, (): (), request: tonic::codegen::Bytes, response: &mut bytes::BytesMut) -> Result<(), tonic::Status> {
//!         response.extend_from_slice(&request);
//!         Ok(())
//!     }
//! }
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> std::io::Result<()> {
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
//! // Serves until the shutdown future completes, then drains.
//! GrpcServer::new(Arc::new(Echo)).serve(listener, async {}).await?;
//! # Ok(())
//! # }
//! ```
//!
//! # Implementation notes
//!
//! Written on `h2` rather than served through tonic because the decisions
//! are small and never block: tonic's per-call task, tower stack, body
//! and codec machinery cost the server two to three times the decision
//! itself. Here a unary call is an HTTP/2 stream: request headers naming
//! the method, one length-prefixed message (a compressed flag, a 4-byte
//! big-endian length, the protobuf), then response headers, one
//! length-prefixed message and trailers with `grpc-status: 0`; a refusal
//! is "trailers-only", one HEADERS frame carrying the status.
//!
//! Each connection's task accepts every stream that has arrived, answers
//! each whose message has arrived (almost always in the same read as its
//! headers) and lets the answers leave in one write; only a stream whose
//! message is still on its way, or whose method [waits](UnaryService::waits)
//! (on Redis, say), gets a task of its own, bounded by
//! [`ServerLimits::request_timeout`]. Answers are encoded into a buffer
//! of a few KiB per thread and split off it, so most answers cost no
//! allocation of their own. Connections are accepted, capped,
//! guarded and drained by the kit (`conn.rs`, `drain.rs`) as a tonic
//! server's are. The modules:
//!
//! * `connection.rs`: one HTTP/2 connection, its TLS handshake and its
//!   keepalive pings;
//! * `call.rs`: one call, from its message to its answer;
//! * `refused.rs`: the log line for a refused TLS handshake, with its
//!   likely fix.

use std::fmt;
use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;

use bytes::BytesMut;
use tokio::sync::OwnedSemaphorePermit;
use tokio_rustls::rustls;
use tonic::codegen::Bytes;

use super::conn::{accept_loop, Guarded};
use super::drain::Drain;
use super::limits::ServerLimits;
use super::tls::{ServerTls, TlsError};

mod call;
mod connection;
mod refused;

use connection::Shared;

/// A gRPC service of unary methods that answer at once: what
/// [`GrpcServer`] serves.
pub trait UnaryService: Send + Sync + 'static {
    /// A method of the service, as [`method`](Self::method) finds it.
    type Method: Copy + Send + 'static;

    /// The method `path` (`/package.Service/Method`) names, if this
    /// service has it; a call to any other path is answered
    /// `UNIMPLEMENTED`.
    fn method(&self, path: &str) -> Option<Self::Method>;

    /// Answers a call to `method` whose request message is `request`:
    /// appends the encoded response message to `response` (which may
    /// already hold bytes of the server's own: append, never clear), or
    /// returns the status to answer instead.
    ///
    /// # Errors
    ///
    /// The gRPC status the call is answered with, such as
    /// `INVALID_ARGUMENT` for a request the service refuses.
    fn call(
        &self,
        method: Self::Method,
        request: Bytes,
        response: &mut BytesMut,
    ) -> Result<(), tonic::Status>;

    /// Whether a call to `method` waits on something outside the process
    /// (a store across the network) and is answered through
    /// [`call_later`](Self::call_later); `false` (the default) for every
    /// method [`call`](Self::call) answers at once.
    fn waits(&self, method: Self::Method) -> bool {
        let _ = method;
        false
    }

    /// Answers a call to a method that [`waits`](Self::waits): the future
    /// appends the encoded response message to `response` (which holds
    /// bytes of the server's own: append, never clear) and gives it back,
    /// or gives the status to answer instead. The server runs it as a task
    /// of its own, bounded by [`ServerLimits::request_timeout`] from the
    /// call's arrival, while the connection's other calls go on.
    ///
    /// The default answers at once through [`call`](Self::call).
    ///
    /// # Examples
    ///
    /// A method answered after an await (a timer here; a store's call in
    /// practice):
    ///
    /// ```
    /// use std::{future::Future, pin::Pin, time::Duration};
    /// use bytes::BytesMut;
    /// use tollgate_service::UnaryService;
    /// use tonic::codegen::Bytes;
    ///
    /// struct Later;
    ///
    /// impl UnaryService for Later {
    ///     type Method = ();
    ///
    ///     fn method(&self, path: &str) -> Option<()> {
    ///         (path == "/later.Later/Echo").then_some(())
    ///     }
    ///
    ///     fn call(&self, (): (), _: Bytes, _: &mut BytesMut) -> Result<(), tonic::Status> {
    ///         Err(tonic::Status::internal("only answered later"))
    ///     }
    ///
    ///     fn waits(&self, (): ()) -> bool {
    ///         true
    ///     }
    ///
    ///     fn call_later(
    ///         &self,
    ///         (): (),
    ///         request: Bytes,
    ///         mut response: BytesMut,
    ///     ) -> Pin<Box<dyn Future<Output = Result<BytesMut, tonic::Status>> + Send>> {
    ///         Box::pin(async move {
    ///             tokio::time::sleep(Duration::from_millis(1)).await;
    ///             response.extend_from_slice(&request);
    ///             Ok(response)
    ///         })
    ///     }
    /// }
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// let answer = Later.call_later((), Bytes::from_static(b"hi"), BytesMut::new()).await;
    /// assert_eq!(&answer.unwrap()[..], b"hi");
    /// # }
    /// ```
    fn call_later(
        &self,
        method: Self::Method,
        request: Bytes,
        mut response: BytesMut,
    ) -> Pin<Box<dyn Future<Output = Result<BytesMut, tonic::Status>> + Send + 'static>> {
        let answered = self.call(method, request, &mut response).map(|()| response);
        Box::pin(std::future::ready(answered))
    }
}

/// Serves a [`UnaryService`] over HTTP/2, plaintext or TLS, under
/// [`ServerLimits`]; start with [`GrpcServer::new`], end with
/// [`GrpcServer::serve`].
///
/// Every option has a default: the default [`ServerLimits`], connections
/// as tasks of the runtime that serves, no TLS.
#[must_use = "a server does nothing until `serve` is called"]
pub struct GrpcServer<S> {
    service: Arc<S>,
    limits: ServerLimits,
    threads: Option<usize>,
    tls: Option<Arc<rustls::ServerConfig>>,
    refused: crate::conn::RefusedConnections,
}

impl<S> fmt::Debug for GrpcServer<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GrpcServer")
            .field("limits", &self.limits)
            .field("threads", &self.threads)
            .field("tls", &self.tls.is_some())
            .finish_non_exhaustive()
    }
}

impl<S: UnaryService> GrpcServer<S> {
    /// A server for `service`, with every default.
    pub fn new(service: Arc<S>) -> GrpcServer<S> {
        GrpcServer {
            service,
            limits: ServerLimits::default(),
            threads: None,
            tls: None,
            refused: crate::conn::RefusedConnections::default(),
        }
    }

    /// Counts the connections it refuses in the caller's counters (of a
    /// Prometheus registry, say): `over_cap` those closed at once because
    /// [`ServerLimits::max_connections`] were open, `tls_handshakes`
    /// those whose TLS handshake failed for a TLS reason (a certificate
    /// refused, a client speaking plaintext).
    pub fn count_refused(
        mut self,
        over_cap: prometheus::IntCounter,
        tls_handshakes: prometheus::IntCounter,
    ) -> GrpcServer<S> {
        self.refused = crate::conn::RefusedConnections::new(over_cap, tls_handshakes);
        self
    }

    /// Serves under `limits` (default [`ServerLimits::default`]): every
    /// field applies.
    pub fn limits(mut self, limits: ServerLimits) -> GrpcServer<S> {
        self.limits = limits;
        self
    }

    /// Runs the connections on `threads` threads (at least one), each with
    /// a single-threaded runtime of its own, handed out round robin: a call
    /// is read, decided and answered on one thread, with no task or wake-up
    /// crossing to another. Without it (the default) the connections are
    /// tasks of the runtime that serves.
    pub fn threads(mut self, threads: usize) -> GrpcServer<S> {
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
    pub fn tls(self, tls: &ServerTls) -> Result<GrpcServer<S>, TlsError> {
        Ok(self.tls_config(tls.rustls_config()?))
    }

    /// Serves over TLS with `config`, as [`ServerTls::rustls_config`]
    /// makes it (it must offer ALPN `h2` to clients that ask for it).
    pub fn tls_config(mut self, config: Arc<rustls::ServerConfig>) -> GrpcServer<S> {
        self.tls = Some(config);
        self
    }

    /// Serves on `listener` until `shutdown` completes; then stops
    /// accepting, asks every connection to finish its calls and close
    /// (HTTP/2 GOAWAY), waits for them for at most
    /// [`ServerLimits::drain_timeout`] and closes those still open.
    /// Returns once every connection has closed.
    ///
    /// A connection beyond [`ServerLimits::max_connections`] is accepted
    /// and closed at once; one that has not sent the HTTP/2 preface (or
    /// finished its TLS handshake) within
    /// [`ServerLimits::handshake_timeout`], has had no call in flight for
    /// [`ServerLimits::idle_timeout`], or leaves a keepalive PING
    /// unanswered, is closed. A refused TLS handshake is logged at warn
    /// with rustls' reason and its likely fix, at most once a second.
    ///
    /// # Errors
    ///
    /// An error starting a thread's runtime. A failed connection is only
    /// closed, and a failed accept retried after a back-off.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future stops accepting and closes every connection.
    pub async fn serve(
        self,
        listener: tokio::net::TcpListener,
        shutdown: impl Future<Output = ()>,
    ) -> io::Result<()> {
        let GrpcServer {
            service,
            limits,
            threads,
            tls,
            refused,
        } = self;
        let shared = Arc::new(Shared::new(service, limits, tls, refused));
        match threads {
            None => serve_tasks(shared, listener, shutdown).await,
            Some(n) => serve_threads(shared, listener, n, shutdown).await,
        }
    }
}

/// Serves with each connection a task of the calling runtime.
async fn serve_tasks<S: UnaryService>(
    shared: Arc<Shared<S>>,
    listener: tokio::net::TcpListener,
    shutdown: impl Future<Output = ()>,
) -> io::Result<()> {
    let drain = Drain::new(&shared.limits).counting(&shared.counts);
    let (stopping, killed) = (drain.stopping(), drain.killed());
    accept_loop(&listener, drain.permits(), shutdown, |io, peer, permit| {
        let guarded = Guarded::new(io, peer, &shared.limits, permit, killed.clone());
        tokio::spawn(connection::serve(
            Arc::clone(&shared),
            guarded,
            stopping.clone(),
        ));
    })
    .await;
    drop(listener);
    drain.run().await;
    Ok(())
}

/// Serves with the connections on `threads` threads, each with a
/// current-thread runtime of its own, handed out round robin.
async fn serve_threads<S: UnaryService>(
    shared: Arc<Shared<S>>,
    listener: tokio::net::TcpListener,
    threads: usize,
    shutdown: impl Future<Output = ()>,
) -> io::Result<()> {
    type Handed = (std::net::TcpStream, SocketAddr, OwnedSemaphorePermit);
    let drain = Drain::new(&shared.limits).counting(&shared.counts);
    let mut workers = Vec::with_capacity(threads.max(1));
    let mut done = Vec::with_capacity(threads.max(1));
    for i in 0..threads.max(1) {
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<Handed>();
        let (done_tx, done_rx) = tokio::sync::oneshot::channel::<()>();
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let (shared, stop, killed) = (Arc::clone(&shared), drain.stopping(), drain.killed());
        std::thread::Builder::new()
            .name(format!("grpc-{i}"))
            .spawn(move || {
                rt.block_on(async move {
                    let mut open = tokio::task::JoinSet::new();
                    while let Some((io, peer, permit)) = rx.recv().await {
                        // Reap finished connections so the set stays small.
                        while open.try_join_next().is_some() {}
                        if let Ok(io) = tokio::net::TcpStream::from_std(io) {
                            // Made here: its timer belongs to this runtime.
                            let guarded =
                                Guarded::new(io, peer, &shared.limits, permit, killed.clone());
                            open.spawn(connection::serve(
                                Arc::clone(&shared),
                                guarded,
                                stop.clone(),
                            ));
                        }
                    }
                    while open.join_next().await.is_some() {}
                });
                let _ = done_tx.send(());
            })?;
        workers.push(tx);
        done.push(done_rx);
    }
    let mut next = 0;
    accept_loop(&listener, drain.permits(), shutdown, |io, peer, permit| {
        if let Ok(io) = io.into_std() {
            let _ = workers[next % workers.len()].send((io, peer, permit));
            next += 1;
        }
    })
    .await;
    drop(listener);
    drop(workers);
    drain.run().await;
    for d in done {
        let _ = d.await;
    }
    Ok(())
}
