//! The algorithms' acceptance vectors (`docs/design/doorman-protocol.md` §3)
//! and their edge cases,
//! run through the lease store: each algorithm decides on what a
//! [`LeaseStore`] holds, so the vectors test the two together and live with
//! the store (which the algorithms do not import).

use std::time::Duration;

use crate::algorithm::*;
use crate::store::LeaseStore;

/// The time of the acceptance vectors' requests.
const NOW: Duration = Duration::from_secs(1_000);

/// Runs one acceptance vector (`docs/design/doorman-protocol.md` §3):
/// `clients` as
/// `(wants, subclients)`, each asking once in order at [`NOW`]; returns
/// the grants.
///
/// "Preloaded" means every client is already known with its wants and
/// `has = 0` on a 300 s lease, as a client that asked during learning mode
/// without a `has`; that is how it is set up here.
pub(crate) fn run_vector(
    kind: Kind,
    capacity: f64,
    clients: &[(f64, u64)],
    preloaded: bool,
) -> Vec<f64> {
    let algo = AlgorithmConfig::new(kind, Duration::from_secs(60), Duration::from_secs(15));
    let learn = AlgorithmConfig::new(kind, Duration::from_secs(300), Duration::from_secs(15));
    let ids: Vec<String> = (0..clients.len()).map(|i| format!("client{i}")).collect();
    let request = |i: usize| Request {
        client: &ids[i],
        has: 0.0,
        wants: clients[i].0,
        subclients: clients[i].1,
    };
    let mut res = LeaseStore::new();
    if preloaded {
        for i in 0..clients.len() {
            assert_eq!(
                res.decide(&learn, capacity, &request(i), NOW, true).has,
                0.0
            );
        }
    }
    let capped = matches!(kind, Kind::ProportionalShare | Kind::FairShare);
    (0..clients.len())
        .map(|i| {
            let lease = res.decide(&algo, capacity, &request(i), NOW, false);
            assert_eq!(lease.expiry, NOW + algo.lease_length);
            if capped {
                assert!(
                    res.sum_has() <= capacity,
                    "sum_has {} over {capacity}",
                    res.sum_has()
                );
            }
            lease.has
        })
        .collect()
}

/// Asserts `got` equals `want` to within `tolerance`, element by element.
pub(crate) fn assert_grants(got: &[f64], want: &[f64], tolerance: f64) {
    assert_eq!(got.len(), want.len());
    for (g, w) in got.iter().zip(want) {
        assert!(
            (g - w).abs() <= tolerance,
            "grants {got:?}, expected {want:?}"
        );
    }
}

fn learning_then_algorithm(kind: Kind) {
    let algo = AlgorithmConfig::new(kind, Duration::from_secs(60), Duration::from_secs(15));
    let mut res = LeaseStore::new();
    let at = |s| Duration::from_secs(s);
    let req = |has, wants| Request {
        client: "client",
        has,
        wants,
        subclients: 1,
    };
    // Learning mode echoes what the client says it has, capacity or not.
    assert_eq!(
        res.decide(&algo, 100.0, &req(20.0, 50.0), at(0), true).has,
        20.0
    );
    assert_eq!(
        res.decide(&algo, 100.0, &req(90.0, 50.0), at(5), true).has,
        90.0
    );
    assert_eq!(res.sum_has(), 90.0);
    // After it, the algorithm decides.
    assert_eq!(
        res.decide(&algo, 100.0, &req(90.0, 120.0), at(10), false)
            .has,
        100.0
    );
    assert_eq!((res.sum_has(), res.sum_wants()), (100.0, 120.0));
}

#[test]
fn learning_mode_echoes_has_then_the_algorithm_decides() {
    // (NoAlgorithm would grant the 120 it wants.)
    for kind in [Kind::Static, Kind::ProportionalShare, Kind::FairShare] {
        learning_then_algorithm(kind);
    }
}

