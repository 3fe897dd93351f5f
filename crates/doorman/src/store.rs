//! One resource's leases: who holds what, who wants what, until when.
//!
//! [`LeaseStore`] keeps the leases of one resource by client id, with the sums
//! the algorithms read (`sum_has`, `sum_wants`, `count`) and the two queries
//! they need ([`LeaseStore::water_level`], [`LeaseStore::demand_up_to`]), and
//! makes the decision for one request ([`LeaseStore::decide`]). It does no I/O
//! and reads no clock: time is passed in.
//!
//! A lease may carry a [`Hold`]: capacity the client's subtree still holds
//! beyond the lease (an intermediate server whose grant was cut while the
//! leases it handed out under the bigger grant run on). A hold counts in
//! `sum_has`, so the algorithms leave it to no one else, until it ends or is
//! replaced; the server decides when to set one.
//!
//! # Implementation notes
//!
//! A decision costs `O(log n)` (expected) in the number of leases `n`:
//!
//! * `ids` maps a client id to a *slot*; `entries[slot]` holds the lease.
//!   Freed slots are reused (`free`).
//! * `expiries` orders `(filed, slot)`, one per lease, where `filed` is at
//!   or before the lease's expiry: dropping expired leases costs `O(log n)`
//!   per lease dropped, not a scan. A refresh, which pushes the expiry
//!   later, leaves the record alone; when the sweep reaches a record whose
//!   lease was refreshed since, it files it again at its expiry. So a
//!   client refreshing many times a lease length costs the set one
//!   move per lease length, not two per refresh (at 10,000 clients the
//!   moves were most of a decision's cost). An expiry moved earlier is
//!   filed again at once. `holds` keeps `(until, slot)` exactly, for the
//!   holds, which end at or before their lease.
//! * `index` (see `index.rs`) is a treap of the slots ordered by wants per
//!   subclient, with subtree sums of wants, has and subclients. The running
//!   sums are its root's, and the water level and the under-askers' demand
//!   are one descent each. A slot's `has` there is what it *occupies*: its
//!   lease's `has` plus its hold.
//!
//! Float drift: the index recomputes every sum from its children instead of
//! adding and subtracting deltas, so no error accumulates over time; see
//! `index.rs`.

use std::collections::{BTreeSet, HashMap};

use self::index::{Demand, DemandIndex, Slot};
use super::algorithm::{non_negative, AlgorithmConfig, Request, ResourceView};
use super::lease::{ClientLease, Hold, Timestamp};

mod index;

#[derive(Clone, Debug)]
struct Entry {
    id: Box<str>,
    lease: ClientLease,
    hold: Option<Hold>,
    /// Where `expiries` has this lease: at or before its expiry.
    filed: Timestamp,
}

impl Entry {
    /// The values the index keeps: `has` is what the lease occupies.
    fn demand(&self) -> Demand {
        Demand {
            wants: self.lease.wants,
            has: self.lease.has + self.hold.map_or(0.0, |h| h.capacity),
            subclients: self.lease.subclients,
        }
    }
}

/// One resource's leases by client id, with running sums and the index the
/// algorithms query.
///
/// The engine keeps one per resource; `tests.rs` shows one in use
/// (`a_store_decides_sums_and_sweeps`).
#[derive(Clone, Debug, Default)]
pub(crate) struct LeaseStore {
    /// Hashed with foldhash, seeded per map: SipHash cost a decision
    /// several times what the lookup needs.
    ids: HashMap<Box<str>, Slot, foldhash::fast::RandomState>,
    /// By slot; `None` for a free slot.
    entries: Vec<Option<Entry>>,
    free: Vec<Slot>,
    expiries: BTreeSet<(Timestamp, Slot)>,
    /// `(until, slot)` of every hold.
    holds: BTreeSet<(Timestamp, Slot)>,
    index: DemandIndex,
}

impl LeaseStore {
    /// An empty resource.
    pub(crate) fn new() -> Self {
        Self::default()
    }

    /// The lease `client` holds, expired or not (expired leases stay until
    /// [`sweep`](Self::sweep) or the next [`decide`](Self::decide)).
    pub(crate) fn get(&self, client: &str) -> Option<&ClientLease> {
        let slot = *self.ids.get(client)?;
        self.entry(slot).map(|e| &e.lease)
    }

