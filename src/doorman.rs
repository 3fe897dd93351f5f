//! The Doorman capacity lease protocol: servers that divide a resource's
//! capacity between the clients that ask for it.
//!
//! A client holds, per resource, a *lease*: a capacity it may use until the
//! lease expires, and an interval after which it should ask again. On every
//! request the server records what the client *wants*, drops expired leases,
//! and lets the resource's [`algorithm`] decide what the client *gets*. The
//! per-resource state, with the sums and indices that make one decision
//! cost `O(log n)`, lives in [`store`].
//!
//! The server side: [`config`] (templates from YAML), [`server`] (the gRPC
//! service and its state), [`election`] (who is master), [`debug`] (the HTTP
//! debug port and its [`metrics`]), [`reload`] (configuration hot reload);
//! [`simulate`] runs a server tree and its lease clients on a virtual clock.
//! The client side: [`client`] (leases kept fresh and fed to limiters).
//!
// Links to modules a feature leaves out point at the crate's feature table.
#![cfg_attr(not(feature = "client"), doc = "[`client`]: crate#crate-features")]
#![cfg_attr(not(feature = "server"), doc = "[`config`]: crate#crate-features")]
#![cfg_attr(not(feature = "server"), doc = "[`server`]: crate#crate-features")]
#![cfg_attr(not(feature = "server"), doc = "[`debug`]: crate#crate-features")]
#![cfg_attr(not(feature = "server"), doc = "[`reload`]: crate#crate-features")]
#![cfg_attr(not(feature = "simulate"), doc = "[`simulate`]: crate#crate-features")]

pub mod algorithm;
#[cfg(feature = "client")]
pub mod client;
pub mod clock;
#[cfg(feature = "server")]
pub mod config;
#[cfg(feature = "server")]
pub mod debug;
pub mod election;
pub mod error;
#[cfg(feature = "server")]
pub mod glob;
pub mod lease;
// The metrics and the transport serve both the client and the server; with
// only one of them built, the other's half goes unused.
#[cfg_attr(not(all(feature = "client", feature = "server")), allow(dead_code))]
pub mod metrics;
#[doc(hidden)]
pub mod pb;
#[cfg(feature = "server")]
pub mod reload;
#[cfg(feature = "server")]
pub mod server;
// The lease client and the parent poller share it; with only one of them
// built, part of it goes unused.
#[cfg_attr(
    not(all(feature = "client", feature = "server")),
    allow(dead_code, unreachable_pub)
)]
mod session;
#[cfg(feature = "simulate")]
pub mod simulate;
pub mod store;
#[cfg_attr(not(all(feature = "client", feature = "server")), allow(dead_code))]
mod transport;
