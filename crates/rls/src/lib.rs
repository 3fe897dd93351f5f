//! Envoy's rate limit service: `ShouldRateLimit` answered as
//! envoyproxy/ratelimit answers it, from its YAML configuration, with the
//! throttler's policies and keyed table doing the counting.
//!
//! Envoy (and what is built on it) asks a rate limit service on every
//! request whether the request's descriptors are over their limits. A
//! [`RateLimitService`] answers from an [`RlsConfig`] (the reference's
//! format, one domain per document, from a file or a directory), under
//! [`RlsSettings`] (the reference's settings that change answers), on a
//! clock reading Unix time ([`UnixClock`], or a
//! [`ManualClock`](tollgate::ManualClock) in tests):
//!
//! ```
//! use std::sync::Arc;
//! use tollgate::ManualClock;
//! use tollgate_rls::{Code, Descriptor, RateLimitService, Request, RlsConfig, RlsSettings, Unit};
//!
//! let config = RlsConfig::from_yaml(
//!     "edge.yaml",
//!     "domain: edge\ndescriptors:\n  - key: remote_address\n    rate_limit: {unit: minute, requests_per_unit: 3}\n",
//! )?;
//! let clock = ManualClock::new();
//! clock.set_ns(1_700_000_050 * 1_000_000_000); // 10 s into a minute
//! let service = RateLimitService::new(Some(config), RlsSettings::default(), Arc::new(clock));
//! let answer = service.should_rate_limit(&Request {
//!     domain: "edge".into(),
//!     descriptors: vec![Descriptor::new([("remote_address", "1.2.3.4")])],
//!     hits_addend: 0,
//! })?;
//! let status = &answer.statuses[0];
//! assert_eq!(answer.overall_code, Code::Ok);
//! assert_eq!(status.current_limit.as_ref().map(|l| (l.requests_per_unit, l.unit)), Some((3, Unit::Minute)));
//! assert_eq!(status.limit_remaining, 2);
//! assert_eq!(status.duration_until_reset, Some(std::time::Duration::from_secs(50)));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! The edges: [`RlsServer`] serves it (and `grpc.health.v1.Health`) on the
//! service kit's lean gRPC server, [`ShouldRateLimitService`] in a tonic
//! router; [`http_router`] is the debug port (the kit's `/`, `/metrics`, `/healthz`;
//! `/rlconfig`, the reference's `/json`); [`spawn_config_reload`] reloads
//! on SIGHUP. The wire types live in the hidden `pb` module and stay at
//! the edge.
//!
//! Beyond the reference, a limit may name an [`Algorithm`] and a
//! descriptor may carry several limits (see [`RlsConfig`]).
//!
//! Several services (or `tollgate rls` replicas) answer as one when they
//! keep their counters in one Redis ([`RateLimitService::with_store`],
//! the throttler's [`RedisStore`]): the same answers, each request one
//! script call, Redis' clock.

mod clock;
mod config;
mod counter;
mod grpc;
mod http;
mod job;
mod matching;
mod metrics;
#[doc(hidden)]
pub mod pb;
mod raw;
mod reload;
mod request;
mod service;
mod settings;
mod shared;
mod unit;
mod wire;

pub use clock::UnixClock;
pub use config::{Algorithm, ConfigError, ConfiguredLimit, RlsConfig};
pub use grpc::{RlsServer, ShouldRateLimitService, HEALTH_CHECK_PATH, SHOULD_RATE_LIMIT_PATH};
pub use http::router as http_router;
pub use metrics::RlsMetrics;
pub use reload::{reload as reload_config, spawn as spawn_config_reload};
pub use request::{
    Code, CurrentLimit, Descriptor, DescriptorStatus, Request, RequestError, Response,
};
pub use service::RateLimitService;
pub use settings::RlsSettings;
/// The throttler's Redis store, which [`RateLimitService::with_store`]
/// counts in.
#[doc(no_inline)]
pub use tollgate_throttle::{OnError, RedisStore, RedisStoreBuilder, StoreError};
pub use unit::Unit;
