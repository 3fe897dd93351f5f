//! An intermediate server's link to its parent: what it asks for, what it
//! got, and the capacity and lease timings its own clients see.
//!
//! # Implementation notes
//!
//! A poller task sums, per resource, the wants and subclients of this
//! server's unexpired leases into priority bands and sends them to the
//! parent in one GetServerCapacity. As `has` it sends the lease it holds
//! from the parent or, where that is more, what its subtree holds: its own
//! `sum_has` (its leases and the holds on them), expiring with the latest
//! of them. The two differ after the parent cut the grant and before this
//! server's clients have followed; the parent keeps the difference from
//! others meanwhile (see `hold.rs`).
//!
//! Each grant becomes, for that resource only, an exact-name
//! template: capacity = the grant, algorithm and lease length = the parent's,
//! refresh interval = the parent's times the decay factor (0.5 by default:
//! the interval halves at each level up the tree, as the design doc asks and
//! Go never did), whole seconds, at least one.
//!
//! Leases handed out never outlive the parent's: a lease's length is capped
//! at what is left of the parent's lease, and once that has expired the
//! resource's capacity is 0. Until the first grant arrives it is 0 too, so a
//! new intermediate first grants nothing (`docs/design/doorman-protocol.md`
//! §5).
//!
//! After a new mastership term the clients come back one by one, so while
//! a resource is in learning mode the poller sends the bands it sent before
//! the term rather than the partial sums, and as `has` at least the one it
//! sent then, while that lasts (once the grant that answered them has
//! ended, those bands are another term's, and count as nothing sent
//! before); and learning mode echoes a client's `has`
//! only as far as the grant reaches (capacity minus what other leases
//! hold), since the parent may have cut the grant meanwhile, holding the
//! rest when the client is a server (before the first grant of the term
//! there is no bound to apply, and the echo is whole: the clients hold
//! those leases already). All of which keeps a subtree that lost its master
//! from holding more than its parent counts for it (scenario 7 of
//! `tollgate simulate`). A master with nothing sent before the term (a
//! task that was not master, or every master of a tree after an etcd
//! outage) asks with the sums of the clients back so far, marked partial,
//! and asks that way again until learning mode ends, each time after the
//! refresh interval it hands its own clients rather than the parent's: by
//! then the rest of them are back. A parent in learning mode too asks a
//! client granted less than it wants back only when its learning mode
//! ends, and would then divide its capacity by the first sums of the
//! children that had not asked again yet (after an etcd outage, a root of
//! 20,000 gave the first regions to ask all they wanted and the last
//! nothing beyond their echo, and the fleet took 97 s to converge; now
//! 31 s). A grant that merely
//! echoes such a request's `has`, where that `has` was more than the grant
//! in force (its parent is in learning mode too, and knows no more than it
//! was told), bounds nothing, so the echoes grow as the clients come back
//! instead of being held to the first few clients' share (a fleet of
//! 20,000 clients fell to under 2 % of its capacity, and converged 176 s
//! after a 30 s etcd outage ended; now it keeps all of it). A `has` that
//! only repeats the grant says nothing new, and its echo bounds as any
//! grant does.
//!
//! On the parent's side, a server that asks with less
//! `has` than its unexpired lease there has forgotten it (a new master with
//! an empty state); the parent answers it with that lease, as in learning
//! mode, for a learning mode's length, rather than hand the lease to others
//! while the subtree still holds it; and counts its wants as at least what
//! they were before, not the sums of the few clients back so far.
//!
//! The poller asks again after the shortest refresh interval the parent
//! gave (at least one second), follows the parent's mastership redirects,
//! and retries every second when the parent cannot be reached.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tracing::{debug, warn};

use super::{wire, WeakServer};
use crate::algorithm::AlgorithmConfig;
use crate::config::Template;
use crate::engine::{Began, Report, Upstream};
use crate::lease::{Band, Lease, ServerGrant, ServerResourceRequest, Timestamp};
use crate::pb;
use crate::session::{MasterSession, SessionError};
use crate::transport::Transport;
use tollgate_service::LockUnpoisoned;

