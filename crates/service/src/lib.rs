//! What every tollgate server shares: the plumbing the Doorman lease
//! server, the quota server and the throttler use alike, in one home.
//!
//! * [`ServerLimits`], the one set of limits on a server's connections
//!   and HTTP/2 transport (`limits.rs`); connections accepted, capped and
//!   guarded under them (`conn.rs`);
//! * a tonic router served under those limits with a graceful drain
//!   (`grpc.rs`), and the drain of a server with its own HTTP/2 stack
//!   (`drain.rs`); SIGTERM and SIGINT, one as the other, to start it
//!   (`shutdown.rs`);
//! * hot reload in one shape (`reload.rs`): a configuration file watched
//!   for changes and SIGHUP (`watch.rs`);
//! * etcd (`etcd.rs`): one channel with TLS, one key read, written and
//!   watched for hot reload (`etcd/watch.rs`), one error type, and an
//!   outage logged and reported to the server's [`Readiness`]
//!   (`readiness.rs`);
//! * TLS and mutual TLS files for servers and clients (`tls.rs`);
//! * locks that keep serving after a panic under them (`locks.rs`);
//! * an error with its causes for log lines (`error_chain.rs`).
//!
//! Nothing here knows a product: the kit depends on nothing but the
//! limiter's neighbours (tokio, tonic, tower, tracing), and the Doorman,
//! quota and throttle crates build on it.

mod conn;
mod drain;
mod error_chain;
mod etcd;
mod grpc;
mod limits;
mod locks;
mod readiness;
mod reload;
mod shutdown;
mod tls;
mod watch;

pub use conn::{accept_loop, ConnInfo, Guarded, InFlightGuard, Permits};
pub use drain::Drain;
pub use error_chain::ErrorChain;
pub use etcd::watch::watch_key;
pub use etcd::{channel as etcd_channel, EtcdError, EtcdKey, Outage};
pub use grpc::{InFlight, InFlightLayer, LimitedRouter, LimitedServer};
pub use limits::ServerLimits;
pub use locks::{LockUnpoisoned, RwLockUnpoisoned};
pub use readiness::{NotReady, Readiness};
pub use reload::{reload_file, Reload};
pub use shutdown::ShutdownSignals;
pub use tls::{ClientTls, ServeError, ServerTls, TlsError};
pub use watch::{hangup, watch_file, Hangup};

/// The etcd v3 messages and the one unary call the kit's keys and the
/// Doorman election send: written by hand, not part of the API.
#[doc(hidden)]
pub mod etcd_wire {
    pub use crate::etcd::wire::*;
}
