//! The domain types of a `ShouldRateLimit` call: the [`Request`] with its
//! [`Descriptor`]s, the [`Response`] with a [`DescriptorStatus`] each, and
//! the [`RequestError`] of a call refused outright. The wire's types (`pb`)
//! are turned into these at the edge (`grpc.rs`, `http.rs`).

use std::fmt;
use std::time::Duration;

use super::Unit;

/// A `ShouldRateLimit` request.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Request {
    /// The configuration domain.
    pub domain: String,
    /// The descriptors, each answered with one status in order.
    pub descriptors: Vec<Descriptor>,
    /// Hits each descriptor without its own `hits_addend` adds; 0 means 1.
    pub hits_addend: u32,
}

/// One request descriptor.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Descriptor {
    /// Its entries, `(key, value)`, in order.
    pub entries: Vec<(String, String)>,
    /// A limit that replaces the configuration's for it:
    /// `(requests_per_unit, unit)`, the unit as its wire number (0 is
    /// refused).
    pub limit: Option<(u32, i32)>,
    /// Hits it adds, when set (0: check only).
    pub hits_addend: Option<u64>,
}

impl Descriptor {
    /// A descriptor of `entries`, with no override and the request's hits.
    pub fn new<K: Into<String>, V: Into<String>>(
        entries: impl IntoIterator<Item = (K, V)>,
    ) -> Descriptor {
        Descriptor {
            entries: entries
                .into_iter()
                .map(|(k, v)| (k.into(), v.into()))
                .collect(),
            limit: None,
            hits_addend: None,
        }
    }
}

/// A status's or a response's verdict.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Code {
    /// Not limited.
    Ok,
    /// Over the limit.
    OverLimit,
}

/// The limit a status was decided by.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CurrentLimit {
    /// The rule's name (empty when unnamed, and for overrides).
    pub name: String,
    /// Its limit.
    pub requests_per_unit: u32,
    /// Its window.
    pub unit: Unit,
}

/// The answer for one descriptor.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DescriptorStatus {
    /// Its verdict.
    pub code: Code,
    /// The limit that decided it; `None` when no limit applies.
    pub current_limit: Option<CurrentLimit>,
    /// Requests left in the window (0 when over, or with no limit;
    /// `u32::MAX` when unlimited).
    pub limit_remaining: u32,
    /// Until the window resets; `None` when no limit applies.
    pub duration_until_reset: Option<Duration>,
}

impl DescriptorStatus {
    pub(crate) fn no_limit() -> DescriptorStatus {
        DescriptorStatus {
            code: Code::Ok,
            current_limit: None,
            limit_remaining: 0,
            duration_until_reset: None,
        }
    }
}

/// The answer to a [`Request`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Response {
    /// OVER_LIMIT when Envoy should refuse the request.
    pub overall_code: Code,
    /// One per request descriptor, in order.
    pub statuses: Vec<DescriptorStatus>,
    /// Headers for the downstream response (with
    /// [`RlsSettings::response_headers`](crate::RlsSettings::response_headers)).
    pub response_headers: Vec<(String, String)>,
}

/// Why a request was refused with a gRPC error rather than answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RequestError {
    /// The request names no domain.
    EmptyDomain,
    /// The request has no descriptors.
    NoDescriptors,
    /// No configuration has been loaded.
    NoConfig,
    /// Descriptor `index` overrides the limit with unit UNKNOWN or one
    /// past the enum.
    BadOverrideUnit {
        /// The descriptor's index.
        index: usize,
        /// The unit's wire number.
        unit: i32,
    },
    /// The service keeps its counters in Redis: asked through the
    /// blocking [`RateLimitService::should_rate_limit`](crate::RateLimitService::should_rate_limit) rather than
    /// [`RateLimitService::should_rate_limit_async`](crate::RateLimitService::should_rate_limit_async).
    NeedsAsync,
}

impl fmt::Display for RequestError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RequestError::EmptyDomain => f.write_str("rate limit domain must not be empty"),
            RequestError::NoDescriptors => {
                f.write_str("rate limit descriptor list must not be empty")
            }
            RequestError::NoConfig => f.write_str("no rate limit configuration loaded"),
            RequestError::BadOverrideUnit { index, unit } => write!(
                f,
                "descriptor {index}: the limit override's unit {unit} is not one of SECOND (1) to WEEK (7)"
            ),
            RequestError::NeedsAsync => f.write_str(
                "the counters are in a Redis store: ask through should_rate_limit_async",
            ),
        }
    }
}

impl std::error::Error for RequestError {}
