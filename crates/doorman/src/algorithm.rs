//! Capacity-sharing algorithms: the policy that turns one client's request
//! into a grant (`docs/design/doorman-protocol.md` §3).
//!
//! Each [`Kind`] of the wire protocol has one implementation of
//! [`Algorithm`], in its own file. An algorithm is pure: it reads the
//! resource's leases through a [`ResourceView`] (sums and indices) and the
//! request, and returns the capacity to grant. Storing the grant, lease
//! times and learning mode are the store's business
//! ([`LeaseStore::decide`](super::store::LeaseStore::decide)).
//!
//! `store/tests.rs` shows FAIR_SHARE sharing max-min fairly
//! (`fair_share_is_max_min_fair_once_each_client_refreshes`).

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
    /// then uses `lease_length`, `docs/design/doorman-protocol.md` §4). Not
    /// used by this module.
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
/// two queries. The store's [`LeaseStore`](super::store::LeaseStore) is the
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
    /// [`LeaseStore::decide`](super::store::LeaseStore::decide) sets this up; so every sum the algorithm reads
    /// counts the requester with its new wants, as
    /// `docs/design/doorman-protocol.md` §3 asks.
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
///
/// When `sum_has` is already over `capacity` (the capacity shrank, or a
/// parent cut this server's grant), it is the requester's `occupied`
/// shrunk in proportion, `occupied * capacity / sum_has`: `sum_has` still
/// only falls, to the capacity once every client has refreshed, and the
/// first clients to refresh keep their share of it rather than getting
/// nothing until the others have shrunk (which left a fleet without a
/// third of its capacity for a root refresh interval after a cut).
pub(crate) fn available(res: &dyn ResourceView, capacity: f64, client: &str) -> f64 {
    let sum_has = res.sum_has();
    if sum_has > capacity {
        res.occupied(client) * (capacity / sum_has)
    } else {
        capacity - sum_has + res.occupied(client)
    }
}

/// Clamps a computed grant into `[0, inf]`, mapping NaN to 0.
///
/// `available` is negative when the capacity shrank below what is already
/// leased; the grant is then 0, not a negative lease.
pub(crate) fn non_negative(grant: f64) -> f64 {
    // `f64::max` returns the other operand when one is NaN.
    grant.max(0.0)
}
