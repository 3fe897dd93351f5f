//! The engine: what a lease server decides, without the server around it.
//!
//! [`Engine`] owns the resource map, the configuration in force, each
//! resource's lease store and the algorithms that decide on it, learning
//! mode and the holds a cut subtree keeps. It reads no clock, does no I/O
//! and knows nothing of the wire: the time, the mastership term a request
//! is decided in and, on an intermediate server, what the parent granted
//! are passed in. [`Server`](crate::Server) puts the election, the parent's
//! link and the gRPC edge around one; the `doorman_decide` benchmark drives
//! one directly.
//!
//! # Implementation notes
//!
//! State is a map from resource id to an entry, each entry behind its own
//! mutex: a request locks the map (shared) only to find or insert its
//! entries and then locks one resource at a time, so requests for different
//! resources never contend. Lock order is always map, then entry; no request
//! holds the map lock while it holds an entry's.
//!
//! Each entry remembers the template it was matched to and the
//! configuration generation it came from. A reload swaps the configuration
//! and bumps the generation; the reload then rebinds every entry, one lock
//! at a time (a request that races it rebinds its entry itself), so a
//! reload never blocks requests for long and keeps the leases, cut to the
//! new lease length when that is shorter: a lease must never outlive what
//! the configuration in force allows.
//!
//! The sweeper drops expired leases and removes resources left with none.
//! Removal marks the entry `removed` under its lock while holding the map's
//! write lock, and a request that finds its entry removed looks it up
//! again, so no lease is ever stored in an entry that has left the map.
//!
//! Learning mode echoes a client's `has`, capped at the resource's capacity
//! (for NO_ALGORITHM, at its wants). No lease from an earlier master can
//! have exceeded the capacity, so anything more cannot be justified; the
//! cap is per client rather than "what others leave" so that a client
//! reporting an absurd `has` cannot starve an honest one for the rest of
//! learning mode.
//!
//! A client decided in learning mode (this master's, or an intermediate
//! server's relearning) that got less than it wants is asked back when
//! learning mode ends: the refresh interval handed out is capped at the
//! whole seconds left of it. Otherwise it would wait up to a whole refresh
//! interval for what the algorithm can give it from then on, and each level
//! of a tree adds its own wait (a tree of three levels started together
//! handed out nothing for the first 10 s after learning mode). Go's server
//! always hands out the template's interval. The cost is one more request
//! per such client per term, and those requests arrive together when
//! learning mode ends. An intermediate server takes its own clients'
//! interval from its parent's, so for one round after its parent's learning
//! mode ends they are asked back sooner too.
//!
//! No lease ends after the term's promise (`Mastership::promise`, the
//! watermark the election stored for the next master): when the promise
//! is nearer than the lease length, as while etcd cannot be reached, the
//! lease and its refresh interval are cut to it. The next master trusts
//! that no earlier lease outlives the watermark and learns only until
//! then.
//!
//! A GetServerCapacity request's `has` says what the asking server's
//! subtree holds; whatever of it exceeds the new grant stays counted for
//! that server as a hold until its subtree has followed the cut, so the
//! capacity is not handed out twice (`hold.rs`).

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use tracing::{debug, info, warn};

use crate::algorithm::{AlgorithmConfig, Kind, Request};
use crate::config::{ServerConfig, Template};
use crate::error::RequestError;
use crate::lease::{
    CapacityRequest, ClientLease, Grant, ReleaseRequest, ServerCapacityRequest, ServerGrant,
    Timestamp,
};
use crate::store::LeaseStore;
use tollgate_service::{LockUnpoisoned, RwLockUnpoisoned};

mod hold;
mod status;

pub(crate) use status::Report;
pub use status::ResourceStatus;

