//! The throttler's error types: one per operation that can fail.

use std::error::Error;
use std::fmt;

/// A limit's configuration was invalid (a zero limit, window or rate).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LimitError {
    what: &'static str,
}

impl LimitError {
    pub(crate) fn new(what: &'static str) -> LimitError {
        LimitError { what }
    }
}

impl fmt::Display for LimitError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "invalid limit: {}", self.what)
    }
}

impl Error for LimitError {}

/// Throttle rules could not be read from YAML.
///
/// Its message names where (the rule and field, or the YAML position) and
/// why, so it does not also chain its cause as a
/// [`source`](Error::source).
#[derive(Debug)]
pub struct RulesError {
    context: String,
    reason: Box<dyn Error + Send + Sync>,
}

impl RulesError {
    pub(crate) fn new(
        context: impl Into<String>,
        source: impl Into<Box<dyn Error + Send + Sync>>,
    ) -> RulesError {
        RulesError {
            context: context.into(),
            reason: source.into(),
        }
    }
}

impl fmt::Display for RulesError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "invalid throttle rules: {}: {}",
            self.context, self.reason
        )
    }
}

impl Error for RulesError {}

/// A trusted network could not be parsed (see
/// [`Trust::networks`](super::Trust::networks)).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TrustError {
    network: String,
    why: &'static str,
}

impl TrustError {
    pub(crate) fn new(network: &str, why: &'static str) -> TrustError {
        TrustError {
            network: network.to_owned(),
            why,
        }
    }
}

impl fmt::Display for TrustError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "invalid trusted network \"{}\": {}",
            self.network, self.why
        )
    }
}

impl Error for TrustError {}
