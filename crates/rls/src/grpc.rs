//! The gRPC edge: `envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit`
//! and `grpc.health.v1.Health/Check`, served from a [`RateLimitService`].
//!
//! [`RlsServer`] serves both on the service kit's lean gRPC server
//! ([`GrpcServer`]), plaintext or TLS, under [`ServerLimits`] (a cap on
//! connections, handshake and idle deadlines, a drain at shutdown).
//! [`ShouldRateLimitService`] is the tonic service, for a tonic router of
//! one's own. The wire types are converted here and nowhere else; a
//! [`RequestError`] becomes gRPC status UNKNOWN with its message, as the
//! reference's Go server answers a plain error.

use std::future::Future;
use std::io;
use std::sync::Arc;
use std::time::Duration;

use prost::Message as _;
use tonic::codegen::Bytes;

use super::pb;
use super::pb::rate_limit_response::{self, rate_limit::Unit as WireUnit};
use super::request::{Code, Descriptor, Request, RequestError, Response};
use super::service::RateLimitService;
use super::wire;
use tollgate_service::{rustls, GrpcServer, ServerLimits, ServerTls, TlsError, UnaryService};

/// The rate limit method, as an HTTP/2 path.
pub const SHOULD_RATE_LIMIT_PATH: &str =
    "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit";
/// The health check method, as an HTTP/2 path.
pub const HEALTH_CHECK_PATH: &str = "/grpc.health.v1.Health/Check";

/// The largest request accepted, whatever the limits say: bounds what one
/// call holds (descriptors, entries and their text).
const MAX_MESSAGE: usize = 64 << 10;

impl From<pb::RateLimitRequest> for Request {
    fn from(r: pb::RateLimitRequest) -> Request {
        Request {
            domain: r.domain,
            descriptors: r
                .descriptors
                .into_iter()
                .map(|d| Descriptor {
                    entries: d.entries.into_iter().map(|e| (e.key, e.value)).collect(),
                    limit: d.limit.map(|l| (l.requests_per_unit, l.unit)),
                    hits_addend: d.hits_addend,
                })
                .collect(),
            hits_addend: r.hits_addend,
        }
    }
}

fn code(code: Code) -> i32 {
    match code {
        Code::Ok => rate_limit_response::Code::Ok as i32,
        Code::OverLimit => rate_limit_response::Code::OverLimit as i32,
    }
}

fn unit(unit: super::Unit) -> i32 {
    WireUnit::try_from(unit.wire()).map_or(0, |u| u as i32)
}

impl From<Response> for pb::RateLimitResponse {
    fn from(r: Response) -> pb::RateLimitResponse {
        pb::RateLimitResponse {
            overall_code: code(r.overall_code),
            statuses: r
                .statuses
                .into_iter()
                .map(|s| rate_limit_response::DescriptorStatus {
                    code: code(s.code),
                    current_limit: s.current_limit.map(|l| rate_limit_response::RateLimit {
                        name: l.name,
                        requests_per_unit: l.requests_per_unit,
                        unit: unit(l.unit),
                    }),
                    limit_remaining: s.limit_remaining,
                    duration_until_reset: s.duration_until_reset.map(duration),
                })
                .collect(),
            response_headers_to_add: r
                .response_headers
                .into_iter()
                .map(|(key, value)| pb::HeaderValue {
                    key,
                    value,
                    raw_value: Vec::new(),
                })
                .collect(),
            request_headers_to_add: Vec::new(),
            raw_body: Vec::new(),
        }
    }
}

fn duration(d: Duration) -> prost_types::Duration {
    prost_types::Duration {
        seconds: i64::try_from(d.as_secs()).unwrap_or(i64::MAX),
        nanos: i32::try_from(d.subsec_nanos()).unwrap_or(0),
    }
}

/// The one place a [`RequestError`] becomes a gRPC status: UNKNOWN, as
/// the reference answers, except an override with an unknown unit
/// (INVALID_ARGUMENT; the reference crashes on it).
fn status(e: &RequestError) -> tonic::Status {
    match e {
        RequestError::BadOverrideUnit { .. } => tonic::Status::invalid_argument(e.to_string()),
        _ => tonic::Status::unknown(e.to_string()),
    }
}

