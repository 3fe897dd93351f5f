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
mod tests {
    use super::*;
    use crate::algorithm::Kind;
    use crate::Server;
    use crate::ServerConfig;

    use crate::server::testing::{ask, at, T};

    fn upstream(decay_factor: f64) -> ParentLink {
        ParentLink::new(
            Parent {
                address: "parent:1".into(),
                server_id: "mid".into(),
                decay_factor,
            },
            Arc::new(crate::transport::Grpc::with_tls(DEADLINE, None)),
        )
    }

    fn grant(capacity: f64, expiry: u64, refresh: i64) -> pb::GetServerCapacityResponse {
        pb::GetServerCapacityResponse {
            response: vec![pb::ServerCapacityResourceResponse {
                resource_id: "r".into(),
                gets: pb::Lease {
                    expiry_time: expiry as i64,
                    refresh_interval: refresh,
                    capacity,
                },
                algorithm: Some(pb::Algorithm::from(&AlgorithmConfig::new(
                    Kind::ProportionalShare,
                    Duration::from_secs(60),
                    Duration::from_secs(refresh as u64),
                ))),
                safe_capacity: None,
            }],
            mastership: None,
        }
    }

    #[test]
    fn a_grant_becomes_the_capacity_with_the_parents_algorithm_and_a_capped_lease() {
        let config = ServerConfig::builtin();
        let template = config.find("r").unwrap();
        let u = upstream(0.5);
        let at = |s: u64| Duration::from_secs(T + s);
        assert_eq!(u.effective("r", template, at(0)).1, 0.0, "no grant yet");
        assert_eq!(u.record(grant(40.0, T + 30, 8)), Duration::from_secs(8));
        let (algo, capacity) = u.effective("r", template, at(10));
        assert_eq!(capacity, 40.0);
        assert_eq!(algo.kind, Kind::ProportionalShare);
        assert_eq!(algo.lease_length, Duration::from_secs(20), "ends with ours");
        assert_eq!(algo.refresh_interval, Duration::from_secs(4), "8 s halved");
        let has = pb::Lease::from(u.has("r", at(10), 0.0, None).unwrap());
        assert_eq!((has.capacity, has.expiry_time), (40.0, (T + 30) as i64));
        assert_eq!(u.effective("r", template, at(30)).1, 0.0, "expired");
        assert!(u.has("r", at(30), 0.0, None).is_none());
    }

    #[test]
    fn has_is_the_larger_of_the_lease_and_what_the_subtree_holds() {
        let u = upstream(0.5);
        let at = |s: u64| Duration::from_secs(T + s);
        let lease = |capacity: f64, expiry: u64, refresh: u64| Lease {
            capacity,
            expiry: Duration::from_secs(T + expiry),
            refresh_interval: Duration::from_secs(refresh),
        };
        assert_eq!(
            u.has("r", at(0), 5.0, Some(at(20))),
            Some(lease(5.0, 20, 0))
        );
        assert_eq!(u.has("r", at(0), 5.0, Some(at(0))), None, "all ended");
        u.record(grant(40.0, T + 30, 8));
        assert_eq!(u.has("r", at(10), 0.0, None), Some(lease(40.0, 30, 8)));
        assert_eq!(
            u.has("r", at(10), 10.0, Some(at(30))),
            Some(lease(40.0, 30, 8))
        );
        assert_eq!(
            u.has("r", at(10), 55.0, Some(at(25))),
            Some(lease(55.0, 30, 8))
        );
    }

    /// An election switched by hand.
    #[derive(Debug)]
    struct Switch(tokio::sync::watch::Sender<crate::election::Mastership>);

    impl crate::election::Election for Switch {
        fn subscribe(&self) -> tokio::sync::watch::Receiver<crate::election::Mastership> {
            self.0.subscribe()
        }
    }

    impl Switch {
        fn master() -> Switch {
            Switch(tokio::sync::watch::Sender::new(
                crate::election::Mastership::master(None),
            ))
        }

        /// Loses mastership and wins it again: a new term.
        fn reelect(&self, server: &Server) {
            use crate::election::Mastership;
            self.0.send_replace(Mastership::follower(None));
            self.0.send_replace(Mastership::master(None));
            let _ = server.current_mastership();
        }
    }

    /// A root of 100 units without learning mode, and an intermediate with
    /// 10 s of it, on one manual clock at `T`.
    fn tree() -> (
        Server,
        Server,
        Switch,
        std::sync::Arc<tollgate::ManualClock>,
    ) {
        tree_learning(10)
    }

    /// As [`tree`], with `learning` seconds of learning mode on the
    /// intermediate.
    fn tree_learning(
        learning: u64,
    ) -> (
        Server,
        Server,
        Switch,
        std::sync::Arc<tollgate::ManualClock>,
    ) {
        tree_with(0, learning)
    }

