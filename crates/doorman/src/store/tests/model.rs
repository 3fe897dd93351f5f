//! A naive `O(n)` model of `docs/design/doorman-protocol.md` §3, written
//! from the formulas: a list
//! of leases, water filling in rounds, proportional share by a loop.

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

/// Proportional share for `demand[me]`, literally as
/// `docs/design/doorman-protocol.md` §3 says.
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
        let sum_has = self.sum_has();
        let available = if sum_has > capacity {
            old_occupied * (capacity / sum_has)
        } else {
            capacity - sum_has + old_occupied
        };
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
            Kind::ProportionalShare => proportional_share(&demand, capacity, me).min(available),
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
