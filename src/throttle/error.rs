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