    /// As [`tree`], with `root_learning` and `learning` seconds of
    /// learning mode on the root and the intermediate.
    fn tree_with(
        root_learning: u64,
        learning: u64,
    ) -> (
        Server,
        Server,
        Switch,
        std::sync::Arc<tollgate::ManualClock>,
    ) {
        use tollgate::ManualClock;
        let clock = std::sync::Arc::new({
            let clock = ManualClock::new();
            clock.advance(Duration::from_secs(T));
            clock
        });
        let yaml = |capacity, learning| {
            format!(
                r#"
resources:
  - identifier_glob: "*"
    capacity: {capacity}
    algorithm: {{kind: FAIR_SHARE, lease_length: 60, refresh_interval: 8, learning_mode_duration: {learning}}}
"#
            )
        };
        let root = Server::builder(ServerConfig::from_yaml(&yaml(100, root_learning)).unwrap())
            .election(&Switch::master())
            .clock(clock.clone())
            .build();
        let switch = Switch::master();
        let mid = Server::builder(ServerConfig::from_yaml(&yaml(0, learning)).unwrap())
            .election(&switch)
            .clock(clock.clone())
            .parent(Parent {
                address: String::new(),
                server_id: "mid".into(),
                decay_factor: 0.5,
            })
            .build();
        (root, mid, switch, clock)
    }

    /// One poll of `root` by `mid`, in-process; returns the `has` sent.
    fn poll(mid: &Server, root: &Server) -> Option<pb::Lease> {
        poll_and_wait(mid, root).0
    }

    /// One poll of `root` by `mid`; returns the `has` sent and how long
    /// the poller waits before the next.
    fn poll_and_wait(mid: &Server, root: &Server) -> (Option<pb::Lease>, Duration) {
        let upstream = mid.upstream_link().unwrap();
        let resource = wire::to_server_resources(mid.upstream_requests(upstream, mid.now()));
        let has = resource.first().and_then(|r| r.has);
        let response = root
            .get_server_capacity(pb::GetServerCapacityRequest {
                server_id: "mid".into(),
                resource,
            })
            .unwrap();
        (has, upstream.record(response))
    }

    /// Client `id` asks `server` for `wants`, saying it has `has`.
    fn get(server: &Server, id: &str, wants: f64, has: Option<f64>) -> f64 {
        let response = server
            .get_capacity(pb::GetCapacityRequest {
                client_id: id.into(),
                resource: vec![pb::ResourceRequest {
                    resource_id: "r".into(),
                    priority: 0,
                    has: has.map(|capacity| pb::Lease {
                        expiry_time: 0,
                        refresh_interval: 0,
                        capacity,
                    }),
                    wants,
                }],
            })
            .unwrap();
        response.response[0].gets.capacity
    }

    fn held(server: &Server) -> f64 {
        server.status()[0].sum_has
    }

    fn sent(has: Option<pb::Lease>) -> (f64, u64) {
        let has = has.expect("a has is sent");
        (has.capacity, has.expiry_time as u64 - T)
    }

    #[test]
    fn a_cut_intermediate_reports_what_its_clients_hold_even_across_a_new_term() {
        let (root, mid, switch, clock) = tree();
        at(&clock, 10);
        assert_eq!(get(&mid, "c1", 60.0, None), 0.0, "no grant yet");
        assert_eq!(
            poll(&mid, &root),
            Some(pb::Lease::default()),
            "nothing held"
        );
        assert_eq!(get(&mid, "c1", 60.0, Some(0.0)), 60.0);
        at(&clock, 11);
        assert_eq!(ask(&root, "other", 100.0, None), 40.0);
        // The root cuts mid to its fair 50 while c1 holds 60: 10 stays
        // held for mid, and other still gets only 40.
        at(&clock, 18);
        assert_eq!(sent(poll(&mid, &root)), (60.0, 70));
        assert_eq!(held(&root), 100.0);
        at(&clock, 19);
        assert_eq!(ask(&root, "other", 100.0, None), 40.0);
        // mid starts a new term before telling c1: it forgot c1, but still
        // reports the 60 it reported before, so the root still holds 10.
        at(&clock, 20);
        switch.reelect(&mid);
        assert_eq!(sent(poll(&mid, &root)), (60.0, 78));
        assert_eq!(held(&root), 100.0);
        at(&clock, 21);
        assert_eq!(ask(&root, "other", 100.0, None), 40.0);
        // c1 comes back: learning mode echoes its 60 only up to the 50
        // granted.
        assert_eq!(get(&mid, "c1", 60.0, Some(60.0)), 50.0);
        at(&clock, 26);
        assert_eq!(sent(poll(&mid, &root)), (60.0, 80), "still learning");
        // Learning over, mid reports what c1 holds; other gets its share.
        at(&clock, 30);
        assert_eq!(sent(poll(&mid, &root)), (50.0, 86));
        assert_eq!(held(&root), 90.0);
        at(&clock, 31);
        assert_eq!(ask(&root, "other", 100.0, None), 50.0);
    }

