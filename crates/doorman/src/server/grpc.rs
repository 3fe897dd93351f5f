//! The gRPC edge: `doorman.Capacity`'s four methods, on the service kit's
//! lean server ([`Lean`]) and as a tonic service for a router of one's own
//! ([`CapacityService`]). Both decode, call the server, record metrics and
//! map errors to gRPC statuses, nothing else.

use std::time::Instant;

use prometheus::{Counter, Histogram};
use prost::Message;
use tonic::codegen::Bytes;
use tracing::debug;

use super::Server;
use crate::error::RequestError;
use crate::metrics::Metrics;
use crate::pb;
use crate::pb::codec::decode;
use tollgate_service::UnaryService;

/// The gRPC service's path prefix.
const SERVICE: &str = "/doorman.Capacity/";

/// A method of `doorman.Capacity`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Method {
    Discovery,
    GetCapacity,
    GetServerCapacity,
    ReleaseCapacity,
}

impl Method {
    const ALL: [Method; 4] = [
        Method::Discovery,
        Method::GetCapacity,
        Method::GetServerCapacity,
        Method::ReleaseCapacity,
    ];

    /// The method's name, as in its path and its metrics' label.
    fn name(self) -> &'static str {
        match self {
            Method::Discovery => "Discovery",
            Method::GetCapacity => "GetCapacity",
            Method::GetServerCapacity => "GetServerCapacity",
            Method::ReleaseCapacity => "ReleaseCapacity",
        }
    }
}

/// One method's request metrics, looked up once rather than per call.
#[derive(Debug)]
struct MethodMetrics {
    requests: Counter,
    errors: Counter,
    durations: Histogram,
}

/// Every method's request metrics, in [`Method::ALL`]'s order.
#[derive(Debug)]
struct Recorder([MethodMetrics; 4]);

impl Recorder {
    fn new(m: &Metrics) -> Recorder {
        Recorder(Method::ALL.map(|method| {
            let name = [method.name()];
            MethodMetrics {
                requests: m.requests.with_label_values(&name),
                errors: m.request_errors.with_label_values(&name),
                durations: m.request_durations.with_label_values(&name),
            }
        }))
    }

    /// Records one call to `method` that started at `start`.
    fn record<T>(
        &self,
        method: Method,
        start: Instant,
        result: Result<T, RequestError>,
    ) -> Result<T, tonic::Status> {
        let m = &self.0[method as usize];
        m.requests.inc();
        m.durations.observe(start.elapsed().as_secs_f64());
        result.map_err(|e| {
            m.errors.inc();
            debug!(method = method.name(), error = %e, "request refused");
            e.into()
        })
    }
}

/// The server on the service kit's lean gRPC server.
#[derive(Debug)]
pub(super) struct Lean {
    server: Server,
    recorder: Recorder,
}

impl Lean {
    pub(super) fn new(server: Server) -> Lean {
        let recorder = Recorder::new(server.metrics());
        Lean { server, recorder }
    }
}

impl UnaryService for Lean {
    type Method = Method;

    fn method(&self, path: &str) -> Option<Method> {
        let name = path.strip_prefix(SERVICE)?;
        Method::ALL.into_iter().find(|m| m.name() == name)
    }

    fn call(
        &self,
        method: Method,
        request: Bytes,
        response: &mut prost::bytes::BytesMut,
    ) -> Result<(), tonic::Status> {
        let start = Instant::now();
        let (s, r) = (&self.server, &self.recorder);
        match method {
            Method::Discovery => {
                decode::<pb::DiscoveryRequest>(request)?;
                encode(r.record(method, start, Ok(s.discovery())), response)
            }
            Method::GetCapacity => {
                let req = decode(request)?;
                encode(r.record(method, start, s.get_capacity(req)), response)
            }
            Method::GetServerCapacity => {
                let req = decode(request)?;
                encode(
                    r.record(method, start, s.get_server_capacity(req)),
                    response,
                )
            }
            Method::ReleaseCapacity => {
                let req = decode(request)?;
                encode(r.record(method, start, s.release_capacity(req)), response)
            }
        }
    }
}

/// Appends the response in `answer` to `out`, or passes its status on.
fn encode<T: Message>(
    answer: Result<T, tonic::Status>,
    out: &mut prost::bytes::BytesMut,
) -> Result<(), tonic::Status> {
    // Cannot fail: the buffer grows as needed.
    let _ = answer?.encode(out);
    Ok(())
}

