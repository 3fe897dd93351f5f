//! The throttler's error types: one per operation that can fail.

use std::error::Error;
use std::fmt;

/// A value that configures a rule was invalid: a limit's (a zero limit,
/// window or rate) or a trusted network's (see
/// [`Trust::networks`](super::Trust::networks)).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ValueError {
    invalid: Invalid,
}

/// Which value of a [`ValueError`], and why.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Invalid {
    Limit(&'static str),
    Network { network: String, why: &'static str },
}

impl ValueError {
    /// A limit's value: `what` says which and why.
    pub(crate) fn limit(what: &'static str) -> ValueError {
        ValueError {
            invalid: Invalid::Limit(what),
        }
    }

    /// A trusted network that does not parse.
    pub(crate) fn network(network: &str, why: &'static str) -> ValueError {
        ValueError {
            invalid: Invalid::Network {
                network: network.to_owned(),
                why,
            },
        }
    }
}

impl fmt::Display for ValueError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.invalid {
            Invalid::Limit(what) => write!(f, "invalid limit: {what}"),
            Invalid::Network { network, why } => {
                write!(f, "invalid trusted network \"{network}\": {why}")
            }
        }
    }
}

impl Error for ValueError {}

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
