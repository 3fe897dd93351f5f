//! [`ThrottleLayer`]: the throttler as a tower layer for HTTP services
//! (axum, hyper, and tonic's gRPC services).
//!
//! # Implementation notes
//!
//! Each request goes through [`Throttler::admit`] (rules, delay, admission
//! queue) before the inner service is called. A rejection never reaches
//! the inner service: plain HTTP gets 429 or 503 with `retry-after` in whole
//! seconds (rounded up); a gRPC request (`content-type: application/grpc*`)
//! gets a trailers-only response, HTTP 200 with `grpc-status`
//! (`RESOURCE_EXHAUSTED` or `UNAVAILABLE`), `grpc-message` and the same
//! `retry-after` as metadata.
//!
//! An admitted request over a soft limit gets `ratelimit-limit`,
//! `ratelimit-remaining` and `ratelimit-warning` headers on its response.
//! The inner call's wall time until the response head, in whole cost units
//! (rounded up, at least one), is the measured cost for post-accounting.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use axum::http::{HeaderName, HeaderValue, Request, Response};
use tower::{Layer, Service};

use super::rules::RequestHead;
use super::throttler::{Permit, Rejection, Throttler};

/// Wraps services in a [`Throttle`].
///
/// # Examples
///
/// ```
/// use axum::{routing::get, Router};
/// use tollgate::throttle::{Extract, FixedWindow, Limit, Rule, ThrottleLayer, Throttler};
/// use std::time::Duration;
///
/// let throttler = Throttler::builder()
///     .rule(Rule::new(
///         "per-ip",
///         Extract::peer_ip(),
///         Limit::FixedWindow(FixedWindow::new(100, Duration::from_secs(1))?),
///     ))
///     .build();
/// let app: Router = Router::new()
///     .route("/", get(|| async { "hello" }))
///     .layer(ThrottleLayer::new(throttler));
/// # Ok::<(), tollgate::throttle::LimitError>(())
/// ```
#[derive(Debug, Clone)]
pub struct ThrottleLayer {
    throttler: Throttler,
    cost_unit: Duration,
}

impl ThrottleLayer {
    /// A layer deciding with `throttler`; measured costs in milliseconds.
    pub fn new(throttler: Throttler) -> ThrottleLayer {
        ThrottleLayer {
            throttler,
            cost_unit: Duration::from_millis(1),
        }
    }

    /// The unit of measured cost (wall time of the inner call) for
    /// predicted costs; zero is taken as one nanosecond.
    pub fn cost_unit(mut self, unit: Duration) -> ThrottleLayer {
        self.cost_unit = unit.max(Duration::from_nanos(1));
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
        }
    }
}

/// A service that throttles requests before its inner service.
#[derive(Debug, Clone)]
pub struct Throttle<S> {
    inner: S,
    throttler: Throttler,
    cost_unit: Duration,
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
        Box::pin(async move {
            let grpc = is_grpc(&req);
            let permit = match throttler.admit(&RequestHead::of(&req)).await {
                Ok(permit) => permit,
                Err(rejection) => return Ok(rejected(&rejection, grpc)),
            };
            let started = Instant::now();
            let mut response = inner.call(req).await?;
            let measured = started
                .elapsed()
                .as_nanos()
                .div_ceil(unit.as_nanos())
                .max(1);
            warn(&permit, &mut response);
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

fn rejected<B: Default>(rejection: &Rejection, grpc: bool) -> Response<B> {
    let mut response = Response::new(B::default());
    let headers = response.headers_mut();
    if let Some(after) = rejection.retry_after() {
        let secs = after.as_nanos().div_ceil(1_000_000_000);
        headers.insert(
            axum::http::header::RETRY_AFTER,
            HeaderValue::from(secs as u64),
        );
    }
    if grpc {
        headers.insert(
            axum::http::header::CONTENT_TYPE,
            HeaderValue::from_static("application/grpc"),
        );
        headers.insert(
            HeaderName::from_static("grpc-status"),
            HeaderValue::from(rejection.grpc_code() as i32),
        );
        if let Ok(message) = HeaderValue::from_str(&grpc_message(&rejection.to_string())) {
            headers.insert(HeaderName::from_static("grpc-message"), message);
        }
    } else {
        *response.status_mut() = rejection.http_status();
    }
    response
}

/// Percent-encodes a gRPC message (everything outside printable ASCII,
/// and `%`).
fn grpc_message(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if (0x20..0x7f).contains(&b) && b != b'%' {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

fn warn<B>(permit: &Permit, response: &mut Response<B>) {
    let Some(w) = permit.warnings().first() else {
        return;
    };
    let headers = response.headers_mut();
    headers.insert(
        HeaderName::from_static("ratelimit-limit"),
        HeaderValue::from(w.limit),
    );
    headers.insert(
        HeaderName::from_static("ratelimit-remaining"),
        HeaderValue::from(w.remaining),
    );
    if let Ok(v) = HeaderValue::from_str(&format!("soft limit of rule \"{}\" exceeded", w.rule)) {
        headers.insert(HeaderName::from_static("ratelimit-warning"), v);
    }
}
