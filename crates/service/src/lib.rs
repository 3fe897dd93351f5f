//! What every tollgate server shares: the plumbing the Doorman lease
//! server, the quota server and the throttler use alike, in one home.
//!
//! * [`ServerLimits`], the one set of limits on a server's connections
//!   and HTTP/2 transport, under which connections are accepted, capped
//!   and guarded;
//! * one lean gRPC server for unary services, plaintext or TLS, under
//!   those limits with a graceful drain ([`GrpcServer`],
//!   [`UnaryService`]); SIGTERM and SIGINT, one as the other, to start
//!   the drain ([`ShutdownSignals`]);
//! * hot reload in one shape ([`Reload`], [`reload_file`]): a
//!   configuration file, or a directory of them, watched for changes and
//!   SIGHUP ([`watch_file`], [`files_under`], [`hangup`]);
//! * etcd: one channel with TLS ([`etcd_channel`]), one key read, written
//!   ([`EtcdKey`]) and watched for hot reload ([`watch_key`]), one error
//!   type ([`EtcdError`]), and an [`Outage`] logged and reported to the
//!   server's [`Readiness`];
//! * TLS and mutual TLS files for servers and clients ([`ServerTls`],
//!   [`ClientTls`]), and a failed handshake in words with its likely fix
//!   ([`tls_failure`]; servers log the clients they refuse);
//! * locks that keep serving after a panic under them
//!   ([`LockUnpoisoned`], [`RwLockUnpoisoned`]);
//! * an error with its causes for log lines ([`error_chain`]);
//! * the connections to Redis that the Redis stores share
//!   ([`redis_link`]: standalone, Sentinel or Cluster, multiplexed,
//!   reconnected with backoff, every call under a deadline);
//! * one debug port: an index of the server's pages, `/metrics` and a
//!   `/healthz` that follows its [`Readiness`] ([`DebugPort`]).
//!
//! Nothing here knows a product: the kit depends on tokio, h2, rustls, tonic,
//! axum, redis and tracing alone, and the Doorman, quota and throttle crates
//! build on it.
//!
//! A service that reloads its configuration says how to read, parse and
//! apply it; the kit reads, applies and logs:
//!
//! ```
//! use std::path::Path;
//! use std::sync::Mutex;
//! use tollgate_service::{reload_file, Reload};
//!
//! /// A service whose configuration is a greeting.
//! struct Greeter(Mutex<String>);
//!
//! impl Reload for Greeter {
//!     type Config = String;
//!     type Error = std::io::Error;
//!     const WHAT: &'static str = "greeting";
//!
//!     fn read_file(path: &Path) -> Result<String, std::io::Error> {
//!         std::fs::read_to_string(path)
//!     }
//!
//!     fn parse(text: &str) -> Result<String, std::io::Error> {
//!         Ok(text.to_owned())
//!     }
//!
//!     fn apply(&self, greeting: String) {
//!         *self.0.lock().unwrap() = greeting;
//!     }
//! }
//!
//! let greeter = Greeter(Mutex::new("hello".to_owned()));
//! let path = std::env::temp_dir().join(format!("greeting-{}", std::process::id()));
//! std::fs::write(&path, "bonjour")?;
//! assert!(reload_file(&greeter, &path));
//! assert_eq!(*greeter.0.lock().unwrap(), "bonjour");
//! // A file that cannot be read is logged and refused: the greeting stays.
//! std::fs::remove_file(&path)?;
//! assert!(!reload_file(&greeter, &path));
//! assert_eq!(*greeter.0.lock().unwrap(), "bonjour");
//! # Ok::<(), std::io::Error>(())
//! ```
//!
//! # Features
//!
//! | feature     | default | what it builds |
//! |-------------|---------|----------------|
//! | `etcd-wire` | off     | `etcd_wire`: the etcd v3 messages and unary call the kit's etcd keys speak, for an etcd client of one's own (the Doorman election turns it on) |

mod conn;
mod debug;
mod drain;
mod error_chain;
mod etcd;
mod html;
mod lean;
mod limits;
mod locks;
mod readiness;
pub mod redis_link;
mod reload;
mod shutdown;
mod tls;
mod tls_dates;
mod tls_failure;
mod watch;

pub use debug::DebugPort;
pub(crate) use error_chain::ErrorChain;
pub use error_chain::{error_chain, status_line};
pub use etcd::watch::watch_key;
pub use etcd::{channel as etcd_channel, EtcdError, EtcdKey, Outage};
pub use html::html_escape;
pub use lean::{GrpcServer, UnaryService};
pub use limits::ServerLimits;
pub use locks::{LockUnpoisoned, RwLockUnpoisoned};
pub use readiness::{NotReady, Readiness};
pub use reload::{reload_file, Reload};
pub use shutdown::ShutdownSignals;
pub use tls::{ClientTls, ServerTls, TlsError};
pub use tls_failure::{tls_failure, tls_failure_is_permanent};
pub use watch::{files_under, hangup, watch_file};

/// The TLS library the servers use, for a configuration of one's own
/// ([`GrpcServer::tls_config`]).
pub use tokio_rustls::rustls;

/// The etcd v3 messages and the one unary call the kit's keys send, for an
/// etcd client of one's own (the Doorman election's); feature `etcd-wire`.
///
/// The messages are written by hand with prost's derive, with the field
/// numbers of etcd's `rpc.proto`, `kv.proto` and `v3election.proto`, and
/// only the fields tollgate reads or sends: prost skips the others.
#[cfg(feature = "etcd-wire")]
pub mod etcd_wire {
    pub use crate::etcd::wire::*;
}
