//! One connection of the lean gRPC server: its TLS handshake if any, then
//! HTTP/2, answering batches of calls and pinging a quiet client.

use std::future::Future;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use futures_util::stream::{FuturesUnordered, StreamExt};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::watch;
use tokio::time::{Instant, Sleep};
use tokio_rustls::{rustls, TlsAcceptor};
use tonic::codegen::Bytes;
use tracing::debug;

use super::call;
use super::refused::RefusedHandshakes;
use super::UnaryService;
use crate::conn::{ConnInfo, Guarded};
use crate::limits::ServerLimits;

/// What every connection of one server shares.
pub(super) struct Shared<S> {
    pub(super) service: Arc<S>,
    pub(super) limits: ServerLimits,
    tls: Option<TlsAcceptor>,
    refused: RefusedHandshakes,
    /// What the server counts its refused connections in.
    pub(super) counts: crate::conn::RefusedConnections,
}

impl<S> Shared<S> {
    pub(super) fn new(
        service: Arc<S>,
        limits: ServerLimits,
        tls: Option<Arc<rustls::ServerConfig>>,
        counts: crate::conn::RefusedConnections,
    ) -> Shared<S> {
        Shared {
            service,
            limits,
            tls: tls.map(TlsAcceptor::from),
            refused: RefusedHandshakes::new(),
            counts,
        }
    }
}

/// Serves one accepted connection until it closes: once its client has
/// spoken, the TLS handshake (if the server has TLS), then HTTP/2.
pub(super) async fn serve<S: UnaryService>(
    shared: Arc<Shared<S>>,
    mut io: Guarded,
    stop: watch::Receiver<bool>,
) {
    if !io.first_bytes().await {
        return;
    }
    // Boxed: until its client speaks, a connection's task holds only the
    // socket, not the TLS and HTTP/2 state its future would make room for.
    Box::pin(spoken(&shared, io, stop)).await;
}

/// A connection whose client has spoken: its TLS handshake (if the server
/// has TLS), then HTTP/2.
async fn spoken<S: UnaryService>(shared: &Shared<S>, io: Guarded, stop: watch::Receiver<bool>) {
    let info = io.info().clone();
    let Some(acceptor) = &shared.tls else {
        return http2(shared, io, info, stop).await;
    };
    let handshake = acceptor.accept(io);
    match tokio::time::timeout(shared.limits.handshake_timeout, handshake).await {
        Ok(Ok(tls)) => http2(shared, tls, info, stop).await,
        Ok(Err(error)) => {
            if crate::tls_failure::refused_client_fix(&error).is_some() {
                shared.counts.count_tls();
            }
            shared.refused.record(info.remote, &error)
        }
        Err(_) => debug!(remote = %info.remote, "TLS handshake timed out: closed"),
    }
}

