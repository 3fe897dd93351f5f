//! The server's side of a server tree: what an intermediate server reports
//! to its parent, and the task that polls the parent (`parent.rs` keeps
//! what was asked and granted).

use std::collections::BTreeMap;

use tracing::warn;

use super::parent::{self, Demand, Upstream};
use super::state::{Began, EntryState, Server, WeakServer};
use super::wire;
use crate::lease::{Band, ServerResourceRequest, Timestamp};
use tollgate_service::{LockUnpoisoned, RwLockUnpoisoned};

impl Server {
    /// The time on the server's clock.
    pub(super) fn now(&self) -> Timestamp {
        self.inner.clock.now()
    }

    /// Each resource's demand at `now`, its expired leases dropped, with
    /// when this server's current term began (`None` while not master).
    /// Forgets the priorities of clients whose leases are gone.
    pub(super) fn demands(&self, now: Timestamp) -> (Option<Began>, Vec<Demand>) {
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
    pub(super) fn learning_by_template(&self, id: &str, now: Timestamp, since: Began) -> bool {
        self.snapshot()
            .config
            .find(id)
            .is_some_and(|t| now < since.learning_ends(t.learning_mode()))
    }

    /// What to ask the parent for at `now` (see [`Upstream::requests`]).
    pub(super) fn upstream_requests(
        &self,
        upstream: &Upstream,
        now: Timestamp,
    ) -> Vec<ServerResourceRequest> {
        let (since, demands) = self.demands(now);
        upstream.requests(now, since, demands, |id, since| {
            self.learning_by_template(id, now, since)
        })
    }
}

/// Polls the parent for as long as the server lives.
pub(super) async fn poll(weak: WeakServer) {
    loop {
        let wait = {
            let Some(server) = weak.upgrade() else { return };
            let Some(upstream) = server.upstream_link() else {
                return;
            };
            let resources = server.upstream_requests(upstream, server.now());
            if resources.is_empty() {
                parent::IDLE
            } else {
                match parent::ask(upstream, wire::to_server_resources(resources)).await {
                    Ok(next) => next,
                    Err(e) => {
                        warn!(error = %e, "parent did not answer");
                        parent::IDLE
                    }
                }
            }
        };
        tokio::time::sleep(wait).await;
    }
}