    #[cfg(test)]
    /// The hold on `client`'s lease, if any (an ended hold stays until
    /// [`sweep`](Self::sweep) or the next [`decide`](Self::decide)).
    pub(crate) fn hold_of(&self, client: &str) -> Option<Hold> {
        let slot = *self.ids.get(client)?;
        self.entry(slot)?.hold
    }

    /// The capacity `client` occupies: its lease's `has` plus its hold; 0
    /// without a lease. The algorithms count this, not `has`, as the
    /// client's part of `sum_has`.
    pub(crate) fn occupied(&self, client: &str) -> f64 {
        self.ids
            .get(client)
            .and_then(|&slot| self.entry(slot))
            .map_or(0.0, |e| e.demand().has)
    }

    /// The expiry of `client`'s lease and the capacity it occupies (see
    /// [`occupied`](Self::occupied)), in one lookup; `None` without a lease.
    pub(crate) fn expiry_and_occupied(&self, client: &str) -> Option<(Timestamp, f64)> {
        let entry = self.entry(*self.ids.get(client)?)?;
        Some((entry.lease.expiry, entry.demand().has))
    }

    /// Sets or, with `None`, removes the hold on `client`'s lease. A hold
    /// whose capacity is not positive and finite is none; one that would
    /// outlive the lease ends with it. Returns whether `client` has a lease.
    pub(crate) fn set_hold(&mut self, client: &str, hold: Option<Hold>) -> bool {
        let Some(&slot) = self.ids.get(client) else {
            return false;
        };
        let Some(entry) = self.entries[slot as usize].as_mut() else {
            unreachable!("slot {slot} is free");
        };
        let hold = hold
            .filter(|h| h.capacity > 0.0 && h.capacity.is_finite())
            .map(|h| Hold {
                until: h.until.min(entry.lease.expiry),
                ..h
            });
        let old = std::mem::replace(&mut entry.hold, hold);
        self.rehold(slot, old);
        true
    }

    /// The latest expiry of any lease, `None` without leases. Costs `O(n)`:
    /// an intermediate server asks once per report to its parent.
    pub(crate) fn last_expiry(&self) -> Option<Timestamp> {
        self.entries.iter().flatten().map(|e| e.lease.expiry).max()
    }

    /// Removes leases with `expiry <= now`, and holds with `until <= now`;
    /// returns how many leases.
    pub(crate) fn sweep(&mut self, now: Timestamp) -> usize {
        while let Some(&(until, slot)) = self.holds.first() {
            if until > now {
                break;
            }
            self.end_hold(slot);
        }
        let mut dropped = 0;
        while let Some(&(filed, slot)) = self.expiries.first() {
            if filed > now {
                break;
            }
            let Some(entry) = self.entries[slot as usize].as_mut() else {
                unreachable!("slot {slot} is free");
            };
            if entry.lease.expiry > now {
                // Refreshed since it was filed: file it at its expiry.
                refile(&mut self.expiries, entry, slot);
                continue;
            }
            self.remove_slot(slot);
            dropped += 1;
        }
        dropped
    }

    /// Shortens every lease that expires after `latest` to expire at
    /// `latest` (their holds end with them); returns how many.
    ///
    /// For a reload that shortens the lease length: a lease granted under
    /// the old length must not outlive one granted under the new.
    pub(crate) fn cap_expiry(&mut self, latest: Timestamp) -> usize {
        // A lease may be filed before its expiry: look at every lease (a
        // reload is rare).
        let late: Vec<Slot> = self
            .entries
            .iter()
            .enumerate()
            .filter(|(_, e)| e.as_ref().is_some_and(|e| e.lease.expiry > latest))
            .map(|(slot, _)| slot as Slot)
            .collect();
        for &slot in &late {
            let Some(entry) = self.entries[slot as usize].as_ref() else {
                unreachable!("slot {slot} is free");
            };
            let lease = ClientLease {
                expiry: latest,
                ..entry.lease
            };
            self.set(slot, lease);
        }
        late.len()
    }

    /// Removes `client`'s lease; returns whether it had one.
    pub(crate) fn release(&mut self, client: &str) -> bool {
        match self.ids.get(client) {
            Some(&slot) => {
                self.remove_slot(slot);
                true
            }
            None => false,
        }
    }

    /// The capacity held: the sum of `has` over all leases plus their holds.
    pub(crate) fn sum_has(&self) -> f64 {
        self.index.total().has
    }