    #[test]
    fn a_new_term_reports_what_was_held_until_the_grant_that_answered_it_ends() {
        let (root, mid, switch, clock) = tree_learning(60);
        at(&clock, 70);
        assert_eq!(get(&mid, "c1", 60.0, None), 0.0, "no grant yet");
        assert_eq!(poll(&mid, &root), Some(pb::Lease::default()));
        assert_eq!(get(&mid, "c1", 60.0, Some(0.0)), 60.0);
        // mid reports c1's 60 until 130; the grant that answers lasts until
        // 138, and c1 renews under it.
        at(&clock, 78);
        assert_eq!(sent(poll(&mid, &root)), (60.0, 130));
        at(&clock, 79);
        assert_eq!(get(&mid, "c1", 60.0, Some(60.0)), 60.0);
        // A new term forgets c1, which does not come back. The root cuts
        // mid to 50 for "other" and holds 10 of c1's 60.
        at(&clock, 80);
        switch.reelect(&mid);
        at(&clock, 81);
        assert_eq!(ask(&root, "other", 100.0, None), 40.0);
        at(&clock, 86);
        assert_eq!(sent(poll(&mid, &root)), (60.0, 138));
        assert_eq!(held(&root), 100.0);
        // After what mid reported before the term ran out (130), but while
        // the grant that answered it lasts (138), mid still reports 60.
        at(&clock, 132);
        assert_eq!(sent(poll(&mid, &root)).0, 60.0);
        assert_eq!(held(&root), 100.0);
        assert_eq!(ask(&root, "other", 100.0, Some((40.0, 141))), 40.0);
        // Then no longer.
        at(&clock, 139);
        assert_eq!(sent(poll(&mid, &root)).0, 50.0);
        assert_eq!(ask(&root, "other", 100.0, Some((40.0, 141))), 50.0);
    }

    #[test]
    fn a_cut_passed_down_is_reported_up_until_the_child_follows() {
        let (root, mid, _switch, clock) = tree();
        at(&clock, 10);
        assert_eq!(ask(&mid, "dc", 80.0, None), 0.0);
        poll(&mid, &root);
        assert_eq!(ask(&mid, "dc", 80.0, None), 80.0);
        assert_eq!(ask(&root, "other", 100.0, None), 20.0);
        // The root cuts mid to 50, and mid cuts dc, whose clients still
        // hold 80: mid holds 30 for dc and reports 80, not its lease of 50,
        // so the root keeps holding 30 for mid.
        at(&clock, 18);
        assert_eq!(sent(poll(&mid, &root)), (80.0, 70));
        at(&clock, 19);
        assert_eq!(ask(&mid, "dc", 80.0, Some((80.0, 70))), 50.0);
        assert_eq!(held(&mid), 80.0);
        at(&clock, 26);
        assert_eq!(sent(poll(&mid, &root)), (80.0, 78));
        assert_eq!(held(&root), 100.0);
        assert_eq!(ask(&root, "other", 100.0, None), 20.0);
        // dc's clients follow; so does the root.
        at(&clock, 27);
        assert_eq!(ask(&mid, "dc", 80.0, Some((50.0, 78))), 50.0);
        at(&clock, 34);
        assert_eq!(sent(poll(&mid, &root)), (50.0, 86));
        assert_eq!(held(&root), 70.0);
        assert_eq!(ask(&root, "other", 100.0, None), 50.0);
    }

    #[test]
    fn an_intermediate_in_learning_mode_holds_what_a_child_server_reports_beyond_its_grant() {
        let (root, mid, switch, clock) = tree();
        at(&clock, 10);
        assert_eq!(ask(&mid, "dc", 80.0, None), 0.0);
        poll(&mid, &root);
        assert_eq!(ask(&mid, "dc", 80.0, None), 80.0);
        assert_eq!(ask(&root, "other", 100.0, None), 20.0);
        at(&clock, 18);
        assert_eq!(sent(poll(&mid, &root)), (80.0, 70));
        assert_eq!(held(&root), 100.0, "mid cut to 50, 30 held");
        // A new term at mid: dc says its subtree holds 80; mid echoes the
        // 50 it has and holds the other 30, and so reports 80 upwards.
        at(&clock, 20);
        switch.reelect(&mid);
        assert_eq!(ask(&mid, "dc", 80.0, Some((80.0, 70))), 50.0);
        assert_eq!(held(&mid), 80.0);
        assert_eq!(sent(poll(&mid, &root)), (80.0, 78));
        assert_eq!(held(&root), 100.0);
        // dc follows the cut; after learning mode mid reports 50.
        at(&clock, 30);
        assert_eq!(ask(&mid, "dc", 80.0, Some((50.0, 78))), 50.0);
        assert_eq!(held(&mid), 50.0);
        assert_eq!(sent(poll(&mid, &root)), (50.0, 80));
        assert_eq!(held(&root), 70.0);
    }

