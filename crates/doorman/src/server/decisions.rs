//! Decisions: a request checked at the edge becomes leases, by the
//! resource's algorithm or learning mode, under the parent's grant on an
//! intermediate server.
//!
//! # Implementation notes
//!
//! Learning mode echoes a client's `has`, capped at the resource's capacity
//! (for NO_ALGORITHM, at its wants). No lease from an earlier master can have
//! exceeded the capacity, so anything more cannot be justified; the cap is
//! per client rather than "what others leave" so that a client reporting an
//! absurd `has` cannot starve an honest one for the rest of learning mode.
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
use std::time::Duration;

use super::super::algorithm::{AlgorithmConfig, Kind, Request};
use super::super::error::RequestError;
use super::super::lease::{
    CapacityRequest, ClientLease, Grant, ReleaseRequest, ServerCapacityRequest, ServerGrant,
    Timestamp,
};
use super::mastership::Term;
use super::state::{Began, EntryState, Server};
use super::{hold, parent};
use tollgate_service::{LockUnpoisoned, RwLockUnpoisoned};

impl Server {
    /// Decides a client's checked request in `term`: one lease per
    /// resource, all at one time.
    pub(super) fn capacity(
        &self,
        req: CapacityRequest,
        term: &Term,
    ) -> Result<Vec<Grant>, RequestError> {
        let now = self.inner.clock.now();
        let mut grants = Vec::with_capacity(req.resources.len());
        for r in req.resources {
            let request = Request {
                client: &req.client_id,
                has: r.has.map_or(0.0, |h| h.capacity),
                wants: r.wants,
                subclients: 1,
            };
            let (lease, safe) = self.entry(&r.resource_id, &term.snapshot, |state| {
                let (lease, capacity) = state.decide(
                    &request,
                    r.priority,
                    now,
                    term.since,
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
            grants.push(Grant {
                resource_id: r.resource_id,
                lease: (&lease).into(),
                safe_capacity: Some(safe),
            });
        }
        Ok(grants)
    }

    /// Decides a server client's checked request in `term`: each resource
    /// is one client (the asking server) wanting the sum of its bands'
    /// wants on behalf of the sum of their clients.
    pub(super) fn server_capacity(
        &self,
        req: ServerCapacityRequest,
        term: &Term,
    ) -> Result<Vec<ServerGrant>, RequestError> {
        let now = self.inner.clock.now();
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
            let (lease, algorithm, safe) = self.entry(&r.resource_id, &term.snapshot, |state| {
                let (lease, _) = state.decide(
                    &request,
                    priority,
                    now,
                    term.since,
                    self.upstream(&r.resource_id),
                    Some(subtree),
                );
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
    pub(super) fn release(&self, req: &ReleaseRequest) {
        for id in req.resource_ids.iter().filter(|id| !id.is_empty()) {
            let entry = self.inner.resources.read_unpoisoned().get(id).cloned();
            if let Some(entry) = entry {
                entry.state.lock_unpoisoned().store.release(&req.client_id);
            }
        }
    }

    /// On an intermediate server, its upstream state with the resource id.
    fn upstream<'a>(&'a self, id: &'a str) -> Option<(&'a parent::Upstream, &'a str)> {
        self.inner.upstream.as_ref().map(|u| (u, id))
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
    /// and relearns ([`EntryState::relearn`]); one that reports none (Go's
    /// intermediates never do) is decided by the algorithm as usual.
    fn decide(
        &mut self,
        request: &Request<'_>,
        priority: i64,
        now: Timestamp,
        master_since: Began,
        upstream: Option<(&parent::Upstream, &str)>,
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
