//! [`Job`]: one limit of one descriptor to count, what the service plans
//! and what the in-memory tables or the Redis store (`shared.rs`) count.

use super::config::ConfiguredLimit;

/// One limit of one descriptor to count.
#[derive(Debug, Clone)]
pub(crate) struct Job<'a> {
    /// The descriptor's index in the request.
    pub(crate) desc: usize,
    pub(crate) rule: &'a ConfiguredLimit,
    /// The counter key (with the limit's slot when not the first).
    pub(crate) key: String,
    pub(crate) hits: u64,
}
