//! The lease vocabulary client and server share: instants, leases, holds,
//! and the requests and grants of the capacity RPCs, in domain types (the
//! wire's are in `pb`; `server::wire` converts at the edge).
//!
//! # Examples
//!
//! ```
//! use std::time::Duration;
//! use tollgate_doorman::ClientLease;
//!
//! let now = Duration::from_secs(1_000);
//! let lease = ClientLease {
//!     has: 10.0,
//!     wants: 12.0,
//!     subclients: 1,
//!     expiry: now + Duration::from_secs(60),
//!     refresh_interval: Duration::from_secs(15),
//! };
//! assert!(lease.expiry > now);
//! ```

use std::time::Duration;

#[cfg(feature = "server")]
use super::algorithm::AlgorithmConfig;
#[cfg(feature = "server")]
use super::election::Mastership;

pub(super) use super::clock::Timestamp;

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

#[cfg(feature = "server")]
/// Capacity a client's subtree still holds beyond the client's lease, and
/// until when at the latest.
///
/// An intermediate server's leases outlive a cut of its own grant: until its
/// clients refresh (or, if it lost mastership meanwhile, until their leases
/// end) they hold what it granted under the bigger grant. It reports that in
/// its `has`, and its parent keeps the excess as a hold so that it does not
/// hand the same capacity to someone else.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Hold {
    /// The capacity held beyond the lease's `has`; positive.
    pub capacity: f64,
    /// When the hold ends; never after its lease's expiry.
    pub until: Timestamp,
}

/// A lease as it travels (`doorman.Lease`): granted in a response, or
/// reported back by its holder as the `has` of a request. A client reads
/// only a checked one: its capacity finite and `>= 0`.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Lease {
    /// The capacity granted or held.
    pub capacity: f64,
    /// When it ends, as Unix time (for a `has`: when what is held ends at
    /// the latest).
    pub expiry: Timestamp,
    /// How long the holder should wait before it asks again (0 in a `has`
    /// that reports a subtree rather than one lease).
    pub refresh_interval: Duration,
}

#[cfg(feature = "server")]
impl From<&ClientLease> for Lease {
    fn from(lease: &ClientLease) -> Self {
        Lease {
            capacity: lease.has,
            expiry: lease.expiry,
            refresh_interval: lease.refresh_interval,
        }
    }
}

#[cfg(feature = "server")]
impl Lease {
    /// The larger of two: the larger capacity and the later expiry, with
    /// the refresh interval of the first present.
    pub fn larger(a: Option<Lease>, b: Option<Lease>) -> Option<Lease> {
        match (a, b) {
            (Some(a), Some(b)) => Some(Lease {
                capacity: a.capacity.max(b.capacity),
                expiry: a.expiry.max(b.expiry),
                refresh_interval: a.refresh_interval,
            }),
            (a, b) => a.or(b),
        }
    }
}

#[cfg(feature = "server")]
/// One client's request for capacity on one resource (GetCapacity).
#[derive(Clone, Debug, PartialEq)]
pub(super) struct ResourceRequest {
    /// The resource.
    pub resource_id: String,
    /// The client's priority; higher is more urgent.
    pub priority: i64,
    /// What the client says it holds, if it says.
    pub has: Option<Lease>,
    /// The capacity it asks for; finite and `>= 0`.
    pub wants: f64,
}

#[cfg(feature = "server")]
/// A client's request for capacity (GetCapacity), checked: ids non-empty
/// and within limits, resources distinct and known, amounts finite and
/// `>= 0`.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct CapacityRequest {
    /// The client's id.
    pub client_id: String,
    /// One request per resource.
    pub resources: Vec<ResourceRequest>,
}

#[cfg(feature = "server")]
/// The clients of one priority on an intermediate server, summed.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) struct Band {
    /// Their priority.
    pub priority: i64,
    /// How many clients; at least 1.
    pub num_clients: u64,
    /// The sum of their wants; finite and `>= 0`.
    pub wants: f64,
}

#[cfg(feature = "server")]
/// An intermediate server's request for one resource (GetServerCapacity).
#[derive(Clone, Debug, PartialEq)]
pub(super) struct ServerResourceRequest {
    /// The resource.
    pub resource_id: String,
    /// What its subtree holds, if it says.
    pub has: Option<Lease>,
    /// Its clients, one band per priority.
    pub bands: Vec<Band>,
}

#[cfg(feature = "server")]
impl ServerResourceRequest {
    /// The total wants of the bands.
    pub(super) fn wants(&self) -> f64 {
        self.bands.iter().fold(0.0, |sum, b| sum + b.wants)
    }

    /// The total clients of the bands; at least 1, since a server with no
    /// bands still stands for itself.
    pub(super) fn subclients(&self) -> u64 {
        self.bands
            .iter()
            .fold(0u64, |n, b| n.saturating_add(b.num_clients))
            .max(1)
    }

    /// The most urgent priority of its bands (0 without bands).
    pub(super) fn priority(&self) -> i64 {
        self.bands.iter().map(|b| b.priority).max().unwrap_or(0)
    }
}

#[cfg(feature = "server")]
/// An intermediate server's request for capacity (GetServerCapacity),
/// checked like a [`CapacityRequest`], and every band with at least one
/// client.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct ServerCapacityRequest {
    /// The asking server's id.
    pub server_id: String,
    /// One request per resource.
    pub resources: Vec<ServerResourceRequest>,
}

#[cfg(feature = "server")]
/// A client giving back its leases (ReleaseCapacity). Resource ids are not
/// checked: one that names no lease releases nothing.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct ReleaseRequest {
    /// The client's id; non-empty.
    pub client_id: String,
    /// The resources whose leases it gives back.
    pub resource_ids: Vec<String>,
}

#[cfg(feature = "server")]
/// The lease granted on one resource, with what to use should the server
/// become unreachable.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct Grant {
    /// The resource.
    pub resource_id: String,
    /// The lease.
    pub lease: Lease,
    /// The capacity to use while no lease is held, if the server says.
    pub safe_capacity: Option<f64>,
}

#[cfg(feature = "server")]
/// The lease granted to an intermediate server on one resource, with the
/// algorithm it is to divide it by.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct ServerGrant {
    /// The grant.
    pub grant: Grant,
    /// How the intermediate server divides it; `None` when the parent sent
    /// an algorithm this server does not know.
    pub algorithm: Option<AlgorithmConfig>,
}

#[cfg(feature = "server")]
/// A server's answer to a capacity RPC: done, or refused because this
/// server is not the master (with what it knows of the master).
#[derive(Clone, Debug, PartialEq)]
pub(super) enum Answer<T> {
    /// The request was handled.
    Done(T),
    /// This server is not the master; nothing was done.
    NotMaster(Mastership),
}
