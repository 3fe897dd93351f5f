//! The lean gRPC server end to end, spoken to with raw HTTP/2: answers,
//! and gRPC's conventions for every refusal (a status, never a reset);
//! a message that never completes, a client that stops answering PINGs,
//! a server on threads of its own, and calls that wait (as on Redis)
//! beside calls answered at once.
//!
//! No assertion is about time: the waits' bound only guards against
//! hanging.

use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tollgate_service::{GrpcServer, ServerLimits, UnaryService};
use tonic::codegen::Bytes;

/// A guard on how long any wait may take before the test fails.
const HANG: Duration = Duration::from_secs(60);

/// Answers `/echo.Echo/Say` with its request, `/echo.Echo/Refuse` with
/// INVALID_ARGUMENT; `/echo.Echo/Wait` waits for a permit of [`GATE`],
/// then answers as Say (or INVALID_ARGUMENT for the request `no`);
/// `/echo.Echo/Never` waits forever.
struct Echo;

/// What the waiting calls wait for: one permit lets one call answer.
static GATE: tokio::sync::Semaphore = tokio::sync::Semaphore::const_new(0);

/// What `/echo.Echo/Hold` waits for, and what it says once it waits.
static HOLD: tokio::sync::Semaphore = tokio::sync::Semaphore::const_new(0);
static HELD: tokio::sync::Semaphore = tokio::sync::Semaphore::const_new(0);

#[derive(Debug, Clone, Copy)]
enum Method {
    Say,
    Refuse,
    Wait,
    Never,
    Hold,
}

impl UnaryService for Echo {
    type Method = Method;

    fn method(&self, path: &str) -> Option<Method> {
        match path {
            "/echo.Echo/Say" => Some(Method::Say),
            "/echo.Echo/Refuse" => Some(Method::Refuse),
            "/echo.Echo/Wait" => Some(Method::Wait),
            "/echo.Echo/Never" => Some(Method::Never),
            "/echo.Echo/Hold" => Some(Method::Hold),
            _ => None,
        }
    }

    fn call(
        &self,
        method: Method,
        request: Bytes,
        out: &mut bytes::BytesMut,
    ) -> Result<(), tonic::Status> {
        match method {
            Method::Say => {
                out.extend_from_slice(&request);
                Ok(())
            }
            Method::Refuse => Err(tonic::Status::invalid_argument("refused: 50% off")),
            Method::Wait | Method::Never | Method::Hold => {
                Err(tonic::Status::internal("answered at once"))
            }
        }
    }

    fn waits(&self, method: Method) -> bool {
        matches!(method, Method::Wait | Method::Never | Method::Hold)
    }

    fn call_later(
        &self,
        method: Method,
        request: Bytes,
        mut out: bytes::BytesMut,
    ) -> std::pin::Pin<
        Box<dyn std::future::Future<Output = Result<bytes::BytesMut, tonic::Status>> + Send>,
    > {
        Box::pin(async move {
            match method {
                Method::Never => std::future::pending::<()>().await,
                Method::Hold => {
                    HELD.add_permits(1);
                    HOLD.acquire().await.unwrap().forget();
                }
                _ => GATE.acquire().await.unwrap().forget(),
            }
            if &request[..] == b"no" {
                return Err(tonic::Status::invalid_argument("no, later"));
            }
            out.extend_from_slice(&request);
            Ok(out)
        })
    }
}

/// Serves [`Echo`] under `limits` (on two threads of its own if
/// `threads`); returns its address.
async fn serve(limits: ServerLimits, threads: bool) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let mut server = GrpcServer::new(Arc::new(Echo)).limits(limits);
    if threads {
        server = server.threads(2);
    }
    tokio::spawn(server.serve(listener, std::future::pending()));
    addr
}

async fn client(addr: &str) -> h2::client::SendRequest<Bytes> {
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let (send, conn) = h2::client::handshake(tcp).await.unwrap();
    tokio::spawn(conn);
    send
}

/// A gRPC frame: not compressed, the length, then `body`.
fn frame(len: u32, body: &[u8]) -> Vec<u8> {
    let mut f = vec![0];
    f.extend_from_slice(&len.to_be_bytes());
    f.extend_from_slice(body);
    f
}

/// What came back: the HTTP status, `grpc-status`, `grpc-message` and
/// the body.
#[derive(Debug, PartialEq)]
struct Answer {
    http: u16,
    status: String,
    message: String,
    body: Vec<u8>,
}

