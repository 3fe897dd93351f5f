//! tollgate: a lock-free, sliced token-pool rate limiter and a
//! Doorman-compatible lease server.
//!
//! # The limiter
//!
//! Time is the currency. A [`RateLimiter`] adds measured elapsed time to an
//! *active* pool; what does not fit goes to a *waiting* pool, the backlog,
//! which is exactly how late an op admitted now starts (its
//! coordinated-omission wait); a *burst* headroom lets callers that fell
//! behind catch up at `rate * burst_ratio`.
//!
//! ```
//! use tollgate::{RateLimiter, RateSpec};
//!
//! let limiter = RateLimiter::new("10K,1.5".parse::<RateSpec>()?);
//! for _ in 0..10 {
//!     let late = limiter.acquire();
//!     // ... do the op; report `late` + service time as response time
//! #   let _ = late;
//! }
//! # Ok::<(), tollgate::SpecError>(())
//! ```
#![deny(unsafe_op_in_unsafe_fn)]

mod clock;
pub mod doorman;
mod limiter;
mod sync;

pub use clock::{Clock, ManualClock, SystemClock};
pub use limiter::spec::{RateSpec, SpecError, Verb};
pub use limiter::{AcquireFuture, Builder, Ledger, RateLimiter, Stats, TimeoutError};
