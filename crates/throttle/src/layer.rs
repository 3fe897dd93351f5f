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
//! (`RESOURCE_EXHAUSTED` or `UNAVAILABLE`), `grpc-message`, the same
//! `retry-after` as metadata, and, when a retry time is known, a
//! `google.rpc.Status` holding a `google.rpc.RetryInfo` with the exact
//! delay in `grpc-status-details-bin` (what gRPC clients' retry support
//! reads).
//!
//! Every 429 and 503 carries `retry-after`, in whole seconds rounded up.
//! A cost no rule or queue can ever admit gets 413 (gRPC
//! `INVALID_ARGUMENT`) and a request without a key a rule requires gets
//! 400 (gRPC `INVALID_ARGUMENT`), without `retry-after`: retrying either
//! unchanged never succeeds.
//!
//! Rules with headers on ([`Rule::ratelimit_headers`](super::Rule::ratelimit_headers),
//! or [`ThrottlerBuilder::ratelimit_headers`](super::ThrottlerBuilder::ratelimit_headers)
//! for all) add the fields of draft-ietf-httpapi-ratelimit-headers-09 to
//! admitted and refused responses alike (as gRPC metadata, for gRPC): one
//! list member per rule that decided the request, named after the rule,
//!
//! ```text
//! ratelimit-policy: "per-key";q=10;w=2
//! ratelimit: "per-key";r=7;t=1
//! ```
//!
//! where `q` is the rule's quota (what a fresh key may spend at once), `w`
//! the seconds it applies over (a window, or the time a bucket takes to
//! refill it), `r` what the key may still spend at once and `t` the
//! seconds until it holds its whole quota again, all rounded up.
//!
//! An admitted request over a soft limit gets `ratelimit-limit`,
//! `ratelimit-remaining` and `ratelimit-warning` headers on its response.
//!
//! The measured cost for post-accounting is, by default, the CPU time the
//! request's work used: the calling thread's CPU clock
//! (`CLOCK_THREAD_CPUTIME_ID`) is read before and after the inner
//! service's `call` and each poll of its future, and the differences are
//! summed until the response head is ready. Time the future spends waiting (on I/O, a lock,
//! a timer) costs nothing, and work other requests do on the same thread
//! between polls is not charged to it. [`CostMeter::wall`] measures wall
//! time to the response head instead. Either is converted to whole cost
//! units, rounded up, at least one. Work done while the response body
//! streams is not measured. Only a throttler that predicts costs
//! ([`CostModel::Predicted`](super::CostModel::Predicted)) is measured for;
//! with other cost models the layer reads no clock.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use axum::http::{HeaderMap, HeaderName, HeaderValue, Request, Response};
use tower::{Layer, Service};

use super::rules::RequestHead;
use super::decision::Permit;
use super::outcome::{LimitStatus, Rejection};
use super::throttler::Throttler;

/// How [`ThrottleLayer`] measures what a request cost, for post-accounting
/// of predicted costs ([`CostModel::Predicted`](super::CostModel::Predicted)).
///
/// # Examples
///
/// ```
/// use tollgate_throttle::{CostMeter, ThrottleLayer, Throttler};
/// use std::time::Duration;
///
/// // Cost in CPU microseconds of the handler's own work (the default meter).
/// let layer = ThrottleLayer::new(Throttler::builder().build())
///     .cost_meter(CostMeter::thread_cpu())
///     .cost_unit(Duration::from_micros(1));
/// # let _ = layer;
/// ```
#[derive(Clone)]
pub struct CostMeter {
    kind: MeterKind,
}

#[derive(Clone)]
enum MeterKind {
    ThreadCpu,
    Wall,
    Custom(Arc<dyn Fn() -> Duration + Send + Sync>),
}

impl CostMeter {
    /// The CPU time of the thread that polls the inner service's future,
    /// summed over its polls (the default). Where the platform has no
    /// thread CPU clock, reads as zero and every request costs one unit.
    pub fn thread_cpu() -> CostMeter {
        CostMeter {
            kind: MeterKind::ThreadCpu,
        }
    }

    /// The wall time from calling the inner service to its response head.
    pub fn wall() -> CostMeter {
        CostMeter {
            kind: MeterKind::Wall,
        }
    }

    /// A reading of your own (a monotonic counter as a duration), taken
    /// before and after each poll of the inner service's future, the
    /// differences summed like [`thread_cpu`](CostMeter::thread_cpu)'s.
    /// A reading that goes backwards counts as zero.
    pub fn custom(read: impl Fn() -> Duration + Send + Sync + 'static) -> CostMeter {
        CostMeter {
            kind: MeterKind::Custom(Arc::new(read)),
        }
    }

    fn is_wall(&self) -> bool {
        matches!(self.kind, MeterKind::Wall)
    }

    /// The reading summed around polls, or `None` for wall time.
    fn read(&self) -> Option<Duration> {
        match &self.kind {
            MeterKind::ThreadCpu => Some(thread_cpu_time()),
            MeterKind::Wall => None,
            MeterKind::Custom(read) => Some(read()),
        }
    }
}

impl fmt::Debug for CostMeter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self.kind {
            MeterKind::ThreadCpu => "CostMeter::ThreadCpu",
            MeterKind::Wall => "CostMeter::Wall",
            MeterKind::Custom(_) => "CostMeter::Custom",
        })
    }
}

