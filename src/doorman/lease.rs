//! The lease vocabulary client and server share: instants, leases and
//! holds, in domain types (the wire's are in `pb`).
//!
//! # Examples
//!
//! ```
//! use std::time::Duration;
//! use tollgate::doorman::lease::{ClientLease, Timestamp};
//!
//! let now: Timestamp = Duration::from_secs(1_000);
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

/// Capacity a client's subtree still holds beyond the client's lease, and
/// until when at the latest.
///
/// An intermediate server's leases outlive a cut of its own grant: until its
/// clients refresh (or, if it lost mastership meanwhile, until their leases
/// end) they hold what it granted under the bigger grant. It reports that in
/// its `has`, and its parent keeps the excess as a hold so that it does not
/// hand the same capacity to someone else.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Hold {
    /// The capacity held beyond the lease's `has`; positive.
    pub capacity: f64,
    /// When the hold ends; never after its lease's expiry.
    pub until: Timestamp,
}