#[test]
fn learning_mode_grants_nothing_without_has() {
    let algo = AlgorithmConfig::new(
        Kind::FairShare,
        Duration::from_secs(60),
        Duration::from_secs(15),
    );
    let mut res = LeaseStore::new();
    let lease = res.decide(&algo, 100.0, &Request::new("a", 50.0), Duration::ZERO, true);
    assert_eq!((lease.has, lease.wants), (0.0, 50.0));
}

#[test]
fn shrunk_capacity_grants_zero_not_negative() {
    let algo = AlgorithmConfig::new(
        Kind::FairShare,
        Duration::from_secs(60),
        Duration::from_secs(15),
    );
    let mut res = LeaseStore::new();
    let t = Duration::ZERO;
    res.decide(&algo, 100.0, &Request::new("a", 100.0), t, false);
    for kind in [Kind::FairShare, Kind::ProportionalShare] {
        let algo = AlgorithmConfig {
            kind,
            ..algo.clone()
        };
        // The capacity drops to 50 while "a" still holds 100.
        assert_eq!(
            res.decide(&algo, 50.0, &Request::new("b", 10.0), t, false)
                .has,
            0.0
        );
    }
}

#[test]
fn odd_inputs_never_panic_nor_grant_nan_or_negative() {
    let t = Duration::ZERO;
    let odd = [
        f64::NAN,
        f64::INFINITY,
        f64::NEG_INFINITY,
        -1.0,
        -0.0,
        f64::MAX,
        f64::MIN_POSITIVE,
    ];
    for kind in [
        Kind::NoAlgorithm,
        Kind::Static,
        Kind::ProportionalShare,
        Kind::FairShare,
    ] {
        let algo = AlgorithmConfig::new(kind, Duration::MAX, Duration::from_secs(15));
        let mut res = LeaseStore::new();
        for (i, &x) in odd.iter().enumerate() {
            for (j, &y) in odd.iter().enumerate() {
                for subclients in [0, 1, u64::MAX] {
                    let req = Request {
                        client: if (i + j) % 2 == 0 { "a" } else { "b" },
                        has: y,
                        wants: x,
                        subclients,
                    };
                    for capacity in odd {
                        for learning in [false, true] {
                            let has = res.decide(&algo, capacity, &req, t, learning).has;
                            assert!(has >= 0.0, "{kind:?} granted {has}");
                        }
                    }
                }
            }
        }
        assert_eq!(res.len(), 2);
        assert_eq!(res.get("a").unwrap().expiry, Duration::MAX);
    }
}

/// `algorithm/fair.rs`'s vectors.
mod fair {
    use super::{assert_grants, run_vector};
    use crate::algorithm::Kind;

    fn fair(capacity: f64, clients: &[(f64, u64)]) -> Vec<f64> {
        run_vector(Kind::FairShare, capacity, clients, true)
    }

    // The acceptance vectors (docs/design/doorman-protocol.md §3), all
    // preloaded.

    #[test]
    fn vector_1000_60_10() {
        let grants = fair(120.0, &[(1000.0, 1), (60.0, 1), (10.0, 1)]);
        assert_grants(&grants, &[55.0, 55.0, 10.0], 1e-9);
    }

    #[test]
    fn vector_1000_50_10() {
        let grants = fair(120.0, &[(1000.0, 1), (50.0, 1), (10.0, 1)]);
        assert_grants(&grants, &[60.0, 50.0, 10.0], 1e-9);
    }

    #[test]
    fn vector_weighted_6_4_2() {
        let grants = fair(120.0, &[(1000.0, 6), (500.0, 4), (200.0, 2)]);
        assert_grants(&grants, &[60.0, 40.0, 20.0], 1e-9);
    }

    #[test]
    fn vector_weighted_10_10_30() {
        let grants = fair(1000.0, &[(2000.0, 10), (500.0, 10), (700.0, 30)]);
        assert_grants(&grants, &[200.0, 200.0, 600.0], 1e-9);
    }

    #[test]
    fn everyone_gets_their_wants_when_they_fit() {
        assert_grants(
            &fair(120.0, &[(50.0, 1), (60.0, 3), (10.0, 1)]),
            &[50.0, 60.0, 10.0],
            0.0,
        );
    }

