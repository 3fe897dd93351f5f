//! A server-side throttler: per-key limits, a cost-aware queue with
//! criticality, soft and hard limits, rate-based bans and a tower layer.
//!
//! Put a [`ThrottleLayer`] on a router: here each API key may make two
//! requests an hour, and the third is refused with 429 and a
//! `Retry-After`.
//!
//! ```
//! use std::time::Duration;
//!
//! use axum::{body::Body, http::Request, routing::get, Router};
//! use tollgate_throttle::{Extract, FixedWindow, Limit, Rule, ThrottleLayer, Throttler};
//! use tower::ServiceExt as _;
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let throttler = Throttler::builder()
//!     .rule(Rule::new(
//!         "per-api-key",
//!         Extract::header("x-api-key"),
//!         Limit::FixedWindow(FixedWindow::new(2, Duration::from_secs(3600))?),
//!     ))
//!     .build();
//! let app = Router::new()
//!     .route("/", get(|| async { "hello" }))
//!     .layer(ThrottleLayer::new(throttler));
//!
//! let request = || Request::get("/").header("x-api-key", "k1").body(Body::empty());
//! assert_eq!(app.clone().oneshot(request()?).await?.status(), 200);
//! assert_eq!(app.clone().oneshot(request()?).await?.status(), 200);
//! let refused = app.clone().oneshot(request()?).await?;
//! assert_eq!(refused.status(), 429);
//! assert!(refused.headers().contains_key("retry-after"));
//! # Ok(())
//! # }
//! ```
//!
//! Serving it for real, with the peer addresses that per-IP rules read
//! ([`Extract::peer_ip`]; behind a proxy, [`Extract::client_ip`]):
//!
//! ```no_run
//! # use std::{net::SocketAddr, time::Duration};
//! # use axum::{routing::get, Router};
//! # use tollgate_throttle::{Extract, FixedWindow, Limit, Rule, ThrottleLayer, Throttler, TokenPool};
//! # #[tokio::main]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let throttler = Throttler::builder()
//!     // 5 a second per API key, in bursts of up to 10, with the
//!     // `RateLimit` fields on every response.
//!     .rule(
//!         Rule::new(
//!             "per-api-key",
//!             Extract::header("x-api-key"),
//!             Limit::TokenPool(TokenPool::new("5".parse()?).with_burst(10)?),
//!         )
//!         .ratelimit_headers(true),
//!     )
//!     // 100 a minute per client address.
//!     .rule(Rule::new(
//!         "per-ip",
//!         Extract::peer_ip(),
//!         Limit::FixedWindow(FixedWindow::new(100, Duration::from_secs(60))?),
//!     ))
//!     .build();
//! let app = Router::new()
//!     .route("/", get(|| async { "hello" }))
//!     .layer(ThrottleLayer::new(throttler));
//! let listener = tokio::net::TcpListener::bind("0.0.0.0:3000").await?;
//! axum::serve(listener, app.into_make_service_with_connect_info::<SocketAddr>()).await?;
//! # Ok(())
//! # }
//! ```
//!
//! `examples/throttled_axum.rs` adds a soft limit, a ban, an admission
//! queue and metrics; rules can also come from YAML ([`rules_from_yaml`]).
//!
//! # How it decides
//!
//! A [`Throttler`] sits inside the protected service and decides, for each
//! request, whether it is safe to admit now, later, or not at all. Its
//! [`Rule`]s map a request to a key (an API key header, the peer IP or the
//! client IP a trusted proxy forwards, a gRPC metadata entry, a user id)
//! and apply a [`Policy`] to that key's state:
//!
//! - [`TokenPool`]: the limiter core's pool (rate and burst ratio), or a
//!   plain bucket with a burst in ops, lazily evaluated per key;
//! - [`Gcra`]: a leaky bucket with a bounded FIFO queue drained at the rate;
//! - [`FixedWindow`], [`SlidingLog`] and [`SlidingWindowCounter`].
//!
//! Key state is created on demand, capped in number and evicted when idle
//! (see [`KeyedLimiter`]), so memory stays bounded under key churn; keys
//! over 64 bytes are kept as their SHA-256. Any UTF-8 value is a key; a
//! request without a usable one shares one bucket per rule by default
//! ([`MissingKey`]), so leaving a header off buys a client nothing.
//!
//! Criticality comes from a [`Criticality`] request extension, or from a
//! header only on requests from peers the builder trusts
//! ([`ThrottlerBuilder::criticality_header`], [`Trust`]): a client cannot
//! declare itself CRITICAL.
//!
//! Above a rule's optional soft limit requests are admitted with a
//! [`Warning`]; above its hard limit they are rejected with a retry time
//! (429 / `RESOURCE_EXHAUSTED`), and a rule may then ban the key for a
//! while. Shadow rules only count. Costs may be fixed, read from a header,
//! or predicted per class from recent measured costs and post-accounted
//! ([`CostModel`]); the layer measures a request's cost as the CPU time of
//! its own work by default ([`CostMeter`]). An optional admission queue
//! releases requests at a fixed cost rate, and a [`Criticality::Critical`] request evicts the most
//! recent NOT_CRITICAL one when it is full (503 / `UNAVAILABLE`).
//!
//! [`ThrottleLayer`] puts a throttler in front of any tower HTTP service
//! (axum, hyper, tonic); every 429 and 503 says when to retry, and rules
//! may send the `RateLimit-Policy` and `RateLimit` fields of
//! draft-ietf-httpapi-ratelimit-headers-09. Decisions and state are
//! Prometheus metrics ([`Throttler::registry`]); rules can come from YAML
//! (the format is on [`rules_from_yaml`]) and reload when their file
//! changes or on SIGHUP ([`spawn_rules_reload`]).
//!
//! A throttler reads its clock once per decision. The default,
//! [`SystemClock`](tollgate::SystemClock), is exact to the nanosecond; on
//! machines where a time-stamp counter read waits for the loads before it
//! (a KVM guest, for one), that read costs a whole cache miss when keys
//! are spread wider than the caches. For millions of decisions a second
//! over many keys, give it [`CoarseClock`](tollgate::CoarseClock) instead
//! ([`ThrottlerBuilder::clock`]): limits then move in steps of the
//! kernel's tick (often 4 ms), retry times include one tick, and token
//! pools widen to cover a tick and a half so that their rates hold.
//!
//! Every policy is pure arithmetic on a per-key state and an explicit time
//! in nanoseconds, so it can be tested to the exact number:
//!
//! ```
//! use tollgate_throttle::{Policy, SlidingLog};
//! use std::time::Duration;
//!
//! // Two requests per minute; times in seconds after 1:00:00.
//! let log = SlidingLog::new(2, Duration::from_secs(60))?.log_rejected(true);
//! let s = |secs: u64| secs * 1_000_000_000;
//! let mut key = log.new_state(0);
//! assert!(log.check(&mut key, s(1), 1).is_admitted()); // 1:00:01
//! assert!(log.check(&mut key, s(30), 1).is_admitted()); // 1:00:30
//! assert!(!log.check(&mut key, s(50), 1).is_admitted()); // 1:00:50
//! assert!(log.check(&mut key, s(100), 1).is_admitted()); // 1:01:40
//! # Ok::<(), tollgate_throttle::ValueError>(())
//! ```

