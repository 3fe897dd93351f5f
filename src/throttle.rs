//! A server-side throttler: per-key limits, a cost-aware queue with
//! criticality, soft and hard limits, rate-based bans and a tower layer.
//!
//! A [`Throttler`] sits inside the protected service and decides, for each
//! request, whether it is safe to admit now, later, or not at all. Its
//! [`Rule`]s map a request to a key (an API key header, the peer IP, a gRPC
//! metadata entry, a user id) and apply a [`Policy`] to that key's state:
//!
//! - [`TokenPool`]: the limiter core's pool (rate and burst ratio), lazily
//!   evaluated per key;
//! - [`Gcra`]: a leaky bucket with a bounded FIFO queue drained at the rate;
//! - [`FixedWindow`], [`SlidingLog`] and [`SlidingWindowCounter`].
//!
//! Key state is created on demand, capped in number and evicted when idle
//! (see [`KeyedLimiter`]), so memory stays bounded under key churn.
//!
//! Every policy is pure arithmetic on a per-key state and an explicit time
//! in nanoseconds, so it can be tested to the exact number:
//!
//! ```
//! use tollgate::throttle::{Policy, SlidingLog};
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
//! # Ok::<(), tollgate::throttle::LimitError>(())
//! ```

mod cost;
mod error;
mod fixed_window;
mod gcra;
mod layer;
mod metrics;
mod policy;
mod queue;
mod rules;
mod sliding_counter;
mod sliding_log;
mod store;
mod throttler;
mod token_pool;

pub use error::LimitError;
pub use fixed_window::{FixedWindow, FixedWindowState};
pub use gcra::{Gcra, GcraState};
pub use layer::{Throttle, ThrottleLayer};
pub use policy::{Policy, Verdict};
pub use queue::Criticality;
pub use rules::{Extract, Limit, Mode, PeerAddr, RequestHead, Rule, UserId};
pub use sliding_counter::{SlidingWindowCounter, SlidingWindowCounterState};
pub use sliding_log::{SlidingLog, SlidingLogState};
pub use store::{Evictions, KeyedLimiter};
pub use throttler::{
    CostModel, Permit, Rejection, RejectionKind, Throttler, ThrottlerBuilder, Warning,
};
pub use token_pool::{TokenPool, TokenPoolState};
