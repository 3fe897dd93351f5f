//! The lean plaintext Allow server on the `h2` crate.
//!
//! # Implementation notes
//!
//! A unary gRPC call is an HTTP/2 stream: request headers (`POST
//! /quotaservice.QuotaService/Allow`), one length-prefixed message (1 byte
//! compressed flag, 4 bytes big-endian length, the protobuf), then a
//! response of headers, one length-prefixed message and trailers carrying
//! `grpc-status: 0`. Errors are "trailers-only": one HEADERS frame with
//! `grpc-status` and `grpc-message`.
//!
//! Allow never blocks, so this server needs no task per call: the
//! connection's task accepts a stream, reads its message if it has already
//! arrived (it almost always came in the same read as the headers), answers
//! and accepts the next. Only a stream whose message has not fully arrived
//! gets a task of its own. Compared with tonic this saves, per call, the
//! task spawn, the tower service stack and the body and codec machinery.
//!
//! Connections are accepted, capped, guarded and drained by the service
//! kit ([`tollgate_service`]), as Doorman's are: a connection enters HTTP/2 once its client has sent its
//! first byte, and, for the idle deadline, a batch of calls counts as in
//! flight on its connection while it is answered, a call waiting for its
//! message until it has answered.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::task::{Context, Poll};

use prost::Message as _;
use tokio::sync::OwnedSemaphorePermit;
use tonic::codegen::http::{self, HeaderMap, HeaderValue};
use tonic::codegen::Bytes;

use crate::pb;
use crate::service::{AllowRequest, Quota};
use tollgate_service::{accept_loop, ConnInfo, Drain, Guarded, ServerLimits};

/// The one method served, as an HTTP/2 path.
pub const ALLOW_PATH: &str = "/quotaservice.QuotaService/Allow";

/// The largest request message accepted: an `AllowRequest` is two names
/// and three numbers, so this is generous, and with [`MAX_STREAMS`] it
/// bounds the partly received messages one connection holds to 4 MiB.
const MAX_MESSAGE: usize = 16 << 10;
/// Streams one connection may have open at once.
const MAX_STREAMS: u32 = 256;
/// Flow-control windows: large enough that small calls never wait for a
/// WINDOW_UPDATE.
const STREAM_WINDOW: u32 = 1 << 20;
const CONNECTION_WINDOW: u32 = 1 << 22;
/// The largest request header block accepted.
const MAX_HEADER_LIST: u32 = 16 << 10;

/// gRPC status codes used here.
const UNIMPLEMENTED: u8 = 12;
const INTERNAL: u8 = 13;
const RESOURCE_EXHAUSTED: u8 = 8;

