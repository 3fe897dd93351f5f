//! A bare HTTP/1.1 client for the tests of the admin and debug ports: one
//! request per connection, the whole answer read to the end.

use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

/// One HTTP/1.1 request with a JSON `body`; returns the status code and
/// the body of the answer.
pub(crate) async fn http(addr: &str, method: &str, path: &str, body: &str) -> (u16, String) {
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    let msg = format!(
        "{method} {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    s.write_all(msg.as_bytes()).await.unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).await.unwrap();
    let code = out[9..12].parse().unwrap();
    let body = out
        .split_once("\r\n\r\n")
        .map(|x| x.1)
        .unwrap_or("")
        .to_owned();
    (code, body)
}
