//! The capacity server: the `doorman.Capacity` gRPC service and its state.
//!
//! [`Server`] is the facade; each concept has its own file:
//!
//! * `state.rs`: what a server holds, defined once for the files below;
//! * `wire.rs`: the edge, wire requests in and responses out, with the
//!   request checks ([`Limits`]);
//! * `mastership.rs`: the view of the election, and forgetting leases when
//!   it changes;
//! * `resources.rs`: the resource map, reloads, the sweeper, status;
//! * `decisions.rs`: turning a checked request into leases, learning mode;
//!   `hold.rs` for what a cut subtree still holds;
//! * `tree.rs` and `parent.rs`: an intermediate server's link to its parent;
//! * `grpc.rs`: the tonic service, served under the service kit's
//!   [`ServerLimits`].
//!
//! # Implementation notes
//!
//! Lock order: election view, then the resource map, then one entry.

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use tracing::debug;

use super::clock::WallClock;
use super::config::Config;
use super::election::{Election, Mastership};
use super::error::RequestError;
use super::metrics::Metrics;
use super::pb;
use super::transport::{Grpc, Transport};
use crate::service::{Readiness, RwLockUnpoisoned, ServeError, ServerLimits, ServerTls};
use state::{Inner, Snapshot, View, WeakServer};

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

pub use parent::Parent;
pub use resources::ResourceStatus;
pub use state::Server;
pub use wire::Limits;

impl Server {
    /// A server with `config`, following `election`, reading time from
    /// `clock`.
    ///
    /// Call [`Server::spawn_background`] to sweep expired leases, and
    /// [`Server::serve`] to answer gRPC.
    pub fn new(config: Config, election: &dyn Election, clock: Arc<dyn WallClock>) -> Server {
        Server::with_limits(config, election, clock, Limits::default())
    }

    /// As [`Server::new`], with request limits.
    pub fn with_limits(
        config: Config,
        election: &dyn Election,
        clock: Arc<dyn WallClock>,
        limits: Limits,
    ) -> Server {
        Server::build(config, election, clock, limits, None)
    }

    /// An intermediate server: its resources' capacity is what `parent`
    /// grants it (0 until the first grant), and its leases never outlive
    /// the parent's. [`Server::spawn_background`] also starts polling the
    /// parent.
    pub fn with_parent(
        config: Config,
        election: &dyn Election,
        clock: Arc<dyn WallClock>,
        parent: Parent,
    ) -> Server {
        let transport = Arc::new(Grpc::new(parent::DEADLINE));
        Server::with_parent_via(config, election, clock, parent, transport)
    }

    /// As [`Server::with_parent`], dialling the parent over TLS as `tls`
    /// says (an address without a scheme as `https://`).
    ///
    /// # Errors
    ///
    /// [`TlsError`](crate::service::TlsError) naming a file that cannot be read
    /// or holds no PEM certificate or key.
    pub fn with_parent_tls(
        config: Config,
        election: &dyn Election,
        clock: Arc<dyn WallClock>,
        parent: Parent,
        tls: &crate::service::ClientTls,
    ) -> Result<Server, crate::service::TlsError> {
        let transport = Arc::new(Grpc::with_tls(parent::DEADLINE, Some(tls.load()?)));
        Ok(Server::with_parent_via(
            config, election, clock, parent, transport,
        ))
    }

    /// As [`Server::with_parent`], reaching the parent through `transport`.
    pub(crate) fn with_parent_via(
        config: Config,
        election: &dyn Election,
        clock: Arc<dyn WallClock>,
        parent: Parent,
        transport: Arc<dyn Transport>,
    ) -> Server {
        Server::build(
            config,
            election,
            clock,
            Limits::default(),
            Some(parent::Upstream::new(parent, transport)),
        )
    }

    fn build(
        config: Config,
        election: &dyn Election,
        clock: Arc<dyn WallClock>,
        limits: Limits,
        upstream: Option<parent::Upstream>,
    ) -> Server {
        let server = Server {
            inner: Arc::new(Inner {
                config: RwLock::new(Arc::new(Snapshot {
                    config,
                    generation: 0,
                })),
                resources: RwLock::new(HashMap::new()),
                view: RwLock::new(View {
                    rx: election.subscribe(),
                    current: Mastership::default(),
                    since: None,
                }),
                clock,
                limits,
                metrics: Metrics::new(),
                upstream,
                readiness: election.readiness(),
            }),
        };
        {
            let mut view = server.inner.view.write_unpoisoned();
            let m = view.rx.borrow_and_update().clone();
            server.apply(&mut view, m);
        }
        server
    }

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

    /// Handles a GetCapacity request from the wire.
    pub(crate) fn get_capacity(
        &self,
        req: pb::GetCapacityRequest,
    ) -> Result<pb::GetCapacityResponse, RequestError> {
        self.capacity(|rules| wire::capacity_request(rules, req))
            .map(wire::capacity_response)
    }

    /// Handles a GetServerCapacity request from the wire.
    pub(crate) fn get_server_capacity(
        &self,
        req: pb::GetServerCapacityRequest,
    ) -> Result<pb::GetServerCapacityResponse, RequestError> {
        self.server_capacity(|rules| wire::server_capacity_request(rules, req))
            .map(wire::server_capacity_response)
    }

    /// Handles a ReleaseCapacity request from the wire.
    pub(crate) fn release_capacity(
        &self,
        req: pb::ReleaseCapacityRequest,
    ) -> Result<pb::ReleaseCapacityResponse, RequestError> {
        self.release(|limits| wire::release_request(limits, req))
            .map(wire::release_response)
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

    /// Serves gRPC on `listener` with the default [`ServerLimits`] until
    /// `shutdown` completes.
    ///
    /// # Errors
    ///
    /// A transport error from tonic.
    pub async fn serve(
        self,
        listener: tokio::net::TcpListener,
        shutdown: impl Future<Output = ()>,
    ) -> Result<(), tonic::transport::Error> {
        self.serve_with(listener, ServerLimits::default(), shutdown)
            .await
    }

    /// Serves gRPC on `listener` with `limits` until `shutdown` completes,
    /// then drains in-flight RPCs for at most `limits.drain_timeout`.
    ///
    /// # Errors
    ///
    /// A transport error from tonic.
    pub async fn serve_with(
        self,
        listener: tokio::net::TcpListener,
        limits: ServerLimits,
        shutdown: impl Future<Output = ()>,
    ) -> Result<(), tonic::transport::Error> {
        let service = pb::capacity_server::CapacityServer::new(grpc::Service::new(self))
            .max_decoding_message_size(limits.max_message_bytes);
        let router = limits.builder().add_service(service);
        limits.serve(router, listener, shutdown).await
    }

    /// As [`Server::serve_with`], over TLS as `tls` says; the files are
    /// read before anything is served.
    ///
    /// # Errors
    ///
    /// [`ServeError::Tls`] when the TLS files cannot be used, else a
    /// transport error from tonic.
    pub async fn serve_with_tls(
        self,
        listener: tokio::net::TcpListener,
        limits: ServerLimits,
        tls: &ServerTls,
        shutdown: impl Future<Output = ()>,
    ) -> Result<(), ServeError> {
        let service = pb::capacity_server::CapacityServer::new(grpc::Service::new(self))
            .max_decoding_message_size(limits.max_message_bytes);
        let router = limits.tls_builder(tls)?.add_service(service);
        Ok(limits.serve(router, listener, shutdown).await?)
    }
}
