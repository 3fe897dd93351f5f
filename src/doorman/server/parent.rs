//! An intermediate server's link to its parent: what it asks for, what it
//! got, and the capacity and lease timings its own clients see.
//!
//! # Implementation notes
//!
//! A poller task sums, per resource, the wants and subclients of this
//! server's unexpired leases into priority bands and sends them to the
//! parent in one GetServerCapacity, with the lease it holds from the parent
//! as `has`. Each grant becomes, for that resource only, an exact-name
//! template: capacity = the grant, algorithm and lease length = the parent's,
//! refresh interval = the parent's times the decay factor (0.5 by default:
//! the interval halves at each level up the tree, as the design doc asks and
//! Go never did), whole seconds, at least one.
//!
//! Leases handed out never outlive the parent's: a lease's length is capped
//! at what is left of the parent's lease, and once that has expired the
//! resource's capacity is 0. Until the first grant arrives it is 0 too, so a
//! new intermediate first grants nothing (protocol §3).
//!
//! After a new mastership term the clients come back one by one, so while
//! a resource is in learning mode the poller sends the bands it sent before
//! the term rather than the partial sums; and learning mode echoes a
//! client's `has` only as far as the grant reaches (capacity minus what
//! other leases hold), since the parent may have cut the grant meanwhile
//! (before the first grant of the term there is no bound to apply, and the
//! echo is whole: the clients hold those leases already). Both keep a subtree that lost its master from holding more than its
//! parent gives it (scenario 7 of `tollgate simulate`). On the parent's
//! side, a server that asks with less `has` than its unexpired lease there
//! has forgotten it (a new master with an empty state); the parent answers
//! it with that lease, as in learning mode, for a learning mode's length,
//! rather than hand the lease to others while the subtree still holds it.
//!
//! The poller asks again after the shortest refresh interval the parent
//! gave (at least one second), follows the parent's mastership redirects,
//! and retries every second when the parent cannot be reached.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Mutex, PoisonError, Weak};
use std::time::Duration;

use std::sync::Arc;

use tracing::{debug, warn};

use super::super::algorithm::{AlgorithmConfig, Kind};
use super::super::config::Template;
use super::super::pb;
use super::super::store::Timestamp;
use super::super::transport::Transport;
use super::{Inner, Server};

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
    capacity: f64,
    expiry: Timestamp,
    refresh_interval: Duration,
    algorithm: Option<AlgorithmConfig>,
}

/// An intermediate server's state about its parent.
#[derive(Debug)]
pub(super) struct Upstream {
    parent: Parent,
    /// Where the parent's master is, after redirects.
    address: Mutex<String>,
    grants: Mutex<HashMap<String, Grant>>,
    /// The bands last sent per resource outside learning mode.
    sent: Mutex<HashMap<String, Vec<pb::PriorityBandAggregate>>>,
    transport: Arc<dyn Transport>,
}

/// How long the poller waits when it has nothing to ask or the parent
/// failed.
const IDLE: Duration = Duration::from_secs(1);

/// The per-call deadline for GetServerCapacity.
pub(super) const DEADLINE: Duration = Duration::from_secs(5);

impl Upstream {
    pub(super) fn new(parent: Parent, transport: Arc<dyn Transport>) -> Upstream {
        Upstream {
            address: Mutex::new(parent.address.clone()),
            parent,
            grants: Mutex::new(HashMap::new()),
            sent: Mutex::new(HashMap::new()),
            transport,
        }
    }

