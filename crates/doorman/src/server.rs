//! The capacity server: an [`Engine`] behind the `doorman.Capacity` gRPC
//! service, following an election.
//!
//! [`Server`] is the face; every method of it is in this file. It holds
//! the engine (which decides), the view of the election (which says
//! whether and since when this server decides), an intermediate server's
//! link to its parent, the clock and the serving options. Around it:
//!
//! * `builder.rs`: [`ServerBuilder`], the one way to make a server;
//! * `grpc.rs`: the gRPC edge, served on the service kit's lean
//!   [`GrpcServer`] under its [`ServerLimits`](tollgate_service::ServerLimits),
//!   or as a tonic service ([`CapacityService`]) in a router of one's own;
//! * `wire.rs`: wire requests in and responses out, with the request
//!   checks (the limits set on [`ServerBuilder`]);
//! * `mastership.rs`: the view of the election, and what changes when it
//!   changes;
//! * `parent.rs`: an intermediate server's link to its parent;
//! * `standalone.rs`: [`Standalone`], a whole server process put together
//!   from plain options, as `tollgate serve` runs it.
//!
//! A GetCapacity goes `grpc.rs` (decode) -> `server.rs`
//! ([`Server::get_capacity`]: the term, then `wire.rs` checks) ->
//! `engine.rs` (the resource's entry and learning mode) -> `store.rs`
//! (the leases) -> `algorithm.rs` (the share), and its answer back up the
//! same way.
//!
//! # Implementation notes
//!
//! Lock order: election view, then the engine's resource map, then one
//! resource.

use std::future::Future;
use std::sync::{Arc, RwLock, Weak};
use std::time::Duration;

use tracing::{debug, info};

use crate::clock::WallClock;
use crate::election::Mastership;
use crate::engine::{Began, Engine, ResourceStatus, Snapshot, Upstream};
use crate::error::RequestError;
use crate::lease::{Answer, ClientLease, ServerResourceRequest, Timestamp};
use crate::metrics::Metrics;
use crate::{pb, ServerConfig};
use mastership::View;
use parent::ParentLink;
use tollgate_service::{rustls, GrpcServer, Readiness, RwLockUnpoisoned, ServerLimits};
use wire::{RequestLimits, Rules};

mod builder;
mod grpc;
mod mastership;
mod parent;
#[cfg(feature = "etcd")]
mod standalone;
#[cfg(test)]
pub(crate) mod testing;
mod wire;

pub use builder::ServerBuilder;
use grpc::CapacityService;
pub use parent::Parent;
#[cfg(feature = "etcd")]
pub use standalone::Standalone;

/// The lease server. Cheap to clone: clones share state.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use tollgate_doorman::{Server, ServerConfig, SingleElection};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
/// let election = SingleElection::new(Some(listener.local_addr()?.to_string()));
/// let server = Server::builder(ServerConfig::builtin())
///     .election(&election)
///     .build();
/// server.spawn_background(Duration::from_secs(5));
///
/// let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
/// let serving = tokio::spawn(server.clone().serve(listener, async {
///     let _ = stopped.await;
/// }));
/// assert!(server.current_mastership().is_master);
/// stop.send(()).unwrap();
/// serving.await??;
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct Server {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    /// What decides.
    engine: Engine,
    /// The view of the election.
    view: RwLock<View>,
    clock: Arc<dyn WallClock>,
    limits: RequestLimits,
    metrics: Metrics,
    /// Set on an intermediate server: its parent and what it granted.
    parent: Option<ParentLink>,
    /// How [`Server::serve`] serves.
    serving: Serving,
    /// Not ready while the election cannot reach its store.
    readiness: Readiness,
}

/// What [`Server::serve`] serves under.
#[derive(Debug, Clone)]
struct Serving {
    limits: ServerLimits,
    tls: Option<Arc<rustls::ServerConfig>>,
    /// Threads of their own for the connections, if set.
    threads: Option<usize>,
}

/// What a master decides a request in: the term (learning mode runs from
/// its start) and the configuration the request is checked against and
/// decided under.
#[derive(Debug)]
struct Term {
    /// When mastership was won, and the term's bounds.
    since: Began,
    /// The configuration in force when the request came.
    snapshot: Arc<Snapshot>,
}

impl Term {
    /// The rules a request is checked against in this term.
    fn rules<'a>(&'a self, limits: &'a RequestLimits) -> Rules<'a> {
        Rules {
            limits,
            config: &self.snapshot.config,
        }
    }
}

impl Server {
    /// A builder for a server with `config`.
    pub fn builder<'a>(config: ServerConfig) -> ServerBuilder<'a> {
        ServerBuilder::new(config)
    }