    /// The sum of `wants` over all leases.
    pub(crate) fn sum_wants(&self) -> f64 {
        self.index.total().wants
    }

    /// The sum of `subclients` over all leases (saturating at `u64::MAX`).
    pub(crate) fn count(&self) -> u64 {
        self.index.total().subclients
    }

    /// The number of leases (clients).
    pub(crate) fn len(&self) -> usize {
        self.ids.len()
    }

    /// Whether no client holds a lease.
    pub(crate) fn is_empty(&self) -> bool {
        self.ids.is_empty()
    }

    /// Every lease with its client id, in no particular order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (&str, &ClientLease)> {
        self.entries.iter().flatten().map(|e| (&*e.id, &e.lease))
    }

    /// The total wants and subclients of the leases whose wants per
    /// subclient is at most `ratio`, in `O(log n)`.
    pub(crate) fn demand_up_to(&self, ratio: f64) -> (f64, u64) {
        let under = self.index.up_to(ratio);
        (under.wants, under.subclients)
    }

    /// The weighted max-min fair water level for `capacity`, in `O(log n)`:
    /// the `L` with `sum_i min(wants_i, L * subclients_i) = capacity`, or
    /// infinity when all wants fit in `capacity`. A lease's fair share is
    /// `min(wants, L * subclients)`.
    pub(crate) fn water_level(&self, capacity: f64) -> f64 {
        self.index.water_level(capacity)
    }

    /// Decides and stores `req`'s lease.
    ///
    /// Drops this resource's expired leases first, records the request's
    /// wants and subclients, then runs `algo` (or, when `learning`, grants
    /// `req.has`, 0 if negative or NaN), stores the lease with
    /// `expiry = now + lease_length` and `algo.refresh_interval`, and returns
    /// it. The algorithm sees the requester with its new wants and
    /// subclients but the `has` of its previous lease (0 if new or expired)
    /// and its hold, which counts as the requester's own. The new lease has
    /// no hold; the caller sets one (see [`set_hold`](Self::set_hold)).
    ///
    /// Costs `O(log n)` expected, plus `O(log n)` per expired lease dropped.
    ///
    /// # Panics
    ///
    /// If a new client would be the resource's `2^32 - 1`-th lease (slots are
    /// 32-bit). No float value panics.
    pub(crate) fn decide(
        &mut self,
        algo: &AlgorithmConfig,
        capacity: f64,
        req: &Request<'_>,
        now: Timestamp,
        learning: bool,
    ) -> ClientLease {
        self.sweep(now);
        // The requester's slot is found once: the algorithm reads its
        // occupied capacity through `Deciding`, not by id again.
        let known = self.ids.get(req.client).copied();
        let lease = ClientLease {
            has: known
                .and_then(|slot| self.entry(slot))
                .map_or(0.0, |e| e.lease.has),
            wants: req.wants,
            subclients: req.subclients,
            expiry: now.saturating_add(algo.lease_length),
            refresh_interval: algo.refresh_interval,
        };
        let slot = match known {
            Some(slot) => {
                self.set(slot, lease);
                slot
            }
            None => self.insert(req.client, lease),
        };
        let has = if learning {
            non_negative(req.has)
        } else {
            let view = Deciding {
                resource: self,
                client: req.client,
                occupied: self.entry(slot).map_or(0.0, |e| e.demand().has),
            };
            algo.kind.algorithm().grant(&view, capacity, req)
        };
        let lease = ClientLease { has, ..lease };
        self.end_hold(slot);
        self.set(slot, lease);
        lease
    }

    fn entry(&self, slot: Slot) -> Option<&Entry> {
        self.entries.get(slot as usize)?.as_ref()
    }

    /// Stores `lease` for `client`, who has none; returns its slot.
    fn insert(&mut self, client: &str, lease: ClientLease) -> Slot {
        let slot = match self.free.pop() {
            Some(slot) => slot,
            None => {
                let slot = Slot::try_from(self.entries.len())
                    .ok()
                    .filter(|&s| s != index::NIL)
                    .expect("a resource holds fewer than 2^32 - 1 leases");
                self.entries.push(None);
                slot
            }
        };
        let entry = Entry {
            id: client.into(),
            lease,
            hold: None,
            filed: lease.expiry,
        };
        self.index.insert(slot, entry.demand());
        self.entries[slot as usize] = Some(entry);
        self.ids.insert(client.into(), slot);
        self.expiries.insert((lease.expiry, slot));
        slot
    }

    /// Replaces the lease in the occupied `slot`; a hold that would outlive
    /// it ends with it.
    fn set(&mut self, slot: Slot, lease: ClientLease) {
        let Some(entry) = self.entries[slot as usize].as_mut() else {
            unreachable!("slot {slot} is free");
        };
        let before = entry.demand();
        entry.lease = lease;
        let old_hold = entry.hold;
        if let Some(h) = entry.hold.as_mut() {
            h.until = h.until.min(lease.expiry);
        }
        let after = entry.demand();
        // A later expiry stays filed where it was (the sweep files it
        // again); an earlier one is filed at once.
        if lease.expiry < entry.filed {
            refile(&mut self.expiries, entry, slot);
        }
        if old_hold != entry.hold {
            self.rehold(slot, old_hold);
        } else if before != after {
            self.index.update(slot, after);
        }
    }

    /// Ends the occupied `slot`'s hold, if any.
    fn end_hold(&mut self, slot: Slot) {
        let Some(entry) = self.entries[slot as usize].as_mut() else {
            unreachable!("slot {slot} is free");
        };
        if let Some(old) = entry.hold.take() {
            self.rehold(slot, Some(old));
        }
    }

    /// Brings `holds` and the index in line with the occupied `slot`'s hold,
    /// which was `old`.
    fn rehold(&mut self, slot: Slot, old: Option<Hold>) {
        let Some(entry) = self.entries[slot as usize].as_ref() else {
            unreachable!("slot {slot} is free");
        };
        if let Some(h) = old {
            self.holds.remove(&(h.until, slot));
        }
        if let Some(h) = entry.hold {
            self.holds.insert((h.until, slot));
        }
        self.index.update(slot, entry.demand());
    }

    /// Frees the occupied `slot`.
    fn remove_slot(&mut self, slot: Slot) {
        let Some(entry) = self.entries[slot as usize].take() else {
            unreachable!("slot {slot} is free");
        };
        self.ids.remove(&entry.id);
        self.expiries.remove(&(entry.filed, slot));
        if let Some(h) = entry.hold {
            self.holds.remove(&(h.until, slot));
        }
        self.index.remove(slot);
        self.free.push(slot);
    }
}

