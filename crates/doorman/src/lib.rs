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
//! [`SystemClock`](tollgate::SystemClock) (the default) and
//! [`ManualClock`](tollgate::ManualClock) (in tests) read as Unix time too.
//!
//! ```
//! use tollgate_doorman::{
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
//!
//! # Features
//!
//! | feature    | default | what it builds |
//! |------------|---------|----------------|
//! | `etcd`     | on      | [`EtcdElection`]: master election among several servers on etcd v3, and a configuration kept in etcd ([`reload`]) |
//! | `simulate` | on      | [`simulate`]: a server tree and its lease clients on a virtual clock (the only user of tokio's `test-util`) |
//!
#![cfg_attr(not(feature = "etcd"), doc = "[`EtcdElection`]: crate#features")]
#![cfg_attr(not(feature = "simulate"), doc = "[`simulate`]: crate#features")]

mod algorithm;
mod client;
mod clock;
mod config;
pub mod debug;
mod election;
mod error;
mod glob;
mod lease;
mod metrics;
#[doc(hidden)]
pub mod pb;
pub mod reload;
mod server;
mod session;
#[cfg(feature = "simulate")]
pub mod simulate;
mod store;
mod transport;

pub use client::{
    Backoff, Capacity, CapacitySource, Client, ClientBuildError, ClientBuilder, ClientMetrics,
    ExpiryMode, GaugeGuard, GaugeResource, Lease, LeaseLayer, Leased, ParseExpiryModeError,
    RateOptions, RateResource, Rejected, ReleaseError, Resource, ResourceError, ResourceOptions,
    SessionError, Smoothing,
};
pub use clock::WallClock;
pub use config::{ServerConfig, ServerConfigError};
#[cfg(feature = "etcd")]
pub use election::etcd::{Etcd as EtcdElection, EtcdConfig as EtcdElectionConfig};
pub use election::single::SingleElection;
pub use election::{Election, Mastership, Promise};
pub use lease::ClientLease;
#[cfg(feature = "etcd")]
pub use reload::EtcdConfigSource;
pub use server::{CapacityService, Parent, ResourceStatus, Server, ServerBuilder};
// The service kit's types that the server and client builders take,
// shown as re-exports: they are documented in `tollgate_service`.
#[doc(no_inline)]
pub use tollgate_service::{ClientTls, ServerLimits, ServerTls, TlsError};

/// What the `doorman_decide` benchmark measures: one resource's lease
/// store and algorithms, below the server. Not part of the API.
#[doc(hidden)]
pub mod bench {
    pub use super::algorithm::{AlgorithmConfig, Kind, Request};
    pub use super::store::Resource;
}
