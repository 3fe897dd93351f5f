//! One resource's leases: who holds what, who wants what, until when.
//!
//! [`Resource`] keeps the leases of one resource by client id, with the sums
//! the algorithms read (`sum_has`, `sum_wants`, `count`) and the two queries
//! they need ([`Resource::water_level`], [`Resource::demand_up_to`]), and
//! makes the decision for one request ([`Resource::decide`]). It does no I/O
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
//! * `expiries` orders `(expiry, slot)`, so dropping expired leases costs
//!   `O(log n)` per lease dropped, not a scan; `holds` does the same for the
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
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use tollgate::doorman::algorithm::{AlgorithmConfig, Kind, Request};
/// use tollgate::doorman::store::Resource;
///
/// let algo = AlgorithmConfig::new(Kind::ProportionalShare, Duration::from_secs(60), Duration::from_secs(15));
/// let mut res = Resource::new();
/// let lease = res.decide(&algo, 100.0, &Request::new("a", 30.0), Duration::ZERO, false);
/// assert_eq!((lease.has, lease.expiry), (30.0, Duration::from_secs(60)));
/// assert_eq!((res.sum_has(), res.sum_wants(), res.count()), (30.0, 30.0, 1));
/// assert_eq!(res.sweep(Duration::from_secs(60)), 1);
/// assert!(res.is_empty());
/// ```
#[derive(Clone, Debug, Default)]
pub struct Resource {
    ids: HashMap<Box<str>, Slot>,
    /// By slot; `None` for a free slot.
    entries: Vec<Option<Entry>>,
    free: Vec<Slot>,
    expiries: BTreeSet<(Timestamp, Slot)>,
    /// `(until, slot)` of every hold.
    holds: BTreeSet<(Timestamp, Slot)>,
    index: DemandIndex,
}

impl Resource {
    /// An empty resource.
    pub fn new() -> Self {
        Self::default()
    }

    /// The lease `client` holds, expired or not (expired leases stay until
    /// [`sweep`](Self::sweep) or the next [`decide`](Self::decide)).
    pub fn get(&self, client: &str) -> Option<&ClientLease> {
        let slot = *self.ids.get(client)?;
        self.entry(slot).map(|e| &e.lease)
    }

    /// The hold on `client`'s lease, if any (an ended hold stays until
    /// [`sweep`](Self::sweep) or the next [`decide`](Self::decide)).
    pub fn hold_of(&self, client: &str) -> Option<Hold> {
        let slot = *self.ids.get(client)?;
        self.entry(slot)?.hold
    }

    /// The capacity `client` occupies: its lease's `has` plus its hold; 0
    /// without a lease. The algorithms count this, not `has`, as the
    /// client's part of `sum_has`.
    pub fn occupied(&self, client: &str) -> f64 {
        self.ids
            .get(client)
            .and_then(|&slot| self.entry(slot))
            .map_or(0.0, |e| e.demand().has)
    }

