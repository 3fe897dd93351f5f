//! Accepted TCP connections under [`ServerLimits`]: a cap on how many are
//! open, a deadline for the HTTP/2 preface, an idle deadline and a kill
//! switch at the end of the drain. The lean gRPC server (`lean.rs`)
//! accepts through here.
//!
//! # Implementation notes
//!
//! The accept loop takes a permit (a semaphore) for each connection; a
//! connection over the cap is accepted and closed at once, so its client
//! learns of it at once instead of hanging in the listen backlog. An
//! accept error (EMFILE when out of file descriptors) is logged and
//! retried after an exponential back-off from 5 ms to 1 s, never in a
//! tight loop.
//!
//! A connection is handed to HTTP/2 once it has sent its first byte
//! (`Guarded::first_bytes`): until then it costs its socket and a small
//! task, not an HTTP/2 connection's buffers.
//!
//! [`Guarded`] enforces two deadlines on the socket itself: the HTTP/2
//! client preface (24 bytes) must arrive within the handshake timeout, and
//! a connection with no RPC in flight is closed after the idle timeout
//! (HTTP/2 pings do not count as activity). The server counts each
//! connection's RPCs in flight through its [`ConnInfo`]. At shutdown the
//! server stops accepting and drains; when the drain deadline passes, the
//! kill switch closes every remaining connection through the same guard.

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use prometheus::IntCounter;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{watch, OwnedSemaphorePermit, Semaphore};
use tokio::time::{Instant, Sleep};
use tracing::{debug, warn};

use super::limits::ServerLimits;

/// The HTTP/2 client connection preface is this long.
const PREFACE_BYTES: u64 = 24;

/// Where a server counts the connections it refused: those over
/// [`ServerLimits::max_connections`], closed as soon as accepted, and those
/// whose TLS handshake failed for a TLS reason (a certificate refused, a
/// client speaking plaintext). The counters are the caller's (see
/// `GrpcServer::count_refused`), or none. Clones count together.
#[derive(Debug, Clone, Default)]
pub(crate) struct RefusedConnections {
    counters: Option<(IntCounter, IntCounter)>,
}

impl RefusedConnections {
    pub(crate) fn new(over_cap: IntCounter, tls: IntCounter) -> RefusedConnections {
        RefusedConnections {
            counters: Some((over_cap, tls)),
        }
    }

    pub(crate) fn count_over_cap(&self) {
        if let Some((over_cap, _)) = &self.counters {
            over_cap.inc();
        }
    }

    pub(crate) fn count_tls(&self) {
        if let Some((_, tls)) = &self.counters {
            tls.inc();
        }
    }
}

/// The open connections' permits: at most the cap are out at once.
#[derive(Debug, Clone)]
pub(crate) struct Permits {
    semaphore: Arc<Semaphore>,
    total: u32,
    refused: RefusedConnections,
}

impl Permits {
    /// `max` permits (at least one). A cap beyond `u32::MAX` is no cap a
    /// machine reaches, so it is held there.
    pub(crate) fn new(max: usize) -> Permits {
        let total = u32::try_from(max.clamp(1, Semaphore::MAX_PERMITS)).unwrap_or(u32::MAX);
        Permits {
            semaphore: Arc::new(Semaphore::new(total as usize)),
            total,
            refused: RefusedConnections::default(),
        }
    }

    /// Counts the connections refused over the cap in `refused`.
    pub(crate) fn counting(mut self, refused: &RefusedConnections) -> Permits {
        self.refused = refused.clone();
        self
    }

    fn try_take(&self) -> Option<OwnedSemaphorePermit> {
        Arc::clone(&self.semaphore).try_acquire_owned().ok()
    }

    /// Completes once every permit is back: every connection accepted has
    /// closed. (A tonic server learns this from tonic instead.)
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: dropping it takes no permit.
    pub(crate) async fn all_returned(&self) {
        // The semaphore is never closed, so this only waits.
        let _ = self.semaphore.acquire_many(self.total).await;
    }
}

/// Accepts connections on `listener` until `stop` completes, handing each
/// to `each` with its permit; a connection over the cap is closed at once.
pub(crate) async fn accept_loop(
    listener: &TcpListener,
    permits: &Permits,
    stop: impl Future<Output = ()>,
    mut each: impl FnMut(TcpStream, SocketAddr, OwnedSemaphorePermit),
) {
    tokio::pin!(stop);
    let mut backoff = Duration::ZERO;
    let mut refused: u64 = 0;
    loop {
        let accepted = tokio::select! {
            a = listener.accept() => a,
            () = &mut stop => return,
        };
        match accepted {
            Ok((stream, peer)) => {
                backoff = Duration::ZERO;
                let Some(permit) = permits.try_take() else {
                    refused += 1;
                    permits.refused.count_over_cap();
                    // Log the first refusal and then one in 1000.
                    if refused % 1000 == 1 {
                        warn!(
                            max_connections = permits.total,
                            refused, "connection cap reached: closing new connections"
                        );
                    }
                    drop(stream);
                    continue;
                };
                let _ = stream.set_nodelay(true);
                each(stream, peer, permit);
            }
            Err(e) => {
                backoff = (backoff * 2).clamp(Duration::from_millis(5), Duration::from_secs(1));
                warn!(error = %e, retry_in = ?backoff, "accept failed; backing off");
                tokio::time::sleep(backoff).await;
            }
        }
    }
}

