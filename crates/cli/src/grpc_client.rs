//! The load's full gRPC client: unary calls over HTTP/2 on the `h2` crate,
//! plaintext or TLS, with no tower stack or task between a caller and its
//! connection. `tollgate load` drives servers over TLS with it, and asks
//! it for the status of a call that failed on the load's own plaintext
//! client (`load_h2.rs`), which decodes no headers.
//!
//! # Implementation notes
//!
//! A call is one HTTP/2 stream: POST with `content-type:
//! application/grpc` and `te: trailers`, the framed message as the body,
//! then the answer's data (its flow-control window given back as it is
//! read) and `grpc-status` from the trailers, or from the headers of a
//! "trailers-only" refusal. A connection's driver runs as a task of the
//! runtime that dialled it.

use std::fmt;

use tokio_rustls::rustls::pki_types::ServerName;
use tokio_rustls::TlsConnector;
use tonic::codegen::http::{self, HeaderValue, Method, Uri};
use tonic::codegen::Bytes;

use tollgate_service::{ClientTls, TlsError};

/// Why a call, or the connection it needed, failed.
#[derive(Debug)]
#[non_exhaustive]
pub(crate) enum GrpcClientError {
    /// The address is not `host:port` (with or without `http://`).
    Address(String),
    /// The TLS setup: a file, or a name TLS cannot check.
    Tls(TlsError),
    /// The host is not a name TLS can check.
    ServerName(String),
    /// The TCP connection or the TLS handshake failed.
    Connect {
        /// What failed: `connecting to`, `TLS handshake with`.
        what: &'static str,
        /// The server's `host:port`.
        authority: String,
        /// Why.
        source: std::io::Error,
    },
    /// The HTTP/2 handshake failed.
    Handshake {
        /// The server's `host:port`.
        authority: String,
        /// Why.
        source: h2::Error,
    },
    /// HTTP/2 failed on a call's stream.
    Http2(h2::Error),
    /// The server answered an HTTP status other than 200.
    HttpStatus(http::StatusCode),
    /// The server answered a gRPC status other than OK.
    Status {
        /// The `grpc-status` code, as sent.
        code: String,
        /// The `grpc-message`, percent-decoded.
        message: String,
    },
    /// The answer is shorter than a gRPC frame's prefix.
    ShortResponse,
}

impl fmt::Display for GrpcClientError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            GrpcClientError::Address(server) => write!(f, "--server {server:?} is not host:port"),
            GrpcClientError::Tls(_) => f.write_str("client TLS setup"),
            GrpcClientError::ServerName(host) => {
                write!(f, "{host:?} is not a name TLS can check")
            }
            GrpcClientError::Connect {
                what, authority, ..
            } => write!(f, "{what} {authority}"),
            GrpcClientError::Handshake { authority, .. } => {
                write!(f, "HTTP/2 handshake with {authority}")
            }
            GrpcClientError::Http2(e) => write!(f, "{e}"),
            GrpcClientError::HttpStatus(status) => write!(f, "HTTP {status}"),
            GrpcClientError::Status { code, message } => {
                write!(f, "gRPC status {code}: {message}")
            }
            GrpcClientError::ShortResponse => f.write_str("short response"),
        }
    }
}

impl std::error::Error for GrpcClientError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            GrpcClientError::Tls(e) => Some(e),
            GrpcClientError::Connect { source, .. } => Some(source),
            GrpcClientError::Handshake { source, .. } => Some(source),
            _ => None,
        }
    }
}

impl From<h2::Error> for GrpcClientError {
    fn from(e: h2::Error) -> GrpcClientError {
        GrpcClientError::Http2(e)
    }
}

/// A gRPC server to dial: its address, and the TLS to speak, resolved
/// once; [`GrpcTarget::connect`] opens each connection.
#[derive(Clone)]
pub(crate) struct GrpcTarget {
    /// `host:port`.
    authority: String,
    /// `http` or `https`.
    scheme: &'static str,
    tls: Option<(TlsConnector, ServerName<'static>)>,
}

impl fmt::Debug for GrpcTarget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GrpcTarget")
            .field("authority", &self.authority)
            .field("tls", &self.tls.is_some())
            .finish()
    }
}

