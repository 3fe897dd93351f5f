//! A tower layer that admits each request through a quota client before it
//! reaches the service: the design's client interceptor.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use tower::{Layer, Service};

use super::{Admit, Denied};

/// The error of a [`Quotaed`] service: refused by the quota, or the inner
/// service's own error.
#[derive(Debug)]
pub enum QuotaLayerError<E> {
    /// The quota refused the request; the inner service never saw it.
    Denied(Denied),
    /// The inner service failed.
    Inner(E),
}

impl<E: fmt::Display> fmt::Display for QuotaLayerError<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            QuotaLayerError::Denied(d) => d.fmt(f),
            QuotaLayerError::Inner(e) => e.fmt(f),
        }
    }
}

impl<E: std::error::Error + 'static> std::error::Error for QuotaLayerError<E> {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            QuotaLayerError::Denied(d) => Some(d),
            QuotaLayerError::Inner(e) => Some(e),
        }
    }
}

/// Puts a quota client in front of a service: every request takes
/// `tokens` tokens first.
///
/// # Examples
///
/// ```no_run
/// use std::sync::Arc;
/// use tollgate_quota::{NaiveClient, NaiveOptions, QuotaLayer};
/// use tower::{Layer as _, ServiceExt as _};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let client = NaiveClient::new("127.0.0.1:15100", "Pinky_TheBrain", "UserService", NaiveOptions::new("100".parse()?))?;
/// let service = QuotaLayer::new(Arc::new(client), 1)
///     .layer(tower::service_fn(|x: u32| async move { Ok::<_, std::convert::Infallible>(x * 2) }));
/// let doubled = service.oneshot(21).await?;
/// # Ok(())
/// # }
/// ```
#[derive(Debug)]
pub struct QuotaLayer<A> {
    admit: Arc<A>,
    tokens: u64,
}

impl<A> Clone for QuotaLayer<A> {
    fn clone(&self) -> Self {
        QuotaLayer {
            admit: Arc::clone(&self.admit),
            tokens: self.tokens,
        }
    }
}

impl<A: Admit> QuotaLayer<A> {
    /// Each request takes `tokens` tokens from `admit`.
    pub fn new(admit: Arc<A>, tokens: u64) -> QuotaLayer<A> {
        QuotaLayer { admit, tokens }
    }
}

impl<A, S> Layer<S> for QuotaLayer<A> {
    type Service = Quotaed<A, S>;

    fn layer(&self, inner: S) -> Quotaed<A, S> {
        Quotaed {
            inner,
            admit: Arc::clone(&self.admit),
            tokens: self.tokens,
        }
    }
}

/// A service whose requests are admitted by a quota client first.
#[derive(Debug)]
pub struct Quotaed<A, S> {
    inner: S,
    admit: Arc<A>,
    tokens: u64,
}

impl<A, S: Clone> Clone for Quotaed<A, S> {
    fn clone(&self) -> Self {
        Quotaed {
            inner: self.inner.clone(),
            admit: Arc::clone(&self.admit),
            tokens: self.tokens,
        }
    }
}

impl<A, S, R> Service<R> for Quotaed<A, S>
where
    A: Admit,
    S: Service<R> + Clone + Send + 'static,
    S::Future: Send,
    R: Send + 'static,
{
    type Response = S::Response;
    type Error = QuotaLayerError<S::Error>;
    type Future = Pin<Box<dyn Future<Output = Result<S::Response, Self::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx).map_err(QuotaLayerError::Inner)
    }

    fn call(&mut self, req: R) -> Self::Future {
        // The ready inner service serves this request; a fresh clone takes
        // its place for the next one (tower's usual pattern).
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        let admit = Arc::clone(&self.admit);
        let tokens = self.tokens;
        Box::pin(async move {
            admit.admit(tokens).await.map_err(QuotaLayerError::Denied)?;
            inner.call(req).await.map_err(QuotaLayerError::Inner)
        })
    }
}