/// Calls `path` with `data` as the request body, ending the stream after
/// it if `end`; returns the answer.
async fn call(
    send: &mut h2::client::SendRequest<Bytes>,
    path: &str,
    data: &[u8],
    end: bool,
) -> Answer {
    let mut send = send.clone().ready().await.unwrap();
    let request = tonic::codegen::http::Request::builder()
        .method("POST")
        .uri(format!("http://localhost{path}"))
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .body(())
        .unwrap();
    let (response, mut stream) = send.send_request(request, false).unwrap();
    stream.send_data(Bytes::copy_from_slice(data), end).unwrap();
    let answer = async {
        let (head, mut body) = response.await.unwrap().into_parts();
        let mut data = Vec::new();
        while let Some(chunk) = body.data().await {
            data.extend_from_slice(&chunk.unwrap());
        }
        let trailers = body.trailers().await.unwrap();
        let get = |name: &str| {
            trailers
                .as_ref()
                .and_then(|t| t.get(name))
                .or_else(|| head.headers.get(name))
                .map(|v| v.to_str().unwrap().to_owned())
                .unwrap_or_default()
        };
        Answer {
            http: head.status.as_u16(),
            status: get("grpc-status"),
            message: percent_decoded(&get("grpc-message")),
            body: data,
        }
    };
    tokio::time::timeout(HANG, answer).await.expect("answered")
}

/// `grpc-message` as sent, percent-encoded, decoded.
fn percent_decoded(text: &str) -> String {
    let mut out = Vec::new();
    let mut bytes = text.bytes();
    while let Some(b) = bytes.next() {
        if b == b'%' {
            let hex: String = bytes.by_ref().take(2).map(char::from).collect();
            out.push(u8::from_str_radix(&hex, 16).unwrap());
        } else {
            out.push(b);
        }
    }
    String::from_utf8(out).unwrap()
}

fn refusal(status: &str, message: &str) -> Answer {
    Answer {
        http: 200,
        status: status.into(),
        message: message.into(),
        body: vec![],
    }
}

#[tokio::test]
async fn calls_are_answered_and_every_refusal_is_a_status() {
    let limits = ServerLimits {
        max_message_bytes: 64,
        ..ServerLimits::default()
    };
    let addr = serve(limits, false).await;
    let mut send = client(&addr).await;

    let said = call(&mut send, "/echo.Echo/Say", &frame(2, b"hi"), true).await;
    assert_eq!(
        said,
        Answer {
            http: 200,
            status: "0".into(),
            message: String::new(),
            body: frame(2, b"hi"),
        }
    );
    assert_eq!(
        call(&mut send, "/echo.Echo/Refuse", &frame(0, b""), true).await,
        refusal("3", "refused: 50% off")
    );
    assert_eq!(
        call(&mut send, "/echo.Echo/Shout", &frame(2, b"hi"), true).await,
        refusal("12", "unknown method /echo.Echo/Shout")
    );
    // Over the limit: refused from its prefix, the body never read.
    assert_eq!(
        call(&mut send, "/echo.Echo/Say", &frame(65, b""), false).await,
        refusal(
            "8",
            "request message of 65 bytes is larger than the limit of 64"
        )
    );
    let mut compressed = frame(2, b"hi");
    compressed[0] = 1;
    assert_eq!(
        call(&mut send, "/echo.Echo/Say", &compressed, true).await,
        refusal("12", "compressed messages are not supported")
    );
    assert_eq!(
        call(&mut send, "/echo.Echo/Say", &frame(3, b"hi"), true).await,
        refusal("13", "request ended before its message was complete")
    );
    // The connection still answers.
    let said = call(&mut send, "/echo.Echo/Say", &frame(3, b"hey"), true).await;
    assert_eq!(said.body, frame(3, b"hey"));
}

#[tokio::test]
async fn a_message_that_never_completes_is_deadline_exceeded() {
    let limits = ServerLimits {
        request_timeout: Duration::from_millis(200),
        ..ServerLimits::default()
    };
    let addr = serve(limits, true).await;
    let mut send = client(&addr).await;
    // Two of four bytes, and the stream left open.
    let answer = call(&mut send, "/echo.Echo/Say", &frame(4, b"ab"), false).await;
    assert_eq!(
        answer,
        refusal("4", "request message not received within 200ms")
    );
    // Threads of its own answer as the calling runtime does.
    let said = call(&mut send, "/echo.Echo/Say", &frame(2, b"ok"), true).await;
    assert_eq!(said.body, frame(2, b"ok"));
}

