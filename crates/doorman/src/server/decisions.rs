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
//! A GetServerCapacity request's `has` says what the asking server's
//! subtree holds; whatever of it exceeds the new grant stays counted for
//! that server as a hold until its subtree has followed the cut, so the
//! capacity is not handed out twice (`hold.rs`).

use std::sync::Arc;
use std::time::Duration;

use super::super::algorithm::{Kind, Request};
use super::super::error::RequestError;
use super::super::lease::{
    Answer, CapacityRequest, ClientLease, Grant, ReleaseRequest, ServerCapacityRequest,
    ServerGrant, Timestamp,
};
use super::state::{EntryState, Server, Snapshot};
use super::wire::{RequestLimits, Rules};
use super::{hold, parent};
use tollgate_service::{LockUnpoisoned, RwLockUnpoisoned};

impl Server {
    /// Decides a client's request. `admit` checks it against the server's
    /// rules; it runs only on the master, before anything changes, so a
    /// follower redirects whatever it is sent.
    pub(super) fn capacity(
        &self,
        admit: impl FnOnce(&Rules<'_>) -> Result<CapacityRequest, RequestError>,
    ) -> Result<Answer<Vec<Grant>>, RequestError> {
        self.on_master(admit, |req, at| {
            let mut grants = Vec::with_capacity(req.resources.len());
            for r in req.resources {
                let request = Request {
                    client: &req.client_id,
                    has: r.has.map_or(0.0, |h| h.capacity),
                    wants: r.wants,
                    subclients: 1,
                };
                let (lease, safe) = self.entry(&r.resource_id, &at.snapshot, |state| {
                    let (lease, capacity) = state.decide(
                        &request,
                        r.priority,
                        at.now,
                        at.since,
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
        })
    }

    /// Decides a server client's request: each resource is one client (the
    /// asking server) wanting the sum of its bands' wants on behalf of the
    /// sum of their clients. `admit` as for [`Server::capacity`].
    pub(super) fn server_capacity(
        &self,
        admit: impl FnOnce(&Rules<'_>) -> Result<ServerCapacityRequest, RequestError>,
    ) -> Result<Answer<Vec<ServerGrant>>, RequestError> {
        self.on_master(admit, |req, at| {
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
                let (lease, algorithm, safe) =
                    self.entry(&r.resource_id, &at.snapshot, |state| {
                        let (lease, _) = state.decide(
                            &request,
                            priority,
                            at.now,
                            at.since,
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
        })
    }

    /// What every capacity decision starts with: a follower answers
    /// [`Answer::NotMaster`] and changes nothing; the master checks the
    /// request with `admit` against its rules (before anything changes, so
    /// an invalid request changes nothing either), then `decide`s it at one
    /// time, under one configuration snapshot.
    fn on_master<R, T>(
        &self,
        admit: impl FnOnce(&Rules<'_>) -> Result<R, RequestError>,
        decide: impl FnOnce(R, &Decision) -> Result<T, RequestError>,
    ) -> Result<Answer<T>, RequestError> {
        let since = match self.mastership() {
            Ok(since) => since,
            Err(m) => return Ok(Answer::NotMaster(m)),
        };
        let snapshot = self.snapshot();
        let req = admit(&Rules {
            limits: &self.inner.limits,
            config: &snapshot.config,
        })?;
        let at = Decision {
            since,
            now: self.inner.clock.now(),
            snapshot,
        };
        decide(req, &at).map(Answer::Done)
    }

    /// Releases a client's leases; unknown resources are ignored. `admit`
    /// as for [`Server::capacity`].
    pub(super) fn release(
        &self,
        admit: impl FnOnce(&RequestLimits) -> Result<ReleaseRequest, RequestError>,
    ) -> Result<Answer<()>, RequestError> {
        if let Err(m) = self.mastership() {
            return Ok(Answer::NotMaster(m));
        }
        let req = admit(&self.inner.limits)?;
        for id in req.resource_ids.iter().filter(|id| !id.is_empty()) {
            let entry = self.inner.resources.read_unpoisoned().get(id).cloned();
            if let Some(entry) = entry {
                entry.state.lock_unpoisoned().store.release(&req.client_id);
            }
        }
        Ok(Answer::Done(()))
    }

    /// On an intermediate server, its upstream state with the resource id.
    fn upstream<'a>(&'a self, id: &'a str) -> Option<(&'a parent::Upstream, &'a str)> {
        self.inner.upstream.as_ref().map(|u| (u, id))
    }
}

/// When and under what configuration a master decides a request (see
/// [`Server::on_master`]).
#[derive(Debug)]
struct Decision {
    /// Since when this server has been the master.
    since: Timestamp,
    /// The time every lease of the request is decided at.
    now: Timestamp,
    /// The configuration the request was checked against.
    snapshot: Arc<Snapshot>,
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
