//! Capacity-sharing algorithms: the policy that turns one client's request
//! into a grant (protocol §3).
//!
//! Each [`Kind`] of the wire protocol has one implementation of
//! [`Algorithm`], in its own file. An algorithm is pure: it reads the
//! resource's leases through a [`ResourceView`] (sums and indices) and the
//! request, and returns the capacity to grant. Storing the grant, lease
//! times and learning mode are the store's business
//! ([`Resource::decide`](super::store::Resource::decide)).
//!
//! # Examples
//!
//! ```
//! use std::time::Duration;
//! use tollgate_doorman::bench::{AlgorithmConfig, Kind, Request, Resource};
//!
//! let algo = AlgorithmConfig::new(Kind::FairShare, Duration::from_secs(60), Duration::from_secs(15));
//! let mut res = Resource::new();
//! let now = Duration::from_secs(1_000);
//! let a = res.decide(&algo, 120.0, &Request::new("a", 1000.0), now, false);
//! assert_eq!(a.has, 120.0); // alone: gets all it can
//! let b = res.decide(&algo, 120.0, &Request::new("b", 50.0), now, false);
//! assert_eq!(b.has, 0.0); // "a" still holds everything until it refreshes
//! let a = res.decide(&algo, 120.0, &Request::new("a", 1000.0), now, false);
//! assert_eq!(a.has, 70.0); // max-min fair: b's 50, the rest to a
//! ```

use std::fmt;
use std::time::Duration;

mod fair;
mod fixed;
mod none;
mod proportional;

pub(super) use fair::FairShare;
pub(super) use fixed::Static;
pub(super) use none::NoAlgorithm;
pub(super) use proportional::ProportionalShare;

/// The algorithm kinds of the wire protocol (`doorman.Algorithm.Kind`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// `NO_ALGORITHM = 0`: every client gets what it wants.
    NoAlgorithm,
    /// `STATIC = 1`: every client gets what it wants, up to the capacity.
    Static,
    /// `PROPORTIONAL_SHARE = 2`: equal shares, topped up in proportion to need.
    ProportionalShare,
    /// `FAIR_SHARE = 3`: weighted max-min fair shares.
    FairShare,
}

impl Kind {
    /// The implementation of this kind.
    pub fn algorithm(self) -> &'static dyn Algorithm {
        match self {
            Kind::NoAlgorithm => &NoAlgorithm,
            Kind::Static => &Static,
            Kind::ProportionalShare => &ProportionalShare,
            Kind::FairShare => &FairShare,
        }
    }
}

/// A resource's algorithm as configured (`doorman.Algorithm`), in domain types.
#[derive(Clone, Debug, PartialEq)]
pub struct AlgorithmConfig {
    /// Which algorithm divides the capacity.
    pub kind: Kind,
    /// How long a granted lease lasts.
    pub lease_length: Duration,
    /// How long a client should wait before it refreshes its lease.
    pub refresh_interval: Duration,
    /// The configured learning mode length; `None` when absent (the server
    /// then uses `lease_length`, protocol §2). Not used by this module.
    pub learning_mode_duration: Option<Duration>,
    /// Named parameters, as configured. No algorithm here reads any.
    pub parameters: Vec<(String, Option<String>)>,
}

impl AlgorithmConfig {
    /// A configuration with no learning mode override and no parameters.
    pub fn new(kind: Kind, lease_length: Duration, refresh_interval: Duration) -> Self {
        AlgorithmConfig {
            kind,
            lease_length,
            refresh_interval,
            learning_mode_duration: None,
            parameters: Vec::new(),
        }
    }
}

/// One client's request for one resource, as the server validated it:
/// `has` and `wants` finite and non-negative, `subclients >= 1`.
///
/// Nothing here panics on other values, but the grants are then meaningless.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Request<'a> {
    /// The client's id.
    pub client: &'a str,
    /// The capacity the client says it holds (`has.capacity`, 0 when absent).
    /// Only learning mode reads it: algorithms trust the store instead.
    pub has: f64,
    /// The capacity the client asks for.
    pub wants: f64,
    /// How many clients this one stands for (1 for a plain client, the sum of
    /// `num_clients` for an intermediate server).
    pub subclients: u64,
}

impl<'a> Request<'a> {
    /// A request from a plain client (one subclient) that holds nothing.
    pub fn new(client: &'a str, wants: f64) -> Self {
        Request {
            client,
            has: 0.0,
            wants,
            subclients: 1,
        }
    }
}

/// What an algorithm reads of one resource's leases: the running sums and
/// two queries. The store's [`Resource`](super::store::Resource) is the
/// implementation; an algorithm sees nothing else of it.
pub trait ResourceView {
    /// The capacity held: the sum of `has` over all leases plus their
    /// holds.
    fn sum_has(&self) -> f64;

    /// The sum of `wants` over all leases.
    fn sum_wants(&self) -> f64;

    /// The sum of `subclients` over all leases.
    fn count(&self) -> u64;

    /// The capacity `client` occupies: its lease's `has` plus its hold; 0
    /// without a lease.
    fn occupied(&self, client: &str) -> f64;

    /// The total wants and subclients of the leases whose wants per
    /// subclient is at most `ratio`.
    fn demand_up_to(&self, ratio: f64) -> (f64, u64);

    /// The weighted max-min fair water level for `capacity`: the `L` with
    /// `sum_i min(wants_i, L * subclients_i) = capacity`, or infinity when
    /// all wants fit in `capacity`.
    fn water_level(&self, capacity: f64) -> f64;
}

/// A capacity-sharing policy.
pub trait Algorithm: fmt::Debug + Send + Sync {
    /// The capacity to grant `req` out of `capacity`.
    ///
    /// `res` must already record the requester's demand: its entry carries
    /// `req.wants` and `req.subclients` (a new client is present with
    /// `has = 0`), while its `has` is still the one of its previous lease.
    /// [`Resource::decide`](super::store::Resource::decide) sets this up; so every sum the algorithm reads
    /// counts the requester with its new wants, as protocol §3 asks.
    ///
    /// The result is never negative nor NaN.
    fn grant(&self, res: &dyn ResourceView, capacity: f64, req: &Request<'_>) -> f64;
}

/// The capacity not held by other clients' unexpired leases and their holds
/// (see [`Hold`](super::lease::Hold)): `capacity - sum_has + occupied`,
/// where `occupied` is the requester's own previous lease and hold. Every
/// algorithm but `NoAlgorithm` and `Static` caps its grant with it, so a
/// decision never pushes `sum_has` over `capacity`, nor further over when
/// it already is.
pub(crate) fn available(res: &dyn ResourceView, capacity: f64, client: &str) -> f64 {
    capacity - res.sum_has() + res.occupied(client)
}

/// Clamps a computed grant into `[0, inf]`, mapping NaN to 0.
///
/// `available` is negative when the capacity shrank below what is already
/// leased; the grant is then 0, not a negative lease.
pub(crate) fn non_negative(grant: f64) -> f64 {
    // `f64::max` returns the other operand when one is NaN.
    grant.max(0.0)
}

// The vectors run through the lease store, which only the server builds.
#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::store::Resource;

    /// The time of the acceptance vectors' requests.
    const NOW: Duration = Duration::from_secs(1_000);

    /// Runs one acceptance vector of protocol §3: `clients` as
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
        let mut res = Resource::new();
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
        let mut res = Resource::new();
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
        let mut res = Resource::new();
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
        let mut res = Resource::new();
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
            let mut res = Resource::new();
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
}
