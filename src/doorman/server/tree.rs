//! The server's side of a server tree: what an intermediate server's
//! poller (`parent.rs`) reads of it.

use std::collections::BTreeMap;
use std::sync::Weak;

use super::super::lease::{Band, Timestamp};
use super::super::poison::{LockUnpoisoned, RwLockUnpoisoned};
use super::resources::EntryState;
use super::{Inner, Server};

/// A server that its own background tasks hold without keeping it alive.
#[derive(Debug, Clone)]
pub(super) struct WeakServer(pub(super) Weak<Inner>);

impl WeakServer {
    /// The server, unless it is gone.
    pub(super) fn upgrade(&self) -> Option<Server> {
        self.0.upgrade().map(|inner| Server { inner })
    }
}

/// One resource as an intermediate server reports it to its parent.
#[derive(Debug)]
pub(super) struct Demand {
    /// The resource id.
    pub(super) id: String,
    /// Its unexpired leases' wants and subclients, one band per priority,
    /// by priority; empty when no lease is left.
    pub(super) bands: Vec<Band>,
    /// What its leases and holds occupy (`sum_has`).
    pub(super) held: f64,
    /// When the last of its leases ends.
    pub(super) until: Option<Timestamp>,
    /// Whether it is in learning mode.
    pub(super) learning: bool,
}

impl Server {
    /// The time on the server's clock.
    pub(super) fn now(&self) -> Timestamp {
        self.inner.clock.now()
    }

    /// Each resource's demand at `now`, its expired leases dropped, with
    /// when this server's current term began (`None` while not master).
    /// Forgets the priorities of clients whose leases are gone.
    pub(super) fn demands(&self, now: Timestamp) -> (Option<Timestamp>, Vec<Demand>) {
        let since = self.inner.view.read_unpoisoned().since;
        let entries = self.entries();
        let mut out = Vec::with_capacity(entries.len());
        for (id, entry) in entries {
            let mut state = entry.state.lock_unpoisoned();
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
            let EntryState {
                store, priorities, ..
            } = &mut *state;
            priorities.retain(|client, _| store.get(client).is_some());
            out.push(Demand {
                bands: bands.into_values().collect(),
                held: state.store.sum_has(),
                until: state.store.last_expiry(),
                learning: since.is_some_and(|s| state.learning(now, s)),
                id,
            });
        }
        (since, out)
    }

    /// Whether a resource `id` would be in learning mode at `now` in a term
    /// that began at `since`, by the template it matches (false when none
    /// does).
    pub(super) fn learning_by_template(&self, id: &str, now: Timestamp, since: Timestamp) -> bool {
        self.snapshot()
            .config
            .find(id)
            .is_some_and(|t| now < since + t.learning_mode())
    }
}