#[tokio::test]
async fn a_client_that_stops_answering_pings_is_closed() {
    let limits = ServerLimits {
        keepalive_interval: Duration::from_millis(100),
        keepalive_timeout: Duration::from_millis(100),
        ..ServerLimits::default()
    };
    let addr = serve(limits, false).await;
    // HTTP/2 spoken by hand: the preface and an empty SETTINGS frame, then
    // nothing, PINGs included.
    let mut tcp = tokio::net::TcpStream::connect(&addr).await.unwrap();
    tcp.write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
        .await
        .unwrap();
    tcp.write_all(&[0, 0, 0, 4, 0, 0, 0, 0, 0]).await.unwrap();
    let mut seen = Vec::new();
    let closed = tokio::time::timeout(HANG, tcp.read_to_end(&mut seen)).await;
    assert!(closed.is_ok(), "the connection is closed");
    // The server sent its SETTINGS, then a PING (type 6) before closing.
    let mut frames = Vec::new();
    let mut at = 0;
    while at + 9 <= seen.len() {
        let len = u32::from_be_bytes([0, seen[at], seen[at + 1], seen[at + 2]]) as usize;
        frames.push(seen[at + 3]);
        at += 9 + len;
    }
    assert_eq!(frames.first(), Some(&4), "{frames:?}");
    assert!(frames.contains(&6), "{frames:?}");
}

#[tokio::test]
async fn a_call_that_waits_lets_the_others_on_its_connection_through() {
    let addr = serve(ServerLimits::default(), false).await;
    let mut send = client(&addr).await;
    let (mut a, mut b) = (send.clone(), send.clone());
    let first =
        tokio::spawn(
            async move { call(&mut a, "/echo.Echo/Wait", &frame(5, b"first"), true).await },
        );
    let refused =
        tokio::spawn(async move { call(&mut b, "/echo.Echo/Wait", &frame(2, b"no"), true).await });
    // Answered while both wait, on the same connection.
    for _ in 0..3 {
        let said = call(&mut send, "/echo.Echo/Say", &frame(3, b"now"), true).await;
        assert_eq!(said.body, frame(3, b"now"));
    }
    assert!(!first.is_finished() && !refused.is_finished());
    GATE.add_permits(2);
    let first = first.await.unwrap();
    assert_eq!(
        (first.status.as_str(), first.body),
        ("0", frame(5, b"first"))
    );
    assert_eq!(refused.await.unwrap(), refusal("3", "no, later"));
}

#[tokio::test]
async fn a_call_that_waits_past_the_request_timeout_is_deadline_exceeded() {
    let limits = ServerLimits {
        request_timeout: Duration::from_millis(200),
        ..ServerLimits::default()
    };
    let addr = serve(limits, false).await;
    let mut send = client(&addr).await;
    let answer = call(&mut send, "/echo.Echo/Never", &frame(2, b"hi"), true).await;
    assert_eq!(answer, refusal("4", "not answered within 200ms"));
    // The connection still answers.
    let said = call(&mut send, "/echo.Echo/Say", &frame(2, b"ok"), true).await;
    assert_eq!(said.body, frame(2, b"ok"));
}

#[tokio::test]
async fn a_draining_server_answers_the_calls_that_wait_before_it_closes() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(GrpcServer::new(Arc::new(Echo)).serve(listener, async {
        let _ = stopped.await;
    }));
    let mut send = client(&addr).await;
    let held =
        tokio::spawn(
            async move { call(&mut send, "/echo.Echo/Hold", &frame(4, b"kept"), true).await },
        );
    tokio::time::timeout(HANG, HELD.acquire())
        .await
        .unwrap()
        .unwrap()
        .forget();
    stop.send(()).unwrap();
    // Draining, it waits for the held call (the drain's timeout is 5 s).
    tokio::task::yield_now().await;
    assert!(!server.is_finished());
    HOLD.add_permits(1);
    let answer = held.await.unwrap();
    assert_eq!(
        (answer.status.as_str(), answer.body),
        ("0", frame(4, b"kept"))
    );
    tokio::time::timeout(HANG, server)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
}
