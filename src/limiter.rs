//! The token-pool rate limiter; `spec` holds its configuration.
pub(crate) mod spec;