mod builder;
mod config;
mod cost;
mod decision;
mod error;
mod layer;
mod live_rule;
mod meter;
mod metrics;
mod outcome;
mod policy;
mod queue;
mod render;
mod rules;
mod shared;
mod store;
mod throttler;
mod trust;

pub use builder::ThrottlerBuilder;
pub use config::{
    reload_rules, rules_from_file, rules_from_yaml, spawn_rules_reload, store_from_yaml,
};
pub use cost::CostModel;
pub use decision::Permit;
pub use error::{RulesError, ValueError};
pub use layer::{Throttle, ThrottleLayer};
pub use meter::CostMeter;
pub use outcome::{LimitStatus, Rejection, RejectionKind, Warning};
pub use policy::{
    FixedWindow, FixedWindowState, Gcra, GcraState, Policy, SlidingLog, SlidingLogState,
    SlidingWindowCounter, SlidingWindowCounterState, Standing, TokenPool, TokenPoolState, Verdict,
};
pub use queue::Criticality;
pub use rules::{Extract, Limit, MissingKey, Mode, PeerAddr, RequestHead, Rule, UserId};
#[doc(no_inline)]
pub use shared::{OnError, StoreError};
pub use shared::{RedisStore, RedisStoreBuilder};
pub use store::{Evictions, KeyedLimiter};
pub use throttler::Throttler;
pub use trust::Trust;

/// The workspace README's Rust examples, compiled (not run) as this
/// crate's doc tests: this crate's tests can use every crate they name.
#[cfg(doctest)]
#[doc = include_str!("../../../README.md")]
struct ReadmeExamples;
