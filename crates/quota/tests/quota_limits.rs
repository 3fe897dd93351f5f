//! The lean Allow server's connection limits, as Doorman's server has
//! them: a connection over the cap is accepted and closed at once, one
//! that does not send the HTTP/2 preface in time is closed, one with no
//! call in flight for the idle timeout is closed (one with a call in
//! flight is not), and a shutdown drains calls in flight, then closes what
//! is left at the drain deadline.
//!
//! Outcomes only: the timeouts are short and each event is awaited with a
//! generous bound ([`BOUND`]), never timed.

#[path = "common/grpc_answer.rs"]
mod grpc_answer;

use std::sync::Arc;
use std::time::Duration;

use prost::Message as _;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpStream;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tollgate::ManualClock;
use tollgate_quota::pb::{AllowRequest, AllowResponse};
use tollgate_quota::{Quota, QuotaConfig, QuotaLimits, QuotaServer, ALLOW_PATH};
use tollgate_service::ServerLimits;

/// How long an expected event may take on a loaded machine.
const BOUND: Duration = Duration::from_secs(20);

const CONFIG: &str = "\
namespaces:
  ns:
    buckets:
      b: {size: 1000000, fill_rate: 1000000}
";

/// A running server: its address, its shutdown trigger and its task.
struct Server {
    addr: String,
    stop: Option<oneshot::Sender<()>>,
    task: JoinHandle<std::io::Result<()>>,
}

impl Server {
    /// Serves under `limits`, on the test's runtime (`threads: None`) or on
    /// threads of its own.
    async fn start(limits: ServerLimits, threads: Option<usize>) -> Server {
        let quota = Arc::new(Quota::new(
            QuotaConfig::from_yaml(CONFIG).unwrap(),
            QuotaLimits::default(),
            Arc::new(ManualClock::new()),
        ));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let (stop, stopped) = oneshot::channel::<()>();
        let shutdown = async {
            let _ = stopped.await;
        };
        let mut server = QuotaServer::builder(quota).limits(limits);
        if let Some(n) = threads {
            server = server.threads(n);
        }
        let task = tokio::spawn(server.serve(listener, shutdown));
        Server {
            addr,
            stop: Some(stop),
            task,
        }
    }

    /// Starts the shutdown and waits for `serve` to return.
    async fn shut_down(mut self) {
        let _ = self.stop.take().unwrap().send(());
        tokio::time::timeout(BOUND, self.task)
            .await
            .expect("the server returns after its drain")
            .unwrap()
            .unwrap();
    }
}

/// An HTTP/2 client connection and the task driving it (which ends when
/// the connection does).
struct Client {
    send: h2::client::SendRequest<bytes::Bytes>,
    conn: JoinHandle<()>,
}

async fn connect(addr: &str) -> Result<Client, h2::Error> {
    let tcp = TcpStream::connect(addr).await.unwrap();
    let (send, conn) = h2::client::handshake(tcp).await?;
    let conn = tokio::spawn(async move {
        let _ = conn.await;
    });
    Ok(Client { send, conn })
}

/// A whole request message, length-prefixed.
fn message() -> Vec<u8> {
    let req = AllowRequest {
        namespace: "ns".into(),
        bucket_name: "b".into(),
        tokens_requested: 1,
        ..Default::default()
    };
    let body = req.encode_to_vec();
    let mut framed = vec![0];
    framed.extend_from_slice(&(body.len() as u32).to_be_bytes());
    framed.extend_from_slice(&body);
    framed
}

/// Starts an Allow call and sends the first `sent` bytes of its message.
async fn begin_call(
    client: &mut Client,
    sent: usize,
) -> Result<
    (
        h2::client::ResponseFuture,
        h2::SendStream<bytes::Bytes>,
        Vec<u8>,
    ),
    h2::Error,
> {
    client.send = client.send.clone().ready().await?;
    let req = tonic::codegen::http::Request::builder()
        .method("POST")
        .uri(format!("http://localhost{}", ALLOW_PATH))
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .body(())
        .unwrap();
    let (response, mut stream) = client.send.send_request(req, false)?;
    let whole = message();
    stream.send_data(bytes::Bytes::copy_from_slice(&whole[..sent]), false)?;
    Ok((response, stream, whole[sent..].to_vec()))
}

/// Sends the rest of a call's message and reads its answer: the
/// `grpc-status` and the granted tokens.
async fn finish_call(
    response: h2::client::ResponseFuture,
    mut stream: h2::SendStream<bytes::Bytes>,
    rest: Vec<u8>,
) -> Result<(String, i64), h2::Error> {
    stream.send_data(bytes::Bytes::from(rest), true)?;
    let (_, status, data) = grpc_answer::read_answer(response).await?;
    let granted = match data.get(5..) {
        Some(m) => AllowResponse::decode(m).unwrap().tokens_granted,
        None => 0,
    };
    Ok((status, granted))
}

/// One whole Allow call for one token.
async fn allow(client: &mut Client) -> Result<(String, i64), h2::Error> {
    let (response, stream, rest) = begin_call(client, 0).await?;
    finish_call(response, stream, rest).await
}

/// Waits until the server closes `tcp` (end of stream or a reset).
async fn closed_by_server(mut tcp: TcpStream) {
    let mut buf = [0u8; 64];
    let closed = tokio::time::timeout(BOUND, async {
        loop {
            match tcp.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                // Whatever the server wrote before closing (a GOAWAY).
                Ok(_) => continue,
            }
        }
    })
    .await;
    assert!(closed.is_ok(), "the server closes the connection");
}

