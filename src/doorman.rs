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

pub mod algorithm;
pub mod client;
pub mod clock;
pub mod config;
pub mod debug;
pub mod election;
pub mod error;
pub mod glob;
pub mod metrics;
#[doc(hidden)]
pub mod pb;
pub mod reload;
pub mod server;
mod session;
pub mod simulate;
pub mod store;
pub mod tls;
mod transport;