/// Files the lease in `slot` (`entry`) in `expiries` at its expiry.
fn refile(expiries: &mut BTreeSet<(Timestamp, Slot)>, entry: &mut Entry, slot: Slot) {
    expiries.remove(&(entry.filed, slot));
    entry.filed = entry.lease.expiry;
    expiries.insert((entry.filed, slot));
}

/// The resource as an algorithm sees it while deciding for `client`,
/// whose occupied capacity is already known.
struct Deciding<'r> {
    resource: &'r LeaseStore,
    client: &'r str,
    occupied: f64,
}

impl ResourceView for Deciding<'_> {
    fn sum_has(&self) -> f64 {
        self.resource.sum_has()
    }

    fn sum_wants(&self) -> f64 {
        self.resource.sum_wants()
    }

    fn count(&self) -> u64 {
        self.resource.count()
    }

    fn occupied(&self, client: &str) -> f64 {
        if client == self.client {
            self.occupied
        } else {
            self.resource.occupied(client)
        }
    }

    fn demand_up_to(&self, ratio: f64) -> (f64, u64) {
        self.resource.demand_up_to(ratio)
    }

    fn water_level(&self, capacity: f64) -> f64 {
        self.resource.water_level(capacity)
    }
}

impl ResourceView for LeaseStore {
    fn sum_has(&self) -> f64 {
        LeaseStore::sum_has(self)
    }

    fn sum_wants(&self) -> f64 {
        LeaseStore::sum_wants(self)
    }

    fn count(&self) -> u64 {
        LeaseStore::count(self)
    }

    fn occupied(&self, client: &str) -> f64 {
        LeaseStore::occupied(self, client)
    }

    fn demand_up_to(&self, ratio: f64) -> (f64, u64) {
        LeaseStore::demand_up_to(self, ratio)
    }

    fn water_level(&self, capacity: f64) -> f64 {
        LeaseStore::water_level(self, capacity)
    }
}

#[cfg(test)]
mod tests;