/// A call that cannot be answered with an `AllowResponse`: a gRPC status
/// code and message.
type Failure = (u8, &'static str);

/// Serves Allow for `quota` on `listener` under `limits` until `shutdown`
/// completes, then drains; connections run as tasks of the calling
/// runtime. See [`QuotaServer::serve`](super::QuotaServer::serve).
pub(super) async fn serve_tasks(
    quota: Arc<Quota>,
    listener: tokio::net::TcpListener,
    limits: ServerLimits,
    shutdown: impl Future<Output = ()>,
) -> std::io::Result<()> {
    let drain = Drain::new(&limits);
    let (stopping, killed) = (drain.stopping(), drain.killed());
    accept_loop(&listener, drain.permits(), shutdown, |io, peer, permit| {
        let guarded = Guarded::new(io, peer, &limits, permit, killed.clone());
        tokio::spawn(connection(Arc::clone(&quota), guarded, stopping.clone()));
    })
    .await;
    drop(listener);
    drain.run().await;
    Ok(())
}

/// As [`serve_tasks`], but the connections run on `threads` threads, each
/// with a single-threaded runtime of its own, handed out round robin: a
/// call is read, decided and answered on one thread, with no task or
/// wake-up crossing to another. Returns once every connection has closed.
///
/// # Errors
///
/// An error starting a thread's runtime.
pub(super) async fn serve_threads(
    quota: Arc<Quota>,
    listener: tokio::net::TcpListener,
    threads: usize,
    limits: ServerLimits,
    shutdown: impl Future<Output = ()>,
) -> std::io::Result<()> {
    type Handed = (std::net::TcpStream, SocketAddr, OwnedSemaphorePermit);
    let drain = Drain::new(&limits);
    let mut workers = Vec::with_capacity(threads.max(1));
    let mut done = Vec::with_capacity(threads.max(1));
    for i in 0..threads.max(1) {
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<Handed>();
        let (done_tx, done_rx) = tokio::sync::oneshot::channel::<()>();
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let (quota, stop, killed) = (Arc::clone(&quota), drain.stopping(), drain.killed());
        std::thread::Builder::new()
            .name(format!("quota-grpc-{i}"))
            .spawn(move || {
                rt.block_on(async move {
                    let mut open = tokio::task::JoinSet::new();
                    while let Some((io, peer, permit)) = rx.recv().await {
                        // Reap finished connections so the set stays small.
                        while open.try_join_next().is_some() {}
                        if let Ok(io) = tokio::net::TcpStream::from_std(io) {
                            // Made here: its timer belongs to this runtime.
                            let guarded = Guarded::new(io, peer, &limits, permit, killed.clone());
                            open.spawn(connection(Arc::clone(&quota), guarded, stop.clone()));
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

/// One HTTP/2 connection: once its client has spoken, accepts streams and
/// answers each.
async fn connection(
    quota: Arc<Quota>,
    mut io: Guarded,
    mut stop: tokio::sync::watch::Receiver<bool>,
) {
    if !io.first_bytes().await {
        return;
    }
    let info = io.info().clone();
    let handshake = h2::server::Builder::new()
        .max_concurrent_streams(MAX_STREAMS)
        .initial_window_size(STREAM_WINDOW)
        .initial_connection_window_size(CONNECTION_WINDOW)
        .max_header_list_size(MAX_HEADER_LIST)
        .handshake::<_, Bytes>(io);
    let Ok(mut conn) = handshake.await else {
        return;
    };
    let mut stopping = *stop.borrow();
    if stopping {
        conn.graceful_shutdown();
    }
    let mut batch = Vec::new();
    loop {
        let next = if stopping {
            conn.accept().await
        } else {
            tokio::select! {
                next = conn.accept() => next,
                _ = stop.changed() => {
                    stopping = true;
                    conn.graceful_shutdown();
                    continue;
                }
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
        while batch.len() < MAX_STREAMS as usize {
            match std::future::poll_fn(|cx| Poll::Ready(conn.poll_accept(cx))).await {
                Poll::Ready(Some(Ok(call))) => batch.push(call),
                Poll::Ready(_) => {
                    open = false;
                    break;
                }
                Poll::Pending => break,
            }
        }
        // The batch is in flight until answered; a call that waits for its
        // message counts on its own.
        let answering = info.begin();
        std::future::poll_fn(|cx| {
            for (req, respond) in batch.drain(..) {
                call(&quota, req, respond, &info, cx);
            }
            Poll::Ready(())
        })
        .await;
        drop(answering);
        if !open {
            // Let the answers out before the connection is dropped.
            let _ = std::future::poll_fn(|cx| conn.poll_closed(cx)).await;
            return;
        }
    }
}

/// Answers one call: at once if its message has arrived, else from a task
/// of its own that waits for it, counted in flight on its connection
/// (`conn`) until it has answered.
fn call(
    quota: &Arc<Quota>,
    req: http::Request<h2::RecvStream>,
    respond: h2::server::SendResponse<Bytes>,
    conn: &ConnInfo,
    cx: &mut Context<'_>,
) {
    let (head, mut body) = req.into_parts();
    if head.uri.path() != ALLOW_PATH {
        return fail(respond, (UNIMPLEMENTED, "unknown method"));
    }
    let mut partial = Vec::new();
    // Polled once with the connection task's context: a Pending only
    // leaves it a spurious wake-up; the task below polls it again.
    match read_message(&mut body, &mut partial, cx) {
        Poll::Ready(message) => answer(quota, respond, message),
        Poll::Pending => {
            let quota = Arc::clone(quota);
            let in_flight = conn.begin();
            tokio::spawn(async move {
                let message =
                    std::future::poll_fn(|cx| read_message(&mut body, &mut partial, cx)).await;
                answer(&quota, respond, message);
                drop(in_flight);
            });
        }
    }
}

/// Reads the request's one message (without its 5-byte prefix), gathering
/// it in `partial` when it comes in several DATA frames.
fn read_message(
    body: &mut h2::RecvStream,
    partial: &mut Vec<u8>,
    cx: &mut Context<'_>,
) -> Poll<Result<Bytes, Failure>> {
    loop {
        if let Some(len) = complete(partial)? {
            let message = Bytes::copy_from_slice(&partial[5..5 + len]);
            return Poll::Ready(Ok(message));
        }
        let chunk = match body.poll_data(cx) {
            Poll::Pending => return Poll::Pending,
            Poll::Ready(None) => return Poll::Ready(Err((INTERNAL, "request ended early"))),
            Poll::Ready(Some(Err(_))) => return Poll::Ready(Err((INTERNAL, "request failed"))),
            Poll::Ready(Some(Ok(chunk))) => chunk,
        };
        // The bytes are consumed here: give the window back at once.
        let _ = body.flow_control().release_capacity(chunk.len());
        if partial.is_empty() {
            if let Some(len) = complete(&chunk)? {
                return Poll::Ready(Ok(chunk.slice(5..5 + len)));
            }
        }
        partial.extend_from_slice(&chunk);
    }
}

/// The message's length if `buf` holds a whole length-prefixed message.
fn complete(buf: &[u8]) -> Result<Option<usize>, Failure> {
    let Some(prefix) = buf.get(..5) else {
        return Ok(None);
    };
    if prefix[0] != 0 {
        return Err((UNIMPLEMENTED, "compressed messages are not supported"));
    }
    let len = u32::from_be_bytes([prefix[1], prefix[2], prefix[3], prefix[4]]) as usize;
    if len > MAX_MESSAGE {
        return Err((RESOURCE_EXHAUSTED, "request message too large"));
    }
    Ok((buf.len() >= 5 + len).then_some(len))
}

/// Decides the call and sends the response (or the failure).
fn answer(
    quota: &Quota,
    respond: h2::server::SendResponse<Bytes>,
    message: Result<Bytes, Failure>,
) {
    let req = match message.and_then(|m| {
        pb::AllowRequest::decode(m).map_err(|_| (INTERNAL, "invalid AllowRequest message"))
    }) {
        Ok(req) => req,
        Err(failure) => return fail(respond, failure),
    };
    let resp = pb::AllowResponse::from(quota.allow(&AllowRequest::from(&req)));
    let len = resp.encoded_len();
    let mut framed = Vec::with_capacity(5 + len);
    framed.push(0);
    framed.extend_from_slice(&(len as u32).to_be_bytes());
    // Cannot fail: the buffer grows as needed.
    let _ = resp.encode(&mut framed);
    send(respond, Bytes::from(framed));
}

fn head() -> http::Response<()> {
    let mut resp = http::Response::new(());
    resp.headers_mut().insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static("application/grpc"),
    );
    resp
}

/// A normal response: headers, the message, `grpc-status: 0`. A send error
/// means the client reset the stream: nothing left to do.
fn send(mut respond: h2::server::SendResponse<Bytes>, framed: Bytes) {
    let Ok(mut stream) = respond.send_response(head(), false) else {
        return;
    };
    if stream.send_data(framed, false).is_err() {
        return;
    }
    let mut trailers = HeaderMap::with_capacity(1);
    trailers.insert("grpc-status", HeaderValue::from_static("0"));
    let _ = stream.send_trailers(trailers);
}

/// A trailers-only response carrying a gRPC error.
fn fail(mut respond: h2::server::SendResponse<Bytes>, (code, message): Failure) {
    let mut resp = head();
    resp.headers_mut()
        .insert("grpc-status", HeaderValue::from(u16::from(code)));
    resp.headers_mut()
        .insert("grpc-message", HeaderValue::from_static(message));
    let _ = respond.send_response(resp, true);
}