/// HTTP/2 over `io`: accepts streams and answers each until the client
/// closes, the server drains, or a keepalive PING goes unanswered.
async fn http2<S, T>(shared: &Shared<S>, io: T, info: ConnInfo, mut stop: watch::Receiver<bool>)
where
    S: UnaryService,
    T: AsyncRead + AsyncWrite + Unpin,
{
    let limits = &shared.limits;
    let handshake = h2::server::Builder::new()
        .max_concurrent_streams(limits.max_concurrent_streams)
        .initial_window_size(limits.stream_window_bytes)
        .initial_connection_window_size(limits.connection_window_bytes)
        .max_header_list_size(limits.max_header_list_bytes)
        .handshake::<_, Bytes>(io);
    let Ok(mut conn) = handshake.await else {
        return;
    };
    let mut keepalive = Keepalive::new(conn.ping_pong(), limits);
    let mut stopping = *stop.borrow();
    if stopping {
        conn.graceful_shutdown();
    }
    let max_batch = limits.max_concurrent_streams.max(1) as usize;
    let mut batch = Vec::new();
    // The calls still being answered, at most one per open stream.
    let mut answering = FuturesUnordered::<call::Answering>::new();
    loop {
        let next = tokio::select! {
            next = conn.accept() => next,
            // Never ready: answers every call that can be, so that the
            // answers a Redis reply lets out leave in one write.
            () = std::future::poll_fn(|cx| poll_answering(&mut answering, cx)) => continue,
            _ = stop.changed(), if !stopping => {
                stopping = true;
                conn.graceful_shutdown();
                continue;
            }
            () = std::future::poll_fn(|cx| keepalive.poll_dead(cx)) => {
                debug!(remote = %info.remote, "keepalive PING unanswered: closed");
                return;
            }
        };
        let Some(Ok(first)) = next else {
            return;
        };
        // Every poll of the connection flushes what was answered since the
        // last one: take every stream that has already arrived before
        // answering any, so their answers leave in one write.
        batch.push(first);
        let mut open = true;
        while batch.len() < max_batch {
            match std::future::poll_fn(|cx| Poll::Ready(conn.poll_accept(cx))).await {
                Poll::Ready(Some(Ok(next))) => batch.push(next),
                Poll::Ready(_) => {
                    open = false;
                    break;
                }
                Poll::Pending => break,
            }
        }
        // The batch is in flight until answered; a call that waits for its
        // message counts on its own.
        let in_flight = info.begin();
        std::future::poll_fn(|cx| {
            for (req, respond) in batch.drain(..) {
                let started = call::start(&shared.service, &shared.limits, req, respond, &info, cx);
                answering.extend(started);
            }
            Poll::Ready(())
        })
        .await;
        drop(in_flight);
        if !open {
            // Let the answers out before the connection is dropped.
            let _ = std::future::poll_fn(|cx| {
                let _ = poll_answering(&mut answering, cx);
                conn.poll_closed(cx)
            })
            .await;
            return;
        }
    }
}

/// Polls the calls being answered until none is ready; never ready
/// itself (an empty set waits for the next call).
fn poll_answering(
    answering: &mut FuturesUnordered<call::Answering>,
    cx: &mut Context<'_>,
) -> Poll<()> {
    while let Poll::Ready(Some(())) = answering.poll_next_unpin(cx) {}
    Poll::Pending
}

/// HTTP/2 keepalive: a PING every interval, and the connection is dead
/// when one goes unanswered for the timeout.
struct Keepalive {
    ping: Option<h2::PingPong>,
    timer: std::pin::Pin<Box<Sleep>>,
    /// A PING is out and its PONG not yet back.
    waiting: bool,
    interval: Duration,
    timeout: Duration,
}

impl Keepalive {
    fn new(ping: Option<h2::PingPong>, limits: &ServerLimits) -> Keepalive {
        Keepalive {
            ping,
            timer: Box::pin(tokio::time::sleep(limits.keepalive_interval)),
            waiting: false,
            interval: limits.keepalive_interval,
            timeout: limits.keepalive_timeout,
        }
    }

    /// Ready once the connection is to be closed: a PING unanswered for
    /// the timeout, or the PING channel gone.
    fn poll_dead(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        let Some(ping) = &mut self.ping else {
            return Poll::Pending;
        };
        loop {
            if self.waiting {
                match ping.poll_pong(cx) {
                    Poll::Ready(Ok(_)) => {
                        self.waiting = false;
                        self.timer.as_mut().reset(Instant::now() + self.interval);
                    }
                    Poll::Ready(Err(_)) => return Poll::Ready(()),
                    Poll::Pending => {}
                }
            }
            if self.timer.as_mut().poll(cx).is_pending() {
                return Poll::Pending;
            }
            if self.waiting || ping.send_ping(h2::Ping::opaque()).is_err() {
                return Poll::Ready(());
            }
            self.waiting = true;
            self.timer.as_mut().reset(Instant::now() + self.timeout);
        }
    }
}
