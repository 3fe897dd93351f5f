//! What a decision hands back besides a permit: a [`Rejection`] and why,
//! and the [`LimitStatus`] and [`Warning`]s a client is told of.

use std::error::Error;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

/// Why a request was rejected.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RejectionKind {
    /// Over a rule's hard limit.
    Limited,
    /// The key is banned.
    Banned,
    /// The admission queue is full.
    QueueFull,
    /// Evicted from the admission queue by a CRITICAL request.
    Evicted,
    /// The request's cost exceeds what a rule or the admission queue ever
    /// admits: no retry of it can succeed.
    CostTooHigh,
    /// The request has no usable key for a rule that rejects such requests
    /// ([`MissingKey::Reject`](crate::MissingKey::Reject)).
    NoKey,
}

/// A rejected request.
///
/// Per-key limits and bans map to HTTP 429 / gRPC `RESOURCE_EXHAUSTED`
/// (the client is over its quota); a full queue and an eviction map to
/// HTTP 503 / gRPC `UNAVAILABLE` (the server shed load; retrying elsewhere
/// or later is right). Each of those says when a retry may succeed. A cost
/// no rule or queue can ever admit maps to HTTP 413 / gRPC
/// `INVALID_ARGUMENT`, and a request without a key a rule requires to
/// HTTP 400 / gRPC `INVALID_ARGUMENT`; neither has a retry time: retrying
/// it unchanged never succeeds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rejection {
    kind: RejectionKind,
    rule: Option<Arc<str>>,
    retry_after: Option<Duration>,
    /// The request's cost and, for [`RejectionKind::CostTooHigh`], the most
    /// the rule or queue ever admits.
    cost: u64,
    most: u64,
    limits: Vec<LimitStatus>,
}

impl Rejection {
    /// Why it was rejected.
    pub fn kind(&self) -> RejectionKind {
        self.kind
    }

    /// The rule that rejected it, for limits and bans.
    pub fn rule(&self) -> Option<&str> {
        self.rule.as_deref()
    }

    /// When a retry may be admitted: always known for the kinds that map
    /// to 429 and 503; `None` for [`RejectionKind::CostTooHigh`] and
    /// [`RejectionKind::NoKey`] (never).
    /// With a clock that moves in steps of more than a nanosecond, it
    /// includes one step, for the clock to reach the time the limit names.
    pub fn retry_after(&self) -> Option<Duration> {
        self.retry_after
    }

    /// The HTTP status: 429, 503, 413 or 400.
    pub fn http_status(&self) -> axum::http::StatusCode {
        match self.kind {
            RejectionKind::Limited | RejectionKind::Banned => {
                axum::http::StatusCode::TOO_MANY_REQUESTS
            }
            RejectionKind::QueueFull | RejectionKind::Evicted => {
                axum::http::StatusCode::SERVICE_UNAVAILABLE
            }
            RejectionKind::CostTooHigh => axum::http::StatusCode::PAYLOAD_TOO_LARGE,
            RejectionKind::NoKey => axum::http::StatusCode::BAD_REQUEST,
        }
    }

    /// The gRPC status code: `RESOURCE_EXHAUSTED`, `UNAVAILABLE` or
    /// `INVALID_ARGUMENT`.
    pub fn grpc_code(&self) -> tonic::Code {
        match self.kind {
            RejectionKind::Limited | RejectionKind::Banned => tonic::Code::ResourceExhausted,
            RejectionKind::QueueFull | RejectionKind::Evicted => tonic::Code::Unavailable,
            RejectionKind::CostTooHigh | RejectionKind::NoKey => tonic::Code::InvalidArgument,
        }
    }

    /// The quotas and standings of the rules that decided the request,
    /// for those with headers on ([`Rule::ratelimit_headers`](crate::Rule::ratelimit_headers)). A rule
    /// that admitted the request before another refused it stands as
    /// after the refund: the refused request costs it nothing.
    pub fn limits(&self) -> &[LimitStatus] {
        &self.limits
    }

    pub(crate) fn new(
        kind: RejectionKind,
        rule: Option<Arc<str>>,
        retry_after: Option<Duration>,
    ) -> Self {
        Rejection {
            kind,
            rule,
            retry_after,
            cost: 0,
            most: 0,
            limits: Vec::new(),
        }
    }

    /// This rejection, telling the client of `limits`.
    pub(crate) fn with_limits(mut self, limits: Vec<LimitStatus>) -> Rejection {
        self.limits = limits;
        self
    }

    pub(crate) fn too_costly(rule: Option<Arc<str>>, cost: u64, most: u64) -> Rejection {
        Rejection {
            cost,
            most,
            ..Rejection::new(RejectionKind::CostTooHigh, rule, None)
        }
    }
}

impl fmt::Display for Rejection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let rule = self.rule.as_deref().unwrap_or("");
        match self.kind {
            RejectionKind::Limited => write!(f, "rate limited by rule \"{rule}\""),
            RejectionKind::Banned => write!(f, "banned by rule \"{rule}\""),
            RejectionKind::QueueFull => f.write_str("admission queue full"),
            RejectionKind::Evicted => {
                f.write_str("evicted from the admission queue by a critical request")
            }
            RejectionKind::NoKey => write!(f, "no key for rule \"{rule}\""),
            RejectionKind::CostTooHigh => match &self.rule {
                Some(rule) => write!(
                    f,
                    "cost {} exceeds the most rule \"{rule}\" ever admits ({})",
                    self.cost, self.most
                ),
                None => write!(
                    f,
                    "cost {} exceeds the admission queue's capacity ({})",
                    self.cost, self.most
                ),
            },
        }
    }
}

impl Error for Rejection {}

/// One rule's quota and where the request's key stands under it: the
/// `RateLimit-Policy` and `RateLimit` fields a client sees.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LimitStatus {
    /// The rule.
    pub rule: Arc<str>,
    /// The most cost the rule admits at once from a fresh key (`q`).
    pub quota: u64,
    /// The time the quota applies over (`w`): a window, or the time a
    /// bucket takes to refill its quota.
    pub window: Duration,
    /// What the key may still spend at once (`r`).
    pub remaining: u64,
    /// When the key holds its whole quota again if nothing arrives (`t`).
    pub reset: Duration,
}

/// A soft limit a request went over.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Warning {
    /// The rule whose soft limit was exceeded.
    pub rule: Arc<str>,
    /// The rule's hard quota (`RateLimit-Limit`).
    pub limit: u64,
    /// What the hard limit still admits at once (`RateLimit-Remaining`).
    pub remaining: u64,
}
