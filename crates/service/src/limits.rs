//! The limits a server puts on its transport, in one type: a cap on
//! connections, handshake, idle and drain deadlines, and the HTTP/2
//! settings of a gRPC server (message size, streams, flow-control
//! windows, keepalive, a deadline per RPC).
//!
//! # Examples
//!
//! ```
//! use std::time::Duration;
//! use tollgate_service::ServerLimits;
//!
//! let limits = ServerLimits {
//!     max_connections: 100,
//!     idle_timeout: Duration::from_secs(60),
//!     ..ServerLimits::default()
//! };
//! assert_eq!(limits.handshake_timeout, Duration::from_secs(10));
//! ```
//!
//! # Implementation notes
//!
//! The defaults suit small messages (Doorman's and quotaservice's): a
//! request larger than [`ServerLimits::max_message_bytes`] is refused from
//! its 5-byte gRPC header, before its body is buffered, and each HTTP/2
//! stream and connection may hold only one flow-control window of unread
//! data. With at most [`ServerLimits::max_concurrent_streams`] streams per
//! connection and [`ServerLimits::max_connections`] connections, the
//! memory a client can pin is bounded by
//! `max_connections × max_concurrent_streams × max_message_bytes` at
//! worst, and a stream that stops sending mid-message is ended by
//! [`ServerLimits::request_timeout`].

use std::time::Duration;

/// The limits on a server's connections and its HTTP/2 transport. Every
/// field is a `tollgate serve` flag; `tollgate quota` has the connection
/// ones.
///
/// The lean gRPC server ([`GrpcServer`](crate::GrpcServer)), which serves
/// the lease and quota servers, applies every field.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ServerLimits {
    /// Largest request message, in bytes (default 64 KiB: a Doorman
    /// GetCapacity for about 1000 resources with 40-byte ids). Larger ones
    /// get RESOURCE_EXHAUSTED from their header, before their body is read
    /// (OUT_OF_RANGE from a tonic router).
    pub max_message_bytes: usize,
    /// Most concurrent HTTP/2 streams (RPCs) per connection (default 64).
    pub max_concurrent_streams: u32,
    /// HTTP/2 flow-control window per stream, in bytes (default 64 KiB):
    /// how much unread data one stream may hold.
    pub stream_window_bytes: u32,
    /// HTTP/2 flow-control window per connection, in bytes (default
    /// 256 KiB).
    pub connection_window_bytes: u32,
    /// Largest HTTP/2 header list, in bytes (default 16 KiB).
    pub max_header_list_bytes: u32,
    /// How long one RPC may take, reading its request included (default
    /// 10 s): ends a stream that stops sending mid-message.
    pub request_timeout: Duration,
    /// HTTP/2 PING interval (default 30 s).
    pub keepalive_interval: Duration,
    /// How long a PING may go unanswered before the connection is closed
    /// (default 10 s).
    pub keepalive_timeout: Duration,
    /// How long a new connection may take to send the HTTP/2 preface
    /// (default 10 s).
    pub handshake_timeout: Duration,
    /// How long a connection may stay open with no RPC in flight (default
    /// 5 min).
    pub idle_timeout: Duration,
    /// Most connections open at once (default 4096); more are accepted and
    /// closed at once.
    pub max_connections: usize,
    /// At shutdown, how long in-flight RPCs may take to finish before every
    /// connection is closed (default 5 s).
    pub drain_timeout: Duration,
}

impl Default for ServerLimits {
    fn default() -> Self {
        ServerLimits {
            max_message_bytes: 64 * 1024,
            max_concurrent_streams: 64,
            stream_window_bytes: 64 * 1024,
            connection_window_bytes: 256 * 1024,
            max_header_list_bytes: 16 * 1024,
            request_timeout: Duration::from_secs(10),
            keepalive_interval: Duration::from_secs(30),
            keepalive_timeout: Duration::from_secs(10),
            handshake_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(300),
            max_connections: 4096,
            drain_timeout: Duration::from_secs(5),
        }
    }
}