/// How a server reaches its parent.
#[derive(Debug, Clone)]
pub struct Parent {
    /// The parent's gRPC address, `host:port`.
    pub address: String,
    /// This server's id in the parent's eyes (its `server_id`).
    pub server_id: String,
    /// What the parent's refresh interval is multiplied by before this
    /// server hands it on, in `(0, 1]`; the design doc's default is 0.5.
    pub decay_factor: f64,
}

/// What a parent granted for one resource.
#[derive(Debug, Clone)]
struct Grant {
    /// The grant is the `has` of a partial request, echoed back: a parent
    /// in learning mode too, which knows no more than this server told it.
    echo: bool,
    capacity: f64,
    expiry: Timestamp,
    refresh_interval: Duration,
    algorithm: Option<AlgorithmConfig>,
}

/// An intermediate server's link to its parent, and what it asked and
/// was granted.
#[derive(Debug)]
pub(super) struct ParentLink {
    parent: Parent,
    /// The way to the parent's master, after redirects.
    session: MasterSession,
    grants: Mutex<HashMap<String, Grant>>,
    /// What was last sent per resource.
    sent: Mutex<HashMap<String, Sent>>,
}

/// One resource's request as last sent.
#[derive(Debug, Clone)]
struct Sent {
    bands: Vec<Band>,
    /// What the subtree held: the `has` sent and, once answered, the grant
    /// that answered it (leases handed out after the request ran under
    /// that grant, and may last as long).
    has: Option<Lease>,
    answered: bool,
    /// Sent in learning mode with nothing from before the term: the sums
    /// of the clients back so far, not a request to ask as again.
    partial: bool,
    /// The `has` sent is what the subtree holds beyond the grant in force
    /// (or without one), not the grant itself handed back.
    beyond: bool,
}

/// How long the poller waits when it has nothing to ask or the parent
/// failed.
pub(super) const IDLE: Duration = Duration::from_secs(1);

/// The per-call deadline for GetServerCapacity.
pub(super) const DEADLINE: Duration = Duration::from_secs(5);

impl ParentLink {
    pub(super) fn new(parent: Parent, transport: Arc<dyn Transport>) -> ParentLink {
        ParentLink {
            session: MasterSession::new(vec![parent.address.clone()], transport, DEADLINE)
                .discover(false)
                .max_redirects(2),
            parent,
            grants: Mutex::new(HashMap::new()),
            sent: Mutex::new(HashMap::new()),
        }
    }

    /// Whether the subtree holds `held`, more than the grant on `id` in
    /// force at `now` (or there is none).
    fn beyond(&self, id: &str, now: Timestamp, held: f64) -> bool {
        let grants = self.grants.lock_unpoisoned();
        grants
            .get(id)
            .filter(|g| g.expiry > now)
            .is_none_or(|g| held > g.capacity * (1.0 + 1e-9))
    }

    /// `refresh` times the decay factor, in whole seconds, at least one.
    fn decayed(&self, refresh: Duration) -> Duration {
        let secs = (refresh.as_secs_f64() * self.parent.decay_factor).round();
        Duration::from_secs(secs.max(1.0) as u64)
    }

    /// What this server has of `id`, as sent back in `has`: the lease held
    /// from the parent, or what the subtree holds (`held`: this server's
    /// `sum_has`, its leases and holds, ending by `until`) where that is
    /// more, which it is while this server's clients have not yet followed a
    /// cut. `None` when it has neither.
    fn has(&self, id: &str, now: Timestamp, held: f64, until: Option<Timestamp>) -> Option<Lease> {
        let grants = self.grants.lock_unpoisoned();
        let lease = grants.get(id).filter(|g| g.expiry > now).map(|g| Lease {
            capacity: g.capacity,
            expiry: g.expiry,
            refresh_interval: g.refresh_interval,
        });
        let subtree = until.filter(|&u| u > now && held > 0.0).map(|u| Lease {
            capacity: held,
            expiry: u,
            refresh_interval: Duration::ZERO,
        });
        Lease::larger(lease, subtree)
    }

