//! The capacity server: the `doorman.Capacity` gRPC service and its state.
//!
//! [`Server`] is the facade; each concept has its own file:
//!
//! * `state.rs`: what a server holds, defined once for the files below;
//! * `builder.rs`: [`ServerBuilder`], the one way to make a server;
//! * `wire.rs`: the edge, wire requests in and responses out, with the
//!   request checks (the limits set on [`ServerBuilder`]);
//! * `mastership.rs`: the view of the election, and forgetting leases when
//!   it changes;
//! * `resources.rs`: the resource map, reloads, the sweeper, status;
//! * `decisions.rs`: turning a checked request into leases, learning mode;
//!   `hold.rs` for what a cut subtree still holds;
//! * `tree.rs` and `parent.rs`: an intermediate server's link to its parent;
//! * `grpc.rs`: the gRPC edge, served on the service kit's lean
//!   [`GrpcServer`](tollgate_service::GrpcServer) under its
//!   [`ServerLimits`](tollgate_service::ServerLimits), or as a tonic
//!   service ([`CapacityService`]) in a router of one's own.
//!
//! # Implementation notes
//!
//! Lock order: election view, then the resource map, then one entry.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tracing::debug;

use super::error::RequestError;
use super::lease::Answer;
use super::metrics::Metrics;
use super::pb;
use state::{Serving, WeakServer};
use tollgate_service::{GrpcServer, Readiness, RwLockUnpoisoned};

mod builder;
mod decisions;
mod grpc;
mod hold;
mod mastership;
mod parent;
mod resources;
mod state;
#[cfg(test)]
mod testing;
mod tree;
mod wire;

pub use builder::ServerBuilder;
pub use grpc::CapacityService;
pub use parent::Parent;
pub use resources::ResourceStatus;
pub use state::Server;

impl Server {
    /// On an intermediate server, its link to its parent.
    fn upstream_link(&self) -> Option<&parent::Upstream> {
        self.inner.upstream.as_ref()
    }

    /// The metrics this server records.
    pub fn metrics(&self) -> &Metrics {
        &self.inner.metrics
    }

    /// Whether this server can do its work now: not while its election
    /// (or its configuration watch) cannot reach etcd.
    pub fn readiness(&self) -> &Readiness {
        &self.inner.readiness
    }

    /// Handles a GetCapacity request from the wire: decode, decide, encode.
    pub(crate) fn get_capacity(
        &self,
        req: pb::GetCapacityRequest,
    ) -> Result<pb::GetCapacityResponse, RequestError> {
        let term = match self.term() {
            Ok(term) => term,
            Err(master) => return Ok(wire::capacity_response(Answer::NotMaster(master))),
        };
        let req = wire::capacity_request(&term.rules(&self.inner.limits), req)?;
        let grants = self.capacity(req, &term)?;
        Ok(wire::capacity_response(Answer::Done(grants)))
    }

    /// Handles a GetServerCapacity request from the wire: decode, decide,
    /// encode.
    pub(crate) fn get_server_capacity(
        &self,
        req: pb::GetServerCapacityRequest,
    ) -> Result<pb::GetServerCapacityResponse, RequestError> {
        let term = match self.term() {
            Ok(term) => term,
            Err(master) => return Ok(wire::server_capacity_response(Answer::NotMaster(master))),
        };
        let req = wire::server_capacity_request(&term.rules(&self.inner.limits), req)?;
        let grants = self.server_capacity(req, &term)?;
        Ok(wire::server_capacity_response(Answer::Done(grants)))
    }

    /// Handles a ReleaseCapacity request from the wire: decode, release,
    /// encode.
    pub(crate) fn release_capacity(
        &self,
        req: pb::ReleaseCapacityRequest,
    ) -> Result<pb::ReleaseCapacityResponse, RequestError> {
        if let Err(master) = self.mastership() {
            return Ok(wire::release_response(Answer::NotMaster(master)));
        }
        let req = wire::release_request(&self.inner.limits, req)?;
        self.release(&req);
        Ok(wire::release_response(Answer::Done(())))
    }

    /// Handles a Discovery request from the wire.
    pub(crate) fn discovery(&self) -> pb::DiscoveryResponse {
        wire::discovery_response(&self.current_mastership())
    }

    /// Spawns the background sweeper (every `interval`), a task that
    /// follows mastership changes, so learning mode starts when mastership
    /// is won even if no request arrives, and on an intermediate server the
    /// poller that asks its parent for capacity. All stop when the server
    /// is dropped.
    pub fn spawn_background(&self, interval: Duration) {
        if self.inner.upstream.is_some() {
            tokio::spawn(tree::poll(WeakServer(Arc::downgrade(&self.inner))));
        }
        let weak = Arc::downgrade(&self.inner);
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(interval);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                let Some(inner) = weak.upgrade() else { return };
                let removed = Server { inner }.sweep();
                if removed > 0 {
                    debug!(removed, "swept idle resources");
                }
            }
        });
        let weak = Arc::downgrade(&self.inner);
        let mut rx = self.inner.view.read_unpoisoned().rx.clone();
        tokio::spawn(async move {
            while rx.changed().await.is_ok() {
                let Some(inner) = weak.upgrade() else { return };
                let _ = Server { inner }.mastership();
            }
        });
    }

    /// Serves gRPC on `listener`, under the builder's [`ServerLimits`] and
    /// over its TLS if it has one, until `shutdown` completes; then drains
    /// in-flight RPCs for at most [`ServerLimits::drain_timeout`]. The
    /// transport is the service kit's lean [`GrpcServer`]: see
    /// [`GrpcServer::serve`] for what it does with each connection.
    ///
    /// [`ServerLimits`]: tollgate_service::ServerLimits
    /// [`ServerLimits::drain_timeout`]: tollgate_service::ServerLimits::drain_timeout
    /// [`GrpcServer`]: tollgate_service::GrpcServer
    /// [`GrpcServer::serve`]: tollgate_service::GrpcServer::serve
    ///
    /// # Errors
    ///
    /// An error starting a thread's runtime (see
    /// [`ServerBuilder::threads`]).
    ///
    /// # Cancel safety
    ///
    /// Dropping the future stops accepting and closes every connection.
    pub async fn serve(
        self,
        listener: tokio::net::TcpListener,
        shutdown: impl Future<Output = ()>,
    ) -> std::io::Result<()> {
        let Serving {
            limits,
            tls,
            threads,
        } = self.inner.serving.clone();
        let refused = self.inner.metrics.refused.clone();
        let mut server = GrpcServer::new(Arc::new(grpc::Lean::new(self)))
            .limits(limits)
            .count_refused(&refused);
        if let Some(tls) = tls {
            server = server.tls_config(tls);
        }
        if let Some(threads) = threads {
            server = server.threads(threads);
        }
        server.serve(listener, shutdown).await
    }
}