/// Waits until a client connection's task ends: the server closed it.
async fn ended(client: Client) {
    drop(client.send);
    tokio::time::timeout(BOUND, client.conn)
        .await
        .expect("the server closes the connection")
        .unwrap();
}

async fn cap_refuses_the_connection_over_it(threads: Option<usize>) {
    // A handshake deadline well beyond the bound: only the cap can close
    // the third connection in time.
    let limits = ServerLimits {
        max_connections: 2,
        handshake_timeout: BOUND * 10,
        ..ServerLimits::default()
    };
    let server = Server::start(limits, threads).await;
    let mut a = connect(&server.addr).await.unwrap();
    let mut b = connect(&server.addr).await.unwrap();
    assert_eq!(allow(&mut a).await.unwrap(), ("0".into(), 1));
    assert_eq!(allow(&mut b).await.unwrap(), ("0".into(), 1));

    // The third is accepted and closed at once, before it says anything.
    let third = TcpStream::connect(&server.addr).await.unwrap();
    closed_by_server(third).await;
    // The two within the cap are still served.
    assert_eq!(allow(&mut a).await.unwrap(), ("0".into(), 1));

    // Closing one gives its place back: a new connection is served.
    b.conn.abort();
    drop(b.send);
    let served = tokio::time::timeout(BOUND, async {
        loop {
            if let Ok(mut c) = connect(&server.addr).await {
                if let Ok(answer) = allow(&mut c).await {
                    return answer;
                }
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("a connection is served once one of the two has closed");
    assert_eq!(served, ("0".into(), 1));
    server.shut_down().await;
}

#[tokio::test]
async fn a_connection_over_the_cap_is_closed_at_once() {
    cap_refuses_the_connection_over_it(None).await;
}

#[tokio::test]
async fn a_connection_over_the_cap_is_closed_at_once_on_threads() {
    cap_refuses_the_connection_over_it(Some(2)).await;
}

#[tokio::test]
async fn a_connection_without_a_handshake_is_closed() {
    let limits = ServerLimits {
        handshake_timeout: Duration::from_millis(200),
        ..ServerLimits::default()
    };
    let server = Server::start(limits, Some(1)).await;
    let mut served = connect(&server.addr).await.unwrap();

    // Silent: never a byte.
    let silent = TcpStream::connect(&server.addr).await.unwrap();
    closed_by_server(silent).await;
    // Slow: part of the 24-byte preface, then nothing.
    let mut slow = TcpStream::connect(&server.addr).await.unwrap();
    slow.write_all(b"PRI * HTTP/2.0\r\n").await.unwrap();
    closed_by_server(slow).await;

    // A connection that sent its preface is not held to the deadline.
    assert_eq!(allow(&mut served).await.unwrap(), ("0".into(), 1));
    server.shut_down().await;
}

#[tokio::test]
async fn an_idle_connection_is_closed_and_a_busy_one_is_not() {
    let limits = ServerLimits {
        idle_timeout: Duration::from_millis(400),
        ..ServerLimits::default()
    };
    let server = Server::start(limits, None).await;

    // A call in flight (its message half sent) for several idle timeouts:
    // the connection stays open and the call is answered.
    let mut busy = connect(&server.addr).await.unwrap();
    let (response, stream, rest) = begin_call(&mut busy, 7).await.unwrap();
    tokio::time::sleep(Duration::from_millis(1600)).await;
    assert_eq!(
        finish_call(response, stream, rest).await.unwrap(),
        ("0".into(), 1)
    );

    // With no call in flight, it is closed.
    ended(busy).await;
    let mut idle = connect(&server.addr).await.unwrap();
    assert_eq!(allow(&mut idle).await.unwrap(), ("0".into(), 1));
    ended(idle).await;
    server.shut_down().await;
}

#[tokio::test]
async fn shutdown_lets_calls_in_flight_finish() {
    let limits = ServerLimits {
        drain_timeout: Duration::from_secs(60),
        ..ServerLimits::default()
    };
    let server = Server::start(limits, None).await;
    let mut client = connect(&server.addr).await.unwrap();
    let (response, stream, rest) = begin_call(&mut client, 7).await.unwrap();
    // Let the server take the call before it shuts down: one that arrives
    // after the GOAWAY is refused, as HTTP/2 says.
    tokio::time::sleep(Duration::from_millis(100)).await;
    let Server { mut stop, task, .. } = server;
    stop.take().unwrap().send(()).unwrap();
    // Let the shutdown reach the connection before the call goes on.
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(!task.is_finished(), "a call in flight holds the drain");
    assert_eq!(
        finish_call(response, stream, rest).await.unwrap(),
        ("0".into(), 1)
    );
    // The last call answered, the connection closes and `serve` returns.
    tokio::time::timeout(BOUND, task)
        .await
        .expect("the server returns once its connections have closed")
        .unwrap()
        .unwrap();
    ended(client).await;
}

#[tokio::test]
async fn the_drain_deadline_closes_what_is_left() {
    for threads in [None, Some(2)] {
        let limits = ServerLimits {
            drain_timeout: Duration::from_millis(200),
            ..ServerLimits::default()
        };
        let server = Server::start(limits, threads).await;
        let mut stuck = connect(&server.addr).await.unwrap();
        // A call whose message never ends, and a silent connection.
        let (_response, _stream, _rest) = begin_call(&mut stuck, 7).await.unwrap();
        let silent = TcpStream::connect(&server.addr).await.unwrap();
        // Let the server take the call and the connection first.
        tokio::time::sleep(Duration::from_millis(100)).await;
        server.shut_down().await;
        ended(stuck).await;
        closed_by_server(silent).await;
    }
}
