//! The resources: each resource's leases behind its own lock, bound to the
//! configuration in force; reloads, the sweeper, and what the status page
//! and metrics read.
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
//! The sweeper drops expired leases and removes resources left with none.
//! Removal marks the entry `removed` under its lock while holding the map's
//! write lock, and a request that finds its entry removed looks it up again,
//! so no lease is ever stored in an entry that has left the map.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tracing::{debug, info, warn};

use super::state::{Began, Entry, EntryState, ResourceMap, Server, Snapshot};
use crate::algorithm::Kind;
use crate::config::ServerConfig;
use crate::error::RequestError;
use crate::lease::{ClientLease, Timestamp};
use crate::metrics::{Gauges, ResourceGauges};
use crate::store::Resource;
use tollgate_service::{LockUnpoisoned, RwLockUnpoisoned};

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

impl Server {
    /// Replaces the configuration, keeping every lease. Resources rebind to
    /// the new templates at once: a lease that would outlive the new lease
    /// length from now is cut to it, and a resource that no longer matches
    /// any template loses its leases (and is dropped by the next sweep).
    pub fn reload(&self, config: ServerConfig) {
        let mut slot = self.inner.config.write_unpoisoned();
        let generation = slot.generation + 1;
        let snapshot = Arc::new(Snapshot { config, generation });
        *slot = snapshot.clone();
        drop(slot);
        info!(generation, "configuration reloaded");
        self.inner.metrics.reloads.inc();
        // Rebind now rather than on the next request, so that a shorter
        // lease length cuts the leases from the moment of the reload.
        let now = self.inner.clock.now();
        for (id, entry) in self.entries() {
            let mut state = entry.state.lock_unpoisoned();
            if state.generation != snapshot.generation && state.rebind(&id, &snapshot, now).is_err()
            {
                state.store = Resource::new();
            }
        }
    }

    pub(super) fn snapshot(&self) -> Arc<Snapshot> {
        self.inner.config.read_unpoisoned().clone()
    }

    /// Drops every resource (and so every lease).
    pub(super) fn forget_all(&self) {
        let mut map = self.inner.resources.write_unpoisoned();
        for entry in map.values() {
            entry.state.lock_unpoisoned().removed = true;
        }
        map.clear();
    }

    /// Takes every resource out, to put aside while not master.
    pub(super) fn put_aside(&self) -> ResourceMap {
        std::mem::take(&mut *self.inner.resources.write_unpoisoned())
    }

    /// Puts back what [`Server::put_aside`] took, over whatever is there.
    pub(super) fn restore(&self, kept: ResourceMap) {
        self.forget_all();
        *self.inner.resources.write_unpoisoned() = kept;
    }

    /// The entry for `id`, created (bound to its template) if needed, locked
    /// and bound to the current configuration.
    pub(super) fn entry<R>(
        &self,
        id: &str,
        snapshot: &Snapshot,
        f: impl FnOnce(&mut EntryState) -> R,
    ) -> Result<R, RequestError> {
        loop {
            let existing = self.inner.resources.read_unpoisoned().get(id).cloned();
            let entry = match existing {
                Some(entry) => entry,
                None => {
                    let template = snapshot
                        .config
                        .find(id)
                        .ok_or_else(|| RequestError::UnknownResource(id.to_owned()))?;
                    let mut map = self.inner.resources.write_unpoisoned();
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
            let mut state = entry.state.lock_unpoisoned();
            if state.removed {
                continue;
            }
            if state.generation != snapshot.generation {
                state.rebind(id, snapshot, self.inner.clock.now())?;
            }
            return Ok(f(&mut state));
        }
    }

    /// A snapshot of the resource map, so no one holds its lock while
    /// taking the per-resource locks.
    pub(super) fn entries(&self) -> Vec<(String, Arc<Entry>)> {
        self.inner
            .resources
            .read_unpoisoned()
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
            let mut state = entry.state.lock_unpoisoned();
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
        let mut map = self.inner.resources.write_unpoisoned();
        let mut removed = 0;
        for id in idle {
            let Some(entry) = map.get(&id) else { continue };
            let mut state = entry.state.lock_unpoisoned();
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

    /// Counts a new configuration that was refused, for
    /// `doorman_server_config_reload_failures_total`.
    pub(crate) fn count_refused_reload(&self) {
        self.inner.metrics.reload_failures.inc();
    }

    /// A snapshot of every resource, sorted by id.
    pub fn status(&self) -> Vec<ResourceStatus> {
        let now = self.inner.clock.now();
        let since = self.inner.view.read_unpoisoned().since;
        let entries = self.entries();
        let mut out: Vec<ResourceStatus> = entries
            .into_iter()
            .map(|(id, entry)| {
                let state = entry.state.lock_unpoisoned();
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

    /// Every metric in Prometheus' text format, as `/metrics` serves it
    /// (the crate's `metrics` module lists them): the request and reload
    /// metrics, the refused connections, mastership, then one gauge per
    /// resource for its capacity, its sum of `has`, learning mode, its
    /// subclients and its sum of `wants`. Costs one lock per resource and
    /// memory of the order of the output.
    pub fn metrics_text(&self) -> String {
        let now = self.inner.clock.now();
        let since = self.inner.view.read_unpoisoned().since;
        let entries = self.entries();
        let mut gauges = ResourceGauges::with_capacity(entries.len());
        for (id, entry) in entries {
            let state = entry.state.lock_unpoisoned();
            let capacity = match &self.inner.upstream {
                Some(u) => u.effective(&id, &state.template, now).1,
                None => state.template.capacity,
            };
            let row = Gauges {
                has: state.store.sum_has(),
                wants: state.store.sum_wants(),
                subclients: state.store.count(),
                capacity,
                learning: since.is_some_and(|s| state.learning(now, s)),
            };
            drop(state);
            gauges.push(id, row);
        }
        let metrics = &self.inner.metrics;
        let mut out = metrics.encode();
        metrics.write_state(&mut out, self.current_mastership().is_master);
        gauges.write(&mut out);
        out
    }

    /// The leases on resource `id`, sorted by client, or `None` for a
    /// resource the server does not know.
    pub fn leases(&self, id: &str) -> Option<Vec<(String, ClientLease)>> {
        let entry = self.inner.resources.read_unpoisoned().get(id).cloned()?;
        let state = entry.state.lock_unpoisoned();
        let mut leases: Vec<_> = state
            .store
            .iter()
            .map(|(c, l)| (c.to_owned(), *l))
            .collect();
        leases.sort_by(|a, b| a.0.cmp(&b.0));
        Some(leases)
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

impl EntryState {
    /// Rebinds to the template `snapshot` gives `id`. Leases that would
    /// outlive the new lease length from `now` are cut to it.
    pub(super) fn rebind(
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

    /// Whether this resource is in learning mode at `now` in `term`.
    pub(super) fn learning(&self, now: Timestamp, term: Began) -> bool {
        now < term.learning_ends(self.template.learning_mode())
    }
}
