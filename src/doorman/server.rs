//! The capacity server: the `doorman.Capacity` gRPC service and its state.
//!
//! # Implementation notes
//!
//! State is a map from resource id to an entry, each entry behind its own
//! mutex: a request locks the map (shared) only to find or insert its entries
//! and then locks one resource at a time, so requests for different resources
//! never contend. Lock order is always map, then entry; no request holds the
//! map lock while it holds an entry's.
//!
//! Each entry remembers the template it was matched to and the configuration
//! generation it came from. A reload swaps the configuration and bumps the
//! generation; the reload then rebinds every entry, one lock at a time (a
//! request that races it rebinds its entry itself), so a reload never blocks
//! requests for long and keeps the leases, cut to the new lease length when
//! that is shorter: a lease must never outlive what the configuration in
//! force allows.
//!
//! Learning mode echoes a client's `has`, capped at the resource's capacity
//! (for NO_ALGORITHM, at its wants). No lease from an earlier master can have
//! exceeded the capacity, so anything more cannot be justified; the cap is
//! per client rather than "what others leave" so that a client reporting an
//! absurd `has` cannot starve an honest one for the rest of learning mode.
//!
//! Mastership comes from an [`Election`]'s watch channel, checked on every
//! request (a shared lock and the channel's version counter on the fast
//! path). Whenever the server sees it has won mastership it forgets every
//! lease (they belong to an earlier term) and starts learning mode from that
//! instant; when it loses mastership it forgets them too and answers with
//! redirects. A background task also follows the channel, so learning mode
//! starts when mastership is won even if no request arrives.
//!
//! Lock order: election view, then the resource map, then one entry.
//!
//! A GetServerCapacity request's `has` says what the asking server's
//! subtree holds; whatever of it exceeds the new grant stays counted for
//! that server as a hold until its subtree has followed the cut, so the
//! capacity is not handed out twice (`server/hold.rs`).
//!
//! The sweeper drops expired leases and removes resources left with none.
//! Removal marks the entry `removed` under its lock while holding the map's
//! write lock, and a request that finds its entry removed looks it up again,
//! so no lease is ever stored in an entry that has left the map.

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, RwLock};
use std::time::Duration;

use tokio::sync::watch;
use tracing::{debug, info, warn};

use super::algorithm::{Kind, Request};
use super::clock::Clock;
use super::config::{Config, Template};
use super::election::{Election, Mastership};
use super::error::RequestError;
use super::metrics::{Gauges, Metrics, ResourceGauges};
use super::pb;
use super::store::{ClientLease, Resource, Timestamp};
use super::transport::{Grpc, Transport};

mod grpc;
mod hold;
mod limits;
mod parent;
#[cfg(test)]
mod testing;
mod validate;

pub use limits::{
    ConnInfo, Guarded, InFlight, InFlightLayer, LimitedRouter, LimitedServer, ServerLimits,
};
pub use parent::Parent;
pub use validate::Limits;

/// The lease server. Cheap to clone: clones share state.
///
/// # Examples
///
/// ```
/// use std::sync::Arc;
/// use std::time::Duration;
/// use tollgate::doorman::clock::SystemClock;
/// use tollgate::doorman::config::Config;
/// use tollgate::doorman::election::single::Single;
/// use tollgate::doorman::server::Server;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
/// let election = Single::new(Some(listener.local_addr()?.to_string()));
/// let server = Server::new(Config::builtin(), &election, Arc::new(SystemClock));
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
    config: RwLock<Arc<Snapshot>>,
    resources: RwLock<HashMap<String, Arc<Entry>>>,
    view: RwLock<View>,
    clock: Arc<dyn Clock>,
    limits: Limits,
    metrics: Metrics,
    /// Set on an intermediate server: its parent and what it granted.
    upstream: Option<parent::Upstream>,
}

/// The server's view of the election.
#[derive(Debug)]
struct View {
    rx: watch::Receiver<Mastership>,
    /// The last mastership seen on `rx`.
    current: Mastership,
    /// When this server last won mastership; `None` while not master.
    since: Option<Timestamp>,
}

