//! [`ThrottleLayer`]: the throttler as a tower layer for HTTP services
//! (axum, hyper, and tonic's gRPC services).
//!
//! # Implementation notes
//!
//! Each request goes through [`Throttler::admit`] (rules, delay, admission
//! queue) before the inner service is called. A rejection never reaches
//! the inner service: it is answered as plain HTTP or, for a request with
//! `content-type: application/grpc*`, as a gRPC status (see `render.rs`).
//! Admitted responses carry the rules' fields and any soft-limit warning.
//!
//! With a throttler that predicts costs
//! ([`CostModel::Predicted`](crate::CostModel::Predicted)) the layer
//! measures each request with its [`CostMeter`] and finishes the permit
//! with that cost; with other cost models it reads no clock.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use axum::http::{Request, Response};
use tower::{Layer, Service};

use super::meter::CostMeter;
use super::render::{ratelimit_fields, rejected, warn};
use super::rules::RequestHead;
use super::throttler::Throttler;

/// Wraps services in a [`Throttle`].
///
/// # Examples
///
/// A server limiting each client IP to 100 requests a second. The rule
/// reads the peer's address, which axum records only when the router is
/// served with `into_make_service_with_connect_info`; served with a plain
/// `axum::serve(listener, app)`, the rule logs an error on its first
/// request and counts every request in one shared bucket.
///
/// ```no_run
/// use std::net::SocketAddr;
/// use std::time::Duration;
///
/// use axum::{routing::get, Router};
/// use tollgate_throttle::{Extract, FixedWindow, Limit, Rule, ThrottleLayer, Throttler};
///
/// #[tokio::main]
/// async fn main() -> Result<(), Box<dyn std::error::Error>> {
///     let throttler = Throttler::builder()
///         .rule(
///             Rule::new(
///                 "per-ip",
///                 Extract::peer_ip(),
///                 Limit::FixedWindow(FixedWindow::new(100, Duration::from_secs(1))?),
///             )
///             .ratelimit_headers(true),
///         )
///         .build();
///     let app = Router::new()
///         .route("/", get(|| async { "hello" }))
///         .layer(ThrottleLayer::new(throttler));
///     let listener = tokio::net::TcpListener::bind("127.0.0.1:3000").await?;
///     axum::serve(
///         listener,
///         app.into_make_service_with_connect_info::<SocketAddr>(),
///     )
///     .await?;
///     Ok(())
/// }
/// ```
///
/// Behind a reverse proxy, the peer is the proxy: count the address it
/// forwards instead, believed only from the proxy's own addresses.
///
/// ```
/// use tollgate_throttle::{Extract, Trust};
///
/// let per_client = Extract::client_ip(Trust::networks(["10.0.0.0/8"])?);
/// # let _ = per_client;
/// # Ok::<(), tollgate_throttle::ValueError>(())
/// ```
#[derive(Debug, Clone)]
pub struct ThrottleLayer {
    throttler: Throttler,
    cost_unit: Duration,
    meter: CostMeter,
}

impl ThrottleLayer {
    /// A layer deciding with `throttler`; measured costs in milliseconds
    /// of thread CPU time.
    pub fn new(throttler: Throttler) -> ThrottleLayer {
        ThrottleLayer {
            throttler,
            cost_unit: Duration::from_millis(1),
            meter: CostMeter::thread_cpu(),
        }
    }

    /// The unit of measured cost for predicted costs; zero is taken as one
    /// nanosecond.
    pub fn cost_unit(mut self, unit: Duration) -> ThrottleLayer {
        self.cost_unit = unit.max(Duration::from_nanos(1));
        self
    }

    /// How the cost of a request is measured (default
    /// [`CostMeter::thread_cpu`]).
    pub fn cost_meter(mut self, meter: CostMeter) -> ThrottleLayer {
        self.meter = meter;
        self
    }
}

impl<S> Layer<S> for ThrottleLayer {
    type Service = Throttle<S>;

    fn layer(&self, inner: S) -> Throttle<S> {
        Throttle {
            inner,
            throttler: self.throttler.clone(),
            cost_unit: self.cost_unit,
            meter: self.meter.clone(),
        }
    }
}

/// A service that throttles requests before its inner service.
#[derive(Debug, Clone)]
pub struct Throttle<S> {
    inner: S,
    throttler: Throttler,
    cost_unit: Duration,
    meter: CostMeter,
}

impl<S, ReqB, ResB> Service<Request<ReqB>> for Throttle<S>
where
    S: Service<Request<ReqB>, Response = Response<ResB>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    ReqB: Send + 'static,
    ResB: Default + Send + 'static,
{
    type Response = Response<ResB>;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Response<ResB>, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<ReqB>) -> Self::Future {
        // The clone is not ready; keep the ready one for this call.
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        let throttler = self.throttler.clone();
        let unit = self.cost_unit;
        let meter = self.meter.clone();
        Box::pin(async move {
            let grpc = is_grpc(&req);
            let permit = match throttler.admit(&RequestHead::of(&req)).await {
                Ok(permit) => permit,
                Err(rejection) => return Ok(rejected(&rejection, grpc)),
            };
            if !throttler.predicts_cost() {
                // Nothing to post-account: no clock reads.
                let mut response = inner.call(req).await?;
                warn(&permit, &mut response);
                ratelimit_fields(permit.limits(), response.headers_mut());
                return Ok(response);
            }
            let started = Instant::now();
            let mut spent = Duration::ZERO;
            let before = meter.read();
            let mut call = std::pin::pin!(inner.call(req));
            if let (Some(before), Some(after)) = (before, meter.read()) {
                spent += after.saturating_sub(before);
            }
            let mut response = std::future::poll_fn(|cx| {
                let before = meter.read();
                let poll = call.as_mut().poll(cx);
                if let (Some(before), Some(after)) = (before, meter.read()) {
                    spent += after.saturating_sub(before);
                }
                poll
            })
            .await?;
            if meter.is_wall() {
                spent = started.elapsed();
            }
            let measured = spent.as_nanos().div_ceil(unit.as_nanos()).max(1);
            warn(&permit, &mut response);
            ratelimit_fields(permit.limits(), response.headers_mut());
            permit.finish(u64::try_from(measured).unwrap_or(u64::MAX));
            Ok(response)
        })
    }
}

fn is_grpc<B>(req: &Request<B>) -> bool {
    req.headers()
        .get(axum::http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/grpc"))
}