    /// Records the parent's answer; returns the shortest refresh interval.
    fn record(&self, response: pb::GetServerCapacityResponse) -> Duration {
        self.record_grants(wire::from_server_response(response))
    }

    /// Records the parent's grants; returns the shortest refresh interval.
    fn record_grants(&self, response: Vec<ServerGrant>) -> Duration {
        let mut sent = self.sent.lock_unpoisoned();
        let mut grants = self.grants.lock_unpoisoned();
        let mut next = None::<Duration>;
        for ServerGrant {
            grant: r,
            algorithm,
        } in response
        {
            let mut echo = false;
            let mut partial = false;
            if let Some(s) = sent.get_mut(&r.resource_id).filter(|s| !s.answered) {
                let asked = s.has.map_or(0.0, |h| h.capacity);
                echo = s.partial
                    && s.beyond
                    && (r.lease.capacity - asked).abs() <= 1e-9 * asked.max(1.0);
                partial = s.partial;
                s.has = Lease::larger(s.has, Some(r.lease));
                s.answered = true;
            }
            let refresh = r.lease.refresh_interval.max(Duration::from_secs(1));
            // Sums of part of the clients: ask again once the rest are
            // back, after the interval handed to them, so the parent does
            // not divide its capacity by them when its learning mode ends.
            let again = if partial {
                refresh.min(self.decayed(refresh))
            } else {
                refresh
            };
            next = Some(next.map_or(again, |n| n.min(again)));
            grants.insert(
                r.resource_id,
                Grant {
                    echo,
                    capacity: r.lease.capacity.max(0.0),
                    expiry: r.lease.expiry,
                    refresh_interval: refresh,
                    algorithm,
                },
            );
        }
        next.unwrap_or(IDLE)
    }

    /// What to ask the parent for at `now`, from the server's `reports` in
    /// the term that began at `since` (`None` while not master): per
    /// resource with clients, its priority bands and what this server has
    /// (see [`ParentLink::has`]). `learning(id, since)` says whether a
    /// resource without an entry would be in learning mode now.
    pub(super) fn requests(
        &self,
        now: Timestamp,
        since: Option<Began>,
        reports: Vec<Report>,
        learning: impl Fn(&str, Began) -> bool,
    ) -> Vec<ServerResourceRequest> {
        let mut sent = self.sent.lock_unpoisoned();
        let mut out = Vec::new();
        let mut seen = HashSet::new();
        for Report {
            id,
            bands,
            held,
            until,
            learning,
        } in reports
        {
            seen.insert(id.clone());
            let has = self.has(&id, now, held, until);
            if learning {
                // Learning mode: the clients have not all come back yet, so
                // what they want and hold is not known; ask as before the
                // new term, and report at least what was held then, while
                // that lasts. Once it has ended, what was asked then is
                // another term's (this task may have been master long
                // before) and says nothing of the subtree now.
                if let Some(before) = sent.get(&id).filter(|b| !b.partial && b.lasts(now)) {
                    out.push(ServerResourceRequest {
                        has: reported(Lease::larger(has, before.has)),
                        resource_id: id,
                        bands: before.bands.clone(),
                    });
                    continue;
                }
            }
            if bands.is_empty() {
                sent.remove(&id);
                continue;
            }
            sent.insert(
                id.clone(),
                Sent {
                    bands: bands.clone(),
                    has,
                    answered: false,
                    partial: learning,
                    beyond: self.beyond(&id, now, held),
                },
            );
            out.push(ServerResourceRequest {
                has: reported(has),
                resource_id: id,
                bands,
            });
        }
        // Resources forgotten at a new term whose clients have not come
        // back: keep asking as before while learning mode lasts.
        if let Some(since) = since {
            sent.retain(|id, before| {
                if seen.contains(id) {
                    return true;
                }
                let learning = learning(id, since);
                if learning {
                    out.push(ServerResourceRequest {
                        has: reported(Lease::larger(
                            self.has(id, now, 0.0, None),
                            before.has.filter(|h| lasts(h, now)),
                        )),
                        resource_id: id.clone(),
                        bands: before.bands.clone(),
                    });
                }
                learning
            });
        }
        out
    }
}

