//! Clients of the quota service: [`NaiveClient`] asks the service on every
//! call and falls back to a local limiter when the service is slow or down;
//! [`SmartClient`] keeps a local bucket that a background task refills in
//! bulk from the service, so calls never wait on the network. Both admit
//! calls through [`Admit`], which [`QuotaLayer`] puts in front of any tower
//! service.

mod layer;
mod naive;
mod smart;

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

pub use layer::{QuotaLayer, QuotaLayerError, Quotaed};
pub use naive::{NaiveClient, NaiveOptions};
pub use smart::{SmartClient, SmartOptions};

use super::status::Status;

/// Where an admission's tokens came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AdmitSource {
    /// The quota service granted them.
    Service,
    /// The local fallback limiter granted them (service slow, down, or
    /// without a bucket for the name).
    Fallback,
    /// The smart client's local bucket, refilled from the service.
    Local,
}

/// A call admitted: proceed now (any wait has already been waited).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Admitted {
    /// Where the tokens came from.
    pub source: AdmitSource,
    /// How long the admission waited.
    pub waited: Duration,
}

/// Tokens granted, to be used once `wait` has passed: the answer of
/// [`NaiveClient::allow`], which leaves the waiting to the caller.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Granted {
    /// Where the tokens came from.
    pub source: AdmitSource,
    /// How long the caller must wait before using them.
    pub wait: Duration,
}

/// A call refused; it must not proceed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Denied {
    status: Option<Status>,
    max_wait: Duration,
}

impl Denied {
    pub(crate) fn by_service(status: Status) -> Denied {
        Denied {
            status: Some(status),
            max_wait: Duration::ZERO,
        }
    }

    pub(crate) fn locally(max_wait: Duration) -> Denied {
        Denied {
            status: None,
            max_wait,
        }
    }

    /// The service's status, if the service refused; `None` if the local
    /// limiter (fallback or smart bucket) had nothing within the wait
    /// allowed.
    pub fn status(&self) -> Option<Status> {
        self.status
    }
}

impl fmt::Display for Denied {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.status {
            Some(s) => write!(f, "quota denied by the service: {}", s.name()),
            None => write!(
                f,
                "quota denied locally: no tokens within {:?}",
                self.max_wait
            ),
        }
    }
}

impl std::error::Error for Denied {}

impl From<Denied> for tonic::Status {
    fn from(d: Denied) -> tonic::Status {
        tonic::Status::resource_exhausted(d.to_string())
    }
}

/// The future of [`Admit::admit`].
pub(crate) type AdmitFuture<'a> =
    Pin<Box<dyn Future<Output = Result<Admitted, Denied>> + Send + 'a>>;

/// Something that admits calls by tokens: both clients, and test doubles.
pub trait Admit: Send + Sync + fmt::Debug + 'static {
    /// Waits until `tokens` may be used, or refuses.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future gives up the call; tokens already granted by the
    /// service are not returned.
    fn admit(&self, tokens: u64) -> AdmitFuture<'_>;
}