    /// Sets or, with `None`, removes the hold on `client`'s lease. A hold
    /// whose capacity is not positive and finite is none; one that would
    /// outlive the lease ends with it. Returns whether `client` has a lease.
    pub fn set_hold(&mut self, client: &str, hold: Option<Hold>) -> bool {
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

    /// The latest expiry of any lease, `None` without leases.
    pub fn last_expiry(&self) -> Option<Timestamp> {
        self.expiries.last().map(|&(expiry, _)| expiry)
    }

    /// Removes leases with `expiry <= now`, and holds with `until <= now`;
    /// returns how many leases.
    pub fn sweep(&mut self, now: Timestamp) -> usize {
        while let Some(&(until, slot)) = self.holds.first() {
            if until > now {
                break;
            }
            self.end_hold(slot);
        }
        let mut dropped = 0;
        while let Some(&(expiry, slot)) = self.expiries.first() {
            if expiry > now {
                break;
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
    pub fn cap_expiry(&mut self, latest: Timestamp) -> usize {
        let late: Vec<Slot> = self
            .expiries
            .iter()
            .rev()
            .take_while(|&&(expiry, _)| expiry > latest)
            .map(|&(_, slot)| slot)
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
    pub fn release(&mut self, client: &str) -> bool {
        match self.ids.get(client) {
            Some(&slot) => {
                self.remove_slot(slot);
                true
            }
            None => false,
        }
    }

    /// The capacity held: the sum of `has` over all leases plus their holds.
    pub fn sum_has(&self) -> f64 {
        self.index.total().has
    }

    /// The sum of `wants` over all leases.
    pub fn sum_wants(&self) -> f64 {
        self.index.total().wants
    }

    /// The sum of `subclients` over all leases (saturating at `u64::MAX`).
    pub fn count(&self) -> u64 {
        self.index.total().subclients
    }

    /// The number of leases (clients).
    pub fn len(&self) -> usize {
        self.ids.len()
    }

    /// Whether no client holds a lease.
    pub fn is_empty(&self) -> bool {
        self.ids.is_empty()
    }

    /// Every lease with its client id, in no particular order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &ClientLease)> {
        self.entries.iter().flatten().map(|e| (&*e.id, &e.lease))
    }

    /// The total wants and subclients of the leases whose wants per
    /// subclient is at most `ratio`, in `O(log n)`.
    pub fn demand_up_to(&self, ratio: f64) -> (f64, u64) {
        let under = self.index.up_to(ratio);
        (under.wants, under.subclients)
    }

    /// The weighted max-min fair water level for `capacity`, in `O(log n)`:
    /// the `L` with `sum_i min(wants_i, L * subclients_i) = capacity`, or
    /// infinity when all wants fit in `capacity`. A lease's fair share is
    /// `min(wants, L * subclients)`.
    pub fn water_level(&self, capacity: f64) -> f64 {
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
    pub fn decide(
        &mut self,
        algo: &AlgorithmConfig,
        capacity: f64,
        req: &Request<'_>,
        now: Timestamp,
        learning: bool,
    ) -> ClientLease {
        self.sweep(now);
        let lease = ClientLease {
            has: self.get(req.client).map_or(0.0, |l| l.has),
            wants: req.wants,
            subclients: req.subclients,
            expiry: now.saturating_add(algo.lease_length),
            refresh_interval: algo.refresh_interval,
        };
        let slot = self.upsert(req.client, lease);
        let has = if learning {
            non_negative(req.has)
        } else {
            algo.kind.algorithm().grant(self, capacity, req)
        };
        let lease = ClientLease { has, ..lease };
        self.end_hold(slot);
        self.set(slot, lease);
        lease
    }

    fn entry(&self, slot: Slot) -> Option<&Entry> {
        self.entries.get(slot as usize)?.as_ref()
    }

    /// Stores `lease` for `client`, new or not; returns its slot.
    fn upsert(&mut self, client: &str, lease: ClientLease) -> Slot {
        if let Some(&slot) = self.ids.get(client) {
            self.set(slot, lease);
            return slot;
        }
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
        let old = std::mem::replace(&mut entry.lease, lease);
        let old_hold = entry.hold;
        if let Some(h) = entry.hold.as_mut() {
            h.until = h.until.min(lease.expiry);
        }
        let after = entry.demand();
        if old.expiry != lease.expiry {
            self.expiries.remove(&(old.expiry, slot));
            self.expiries.insert((lease.expiry, slot));
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
        self.expiries.remove(&(entry.lease.expiry, slot));
        if let Some(h) = entry.hold {
            self.holds.remove(&(h.until, slot));
        }
        self.index.remove(slot);
        self.free.push(slot);
    }
}

impl ResourceView for Resource {
    fn sum_has(&self) -> f64 {
        Resource::sum_has(self)
    }

    fn sum_wants(&self) -> f64 {
        Resource::sum_wants(self)
    }

    fn count(&self) -> u64 {
        Resource::count(self)
    }

    fn occupied(&self, client: &str) -> f64 {
        Resource::occupied(self, client)
    }

    fn demand_up_to(&self, ratio: f64) -> (f64, u64) {
        Resource::demand_up_to(self, ratio)
    }

    fn water_level(&self, capacity: f64) -> f64 {
        Resource::water_level(self, capacity)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    use crate::doorman::algorithm::Kind;

    fn secs(s: u64) -> Duration {
        Duration::from_secs(s)
    }

    fn config(kind: Kind, lease: u64) -> AlgorithmConfig {
        AlgorithmConfig::new(kind, secs(lease), secs(5))
    }

    fn req(client: &str, wants: f64, subclients: u64) -> Request<'_> {
        Request {
            client,
            has: 0.0,
            wants,
            subclients,
        }
    }

    #[test]
    fn sums_follow_decide_and_release() {
        let algo = config(Kind::NoAlgorithm, 60);
        let mut res = Resource::new();
        assert!(res.is_empty());
        assert_eq!(
            (res.sum_has(), res.sum_wants(), res.count(), res.len()),
            (0.0, 0.0, 0, 0)
        );
        res.decide(&algo, 0.0, &req("a", 10.0, 2), secs(0), false);
        res.decide(&algo, 0.0, &req("b", 5.0, 3), secs(0), false);
        assert_eq!(
            (res.sum_has(), res.sum_wants(), res.count(), res.len()),
            (15.0, 15.0, 5, 2)
        );
        // A refresh replaces the client's values.
        res.decide(&algo, 0.0, &req("a", 1.0, 1), secs(1), false);
        assert_eq!(
            (res.sum_has(), res.sum_wants(), res.count(), res.len()),
            (6.0, 6.0, 4, 2)
        );
        assert!(res.release("a"));
        assert!(!res.release("a"));
        assert!(!res.release("nobody"));
        assert_eq!(
            (res.sum_has(), res.sum_wants(), res.count(), res.len()),
            (5.0, 5.0, 3, 1)
        );
        assert!(res.release("b"));
        assert!(res.is_empty());
        assert_eq!((res.sum_has(), res.sum_wants(), res.count()), (0.0, 0.0, 0));
    }

    #[test]
    fn decide_stores_and_returns_the_lease() {
        let algo = AlgorithmConfig::new(Kind::Static, secs(30), secs(7));
        let mut res = Resource::new();
        let lease = res.decide(&algo, 8.0, &req("a", 10.0, 2), secs(100), false);
        let want = ClientLease {
            has: 8.0,
            wants: 10.0,
            subclients: 2,
            expiry: secs(130),
            refresh_interval: secs(7),
        };
        assert_eq!(lease, want);
        assert_eq!(res.get("a"), Some(&want));
        assert_eq!(res.get("b"), None);
        assert_eq!(res.iter().collect::<Vec<_>>(), vec![("a", &want)]);
    }

    #[test]
    fn sweep_removes_leases_expiring_at_or_before_now() {
        let mut res = Resource::new();
        for (id, lease) in [("a", 10), ("b", 20), ("c", 20), ("d", 30)] {
            res.decide(
                &config(Kind::NoAlgorithm, lease),
                0.0,
                &req(id, 1.0, 1),
                secs(0),
                false,
            );
        }
        assert_eq!(res.sweep(secs(9)), 0);
        assert_eq!(res.sweep(secs(10)), 1);
        assert_eq!(res.get("a"), None);
        assert_eq!(res.sweep(secs(25)), 2);
        assert_eq!((res.len(), res.sum_has(), res.count()), (1, 1.0, 1));
        assert_eq!(res.iter().map(|(id, _)| id).collect::<Vec<_>>(), ["d"]);
        assert_eq!(res.sweep(secs(1000)), 1);
        assert!(res.is_empty());
    }

    #[test]
    fn decide_drops_expired_leases_first() {
        let fair = config(Kind::FairShare, 10);
        let mut res = Resource::new();
        res.decide(&fair, 100.0, &req("a", 100.0, 1), secs(0), false);
        // Before a's lease ends, b gets nothing: a holds it all.
        assert_eq!(
            res.decide(&fair, 100.0, &req("b", 60.0, 1), secs(9), false)
                .has,
            0.0
        );
        // At its expiry a's lease is gone, and so are its wants.
        assert_eq!(
            res.decide(&fair, 100.0, &req("b", 60.0, 1), secs(10), false)
                .has,
            60.0
        );
        assert_eq!((res.len(), res.sum_wants()), (1, 60.0));
        // The requester's own expired lease is not "old" either.
        res.decide(&fair, 100.0, &req("c", 40.0, 1), secs(11), false);
        let lease = res.decide(&fair, 100.0, &req("b", 70.0, 1), secs(30), false);
        assert_eq!((lease.has, res.len()), (70.0, 1));
    }

    /// A hold counts in `sum_has`, and so against other clients' grants,
    /// until it ends: at its `until`, or when its own client's next decision
    /// (which counts it as the client's own) replaces the lease.
    #[test]
    fn a_hold_occupies_capacity_until_it_ends() {
        let fair = config(Kind::FairShare, 60);
        let mut res = Resource::new();
        res.decide(&fair, 100.0, &req("a", 100.0, 1), secs(0), false);
        // a's subtree still holds 30 beyond a's lease of 100, until t = 40.
        let hold = |capacity, until| {
            Some(Hold {
                capacity,
                until: secs(until),
            })
        };
        assert!(res.set_hold("a", hold(30.0, 40)));
        assert_eq!((res.occupied("a"), res.sum_has()), (130.0, 130.0));
        // b gets nothing: 100 - 130 is below 0.
        let b = res.decide(&fair, 100.0, &req("b", 50.0, 1), secs(10), false);
        assert_eq!(b.has, 0.0);
        res.sweep(secs(39));
        assert_eq!(res.sum_has(), 130.0);
        res.sweep(secs(40));
        assert_eq!((res.hold_of("a"), res.sum_has()), (None, 100.0));
        // Held again, a refreshes: its fair share is 50 (b wants 50), its
        // own hold is no obstacle (100 - 130 + 130 = 100 available), and
        // the new lease has no hold.
        res.set_hold("a", hold(30.0, 50));
        let a = res.decide(&fair, 100.0, &req("a", 100.0, 1), secs(45), false);
        assert_eq!(a.has, 50.0);
        assert_eq!((res.hold_of("a"), res.sum_has()), (None, 50.0));
        let b = res.decide(&fair, 100.0, &req("b", 50.0, 1), secs(46), false);
        assert_eq!(b.has, 50.0);
    }

    #[test]
    fn holds_are_positive_and_end_with_their_lease() {
        let none = config(Kind::NoAlgorithm, 60);
        let mut res = Resource::new();
        let hold = |capacity, until| {
            Some(Hold {
                capacity,
                until: secs(until),
            })
        };
        assert!(!res.set_hold("a", hold(1.0, 10)), "no lease, no hold");
        res.decide(&none, 0.0, &req("a", 10.0, 1), secs(0), false);
        res.decide(&none, 0.0, &req("b", 1.0, 1), secs(5), false);
        assert_eq!(res.last_expiry(), Some(secs(65)));
        for capacity in [0.0, -1.0, f64::NAN, f64::INFINITY] {
            assert!(res.set_hold("a", hold(capacity, 10)));
            assert_eq!(res.hold_of("a"), None, "{capacity}");
        }
        res.set_hold("a", hold(5.0, 90));
        let capped = Hold {
            capacity: 5.0,
            until: secs(60),
        };
        assert_eq!(res.hold_of("a"), Some(capped), "ends with the lease");
        assert_eq!((res.occupied("a"), res.sum_has()), (15.0, 16.0));
        res.set_hold("a", None);
        assert_eq!((res.occupied("a"), res.sum_has()), (10.0, 11.0));
        // Released or expired, the hold goes with the lease.
        res.set_hold("a", hold(5.0, 30));
        assert!(res.release("a"));
        assert_eq!((res.occupied("a"), res.sum_has()), (0.0, 1.0));
        res.set_hold("b", hold(2.0, 65));
        assert_eq!(res.sweep(secs(65)), 1);
        assert!(res.holds.is_empty());
        assert_eq!((res.sum_has(), res.last_expiry()), (0.0, None));
        assert_eq!(res.index.check(), 0);
    }

    #[test]
    fn slots_are_reused() {
        let algo = config(Kind::NoAlgorithm, 60);
        let mut res = Resource::new();
        for round in 0..3 {
            for i in 0..10 {
                let id = format!("{round}-{i}");
                res.decide(&algo, 0.0, &req(&id, i as f64, 1), secs(0), false);
            }
            for i in 0..10 {
                assert!(res.release(&format!("{round}-{i}")));
            }
        }
        assert_eq!(res.entries.len(), 10);
        assert!(res.is_empty());
        res.index.check();
    }

    #[test]
    fn queries() {
        let algo = config(Kind::NoAlgorithm, 60);
        let mut res = Resource::new();
        assert_eq!(res.water_level(10.0), f64::INFINITY);
        assert_eq!(res.demand_up_to(1.0), (0.0, 0));
        for (id, wants, subclients) in [("a", 10.0, 1), ("b", 30.0, 2), ("c", 40.0, 1)] {
            res.decide(&algo, 0.0, &req(id, wants, subclients), secs(0), false);
        }
        // Ratios 10, 15, 40.
        assert_eq!(res.demand_up_to(9.0), (0.0, 0));
        assert_eq!(res.demand_up_to(15.0), (40.0, 3));
        assert_eq!(res.demand_up_to(f64::INFINITY), (80.0, 4));
        assert_eq!(res.water_level(80.0), f64::INFINITY);
        // 10 + 15*2 + L = 70 at L = 30: only c is cut.
        assert_eq!(res.water_level(70.0), 30.0);
        // a saturated; b and c share 30 over 3 subclients.
        assert_eq!(res.water_level(40.0), 10.0);
        assert_eq!(res.water_level(8.0), 2.0);
    }

    /// A naive `O(n)` model of protocol §3, written from the formulas: a list
    /// of leases, water filling in rounds, proportional share by a loop.
    mod model {
        use super::*;

        #[derive(Clone, Debug)]
        pub(super) struct Lease {
            pub(super) id: String,
            pub(super) has: f64,
            pub(super) wants: f64,
            pub(super) subclients: u64,
            pub(super) expiry: Timestamp,
            /// The hold and when it ends; 0 without one.
            pub(super) held: f64,
            pub(super) held_until: Timestamp,
        }

        /// Weighted max-min fair shares of `capacity` for `(wants, subclients)`,
        /// by rounds: give everyone the equal share per subclient of what is
        /// left; those who want no more get their wants; repeat with the rest.
        pub(super) fn fair_shares(demand: &[(f64, u64)], capacity: f64) -> Vec<f64> {
            let mut shares: Vec<Option<f64>> = vec![None; demand.len()];
            let mut left = capacity;
            loop {
                let open: Vec<usize> = (0..demand.len()).filter(|&i| shares[i].is_none()).collect();
                let subclients: u64 = open.iter().map(|&i| demand[i].1).sum();
                if open.is_empty() {
                    break;
                }
                let level = left / subclients as f64;
                let saturated: Vec<usize> = open
                    .iter()
                    .copied()
                    .filter(|&i| demand[i].0 <= level * demand[i].1 as f64)
                    .collect();
                if saturated.is_empty() {
                    for i in open {
                        shares[i] = Some(level * demand[i].1 as f64);
                    }
                    break;
                }
                for i in saturated {
                    shares[i] = Some(demand[i].0);
                    left -= demand[i].0;
                }
            }
            shares.into_iter().map(Option::unwrap).collect()
        }

        /// Proportional share for `demand[me]`, literally as protocol §3 says.
        pub(super) fn proportional_share(demand: &[(f64, u64)], capacity: f64, me: usize) -> f64 {
            let count: u64 = demand.iter().map(|d| d.1).sum();
            let sum_wants: f64 = demand.iter().map(|d| d.0).sum();
            let (wants, subclients) = demand[me];
            let eq = capacity / count as f64;
            let eq_c = eq * subclients as f64;
            if sum_wants <= capacity || wants <= eq_c {
                return wants;
            }
            let (mut extra_capacity, mut extra_need) = (0.0, 0.0);
            for &(w, s) in demand {
                let e = eq * s as f64;
                if w <= e {
                    extra_capacity += e - w;
                } else {
                    extra_need += w - e;
                }
            }
            eq_c + (wants - eq_c) * extra_capacity / extra_need
        }

        #[derive(Debug, Default)]
        pub(super) struct Model {
            pub(super) leases: Vec<Lease>,
        }

        impl Model {
            pub(super) fn sweep(&mut self, now: Timestamp) -> usize {
                let before = self.leases.len();
                self.leases.retain(|l| l.expiry > now);
                for l in &mut self.leases {
                    if l.held_until <= now {
                        l.held = 0.0;
                    }
                }
                before - self.leases.len()
            }

            pub(super) fn set_hold(&mut self, id: &str, capacity: f64, until: Timestamp) -> bool {
                let Some(l) = self.leases.iter_mut().find(|l| l.id == id) else {
                    return false;
                };
                let real = capacity > 0.0 && capacity.is_finite();
                l.held = if real { capacity } else { 0.0 };
                l.held_until = if real {
                    until.min(l.expiry)
                } else {
                    Duration::ZERO
                };
                true
            }

            pub(super) fn release(&mut self, id: &str) -> bool {
                let before = self.leases.len();
                self.leases.retain(|l| l.id != id);
                before != self.leases.len()
            }

            pub(super) fn sum_has(&self) -> f64 {
                self.leases.iter().map(|l| l.has + l.held).sum()
            }

            pub(super) fn sum_wants(&self) -> f64 {
                self.leases.iter().map(|l| l.wants).sum()
            }

            pub(super) fn count(&self) -> u64 {
                self.leases.iter().map(|l| l.subclients).sum()
            }

            pub(super) fn decide(
                &mut self,
                kind: Kind,
                capacity: f64,
                lease_length: Duration,
                req: &Request<'_>,
                now: Timestamp,
                learning: bool,
            ) -> f64 {
                self.sweep(now);
                let old_occupied = self
                    .leases
                    .iter()
                    .find(|l| l.id == req.client)
                    .map_or(0.0, |l| l.has + l.held);
                let available = capacity - self.sum_has() + old_occupied;
                self.leases.retain(|l| l.id != req.client);
                let mut demand: Vec<(f64, u64)> = self
                    .leases
                    .iter()
                    .map(|l| (l.wants, l.subclients))
                    .collect();
                demand.push((req.wants, req.subclients));
                let me = demand.len() - 1;
                let has = match kind {
                    _ if learning => req.has,
                    Kind::NoAlgorithm => req.wants,
                    Kind::Static => req.wants.min(capacity),
                    Kind::ProportionalShare => {
                        proportional_share(&demand, capacity, me).min(available)
                    }
                    Kind::FairShare => fair_shares(&demand, capacity)[me].min(available),
                }
                .max(0.0);
                self.leases.push(Lease {
                    id: req.client.to_owned(),
                    has,
                    wants: req.wants,
                    subclients: req.subclients,
                    expiry: now + lease_length,
                    held: 0.0,
                    held_until: Duration::ZERO,
                });
                has
            }
        }
    }

    mod properties {
        use super::model::{fair_shares, Model};
        use super::*;
        use proptest::prelude::*;

        /// Whether `a` and `b` agree to 1e-9 relative to `scale`, the
        /// resource's capacity (at least 1): grants near 0 come from
        /// differences of sums of the capacity's size, so relative to the
        /// grant itself is not a meaningful bound.
        fn close(a: f64, b: f64, scale: f64) -> bool {
            (a - b).abs() <= 1e-9 * scale.max(a.abs()).max(b.abs()).max(1.0)
        }

        #[derive(Clone, Debug)]
        enum Op {
            Refresh {
                client: usize,
                wants: f64,
                subclients: u64,
            },
            /// A request during learning mode, with what the client has.
            Learn {
                client: usize,
                has: f64,
                wants: f64,
            },
            Wait(u64),
            Release(usize),
            /// A hold on the client's lease, ending this many seconds on.
            Hold {
                client: usize,
                capacity: f64,
                until: u64,
            },
        }

        fn wants() -> impl Strategy<Value = f64> {
            // Round numbers make ties and exact fits likely; fractions the rest.
            prop_oneof![(0u32..=20).prop_map(|x| f64::from(x) * 5.0), 0.0..200.0f64]
        }

        fn subclients() -> impl Strategy<Value = u64> {
            prop_oneof![Just(1u64), 1u64..=10]
        }

        fn ops(clients: usize) -> impl Strategy<Value = Vec<Op>> {
            let op = prop_oneof![
                6 => (0..clients, wants(), subclients())
                    .prop_map(|(client, wants, subclients)| Op::Refresh { client, wants, subclients }),
                1 => (0..clients, wants(), wants())
                    .prop_map(|(client, has, wants)| Op::Learn { client, has, wants }),
                1 => (0u64..40).prop_map(Op::Wait),
                1 => (0..clients).prop_map(Op::Release),
                1 => (0..clients, wants(), 0u64..80)
                    .prop_map(|(client, capacity, until)| Op::Hold { client, capacity, until }),
            ];
            prop::collection::vec(op, 1..200)
        }

        fn kind() -> impl Strategy<Value = Kind> {
            prop_oneof![
                Just(Kind::NoAlgorithm),
                Just(Kind::Static),
                Just(Kind::ProportionalShare),
                Just(Kind::FairShare),
            ]
        }

        fn odd_float() -> impl Strategy<Value = f64> {
            prop_oneof![
                any::<f64>(),
                prop::sample::select(vec![
                    f64::NAN,
                    -f64::NAN,
                    f64::INFINITY,
                    f64::NEG_INFINITY,
                    -0.0,
                    0.0,
                    f64::MAX,
                    -1.0
                ]),
            ]
        }

        fn odd_subclients() -> impl Strategy<Value = u64> {
            prop_oneof![any::<u64>(), prop::sample::select(vec![0, 1, u64::MAX])]
        }

        fn capacity() -> impl Strategy<Value = f64> {
            prop_oneof![
                (0u32..=100).prop_map(|x| f64::from(x) * 10.0),
                0.0..1000.0f64
            ]
        }

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(512))]

            /// The indexed store decides and holds exactly as the naive
            /// model, and, for the sharing algorithms, never leases out more
            /// than the capacity once the leases granted in learning mode
            /// and the holds are gone.
            #[test]
            fn matches_the_naive_model(
                (clients, ops) in (1usize..50).prop_flat_map(|n| (Just(n), ops(n))),
                kind in kind(),
                capacity in capacity(),
                lease_length in 5u64..60,
            ) {
                let algo = AlgorithmConfig::new(kind, secs(lease_length), secs(1));
                let ids: Vec<String> = (0..clients).map(|i| format!("client{i}")).collect();
                let (mut res, mut model) = (Resource::new(), Model::default());
                let mut now = secs(0);
                // When the last lease granted in learning mode, or the last
                // hold, ends.
                let mut learned_until = secs(0);
                for op in ops {
                    match op {
                        Op::Refresh { client, wants, subclients } => {
                            let req = req(&ids[client], wants, subclients);
                            let got = res.decide(&algo, capacity, &req, now, false).has;
                            let want = model.decide(kind, capacity, algo.lease_length, &req, now, false);
                            prop_assert!(close(got, want, capacity), "grant {got}, model {want}");
                            let shared = matches!(kind, Kind::ProportionalShare | Kind::FairShare);
                            if shared && now >= learned_until {
                                prop_assert!(res.sum_has() <= capacity * (1.0 + 1e-12) + 1e-9,
                                    "sum_has {} over capacity {capacity}", res.sum_has());
                            }
                        }
                        Op::Learn { client, has, wants } => {
                            let req = Request { client: &ids[client], has, wants, subclients: 1 };
                            let got = res.decide(&algo, capacity, &req, now, true).has;
                            let want = model.decide(kind, capacity, algo.lease_length, &req, now, true);
                            prop_assert_eq!(got, want);
                            learned_until = now + algo.lease_length;
                        }
                        Op::Wait(s) => {
                            now += secs(s);
                            prop_assert_eq!(res.sweep(now), model.sweep(now));
                        }
                        Op::Release(client) => {
                            prop_assert_eq!(res.release(&ids[client]), model.release(&ids[client]));
                        }
                        Op::Hold { client, capacity, until } => {
                            let until = now + secs(until);
                            let hold = Hold { capacity, until };
                            prop_assert_eq!(res.set_hold(&ids[client], Some(hold)),
                                model.set_hold(&ids[client], capacity, until));
                            learned_until = learned_until.max(until);
                        }
                    }
                    prop_assert_eq!(res.len(), model.leases.len());
                    prop_assert_eq!(res.index.check(), model.leases.len());
                    prop_assert_eq!(res.count(), model.count());
                    prop_assert!(close(res.sum_has(), model.sum_has(), capacity));
                    prop_assert!(close(res.sum_wants(), model.sum_wants(), capacity));
                    for lease in &model.leases {
                        let got = res.get(&lease.id).expect("the model's client is in the store");
                        prop_assert!(close(got.has, lease.has, capacity));
                        prop_assert_eq!((got.wants, got.subclients, got.expiry),
                            (lease.wants, lease.subclients, lease.expiry));
                        let held = res.hold_of(&lease.id).map(|h| (h.capacity, h.until));
                        let model_held = (lease.held > 0.0).then_some((lease.held, lease.held_until));
                        prop_assert_eq!(held, model_held);
                        prop_assert!(close(res.occupied(&lease.id), lease.has + lease.held, capacity));
                    }
                    prop_assert_eq!(res.holds.len(),
                        model.leases.iter().filter(|l| l.held > 0.0).count());
                }
            }

            /// Whatever the floats, nothing panics and no grant is negative
            /// or NaN, and the store keeps its shape.
            #[test]
            fn any_floats_are_survived(
                requests in prop::collection::vec(
                    (0usize..8, odd_float(), odd_float(), odd_subclients(), odd_float(), any::<bool>(), 0u64..30),
                    1..100,
                ),
                kind in kind(),
            ) {
                let algo = AlgorithmConfig::new(kind, secs(20), secs(1));
                let ids: Vec<String> = (0..8).map(|i| format!("client{i}")).collect();
                let mut res = Resource::new();
                let mut now = secs(0);
                for (client, has, wants, subclients, capacity, learning, wait) in requests {
                    now += secs(wait);
                    let req = Request { client: &ids[client], has, wants, subclients };
                    let lease = res.decide(&algo, capacity, &req, now, learning);
                    prop_assert!(lease.has >= 0.0, "granted {}", lease.has);
                    let stored = res.get(&ids[client]).expect("just stored");
                    prop_assert_eq!(stored.has.to_bits(), lease.has.to_bits());
                    prop_assert_eq!(stored.wants.to_bits(), wants.to_bits());
                    prop_assert_eq!(res.iter().count(), res.len());
                }
                res.sweep(now + secs(20));
                prop_assert!(res.is_empty());
                prop_assert_eq!((res.count(), res.sum_has(), res.sum_wants()), (0, 0.0, 0.0));
            }

            /// At a steady state, fair share grants are the weighted max-min
            /// fair allocation. From any history it takes three rounds of
            /// refreshes with the final wants: the first records them (its
            /// grants still see others' old wants), after the second everyone
            /// holds at most its fair share (each is capped by what others
            /// hold), and in the third the caps no longer bind.
            #[test]
            fn fair_share_is_max_min_fair_at_steady_state(
                demand in prop::collection::vec((wants(), subclients()), 1..50),
                warm_up in ops(50),
                order in Just(()).prop_perturb(|_, mut rng| rng.next_u64()),
                capacity in capacity(),
            ) {
                let algo = AlgorithmConfig::new(Kind::FairShare, secs(3600), secs(1));
                let ids: Vec<String> = (0..demand.len()).map(|i| format!("client{i}")).collect();
                let mut res = Resource::new();
                // Some history first: other wants, other subclients, releases.
                for op in warm_up {
                    match op {
                        Op::Refresh { client, wants, subclients } if client < ids.len() => {
                            res.decide(&algo, capacity, &req(&ids[client], wants, subclients), secs(0), false);
                        }
                        Op::Release(client) if client < ids.len() => {
                            res.release(&ids[client]);
                        }
                        _ => {}
                    }
                }
                // Three rounds, in a random order.
                let mut sequence: Vec<usize> = (0..demand.len()).collect();
                let mut x = order;
                for i in (1..sequence.len()).rev() {
                    x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                    sequence.swap(i, (x >> 33) as usize % (i + 1));
                }
                for _ in 0..3 {
                    for &i in &sequence {
                        let (wants, subclients) = demand[i];
                        res.decide(&algo, capacity, &req(&ids[i], wants, subclients), secs(1), false);
                    }
                }
                let fair = fair_shares(&demand, capacity);
                let grants: Vec<f64> = ids.iter().map(|id| res.get(id).unwrap().has).collect();
                for (got, want) in grants.iter().zip(&fair) {
                    prop_assert!(close(*got, *want, capacity), "grants {grants:?}, fair {fair:?}");
                }
                // Max-min fairness itself: everything that is wanted is handed out,
                // and whoever is cut holds at least as much per subclient as
                // anyone else.
                let total_wants: f64 = demand.iter().map(|d| d.0).sum();
                let handed_out: f64 = grants.iter().sum();
                prop_assert!(close(handed_out, total_wants.min(capacity), capacity));
                let per_subclient = |i: usize| grants[i] / demand[i].1 as f64;
                for i in 0..demand.len() {
                    prop_assert!(grants[i] <= demand[i].0 + 1e-9 * capacity.max(1.0));
                    if !close(grants[i], demand[i].0, capacity) {
                        for j in 0..demand.len() {
                            prop_assert!(per_subclient(i) >= per_subclient(j) - 1e-9 * capacity.max(1.0),
                                "client {i} is cut at {} per subclient below client {j}'s {}",
                                per_subclient(i), per_subclient(j));
                        }
                    }
                }
            }
        }
    }
}
