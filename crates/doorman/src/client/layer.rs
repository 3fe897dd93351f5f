//! A tower layer that makes a service keep to a leased rate.
//!
//! Each request waits for a slot from a [`RateResource`] for at most a
//! bound, then runs; if no slot comes in time it is rejected without
//! reaching the service: with [`Rejected`] as the error, or, for tonic
//! services ([`LeaseLayer::grpc`]), with `tonic::Status::resource_exhausted`,
//! which tonic turns into a gRPC status response.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use tower::{BoxError, Layer, Service};

use super::RateResource;

/// A request found no capacity within its bound.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rejected {
    resource: String,
    max_wait: Duration,
}

impl Rejected {
    pub(crate) fn new(resource: &str, max_wait: Duration) -> Rejected {
        Rejected {
            resource: resource.to_owned(),
            max_wait,
        }
    }

    /// The resource whose capacity ran out.
    pub fn resource(&self) -> &str {
        &self.resource
    }

    /// How long the request was allowed to wait.
    pub fn max_wait(&self) -> Duration {
        self.max_wait
    }
}

impl fmt::Display for Rejected {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "capacity of {:?} exhausted: no slot within {:?}",
            self.resource, self.max_wait
        )
    }
}

impl std::error::Error for Rejected {}

impl From<Rejected> for tonic::Status {
    fn from(r: Rejected) -> tonic::Status {
        tonic::Status::resource_exhausted(r.to_string())
    }
}

/// Applies [`Leased`] to a service.
///
/// # Examples
///
/// ```no_run
/// use std::sync::Arc;
/// use std::time::Duration;
/// use tollgate_doorman::{Client, LeaseLayer, RateOptions, RateResource, ResourceOptions};
/// use tower::{Layer as _, ServiceExt as _};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), tower::BoxError> {
/// let client = Client::builder().server("127.0.0.1:15000").build()?;
/// let rate = RateResource::new(&client, "api", RateOptions::new(ResourceOptions::new(100.0)))?;
/// let layer = LeaseLayer::new(Arc::new(rate), Duration::from_millis(50));
/// let service = layer.layer(tower::service_fn(|x: u32| async move { Ok::<_, tower::BoxError>(x * 2) }));
/// let doubled = service.oneshot(21).await?;
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct LeaseLayer {
    rate: Arc<RateResource>,
    max_wait: Duration,
    grpc: bool,
}

impl LeaseLayer {
    /// Requests wait at most `max_wait` for a slot from `rate`.
    pub fn new(rate: Arc<RateResource>, max_wait: Duration) -> LeaseLayer {
        LeaseLayer {
            rate,
            max_wait,
            grpc: false,
        }
    }

    /// Rejects with `tonic::Status::resource_exhausted` (for tonic servers)
    /// instead of [`Rejected`].
    pub fn grpc(mut self) -> LeaseLayer {
        self.grpc = true;
        self
    }
}

impl<S> Layer<S> for LeaseLayer {
    type Service = Leased<S>;

    fn layer(&self, inner: S) -> Leased<S> {
        Leased {
            inner,
            layer: self.clone(),
        }
    }
}

/// A service whose requests each take one slot of a leased rate.
#[derive(Debug, Clone)]
pub struct Leased<S> {
    inner: S,
    layer: LeaseLayer,
}

impl<S, R> Service<R> for Leased<S>
where
    S: Service<R> + Clone + Send + 'static,
    S::Future: Send,
    S::Error: Into<BoxError>,
    R: Send + 'static,
{
    type Response = S::Response;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<S::Response, BoxError>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, request: R) -> Self::Future {
        // The clone is not ready; take the ready one (tower's usual swap).
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        let layer = self.layer.clone();
        Box::pin(async move {
            if let Err(rejected) = layer.rate.acquire_timeout(layer.max_wait).await {
                return Err(if layer.grpc {
                    Box::new(tonic::Status::from(rejected)) as BoxError
                } else {
                    Box::new(rejected)
                });
            }
            inner.call(request).await.map_err(Into::into)
        })
    }
}
