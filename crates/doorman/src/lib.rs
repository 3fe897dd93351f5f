//! The Doorman capacity lease protocol: servers that divide a resource's
//! capacity between the clients that ask for it.
//!
//! A client holds, per resource, a *lease*: a capacity it may use until the
//! lease expires, and an interval after which it should ask again. On every
//! request the server records what the client *wants*, drops expired leases,
//! and lets the resource's algorithm decide what the client *gets*. The
//! per-resource state, with the sums and indices that make one decision
//! cost `O(log n)`, lives in the lease store.
//!
//! The server side: a [`Server`], made with [`Server::builder`] from a
//! [`ServerConfig`] (resource templates from YAML), following an
//! [`Election`] ([`SingleElection`] for a lone server, [`EtcdElection`]
//! among several), optionally below a [`Parent`]. [`reload`] keeps its
//! configuration current and [`debug`] serves its HTTP debug port. The
//! `tollgate-simulate` crate runs a server tree and its lease clients on a
//! virtual clock.
//!
//! The client side: a [`Client`] keeps leases fresh, one per [`Resource`];
//! [`RateResource`], [`GaugeResource`] and [`LeaseLayer`] enforce them.
//!
//! Time: the server stamps leases with Unix time, which other machines
//! read, so it takes a [`WallClock`]: the limiter's
//! [`SystemClock`](tollgate::SystemClock) (the default) and
//! [`ManualClock`](tollgate::ManualClock) (in tests) read as Unix time too.
//!
#![cfg_attr(not(feature = "server"), doc = "```ignore")]
#![cfg_attr(feature = "server", doc = "```")]
//! use tollgate_doorman::{
//!     CapacitySource, Client, ResourceOptions, Server, ServerConfig, SingleElection,
//! };
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let config = ServerConfig::from_yaml(
//!     r#"
//! resources:
//!   - identifier_glob: "*"
//!     capacity: 100
//!     algorithm:
//!       kind: FAIR_SHARE
//!       lease_length: 60
//!       refresh_interval: 5
//!       learning_mode_duration: 0
//! "#,
//! )?;
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
//! let address = listener.local_addr()?.to_string();
//! let election = SingleElection::new(Some(address.clone()));
//! let server = Server::builder(config).election(&election).build();
//! tokio::spawn(server.serve(listener, std::future::pending()));
//!
//! let client = Client::builder().server(address).build()?;
//! let resource = client.resource("any", ResourceOptions::new(10.0))?;
//! resource.watch().wait_for(|c| c.source == CapacitySource::Lease).await?;
//! assert_eq!(resource.capacity(), 10.0);
//! # Ok(())
//! # }
//! ```
//!
//! # Metrics
//!
//! A server's `/metrics` ([`debug`], [`Server::metrics_text`]) keeps the Go
//! server's metric names, so that existing dashboards keep working; the
//! ones Go did not have are named as Prometheus advises (base units,
//! `_total` on counters). `tollgate serve` serves them on its debug port
//! (`127.0.0.1:15050/metrics` by default).
//!
//! | metric | type | labels | what it counts |
//! |--------|------|--------|----------------|
//! | `doorman_server_requests` | counter | `method` | RPCs received (Go's name) |
//! | `doorman_server_request_errors` | counter | `method` | RPCs answered with an error (Go's name) |
//! | `doorman_server_request_durations` | histogram | `method` | seconds to answer an RPC (Go's name) |
//! | `doorman_server_has` | gauge | `resource` | capacity held by unexpired leases (Go's name) |
//! | `doorman_server_wants` | gauge | `resource` | capacity the clients ask for (Go's name) |
//! | `doorman_server_subclients` | gauge | `resource` | clients asking, their subclients counted (Go's name) |
//! | `doorman_server_capacity` | gauge | `resource` | capacity to share: the template's, or on an intermediate server what its parent granted |
//! | `doorman_server_learning_mode` | gauge | `resource` | 1 while the resource is in learning mode, else 0 |
//! | `doorman_server_is_master` | gauge | | 1 while this server is the master, else 0 |
//! | `doorman_server_config_reloads_total` | counter | | new configurations put in force |
//! | `doorman_server_config_reload_failures_total` | counter | | new configurations refused (the old one stays) |
//! | `doorman_server_refused_connections_total` | counter | `reason` | connections refused: `max_connections` (over the cap, closed at once) or `tls_handshake` (a certificate refused, plaintext to TLS) |
//!
//! The refused connections are counted by [`Server::serve`],
//! not by a tonic router of one's own ([`Server::into_tonic`]).
//!
//! # Features
//!
//! | feature    | default | what it builds |
//! |------------|---------|----------------|
//! | `server`   | on      | the lease server: [`Server`], [`ServerConfig`], the algorithms and lease store, [`Election`], [`reload`], [`debug`]; without it the crate is the lease client alone |
//! | `etcd`     | on      | [`EtcdElection`]: master election among several servers on etcd v3, and a configuration kept in etcd ([`reload`]); turns on `server` |
//! | `wire`     | off     | [`pb`]: the messages and gRPC stubs generated from `proto/doorman/doorman.proto`, for tools and tests that speak the wire protocol themselves (the `tollgate load` command's lease mode) |
//! | `in-process` | off   | [`in_process`]: servers and clients in one process calling each other directly, so that a whole server tree runs on one clock (the `tollgate-simulate` crate's transport); turns on `server` |
//!
//! A service that only takes leases depends on the client alone:
//! `tollgate-doorman = { version = "0.1", default-features = false }`.
//!
#![cfg_attr(not(feature = "etcd"), doc = "[`EtcdElection`]: crate#features")]
#![cfg_attr(not(feature = "in-process"), doc = "[`in_process`]: crate#features")]
#![cfg_attr(not(feature = "wire"), doc = "[`pb`]: crate#features")]
#![cfg_attr(
    not(feature = "server"),
    doc = "[`Server`]: crate#features\n[`ServerConfig`]: crate#features\n[`Election`]: crate#features\n[`reload`]: crate#features\n[`debug`]: crate#features\n[`SingleElection`]: crate#features\n[`Parent`]: crate#features\n[`Server::builder`]: crate#features"
)]

