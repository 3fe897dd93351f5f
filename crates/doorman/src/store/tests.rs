//! The store's unit tests, with exact numbers.

use super::*;
use std::time::Duration;

use crate::algorithm::Kind;

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
    let mut res = LeaseStore::new();
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
    let mut res = LeaseStore::new();
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
    let mut res = LeaseStore::new();
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
    let mut res = LeaseStore::new();
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
    let mut res = LeaseStore::new();
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
    let mut res = LeaseStore::new();
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
    let mut res = LeaseStore::new();
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
    let mut res = LeaseStore::new();
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

mod model;
mod properties;
mod vectors;

/// One step of a store's life, for the model test below.
#[derive(Debug, Clone)]
enum Step {
    /// Client `c` refreshes at `now`, for leases of `lease` seconds.
    Decide {
        c: u8,
        now: u64,
        lease: u64,
    },
    Sweep {
        now: u64,
    },
    Release {
        c: u8,
    },
    Cap {
        latest: u64,
    },
}

fn step() -> impl proptest::strategy::Strategy<Value = Step> {
    use proptest::prelude::*;
    prop_oneof![
        4 => (0u8..6, 0u64..40, 1u64..12).prop_map(|(c, now, lease)| Step::Decide { c, now, lease }),
        2 => (0u64..40).prop_map(|now| Step::Sweep { now }),
        1 => (0u8..6).prop_map(|c| Step::Release { c }),
        1 => (0u64..50).prop_map(|latest| Step::Cap { latest }),
    ]
}

proptest::proptest! {
    /// Whatever the order of refreshes (times may even go back, as two
    /// threads' clocks do), sweeps, releases and caps, the store holds
    /// exactly the leases a plain map of expiries holds: refreshed leases
    /// filed early are never dropped early nor kept late.
    #[test]
    fn expiries_filed_early_drop_exactly_the_expired_leases(
        steps in proptest::collection::vec(step(), 1..60),
    ) {
        use std::collections::BTreeMap;
        let mut res = LeaseStore::new();
        let mut model: BTreeMap<String, Duration> = BTreeMap::new();
        let sweep = |model: &mut BTreeMap<String, Duration>, now: Duration| {
            let before = model.len();
            model.retain(|_, expiry| *expiry > now);
            before - model.len()
        };
        for step in steps {
            match step {
                Step::Decide { c, now, lease } => {
                    let (client, now) = (format!("c{c}"), secs(now));
                    let algo = config(Kind::ProportionalShare, lease);
                    let lease = res.decide(&algo, 100.0, &req(&client, 10.0, 1), now, false);
                    sweep(&mut model, now);
                    model.insert(client, now + algo.lease_length);
                    proptest::prop_assert_eq!(lease.expiry, now + algo.lease_length);
                }
                Step::Sweep { now } => {
                    let dropped = res.sweep(secs(now));
                    proptest::prop_assert_eq!(dropped, sweep(&mut model, secs(now)));
                }
                Step::Release { c } => {
                    let client = format!("c{c}");
                    proptest::prop_assert_eq!(res.release(&client), model.remove(&client).is_some());
                }
                Step::Cap { latest } => {
                    let latest = secs(latest);
                    let capped = res.cap_expiry(latest);
                    let late = model.values_mut().filter(|e| **e > latest);
                    let mut n = 0;
                    for expiry in late {
                        *expiry = latest;
                        n += 1;
                    }
                    proptest::prop_assert_eq!(capped, n);
                }
            }
            let held: BTreeMap<String, Duration> = res
                .iter()
                .map(|(id, lease)| (id.to_owned(), lease.expiry))
                .collect();
            proptest::prop_assert_eq!(&held, &model);
            proptest::prop_assert_eq!(res.last_expiry(), model.values().max().copied());
            proptest::prop_assert_eq!(res.len(), model.len());
        }
    }
}

#[test]
fn a_store_decides_sums_and_sweeps() {
    let algo = AlgorithmConfig::new(
        Kind::ProportionalShare,
        Duration::from_secs(60),
        Duration::from_secs(15),
    );
    let mut res = LeaseStore::new();
    let lease = res.decide(
        &algo,
        100.0,
        &Request::new("a", 30.0),
        Duration::ZERO,
        false,
    );
    assert_eq!((lease.has, lease.expiry), (30.0, Duration::from_secs(60)));
    assert_eq!(
        (res.sum_has(), res.sum_wants(), res.count()),
        (30.0, 30.0, 1)
    );
    assert_eq!(res.sweep(Duration::from_secs(60)), 1);
    assert!(res.is_empty());
}

#[test]
fn fair_share_is_max_min_fair_once_each_client_refreshes() {
    let algo = AlgorithmConfig::new(
        Kind::FairShare,
        Duration::from_secs(60),
        Duration::from_secs(15),
    );
    let mut res = LeaseStore::new();
    let now = Duration::from_secs(1_000);
    let a = res.decide(&algo, 120.0, &Request::new("a", 1000.0), now, false);
    assert_eq!(a.has, 120.0); // alone: gets all it can
    let b = res.decide(&algo, 120.0, &Request::new("b", 50.0), now, false);
    assert_eq!(b.has, 0.0); // "a" still holds everything until it refreshes
    let a = res.decide(&algo, 120.0, &Request::new("a", 1000.0), now, false);
    assert_eq!(a.has, 70.0); // max-min fair: b's 50, the rest to a
}
