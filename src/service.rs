//! What every tollgate server shares: the plumbing the Doorman lease
//! server, the quota server and the throttler use alike, in one home.
//!
//! * locks that keep serving after a panic under them (`locks.rs`);
//! * an error with its causes for log lines (`error_chain.rs`).
//!
//! Nothing here knows a product: the kit imports nothing from
//! [`doorman`](crate::doorman), [`quota`](crate::quota) or
//! [`throttle`](crate::throttle).

// Built for the configuration reloads that log it: doorman's server, quota,
// throttle.
#[cfg(any(
    feature = "server",
    feature = "quota",
    all(feature = "throttle", not(tollgate_loom))
))]
mod error_chain;
mod locks;

#[cfg(any(
    feature = "server",
    feature = "quota",
    all(feature = "throttle", not(tollgate_loom))
))]
pub(crate) use error_chain::ErrorChain;
pub(crate) use locks::{LockUnpoisoned, RwLockUnpoisoned};
