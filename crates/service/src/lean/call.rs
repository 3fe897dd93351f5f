//! One unary call on the lean gRPC server: find its method, read its one
//! message, let the service answer, and send the answer or the status.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::BytesMut;
use tonic::codegen::http::{self, HeaderMap, HeaderValue};
use tonic::codegen::Bytes;
use tonic::{Code, Status};

use super::UnaryService;
use crate::conn::ConnInfo;
use crate::limits::ServerLimits;

/// A call still being answered: its message on its way, or its answer
/// waiting (on Redis, say). Polled by its connection's task, which sends
/// the answers that are ready together.
pub(super) type Answering = Pin<Box<dyn Future<Output = ()> + Send>>;

/// Starts answering one call for `service` under `limits`: at once if its
/// message has arrived and its method does not wait, else through the
/// [`Answering`] returned, which waits for the message and the answer (for
/// at most the request timeout from now) and counts the call in flight on
/// its connection (`conn`) until it has answered.
pub(super) fn start<S: UnaryService>(
    service: &Arc<S>,
    limits: &ServerLimits,
    req: http::Request<h2::RecvStream>,
    respond: h2::server::SendResponse<Bytes>,
    conn: &ConnInfo,
    cx: &mut Context<'_>,
) -> Option<Answering> {
    let (head, mut body) = req.into_parts();
    let Some(method) = service.method(head.uri.path()) else {
        let status = Status::unimplemented(format!("unknown method {}", head.uri.path()));
        fail(respond, &status);
        return None;
    };
    let max = limits.max_message_bytes;
    let mut partial = Vec::new();
    // Polled once with the connection task's context: a Pending only
    // leaves it a spurious wake-up; the future below polls it again.
    let read = read_message(&mut body, &mut partial, max, cx);
    let waits = service.waits(method);
    let read = match read {
        Poll::Ready(message) if !waits => {
            answer(&**service, method, respond, message);
            return None;
        }
        read => read,
    };
    let service = Arc::clone(service);
    let timeout = limits.request_timeout;
    let deadline = tokio::time::Instant::now() + timeout;
    let in_flight = conn.begin();
    Some(Box::pin(async move {
        let message = match read {
            Poll::Ready(message) => message,
            Poll::Pending => {
                let read =
                    std::future::poll_fn(|cx| read_message(&mut body, &mut partial, max, cx));
                tokio::time::timeout_at(deadline, read)
                    .await
                    .unwrap_or_else(|_| {
                        Err(Status::deadline_exceeded(format!(
                            "request message not received within {timeout:?}"
                        )))
                    })
            }
        };
        if !waits {
            answer(&*service, method, respond, message);
        } else {
            let later = message.map(|m| service.call_later(method, m, prefixed()));
            let answered = match later {
                Ok(later) => tokio::time::timeout_at(deadline, later)
                    .await
                    .unwrap_or_else(|_| {
                        Err(Status::deadline_exceeded(format!(
                            "not answered within {timeout:?}"
                        )))
                    }),
                Err(status) => Err(status),
            };
            match answered.and_then(framed) {
                Ok(framed) => send(respond, framed),
                Err(status) => fail(respond, &status),
            }
        }
        drop(in_flight);
    }))
}

/// A buffer for an answer that waits: room for the 5-byte prefix
/// ([`framed`] writes it) and a small message.
fn prefixed() -> BytesMut {
    let mut buf = BytesMut::with_capacity(128);
    buf.extend_from_slice(&[0; 5]);
    buf
}

/// `buf` (a 5-byte prefix, then the message) with the message's length
/// written into its prefix.
fn framed(mut buf: BytesMut) -> Result<Bytes, Status> {
    let len =
        u32::try_from(buf.len() - 5).map_err(|_| Status::internal("response message too large"))?;
    buf[1..5].copy_from_slice(&len.to_be_bytes());
    Ok(buf.freeze())
}

/// Reads the request's one message (without its 5-byte prefix), gathering
/// it in `partial` when it comes in several DATA frames; refuses one
/// announced larger than `max` bytes from its prefix.
fn read_message(
    body: &mut h2::RecvStream,
    partial: &mut Vec<u8>,
    max: usize,
    cx: &mut Context<'_>,
) -> Poll<Result<Bytes, Status>> {
    loop {
        if let Some(len) = complete(partial, max)? {
            let message = Bytes::copy_from_slice(&partial[5..5 + len]);
            return Poll::Ready(Ok(message));
        }
        let chunk = match body.poll_data(cx) {
            Poll::Pending => return Poll::Pending,
            Poll::Ready(None) => {
                return Poll::Ready(Err(Status::internal(
                    "request ended before its message was complete",
                )))
            }
            Poll::Ready(Some(Err(e))) => {
                return Poll::Ready(Err(Status::cancelled(format!("request failed: {e}"))))
            }
            Poll::Ready(Some(Ok(chunk))) => chunk,
        };
        if partial.is_empty() {
            if let Some(len) = complete(&chunk, max)? {
                // The whole message in one frame: its window comes back
                // when the call's stream is dropped, with no update of
                // its own.
                return Poll::Ready(Ok(chunk.slice(5..5 + len)));
            }
        }
        // More is to come: give the window back at once so it can.
        let _ = body.flow_control().release_capacity(chunk.len());
        partial.extend_from_slice(&chunk);
        // Once the length is known, hold exactly the message: a buffer
        // grown by doubling could hold twice what was announced.
        if let Some(prefix) = partial.get(1..5) {
            let len = u32::from_be_bytes([prefix[0], prefix[1], prefix[2], prefix[3]]) as usize;
            partial.reserve_exact((5 + len.min(max)).saturating_sub(partial.len()));
        }
    }
}