/// The calling thread's CPU time.
#[cfg(unix)]
fn thread_cpu_time() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec for the duration of the
    // call; clock_gettime writes only to it.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    if rc != 0 {
        return Duration::ZERO;
    }
    Duration::new(
        u64::try_from(ts.tv_sec).unwrap_or(0),
        u32::try_from(ts.tv_nsec).unwrap_or(0),
    )
}

/// No thread CPU clock here: every request measures one unit.
#[cfg(not(unix))]
fn thread_cpu_time() -> Duration {
    Duration::ZERO
}

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
/// # Ok::<(), tollgate_throttle::TrustError>(())
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

fn rejected<B: Default>(rejection: &Rejection, grpc: bool) -> Response<B> {
    let mut response = if grpc {
        let message = rejection.to_string();
        let mut response: Response<B> =
            tonic::Status::with_details(rejection.grpc_code(), &message, status_details(rejection))
                .into_http();
        // Only what must be escaped, so the message stays readable.
        if let Ok(message) = HeaderValue::from_str(&grpc_message(&message)) {
            response
                .headers_mut()
                .insert(HeaderName::from_static("grpc-message"), message);
        }
        response
    } else {
        let mut response = Response::new(B::default());
        *response.status_mut() = rejection.http_status();
        response
    };
    if let Some(after) = rejection.retry_after() {
        response.headers_mut().insert(
            axum::http::header::RETRY_AFTER,
            HeaderValue::from(secs_up(after)),
        );
    }
    ratelimit_fields(rejection.limits(), response.headers_mut());
    response
}

/// Whole seconds, rounded up.
fn secs_up(d: Duration) -> u64 {
    u64::try_from(d.as_nanos().div_ceil(1_000_000_000)).unwrap_or(u64::MAX)
}

/// The `RateLimit-Policy` and `RateLimit` fields for `limits` (see the
/// module notes); nothing when there are none.
fn ratelimit_fields(limits: &[LimitStatus], headers: &mut HeaderMap) {
    use std::fmt::Write as _;
    if limits.is_empty() {
        return;
    }
    let (mut policy, mut standing) = (String::new(), String::new());
    for (i, l) in limits.iter().enumerate() {
        let sep = if i == 0 { "" } else { ", " };
        let name = sf_string(&l.rule);
        let _ = write!(
            policy,
            "{sep}{name};q={};w={}",
            l.quota,
            secs_up(l.window).max(1)
        );
        let _ = write!(
            standing,
            "{sep}{name};r={};t={}",
            l.remaining,
            secs_up(l.reset)
        );
    }
    for (name, value) in [("ratelimit-policy", policy), ("ratelimit", standing)] {
        if let Ok(v) = HeaderValue::try_from(value) {
            headers.insert(HeaderName::from_static(name), v);
        }
    }
}

/// A structured-field string (RFC 9651): quoted, `"` and `\` escaped, and
/// anything outside printable ASCII replaced by `?`.
fn sf_string(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' | '\\' => {
                out.push('\\');
                out.push(c);
            }
            ' '..='~' => out.push(c),
            _ => out.push('?'),
        }
    }
    out.push('"');
    out
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

/// `google.rpc.Status`, sent in `grpc-status-details-bin`.
#[derive(Clone, PartialEq, prost::Message)]
struct RpcStatus {
    #[prost(int32, tag = "1")]
    code: i32,
    #[prost(string, tag = "2")]
    message: String,
    #[prost(message, repeated, tag = "3")]
    details: Vec<Any>,
}

/// `google.protobuf.Any`.
#[derive(Clone, PartialEq, prost::Message)]
struct Any {
    #[prost(string, tag = "1")]
    type_url: String,
    #[prost(bytes = "vec", tag = "2")]
    value: Vec<u8>,
}

/// `google.rpc.RetryInfo`.
#[derive(Clone, PartialEq, prost::Message)]
struct RetryInfo {
    #[prost(message, optional, tag = "1")]
    retry_delay: Option<ProtoDuration>,
}

/// `google.protobuf.Duration`.
#[derive(Clone, PartialEq, prost::Message)]
struct ProtoDuration {
    #[prost(int64, tag = "1")]
    seconds: i64,
    #[prost(int32, tag = "2")]
    nanos: i32,
}

/// The rich status of a gRPC rejection: a `google.rpc.RetryInfo` with the
/// exact retry delay when there is one (the `retry-after` metadata has
/// whole seconds only), nothing otherwise.
fn status_details(rejection: &Rejection) -> prost::bytes::Bytes {
    use prost::Message as _;
    let Some(after) = rejection.retry_after() else {
        return prost::bytes::Bytes::new();
    };
    let retry = RetryInfo {
        retry_delay: Some(ProtoDuration {
            seconds: i64::try_from(after.as_secs()).unwrap_or(i64::MAX),
            nanos: i32::try_from(after.subsec_nanos()).unwrap_or(0),
        }),
    };
    let status = RpcStatus {
        code: rejection.grpc_code() as i32,
        message: rejection.to_string(),
        details: vec![Any {
            type_url: "type.googleapis.com/google.rpc.RetryInfo".to_owned(),
            value: retry.encode_to_vec(),
        }],
    };
    status.encode_to_vec().into()
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