/// `doorman.Capacity` as a tonic service, for a tonic router of one's
/// own; [`Server::serve`] serves it on the service kit's lean server
/// instead. Made by [`Server::into_tonic`].
#[derive(Debug)]
pub(crate) struct CapacityService {
    server: Server,
    recorder: Recorder,
}

impl CapacityService {
    /// `server` as a tonic service ([`Server::into_tonic`]).
    pub(super) fn new(server: Server) -> CapacityService {
        let recorder = Recorder::new(server.metrics());
        CapacityService { server, recorder }
    }
}

#[tonic::async_trait]
impl pb::capacity_server::Capacity for CapacityService {
    async fn discovery(
        &self,
        _request: tonic::Request<pb::DiscoveryRequest>,
    ) -> Result<tonic::Response<pb::DiscoveryResponse>, tonic::Status> {
        let start = Instant::now();
        let r = self.server.discovery();
        let r = self.recorder.record(Method::Discovery, start, Ok(r));
        r.map(tonic::Response::new)
    }

    async fn get_capacity(
        &self,
        request: tonic::Request<pb::GetCapacityRequest>,
    ) -> Result<tonic::Response<pb::GetCapacityResponse>, tonic::Status> {
        let start = Instant::now();
        let r = self.server.get_capacity(request.into_inner());
        let r = self.recorder.record(Method::GetCapacity, start, r);
        r.map(tonic::Response::new)
    }

    async fn get_server_capacity(
        &self,
        request: tonic::Request<pb::GetServerCapacityRequest>,
    ) -> Result<tonic::Response<pb::GetServerCapacityResponse>, tonic::Status> {
        let start = Instant::now();
        let r = self.server.get_server_capacity(request.into_inner());
        let r = self.recorder.record(Method::GetServerCapacity, start, r);
        r.map(tonic::Response::new)
    }

    async fn release_capacity(
        &self,
        request: tonic::Request<pb::ReleaseCapacityRequest>,
    ) -> Result<tonic::Response<pb::ReleaseCapacityResponse>, tonic::Status> {
        let start = Instant::now();
        let r = self.server.release_capacity(request.into_inner());
        let r = self.recorder.record(Method::ReleaseCapacity, start, r);
        r.map(tonic::Response::new)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ServerConfig;

    fn lean() -> Lean {
        Lean::new(Server::builder(ServerConfig::builtin()).build())
    }

    #[test]
    fn each_method_is_found_by_its_path_and_no_other() {
        let lean = lean();
        for m in Method::ALL {
            let path = format!("/doorman.Capacity/{}", m.name());
            assert_eq!(lean.method(&path), Some(m));
        }
        assert_eq!(lean.method("/doorman.Capacity/Allow"), None);
        assert_eq!(lean.method("/other.Capacity/GetCapacity"), None);
        assert_eq!(lean.method("GetCapacity"), None);
    }

    #[test]
    fn a_malformed_request_is_internal_and_a_bad_one_invalid_argument() {
        let lean = lean();
        let mut out = prost::bytes::BytesMut::new();
        let err = lean
            .call(
                Method::GetCapacity,
                Bytes::from_static(&[0xff, 0xff]),
                &mut out,
            )
            .unwrap_err();
        assert_eq!(err.code(), tonic::Code::Internal);
        let empty_id = pb::GetCapacityRequest::default().encode_to_vec();
        let err = lean
            .call(Method::GetCapacity, Bytes::from(empty_id), &mut out)
            .unwrap_err();
        assert_eq!(err.code(), tonic::Code::InvalidArgument);
        assert!(out.is_empty());
        let m = lean.server.metrics();
        assert_eq!(m.requests.with_label_values(&["GetCapacity"]).get(), 1.0);
        assert_eq!(
            m.request_errors.with_label_values(&["GetCapacity"]).get(),
            1.0
        );
    }

    #[test]
    fn an_answer_is_the_encoded_response() {
        let lean = lean();
        let mut out = prost::bytes::BytesMut::new();
        let req = pb::DiscoveryRequest {}.encode_to_vec();
        lean.call(Method::Discovery, Bytes::from(req), &mut out)
            .unwrap();
        let r = pb::DiscoveryResponse::decode(&out[..]).unwrap();
        assert_eq!(r, lean.server.discovery());
    }
}