/// What a lease server decides: the resources, their leases and the
/// configuration in force, with time and the mastership term passed in.
///
/// Shared between threads behind a reference: each resource has a lock of
/// its own.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use tollgate_doorman::{Engine, ServerConfig};
///
/// let engine = Engine::new(ServerConfig::from_yaml(
///     r#"
/// resources:
///   - identifier_glob: "*"
///     capacity: 100
///     algorithm:
///       kind: FAIR_SHARE
///       lease_length: 60
///       refresh_interval: 5
///       learning_mode_duration: 0
/// "#,
/// )?);
/// let now = Duration::from_secs(1_700_000_000);
/// let term = now; // this server became the master just now
/// let a = engine.decide("a", "cpu", 80.0, now, term).unwrap();
/// assert_eq!((a.has, a.expiry), (80.0, now + Duration::from_secs(60)));
/// // "a" holds 80 until it refreshes: 20 are left for "b".
/// let b = engine.decide("b", "cpu", 80.0, now, term).unwrap();
/// assert_eq!(b.has, 20.0);
/// assert_eq!(engine.sweep(now + Duration::from_secs(60)), 1);
/// # Ok::<(), tollgate_doorman::ServerConfigError>(())
/// ```
#[derive(Debug)]
pub struct Engine {
    config: RwLock<Arc<Snapshot>>,
    /// Hashed with foldhash (seeded per map), as the store's client ids.
    resources: RwLock<ResourceMap>,
}

/// The configuration in force, and its generation (each reload bumps it).
#[derive(Debug)]
pub(crate) struct Snapshot {
    pub(crate) config: ServerConfig,
    pub(crate) generation: u64,
}

/// The resources by id.
type ResourceMap = HashMap<String, Arc<Mutex<ResourceState>>, foldhash::fast::RandomState>;

/// Resources taken out of an engine, to put back later
/// ([`Engine::put_aside`], [`Engine::restore`]).
#[derive(Debug)]
pub(crate) struct Resources(ResourceMap);

/// A mastership term: when it began, until when its learning mode lasts at
/// most, and (per request) until when its leases may run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Began {
    /// When mastership was won.
    pub(crate) at: Timestamp,
    /// Learning mode ends by then whatever the template says: every lease
    /// of an earlier master has ended (`Mastership::learning_until`).
    pub(crate) learning_until: Option<Timestamp>,
    /// No lease may end later (`Mastership::promise`), as read when a
    /// request came; `None` in the server's view itself.
    pub(crate) grant_until: Option<Timestamp>,
}

impl Began {
    /// When learning mode of `length` ends in this term.
    pub(crate) fn learning_ends(&self, length: Duration) -> Timestamp {
        let full = self.at + length;
        self.learning_until.map_or(full, |u| u.min(full))
    }
}

/// On an intermediate server, what its parent granted, as the engine reads
/// it: implemented by the parent's link.
pub(crate) trait Upstream: Send + Sync {
    /// The algorithm and capacity resource `id` (bound to `template`) uses
    /// at `now`: the parent's grant while it lasts, else 0.
    fn effective(&self, id: &str, template: &Template, now: Timestamp) -> (AlgorithmConfig, f64);

    /// Whether the parent's grant on `id` bounds what learning mode echoes
    /// at `now`.
    fn bounds(&self, id: &str, now: Timestamp) -> bool;
}

/// One resource's state, behind its own lock.
#[derive(Debug)]
struct ResourceState {
    /// The template it matched.
    template: Arc<Template>,
    /// The configuration generation `template` comes from.
    generation: u64,
    /// Its leases.
    store: LeaseStore,
    /// Each client's priority, kept only on an intermediate server (which
    /// sends its parent one band per priority); may name expired clients.
    priorities: HashMap<String, i64>,
    /// Intermediate servers that lost their state, and until when they are
    /// in learning mode here ([`ResourceState::relearn`]).
    relearning: HashMap<String, Timestamp>,
    /// Set when the sweeper removed this entry from the map.
    removed: bool,
}

/// What a server client (GetServerCapacity) says of its subtree.
#[derive(Debug, Clone, Copy)]
struct Subtree {
    /// Whether it sent a `has` at all.
    reports: bool,
    /// When what it holds ends at the latest, as it reports (0 without).
    until: Timestamp,
}

impl Engine {
    /// An engine deciding under `config`, with no resources yet.
    pub fn new(config: ServerConfig) -> Engine {
        Engine {
            config: RwLock::new(Arc::new(Snapshot {
                config,
                generation: 0,
            })),
            resources: RwLock::new(HashMap::default()),
        }
    }

