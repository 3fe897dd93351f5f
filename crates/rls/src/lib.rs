//! Envoy's rate limit service.

mod clock;
mod config;
mod counter;
mod grpc;
mod matching;
#[doc(hidden)]
pub mod pb;
mod raw;
mod service;
mod unit;

pub use clock::UnixClock;
pub use config::{Algorithm, ConfigError, RlsConfig, Rule};
pub use grpc::{RlsServer, ShouldRateLimitService, HEALTH_CHECK_PATH, SHOULD_RATE_LIMIT_PATH};
pub use service::{
    Code, CurrentLimit, Descriptor, DescriptorStatus, RateLimitService, Request, RequestError,
    Response, RlsSettings,
};
pub use unit::Unit;