/// Serves Envoy's rate limit service and the gRPC health check from a
/// [`RateLimitService`]; start with [`RlsServer::builder`], end with
/// [`RlsServer::serve`].
///
/// Every option has a default: the default [`ServerLimits`], the
/// connections on the calling runtime, no TLS.
///
/// # Examples
///
/// ```no_run
/// use std::sync::Arc;
/// use tollgate_rls::{RateLimitService, RlsConfig, RlsServer, RlsSettings, UnixClock};
///
/// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
/// let config = RlsConfig::load("/etc/ratelimit/config".as_ref(), false)?;
/// let service = Arc::new(RateLimitService::new(Some(config), RlsSettings::default(), Arc::new(UnixClock)));
/// let listener = tokio::net::TcpListener::bind("0.0.0.0:8081").await?;
/// RlsServer::builder(service)
///     .threads(4)
///     .serve(listener, async { let _ = tokio::signal::ctrl_c().await; })
///     .await?;
/// # Ok(())
/// # }
/// ```
#[derive(Debug)]
#[must_use = "a server does nothing until `serve` is called"]
pub struct RlsServer {
    service: Arc<RateLimitService>,
    limits: ServerLimits,
    threads: Option<usize>,
    tls: Option<Arc<rustls::ServerConfig>>,
}

impl RlsServer {
    /// A server answering from `service`, with every default.
    pub fn builder(service: Arc<RateLimitService>) -> RlsServer {
        RlsServer {
            service,
            limits: ServerLimits::default(),
            threads: None,
            tls: None,
        }
    }

    /// Serves under `limits` (default [`ServerLimits::default`]), with
    /// requests capped at 64 KiB whatever `max_message_bytes` says.
    pub fn limits(mut self, limits: ServerLimits) -> RlsServer {
        self.limits = limits;
        self
    }

    /// Runs the connections on `threads` threads (at least one), each with
    /// a single-threaded runtime of its own; without it (the default) the
    /// connections are tasks of the runtime that serves.
    pub fn threads(mut self, threads: usize) -> RlsServer {
        self.threads = Some(threads);
        self
    }

    /// Serves over TLS as `tls` says (mutual TLS when it names a client
    /// CA); the files are read now.
    ///
    /// # Errors
    ///
    /// [`TlsError`] naming a file that cannot be read or used, or rustls
    /// refusing the setup.
    pub fn tls(mut self, tls: &ServerTls) -> Result<RlsServer, TlsError> {
        self.tls = Some(tls.rustls_config()?);
        Ok(self)
    }

    /// Serves on `listener` until `shutdown` completes; then drains. See
    /// [`GrpcServer::serve`] for what is done with each connection.
    ///
    /// A service with a Redis store
    /// ([`RateLimitService::with_store`]) answers each ShouldRateLimit
    /// from a task of its own that waits on Redis, its connections tasks
    /// of the calling runtime, beside the store's own: the thread option
    /// does not apply there.
    ///
    /// # Errors
    ///
    /// An error starting a thread's runtime.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future stops accepting and closes every connection.
    pub async fn serve(
        self,
        listener: tokio::net::TcpListener,
        shutdown: impl Future<Output = ()>,
    ) -> io::Result<()> {
        let limits = ServerLimits {
            max_message_bytes: self.limits.max_message_bytes.min(MAX_MESSAGE),
            ..self.limits
        };
        let awaits = self.service.store().is_some();
        let mut server = GrpcServer::new(Arc::new(Lean(self.service))).limits(limits);
        if let Some(tls) = self.tls {
            server = server.tls_config(tls);
        }
        match self.threads {
            Some(threads) if !awaits => server = server.threads(threads),
            _ => {}
        }
        server.serve(listener, shutdown).await
    }
}

thread_local! {
    /// The thread's request, read into again by each call (`wire.rs`), so
    /// that its strings and vectors are allocated once; at most what the
    /// largest request (64 KiB) needed stays.
    static REQUEST: std::cell::RefCell<Request> = std::cell::RefCell::new(Request::default());
}

/// The two methods on the service kit's lean gRPC server.
#[derive(Debug)]
struct Lean(Arc<RateLimitService>);

#[derive(Debug, Clone, Copy)]
enum Method {
    ShouldRateLimit,
    Health,
}

impl UnaryService for Lean {
    type Method = Method;

    fn method(&self, path: &str) -> Option<Method> {
        match path {
            SHOULD_RATE_LIMIT_PATH => Some(Method::ShouldRateLimit),
            HEALTH_CHECK_PATH => Some(Method::Health),
            _ => None,
        }
    }