    /// Decides what `client` gets of `resource` at `now`, wanting `wants`
    /// and reporting no lease held, in a mastership term that began at
    /// `term` (learning mode runs from then): one resource of a
    /// GetCapacity. `None` when no template of the configuration matches
    /// `resource`.
    pub fn decide(
        &self,
        client: &str,
        resource: &str,
        wants: f64,
        now: Duration,
        term: Duration,
    ) -> Option<ClientLease> {
        let request = Request {
            client,
            has: 0.0,
            wants,
            subclients: 1,
        };
        let term = Began {
            at: term,
            learning_until: None,
            grant_until: None,
        };
        let snapshot = self.snapshot();
        self.entry(resource, &snapshot, now, |state| {
            state.decide(&request, 0, now, term, None, None).0
        })
        .ok()
    }

    /// Replaces the configuration at `now`, keeping every lease, and
    /// returns its generation (one more at each reload). Resources rebind
    /// to the new templates at once: a lease that would outlive the new
    /// lease length from `now` is cut to it, and a resource that no longer
    /// matches any template loses its leases (and is dropped by the next
    /// sweep).
    pub fn reload(&self, config: ServerConfig, now: Duration) -> u64 {
        let mut slot = self.config.write_unpoisoned();
        let generation = slot.generation + 1;
        let snapshot = Arc::new(Snapshot { config, generation });
        *slot = snapshot.clone();
        drop(slot);
        // Rebind now rather than on the next request, so that a shorter
        // lease length cuts the leases from the moment of the reload.
        for (id, entry) in self.entries() {
            let mut state = entry.lock_unpoisoned();
            if state.generation != snapshot.generation && state.rebind(&id, &snapshot, now).is_err()
            {
                state.store = LeaseStore::new();
            }
        }
        generation
    }

