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
//! Nothing here knows a product: the kit imports nothing from
//! [`doorman`](crate::doorman), [`quota`](crate::quota) or
//! [`throttle`](crate::throttle).

// The server side: Doorman's server and the quota server.
#[cfg(any(feature = "server", feature = "quota"))]
mod conn;
#[cfg(feature = "quota")]
mod drain;
#[cfg(feature = "etcd-wire")]
mod etcd;
#[cfg(any(feature = "server", feature = "quota"))]
mod grpc;
#[cfg(any(feature = "server", feature = "quota"))]
mod limits;
mod readiness;
#[cfg(any(feature = "server", feature = "quota"))]
mod reload;
#[cfg(any(feature = "server", feature = "quota"))]
mod shutdown;
#[cfg(any(feature = "server", feature = "quota"))]
mod watch;
// Every user of tonic: Doorman's client and server, and quota.
#[cfg(any(feature = "client", feature = "server", feature = "quota"))]
mod tls;
// Built for the configuration reloads that log it: doorman's server, quota,
// throttle.
#[cfg(any(
    feature = "server",
    feature = "quota",
    all(feature = "throttle", not(tollgate_loom))
))]
mod error_chain;
mod locks;

#[cfg(any(
    feature = "server",
    feature = "quota",
    all(feature = "throttle", not(tollgate_loom))
))]
pub(crate) use error_chain::ErrorChain;
pub(crate) use locks::LockUnpoisoned;
// The Doorman client alone holds no `RwLock`.
#[cfg(any(
    feature = "server",
    feature = "quota",
    all(feature = "throttle", not(tollgate_loom))
))]
pub(crate) use locks::RwLockUnpoisoned;

#[cfg(feature = "quota")]
pub(crate) use conn::accept_loop;
#[cfg(any(feature = "server", feature = "quota"))]
pub use conn::{ConnInfo, Guarded};
#[cfg(feature = "quota")]
pub(crate) use drain::Drain;
#[cfg(feature = "etcd-wire")]
pub use etcd::EtcdError;
#[cfg(feature = "etcd-wire")]
pub(crate) use etcd::EtcdKey;
#[cfg(feature = "etcd")]
pub(crate) use etcd::{channel as etcd_channel, watch::watch_key, wire as etcd_wire, Outage};
#[cfg(any(feature = "server", feature = "quota"))]
pub use grpc::{InFlight, InFlightLayer, LimitedRouter, LimitedServer};
#[cfg(any(feature = "server", feature = "quota"))]
pub use limits::ServerLimits;
pub use readiness::Readiness;
#[cfg(any(feature = "server", feature = "quota"))]
pub(crate) use reload::{reload_file, Reload};
#[cfg(any(feature = "server", feature = "quota"))]
pub use shutdown::ShutdownSignals;
#[cfg(any(feature = "client", feature = "server", feature = "quota"))]
pub use tls::{ClientTls, ServeError, ServerTls, TlsError};
#[cfg(any(feature = "server", feature = "quota"))]
pub(crate) use watch::{hangup, watch_file};