/// The message's length if `buf` holds a whole length-prefixed message.
fn complete(buf: &[u8], max: usize) -> Result<Option<usize>, Status> {
    let Some(prefix) = buf.get(..5) else {
        return Ok(None);
    };
    if prefix[0] != 0 {
        return Err(Status::unimplemented(
            "compressed messages are not supported",
        ));
    }
    let len = u32::from_be_bytes([prefix[1], prefix[2], prefix[3], prefix[4]]) as usize;
    if len > max {
        return Err(Status::resource_exhausted(format!(
            "request message of {len} bytes is larger than the limit of {max}"
        )));
    }
    Ok((buf.len() >= 5 + len).then_some(len))
}

/// Room below which a thread's answer buffer is replaced rather than
/// written into, and the size of a new one: an answer is usually tens of
/// bytes, so a buffer serves dozens before the next allocation.
const ANSWER_ROOM: usize = 256;
const ANSWER_BUFFER: usize = 4096;

thread_local! {
    /// The thread's answer buffer: each answer is split off it, and the
    /// buffer's memory is freed once every answer in it has been sent.
    static ANSWERS: std::cell::RefCell<BytesMut> = std::cell::RefCell::new(BytesMut::new());
}

/// Lets the service answer `message` and sends its answer (or the status).
fn answer<S: UnaryService>(
    service: &S,
    method: S::Method,
    respond: h2::server::SendResponse<Bytes>,
    message: Result<Bytes, Status>,
) {
    let framed = ANSWERS.with_borrow_mut(|buf| {
        if buf.capacity() < ANSWER_ROOM {
            *buf = BytesMut::with_capacity(ANSWER_BUFFER);
        }
        buf.extend_from_slice(&[0; 5]);
        let answered = message.and_then(|m| service.call(method, m, buf));
        // Split off even on a refusal, so no partial answer stays behind.
        let whole = buf.split();
        answered?;
        framed(whole)
    });
    match framed {
        Ok(framed) => send(respond, framed),
        Err(status) => fail(respond, &status),
    }
}

fn head() -> http::Response<()> {
    let mut resp = http::Response::new(());
    resp.headers_mut().insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static("application/grpc"),
    );
    resp
}

/// The trailer every answer carries, made once rather than parsed from a
/// string per answer.
const GRPC_STATUS: http::HeaderName = http::HeaderName::from_static("grpc-status");

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
    trailers.insert(GRPC_STATUS, HeaderValue::from_static("0"));
    let _ = stream.send_trailers(trailers);
}

/// A trailers-only response carrying `status`.
fn fail(mut respond: h2::server::SendResponse<Bytes>, status: &Status) {
    let mut resp = head();
    if status.add_header(resp.headers_mut()).is_err() {
        let code = HeaderValue::from(Code::Internal as i32);
        resp.headers_mut().insert(GRPC_STATUS, code);
    }
    let _ = respond.send_response(resp, true);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn framed(len: u32, body: &[u8]) -> Vec<u8> {
        let mut buf = vec![0];
        buf.extend_from_slice(&len.to_be_bytes());
        buf.extend_from_slice(body);
        buf
    }

    #[test]
    fn a_message_is_complete_once_its_announced_length_has_arrived() {
        assert_eq!(complete(&[0, 0, 0], 64).unwrap(), None);
        assert_eq!(complete(&framed(3, b"ab"), 64).unwrap(), None);
        assert_eq!(complete(&framed(3, b"abc"), 64).unwrap(), Some(3));
        assert_eq!(complete(&framed(0, b""), 64).unwrap(), Some(0));
    }

    #[test]
    fn a_message_over_the_limit_is_resource_exhausted_from_its_prefix() {
        let err = complete(&framed(65, b""), 64).unwrap_err();
        assert_eq!(err.code(), Code::ResourceExhausted);
        assert_eq!(
            err.message(),
            "request message of 65 bytes is larger than the limit of 64"
        );
        assert_eq!(complete(&framed(64, b""), 64).unwrap(), None);
    }

    #[test]
    fn a_compressed_message_is_unimplemented() {
        let mut buf = framed(1, b"x");
        buf[0] = 1;
        assert_eq!(complete(&buf, 64).unwrap_err().code(), Code::Unimplemented);
    }
}