    fn call(
        &self,
        method: Method,
        request: Bytes,
        response: &mut prost::bytes::BytesMut,
    ) -> Result<(), tonic::Status> {
        match method {
            Method::ShouldRateLimit => REQUEST.with_borrow_mut(|req| {
                if !wire::read_request(&request, req) {
                    let pb = pb::RateLimitRequest::decode(request).map_err(|e| {
                        tonic::Status::invalid_argument(format!("malformed RateLimitRequest: {e}"))
                    })?;
                    *req = Request::from(pb);
                }
                let answer = self.0.should_rate_limit(req).map_err(|e| status(&e))?;
                wire::write_response(&answer, response);
                Ok::<_, tonic::Status>(())
            })?,
            Method::Health => {
                let req = pb::health::HealthCheckRequest::decode(request).map_err(|e| {
                    tonic::Status::invalid_argument(format!("malformed HealthCheckRequest: {e}"))
                })?;
                let _ = health(&self.0, &req.service).encode(response);
            }
        }
        Ok(())
    }

    /// A ShouldRateLimit waits on the store when there is one.
    fn waits(&self, method: Method) -> bool {
        matches!(method, Method::ShouldRateLimit) && self.0.store().is_some()
    }

    fn call_later(
        &self,
        method: Method,
        request: Bytes,
        mut response: prost::bytes::BytesMut,
    ) -> std::pin::Pin<
        Box<dyn Future<Output = Result<prost::bytes::BytesMut, tonic::Status>> + Send + 'static>,
    > {
        if !self.waits(method) {
            let answered = self.call(method, request, &mut response).map(|()| response);
            return Box::pin(std::future::ready(answered));
        }
        let service = Arc::clone(&self.0);
        Box::pin(async move {
            let mut req = Request::default();
            if !wire::read_request(&request, &mut req) {
                let pb = pb::RateLimitRequest::decode(request).map_err(|e| {
                    tonic::Status::invalid_argument(format!("malformed RateLimitRequest: {e}"))
                })?;
                req = Request::from(pb);
            }
            let answer = service
                .should_rate_limit_async(&req)
                .await
                .map_err(|e| status(&e))?;
            wire::write_response(&answer, &mut response);
            Ok(response)
        })
    }
}

/// The health answer: SERVING once a configuration is loaded, for the
/// server as a whole ("") and for the rate limit service by name.
fn health(service: &RateLimitService, name: &str) -> pb::health::HealthCheckResponse {
    use pb::health::health_check_response::ServingStatus;
    let status = if !name.is_empty() && name != "envoy.service.ratelimit.v3.RateLimitService" {
        ServingStatus::ServiceUnknown
    } else if service.config().is_some() {
        ServingStatus::Serving
    } else {
        ServingStatus::NotServing
    };
    pb::health::HealthCheckResponse {
        status: status as i32,
    }
}

/// The tonic service, for a tonic router of one's own.
#[derive(Debug, Clone)]
pub struct ShouldRateLimitService {
    service: Arc<RateLimitService>,
}

impl ShouldRateLimitService {
    /// A service answering from `service`.
    pub fn new(service: Arc<RateLimitService>) -> ShouldRateLimitService {
        ShouldRateLimitService { service }
    }

    /// The service wrapped for tonic's router.
    pub fn into_server(
        self,
    ) -> pb::rate_limit_service_server::RateLimitServiceServer<ShouldRateLimitService> {
        pb::rate_limit_service_server::RateLimitServiceServer::new(self)
    }
}

#[tonic::async_trait]
impl pb::rate_limit_service_server::RateLimitService for ShouldRateLimitService {
    async fn should_rate_limit(
        &self,
        request: tonic::Request<pb::RateLimitRequest>,
    ) -> Result<tonic::Response<pb::RateLimitResponse>, tonic::Status> {
        let req = request.into_inner();
        let answer = self
            .service
            .should_rate_limit_async(&Request::from(req))
            .await
            .map_err(|e| status(&e))?;
        Ok(tonic::Response::new(answer.into()))
    }
}

#[tonic::async_trait]
impl pb::health::health_server::Health for ShouldRateLimitService {
    async fn check(
        &self,
        request: tonic::Request<pb::health::HealthCheckRequest>,
    ) -> Result<tonic::Response<pb::health::HealthCheckResponse>, tonic::Status> {
        Ok(tonic::Response::new(health(
            &self.service,
            &request.into_inner().service,
        )))
    }
}
