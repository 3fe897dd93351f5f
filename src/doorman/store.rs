//! One resource's leases: who holds what, who wants what, until when.
//!
//! [`Resource`] keeps the leases of one resource by client id, with the sums
//! the algorithms read (`sum_has`, `sum_wants`, `count`) and the queries
//! they need, and makes the decision for one request ([`Resource::decide`]).
//! It does no I/O and reads no clock: time is passed in.

use std::collections::HashMap;
use std::time::Duration;

use super::algorithm::{non_negative, AlgorithmConfig, Request};

/// An instant, as the time since an epoch the caller chooses (monotonic or
/// wall clock). The wire has whole seconds; this keeps whatever it is given.
pub type Timestamp = Duration;

/// One client's lease on one resource.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ClientLease {
    /// The capacity granted.
    pub has: f64,
    /// The capacity the client last asked for.
    pub wants: f64,
    /// How many clients this one stands for.
    pub subclients: u64,
    /// When the lease ends.
    pub expiry: Timestamp,
    /// How long the client should wait before it refreshes.
    pub refresh_interval: Duration,
}

/// One resource's leases by client id, with running sums.
#[derive(Debug, Default)]
pub struct Resource {
    leases: HashMap<Box<str>, ClientLease>,
}

impl Resource {
    /// An empty resource.
    pub fn new() -> Self {
        Self::default()
    }

    /// The lease `client` holds, expired or not.
    pub fn get(&self, client: &str) -> Option<&ClientLease> {
        self.leases.get(client)
    }

    /// Removes leases with `expiry <= now`; returns how many.
    pub fn sweep(&mut self, now: Timestamp) -> usize {
        let before = self.leases.len();
        self.leases.retain(|_, lease| lease.expiry > now);
        before - self.leases.len()
    }

    /// Removes `client`'s lease; returns whether it had one.
    pub fn release(&mut self, client: &str) -> bool {
        self.leases.remove(client).is_some()
    }

    /// The sum of `has` over all leases.
    pub fn sum_has(&self) -> f64 {
        self.leases.values().map(|l| l.has).sum()
    }

    /// The sum of `wants` over all leases.
    pub fn sum_wants(&self) -> f64 {
        self.leases.values().map(|l| l.wants).sum()
    }

    /// The sum of `subclients` over all leases.
    pub fn count(&self) -> u64 {
        self.leases.values().map(|l| l.subclients).sum()
    }

    /// The number of leases (clients).
    pub fn len(&self) -> usize {
        self.leases.len()
    }

    /// Whether no client holds a lease.
    pub fn is_empty(&self) -> bool {
        self.leases.is_empty()
    }

    /// Every lease with its client id, in no particular order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &ClientLease)> {
        self.leases.iter().map(|(id, lease)| (&**id, lease))
    }

    /// The total wants and subclients of the clients whose wants per
    /// subclient is at most `ratio`.
    pub fn demand_up_to(&self, ratio: f64) -> (f64, u64) {
        self.leases
            .values()
            .filter(|l| l.wants / l.subclients as f64 <= ratio)
            .fold((0.0, 0), |(w, s), l| (w + l.wants, s + l.subclients))
    }

    /// The max-min fair water level per subclient: the `L` with
    /// `sum_i min(wants_i, L * subclients_i) = capacity`, or infinity when
    /// all wants fit in `capacity`.
    pub fn water_level(&self, capacity: f64) -> f64 {
        let mut v: Vec<_> = self.leases.values().collect();
        v.sort_by(|a, b| {
            (a.wants / a.subclients as f64).total_cmp(&(b.wants / b.subclients as f64))
        });
        let total_sub = self.count();
        let (mut w, mut s) = (0.0, 0u64);
        for l in v {
            let r = l.wants / l.subclients as f64;
            if w + r * (total_sub - s) as f64 > capacity {
                return (capacity - w) / (total_sub - s) as f64;
            }
            w += l.wants;
            s += l.subclients;
        }
        f64::INFINITY
    }

    /// Decides and stores `req`'s lease.
    ///
    /// Drops this resource's expired leases first, records the request's
    /// wants and subclients, then runs `algo` (or, when `learning`, grants
    /// `req.has`), stores the lease with `expiry = now + lease_length` and
    /// returns it.
    pub fn decide(
        &mut self,
        algo: &AlgorithmConfig,
        capacity: f64,
        req: &Request<'_>,
        now: Timestamp,
        learning: bool,
    ) -> ClientLease {
        self.sweep(now);
        let old_has = self.get(req.client).map_or(0.0, |l| l.has);
        let lease = ClientLease {
            has: old_has,
            wants: req.wants,
            subclients: req.subclients,
            expiry: now.saturating_add(algo.lease_length),
            refresh_interval: algo.refresh_interval,
        };
        self.leases.insert(req.client.into(), lease);
        let has = if learning {
            non_negative(req.has)
        } else {
            algo.kind.algorithm().grant(self, capacity, req)
        };
        let lease = ClientLease { has, ..lease };
        self.leases.insert(req.client.into(), lease);
        lease
    }
}