    /// Puts a server together from what [`ServerBuilder::build`] made, in
    /// line with the election's current mastership.
    fn assemble(
        engine: Engine,
        view: View,
        clock: Arc<dyn WallClock>,
        limits: RequestLimits,
        parent: Option<ParentLink>,
        serving: Serving,
        readiness: Readiness,
    ) -> Server {
        let server = Server {
            inner: Arc::new(Inner {
                engine,
                view: RwLock::new(view),
                clock,
                limits,
                metrics: Metrics::new(),
                parent,
                serving,
                readiness,
            }),
        };
        {
            let mut view = server.inner.view.write_unpoisoned();
            let m = view.rx.borrow_and_update().clone();
            view.apply(m, &server.inner.engine, server.inner.clock.now());
        }
        server
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

    /// Handles a GetCapacity request from the wire: check, decide, encode.
    pub(crate) fn get_capacity(
        &self,
        req: pb::GetCapacityRequest,
    ) -> Result<pb::GetCapacityResponse, RequestError> {
        let term = match self.term() {
            Ok(term) => term,
            Err(master) => return Ok(wire::capacity_response(Answer::NotMaster(master))),
        };
        let req = wire::capacity_request(&term.rules(&self.inner.limits), req)?;
        let grants = self.inner.engine.capacity(
            req,
            self.inner.clock.now(),
            term.since,
            &term.snapshot,
            self.upstream(),
        )?;
        Ok(wire::capacity_response(Answer::Done(grants)))
    }

    /// Handles a GetServerCapacity request from the wire: check, decide,
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
        let grants = self.inner.engine.server_capacity(
            req,
            self.inner.clock.now(),
            term.since,
            &term.snapshot,
            self.upstream(),
        )?;
        Ok(wire::server_capacity_response(Answer::Done(grants)))
    }

    /// Handles a ReleaseCapacity request from the wire: check, release,
    /// encode.
    pub(crate) fn release_capacity(
        &self,
        req: pb::ReleaseCapacityRequest,
    ) -> Result<pb::ReleaseCapacityResponse, RequestError> {
        if let Err(master) = self.mastership() {
            return Ok(wire::release_response(Answer::NotMaster(master)));
        }
        let req = wire::release_request(&self.inner.limits, req)?;
        self.inner.engine.release(&req);
        Ok(wire::release_response(Answer::Done(())))
    }

    /// Handles a Discovery request from the wire.
    pub(crate) fn discovery(&self) -> pb::DiscoveryResponse {
        wire::discovery_response(&self.current_mastership())
    }

    /// Replaces the configuration, keeping every lease. Resources rebind to
    /// the new templates at once: a lease that would outlive the new lease
    /// length from now is cut to it, and a resource that no longer matches
    /// any template loses its leases (and is dropped by the next sweep).
    pub fn reload(&self, config: ServerConfig) {
        let generation = self.inner.engine.reload(config, self.inner.clock.now());
        info!(generation, "configuration reloaded");
        self.inner.metrics.reloads.inc();
    }

    /// Counts a new configuration that was refused, for
    /// `doorman_server_config_reload_failures_total`.
    pub(crate) fn count_refused_reload(&self) {
        self.inner.metrics.reload_failures.inc();
    }

    /// Drops expired leases everywhere and removes resources left without
    /// leases. Returns how many resources were removed.
    pub fn sweep(&self) -> usize {
        self.inner.engine.sweep(self.inner.clock.now())
    }

    /// A snapshot of every resource, sorted by id.
    pub fn status(&self) -> Vec<ResourceStatus> {
        let since = self.inner.view.read_unpoisoned().since;
        let now = self.inner.clock.now();
        self.inner.engine.status(now, since, self.upstream())
    }

    /// Every metric in Prometheus' text format, as `/metrics` serves it
    /// (the crate's `metrics` module lists them): the request and reload
    /// metrics, the refused connections, mastership, then one gauge per
    /// resource for its capacity, its sum of `has`, learning mode, its
    /// subclients and its sum of `wants`. Costs one lock per resource and
    /// memory of the order of the output.
    pub fn metrics_text(&self) -> String {
        let since = self.inner.view.read_unpoisoned().since;
        let now = self.inner.clock.now();
        let gauges = self.inner.engine.gauges(now, since, self.upstream());
        let metrics = &self.inner.metrics;
        let mut out = metrics.encode();
        metrics.write_state(&mut out, self.current_mastership().is_master);
        gauges.write(&mut out);
        out
    }

    /// The leases on resource `id`, sorted by client, or `None` for a
    /// resource the server does not know.
    pub fn leases(&self, id: &str) -> Option<Vec<(String, ClientLease)>> {
        self.inner.engine.leases(id)
    }

    /// Whether this server is the master, and the master's address.
    pub fn current_mastership(&self) -> Mastership {
        let _ = self.mastership();
        self.inner.view.read_unpoisoned().current.clone()
    }