/// Closes every guarded connection subscribed to it when it is dropped or
/// [`kill`](Self::kill) is called.
#[derive(Debug)]
pub(crate) struct KillSwitch(watch::Sender<bool>);

impl KillSwitch {
    pub(crate) fn new() -> KillSwitch {
        KillSwitch(watch::channel(false).0)
    }

    /// What a [`Guarded`] watches.
    pub(crate) fn subscribe(&self) -> watch::Receiver<bool> {
        self.0.subscribe()
    }

    /// Closes every connection still open.
    pub(crate) fn kill(&self) {
        self.0.send_replace(true);
    }
}

/// Logs that the drain deadline passed and the remaining connections are
/// being closed.
pub(crate) fn deadline_passed(drain: Duration) {
    warn!(drain = ?drain, "drain deadline passed: closing the remaining connections");
}

impl Drop for KillSwitch {
    fn drop(&mut self) {
        self.kill();
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
    fn idle_since(&self) -> Instant {
        // Relaxed: a timestamp written and read for this connection's guard
        // alone; no other memory depends on it.
        self.origin + Duration::from_nanos(self.idle_since.load(Ordering::Relaxed))
    }
}

/// Counts one RPC in flight on its connection until dropped.
#[derive(Debug)]
pub(crate) struct InFlightGuard(Arc<Activity>);

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

/// What a server knows of one connection; tonic puts it in every request's
/// extensions.
#[derive(Debug, Clone)]
pub(crate) struct ConnInfo {
    /// The peer's address.
    pub(crate) remote: SocketAddr,
    activity: Arc<Activity>,
}

impl ConnInfo {
    /// Counts an RPC in flight on this connection until the guard is
    /// dropped: the idle deadline does not run meanwhile.
    pub(crate) fn begin(&self) -> InFlightGuard {
        // Relaxed: the counter is only compared with 0 by the same
        // connection's guard; no other memory depends on it.
        self.activity.in_flight.fetch_add(1, Ordering::Relaxed);
        InFlightGuard(Arc::clone(&self.activity))
    }
}

/// A connection with its deadlines and its permit: reading or writing
/// fails once a deadline has passed or the server's kill switch is thrown,
/// which ends the HTTP/2 connection on top of it.
pub(crate) struct Guarded {
    stream: TcpStream,
    info: ConnInfo,
    handshake_timeout: Duration,
    idle_timeout: Duration,
    /// Bytes read so far, up to the preface's length.
    read: u64,
    timer: Pin<Box<Sleep>>,
    killed: Pin<Box<dyn Future<Output = ()> + Send>>,
    /// The kill switch was seen thrown: `killed` must not be polled again.
    dead: bool,
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
    /// Guards `stream`, accepted from `remote` under `permit`, from now on;
    /// must be called inside the runtime that will drive it (its timer
    /// belongs to that runtime).
    pub(crate) fn new(
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
            dead: false,
            _permit: permit,
        }
    }

    /// The connection's info.
    pub(crate) fn info(&self) -> &ConnInfo {
        &self.info
    }

    /// Waits until the client has sent something; false if it sent nothing
    /// (or closed) before the handshake deadline, or the kill switch was
    /// thrown: the connection is then to be dropped.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only peeks.
    pub(crate) async fn first_bytes(&mut self) -> bool {
        let at = deadline(self.info.activity.origin, self.handshake_timeout);
        let mut first = [0u8; 1];
        let why = tokio::select! {
            r = tokio::time::timeout_at(at, self.stream.peek(&mut first)) => match r {
                Ok(Ok(n)) if n > 0 => return true,
                Ok(Ok(_)) => "closed by the client".to_owned(),
                Ok(Err(e)) => e.to_string(),
                Err(_) => "handshake timeout".to_owned(),
            },
            () = &mut self.killed, if !self.dead => {
                self.dead = true;
                "server shutting down".to_owned()
            }
        };
        debug!(remote = %self.info.remote, why, "no handshake: closed");
        false
    }

    /// Fails with the reason the connection must close, if any; otherwise
    /// arms the wake-ups for the next deadline and for the kill signal.
    fn check(&mut self, cx: &mut Context<'_>) -> io::Result<()> {
        if self.dead || self.killed.as_mut().poll(cx).is_ready() {
            self.dead = true;
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
        // The idle deadline moves on with every call; the timer is not
        // moved with it (a reset takes the timer driver's lock) but may
        // stay armed earlier, and is moved on when it fires early: at most
        // once per timeout rather than on every read.
        if self.timer.deadline() > at {
            self.timer.as_mut().reset(at);
        }
        while self.timer.as_mut().poll(cx).is_ready() {
            if Instant::now() >= at {
                debug!(remote = %self.info.remote, what, "connection timed out");
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!("{what} timeout"),
                ));
            }
            self.timer.as_mut().reset(at);
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
