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
#[derive(Debug)]
pub struct RulesError {
    context: String,
    source: Option<Box<dyn Error + Send + Sync>>,
}

impl RulesError {
    pub(crate) fn new(
        context: impl Into<String>,
        source: impl Into<Box<dyn Error + Send + Sync>>,
    ) -> RulesError {
        RulesError {
            context: context.into(),
            source: Some(source.into()),
        }
    }
}

impl fmt::Display for RulesError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "invalid throttle rules: {}", self.context)
    }
}

impl Error for RulesError {
    fn source(&self) -> Option<&(dyn Error + 'static)> {
        self.source.as_deref().map(|e| e as &(dyn Error + 'static))
    }
}