#[cfg(feature = "server")]
mod algorithm;
mod client;
mod clock;
#[cfg(feature = "server")]
mod config;
#[cfg(feature = "server")]
pub mod debug;
#[cfg(feature = "server")]
mod election;
#[cfg(feature = "server")]
mod engine;
mod error;
#[cfg(feature = "server")]
mod glob;
#[cfg(feature = "in-process")]
pub mod in_process;
mod lease;
mod metrics;
#[cfg(feature = "wire")]
pub mod pb;
#[cfg(not(feature = "wire"))]
mod pb;
#[cfg(feature = "server")]
pub mod reload;
#[cfg(feature = "server")]
mod server;
mod session;
#[cfg(feature = "server")]
mod store;
mod transport;

pub use client::{
    Backoff, Capacity, CapacitySource, Client, ClientBuildError, ClientBuilder, ClientMetrics,
    ExpiryMode, GaugeGuard, GaugeResource, Lease, LeaseLayer, Leased, ParseExpiryModeError,
    RateOptions, RateResource, Rejected, ReleaseError, Resource, ResourceError, ResourceOptions,
    SessionError, Smoothing,
};
pub use clock::WallClock;
#[cfg(feature = "server")]
pub use config::{ServerConfig, ServerConfigError};
#[cfg(feature = "etcd")]
pub use election::etcd::{Etcd as EtcdElection, EtcdConfig as EtcdElectionConfig};
#[cfg(feature = "server")]
pub use election::single::SingleElection;
#[cfg(feature = "server")]
pub use election::{Election, Mastership, Promise};
#[cfg(feature = "server")]
pub use engine::{Engine, ResourceStatus};
pub use lease::ClientLease;
#[cfg(feature = "etcd")]
pub use reload::EtcdConfigSource;
#[cfg(feature = "etcd")]
pub use server::Standalone;
#[cfg(feature = "server")]
pub use server::{Parent, Server, ServerBuilder};
// The service kit's types that the server and client builders take,
// shown as re-exports: they are documented in `tollgate_service`.
#[doc(no_inline)]
pub use tollgate_service::{ClientTls, TlsError};
#[cfg(feature = "server")]
#[doc(no_inline)]
pub use tollgate_service::{ServerLimits, ServerTls};
