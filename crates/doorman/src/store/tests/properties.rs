//! Property tests: the store against the naive model.

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
        let (mut res, mut model) = (LeaseStore::new(), Model::default());
        let mut now = secs(0);
        // When the last lease granted in learning mode, or the last
        // hold, ends.
        let mut learned_until = secs(0);
        for op in ops {
            match op {
                Op::Refresh { client, wants, subclients } => {
                    let req = req(&ids[client], wants, subclients);
                    let before = res.sum_has();
                    let got = res.decide(&algo, capacity, &req, now, false).has;
                    let want = model.decide(kind, capacity, algo.lease_length, &req, now, false);
                    prop_assert!(close(got, want, capacity), "grant {got}, model {want}");
                    let shared = matches!(kind, Kind::ProportionalShare | Kind::FairShare);
                    let over = |sum: f64| sum > capacity * (1.0 + 1e-12) + 1e-9;
                    if shared && now >= learned_until {
                        prop_assert!(!over(res.sum_has()),
                            "sum_has {} over capacity {capacity}", res.sum_has());
                    }
                    if shared && over(before) {
                        // Over capacity (holds or learning mode put it
                        // there), a refresh never adds to what is out...
                        prop_assert!(res.sum_has() <= before * (1.0 + 1e-12) + 1e-9,
                            "sum_has {} grew from {before} over capacity {capacity}",
                            res.sum_has());
                        // ...but its lease, a share of what the client
                        // held, may outlast the hold it came from: the
                        // excess is gone once such leases are.
                        learned_until = learned_until.max(now + algo.lease_length);
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
        let mut res = LeaseStore::new();
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
        let mut res = LeaseStore::new();
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
