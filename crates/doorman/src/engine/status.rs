//! What the engine shows of its resources: the status page's rows, the
//! per-resource gauges of `/metrics`, and, on an intermediate server, each
//! resource's report to the parent.

use std::collections::BTreeMap;

use super::{Began, Engine, ResourceState, Upstream};
use crate::algorithm::Kind;
use crate::lease::{Band, Timestamp};
use crate::metrics::{Gauges, ResourceGauges};
use tollgate_service::LockUnpoisoned;

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

/// One resource as an intermediate server reports it to its parent.
#[derive(Debug)]
pub(crate) struct Report {
    /// The resource id.
    pub(crate) id: String,
    /// Its unexpired leases' wants and subclients, one band per priority,
    /// by priority; empty when no lease is left.
    pub(crate) bands: Vec<Band>,
    /// What its leases and holds occupy (`sum_has`).
    pub(crate) held: f64,
    /// When the last of its leases ends.
    pub(crate) until: Option<Timestamp>,
    /// Whether it is in learning mode.
    pub(crate) learning: bool,
}

impl Engine {
    /// A snapshot of every resource at `now`, sorted by id; `since` is the
    /// term in force (`None` while not master).
    pub(crate) fn status(
        &self,
        now: Timestamp,
        since: Option<Began>,
        upstream: Option<&dyn Upstream>,
    ) -> Vec<ResourceStatus> {
        let mut out: Vec<ResourceStatus> = self
            .entries()
            .into_iter()
            .map(|(id, entry)| {
                let state = entry.lock_unpoisoned();
                ResourceStatus {
                    glob: state.template.glob.as_str().to_owned(),
                    capacity: state.capacity(&id, now, upstream),
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

    /// Every resource's gauges at `now`, as `/metrics` writes them.
    pub(crate) fn gauges(
        &self,
        now: Timestamp,
        since: Option<Began>,
        upstream: Option<&dyn Upstream>,
    ) -> ResourceGauges {
        let entries = self.entries();
        let mut gauges = ResourceGauges::with_capacity(entries.len());
        for (id, entry) in entries {
            let state = entry.lock_unpoisoned();
            let row = Gauges {
                has: state.store.sum_has(),
                wants: state.store.sum_wants(),
                subclients: state.store.count(),
                capacity: state.capacity(&id, now, upstream),
                learning: since.is_some_and(|s| state.learning(now, s)),
            };
            drop(state);
            gauges.push(id, row);
        }
        gauges
    }

    /// Each resource's report at `now`, its expired leases dropped, in the
    /// term `since` (`None` while not master). Forgets the priorities of
    /// clients whose leases are gone.
    pub(crate) fn reports(&self, now: Timestamp, since: Option<Began>) -> Vec<Report> {
        let entries = self.entries();
        let mut out = Vec::with_capacity(entries.len());
        for (id, entry) in entries {
            let mut state = entry.lock_unpoisoned();
            state.store.sweep(now);
            let mut bands: BTreeMap<i64, Band> = BTreeMap::new();
            for (client, lease) in state.store.iter() {
                let priority = state.priorities.get(client).copied().unwrap_or(0);
                let band = bands.entry(priority).or_insert(Band {
                    priority,
                    num_clients: 0,
                    wants: 0.0,
                });
                band.num_clients = band.num_clients.saturating_add(lease.subclients);
                band.wants += lease.wants;
            }
            let ResourceState {
                store, priorities, ..
            } = &mut *state;
            priorities.retain(|client, _| store.get(client).is_some());
            out.push(Report {
                bands: bands.into_values().collect(),
                held: state.store.sum_has(),
                until: state.store.last_expiry(),
                learning: since.is_some_and(|s| state.learning(now, s)),
                id,
            });
        }
        out
    }

    /// Whether a resource `id` would be in learning mode at `now` in a term
    /// that began at `since`, by the template it matches (false when none
    /// does).
    pub(crate) fn learning_by_template(&self, id: &str, now: Timestamp, since: Began) -> bool {
        self.snapshot()
            .config
            .find(id)
            .is_some_and(|t| now < since.learning_ends(t.learning_mode()))
    }
}

impl ResourceState {
    /// The capacity to share at `now`: the template's, or on an
    /// intermediate server what the parent granted.
    fn capacity(&self, id: &str, now: Timestamp, upstream: Option<&dyn Upstream>) -> f64 {
        match upstream {
            Some(u) => u.effective(id, &self.template, now).1,
            None => self.template.capacity,
        }
    }
}