impl Upstream for ParentLink {
    /// The capacity and algorithm resource `id` (bound to `template`) uses
    /// at `now`: the parent's grant while it lasts, else 0.
    fn effective(&self, id: &str, template: &Template, now: Timestamp) -> (AlgorithmConfig, f64) {
        let grants = self.grants.lock_unpoisoned();
        match grants.get(id) {
            Some(g) if g.expiry > now => {
                let mut algo = g
                    .algorithm
                    .clone()
                    .unwrap_or_else(|| template.algorithm.clone());
                algo.lease_length = algo.lease_length.min(g.expiry - now);
                algo.refresh_interval = self.decayed(g.refresh_interval).min(algo.lease_length);
                algo.learning_mode_duration = template.algorithm.learning_mode_duration;
                (algo, g.capacity)
            }
            _ => (template.algorithm.clone(), 0.0),
        }
    }

    /// Whether the parent's grant on `id` bounds what learning mode
    /// echoes at `now`: it is unexpired, and not an echo of a partial
    /// request (which says nothing about what the subtree may hold).
    fn bounds(&self, id: &str, now: Timestamp) -> bool {
        let grants = self.grants.lock_unpoisoned();
        grants.get(id).is_some_and(|g| g.expiry > now && !g.echo)
    }
}

/// `has` as sent: always present, a zero lease when nothing is held, so
/// that a parent can tell a server that knows it holds nothing (a new
/// master before its clients come back) from one that never reports
/// (Go's intermediates).
fn reported(has: Option<Lease>) -> Option<Lease> {
    Some(has.unwrap_or_default())
}

/// Whether `has` has not expired at `now`.
fn lasts(has: &Lease, now: Timestamp) -> bool {
    has.expiry > Duration::ZERO && has.expiry > now
}

impl Sent {
    /// Whether what the subtree held when this was sent may still be held
    /// at `now`.
    fn lasts(&self, now: Timestamp) -> bool {
        self.has.is_some_and(|h| lasts(&h, now))
    }
}

/// One GetServerCapacity round at the parent's master, following up to
/// two redirects; returns the wait until the next.
pub(super) async fn ask(
    upstream: &ParentLink,
    resources: Vec<pb::ServerCapacityResourceRequest>,
) -> Result<Duration, SessionError> {
    let request = pb::GetServerCapacityRequest {
        server_id: upstream.parent.server_id.clone(),
        resource: resources,
    };
    let response = upstream
        .session
        .call(|t, address| t.get_server_capacity(address, request.clone()))
        .await?;
    debug!(resources = response.response.len(), "parent granted");
    Ok(upstream.record(response))
}

/// Polls the parent for as long as the server lives.
pub(super) async fn poll(weak: WeakServer) {
    loop {
        let wait = {
            let Some(server) = weak.upgrade() else { return };
            let Some(link) = server.upstream_link() else {
                return;
            };
            let resources = server.upstream_requests(link, server.now());
            if resources.is_empty() {
                IDLE
            } else {
                match ask(link, wire::to_server_resources(resources)).await {
                    Ok(next) => next,
                    Err(e) => {
                        warn!(error = %e, "parent did not answer");
                        IDLE
                    }
                }
            }
        };
        tokio::time::sleep(wait).await;
    }
}

#[cfg(test)]
mod tests;