impl View {
    fn answer(&self) -> Result<Timestamp, Mastership> {
        self.since.ok_or_else(|| self.current.clone())
    }
}

#[derive(Debug)]
struct Snapshot {
    config: Config,
    generation: u64,
}

#[derive(Debug)]
struct Entry {
    state: Mutex<EntryState>,
}

#[derive(Debug)]
struct EntryState {
    template: Arc<Template>,
    generation: u64,
    store: Resource,
    /// Each client's priority, kept only on an intermediate server (which
    /// sends its parent one band per priority); may name expired clients.
    priorities: HashMap<String, i64>,
    /// Intermediate servers that lost their state, and until when they are
    /// in learning mode here ([`EntryState::relearn`]).
    relearning: HashMap<String, Timestamp>,
    /// Set when the sweeper removed this entry from the map.
    removed: bool,
}

/// One resource as shown on the status page.
#[derive(Debug, Clone)]
pub struct ResourceStatus {
    /// The resource id.
    pub id: String,
    /// The glob of the template it matched.
    pub glob: String,
    /// The template's capacity; on an intermediate server, what the parent
    /// granted (0 while it has not or the grant expired).
    pub capacity: f64,
    /// The template's algorithm.
    pub algorithm: Kind,
    /// Sum of capacity held by unexpired leases, with what is held for
    /// servers whose grant was cut before their clients followed.
    pub sum_has: f64,
    /// Sum of capacity wanted.
    pub sum_wants: f64,
    /// Clients holding leases.
    pub clients: usize,
    /// Sum of their subclients.
    pub subclients: u64,
    /// Whether the resource is in learning mode.
    pub learning: bool,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic while holding a lock cannot leave a store half-updated in a way
    // later requests would mind more than losing the server.
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Server {
    /// A server with `config`, following `election`, reading time from
    /// `clock`.
    ///
    /// Call [`Server::spawn_background`] to sweep expired leases, and
    /// [`Server::serve`] to answer gRPC.
    pub fn new(config: Config, election: &dyn Election, clock: Arc<dyn Clock>) -> Server {
        Server::with_limits(config, election, clock, Limits::default())
    }

    /// As [`Server::new`], with request limits.
    pub fn with_limits(
        config: Config,
        election: &dyn Election,
        clock: Arc<dyn Clock>,
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
        clock: Arc<dyn Clock>,
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
    /// [`TlsError`](super::tls::TlsError) naming a file that cannot be read
    /// or holds no PEM certificate or key.
    pub fn with_parent_tls(
        config: Config,
        election: &dyn Election,
        clock: Arc<dyn Clock>,
        parent: Parent,
        tls: &super::tls::ClientTls,
    ) -> Result<Server, super::tls::TlsError> {
        let transport = Arc::new(Grpc::with_tls(parent::DEADLINE, Some(tls.load()?)));
        Ok(Server::with_parent_via(
            config, election, clock, parent, transport,
        ))
    }

    /// As [`Server::with_parent`], reaching the parent through `transport`.
    pub(crate) fn with_parent_via(
        config: Config,
        election: &dyn Election,
        clock: Arc<dyn Clock>,
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
        clock: Arc<dyn Clock>,
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
            }),
        };
        {
            let mut view = server
                .inner
                .view
                .write()
                .unwrap_or_else(PoisonError::into_inner);
            let m = view.rx.borrow_and_update().clone();
            server.apply(&mut view, m);
        }
        server
    }

    /// The metrics this server records.
    pub fn metrics(&self) -> &Metrics {
        &self.inner.metrics
    }

    /// Replaces the configuration, keeping every lease. Resources rebind to
    /// the new templates at once: a lease that would outlive the new lease
    /// length from now is cut to it, and a resource that no longer matches
    /// any template loses its leases (and is dropped by the next sweep).
    pub fn reload(&self, config: Config) {
        let mut slot = self
            .inner
            .config
            .write()
            .unwrap_or_else(PoisonError::into_inner);
        let generation = slot.generation + 1;
        let snapshot = Arc::new(Snapshot { config, generation });
        *slot = snapshot.clone();
        drop(slot);
        info!(generation, "configuration reloaded");
        // Rebind now rather than on the next request, so that a shorter
        // lease length cuts the leases from the moment of the reload.
        let now = self.inner.clock.now();
        for (id, entry) in self.entries() {
            let mut state = lock(&entry.state);
            if state.generation != snapshot.generation && state.rebind(&id, &snapshot, now).is_err()
            {
                state.store = Resource::new();
            }
        }
    }

    fn snapshot(&self) -> Arc<Snapshot> {
        self.inner
            .config
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// The current mastership, after bringing the server's state in line
    /// with it: `Ok(when mastership was won)` on the master, else
    /// `Err(mastership)` to send back.
    ///
    /// Every new value the election publishes counts: one with `is_master`
    /// starts a new term (leases forgotten, learning mode from now), even if
    /// the server was master before, since it may have lost and regained
    /// mastership in between.
    fn mastership(&self) -> Result<Timestamp, Mastership> {
        {
            let view = self
                .inner
                .view
                .read()
                .unwrap_or_else(PoisonError::into_inner);
            if !view.rx.has_changed().unwrap_or(false) {
                return view.answer();
            }
        }
        let mut view = self
            .inner
            .view
            .write()
            .unwrap_or_else(PoisonError::into_inner);
        if view.rx.has_changed().unwrap_or(false) {
            let m = view.rx.borrow_and_update().clone();
            self.apply(&mut view, m);
        }
        view.answer()
    }

    /// Moves to mastership `m`. Called with the view locked for writing.
    fn apply(&self, view: &mut View, m: Mastership) {
        let was_master = view.since.is_some();
        if m.is_master {
            view.since = Some(self.inner.clock.now());
            self.forget_all();
            info!("won mastership: learning mode starts");
        } else {
            view.since = None;
            if was_master {
                self.forget_all();
                info!(master = ?m.master_address, "lost mastership");
            }
        }
        view.current = m;
    }

    /// Drops every resource (and so every lease).
    fn forget_all(&self) {
        let mut map = self
            .inner
            .resources
            .write()
            .unwrap_or_else(PoisonError::into_inner);
        for entry in map.values() {
            lock(&entry.state).removed = true;
        }
        map.clear();
    }

    /// The entry for `id`, created (bound to its template) if needed, locked
    /// and bound to the current configuration.
    fn entry<R>(
        &self,
        id: &str,
        snapshot: &Snapshot,
        f: impl FnOnce(&mut EntryState) -> R,
    ) -> Result<R, RequestError> {
        loop {
            let existing = self
                .inner
                .resources
                .read()
                .unwrap_or_else(PoisonError::into_inner)
                .get(id)
                .cloned();
            let entry = match existing {
                Some(entry) => entry,
                None => {
                    let template = snapshot
                        .config
                        .find(id)
                        .ok_or_else(|| RequestError::UnknownResource(id.to_owned()))?;
                    let mut map = self
                        .inner
                        .resources
                        .write()
                        .unwrap_or_else(PoisonError::into_inner);
                    map.entry(id.to_owned())
                        .or_insert_with(|| {
                            debug!(resource = id, glob = template.glob.as_str(), "new resource");
                            Arc::new(Entry {
                                state: Mutex::new(EntryState {
                                    template: template.clone(),
                                    generation: snapshot.generation,
                                    store: Resource::new(),
                                    priorities: HashMap::new(),
                                    relearning: HashMap::new(),
                                    removed: false,
                                }),
                            })
                        })
                        .clone()
                }
            };
            let mut state = lock(&entry.state);
            if state.removed {
                continue;
            }
            if state.generation != snapshot.generation {
                state.rebind(id, snapshot, self.inner.clock.now())?;
            }
            return Ok(f(&mut state));
        }
    }

    /// Handles a GetCapacity request.
    pub(crate) fn get_capacity(
        &self,
        req: pb::GetCapacityRequest,
    ) -> Result<pb::GetCapacityResponse, RequestError> {
        let since = match self.mastership() {
            Ok(since) => since,
            Err(m) => {
                return Ok(pb::GetCapacityResponse {
                    response: Vec::new(),
                    mastership: Some((&m).into()),
                })
            }
        };
        let snapshot = self.snapshot();
        // Validate everything before changing anything.
        validate::get_capacity(&self.inner.limits, &snapshot.config, &req)?;
        let now = self.inner.clock.now();
        let mut response = Vec::with_capacity(req.resource.len());
        for r in &req.resource {
            let request = Request {
                client: &req.client_id,
                has: r.has.as_ref().map_or(0.0, |h| h.capacity),
                wants: r.wants,
                subclients: 1,
            };
            let (lease, safe) = self.entry(&r.resource_id, &snapshot, |state| {
                let (lease, capacity) = state.decide(
                    &request,
                    r.priority,
                    now,
                    since,
                    self.upstream(&r.resource_id),
                    None,
                );
                let safe = state.template.safe_capacity.unwrap_or_else(|| {
                    // Dynamic safe capacity: an equal share per subclient,
                    // this client included.
                    capacity / state.store.count().max(1) as f64
                });
                (lease, safe)
            })?;
            response.push(pb::ResourceResponse {
                resource_id: r.resource_id.clone(),
                gets: (&lease).into(),
                safe_capacity: Some(safe),
            });
        }
        Ok(pb::GetCapacityResponse {
            response,
            mastership: None,
        })
    }

    /// Handles a GetServerCapacity request: each resource is one client
    /// (the asking server) wanting the sum of its bands' wants on behalf of
    /// the sum of their clients.
    pub(crate) fn get_server_capacity(
        &self,
        req: pb::GetServerCapacityRequest,
    ) -> Result<pb::GetServerCapacityResponse, RequestError> {
        let since = match self.mastership() {
            Ok(since) => since,
            Err(m) => {
                return Ok(pb::GetServerCapacityResponse {
                    response: Vec::new(),
                    mastership: Some((&m).into()),
                })
            }
        };
        let snapshot = self.snapshot();
        let totals = validate::get_server_capacity(&self.inner.limits, &snapshot.config, &req)?;
        let now = self.inner.clock.now();
        let mut response = Vec::with_capacity(req.resource.len());
        for (r, &(wants, subclients)) in req.resource.iter().zip(&totals) {
            let request = Request {
                client: &req.server_id,
                has: r.has.as_ref().map_or(0.0, |h| h.capacity),
                wants,
                subclients,
            };
            // One client with one priority: the most urgent of its bands.
            let priority = r.wants.iter().map(|b| b.priority).max().unwrap_or(0);
            // Its `has` is what its subtree holds, until when at the latest.
            let subtree = Subtree {
                reports: r.has.is_some(),
                until: r.has.as_ref().map_or(Duration::ZERO, |h| {
                    Duration::from_secs(h.expiry_time.max(0) as u64)
                }),
            };
            let (lease, algorithm, safe) = self.entry(&r.resource_id, &snapshot, |state| {
                let (lease, _) = state.decide(
                    &request,
                    priority,
                    now,
                    since,
                    self.upstream(&r.resource_id),
                    Some(subtree),
                );
                let algorithm = pb::Algorithm::from(&state.template.algorithm);
                (lease, algorithm, state.template.safe_capacity)
            })?;
            response.push(pb::ServerCapacityResourceResponse {
                resource_id: r.resource_id.clone(),
                gets: (&lease).into(),
                algorithm: Some(algorithm),
                safe_capacity: safe,
            });
        }
        Ok(pb::GetServerCapacityResponse {
            response,
            mastership: None,
        })
    }

    /// Handles a ReleaseCapacity request; unknown resources are ignored.
    pub(crate) fn release_capacity(
        &self,
        req: pb::ReleaseCapacityRequest,
    ) -> Result<pb::ReleaseCapacityResponse, RequestError> {
        if let Err(m) = self.mastership() {
            return Ok(pb::ReleaseCapacityResponse {
                mastership: Some((&m).into()),
            });
        }
        validate::release_capacity(&self.inner.limits, &req)?;
        for id in req.resource_id.iter().filter(|id| !id.is_empty()) {
            let entry = self
                .inner
                .resources
                .read()
                .unwrap_or_else(PoisonError::into_inner)
                .get(id)
                .cloned();
            if let Some(entry) = entry {
                lock(&entry.state).store.release(&req.client_id);
            }
        }
        Ok(pb::ReleaseCapacityResponse { mastership: None })
    }

    /// On an intermediate server, its upstream state with the resource id.
    fn upstream<'a>(&'a self, id: &'a str) -> Option<(&'a parent::Upstream, &'a str)> {
        self.inner.upstream.as_ref().map(|u| (u, id))
    }

    pub(crate) fn discovery(&self) -> pb::DiscoveryResponse {
        let m = self.current_mastership();
        pb::DiscoveryResponse {
            mastership: (&m).into(),
            is_master: m.is_master,
        }
    }

    /// A snapshot of the resource map, so no one holds its lock while
    /// taking the per-resource locks.
    fn entries(&self) -> Vec<(String, Arc<Entry>)> {
        self.inner
            .resources
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    }

    /// Drops expired leases everywhere and removes resources left without
    /// leases. Returns how many resources were removed.
    pub fn sweep(&self) -> usize {
        let now = self.inner.clock.now();
        let snapshot = self.snapshot();
        let entries = self.entries();
        let mut idle = Vec::new();
        for (id, entry) in entries {
            let mut state = lock(&entry.state);
            if state.generation != snapshot.generation && state.rebind(&id, &snapshot, now).is_err()
            {
                state.store = Resource::new();
            }
            state.store.sweep(now);
            if state.store.is_empty() {
                idle.push(id);
            }
        }
        if idle.is_empty() {
            return 0;
        }
        let mut map = self
            .inner
            .resources
            .write()
            .unwrap_or_else(PoisonError::into_inner);
        let mut removed = 0;
        for id in idle {
            let Some(entry) = map.get(&id) else { continue };
            let mut state = lock(&entry.state);
            if state.store.is_empty() {
                state.removed = true;
                drop(state);
                map.remove(&id);
                removed += 1;
            }
        }
        // A map never shrinks by itself: give back what a burst of
        // resources left behind.
        if map.capacity() > 64 && map.len() < map.capacity() / 4 {
            map.shrink_to_fit();
        }
        drop(map);
        if removed >= TRIM_AFTER {
            release_memory();
        }
        removed
    }

    /// Spawns the background sweeper (every `interval`), a task that
    /// follows mastership changes, so learning mode starts when mastership
    /// is won even if no request arrives, and on an intermediate server the
    /// poller that asks its parent for capacity. All stop when the server
    /// is dropped.
    pub fn spawn_background(&self, interval: Duration) {
        if self.inner.upstream.is_some() {
            tokio::spawn(parent::poll(Arc::downgrade(&self.inner)));
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
        let mut rx = self
            .inner
            .view
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .rx
            .clone();
        tokio::spawn(async move {
            while rx.changed().await.is_ok() {
                let Some(inner) = weak.upgrade() else { return };
                let _ = Server { inner }.mastership();
            }
        });
    }

    /// Whether this server is the master, and the master's address.
    pub fn current_mastership(&self) -> Mastership {
        let _ = self.mastership();
        self.inner
            .view
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .current
            .clone()
    }

    /// A snapshot of every resource, sorted by id.
    pub fn status(&self) -> Vec<ResourceStatus> {
        let now = self.inner.clock.now();
        let since = self
            .inner
            .view
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .since;
        let entries = self.entries();
        let mut out: Vec<ResourceStatus> = entries
            .into_iter()
            .map(|(id, entry)| {
                let state = lock(&entry.state);
                let capacity = match &self.inner.upstream {
                    Some(u) => u.effective(&id, &state.template, now).1,
                    None => state.template.capacity,
                };
                ResourceStatus {
                    glob: state.template.glob.as_str().to_owned(),
                    capacity,
                    algorithm: state.template.algorithm.kind,
                    sum_has: state.store.sum_has(),
                    sum_wants: state.store.sum_wants(),
                    clients: state.store.len(),
                    subclients: state.store.count(),
                    learning: since.is_some_and(|s| state.learning(now, s)),
                    id,
                }
            })
            .collect();
        out.sort_by(|a, b| a.id.cmp(&b.id));
        out
    }

    /// Every metric in Prometheus' text format, as `/metrics` serves it:
    /// the request metrics, then one gauge per resource for its sum of
    /// `has`, its subclients and its sum of `wants`. Costs one lock per
    /// resource and memory of the order of the output.
    pub fn metrics_text(&self) -> String {
        let entries = self.entries();
        let mut gauges = ResourceGauges::with_capacity(entries.len());
        for (id, entry) in entries {
            let state = lock(&entry.state);
            let row = Gauges {
                has: state.store.sum_has(),
                wants: state.store.sum_wants(),
                subclients: state.store.count(),
            };
            drop(state);
            gauges.push(id, row);
        }
        let mut out = self.inner.metrics.encode();
        gauges.write(&mut out);
        out
    }

    /// The leases on resource `id`, sorted by client, or `None` for a
    /// resource the server does not know.
    pub fn leases(&self, id: &str) -> Option<Vec<(String, ClientLease)>> {
        let entry = self
            .inner
            .resources
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .get(id)
            .cloned()?;
        let state = lock(&entry.state);
        let mut leases: Vec<_> = state
            .store
            .iter()
            .map(|(c, l)| (c.to_owned(), *l))
            .collect();
        leases.sort_by(|a, b| a.0.cmp(&b.0));
        Some(leases)
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
}

/// A sweep that removes at least this many resources hands freed memory
/// back to the operating system.
const TRIM_AFTER: usize = 1_000;

/// Hands freed heap memory back to the operating system. glibc's malloc
/// keeps what the many small allocations of a large resource map used,
/// long after the resources are gone (measured: 383 MiB kept after every one
/// of 100K resources was swept); `malloc_trim` returns it. A no-op with
/// other allocators.
fn release_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim has no preconditions; it only walks glibc's own
    // heap under glibc's own locks.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// What a server client (GetServerCapacity) says of its subtree.
#[derive(Debug, Clone, Copy)]
struct Subtree {
    /// Whether it sent a `has` at all.
    reports: bool,
    /// When what it holds ends at the latest, as it reports (0 without).
    until: Timestamp,
}

impl EntryState {
    /// Rebinds to the template `snapshot` gives `id`. Leases that would
    /// outlive the new lease length from `now` are cut to it.
    fn rebind(
        &mut self,
        id: &str,
        snapshot: &Snapshot,
        now: Timestamp,
    ) -> Result<(), RequestError> {
        match snapshot.config.find(id) {
            Some(t) => {
                let cut = self
                    .store
                    .cap_expiry(now.saturating_add(t.algorithm.lease_length));
                if cut > 0 {
                    info!(
                        resource = id,
                        leases = cut,
                        lease_length = ?t.algorithm.lease_length,
                        "reload shortened the lease length; leases cut to it"
                    );
                }
                self.template = t.clone();
                self.generation = snapshot.generation;
                Ok(())
            }
            None => {
                warn!(
                    resource = id,
                    "no template matches after reload; dropping its leases"
                );
                self.store = Resource::new();
                Err(RequestError::UnknownResource(id.to_owned()))
            }
        }
    }

    fn learning(&self, now: Timestamp, master_since: Timestamp) -> bool {
        now < master_since + self.template.learning_mode()
    }

    /// Learning mode for one intermediate server that has lost its state;
    /// `Some(what it held here)` while it lasts.
    ///
    /// A server that asks with a `has` below its unexpired lease here has
    /// forgotten that lease: it is a new master of its job, and its clients
    /// may still hold all of it. For as long as this resource's learning
    /// mode lasts, that server is answered as a new master answers every
    /// client: with what it holds, at first the forgotten lease. Otherwise
    /// this server would decide on the wants of the few clients that have
    /// come back to the new master so far, and hand the rest to other
    /// servers while the old leases still run. Expects a swept store.
    fn relearn(&mut self, request: &Request<'_>, now: Timestamp) -> Option<f64> {
        let held = self
            .store
            .get(request.client)
            .filter(|l| request.has < l.has)
            .map(|_| self.store.occupied(request.client));
        if held.is_some() {
            self.relearning.retain(|_, until| *until > now);
            let until = now + self.template.learning_mode();
            self.relearning.insert(request.client.to_owned(), until);
            return held;
        }
        match self.relearning.get(request.client) {
            Some(&until) if until > now => Some(0.0),
            Some(_) => {
                self.relearning.remove(request.client);
                None
            }
            None => None,
        }
    }

    /// Decides `request`; returns the lease and the capacity it was
    /// decided against (on an intermediate server, the parent's grant).
    ///
    /// `subtree` is set for a server client (GetServerCapacity): what it
    /// says of what its subtree holds, `request.has`. Whatever of that
    /// exceeds the new lease is kept as a hold (see [`hold::hold`]). A
    /// server client that reports a `has` below its lease here forgot it,
    /// and relearns ([`EntryState::relearn`]); one that reports none (Go's
    /// intermediates never do) is decided by the algorithm as usual.
    fn decide(
        &mut self,
        request: &Request<'_>,
        priority: i64,
        now: Timestamp,
        master_since: Timestamp,
        upstream: Option<(&parent::Upstream, &str)>,
        subtree: Option<Subtree>,
    ) -> (ClientLease, f64) {
        self.store.sweep(now);
        let mut learning = self.learning(now, master_since);
        let mut request = *request;
        if subtree.is_some_and(|s| s.reports) {
            if let Some(held) = self.relearn(&request, now) {
                learning = true;
                request.has = request.has.max(held);
            }
        }
        let request = &request;
        let old = self
            .store
            .get(request.client)
            .map(|l| (l.expiry, self.store.occupied(request.client)));
        let (lease, capacity) = self.grant(request, priority, now, learning, upstream, old);
        if let Some(Subtree { until, .. }) = subtree {
            let hold = hold::hold(request.has, until, &lease, learning, old, now);
            self.store.set_hold(request.client, hold);
        }
        (lease, capacity)
    }

    /// Decides `request` with the algorithm or learning mode; `old` is the
    /// requester's previous lease's expiry and what it occupied.
    fn grant(
        &mut self,
        request: &Request<'_>,
        priority: i64,
        now: Timestamp,
        learning: bool,
        upstream: Option<(&parent::Upstream, &str)>,
        old: Option<(Timestamp, f64)>,
    ) -> (ClientLease, f64) {
        let template = &self.template;
        match upstream {
            None => {
                // Learning mode grants at most one whole capacity: no lease
                // of an earlier master can have been larger, so more is a
                // lie or a stale configuration. The cap is the capacity and
                // not what others leave, so a liar cannot starve an honest
                // client's echo. (NO_ALGORITHM ignores capacity: its cap is
                // the wants, all it would grant anyway.)
                let cap = match template.algorithm.kind {
                    Kind::NoAlgorithm => request.wants,
                    _ => template.capacity,
                };
                let capped = Request {
                    has: request.has.min(cap),
                    ..*request
                };
                (
                    self.store.decide(
                        &template.algorithm,
                        template.capacity,
                        &capped,
                        now,
                        learning,
                    ),
                    template.capacity,
                )
            }
            Some((upstream, id)) => {
                let (algorithm, capacity) = upstream.effective(id, template, now);
                if self.priorities.get(request.client) != Some(&priority) {
                    self.priorities.insert(request.client.to_owned(), priority);
                }
                // In learning mode an intermediate echoes `has` only as far
                // as its grant from the parent reaches: the parent may have
                // cut it since the clients' leases were granted. Before its
                // first grant it knows no bound, and echoes in full what
                // its clients already hold.
                let own = old.map_or(0.0, |(_, occupied)| occupied);
                let available = if upstream.granted(id, now) {
                    (capacity - self.store.sum_has() + own).max(0.0)
                } else {
                    f64::INFINITY
                };
                let capped = Request {
                    has: request.has.min(available),
                    ..*request
                };
                let lease = self
                    .store
                    .decide(&algorithm, capacity, &capped, now, learning);
                (lease, capacity)
            }
        }
    }
}
