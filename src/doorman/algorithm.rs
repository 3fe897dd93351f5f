//! Capacity-sharing algorithms: the policy that turns one client's request
//! into a grant (protocol §3).
//!
//! Each [`Kind`] of the wire protocol has one implementation of
//! [`Algorithm`], in its own file. An algorithm is pure: it reads the
//! resource's [`Resource`] (sums and indices) and the request, and returns the
//! capacity to grant. Storing the grant, lease times and learning mode are the
//! store's business ([`Resource::decide`]).
//!
//! # Examples
//!
//! ```
//! use std::time::Duration;
//! use tollgate::doorman::algorithm::{AlgorithmConfig, Kind, Request};
//! use tollgate::doorman::store::Resource;
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

use super::store::Resource;

mod fair;
mod fixed;
mod none;
mod proportional;

pub use fair::FairShare;
pub use fixed::Static;
pub use none::NoAlgorithm;
pub use proportional::ProportionalShare;

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

/// A capacity-sharing policy.
pub trait Algorithm: fmt::Debug + Send + Sync {
    /// The capacity to grant `req` out of `capacity`.
    ///
    /// `res` must already record the requester's demand: its entry carries
    /// `req.wants` and `req.subclients` (a new client is present with
    /// `has = 0`), while its `has` is still the one of its previous lease.
    /// [`Resource::decide`] sets this up; so every sum the algorithm reads
    /// counts the requester with its new wants, as protocol §3 asks.
    ///
    /// The result is never negative nor NaN.
    fn grant(&self, res: &Resource, capacity: f64, req: &Request<'_>) -> f64;
}

/// The capacity not held by other clients' unexpired leases:
/// `capacity - sum_has + old.has`. Every algorithm but `NoAlgorithm` and
/// `Static` caps its grant with it, so a decision never pushes `sum_has` over
/// `capacity`.
pub(crate) fn available(res: &Resource, capacity: f64, client: &str) -> f64 {
    let old_has = res.get(client).map_or(0.0, |lease| lease.has);
    capacity - res.sum_has() + old_has
}

/// Clamps a computed grant into `[0, inf]`, mapping NaN to 0.
///
/// `available` is negative when the capacity shrank below what is already
/// leased; the grant is then 0, not a negative lease.
pub(crate) fn non_negative(grant: f64) -> f64 {
    // `f64::max` returns the other operand when one is NaN.
    grant.max(0.0)
}