    /// The capacity and algorithm resource `id` (bound to `template`) uses
    /// at `now`: the parent's grant while it lasts, else 0.
    pub(super) fn effective(
        &self,
        id: &str,
        template: &Template,
        now: Timestamp,
    ) -> (AlgorithmConfig, f64) {
        let grants = self.grants.lock().unwrap_or_else(PoisonError::into_inner);
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

    /// Whether the parent's grant on `id` is known and unexpired at `now`.
    pub(super) fn granted(&self, id: &str, now: Timestamp) -> bool {
        self.has(id, now).is_some()
    }

    /// `refresh` times the decay factor, in whole seconds, at least one.
    fn decayed(&self, refresh: Duration) -> Duration {
        let secs = (refresh.as_secs_f64() * self.parent.decay_factor).round();
        Duration::from_secs(secs.max(1.0) as u64)
    }

    /// The lease held from the parent on `id`, as sent back in `has`.
    fn has(&self, id: &str, now: Timestamp) -> Option<pb::Lease> {
        let grants = self.grants.lock().unwrap_or_else(PoisonError::into_inner);
        grants
            .get(id)
            .filter(|g| g.expiry > now)
            .map(|g| pb::Lease {
                expiry_time: g.expiry.as_secs() as i64,
                refresh_interval: g.refresh_interval.as_secs() as i64,
                capacity: g.capacity,
            })
    }

    /// Records the parent's answer; returns the shortest refresh interval.
    fn record(&self, response: pb::GetServerCapacityResponse) -> Duration {
        let mut grants = self.grants.lock().unwrap_or_else(PoisonError::into_inner);
        let mut next = None::<Duration>;
        for r in response.response {
            let refresh = Duration::from_secs(r.gets.refresh_interval.max(1) as u64);
            next = Some(next.map_or(refresh, |n| n.min(refresh)));
            let algorithm = r.algorithm.as_ref().and_then(algorithm);
            grants.insert(
                r.resource_id,
                Grant {
                    capacity: r.gets.capacity.max(0.0),
                    expiry: Duration::from_secs(r.gets.expiry_time.max(0) as u64),
                    refresh_interval: refresh,
                    algorithm,
                },
            );
        }
        next.unwrap_or(IDLE)
    }
}

/// The parent's algorithm as a local one; `None` for an unknown kind.
fn algorithm(a: &pb::Algorithm) -> Option<AlgorithmConfig> {
    let kind: Kind = pb::algorithm::Kind::try_from(a.kind).ok()?.into();
    Some(AlgorithmConfig::new(
        kind,
        Duration::from_secs(a.lease_length.max(1) as u64),
        Duration::from_secs(a.refresh_interval.max(1) as u64),
    ))
}

impl Server {
    /// Per resource with clients: its priority bands and the lease held
    /// from the parent.
    fn upstream_requests(
        &self,
        upstream: &Upstream,
        now: Timestamp,
    ) -> Vec<pb::ServerCapacityResourceRequest> {
        let entries = self.entries();
        let since = self
            .inner
            .view
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .since;
        let mut sent = upstream.sent.lock().unwrap_or_else(PoisonError::into_inner);
        let mut out = Vec::new();
        let mut seen = std::collections::HashSet::new();
        for (id, entry) in entries {
            seen.insert(id.clone());
            let mut state = super::lock(&entry.state);
            if since.is_some_and(|s| state.learning(now, s)) {
                // Learning mode: the clients have not all come back yet, so
                // what they want is not known; ask as before the new term.
                if let Some(bands) = sent.get(&id) {
                    out.push(pb::ServerCapacityResourceRequest {
                        has: upstream.has(&id, now),
                        resource_id: id,
                        wants: bands.clone(),
                    });
                    continue;
                }
            }
            state.store.sweep(now);
            let mut bands: BTreeMap<i64, (i64, f64)> = BTreeMap::new();
            for (client, lease) in state.store.iter() {
                let priority = state.priorities.get(client).copied().unwrap_or(0);
                let band = bands.entry(priority).or_default();
                band.0 += lease.subclients as i64;
                band.1 += lease.wants;
            }
            let live: Vec<&str> = state.store.iter().map(|(c, _)| c).collect();
            let keep: std::collections::HashSet<&str> = live.into_iter().collect();
            let stale: Vec<String> = state
                .priorities
                .keys()
                .filter(|c| !keep.contains(c.as_str()))
                .cloned()
                .collect();
            for c in stale {
                state.priorities.remove(&c);
            }
            if bands.is_empty() {
                sent.remove(&id);
                continue;
            }
            let bands: Vec<_> = bands
                .into_iter()
                .map(
                    |(priority, (num_clients, wants))| pb::PriorityBandAggregate {
                        priority,
                        num_clients,
                        wants,
                    },
                )
                .collect();
            sent.insert(id.clone(), bands.clone());
            out.push(pb::ServerCapacityResourceRequest {
                has: upstream.has(&id, now),
                resource_id: id,
                wants: bands,
            });
        }
        // Resources forgotten at a new term whose clients have not come
        // back: keep asking as before while learning mode lasts.
        if let Some(s) = since {
            let snapshot = self.snapshot();
            sent.retain(|id, bands| {
                if seen.contains(id) {
                    return true;
                }
                let learning = snapshot
                    .config
                    .find(id)
                    .is_some_and(|t| now < s + t.learning_mode());
                if learning {
                    out.push(pb::ServerCapacityResourceRequest {
                        has: upstream.has(id, now),
                        resource_id: id.clone(),
                        wants: bands.clone(),
                    });
                }
                learning
            });
        }
        out
    }
}

/// Polls the parent for as long as the server lives.
pub(super) async fn poll(weak: Weak<Inner>) {
    loop {
        let wait = {
            let Some(inner) = weak.upgrade() else { return };
            let server = Server { inner };
            let Some(upstream) = server.inner.upstream.as_ref() else {
                return;
            };
            let now = server.inner.clock.now();
            let resources = server.upstream_requests(upstream, now);
            if resources.is_empty() {
                IDLE
            } else {
                match ask(upstream, resources).await {
                    Ok(next) => next,
                    Err(e) => {
                        warn!(error = e, "parent did not answer");
                        IDLE
                    }
                }
            }
        };
        tokio::time::sleep(wait).await;
    }
}

/// One GetServerCapacity round, following up to three redirects.
async fn ask(
    upstream: &Upstream,
    resources: Vec<pb::ServerCapacityResourceRequest>,
) -> Result<Duration, String> {
    for _ in 0..3 {
        let address = upstream
            .address
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        let call = upstream.transport.get_server_capacity(
            &address,
            pb::GetServerCapacityRequest {
                server_id: upstream.parent.server_id.clone(),
                resource: resources.clone(),
            },
        );
        let response = match tokio::time::timeout(DEADLINE, call).await {
            Ok(Ok(r)) => r,
            Ok(Err(status)) => {
                upstream.transport.forget(&address);
                return Err(format!("{address}: {status}"));
            }
            Err(_) => {
                upstream.transport.forget(&address);
                return Err(format!("{address}: deadline exceeded"));
            }
        };
        match &response.mastership {
            None => {
                debug!(resources = response.response.len(), "parent granted");
                return Ok(upstream.record(response));
            }
            Some(pb::Mastership {
                master_address: Some(m),
            }) => {
                debug!(master = m, "parent redirects");
                *upstream
                    .address
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner) = m.clone();
            }
            Some(_) => return Err(format!("{address}: the parent's master is unknown")),
        }
    }
    Err("too many redirects".into())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::doorman::config::Config;

    const T: u64 = 1_700_000_000;

    fn upstream(decay_factor: f64) -> Upstream {
        Upstream::new(
            Parent {
                address: "parent:1".into(),
                server_id: "mid".into(),
                decay_factor,
            },
            Arc::new(crate::doorman::transport::Grpc::new(DEADLINE)),
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
        let config = Config::builtin();
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
        let has = u.has("r", at(10)).unwrap();
        assert_eq!((has.capacity, has.expiry_time), (40.0, (T + 30) as i64));
        assert_eq!(u.effective("r", template, at(30)).1, 0.0, "expired");
        assert!(u.has("r", at(30)).is_none());
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