    #[test]
    fn a_parents_echo_of_a_partial_request_does_not_bound_a_new_master() {
        // A whole tree of new masters (after an etcd outage): the root and
        // mid both in learning mode, mid with nothing from before.
        let (root, mid, _switch, clock) = tree_with(60, 60);
        at(&clock, 10);
        assert_eq!(
            get(&mid, "c1", 40.0, Some(30.0)),
            30.0,
            "no grant: whole echo"
        );
        assert_eq!(sent(poll(&mid, &root)).0, 30.0);
        assert_eq!(held(&root), 30.0, "the root echoed c1's part");
        // c2 comes back with the 30 it held. The grant of 30 only echoed
        // what mid said; it bounds nothing, and c2 gets its 30 back.
        at(&clock, 11);
        assert_eq!(get(&mid, "c2", 40.0, Some(30.0)), 30.0);
        assert_eq!(sent(poll(&mid, &root)).0, 60.0);
        assert_eq!(held(&root), 60.0);
        // Once mid reports no more than its grant, the echo says what the
        // root holds for it, and bounds: a client claiming more than is
        // left gets what is left.
        at(&clock, 12);
        assert_eq!(sent(poll(&mid, &root)).0, 60.0);
        assert_eq!(get(&mid, "c3", 40.0, Some(10.0)), 0.0);
    }

    #[test]
    fn a_new_master_asks_again_once_the_rest_of_its_clients_are_back() {
        // A whole tree of new masters (after an etcd outage): mid asks the
        // root, in learning mode too, with the sums of the clients back so
        // far. It hands its clients 4 s (the root's 8 s halved), so the
        // others are back 4 s later: it asks again then, not after the
        // root's 8 s, and the root knows what the whole subtree wants
        // before its own learning mode ends and it divides the capacity.
        let (root, mid, _switch, clock) = tree_with(60, 60);
        let secs = Duration::from_secs;
        at(&clock, 10);
        assert_eq!(get(&mid, "c1", 40.0, Some(30.0)), 30.0);
        let (has, wait) = poll_and_wait(&mid, &root);
        assert_eq!((sent(has).0, wait), (30.0, secs(4)));
        at(&clock, 14);
        assert_eq!(get(&mid, "c2", 40.0, Some(30.0)), 30.0);
        let (has, wait) = poll_and_wait(&mid, &root);
        assert_eq!((sent(has).0, wait), (60.0, secs(4)));
        let wants = |root: &Server| {
            let lease = root.leases("r").unwrap()[0].1;
            (lease.wants, lease.subclients)
        };
        assert_eq!(wants(&root), (80.0, 2));
        // Learning mode over, mid's sums are whole: the root's interval.
        at(&clock, 60);
        let (_, wait) = poll_and_wait(&mid, &root);
        assert_eq!(wait, secs(8));
    }

    #[test]
    fn a_master_again_long_after_its_last_term_does_not_ask_as_it_did_then() {
        // After its learning mode, mid asks for c1's 60 and is granted it
        // until 121 s; it loses mastership, and wins again at 200 s with an
        // empty state, when only c2 (wanting 20, holding 10) is back.
        let (root, mid, switch, clock) = tree_learning(60);
        at(&clock, 61);
        assert_eq!(get(&mid, "c1", 60.0, Some(0.0)), 0.0);
        poll(&mid, &root);
        assert_eq!(get(&mid, "c1", 60.0, Some(0.0)), 60.0);
        at(&clock, 200);
        switch.reelect(&mid);
        assert_eq!(get(&mid, "c2", 20.0, Some(10.0)), 10.0);
        // What mid asked in its last term, and was granted, ended at 121 s:
        // it asks with c2's sums, not c1's 60 of then.
        poll(&mid, &root);
        let lease = root.leases("r").unwrap()[0].1;
        assert_eq!((lease.wants, lease.subclients), (20.0, 1));
    }

    #[test]
    fn refresh_intervals_decay_to_whole_seconds_of_at_least_one() {
        let u = upstream(0.5);
        assert_eq!(u.decayed(Duration::from_secs(1)), Duration::from_secs(1));
        assert_eq!(u.decayed(Duration::from_secs(5)), Duration::from_secs(3));
        let u = upstream(1.0);
        assert_eq!(u.decayed(Duration::from_secs(16)), Duration::from_secs(16));
    }
}
