//! Generated protobuf messages and gRPC stubs for Envoy's rate limit
//! service and gRPC's health check (`proto/`).
//!
//! Quarantined: the generated code lives only here, with its lint
//! allowances; the service talks in its own [`Request`](super::Request)
//! and [`Response`](super::Response) through the conversions in
//! `grpc.rs`. Public only so the binary and the tests can speak the wire
//! protocol; hidden from the docs and not part of the stable API.

#![allow(
    missing_docs,
    unreachable_pub,
    missing_debug_implementations,
    clippy::all,
    clippy::pedantic
)]

/// Envoy's packages, nested as the generated code's relative paths expect.
pub mod envoy {
    pub mod config {
        pub mod core {
            pub mod v3 {
                tonic::include_proto!("envoy.config.core.v3");
            }
        }
    }
    pub mod r#type {
        pub mod v3 {
            tonic::include_proto!("envoy.r#type.v3");
        }
    }
    pub mod extensions {
        pub mod common {
            pub mod ratelimit {
                pub mod v3 {
                    tonic::include_proto!("envoy.extensions.common.ratelimit.v3");
                }
            }
        }
    }
    pub mod service {
        pub mod ratelimit {
            pub mod v3 {
                tonic::include_proto!("envoy.service.ratelimit.v3");
            }
        }
    }
}

/// `grpc.health.v1`: the health check.
pub mod health {
    tonic::include_proto!("grpc.health.v1");
}

pub use envoy::config::core::v3::HeaderValue;
pub use envoy::extensions::common::ratelimit::v3::{rate_limit_descriptor, RateLimitDescriptor};
pub use envoy::r#type::v3::RateLimitUnit;
pub use envoy::service::ratelimit::v3::{
    rate_limit_response, rate_limit_service_client, rate_limit_service_server, RateLimitRequest,
    RateLimitResponse,
};