    /// Drops the leases expired at `now` everywhere and removes resources
    /// left without leases. Returns how many resources were removed.
    pub fn sweep(&self, now: Duration) -> usize {
        let snapshot = self.snapshot();
        let entries = self.entries();
        let mut idle = Vec::new();
        for (id, entry) in entries {
            let mut state = entry.lock_unpoisoned();
            if state.generation != snapshot.generation && state.rebind(&id, &snapshot, now).is_err()
            {
                state.store = LeaseStore::new();
            }
            state.store.sweep(now);
            if state.store.is_empty() {
                idle.push(id);
            }
        }
        if idle.is_empty() {
            return 0;
        }
        let mut map = self.resources.write_unpoisoned();
        let mut removed = 0;
        for id in idle {
            let Some(entry) = map.get(&id) else { continue };
            let mut state = entry.lock_unpoisoned();
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

    /// The leases on resource `id`, sorted by client, or `None` for a
    /// resource the engine does not know.
    pub fn leases(&self, id: &str) -> Option<Vec<(String, ClientLease)>> {
        let entry = self.resources.read_unpoisoned().get(id).cloned()?;
        let state = entry.lock_unpoisoned();
        let mut leases: Vec<_> = state
            .store
            .iter()
            .map(|(c, l)| (c.to_owned(), *l))
            .collect();
        leases.sort_by(|a, b| a.0.cmp(&b.0));
        Some(leases)
    }

    /// The configuration in force.
    pub(crate) fn snapshot(&self) -> Arc<Snapshot> {
        self.config.read_unpoisoned().clone()
    }

    /// Decides a client's checked request at `now` in `term` under
    /// `snapshot`: one lease per resource, all at one time.
    pub(crate) fn capacity(
        &self,
        req: CapacityRequest,
        now: Timestamp,
        term: Began,
        snapshot: &Snapshot,
        upstream: Option<&dyn Upstream>,
    ) -> Result<Vec<Grant>, RequestError> {
        let mut grants = Vec::with_capacity(req.resources.len());
        for r in req.resources {
            let request = Request {
                client: &req.client_id,
                has: r.has.map_or(0.0, |h| h.capacity),
                wants: r.wants,
                subclients: 1,
            };
            let (lease, safe) = self.entry(&r.resource_id, snapshot, now, |state| {
                let upstream = upstream.map(|u| (u, r.resource_id.as_str()));
                let (lease, capacity) =
                    state.decide(&request, r.priority, now, term, upstream, None);
                let safe = state.template.safe_capacity.unwrap_or_else(|| {
                    // Dynamic safe capacity: an equal share per subclient,
                    // this client included.
                    capacity / state.store.count().max(1) as f64
                });
                (lease, safe)
            })?;
            grants.push(Grant {
                resource_id: r.resource_id,
                lease: (&lease).into(),
                safe_capacity: Some(safe),
            });
        }
        Ok(grants)
    }

    /// Decides a server client's checked request at `now` in `term`: each
    /// resource is one client (the asking server) wanting the sum of its
    /// bands' wants on behalf of the sum of their clients.
    pub(crate) fn server_capacity(
        &self,
        req: ServerCapacityRequest,
        now: Timestamp,
        term: Began,
        snapshot: &Snapshot,
        upstream: Option<&dyn Upstream>,
    ) -> Result<Vec<ServerGrant>, RequestError> {
        let mut grants = Vec::with_capacity(req.resources.len());
        for r in req.resources {
            let request = Request {
                client: &req.server_id,
                has: r.has.map_or(0.0, |h| h.capacity),
                wants: r.wants(),
                subclients: r.subclients(),
            };
            // One client with one priority: the most urgent of its bands.
            let priority = r.priority();
            // Its `has` is what its subtree holds, until when at the latest.
            let subtree = Subtree {
                reports: r.has.is_some(),
                until: r.has.map_or(Duration::ZERO, |h| h.expiry),
            };
            let (lease, algorithm, safe) = self.entry(&r.resource_id, snapshot, now, |state| {
                let upstream = upstream.map(|u| (u, r.resource_id.as_str()));
                let (lease, _) =
                    state.decide(&request, priority, now, term, upstream, Some(subtree));
                let algorithm = state.template.algorithm.clone();
                (lease, algorithm, state.template.safe_capacity)
            })?;
            grants.push(ServerGrant {
                grant: Grant {
                    resource_id: r.resource_id,
                    lease: (&lease).into(),
                    safe_capacity: safe,
                },
                algorithm: Some(algorithm),
            });
        }
        Ok(grants)
    }

    /// Releases a client's leases; unknown resources are ignored.
    pub(crate) fn release(&self, req: &ReleaseRequest) {
        for id in req.resource_ids.iter().filter(|id| !id.is_empty()) {
            let entry = self.resources.read_unpoisoned().get(id).cloned();
            if let Some(entry) = entry {
                entry.lock_unpoisoned().store.release(&req.client_id);
            }
        }
    }

    /// Drops every resource (and so every lease).
    pub(crate) fn forget_all(&self) {
        let mut map = self.resources.write_unpoisoned();
        for entry in map.values() {
            entry.lock_unpoisoned().removed = true;
        }
        map.clear();
    }

    /// Takes every resource out, to put aside while not master.
    pub(crate) fn put_aside(&self) -> Resources {
        Resources(std::mem::take(&mut *self.resources.write_unpoisoned()))
    }

    /// Puts back what [`Engine::put_aside`] took, over whatever is there.
    pub(crate) fn restore(&self, kept: Resources) {
        self.forget_all();
        *self.resources.write_unpoisoned() = kept.0;
    }

    /// Runs `f` on the entry for `id`, created (bound to its template) if
    /// needed, locked and bound to the configuration `snapshot` (rebinding
    /// at `now` cuts leases longer than its lease length).
    fn entry<R>(
        &self,
        id: &str,
        snapshot: &Snapshot,
        now: Timestamp,
        f: impl FnOnce(&mut ResourceState) -> R,
    ) -> Result<R, RequestError> {
        loop {
            let existing = self.resources.read_unpoisoned().get(id).cloned();
            let entry = match existing {
                Some(entry) => entry,
                None => {
                    let template = snapshot
                        .config
                        .find(id)
                        .ok_or_else(|| RequestError::UnknownResource(id.to_owned()))?;
                    let mut map = self.resources.write_unpoisoned();
                    map.entry(id.to_owned())
                        .or_insert_with(|| {
                            debug!(resource = id, glob = template.glob.as_str(), "new resource");
                            Arc::new(Mutex::new(ResourceState {
                                template: template.clone(),
                                generation: snapshot.generation,
                                store: LeaseStore::new(),
                                priorities: HashMap::new(),
                                relearning: HashMap::new(),
                                removed: false,
                            }))
                        })
                        .clone()
                }
            };
            let mut state = entry.lock_unpoisoned();
            if state.removed {
                continue;
            }
            if state.generation != snapshot.generation {
                state.rebind(id, snapshot, now)?;
            }
            return Ok(f(&mut state));
        }
    }

    /// A snapshot of the resource map, so no one holds its lock while
    /// taking the per-resource locks.
    fn entries(&self) -> Vec<(String, Arc<Mutex<ResourceState>>)> {
        self.resources
            .read_unpoisoned()
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
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

impl ResourceState {
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
                self.store = LeaseStore::new();
                Err(RequestError::UnknownResource(id.to_owned()))
            }
        }
    }

    /// Whether this resource is in learning mode at `now` in `term`.
    fn learning(&self, now: Timestamp, term: Began) -> bool {
        now < term.learning_ends(self.template.learning_mode())
    }

    /// Learning mode for one intermediate server that has lost its state;
    /// `Some((what it held here, when its learning mode ends))` while it lasts.
    ///
    /// A server that asks with a `has` below its unexpired lease here has
    /// forgotten that lease: it is a new master of its job, and its clients
    /// may still hold all of it. For as long as this resource's learning
    /// mode lasts, that server is answered as a new master answers every
    /// client: with what it holds, at first the forgotten lease, and its
    /// wants count as at least what they were
    /// ([`distrust_partial_demand`]). Otherwise this server would decide
    /// on the wants of the few clients that have come back to the new
    /// master so far, and hand the rest to other servers while the old
    /// leases still run. Expects a swept store.
    fn relearn(&mut self, request: &Request<'_>, now: Timestamp) -> Option<(f64, Timestamp)> {
        let held = self
            .store
            .get(request.client)
            .filter(|l| request.has < l.has)
            .map(|_| self.store.occupied(request.client));
        if let Some(held) = held {
            self.relearning.retain(|_, until| *until > now);
            let until = now + self.template.learning_mode();
            self.relearning.insert(request.client.to_owned(), until);
            return Some((held, until));
        }
        match self.relearning.get(request.client) {
            Some(&until) if until > now => Some((0.0, until)),
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
    /// and relearns ([`ResourceState::relearn`]); one that reports none
    /// (Go's intermediates never do) is decided by the algorithm as usual.
    fn decide(
        &mut self,
        request: &Request<'_>,
        priority: i64,
        now: Timestamp,
        master_since: Began,
        upstream: Option<(&dyn Upstream, &str)>,
        subtree: Option<Subtree>,
    ) -> (ClientLease, f64) {
        self.store.sweep(now);
        let mut learning = self.learning(now, master_since);
        // When this request's learning mode ends, if it is decided in one.
        let mut learning_ends =
            learning.then(|| master_since.learning_ends(self.template.learning_mode()));
        // What the client itself asked for: whether to ask it back when
        // learning mode ends depends on that, not on its wants as counted.
        let asked = request.wants;
        let mut request = *request;
        if subtree.is_some_and(|s| s.reports) {
            if let Some((held, until)) = self.relearn(&request, now) {
                learning = true;
                request.has = request.has.max(held);
                let before = self.store.get(request.client).copied();
                distrust_partial_demand(&mut request, before.as_ref());
                learning_ends = learning_ends.max(Some(until));
            }
        }
        let request = &request;
        // Only an intermediate's grant and a subtree's hold read the old
        // lease: a root's GetCapacity is spared the lookup.
        let old = if upstream.is_some() || subtree.is_some() {
            self.store.expiry_and_occupied(request.client)
        } else {
            None
        };
        let until = master_since.grant_until;
        let (mut lease, capacity) =
            self.grant(request, priority, (now, until), learning, upstream, old);
        if let Some(ends) = learning_ends {
            lease.refresh_interval = back_when_learning_ends(&lease, asked, now, ends);
        }
        if let Some(Subtree { until, .. }) = subtree {
            let hold = hold::hold(request.has, until, &lease, learning, old, now);
            self.store.set_hold(request.client, hold);
        }
        (lease, capacity)
    }

    /// Decides `request` with the algorithm or learning mode at `now`, with
    /// no lease ending after `until` (the term's promise); `old` is the
    /// requester's previous lease's expiry and what it occupied.
    fn grant(
        &mut self,
        request: &Request<'_>,
        priority: i64,
        (now, until): (Timestamp, Option<Timestamp>),
        learning: bool,
        upstream: Option<(&dyn Upstream, &str)>,
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
                let algorithm = within(&template.algorithm, now, until);
                (
                    self.store
                        .decide(&algorithm, template.capacity, &capped, now, learning),
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
                // its clients already hold; nor does a grant that only
                // echoed a partial request back.
                let own = old.map_or(0.0, |(_, occupied)| occupied);
                let available = if upstream.bounds(id, now) {
                    (capacity - self.store.sum_has() + own).max(0.0)
                } else {
                    f64::INFINITY
                };
                let capped = Request {
                    has: request.has.min(available),
                    ..*request
                };
                let algorithm = within(&algorithm, now, until);
                let lease = self
                    .store
                    .decide(&algorithm, capacity, &capped, now, learning);
                (lease, capacity)
            }
        }
    }
}

/// `algorithm`, its leases (and refresh interval) cut so that one granted
/// at `now` ends by `until` at the latest: the promise a master's election
/// stored for its successor. Borrowed when no cut is needed, as whenever
/// the election can reach its store.
fn within(
    algorithm: &AlgorithmConfig,
    now: Timestamp,
    until: Option<Timestamp>,
) -> Cow<'_, AlgorithmConfig> {
    let Some(left) = until.map(|u| u.saturating_sub(now)) else {
        return Cow::Borrowed(algorithm);
    };
    if algorithm.lease_length <= left {
        return Cow::Borrowed(algorithm);
    }
    let mut cut = algorithm.clone();
    cut.lease_length = left;
    cut.refresh_interval = cut.refresh_interval.min(left);
    Cow::Owned(cut)
}

/// The refresh interval to hand out with `lease`, decided in learning mode
/// until `ends`: a client granted less than it `wants` is asked back when
/// learning mode ends (in whole seconds, rounded up, at least one), rather
/// than up to a whole refresh interval later; one granted all it wants has
/// no reason to come back early.
fn back_when_learning_ends(
    lease: &ClientLease,
    wants: f64,
    now: Timestamp,
    ends: Timestamp,
) -> Duration {
    if lease.has >= wants {
        return lease.refresh_interval;
    }
    let left = ends.saturating_sub(now);
    let whole = left.as_secs() + u64::from(left.subsec_nanos() > 0);
    lease
        .refresh_interval
        .min(Duration::from_secs(whole.max(1)))
}

/// While a server client relearns, its request's demand is the sums of the
/// clients back to its new master so far: it is taken as at least what the
/// client wanted before (its `lease` here, as the last request left it: the
/// forgotten lease's wants, or the most it asked for since), so
/// that neither this server's algorithm nor its own parent (to which it
/// reports its clients' wants) divides the capacity by a part of the
/// subtree's demand. Without it, a parent that kept its leases through an
/// etcd outage cut each region whose datacenters were new masters to a
/// fraction of what their clients held, for a learning mode's length.
fn distrust_partial_demand(request: &mut Request<'_>, lease: Option<&ClientLease>) {
    if let Some(lease) = lease {
        request.wants = request.wants.max(lease.wants);
        request.subclients = request.subclients.max(lease.subclients);
    }
}
