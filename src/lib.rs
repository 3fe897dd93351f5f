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
//! The limiter core ([`RateLimiter`], [`RateSpec`], [`TokenBucket`], the
//! clocks) is always built, on crossbeam-utils, quanta and libc alone. The
//! rest is opt-in; the default enables every feature, so build with
//! `--no-default-features` and name the ones you want:
//!
//! | feature    | what it builds |
//! |------------|----------------|
//! | `client`   | [`doorman::Client`]: the Doorman lease client, its limiters and tower layer |
//! | `server`   | [`doorman::Server`] and its config, debug port, metrics, hot reload and single-node election |
//! | `etcd`     | `doorman::EtcdElection`: master election on etcd v3 (implies `server`) |
//! | `simulate` | `doorman::simulate`: a server tree on a virtual clock (implies `client`, `server`; the only user of tokio's `test-util`), and [`plot`], the SVG charts it and `tollgate pace` draw |
//! | `quota`    | [`quota`]: the quotaservice Allow service and its clients; `quota::cluster` also needs `client` |
//! | `throttle` | [`throttle`]: the server-side throttler and its tower layer |
//! | `cli`      | the `tollgate` binary (implies `client`, `server`, `etcd`, `simulate`, `quota`) |
//!
//! [`doorman`] itself (the wire types, the lease store, the algorithms)
//! comes with either `client` or `server`.
//! [`service`] (what the servers share: connection limits, drain, TLS,
//! configuration watch, etcd) comes with any of them.
//!
//! tollgate is not on crates.io yet: depend on a clone by its path, or on
//! its git repository (the URL you cloned it from), until it is.
//!
//! ```toml
//! [dependencies]
//! # The limiter alone, from a clone beside your project:
//! tollgate = { path = "../tollgate", default-features = false }
//! # or from its git repository:
//! # tollgate = { git = "URL-YOU-CLONED", default-features = false }
//! # A service that takes Doorman leases:
//! # tollgate = { path = "../tollgate", default-features = false, features = ["client"] }
//! # Once published:
//! # tollgate = { version = "0.1", default-features = false }
//! ```
//!
//! `--cfg tollgate_loom` switches the limiter's synchronisation to loom for
//! the models in `loom-tests/`.
//!
// Links to modules a feature leaves out point at the table above.
#![cfg_attr(
    not(any(feature = "client", feature = "server")),
    doc = "[`doorman`]: #crate-features"
)]
#![cfg_attr(not(feature = "client"), doc = "[`doorman::Client`]: #crate-features")]
#![cfg_attr(not(feature = "server"), doc = "[`doorman::Server`]: #crate-features")]
#![cfg_attr(not(feature = "quota"), doc = "[`quota`]: #crate-features")]
#![cfg_attr(not(feature = "simulate"), doc = "[`plot`]: #crate-features")]
#![cfg_attr(
    any(not(feature = "throttle"), tollgate_loom),
    doc = "[`throttle`]: #crate-features"
)]
#![deny(unsafe_op_in_unsafe_fn)]

mod clock;
#[cfg(any(feature = "client", feature = "server"))]
pub mod doorman;
mod limiter;
// The SVG charts of the Doorman simulation and of `tollgate pace`.
#[cfg(feature = "simulate")]
pub mod plot;
#[cfg(feature = "quota")]
pub mod quota;
// The shared service kit: built for each of its users, doorman (client or
// server), quota and throttle.
#[cfg(any(
    feature = "client",
    feature = "server",
    feature = "quota",
    all(feature = "throttle", not(tollgate_loom))
))]
pub mod service;
mod sync;
#[cfg(all(feature = "throttle", not(tollgate_loom)))]
pub mod throttle;
// The throttler's keyed table alone, for its loom models.
#[cfg(tollgate_loom)]
#[doc(hidden)]
#[path = "throttle/store/loom_table.rs"]
pub mod throttle_table;

#[cfg(any(target_os = "linux", target_os = "android"))]
pub use clock::CoarseClock;
pub use clock::{Clock, ManualClock, SystemClock};
pub use limiter::spec;
pub use limiter::token_bucket::{BucketSettings, Refusal, ReserveError, TokenBucket};
pub use limiter::{AcquireFuture, RateLimiter, RateLimiterBuilder, Stats, TimeoutError};
#[doc(no_inline)]
pub use spec::{RateSpec, SpecError};

/// What tests and model checks read to account for every token: not part
/// of the API.
#[doc(hidden)]
pub mod accounting {
    pub use crate::limiter::Ledger;
}
