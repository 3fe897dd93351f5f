//! tollgate: a lock-free, sliced token-pool rate limiter that holds an op
//! rate exactly.
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
//! [`RateLimiter`] for the whole API and `crates/core/src/limiter/*.rs` for the design
//! notes, invariants and memory orderings.
//!
//! # Without blocking
//!
//! [`TokenBucket`] answers "may I, and how long must I wait?" without
//! blocking: a lazily filled bucket on the same exact units, which may go
//! into debt up to a cap and needs no filler thread.
//!
//! # The rest of tollgate
//!
//! This crate is the limiter alone, on crossbeam-utils, quanta and libc.
//! The products built on it are crates of their own:
//!
//! | crate | what it is |
//! |-------|------------|
//! | `tollgate-doorman` | Google Doorman's capacity lease protocol: a server that divides each resource's capacity fairly between its clients, its master election, and a client that keeps leases fresh and enforces them with this limiter |
//! | `tollgate-quota` | square's quotaservice `Allow` service over [`TokenBucket`]s, its clients, and a cluster mode whose rates are Doorman leases |
//! | `tollgate-throttle` | a server-side throttler: per-key policies, costs, criticality, bans and a tower layer |
//! | `tollgate-service` | what those servers share: connection limits, drain, hot reload, etcd, TLS |
//! | `tollgate-cli` | the `tollgate` command |
//!
//! tollgate is not on crates.io yet: depend on a clone by its path, or on
//! its git repository (the URL you cloned it from), until it is.
//!
//! ```toml
//! [dependencies]
//! # The limiter alone, from a clone beside your project:
//! tollgate = { path = "../tollgate/crates/core" }
//! # or from its git repository:
//! # tollgate = { git = "URL-YOU-CLONED" }
//! # A service that takes Doorman leases:
//! # tollgate-doorman = { path = "../tollgate/crates/doorman", default-features = false }
//! # Once published:
//! # tollgate = "0.1"
//! ```
//!
//! `--cfg tollgate_loom` switches the limiter's synchronisation to loom for
//! the models in `loom-tests/`.
#![deny(unsafe_op_in_unsafe_fn)]

mod clock;
mod limiter;
// The one switch between std's synchronisation and loom's.
mod sync;

#[cfg(any(target_os = "linux", target_os = "android"))]
pub use clock::CoarseClock;
pub use clock::{Clock, ManualClock, SystemClock};
pub use limiter::spec;
pub use limiter::token_bucket::{BucketSettings, Refusal, ReserveError, TokenBucket};
pub use limiter::{
    AcquireFuture, Interrupted, RateLimiter, RateLimiterBuilder, Stats, TimeoutError,
};
#[doc(no_inline)]
pub use spec::{RateSpec, SpecError};

/// The limiter's exact token arithmetic, for pools of one's own: the
/// throttler's token pools and GCRA keep their per-key state with it.
///
/// Time is counted in tokens, [`TOKENS_PER_OP`](pool::TOKENS_PER_OP) to
/// an op at every rate; a [`Meter`](pool::Meter) converts between
/// nanoseconds and tokens at one rate without losing a fraction, a
/// [`Sizing`](pool::Sizing) says how much a pool holds, and a
/// [`Pool`](pool::Pool) is its active level and backlog. The methods
/// called on every decision are `#[inline]`, so the crate boundary costs
/// nothing.
///
/// # Examples
///
/// ```
/// use tollgate::pool::{Meter, Pool, Sizing, TOKENS_PER_OP};
///
/// // 1000 ops per second, in nano-ops per second.
/// let meter = Meter::new(1_000 * 1_000_000_000);
/// let mut carry = 0;
/// // One millisecond is one op's worth of tokens.
/// assert_eq!(meter.tokens_for(1_000_000, &mut carry), u128::from(TOKENS_PER_OP));
/// assert_eq!(meter.nanos_for(u128::from(TOKENS_PER_OP)), 1_000_000);
///
/// // A pool with no burst above its active part, filled for 10 ms.
/// let sizing = Sizing::new(&meter, 1_000_000);
/// let mut pool = Pool::default();
/// let to_active = pool.fill(u128::from(10 * TOKENS_PER_OP), &sizing);
/// assert_eq!(u128::from(to_active) + pool.waiting, u128::from(10 * TOKENS_PER_OP));
/// ```
pub mod pool {
    pub use crate::limiter::pool::Pool;
    pub use crate::limiter::units::{Meter, Sizing, MAX_OPS_PER_ACQUIRE, TOKENS_PER_OP};
}