impl GrpcTarget {
    /// The server at `server` (`host:port`; an `http://` or `https://`
    /// prefix and a trailing `/` are ignored), over TLS as `tls` says, or
    /// plaintext.
    ///
    /// # Errors
    ///
    /// An address that is not `host:port`, TLS files that cannot be read
    /// or used, or a host TLS cannot check.
    pub(crate) fn new(
        server: &str,
        tls: Option<&ClientTls>,
    ) -> Result<GrpcTarget, GrpcClientError> {
        let authority = server
            .split_once("://")
            .map_or(server, |(_, rest)| rest)
            .trim_end_matches('/')
            .to_owned();
        let scheme = if tls.is_some() { "https" } else { "http" };
        let uri: Uri = format!("{scheme}://{authority}/")
            .parse()
            .map_err(|_| GrpcClientError::Address(server.to_owned()))?;
        let tls = match tls {
            None => None,
            Some(tls) => {
                let host = uri.host().unwrap_or_default();
                let name = ServerName::try_from(tls.server_name(host).to_owned())
                    .map_err(|_| GrpcClientError::ServerName(host.to_owned()))?;
                let config = tls.rustls_config().map_err(GrpcClientError::Tls)?;
                Some((TlsConnector::from(config), name))
            }
        };
        Ok(GrpcTarget {
            authority,
            scheme,
            tls,
        })
    }

    /// The URI of the method at `path` (`/package.Service/Method`), to
    /// pass to [`GrpcConnection::call`].
    ///
    /// # Errors
    ///
    /// A path that makes no URI.
    pub(crate) fn uri(&self, path: &str) -> Result<Uri, GrpcClientError> {
        format!("{}://{}{path}", self.scheme, self.authority)
            .parse()
            .map_err(|_| GrpcClientError::Address(self.authority.clone()))
    }

    /// Opens one HTTP/2 connection (TCP without Nagle's delay, then TLS
    /// when asked), its driver spawned on the calling runtime.
    ///
    /// # Errors
    ///
    /// The connection, the TLS handshake or the HTTP/2 handshake failing.
    pub(crate) async fn connect(&self) -> Result<GrpcConnection, GrpcClientError> {
        let connect = |what, source| GrpcClientError::Connect {
            what,
            authority: self.authority.clone(),
            source,
        };
        let tcp = tokio::net::TcpStream::connect(&self.authority)
            .await
            .map_err(|e| connect("connecting to", e))?;
        tcp.set_nodelay(true)
            .map_err(|e| connect("connecting to", e))?;
        let handshake = |source| GrpcClientError::Handshake {
            authority: self.authority.clone(),
            source,
        };
        let h2 = h2::client::Builder::new()
            .initial_window_size(1 << 20)
            .initial_connection_window_size(1 << 22)
            .clone();
        let Some((connector, name)) = &self.tls else {
            let (send, conn) = h2.handshake::<_, Bytes>(tcp).await.map_err(handshake)?;
            tokio::spawn(conn);
            return Ok(GrpcConnection { send });
        };
        let tls = connector
            .connect(name.clone(), tcp)
            .await
            .map_err(|e| connect("TLS handshake with", e))?;
        let (send, conn) = h2.handshake::<_, Bytes>(tls).await.map_err(handshake)?;
        tokio::spawn(conn);
        Ok(GrpcConnection { send })
    }
}

/// One HTTP/2 connection to a gRPC server; clones share it, each making
/// its own calls.
#[derive(Debug, Clone)]
pub(crate) struct GrpcConnection {
    send: h2::client::SendRequest<Bytes>,
}

