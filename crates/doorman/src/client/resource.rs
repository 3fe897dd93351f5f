//! One resource of a [`Client`]: the options it is asked for with, the
//! handle that holds its lease, and what can go wrong asking or releasing.

use std::fmt;
use std::sync::Arc;

use tokio::sync::{oneshot, watch};

use tollgate_service::LockUnpoisoned;

use super::{Capacity, Client, ExpiryMode, SessionError, Slot, Wants};

/// Options for one resource.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ResourceOptions {
    pub(super) wants: f64,
    pub(super) priority: i64,
    pub(super) mode: ExpiryMode,
}

impl ResourceOptions {
    /// Asks for `wants` (capacity units, e.g. operations per second), at
    /// priority 0, in [`ExpiryMode::Safe`].
    pub fn new(wants: f64) -> ResourceOptions {
        ResourceOptions {
            wants,
            priority: 0,
            mode: ExpiryMode::Safe,
        }
    }

    /// The priority sent to the server (its meaning is the algorithm's).
    pub fn priority(mut self, priority: i64) -> ResourceOptions {
        self.priority = priority;
        self
    }

    /// What to do while no lease is valid.
    pub fn mode(mut self, mode: ExpiryMode) -> ResourceOptions {
        self.mode = mode;
        self
    }

    /// The wants asked for at first.
    pub fn wants(&self) -> f64 {
        self.wants
    }
}

pub(super) fn check_wants(wants: f64) -> Result<(), ResourceError> {
    if wants.is_finite() && wants >= 0.0 {
        Ok(())
    } else {
        Err(ResourceError::BadWants(wants))
    }
}

/// A resource this client holds a lease on (or asks for one).
///
/// Dropping it releases the capacity in the background; [`release`]
/// does so and waits for the server's answer.
///
/// [`release`]: Resource::release
#[derive(Debug)]
pub struct Resource {
    pub(super) client: Client,
    pub(super) slot: Arc<Slot>,
    pub(super) rx: watch::Receiver<Capacity>,
    pub(super) registered: bool,
}

impl Resource {
    /// The resource id.
    pub fn id(&self) -> &str {
        &self.slot.id
    }

    /// The client this resource belongs to.
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// The capacity in force now.
    pub fn capacity(&self) -> f64 {
        self.rx.borrow().capacity
    }

    /// The failure that stopped this resource's client ([`Client::error`]).
    /// A receiver from [`Resource::watch`] is woken when the client stops,
    /// its capacity unchanged: look here after each wake-up.
    pub fn error(&self) -> Option<SessionError> {
        self.client.error()
    }

    /// The full state: capacity, its source, the last lease.
    pub fn current(&self) -> Capacity {
        self.rx.borrow().clone()
    }

    /// A receiver notified on every answer from the server and every change
    /// of source (lease expiry).
    pub fn watch(&self) -> watch::Receiver<Capacity> {
        self.rx.clone()
    }

    /// Sets the wants sent from the next refresh on (and ends any
    /// estimation).
    ///
    /// # Errors
    ///
    /// [`ResourceError::BadWants`] unless `wants` is finite and `>= 0`.
    pub fn set_wants(&self, wants: f64) -> Result<(), ResourceError> {
        check_wants(wants)?;
        *self.slot.wants.lock_unpoisoned() = Wants::Fixed(wants);
        Ok(())
    }

    /// Releases the capacity and waits for the server to acknowledge it.
    ///
    /// # Errors
    ///
    /// [`ReleaseError`] when the server could not be reached. The lease is
    /// forgotten either way; the server drops it when it expires.
    ///
    /// # Cancel safety
    ///
    /// The release is queued before the first await: cancelling only stops
    /// the waiting.
    pub async fn release(mut self) -> Result<(), ReleaseError> {
        let (tx, rx) = oneshot::channel();
        self.registered = false;
        self.client.unregister(&self.slot.id, Some(tx));
        rx.await.unwrap_or(Err(ReleaseError::Closed))
    }
}

impl Drop for Resource {
    fn drop(&mut self) {
        if self.registered {
            self.client.unregister(&self.slot.id, None);
        }
    }
}

/// Why a resource could not be added or changed.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum ResourceError {
    /// This client already has a resource with this id.
    Duplicate(String),
    /// Wants must be finite and `>= 0`.
    BadWants(f64),
    /// The resource id is empty, which a server refuses.
    EmptyId,
}

impl fmt::Display for ResourceError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ResourceError::Duplicate(id) => write!(f, "this client already holds resource {id:?}"),
            ResourceError::BadWants(w) => write!(f, "wants {w} is not a finite number >= 0"),
            ResourceError::EmptyId => f.write_str("the resource id is empty"),
        }
    }
}

impl std::error::Error for ResourceError {}

/// Why a release was not acknowledged.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ReleaseError {
    /// No server answered the ReleaseCapacity.
    Unreachable(SessionError),
    /// The client's task had stopped.
    Closed,
}

impl fmt::Display for ReleaseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ReleaseError::Unreachable(e) => write!(f, "release not acknowledged: {e}"),
            ReleaseError::Closed => f.write_str("the lease client has stopped"),
        }
    }
}

impl std::error::Error for ReleaseError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            ReleaseError::Unreachable(e) => Some(e),
            ReleaseError::Closed => None,
        }
    }
}
