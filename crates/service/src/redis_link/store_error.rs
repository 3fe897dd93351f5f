//! [`StoreError`]: what went wrong with a Redis store, the one error of the
//! throttler's, the quota service's and the rate limit service's stores.

use std::fmt;
use std::time::Duration;

/// What went wrong with a Redis store: its configuration, or Redis.
///
/// # Examples
///
/// ```
/// use tollgate_service::redis_link::StoreError;
///
/// let e = StoreError::Config("cannot parse \"redis//x\"".into());
/// assert!(e.is_config());
/// assert_eq!(e.to_string(), "invalid redis store: cannot parse \"redis//x\"");
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoreError {
    /// A URL, seed list or setting that cannot be used.
    Config(String),
    /// Something the store cannot keep (a limit, a rule's option), named.
    Unsupported(String),
    /// No connection: Redis cannot be reached, or is being reconnected.
    Unreachable(String),
    /// Redis answered with an error, or a script answered what it should not.
    Redis(String),
    /// No answer within the deadline.
    Deadline(Duration),
}

impl StoreError {
    /// Whether Redis did not answer in time.
    pub fn is_deadline(&self) -> bool {
        matches!(self, StoreError::Deadline(_))
    }

    /// Whether the configuration (a URL, a setting, a rule the store cannot
    /// keep) is at fault rather than Redis.
    pub fn is_config(&self) -> bool {
        matches!(self, StoreError::Config(_) | StoreError::Unsupported(_))
    }
}

impl fmt::Display for StoreError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StoreError::Config(m) => write!(f, "invalid redis store: {m}"),
            StoreError::Unsupported(m) => write!(f, "redis store: {m}"),
            StoreError::Unreachable(m) => write!(f, "redis unreachable: {m}"),
            StoreError::Redis(m) => write!(f, "redis error: {m}"),
            StoreError::Deadline(d) => write!(f, "redis: no answer within the deadline of {d:?}"),
        }
    }
}

impl std::error::Error for StoreError {}
