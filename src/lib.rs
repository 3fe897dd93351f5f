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
//!
//! The acquire fast path takes from a thread-local budget (no atomic), its
//! refill from the caller's cache-padded slice of the pool (one
//! compare-exchange); blocked callers wait in one FIFO queue, each parked on
//! its own, and are handed their tokens before they are woken. See
//! [`RateLimiter`] for the whole API and `src/limiter/*.rs` for the design
//! notes, invariants and memory orderings.
//!
//! # Leases
//!
//! [`doorman`] implements Google Doorman's capacity lease protocol: a
//! server that divides each resource's capacity fairly between its clients
//! (exact max-min fair share, proportional share, static, none) and a
//! client that keeps leases fresh and enforces them with the limiter.
//!
//! # Quotas and throttling
//!
//! [`TokenBucket`] answers "may I, and how long must I wait?" without
//! blocking: a lazily filled bucket on the same exact units, which may go
//! into debt up to a cap and needs no filler thread. [`quota`] serves it
//! over square's quotaservice protocol (`Allow`), with named, default and
//! dynamic buckets, clients, and a cluster mode whose rates are Doorman
//! leases. [`throttle`] is a server-side throttler for services: per-key
//! limits (token pool, GCRA with a queue, fixed window, sliding log,
//! sliding window counter), costs, criticality, soft and hard limits, bans
//! and a tower layer.
//!
//! # Crate features
//!
//! None: the crate builds one way. `--cfg tollgate_loom` switches the
//! limiter's synchronisation to loom for the models in `loom-tests/`.
#![deny(unsafe_op_in_unsafe_fn)]

mod clock;
pub mod doorman;
mod limiter;
pub mod plot;
pub mod quota;
mod sync;
#[cfg(not(tollgate_loom))]
pub mod throttle;

pub use clock::{Clock, ManualClock, SystemClock};
pub use limiter::reservation::{BucketSettings, Refusal, ReserveError, TokenBucket};
pub use limiter::spec::{RateSpec, SpecError, Verb};
pub use limiter::{AcquireFuture, Builder, Ledger, RateLimiter, Stats, TimeoutError};
