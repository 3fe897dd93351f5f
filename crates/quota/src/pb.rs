//! Generated protobuf messages and gRPC stubs for
//! `proto/quotaservice/quotaservice.proto`.
//!
//! Quarantined: the generated code lives only here, with its lint
//! allowances; the service talks in [`AllowRequest`](super::AllowRequest) and [`Decision`] through
//! the conversions below. With the `wire` feature the module is public,
//! for tools and tests that speak the wire protocol themselves (the
//! `tollgate load` command, the integration tests); its types follow the
//! `.proto`, not the crate's domain types.

// The stubs the crate does not call itself are there for `wire`'s users.
#![cfg_attr(not(feature = "wire"), allow(dead_code))]
#![allow(
    missing_docs,
    unreachable_pub,
    missing_debug_implementations,
    clippy::all,
    clippy::pedantic
)]

tonic::include_proto!("quotaservice");

use super::service::{self, Decision};
use super::status::Status;

impl From<Status> for allow_response::Status {
    fn from(status: Status) -> Self {
        match status {
            Status::Ok => allow_response::Status::Ok,
            Status::RejectedTimeout => allow_response::Status::RejectedTimeout,
            Status::RejectedNoBucket => allow_response::Status::RejectedNoBucket,
            Status::RejectedTooManyBuckets => allow_response::Status::RejectedTooManyBuckets,
            Status::RejectedTooManyTokensRequested => {
                allow_response::Status::RejectedTooManyTokensRequested
            }
            Status::RejectedInvalidRequest => allow_response::Status::RejectedInvalidRequest,
            Status::RejectedServerError => allow_response::Status::RejectedServerError,
        }
    }
}

impl From<allow_response::Status> for Status {
    fn from(status: allow_response::Status) -> Self {
        match status {
            allow_response::Status::Ok => Status::Ok,
            allow_response::Status::RejectedTimeout => Status::RejectedTimeout,
            allow_response::Status::RejectedNoBucket => Status::RejectedNoBucket,
            allow_response::Status::RejectedTooManyBuckets => Status::RejectedTooManyBuckets,
            allow_response::Status::RejectedTooManyTokensRequested => {
                Status::RejectedTooManyTokensRequested
            }
            allow_response::Status::RejectedInvalidRequest => Status::RejectedInvalidRequest,
            allow_response::Status::RejectedServerError => Status::RejectedServerError,
        }
    }
}

impl<'a> From<&'a AllowRequest> for service::AllowRequest<'a> {
    fn from(req: &'a AllowRequest) -> Self {
        service::AllowRequest {
            namespace: &req.namespace,
            bucket: &req.bucket_name,
            tokens: req.tokens_requested,
            max_wait_millis: req
                .max_wait_time_override
                .then_some(req.max_wait_millis_override),
        }
    }
}

impl From<Decision> for AllowResponse {
    fn from(d: Decision) -> Self {
        AllowResponse {
            status: allow_response::Status::from(d.status) as i32,
            tokens_granted: d.tokens_granted,
            wait_millis: d.wait_millis(),
        }
    }
}
