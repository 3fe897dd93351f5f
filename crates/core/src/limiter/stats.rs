//! The limiter's counters, as the public API reports them.

use std::time::Duration;

/// Counters of a limiter, taken at one moment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Stats {
    /// Ops admitted since the limiter was created (weighted: `acquire_n(5)`
    /// counts 5), in whole ops. Ops a thread takes ahead into its local
    /// budget count when taken (at most 64 per thread, at high rates).
    pub admitted: u64,
    /// Sum over admitted ops of how late each started (the backlog when it
    /// was admitted), integrated at fill granularity.
    pub total_wait: Duration,
    /// The backlog at the last fill: how late an op admitted now starts.
    pub backlog: Duration,
}

/// Every token the limiter has handed out or holds, for exact accounting
/// in tests and model checks: `filled - dropped == admitted + active +
/// waiting + in_flight`, where `admitted` is what ops took.
#[doc(hidden)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Ledger {
    /// Tokens ever added (measured time, start allowances, rescaling).
    pub filled: u128,
    /// Tokens discarded (backlog cap, restarts).
    pub dropped: u128,
    /// Tokens in the active pool (central plus slices).
    pub active: u128,
    /// Tokens in the waiting pool.
    pub waiting: u128,
    /// Tokens gathered by requests larger than the active pool, not yet admitted.
    pub in_flight: u128,
    /// Tokens one op costs.
    pub tokens_per_op: u64,
}
