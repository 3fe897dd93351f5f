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
//! configuration current, [`debug`] serves its HTTP debug port, and
//! [`simulate`] runs a server tree and its lease clients on a virtual
//! clock.
//!
//! The client side: a [`Client`] keeps leases fresh, one per [`Resource`];
//! [`RateResource`], [`GaugeResource`] and [`LeaseLayer`] enforce them.
//!
//! Time: the server stamps leases with Unix time, which other machines
//! read, so it takes a [`WallClock`]: the limiter's
//! [`SystemClock`](crate::SystemClock) (the default) and
//! [`ManualClock`](crate::ManualClock) (in tests) read as Unix time too.
//!
//! ```
//! use tollgate::doorman::{
//!     CapacitySource, Client, ResourceOptions, Server, ServerConfig, SingleElection,
//! };
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let config = ServerConfig::from_yaml(
//!     "resources:\n- identifier_glob: '*'\n  capacity: 100\n  algorithm: {kind: FAIR_SHARE, lease_length: 60, refresh_interval: 5, learning_mode_duration: 0}\n",
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
// Links to modules a feature leaves out point at the crate's feature table.
#![cfg_attr(not(feature = "server"), doc = "[`Server`]: crate#crate-features")]
#![cfg_attr(
    not(feature = "server"),
    doc = "[`Server::builder`]: crate#crate-features"
)]
#![cfg_attr(
    not(feature = "server"),
    doc = "[`ServerConfig`]: crate#crate-features"
)]
#![cfg_attr(
    not(feature = "server"),
    doc = "[`SingleElection`]: crate#crate-features"
)]
#![cfg_attr(not(feature = "etcd"), doc = "[`EtcdElection`]: crate#crate-features")]
#![cfg_attr(not(feature = "server"), doc = "[`Parent`]: crate#crate-features")]
#![cfg_attr(not(feature = "server"), doc = "[`reload`]: crate#crate-features")]
#![cfg_attr(not(feature = "server"), doc = "[`debug`]: crate#crate-features")]
#![cfg_attr(not(feature = "simulate"), doc = "[`simulate`]: crate#crate-features")]
#![cfg_attr(not(feature = "client"), doc = "[`Client`]: crate#crate-features")]
#![cfg_attr(not(feature = "client"), doc = "[`Resource`]: crate#crate-features")]
#![cfg_attr(
    not(feature = "client"),
    doc = "[`RateResource`]: crate#crate-features"
)]
#![cfg_attr(
    not(feature = "client"),
    doc = "[`GaugeResource`]: crate#crate-features"
)]
#![cfg_attr(not(feature = "client"), doc = "[`LeaseLayer`]: crate#crate-features")]

// Only the server decides; the client build keeps the vocabulary that
// the lease types name.
#[cfg_attr(not(feature = "server"), allow(dead_code, unreachable_pub))]
mod algorithm;
#[cfg(feature = "client")]
mod client;
mod clock;
#[cfg(feature = "server")]
mod config;
#[cfg(feature = "server")]
pub mod debug;
mod election;
mod error;
#[cfg(feature = "server")]
mod glob;
// The client needs only its instants.
#[cfg_attr(not(feature = "server"), allow(dead_code, unreachable_pub))]
mod lease;
// The metrics and the transport serve both the client and the server; with
// only one of them built, the other's half goes unused.
#[cfg_attr(
    not(all(feature = "client", feature = "server")),
    allow(dead_code, unreachable_pub)
)]
mod metrics;
#[doc(hidden)]
pub mod pb;
#[cfg(feature = "server")]
pub mod reload;
#[cfg(feature = "server")]
mod server;
// The lease client and the parent poller share it; with only one of them
// built, part of it goes unused.
#[cfg_attr(
    not(all(feature = "client", feature = "server")),
    allow(dead_code, unreachable_pub)
)]
mod session;
#[cfg(feature = "simulate")]
pub mod simulate;
#[cfg(feature = "server")]
mod store;
#[cfg_attr(not(all(feature = "client", feature = "server")), allow(dead_code))]
mod transport;

#[cfg(feature = "server")]
pub use crate::service::ServerLimits;
pub use crate::service::{ClientTls, ServeError, ServerTls, TlsError};
#[cfg(feature = "client")]
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
pub use election::single::SingleElection;
pub use election::{Election, Mastership};
#[cfg(feature = "server")]
pub use lease::ClientLease;
#[cfg(feature = "etcd")]
pub use reload::EtcdConfigSource;
#[cfg(feature = "server")]
pub use server::{Parent, ResourceStatus, Server, ServerBuilder};

/// What the `doorman_decide` benchmark measures: one resource's lease
/// store and algorithms, below the server. Not part of the API.
#[cfg(feature = "server")]
#[doc(hidden)]
pub mod bench {
    pub use super::algorithm::{AlgorithmConfig, Kind, Request};
    pub use super::store::Resource;
}