    /// Redistribution that takes three rounds: the equal share 25 saturates
    /// the first client, the new share 33.3 the second, the new share 35 the
    /// third, and the last gets what is left.
    #[test]
    fn exact_after_many_rounds() {
        let grants = fair(100.0, &[(0.0, 1), (30.0, 1), (34.0, 1), (100.0, 1)]);
        assert_grants(&grants, &[0.0, 30.0, 34.0, 36.0], 1e-9);
    }

    /// Weighted: the level is per subclient. Out of 20, "a" (1 subclient)
    /// wants 1 and is saturated; "b" (1) and "c" (2) share 19 at 19/3 per
    /// subclient, below b's 6.5.
    #[test]
    fn weighted_by_subclients() {
        let grants = fair(20.0, &[(1.0, 1), (6.5, 1), (100.0, 2)]);
        assert_grants(&grants, &[1.0, 19.0 / 3.0, 38.0 / 3.0], 1e-9);
    }
}

/// `algorithm/fixed.rs`'s vectors.
mod fixed {
    use super::{assert_grants, run_vector};
    use crate::algorithm::Kind;

    #[test]
    fn vector() {
        let grants = run_vector(
            Kind::Static,
            100.0,
            &[(100.0, 1), (10.0, 1), (120.0, 1)],
            false,
        );
        assert_grants(&grants, &[100.0, 10.0, 100.0], 0.0);
    }
}

/// `algorithm/none.rs`'s vectors.
mod none {
    use super::{assert_grants, run_vector};
    use crate::algorithm::Kind;

    #[test]
    fn vector() {
        let grants = run_vector(Kind::NoAlgorithm, 0.0, &[(10.0, 1), (100.0, 1)], false);
        assert_grants(&grants, &[10.0, 100.0], 0.0);
    }
}

/// `algorithm/proportional.rs`'s vectors.
mod proportional {
    use super::{assert_grants, run_vector};
    use crate::algorithm::Kind;

    fn proportional(capacity: f64, clients: &[(f64, u64)], preloaded: bool) -> Vec<f64> {
        run_vector(Kind::ProportionalShare, capacity, clients, preloaded)
    }

    // The acceptance vectors (docs/design/doorman-protocol.md §3).

    #[test]
    fn vector_60_60_10_preloaded() {
        let grants = proportional(120.0, &[(60.0, 1), (60.0, 1), (10.0, 1)], true);
        assert_grants(&grants, &[55.0, 55.0, 10.0], 1e-9);
    }

    #[test]
    fn vector_60_75_10() {
        let grants = proportional(120.0, &[(60.0, 1), (75.0, 1), (10.0, 1)], false);
        assert_grants(&grants, &[60.0, 60.0, 0.0], 1e-9);
    }

    #[test]
    fn vector_weighted_preloaded() {
        let grants = proportional(120.0, &[(65.0, 3), (45.0, 2), (20.0, 1)], true);
        assert_grants(&grants, &[60.0, 40.0, 20.0], 1e-9);
    }

    #[test]
    fn vector_weighted() {
        let grants = proportional(120.0, &[(65.0, 3), (45.0, 2), (20.0, 1)], false);
        assert_grants(&grants, &[65.0, 45.0, 10.0], 1e-9);
    }

    /// The design doc's example (preloaded), printed there to two decimals.
    #[test]
    fn vector_design_doc_example() {
        let grants = proportional(120.0, &[(1000.0, 1), (50.0, 1), (10.0, 1)], true);
        assert_grants(&grants, &[69.69, 40.31, 10.0], 0.005);
        // Exactly: 40 + 960 * 30/970 and 40 + 10 * 30/970.
        assert_grants(
            &grants,
            &[
                40.0 + 960.0 * 30.0 / 970.0,
                40.0 + 10.0 * 30.0 / 970.0,
                10.0,
            ],
            1e-9,
        );
    }
}
