//! Envoy's rate limit service.

mod clock;
mod config;
mod counter;
mod grpc;
mod http;
mod matching;
mod metrics;
#[doc(hidden)]
pub mod pb;
mod raw;
mod reload;
mod service;
mod unit;

pub use clock::UnixClock;
pub use config::{Algorithm, ConfigError, RlsConfig, Rule};
pub use grpc::{RlsServer, ShouldRateLimitService, HEALTH_CHECK_PATH, SHOULD_RATE_LIMIT_PATH};
pub use http::router as http_router;
pub use metrics::RlsMetrics;
pub use reload::{reload as reload_config, spawn as spawn_config_reload};
pub use service::{
    Code, CurrentLimit, Descriptor, DescriptorStatus, RateLimitService, Request, RequestError,
    Response, RlsSettings,
};
pub use unit::Unit;
