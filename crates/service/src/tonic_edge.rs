//! The tonic transport for services whose calls wait (on Redis): the lean
//! server ([`GrpcServer`](crate::GrpcServer)) answers each call inline on
//! its connection's task, so a call that awaits a round trip is served
//! here instead, one task per call, under the same [`ServerLimits`] where
//! tonic has them, over TLS or mutual TLS when given, and drained at
//! shutdown within [`ServerLimits::drain_timeout`].
//!
//! # Implementation notes
//!
//! tonic's own TLS needs its `tls` feature's acceptor and offers no
//! handshake timeout, so the handshakes are done here with
//! `tokio-rustls`, each in its own task bounded by
//! [`ServerLimits::handshake_timeout`], and the finished streams fed to
//! tonic as its incoming connections. The connection cap and the idle
//! timeout of the lean server have no tonic counterpart.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::rustls;
use tonic::transport::server::{Connected, Router, TcpIncoming};

use crate::limits::ServerLimits;

/// A tonic server builder with every part of `limits` tonic has: the
/// streams per connection, the flow-control windows, keepalive and the
/// request timeout. Add the services, then hand the router to
/// [`serve_tonic`].
pub fn tonic_server(limits: &ServerLimits) -> tonic::transport::Server {
    tonic::transport::Server::builder()
        .timeout(limits.request_timeout)
        .max_concurrent_streams(limits.max_concurrent_streams)
        .initial_stream_window_size(limits.stream_window_bytes)
        .initial_connection_window_size(limits.connection_window_bytes)
        .http2_keepalive_interval(Some(limits.keepalive_interval))
        .http2_keepalive_timeout(Some(limits.keepalive_timeout))
}

/// Serves `router` on `listener` (over `tls` when given) until `shutdown`
/// completes; then stops accepting, lets the calls in flight finish, and
/// past `limits.drain_timeout` closes every connection left.
///
/// # Errors
///
/// tonic's serving error.
///
/// # Cancel safety
///
/// Dropping the future stops accepting and closes every connection.
pub async fn serve_tonic(
    router: Router,
    limits: &ServerLimits,
    tls: Option<Arc<rustls::ServerConfig>>,
    listener: TcpListener,
    shutdown: impl Future<Output = ()>,
) -> io::Result<()> {
    let drain = limits.drain_timeout;
    let (stopping, stopped) = tokio::sync::oneshot::channel::<()>();
    let shutdown = async move {
        shutdown.await;
        let _ = stopping.send(());
    };
    let deadline = async move {
        if stopped.await.is_ok() {
            tokio::time::sleep(drain).await;
        } else {
            std::future::pending::<()>().await;
        }
    };
    let Some(tls) = tls else {
        let incoming = TcpIncoming::from(listener).with_nodelay(Some(true));
        return tokio::select! {
            served = router.serve_with_incoming_shutdown(incoming, shutdown) => {
                served.map_err(io::Error::other)
            }
            () = deadline => Ok(()),
        };
    };
    let (tx, rx) = tokio::sync::mpsc::channel::<io::Result<TlsConn>>(64);
    let acceptor = tokio_rustls::TlsAcceptor::from(tls);
    let handshake = limits.handshake_timeout;
    let accept = tokio::spawn(async move {
        loop {
            let (tcp, peer) = match listener.accept().await {
                Ok(accepted) => accepted,
                Err(e) => {
                    tracing::warn!(error = %e, "accepting a connection failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            };
            let _ = tcp.set_nodelay(true);
            let (acceptor, tx) = (acceptor.clone(), tx.clone());
            tokio::spawn(async move {
                match tokio::time::timeout(handshake, acceptor.accept(tcp)).await {
                    Ok(Ok(stream)) => {
                        let _ = tx.send(Ok(TlsConn(stream))).await;
                    }
                    Ok(Err(e)) => tracing::info!(%peer, error = %e, "TLS handshake refused"),
                    Err(_) => tracing::info!(%peer, "TLS handshake timed out"),
                }
            });
        }
    });
    let incoming = tonic::codegen::tokio_stream::wrappers::ReceiverStream::new(rx);
    let served = tokio::select! {
        served = router.serve_with_incoming_shutdown(incoming, shutdown) => {
            served.map_err(io::Error::other)
        }
        () = deadline => Ok(()),
    };
    accept.abort();
    served
}

/// A TLS connection, as tonic's server takes it.
struct TlsConn(tokio_rustls::server::TlsStream<TcpStream>);

impl Connected for TlsConn {
    type ConnectInfo = ();

    fn connect_info(&self) {}
}

impl AsyncRead for TlsConn {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_read(cx, buf)
    }
}

impl AsyncWrite for TlsConn {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.0).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_shutdown(cx)
    }
}