    /// Spawns the background sweeper (every `interval`), a task that
    /// follows mastership changes, so learning mode starts when mastership
    /// is won even if no request arrives, and on an intermediate server the
    /// poller that asks its parent for capacity. All stop when the server
    /// is dropped.
    pub fn spawn_background(&self, interval: Duration) {
        if self.inner.parent.is_some() {
            tokio::spawn(parent::poll(self.downgrade()));
        }
        let weak = self.downgrade();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(interval);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                let Some(server) = weak.upgrade() else { return };
                let removed = server.sweep();
                if removed > 0 {
                    debug!(removed, "swept idle resources");
                }
            }
        });
        let weak = self.downgrade();
        let mut rx = self.inner.view.read_unpoisoned().rx.clone();
        tokio::spawn(async move {
            while rx.changed().await.is_ok() {
                let Some(server) = weak.upgrade() else { return };
                let _ = server.mastership();
            }
        });
    }

    /// Serves gRPC on `listener`, under the builder's [`ServerLimits`] and
    /// over its TLS if it has one, until `shutdown` completes; then drains
    /// in-flight RPCs for at most [`ServerLimits::drain_timeout`]. The
    /// transport is the service kit's lean [`GrpcServer`]: see
    /// [`GrpcServer::serve`] for what it does with each connection.
    ///
    /// [`ServerLimits::drain_timeout`]: tollgate_service::ServerLimits::drain_timeout
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
            .count_refused(
                refused.with_label_values(&["max_connections"]),
                refused.with_label_values(&["tls_handshake"]),
            );
        if let Some(tls) = tls {
            server = server.tls_config(tls);
        }
        if let Some(threads) = threads {
            server = server.threads(threads);
        }
        server.serve(listener, shutdown).await
    }

    /// This server as a tonic service, to mount in a tonic router of
    /// one's own beside other services. It answers as [`Server::serve`]
    /// does, but under the router's transport settings rather than the
    /// builder's [`ServerLimits`] and TLS.
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate_doorman::{Server, ServerConfig};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let server = Server::builder(ServerConfig::builtin()).build();
    /// let router = tonic::transport::Server::builder().add_service(server.into_tonic());
    /// let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    /// let incoming = tonic::transport::server::TcpIncoming::from(listener);
    /// router.serve_with_incoming_shutdown(incoming, async {}).await?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn into_tonic(
        self,
    ) -> impl tower::Service<
        tonic::codegen::http::Request<tonic::body::Body>,
        Response = tonic::codegen::http::Response<tonic::body::Body>,
        Error = std::convert::Infallible,
        Future: Send + 'static,
    > + tonic::server::NamedService
           + Clone
           + Send
           + Sync
           + 'static {
        let max = self.inner.serving.limits.max_message_bytes;
        pb::capacity_server::CapacityServer::new(CapacityService::new(self))
            .max_decoding_message_size(max)
    }

    /// The term a request is decided in, on the master; else
    /// `Err(mastership)` to send back. A follower redirects whatever it is
    /// sent, valid or not, and changes nothing.
    fn term(&self) -> Result<Term, Mastership> {
        let since = self.mastership()?;
        Ok(Term {
            since,
            snapshot: self.inner.engine.snapshot(),
        })
    }

    /// The current mastership, after bringing the server's state in line
    /// with it: `Ok(the term)` on the master, else `Err(mastership)` to
    /// send back.
    ///
    /// Every new value the election publishes counts: one with `is_master`
    /// starts a new term (leases forgotten unless kept, learning mode from
    /// now), even if the server was master before, since it may have lost
    /// and regained mastership in between.
    fn mastership(&self) -> Result<Began, Mastership> {
        {
            let view = self.inner.view.read_unpoisoned();
            if !view.rx.has_changed().unwrap_or(false) {
                return view.answer();
            }
        }
        let mut view = self.inner.view.write_unpoisoned();
        if view.rx.has_changed().unwrap_or(false) {
            let m = view.rx.borrow_and_update().clone();
            view.apply(m, &self.inner.engine, self.inner.clock.now());
        }
        view.answer()
    }

    /// On an intermediate server, its link to its parent.
    fn upstream_link(&self) -> Option<&ParentLink> {
        self.inner.parent.as_ref()
    }

    /// On an intermediate server, what its parent granted.
    fn upstream(&self) -> Option<&dyn Upstream> {
        self.inner.parent.as_ref().map(|p| p as &dyn Upstream)
    }

    /// The time on the server's clock.
    fn now(&self) -> Timestamp {
        self.inner.clock.now()
    }

    /// What to ask the parent for at `now` (see [`ParentLink::requests`]).
    fn upstream_requests(&self, link: &ParentLink, now: Timestamp) -> Vec<ServerResourceRequest> {
        let since = self.inner.view.read_unpoisoned().since;
        let reports = self.inner.engine.reports(now, since);
        let engine = &self.inner.engine;
        link.requests(now, since, reports, |id, since| {
            engine.learning_by_template(id, now, since)
        })
    }

    /// A handle for the server's own background tasks, which does not keep
    /// it alive.
    fn downgrade(&self) -> WeakServer {
        WeakServer(Arc::downgrade(&self.inner))
    }
}

/// A server that its own background tasks hold without keeping it alive.
#[derive(Debug, Clone)]
struct WeakServer(Weak<Inner>);

impl WeakServer {
    /// The server, unless it is gone.
    fn upgrade(&self) -> Option<Server> {
        self.0.upgrade().map(|inner| Server { inner })
    }
}