impl GrpcConnection {
    /// One unary call of the method at `uri` ([`GrpcTarget::uri`]) with
    /// `body`, a gRPC-framed request ([`grpc_frame`]): the response
    /// message, without its 5-byte prefix.
    ///
    /// # Errors
    ///
    /// HTTP/2 failing, an HTTP status other than 200, a gRPC status other
    /// than OK, or an answer too short to be a message.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future resets the call's stream; the connection stays
    /// usable.
    pub(crate) async fn call(
        &mut self,
        uri: &Uri,
        body: Bytes,
    ) -> Result<Vec<u8>, GrpcClientError> {
        let send = &mut self.send;
        std::future::poll_fn(|cx| send.poll_ready(cx)).await?;
        let mut req = http::Request::new(());
        *req.method_mut() = Method::POST;
        *req.uri_mut() = uri.clone();
        let h = req.headers_mut();
        h.insert(
            http::header::CONTENT_TYPE,
            HeaderValue::from_static("application/grpc"),
        );
        h.insert(http::header::TE, HeaderValue::from_static("trailers"));
        let (response, mut stream) = send.send_request(req, false)?;
        stream.send_data(body, true)?;
        let (head, mut body) = response.await?.into_parts();
        if head.status != http::StatusCode::OK {
            return Err(GrpcClientError::HttpStatus(head.status));
        }
        let mut message = Vec::new();
        while let Some(chunk) = body.data().await {
            let chunk = chunk?;
            let _ = body.flow_control().release_capacity(chunk.len());
            message.extend_from_slice(&chunk);
        }
        let trailers = body.trailers().await?;
        let status = |name: &str| {
            trailers
                .as_ref()
                .and_then(|t| t.get(name))
                .or_else(|| head.headers.get(name))
                .and_then(|v| v.to_str().ok())
                .unwrap_or_default()
                .to_owned()
        };
        let code = status("grpc-status");
        if code != "0" {
            return Err(GrpcClientError::Status {
                code,
                message: percent_decoded(&status("grpc-message")),
            });
        }
        if message.len() < 5 {
            return Err(GrpcClientError::ShortResponse);
        }
        message.drain(..5);
        Ok(message)
    }
}

/// Frames `message` as a gRPC request body: no compression flag, its
/// length (4 bytes, big-endian), the message.
///
/// # Examples
///
/// (`"hi"` is framed as `[0, 0, 0, 0, 4, 10, 2, b'h', b'i']`.)
pub(crate) fn grpc_frame(message: &impl prost::Message) -> Bytes {
    let len = message.encoded_len();
    let mut buf = Vec::with_capacity(5 + len);
    buf.push(0);
    buf.extend_from_slice(&u32::try_from(len).unwrap_or(u32::MAX).to_be_bytes());
    // Cannot fail: the buffer grows as needed.
    let _ = message.encode(&mut buf);
    Bytes::from(buf)
}

/// A `grpc-message` as written: gRPC percent-encodes it on the wire
/// (`unknown%20method`). A malformed escape is kept as it is.
fn percent_decoded(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = bytes
            .get(i + 1..i + 3)
            .and_then(|h| std::str::from_utf8(h).ok())
            .and_then(|h| u8::from_str_radix(h, 16).ok());
        match (bytes[i], hex) {
            (b'%', Some(b)) => {
                out.push(b);
                i += 3;
            }
            (b, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grpc_messages_are_percent_decoded() {
        assert_eq!(
            percent_decoded("unknown%20method%20/doorman.Capacity/GetCapacity"),
            "unknown method /doorman.Capacity/GetCapacity"
        );
        assert_eq!(percent_decoded("100%"), "100%");
        assert_eq!(percent_decoded("%zz%41"), "%zzA");
    }

    #[test]
    fn a_target_is_host_port_with_or_without_a_scheme() {
        for server in ["127.0.0.1:15000", "http://127.0.0.1:15000/"] {
            let target = GrpcTarget::new(server, None).unwrap();
            assert_eq!(
                target.uri("/a.B/C").unwrap().to_string(),
                "http://127.0.0.1:15000/a.B/C"
            );
        }
        assert_eq!(
            GrpcTarget::new("a b", None).unwrap_err().to_string(),
            "--server \"a b\" is not host:port"
        );
    }
}
